//! The lock implementations the workloads compare, behind one trait, so
//! that each workload is written once:
//!
//! * [`MinimalFloor`]: the minimal scripts that carry Redisson's semantics
//!   (SPEC section 2) called on a plain redis-rs connection, with no
//!   library logic: the physical floor, the denominator of every "vs floor"
//!   ratio and target. It never waits (a held lock is an error), so it runs
//!   only where nothing contends; the contended workloads' floor is the
//!   *ideal* `1 / (hold + one handoff)`, one handoff being its pair time.
//! * [`ScriptFloor`]: the library's own `lua/lock/acquire.lua` and
//!   `lua/lock/release.lua`, run the same way (`keyholder scripts` in the
//!   tables): its gap to the minimal floor is the cost of their extra work.
//! * [`Baseline`]: the hand-rolled lock users replace: `SET key token NX PX
//!   30000`, on failure sleep 10 ms and retry; release with the Lua
//!   compare-and-delete. One connection per thread.
//! * [`Keyholder`] with its defaults (watchdog lease, pub/sub waiting), over
//!   one or more clients.
//! * [`Redisson`]: what Java Redisson 4 `RLock` users run, on the wire: its
//!   acquire script, its pub/sub waiting loop (one reference-counted
//!   subscription per lock per client, a semaphore per lock that unlock
//!   messages release) and its release with the unlock latch and the latch's
//!   `DEL` after it; a connection per thread, a pub/sub connection per
//!   client, over one or more clients.
//!
//! A workload asks an implementation for a [`Session`] per thread, and takes
//! and releases locks by name through it.

mod baseline;
mod keyholder;
mod minimal_floor;
mod redisson;
mod script_floor;

pub(crate) use baseline::Baseline;
pub(crate) use keyholder::Keyholder;
pub(crate) use minimal_floor::MinimalFloor;
pub(crate) use redisson::Redisson;
#[cfg(test)]
pub(crate) use redisson::SCRIPT_COMMANDS as REDISSON_SCRIPT_COMMANDS;
pub(crate) use script_floor::ScriptFloor;

use std::time::Duration;

use crate::error::Res;

/// The lease of the floors' and the baseline's locks, equal to keyholder's default
/// watchdog lease.
pub(crate) const LEASE_MS: u64 = 30_000;

/// Upper bound of any single acquisition in the bench (nothing waits
/// forever).
pub(crate) const ACQUIRE_LIMIT: Duration = Duration::from_secs(120);

/// Commands that keyholder's scripts (and so the `keyholder scripts` floor)
/// run inside EVALSHA
/// (acquire with the waiter queue, release with its unlock latch and the
/// queue, handoff, renew); keyholder sends none of them on its own in these
/// workloads but the HEXISTS the audit tells apart.
const LIBRARY_SCRIPT_COMMANDS: &[&str] = &[
    "exists",
    "hexists",
    "hincrby",
    "hset",
    "hdel",
    "hget",
    "hmget",
    "pexpire",
    "pexpireat",
    "pttl",
    "del",
    "publish",
    "spublish",
    "type",
    "get",
    "set",
    "incr",
    "zadd",
    "zrange",
    "zpopmin",
    "zrem",
    "zscore",
    "zcard",
    "zcount",
    "zremrangebyscore",
    "time",
    "pubsub|numsub",
    "pubsub|shardnumsub",
];

/// A lock implementation under measurement, shared by a workload's threads.
pub(crate) trait LockImpl: Sync {
    /// What one thread takes locks with.
    type Session: Session;

    /// A session for thread `index` of a workload (its owner id, its
    /// connection or its client). May connect; call it on that thread.
    fn session(&self, index: usize) -> Res<Self::Session>;

    /// The command `INFO commandstats` counts once per acquire attempt.
    fn attempt_command(&self) -> &'static str;

    /// The commands its scripts run inside Redis: not round trips.
    fn script_commands(&self) -> &'static [&'static str];

    /// Whether its waiters poll Redis. A polling herd's traffic would fill
    /// the slow log, so W3 does not audit it.
    fn polls(&self) -> bool {
        false
    }

    /// Readies `name` for a workload whose first acquisitions must not pay
    /// for connecting (keyholder: one acquisition per client, so each has a
    /// command connection open). Nothing by default.
    fn warm_up(&self, _name: &str) -> Res<()> {
        Ok(())
    }

    /// Whether the threads blocked in [`Session::acquire`] now wait in their
    /// steady state (keyholder: every client subscribed to the lock's
    /// channel). Pollers always are.
    fn waiters_settled(&self) -> bool {
        true
    }
}

/// One thread's way to take and release locks by name.
pub(crate) trait Session {
    /// A hold, as its release needs it.
    type Held;

    /// Takes `name`, waiting at most [`ACQUIRE_LIMIT`] (the floors do not
    /// wait): a lock not taken is an error.
    fn acquire(&mut self, name: &str) -> Res<Self::Held>;

    /// Releases one hold: the last one of a reentrant lock frees it.
    fn release(&mut self, held: Self::Held) -> Res<()>;

    /// One acquire+release pair on `name`.
    fn pair(&mut self, name: &str) -> Res<()> {
        let held = self.acquire(name)?;
        self.release(held)
    }

    /// Whether the implementation knows the hold was lost; `None` when it
    /// cannot tell.
    fn is_lost(&self, _held: &Self::Held) -> Option<bool> {
        None
    }
}
