//! Removal alarms: Redis's client-side caching invalidations, redirected
//! to the pub/sub connection, tell the client that a held lock's key was
//! removed or rewritten by anyone, by any means.
//!
//! Why: a force unlock publishes on the lock's unlock channel only for the
//! reentrant and read-write locks; a fair lock's goes to its head waiter's
//! channel, a spin lock's nowhere, and an operator's `DEL`, an expiry or an
//! eviction publish nothing at all. Redis 6+ (and Valkey) track, per
//! connection with `CLIENT TRACKING ON`, the keys that connection read, and
//! send one invalidation for each such key at its next modification by
//! anyone: a write, a delete, an expiry, an eviction, a `FLUSHDB` (an
//! invalidation without keys). So one connection per node, the tracking
//! connection, reads the key of each hold worth watching (`PTTL`, many
//! per round trip: "arming" it), with its invalidations redirected
//! (`REDIRECT <client id>`) to that node's pub/sub connection, which
//! subscribes to `__redis__:invalidate` (RESP2) and hands each
//! invalidation to the client's holders (`holds/foreign.rs`), which check
//! the holds of that key, and arm it again (an invalidated key is not
//! tracked until read again).
//!
//! Tracking is `OPTOUT`: every read is tracked but for the command after a
//! `CLIENT CACHING no`, which the renewals send before their script
//! (`kinds/family/silent.rs`): Redis 7.0 has each read inside a script
//! remember every key the script declares, which made a renewal of 100
//! locks 5 times dearer (100 ms of Redis CPU per 10 000 locks instead of
//! 21); `OPTOUT` with `CACHING no` brings it to 33 ms, the `PTTL`s that
//! arm the keys again included.
//!
//! Facts this relies on, checked on Redis 7.0 and Valkey 8.1 (the tests in
//! `tests/suite/key_removed.rs` keep them checked): keys are tracked by name
//! whatever the database; a read of a missing key arms it too (its
//! creation is told); `NOLOOP` silences the tracking connection's own
//! writes (it makes none); tracking ends with the tracking connection, and
//! invalidations for a redirect client that is gone are dropped, so a new
//! pub/sub connection (a new client id) or a new tracking connection needs
//! every hold armed again: [`Tracking::arm`] says so ([`Armed::Fresh`]).
//!
//! Nothing here is on the acquire or release path: the holders arm a hold
//! only once it is old enough (`holds/foreign.rs`, `LISTEN_AFTER`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::Value;

use crate::error::{Error, Result};
use crate::net::commands::{write_commands, write_packed};
use crate::pubsub::push::refusal_text;
use crate::pubsub::target::{Incoming, Target};

/// The channel Redis sends invalidations on (RESP2 redirection).
pub(crate) const INVALIDATE_CHANNEL: &str = "__redis__:invalidate";

/// Keys armed per write on the tracking connection.
const ARM_BATCH: usize = 500;

/// What [`Tracking::arm`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Armed {
    /// The keys are armed, on the connection that armed the earlier ones.
    Same,
    /// The keys are armed on a new tracking connection, or for a new
    /// pub/sub connection: keys armed before are not tracked any more.
    Fresh,
    /// Not armed: the pub/sub connection is not subscribed to
    /// invalidations yet (arming again when it is: see
    /// [`Tracking::ready`]), or the server refused tracking (Redis before
    /// 6, an ACL user denied `CLIENT`).
    Unavailable,
}

/// Where invalidations go: the pub/sub connection subscribed to them.
#[derive(Clone)]
struct Redirect {
    client_id: i64,
    target: Target,
    /// Counts redirects, so that the tracking connection knows its own is
    /// past.
    epoch: u64,
}

#[derive(Default)]
struct Redirects {
    /// `CLIENT ID`'s reply on the current pub/sub connection, before its
    /// subscription to [`INVALIDATE_CHANNEL`] is confirmed.
    pending_id: Option<i64>,
    current: Option<Redirect>,
    epochs: u64,
    /// The epoch whose `CLIENT TRACKING` the server refused.
    refused: Option<u64>,
    /// Shut down: no new redirect, no new connection.
    closed: bool,
}

/// An open tracking connection.
struct Open {
    incoming: Incoming,
    writer: crate::net::stream::Stream,
    epoch: u64,
}

/// One node's tracking connection, redirecting to that node's pub/sub
/// connection.
pub(crate) struct Tracking {
    /// Touched by the pub/sub reader: never held across I/O.
    redirects: Mutex<Redirects>,
    /// Held across a round trip (the holders' thread arms, the watchdog
    /// renews).
    open: Mutex<Option<Open>>,
    /// A tracking connection was opened before: a new one is
    /// [`Armed::Fresh`] (the first one has nothing to arm again).
    opened: AtomicBool,
    connect_timeout: Duration,
    command_timeout: Duration,
}

