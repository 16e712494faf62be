//! [`Client::inspect`]: everything at and beside one name, in one pipelined
//! round trip of read-only commands on the node that serves it, read by
//! `layout.rs`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use super::layout::{self, Classified, Companions, Holder, Listeners, LockKind, Observed, ReadWriteMode};
use super::queues::{self, HeldPermit, Waiter};
use super::{lease, lenient, strict};
use crate::client::Client;
use crate::error::Result;
use crate::store::batch::Request;

/// What [`Client::inspect`] found at and beside one name.
///
/// The fields every kind has come first; the others are filled for the
/// kinds they belong to, and empty (or `None`) otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The name (its key).
    pub name: String,
    /// What sits at the name.
    pub kind: LockKind,
    /// The key's Redis type (`TYPE`): `none`, `hash`, `string`, ...
    pub redis_type: String,
    /// Who holds it, with their hold counts: a reentrant or fair lock's
    /// owner (Redisson and keyholder locks have one owner at a time); a
    /// read-write lock's readers, each with its count, and its writer
    /// ([`Holder::write`]).
    pub holders: Vec<Holder>,
    /// A read-write lock's mode.
    pub mode: Option<ReadWriteMode>,
    /// The number at the name: a semaphore's available permits (0 when it
    /// has no key), a count-down latch's count.
    pub count: Option<i64>,
    /// A permit-expirable semaphore's held permits, soonest to expire
    /// first.
    pub permits: Vec<HeldPermit>,
    /// A fair lock's queue, head first (`redisson_lock_queue:{name}`), each
    /// waiter with its deadline (`redisson_lock_timeout:{name}`).
    pub fair_queue: Vec<Waiter>,
    /// A read-write lock's waiting keyholder writers
    /// (`keyholder_rwlock_writers:{name}`), each with when its entry goes
    /// stale; while one is live, new keyholder readers wait.
    pub waiting_writers: Vec<Waiter>,
    /// A [`LockKind::Legacy`] lock's value: its holder's token.
    pub legacy_token: Option<String>,
    /// The key's remaining time to live (`PTTL`): the holder's lease;
    /// `None` when there is no key or it never expires.
    pub remaining_lease: Option<Duration>,
    /// The last fencing token minted for the name (Redisson's
    /// `redisson_lock_token:{name}` counter); `None` if no fenced handle
    /// ever took it, or the counter holds no number.
    pub fencing_token: Option<u64>,
    /// The channel the kind publishes on: a lock's unlock channel, a
    /// read-write lock's `redisson_rwlock:{name}`, a semaphore's
    /// `redisson_sc:{name}`, a latch's
    /// `redisson_countdownlatch__channel__{name}` (free and unknown names:
    /// the lock's).
    pub unlock_channel: String,
    /// Connections subscribed to that channel on the node serving the
    /// name (`PUBSUB NUMSUB`, or `PUBSUB SHARDNUMSUB` where messages go out
    /// on shard channels): every waiting keyholder client and Redisson
    /// instance counts once, however many of its threads wait. A keyholder
    /// client that holds a lock listens too (for a foreign unlock), and one
    /// that just released still listens for a moment. A fair lock's waiters
    /// each listen on a channel of their own, not counted here.
    pub subscribers: u64,
    /// The keyholder clients queued for a reentrant lock in arrival order
    /// (`keyholder_lock_queue:{name}`).
    pub queued_clients: Vec<String>,
    /// The client a release woke for its turn, while its claim lasts
    /// (`keyholder_lock_next:{name}`, 1 s); during a foreign turn, which
    /// keeps keyholder clients off the free lock for Redisson waiters,
    /// `~<server ms when the turn ends>:<client>`.
    pub next_claim: Option<String>,
    /// The server's clock when it answered, which the waiters' and
    /// permits' remaining times are measured from.
    pub server_time: Option<SystemTime>,
    /// On a Redis Cluster, the primary that serves the name's slot
    /// (`host:port`).
    pub node: Option<String>,
}

impl LockInfo {
    /// True when someone holds the lock: a reentrant, fair or read-write
    /// lock's owner, or a legacy string's holder. Semaphores and latches
    /// are never "locked".
    pub fn is_locked(&self) -> bool {
        match self.kind {
            LockKind::Legacy => true,
            kind if kind.is_lock() => !self.holders.is_empty(),
            _ => false,
        }
    }

    /// A read-write lock's write holder.
    pub fn writer(&self) -> Option<&Holder> {
        self.holders.iter().find(|h| h.write)
    }

    /// A read-write lock's read holders (every holder of the other kinds).
    pub fn readers(&self) -> impl Iterator<Item = &Holder> {
        self.holders.iter().filter(|h| !h.write)
    }
}

