//! [`Client::list_locks`]: walking the keyspace with `SCAN` (on every
//! primary of a cluster) and keeping the keys `layout.rs` recognises as one
//! of keyholder's kinds, in pipelined batches.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;

use super::inspect::numsub_count;
use super::layout::{self, Classified, Companions, Holder, Listeners, LockKind, Observed, ReadWriteMode};
use super::{lease, lenient, send};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::store::lanes::Session;
use crate::store::routes::Routes;

/// One lock (or semaphore, or latch) found by [`Client::list_locks`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedLock {
    /// The name (its key).
    pub name: String,
    /// What sits there: never [`LockKind::Free`],
    /// [`LockKind::SemaphoreOrLatch`] or [`LockKind::Other`]; see
    /// [`Client::list_locks`].
    pub kind: LockKind,
    /// The owners and their hold counts (reentrant, fair and read-write
    /// locks; a read-write lock's writer has [`Holder::write`]).
    pub holders: Vec<Holder>,
    /// A read-write lock's mode.
    pub mode: Option<ReadWriteMode>,
    /// A semaphore's available permits, a latch's count.
    pub count: Option<i64>,
    /// The key's remaining time to live; `None` when it never expires.
    pub remaining_lease: Option<Duration>,
    /// On a Redis Cluster, the primary the key was found on (`host:port`).
    pub node: Option<String>,
}

/// The most hash fields a key may have to be looked at as a reentrant or
/// fair lock (one owner; Redisson and keyholder never write more).
const MAX_LOCK_FIELDS: i64 = 8;

/// The most fields of a read-write lock read (its readers and `mode`).
const MAX_RW_FIELDS: i64 = 10_000;

/// The longest string value read as a possible count or legacy token.
const MAX_STRING_LEN: i64 = 1024;

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: u32 = 1000;

impl Client {
    /// The locks whose names match `pattern` (a `SCAN ... MATCH` glob: `*`
    /// for all, `orders:*`), at most `limit` of them, sorted by name:
    ///
    /// - every held reentrant or fair lock (a hash of owner ids and hold
    ///   counts; fair when its queue holds someone) and every read-write
    ///   lock (a hash with a `mode` field);
    /// - every semaphore, permit-expirable semaphore and count-down latch
    ///   that Redis can tell apart: one with held permits
    ///   (`{name}:timeout`), or that a client waits on. A semaphore or
    ///   latch nobody waits on is a bare number at its name, which nothing
    ///   tells from any other counter: it is not listed
    ///   ([`Client::inspect`] shows it);
    /// - for a client in migration mode, every string key with a TTL that
    ///   is none of these (a hand-rolled lock).
    ///
    /// The keys the kinds keep beside a name (fencing counters, queues,
    /// markers, grants, unlock latches, a read-write lock's read hold
    /// timeouts `...:rwlock_timeout:N`) are never listed.
    ///
    /// Walks the keyspace with `SCAN` (never `KEYS`, which would block the
    /// server), on a Redis Cluster on every primary, and looks at the keys
    /// it finds in pipelined batches (`TYPE`, `HLEN`, `HEXISTS`, `STRLEN`,
    /// then `HGETALL` or `GET`, `PTTL`, `EXISTS` of the queues and
    /// `PUBSUB` of the channels of the candidates): many round trips on a
    /// big keyspace, each of them short. As with any `SCAN`, a lock taken
    /// or released meanwhile may or may not be listed. Changes nothing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for an empty pattern or a zero limit; a Redis or connection failure.
    pub fn list_locks(&self, pattern: &str, limit: usize) -> Result<Vec<ListedLock>> {
        let inner = self.inner();
        inner.check_running()?;
        if pattern.is_empty() {
            return Err(Error::invalid_argument("the pattern is empty: use * for every key"));
        }
        if limit == 0 {
            return Err(Error::invalid_argument("the limit is 0"));
        }
        let scan = Scan {
            pattern,
            limit,
            legacy: inner.config.migration_mode,
            numsub: if inner.scripts.sharded() { "SHARDNUMSUB" } else { "NUMSUB" },
        };
        let mut found = Vec::new();
        match inner.routes() {
            Routes::Primary(_) => {
                let mut session = inner.routes().session(pattern)?;
                scan.node(&mut session, None, &mut found)?;
            }
            Routes::Cluster(cluster) => {
                let mut shards = cluster.shards();
                shards.sort_by(|a, b| a.addr.cmp(&b.addr));
                for shard in shards {
                    if found.len() >= limit {
                        break;
                    }
                    let node = format!("{}:{}", shard.addr.0, shard.addr.1);
                    let mut session = shard.session()?;
                    scan.node(&mut session, Some(node), &mut found)?;
                }
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found.truncate(limit);
        Ok(found)
    }
}

/// One listing's settings.
struct Scan<'a> {
    pattern: &'a str,
    limit: usize,
    /// Migration mode: strings with a TTL are hand-rolled locks.
    legacy: bool,
    numsub: &'static str,
}

/// A key worth a second look, and how.
struct Candidate<'a> {
    key: &'a str,
    redis_type: &'static str,
}

/// Commands per candidate in the second batch.
const DETAILS: usize = 9;

