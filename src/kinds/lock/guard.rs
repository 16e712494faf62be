//! The guard: proof of one acquisition, released on drop.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::client::Inner;
use crate::error::{LostReason, Result};
use crate::holds::hold::Hold;
use crate::lease::Lease;
use crate::wait::entry::Entry;

/// An RAII guard for one acquisition of a [`Lock`](crate::Lock).
///
/// Dropping the guard releases that acquisition (best effort: one script
/// call, bounded by the client's timeouts; an error is logged, never a
/// panic). [`unlock`](LockGuard::unlock) does the same and returns the error.
/// Write `let _guard = lock.lock()?;`, not `let _ = ...`, which would release
/// at once.
///
/// The owner of a Redisson-style lock is a thread, so a guard stays on the
/// thread that acquired it: it is neither `Send` nor `Sync`.
///
/// ```compile_fail
/// # fn demo(lock: keyholder::Lock) -> Result<(), keyholder::Error> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `LockGuard` cannot be sent between threads
/// # Ok(()) }
/// ```
///
/// A guard does not keep its client running: the watchdog renews a hold
/// while some [`Client`](crate::Client) or [`Lock`](crate::Lock) handle of
/// the client is alive (as Redisson renews while its client lives). Once the
/// last of them is dropped the client shuts down, renewal stops, and a guard
/// still held keeps only what is left of its lease; it can still release.
/// So keep a `Client` or `Lock` for as long as you hold its locks. A leaked
/// guard (`mem::forget`) leaves its acquisition held until then, and at
/// most one lease longer.
#[must_use = "if unused the lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    client: Arc<Inner>,
    hold: Arc<Hold>,
    /// The lock's local state in the client, which the release passes on.
    entry: Arc<Entry>,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("lease", &self.hold.lease)
            .field("lost", &self.lost_reason())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(client: Arc<Inner>, entry: Arc<Entry>, hold: Arc<Hold>) -> Self {
        LockGuard { client, hold, entry, released: false, _not_send: PhantomData }
    }

    /// How many guards the hold has (more than one after a re-entry).
    pub(crate) fn hold_guards(&self) -> u32 {
        self.hold.guards()
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The lease policy of the acquisition this guard's hold began with.
    pub fn lease(&self) -> Lease {
        self.hold.lease
    }

    /// The owner id written in Redis: `<client-uuid>:<thread-id>`.
    pub fn owner_id(&self) -> &str {
        &self.hold.owner
    }

    /// The fencing token of this hold, for locks made with
    /// [`Lock::fenced`](crate::Lock::fenced): strictly larger than any token
    /// of an earlier fresh acquisition of the lock. Re-entrant guards share
    /// their hold's token. `None` for unfenced locks.
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.token()
    }

    /// A channel that receives the [`LostReason`] once, the moment this
    /// client learns the hold is lost: a renewal refused, the lease deadline
    /// passed without renewal (noticed on time by the watchdog thread, for
    /// fixed leases too), a release or re-entry that found it gone, a force
    /// unlock (heard on the lock's channel and checked, within about a round
    /// trip; at once when this client did it). If the
    /// loss is already known the reason is waiting in the channel. Nothing is
    /// sent while the hold is intact, or after it was released normally.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), keyholder::Error> {
    /// # let lock = keyholder::Client::open("redis://127.0.0.1/")?.lock("job")?;
    /// let guard = lock.lock()?;
    /// let lost = guard.lost_signal();
    /// for step in 0..100 {
    ///     if let Ok(reason) = lost.try_recv() {
    ///         eprintln!("stopping at step {step}: {reason}");
    ///         break;
    ///     }
    ///     // ... one step of guarded work ...
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost_signal(&self) -> crossbeam_channel::Receiver<LostReason> {
        let signal = self.hold.lost_signal();
        if self.hold.lease != Lease::Watchdog && !self.hold.is_finished() {
            self.client.watchdog.watch(Arc::clone(&self.hold), Some(Arc::clone(&self.entry) as _));
        }
        signal
    }

    /// True if this hold is known lost: a renewal was refused, a release
    /// found the lock gone, or the lease deadline passed on the local clock
    /// without a successful renewal. No I/O.
    ///
    /// `false` means no loss is known, not that the lock is certainly still
    /// held: a lease lock cannot rule out a pause longer than its lease.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// False once a write of this hold (its acquisition, a re-entry, a
    /// renewal) was not acknowledged by the replicas the client asks for
    /// ([`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks)):
    /// a failover to a replica could then lose the lock. Always true when
    /// the client asks for none. No I/O.
    pub fn is_replicated(&self) -> bool {
        self.hold.is_replicated()
    }

    /// Why this hold is known lost, if it is. No I/O.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.hold.lost_reason()
    }

    /// Releases this acquisition, like dropping the guard, but returns the
    /// outcome. The last guard of a thread's holds deletes the lock and wakes
    /// a waiter; earlier ones decrement the hold count.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) if the hold had been lost
    /// (lease expired, renewal refused); [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner)
    /// if Redis says this thread holds nothing there though no loss was known
    /// (force-unlocked); a Redis failure, in which case the lock, if still
    /// held, expires with its lease.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.client.release(&self.entry, &self.hold)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(e) = self.client.release(&self.entry, &self.hold) {
            log::warn!("keyholder: releasing lock '{}' on drop failed: {e}", self.name());
        }
    }
}