impl std::fmt::Debug for Tracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redirects = self.redirects.lock();
        f.debug_struct("Tracking")
            .field("redirect", &redirects.current.as_ref().map(|r| r.client_id))
            .finish_non_exhaustive()
    }
}

impl Tracking {
    pub(crate) fn new(connect_timeout: Duration, command_timeout: Duration) -> Self {
        Tracking {
            redirects: Mutex::new(Redirects::default()),
            open: Mutex::new(None),
            opened: AtomicBool::new(false),
            connect_timeout,
            command_timeout,
        }
    }

    /// The commands a new pub/sub connection sends first: its id (for the
    /// redirection), then the subscription to invalidations (a plain
    /// `SUBSCRIBE`, on a cluster too: invalidations are not shard
    /// messages).
    pub(crate) fn greeting() -> [redis::Cmd; 2] {
        [redis::cmd("CLIENT").arg("ID").clone(), redis::cmd("SUBSCRIBE").arg(INVALIDATE_CHANNEL).clone()]
    }

    /// The pub/sub connection's `CLIENT ID` reply.
    pub(crate) fn client_id(&self, id: i64) {
        self.redirects.lock().pending_id = Some(id);
    }

    /// The pub/sub connection to `target` is subscribed to invalidations:
    /// they go there from now on. Keys armed before are not tracked for it.
    pub(crate) fn ready(&self, target: Target) {
        let mut redirects = self.redirects.lock();
        let Some(client_id) = redirects.pending_id.take() else { return };
        if redirects.closed {
            return;
        }
        redirects.epochs += 1;
        let epoch = redirects.epochs;
        redirects.current = Some(Redirect { client_id, target, epoch });
    }

    /// The pub/sub connection is gone: invalidations would be dropped.
    pub(crate) fn lost(&self) {
        let mut redirects = self.redirects.lock();
        redirects.pending_id = None;
        redirects.current = None;
    }

    /// Closes the tracking connection for good (the client shuts down):
    /// nothing is armed or sent from now on.
    pub(crate) fn close(&self) {
        {
            let mut redirects = self.redirects.lock();
            redirects.closed = true;
            redirects.current = None;
        }
        if let Some(old) = self.open.lock().take() {
            old.writer.shutdown();
        }
    }

    /// Reads each of `keys` on the tracking connection, which has the
    /// server tell the pub/sub connection of each one's next modification;
    /// opens the connection (and turns tracking on) first when needed. Err
    /// when the tracking connection failed (dropped: the next call opens
    /// another, [`Armed::Fresh`]). With [`Armed::Same`] and
    /// [`Armed::Fresh`], each key's `PTTL` in order (see [`read_keys`]).
    pub(crate) fn arm(&self, keys: &[Arc<str>]) -> Result<(Armed, Vec<i64>)> {
        self.on_connection(|conn| read_keys(conn, keys))
    }

    /// Sends `packed` (commands that get `replies` replies) on the tracking
    /// connection and returns the replies: what it writes is silent to this
    /// client's alarms (`NOLOOP`), and what it reads is armed. The
    /// renewals go this way (`kinds/family/silent.rs`), so that the
    /// client's own renewals do not sound its alarms every period.
    pub(crate) fn call(&self, packed: &[u8], replies: usize) -> Result<(Armed, Vec<Value>)> {
        self.on_connection(|conn| {
            write_packed(&mut conn.writer, packed).map_err(|e| Error::redis(e.into()))?;
            (0..replies).map(|_| conn.incoming.next().map_err(Error::redis)).collect()
        })
    }

    /// Runs `io` on the tracking connection, opened (and tracking turned
    /// on) first when there is none for the current redirect. Nothing runs
    /// while invalidations cannot be redirected ([`Armed::Unavailable`]).
    fn on_connection<T: Default>(&self, io: impl FnOnce(&mut Open) -> Result<T>) -> Result<(Armed, T)> {
        let redirect = {
            let redirects = self.redirects.lock();
            match &redirects.current {
                Some(r) if redirects.refused != Some(r.epoch) => r.clone(),
                _ => return Ok((Armed::Unavailable, T::default())),
            }
        };
        let mut open = self.open.lock();
        let new = open.as_ref().is_none_or(|o| o.epoch != redirect.epoch);
        let mut fresh = false;
        if new {
            if let Some(old) = open.take() {
                old.writer.shutdown();
            }
            match self.turn_on(&redirect)? {
                Some(opened) => {
                    *open = Some(opened);
                    fresh = self.opened.swap(true, Ordering::AcqRel);
                }
                None => {
                    self.redirects.lock().refused = Some(redirect.epoch);
                    return Ok((Armed::Unavailable, T::default()));
                }
            }
        }
        let Some(conn) = open.as_mut() else { return Ok((Armed::Unavailable, T::default())) };
        match io(conn) {
            Ok(done) => Ok((if fresh { Armed::Fresh } else { Armed::Same }, done)),
            Err(e) => {
                // Its replies are out of step, or it is dead: the next
                // call opens another (and every key is armed again).
                if let Some(old) = open.take() {
                    old.writer.shutdown();
                }
                Err(e)
            }
        }
    }

