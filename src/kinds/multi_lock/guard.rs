//! The MultiLock guard: one guard per component, released together.

use crate::error::{Error, LostReason, Result};
use crate::kinds::family::{Guard, Kind};
use crate::kinds::lock::Reentrant;
use crate::kinds::multi_lock::lost_signals::LostSignals;

/// Proof that a [`MultiLock`](crate::MultiLock) is held: one [`Guard`]
/// per component ([`LockGuard`](crate::LockGuard)s by default), in
/// acquisition order.
///
/// Dropping it releases every component, last-acquired first (best effort,
/// errors logged); [`unlock`](MultiLockGuard::unlock) does the same and
/// returns the first error. Like its components' guards, it stays on the thread
/// that acquired it (see [`ThreadOwnedHold`](crate::ThreadOwnedHold)): take
/// the locks on the thread that releases them, or ask that thread to
/// release them over a channel, as [`Guard`] shows.
///
/// ```compile_fail,E0277
/// # fn demo(locks: keyholder::MultiLock) -> Result<(), keyholder::Error> {
/// let guard = locks.lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `*const ThreadOwnedHold` cannot be sent between threads
/// # Ok(()) }
/// ```
#[must_use = "if unused the locks will immediately unlock"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard<K: Kind = Reentrant> {
    guards: Vec<Guard<K>>,
}

impl<K: Kind> std::fmt::Debug for MultiLockGuard<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard").field("guards", &self.guards).finish()
    }
}

impl<K: Kind> MultiLockGuard<K> {
    pub(crate) fn new(guards: Vec<Guard<K>>) -> Self {
        MultiLockGuard { guards }
    }

    /// The components' guards, in acquisition order (that of
    /// [`MultiLock::locks`](crate::MultiLock::locks)).
    pub fn guards(&self) -> &[Guard<K>] {
        &self.guards
    }

    /// True if any component's hold is known lost (see
    /// [`Guard::is_lost`]). No I/O.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(Guard::is_lost)
    }

    /// The first component known lost and why, if any. No I/O.
    pub fn lost_reason(&self) -> Option<(usize, LostReason)> {
        self.guards.iter().enumerate().find_map(|(i, g)| g.lost_reason().map(|r| (i, r)))
    }

    /// The components' lost-hold signals as one: a receive reports the
    /// first component known lost (its index in
    /// [`guards`](MultiLockGuard::guards)) and why; the MultiLock is no
    /// longer held as a whole from then on.
    pub fn lost_signal(&self) -> LostSignals {
        LostSignals::of(self.guards.iter().map(Guard::lost_signal))
    }

    /// Releases every component, last-acquired first, like dropping the
    /// guard, and returns the first error. Every component is released
    /// whatever the others' outcome.
    ///
    /// # Errors
    ///
    /// The first error of a component's [`Guard::unlock`]
    /// ([`ErrorKind::LockLost`](crate::ErrorKind::LockLost) for a component
    /// whose hold was lost, a Redis failure, ...).
    pub fn unlock(mut self) -> Result<()> {
        let mut first: Option<Error> = None;
        for guard in std::mem::take(&mut self.guards).into_iter().rev() {
            if let Err(e) = guard.unlock() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl<K: Kind> Drop for MultiLockGuard<K> {
    fn drop(&mut self) {
        // Last-acquired first; each guard logs its own failure.
        while let Some(guard) = self.guards.pop() {
            drop(guard);
        }
    }
}
