//! Silent renewals: the watchdog's renewal calls go on the tracking
//! connection (`pubsub/tracking.rs`), so that the client's own renewals do
//! not sound its removal alarms.
//!
//! Why: every renewal rewrites the held key (`PEXPIRE`), and Redis tells a
//! tracked key's modification by anyone, this client included, unless the
//! modifying connection is the tracking connection itself (`NOLOOP`). Sent
//! on a command connection, the renewals of 10 000 held locks had Redis
//! send 10 000 invalidations per period, each costing the client a check
//! and a new arming (measured: 9 400 `HSTRLEN` and 9 500 `PTTL` per period,
//! and a force unlock among them told 120 ms late, behind them). Sent on
//! the tracking connection, they are silent. A write leaves the key
//! untracked (for every connection), so the renewed keys are read again
//! (`PTTL`) in the same round trip, after the script: armed again, whatever
//! the server tracks of a script's own reads (Redis 7.0 tracks a script's
//! declared keys only, Valkey 8.1 every key it reads).
//!
//! Not this way, but on a command connection as before (and then heard as
//! a modification, checked, and armed again): renewals that ask for the
//! replicas' acknowledgement (the `WAIT` the sessions add), renewals while
//! no tracking connection is available, and those its node answers with an
//! error (a cluster slot that moved: the command path follows redirects).
//! Renewing is safe to repeat.

use redis::Value;

use crate::client::Inner;
use crate::pubsub::tracking::Armed;
use crate::store::eval::Call;

/// Sends `call` (a renewal script call) and a `PTTL` of each of `keys` on
/// the tracking connection of the node that serves `route`: the script's
/// reply, or `None` when it must go on a command connection instead.
pub(crate) fn renew_silently(inner: &Inner, route: &str, call: &Call<'_>, keys: &[&str]) -> Option<Value> {
    if inner.scripts.acks() || keys.is_empty() {
        return None;
    }
    let mut reply = send(inner, route, call.packed(false), keys)?;
    if matches!(&reply, Value::ServerError(e) if e.code() == "NOSCRIPT") {
        // Not cached there (flushed, a new server): by its source, which
        // caches it.
        reply = send(inner, route, call.packed(true), keys)?;
    }
    match reply {
        Value::ServerError(e) => {
            log::debug!("keyholder: a renewal on the tracking connection was refused: {e:?}");
            None
        }
        reply => Some(reply),
    }
}

/// One round trip: `CLIENT CACHING no` (the script's own reads are not
/// tracked: see `pubsub/tracking.rs` for what they cost on Redis 7.0), the
/// script call, then the `PTTL`s.
fn send(inner: &Inner, route: &str, script: Vec<u8>, keys: &[&str]) -> Option<Value> {
    let mut packed = redis::cmd("CLIENT").arg("CACHING").arg("no").get_packed_command();
    packed.extend_from_slice(&script);
    for key in keys {
        redis::cmd("PTTL").arg(*key).write_packed_command(&mut packed);
    }
    match inner.subscribers.call_tracked(route, &packed, 2 + keys.len()) {
        Ok((Armed::Unavailable, _)) => None,
        Ok((armed, replies)) => {
            if armed == Armed::Fresh {
                // A new tracking connection: what the old one armed is
                // not tracked any more.
                inner.foreign.rearm_all();
            }
            replies.into_iter().nth(1)
        }
        Err(e) => {
            log::debug!("keyholder: the tracking connection failed during a renewal: {e}");
            inner.foreign.rearm_all();
            None
        }
    }
}