impl Client {
    /// What sits at `name` and who waits for it, whichever kind it is: the
    /// key's type and [`LockKind`], its holders and their hold counts (a
    /// read-write lock's mode, readers and writer), the remaining lease,
    /// a semaphore's permits (and a permit-expirable one's held permits
    /// with their expiries) or a latch's count, a fair lock's queue with
    /// each waiter's deadline, the last fencing token, the subscribers of
    /// the kind's channel and the keyholder clients queued for it.
    ///
    /// One round trip of read-only commands (`TYPE`, `PTTL`, `HGETALL`,
    /// `GET`, `PUBSUB`, `ZRANGE`, `LRANGE`, `HKEYS`, `TIME`) on the node
    /// that serves the name. Changes nothing. How the kinds are told apart,
    /// and where Redis cannot tell, is in docs/operations.md.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a name [`Client::lock`] refuses, or a Redis or connection
    /// failure.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> Result<(), keyholder::Error> {
    /// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
    /// let info = client.inspect("orders:42")?;
    /// for holder in &info.holders {
    ///     println!("{} holds it {} time(s), {:?} left", holder.owner, holder.count, info.remaining_lease);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, name: &str) -> Result<LockInfo> {
        let inner = self.inner();
        inner.check_running()?;
        inner.validate_name(name)?;
        let keys = Companions::of(name);
        let numsub = if inner.scripts.sharded() { "SHARDNUMSUB" } else { "NUMSUB" };
        let commands = [
            redis::cmd("TYPE").arg(name).clone(),
            redis::cmd("PTTL").arg(name).clone(),
            redis::cmd("HGETALL").arg(name).clone(),
            redis::cmd("GET").arg(name).clone(),
            redis::cmd("GET").arg(&keys.token).clone(),
            redis::cmd("PUBSUB").arg(numsub).arg(&keys.lock_channel).clone(),
            redis::cmd("PUBSUB").arg(numsub).arg(&keys.rw_channel).clone(),
            redis::cmd("PUBSUB").arg(numsub).arg(&keys.semaphore_channel).clone(),
            redis::cmd("PUBSUB").arg(numsub).arg(&keys.latch_channel).clone(),
            redis::cmd("ZRANGE").arg(&keys.queue).arg(0).arg(-1).clone(),
            redis::cmd("GET").arg(&keys.marker).clone(),
            redis::cmd("LRANGE").arg(&keys.fair_queue).arg(0).arg(-1).clone(),
            redis::cmd("ZRANGE").arg(&keys.fair_timeouts).arg(0).arg(-1).arg("WITHSCORES").clone(),
            redis::cmd("HKEYS").arg(&keys.fair_grants).clone(),
            redis::cmd("ZRANGE").arg(&keys.permits).arg(0).arg(-1).arg("WITHSCORES").clone(),
            redis::cmd("ZRANGE").arg(&keys.writers).arg(0).arg(-1).arg("WITHSCORES").clone(),
            redis::cmd("TIME").clone(),
        ];
        let refs: Vec<&redis::Cmd> = commands.iter().collect();
        let values =
            inner.with_live_conn(name, |session| Ok(session.send(Request::commands(&refs))?.values))?;
        let mut values = values.into_iter();
        let mut next = || values.next().unwrap_or(Value::Nil);
        let redis_type: String = strict(next(), name)?;
        let pttl: i64 = strict(next(), name)?;
        let fields: Option<BTreeMap<String, String>> = lenient(next());
        let value: Option<String> = lenient(next());
        let token: Option<String> = lenient(next());
        let count_of = |value: Value| numsub_count(value);
        let listeners = Listeners {
            lock: count_of(next()),
            rw: count_of(next()),
            semaphore: count_of(next()),
            latch: count_of(next()),
        };
        let queued: Option<Vec<String>> = lenient(next());
        let marker: Option<String> = lenient(next());
        let fair_queue: Vec<String> = lenient(next()).unwrap_or_default();
        let fair_deadlines: Vec<(String, f64)> = lenient(next()).unwrap_or_default();
        let fair_grants: Vec<String> = lenient(next()).unwrap_or_default();
        let permits: Vec<(Vec<u8>, f64)> = lenient(next()).unwrap_or_default();
        let writers: Vec<(String, f64)> = lenient(next()).unwrap_or_default();
        let now = lenient::<(u64, u64)>(next()).and_then(|(secs, micros)| {
            UNIX_EPOCH.checked_add(Duration::new(secs, 0) + Duration::from_micros(micros))
        });
        let seen = Observed {
            redis_type: redis_type.clone(),
            pttl,
            fields,
            value: value.clone(),
            listeners,
            fair_queued: !fair_queue.is_empty() || !fair_deadlines.is_empty(),
            permits_held: !permits.is_empty(),
            writers_waiting: !writers.is_empty(),
        };
        let Classified { kind, holders, mode, count } = layout::classify(&seen);
        let subscribers = match kind {
            LockKind::ReadWrite => listeners.rw,
            LockKind::Semaphore | LockKind::PermitExpirableSemaphore => listeners.semaphore,
            LockKind::CountDownLatch => listeners.latch,
            LockKind::SemaphoreOrLatch => listeners.semaphore + listeners.latch,
            _ => listeners.lock,
        };
        Ok(LockInfo {
            name: name.to_owned(),
            kind,
            redis_type,
            holders,
            mode,
            count,
            permits: queues::held_permits(permits, now),
            fair_queue: queues::fair_waiters(fair_queue, &fair_deadlines, &fair_grants, now),
            waiting_writers: queues::waiting_writers(writers, now),
            legacy_token: if kind == LockKind::Legacy { value } else { None },
            remaining_lease: lease(pttl),
            fencing_token: token.and_then(|token| token.parse().ok()),
            unlock_channel: keys.channel_of(kind).to_owned(),
            subscribers,
            queued_clients: queued.unwrap_or_default(),
            next_claim: marker,
            server_time: now,
            node: self.node_of(name),
        })
    }
}

/// A `PUBSUB NUMSUB` reply (`[channel, count]`) as its count.
pub(crate) fn numsub_count(value: Value) -> u64 {
    lenient::<Vec<Value>>(value)
        .and_then(|pair| pair.into_iter().nth(1))
        .and_then(lenient::<u64>)
        .unwrap_or(0)
}
