//! The measured functions: one operation each, nothing else. callgrind
//! counts inside them alone (`--toggle-collect` takes their symbol names,
//! [`PAIR`] and the rest), so they live in a leaf of their own that both
//! the paths (`paths.rs`) and the hand-off (`handoff.rs`) call; and the
//! client set-up every path shares ([`one_lane`]).

use std::time::Duration;

use keyholder::{Lock, LockGuard};

/// The symbol callgrind counts in, for each measured function.
pub(crate) const PAIR: &str = "counts::measured::measured_pair";
pub(crate) const ACQUIRE: &str = "counts::measured::measured_acquire";
pub(crate) const RELEASE: &str = "counts::measured::measured_release";
pub(crate) const WAIT: &str = "counts::measured::measured_wait";

#[inline(never)]
pub(crate) fn measured_pair(lock: &Lock) -> keyholder::Result<()> {
    lock.lock()?.unlock()
}

#[inline(never)]
pub(crate) fn measured_acquire(lock: &Lock) -> keyholder::Result<LockGuard> {
    lock.lock()
}

#[inline(never)]
pub(crate) fn measured_release(guard: LockGuard) -> keyholder::Result<()> {
    guard.unlock()
}

/// A contended acquisition, bounded (a body unlike [`measured_acquire`]'s,
/// so that the two are never merged into one symbol).
#[inline(never)]
pub(crate) fn measured_wait(lock: &Lock) -> keyholder::Result<Option<LockGuard>> {
    lock.try_lock_for(WAIT_LIMIT)
}

/// The longest a waiter waits for its hand-off.
const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// One command connection, so one lane. With the default 15, a call goes
/// first to its thread's home lane (the thread's keyholder number modulo
/// 15), and when that lane has no connection of its own (the first one
/// goes to lane 0) it looks through the others, every call: 260
/// instructions more, in some processes and not others, since a thread's
/// number follows the order in which threads first call into keyholder,
/// a race between the caller and the client's own threads. With one lane
/// every thread is at home, as a thread whose home lane is connected is
/// with the default.
pub(crate) fn one_lane(builder: keyholder::ClientBuilder) -> keyholder::ClientBuilder {
    builder.pool_max_size(1)
}
