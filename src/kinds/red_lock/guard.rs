//! The RedLock guard: the masters' guards, the validity time, the tokens.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::kinds::lock::LockGuard;
use crate::kinds::multi_lock::LostSignals;

/// Proof that a [`RedLock`](crate::RedLock) is held by a quorum of its
/// masters.
///
/// Dropping it releases the lock on every master it holds (best effort,
/// errors logged); [`unlock`](RedLockGuard::unlock) does the same and
/// returns the first error. It stays on the thread that acquired it (see
/// [`ThreadOwnedHold`](crate::ThreadOwnedHold)): take the lock on the
/// thread that releases it, or ask that thread to release it over a
/// channel, as [`Guard`](crate::Guard) shows.
///
/// ```compile_fail,E0277
/// # fn demo(lock: keyholder::RedLock) -> Result<(), keyholder::Error> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `*const ThreadOwnedHold` cannot be sent between threads
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock will immediately unlock"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct RedLockGuard {
    /// (master index, guard), in asking order.
    held: Vec<(usize, LockGuard)>,
    masters: usize,
    quorum: usize,
    valid_until: Instant,
    token: Option<u64>,
}

impl RedLockGuard {
    pub(crate) fn new(
        held: Vec<(usize, LockGuard)>,
        masters: usize,
        quorum: usize,
        valid_until: Instant,
        token: Option<u64>,
    ) -> Self {
        RedLockGuard { held, masters, quorum, valid_until, token }
    }

    /// The masters that granted the lock, as indexes into
    /// [`RedLock::locks`](crate::RedLock::locks).
    pub fn masters_held(&self) -> Vec<usize> {
        self.held.iter().map(|(index, _)| *index).collect()
    }

    /// How many masters must hold the lock: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How many masters the RedLock has (N).
    pub fn masters(&self) -> usize {
        self.masters
    }

    /// The end of the validity time computed at acquisition: the start of
    /// the attempt + lease − elapsed − drift (`lease × 0.01 + 2 ms`). With a
    /// fixed lease the RedLock is not held past it. With the watchdog lease
    /// each master's lock is renewed while held, and
    /// [`is_lost`](RedLockGuard::is_lost) tells whether a quorum still is.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// What is left of the validity time (zero once it ended).
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// The combined fencing token, for a [`fenced`](crate::RedLock::fenced)
    /// RedLock: the largest per-master token of this acquisition, which a
    /// quorum of masters confirmed by raising their counters to it; strictly
    /// larger for every later holder. Hand it to the protected storage,
    /// which must refuse a write whose token is below the highest it has
    /// accepted (`docs/redlock.md`). `None` for an unfenced RedLock.
    pub fn fencing_token(&self) -> Option<u64> {
        self.token
    }

    /// The per-master fencing tokens of this acquisition, as (master index,
    /// token), for a fenced RedLock; empty otherwise. Each master's counter
    /// is its own sequence: compare a token only with tokens of the same
    /// master.
    pub fn master_tokens(&self) -> Vec<(usize, u64)> {
        self.held.iter().filter_map(|(index, g)| g.fencing_token().map(|t| (*index, t))).collect()
    }

    /// True if the RedLock is known lost: fewer than a quorum of its
    /// masters' holds are intact, or (fixed lease) its validity time ended.
    /// No I/O.
    pub fn is_lost(&self) -> bool {
        let intact = self.held.iter().filter(|(_, g)| !g.is_lost()).count();
        intact < self.quorum || (self.is_fixed() && Instant::now() >= self.valid_until)
    }

    /// The loss of the RedLock as a whole, as one signal: reported at the
    /// loss of the master hold that leaves fewer than a quorum, or (fixed
    /// lease) when the validity time ends (`component: None`). Component
    /// indexes are positions in [`masters_held`](RedLockGuard::masters_held).
    pub fn lost_signal(&self) -> LostSignals {
        let spare = self.held.len().saturating_sub(self.quorum);
        let expires = self.is_fixed().then_some(self.valid_until);
        LostSignals::tolerating(self.held.iter().map(|(_, g)| g.lost_signal()), spare, expires)
    }

    /// Releases the lock on every master it holds, like dropping the guard,
    /// and returns the first error (every master is released whatever the
    /// others' outcome).
    ///
    /// # Errors
    ///
    /// The first error of a master's [`LockGuard::unlock`].
    pub fn unlock(mut self) -> Result<()> {
        let mut first: Option<Error> = None;
        for (_, guard) in std::mem::take(&mut self.held).into_iter().rev() {
            if let Err(e) = guard.unlock() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn is_fixed(&self) -> bool {
        self.held.first().is_some_and(|(_, g)| matches!(g.lease(), crate::Lease::Fixed(_)))
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        while let Some((_, guard)) = self.held.pop() {
            drop(guard);
        }
    }
}