    /// Opens a tracking connection redirecting to `redirect`; `None` when
    /// the server refuses tracking.
    fn turn_on(&self, redirect: &Redirect) -> Result<Option<Open>> {
        let target = redirect.target.for_tracking();
        let (mut incoming, mut writer) =
            target.open_in_database(self.connect_timeout, self.command_timeout).map_err(Error::redis)?;
        let on = redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .arg("REDIRECT")
            .arg(redirect.client_id)
            .arg("NOLOOP")
            .arg("OPTOUT")
            .clone();
        write_commands(&mut writer, &[on]).map_err(|e| Error::redis(e.into()))?;
        match incoming.next().map_err(Error::redis)? {
            Value::ServerError(refusal) => {
                // Redis before 6 does not know it; an ACL may deny it; the
                // pub/sub connection may have gone meanwhile (then a new
                // one redirects again).
                log::debug!(
                    "keyholder: no removal alarms on {}: CLIENT TRACKING refused: {}",
                    redirect.target.describe(),
                    refusal_text(&refusal)
                );
                writer.shutdown();
                Ok(None)
            }
            _ => Ok(Some(Open { incoming, writer, epoch: redirect.epoch })),
        }
    }
}

/// `PTTL` of each key, [`ARM_BATCH`] per write: reading arms the key; the
/// replies (milliseconds to live, -1 without a TTL, -2 missing, -3 for any
/// other reply) tell when a key someone shortened ends (an expiry is told
/// when Redis deletes the key, which for a key nobody reads may be a
/// hundred milliseconds later or more).
fn read_keys(conn: &mut Open, keys: &[Arc<str>]) -> Result<Vec<i64>> {
    let mut ttls = Vec::with_capacity(keys.len());
    for batch in keys.chunks(ARM_BATCH) {
        let cmds: Vec<redis::Cmd> = batch.iter().map(|k| redis::cmd("PTTL").arg(&**k).clone()).collect();
        write_commands(&mut conn.writer, &cmds).map_err(|e| Error::redis(e.into()))?;
        for _ in batch {
            match conn.incoming.next().map_err(Error::redis)? {
                Value::Int(ttl) => ttls.push(ttl),
                _ => ttls.push(-3),
            }
        }
    }
    Ok(ttls)
}

/// The keys an invalidation names: `Some(keys)`, or `None` for every key
/// (a `FLUSHDB` or `FLUSHALL`). `data` is a `message` push's data after its
/// kind: the channel, then the payload. Not an invalidation: `Err(())`.
#[allow(clippy::result_unit_err)]
pub(crate) fn invalidation(data: &[Value]) -> std::result::Result<Option<Vec<String>>, ()> {
    let [Value::BulkString(channel), payload] = data else { return Err(()) };
    if channel.as_slice() != INVALIDATE_CHANNEL.as_bytes() {
        return Err(());
    }
    match payload {
        Value::Nil => Ok(None),
        Value::Array(keys) | Value::Set(keys) => Ok(Some(
            keys.iter()
                .filter_map(|k| match k {
                    Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                    Value::SimpleString(text) => Some(text.clone()),
                    _ => None,
                })
                .collect(),
        )),
        // A key name sent as a single bulk string (never seen, but cheap).
        Value::BulkString(key) => Ok(Some(vec![String::from_utf8_lossy(key).into_owned()])),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn invalidations_name_their_keys_or_every_key() {
        let keys = [bulk(INVALIDATE_CHANNEL), Value::Array(vec![bulk("a"), bulk("b")])];
        assert_eq!(invalidation(&keys), Ok(Some(vec!["a".to_owned(), "b".to_owned()])));
        assert_eq!(invalidation(&[bulk(INVALIDATE_CHANNEL), Value::Nil]), Ok(None), "FLUSHDB: every key");
        assert_eq!(invalidation(&[bulk("redisson_lock__channel:{a}"), bulk("0")]), Err(()));
        assert_eq!(invalidation(&[bulk(INVALIDATE_CHANNEL)]), Err(()));
    }
}