impl Scan<'_> {
    /// Scans one node's keys, adding the locks among them to `found` until
    /// it has `limit`.
    fn node(
        &self,
        session: &mut Session<'_>,
        node: Option<String>,
        found: &mut Vec<ListedLock>,
    ) -> Result<()> {
        let mut cursor = String::from("0");
        loop {
            let scan = redis::cmd("SCAN")
                .arg(&cursor)
                .arg("MATCH")
                .arg(self.pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .clone();
            let (next, keys): (String, Vec<String>) = session.query(&scan)?.map_err(Error::redis)?;
            let keys: Vec<String> = keys.into_iter().filter(|key| !layout::is_internal_key(key)).collect();
            self.look_at(session, &node, &keys, found)?;
            if next == "0" || found.len() >= self.limit {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Adds the locks among `keys` to `found`: two pipelined round trips.
    fn look_at(
        &self,
        session: &mut Session<'_>,
        node: &Option<String>,
        keys: &[String],
        found: &mut Vec<ListedLock>,
    ) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let first: Vec<redis::Cmd> = keys
            .iter()
            .flat_map(|key| {
                [
                    redis::cmd("TYPE").arg(key).clone(),
                    redis::cmd("HLEN").arg(key).clone(),
                    redis::cmd("HEXISTS").arg(key).arg("mode").clone(),
                    redis::cmd("STRLEN").arg(key).clone(),
                ]
            })
            .collect();
        let values = send(session, &first)?;
        let mut candidates = Vec::new();
        for (key, replies) in keys.iter().zip(values.chunks(4)) {
            let at = |i: usize| replies.get(i).cloned().and_then(lenient::<i64>);
            let redis_type: Option<String> = replies.first().cloned().and_then(lenient);
            let candidate = match redis_type.as_deref() {
                Some("hash") => {
                    let (fields, rw) = (at(1).unwrap_or(0), at(2) == Some(1));
                    let fits =
                        if rw { fields <= MAX_RW_FIELDS } else { (1..=MAX_LOCK_FIELDS).contains(&fields) };
                    fits.then_some("hash")
                }
                Some("string") => at(3).is_some_and(|len| len <= MAX_STRING_LEN).then_some("string"),
                _ => None,
            };
            if let Some(redis_type) = candidate {
                candidates.push(Candidate { key, redis_type });
            }
        }
        if candidates.is_empty() {
            return Ok(());
        }
        let details: Vec<redis::Cmd> = candidates
            .iter()
            .flat_map(|candidate| {
                let key = candidate.key;
                let keys = Companions::of(key);
                let read = if candidate.redis_type == "hash" { "HGETALL" } else { "GET" };
                [
                    redis::cmd(read).arg(key).clone(),
                    redis::cmd("PTTL").arg(key).clone(),
                    redis::cmd("EXISTS").arg(&keys.fair_queue).arg(&keys.fair_timeouts).clone(),
                    redis::cmd("EXISTS").arg(&keys.permits).clone(),
                    redis::cmd("EXISTS").arg(&keys.writers).clone(),
                    redis::cmd("PUBSUB").arg(self.numsub).arg(&keys.semaphore_channel).clone(),
                    redis::cmd("PUBSUB").arg(self.numsub).arg(&keys.latch_channel).clone(),
                    redis::cmd("PUBSUB").arg(self.numsub).arg(&keys.lock_channel).clone(),
                    redis::cmd("PUBSUB").arg(self.numsub).arg(&keys.rw_channel).clone(),
                ]
            })
            .collect();
        let values = send(session, &details)?;
        for (candidate, replies) in candidates.into_iter().zip(values.chunks(DETAILS)) {
            let reply = |i: usize| replies.get(i).cloned().unwrap_or(Value::Nil);
            let exists = |i: usize| lenient::<i64>(reply(i)).is_some_and(|n| n > 0);
            let pttl: i64 = lenient(reply(1)).unwrap_or(-2);
            let (fields, value): (Option<BTreeMap<String, String>>, Option<String>) =
                if candidate.redis_type == "hash" {
                    (lenient(reply(0)), None)
                } else {
                    (None, lenient(reply(0)))
                };
            let seen = Observed {
                redis_type: candidate.redis_type.to_owned(),
                pttl,
                fields,
                value,
                listeners: Listeners {
                    semaphore: numsub_count(reply(5)),
                    latch: numsub_count(reply(6)),
                    lock: numsub_count(reply(7)),
                    rw: numsub_count(reply(8)),
                },
                fair_queued: exists(2),
                permits_held: exists(3),
                writers_waiting: exists(4),
            };
            let Classified { kind, holders, mode, count } = layout::classify(&seen);
            let listed = match kind {
                LockKind::Reentrant | LockKind::Fair | LockKind::ReadWrite => true,
                LockKind::Semaphore | LockKind::PermitExpirableSemaphore | LockKind::CountDownLatch => true,
                // A string without a TTL is no lock a client could wait for.
                LockKind::Legacy => self.legacy && pttl > 0,
                _ => false,
            };
            if listed {
                found.push(ListedLock {
                    name: candidate.key.to_owned(),
                    kind,
                    holders,
                    mode,
                    count,
                    remaining_lease: lease(pttl),
                    node: node.clone(),
                });
            }
        }
        Ok(())
    }
}
