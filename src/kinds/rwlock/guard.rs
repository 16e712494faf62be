//! The read and write guards: proof of one acquisition, released on drop.
//!
//! Both wrap one [`Held`], which does the releasing: a release runs its
//! mode's script with an unlock latch, and once more with the same request
//! id if the first reply was lost (the latch makes the retry return the
//! first outcome rather than release twice). Whatever Redis answers, the
//! hold's local state is cleared with its last guard: renewal stops.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Inner;
use crate::error::{Error, LostReason, Result};
use crate::holds::hold::Hold;
use crate::kinds::rwlock::local;
use crate::kinds::rwlock::scripts::{self, Release, RwKeys};
use crate::lease::Lease;
use crate::observe;

/// One guard's share of a read or write hold.
pub(crate) struct Held {
    pub(crate) client: Arc<Inner>,
    pub(crate) keys: Arc<RwKeys>,
    pub(crate) hold: Arc<Hold>,
    pub(crate) write: bool,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl Held {
    pub(crate) fn new(client: Arc<Inner>, keys: Arc<RwKeys>, hold: Arc<Hold>, write: bool) -> Held {
        Held { client, keys, hold, write, released: false, _not_send: PhantomData }
    }

    fn lost_signal(&self) -> crossbeam_channel::Receiver<LostReason> {
        let signal = self.hold.lost_signal();
        if self.hold.lease != Lease::Watchdog && !self.hold.is_finished() {
            self.client.watchdog.watch(Arc::clone(&self.hold), None);
        }
        signal
    }

    fn unlock(&mut self) -> Result<()> {
        self.released = true;
        observe::release(&self.keys.name, || release(&self.client, &self.keys, &self.hold, self.write))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let released =
            observe::release(&self.keys.name, || release(&self.client, &self.keys, &self.hold, self.write));
        if let Err(e) = released {
            let mode = if self.write { "write" } else { "read" };
            log::warn!("keyholder: releasing the {mode} lock of '{}' on drop failed: {e}", self.keys.name);
        }
    }
}

/// Runs one release of `hold`, latched, retried once if the reply was lost.
fn release_in_redis(inner: &Inner, keys: &RwKeys, hold: &Hold, write: bool) -> Result<Release> {
    let owner = reader_of(hold, write);
    inner.run_latched(&keys.name, hold.thread, true, |conn, latch| {
        if write {
            scripts::write_release(&inner.scripts, conn, keys, owner, hold.lease_ms, latch)
        } else {
            scripts::read_release(&inner.scripts, conn, keys, owner, latch)
        }
    })
}

/// The read owner id of a hold (a write hold's owner ends in `:write`).
pub(crate) fn reader_of(hold: &Hold, write: bool) -> &str {
    if write { hold.owner.strip_suffix(":write").unwrap_or(&hold.owner) } else { &hold.owner }
}

/// Releases one guard's share of `hold`.
pub(crate) fn release(inner: &Arc<Inner>, keys: &RwKeys, hold: &Arc<Hold>, write: bool) -> Result<()> {
    if let Some(reason) = hold.lost_reason() {
        let newer = local::current(inner.uuid.as_u128(), &keys.name, write).is_some_and(|h| h.id != hold.id);
        if newer {
            // The thread took a new hold after this one was lost: the
            // count in Redis is the new hold's, which this guard must not
            // touch.
            if hold.drop_guard() == 0 {
                finish(inner, hold);
            }
            return Err(Error::lock_lost(&hold.name, reason));
        }
    }
    if hold.guards() == 1 {
        hold.start_release();
    }
    let sent = Instant::now();
    let outcome = release_in_redis(inner, keys, hold, write);
    let guards_left = hold.drop_guard();
    let result = match outcome {
        Ok(Release::StillHeld) => {
            if write && guards_left > 0 {
                // The write script re-applied the lease.
                hold.set_deadline(sent + Duration::from_millis(hold.lease_ms));
            }
            Ok(())
        }
        Ok(Release::Released) => {
            if guards_left > 0 {
                // Redis counted fewer holds than this thread has guards.
                hold.mark_lost(LostReason::ReleaseFoundGone);
            }
            Ok(())
        }
        Ok(Release::NotOwner) => {
            let known = hold.lost_reason();
            hold.mark_lost(LostReason::ReleaseFoundGone);
            Err(match known {
                Some(reason) => Error::lock_lost(&hold.name, reason),
                None => Error::not_owner(&hold.name),
            })
        }
        Err(e) => Err(e),
    };
    if guards_left == 0 {
        // Whatever Redis did: the hold, if still there, expires with its
        // lease (a count this thread has no guard for stops being renewed).
        finish(inner, hold);
    }
    result
}

/// Ends a hold locally: no more renewal, no more re-entry.
pub(crate) fn finish(inner: &Inner, hold: &Hold) {
    if hold.finish() {
        observe::hold_ended(&hold.name, hold.acquired_at());
        inner.forget_hold(hold.id);
        local::remove(hold.id);
    }
}

macro_rules! guard_common {
    ($guard:ident) => {
        impl $guard {
            /// The lock name.
            pub fn name(&self) -> &str {
                &self.held.hold.name
            }

            /// The lease policy of the acquisition this guard's hold began with.
            pub fn lease(&self) -> Lease {
                self.held.hold.lease
            }

            /// The owner id written in Redis: `<client-uuid>:<thread-id>` for a
            /// read hold, `<client-uuid>:<thread-id>:write` for a write hold.
            pub fn owner_id(&self) -> &str {
                &self.held.hold.owner
            }

            /// A channel that receives the [`LostReason`] once, the moment this
            /// client learns the hold is lost: a renewal refused, the lease
            /// deadline passed without renewal (noticed on time by the
            /// watchdog thread, for fixed leases too), a release or re-entry
            /// that found it gone. If the loss is already known the reason is
            /// waiting in the channel. Nothing is sent while the hold is intact,
            /// or after it was released normally.
            pub fn lost_signal(&self) -> crossbeam_channel::Receiver<LostReason> {
                self.held.lost_signal()
            }

            /// True if this hold is known lost: a renewal was refused, a release
            /// found the lock gone, or the lease deadline passed on the local
            /// clock without a successful renewal. No I/O.
            pub fn is_lost(&self) -> bool {
                self.held.hold.is_lost()
            }

            /// Why this hold is known lost, if it is. No I/O.
            pub fn lost_reason(&self) -> Option<LostReason> {
                self.held.hold.lost_reason()
            }

            /// False once a write of this hold (its acquisition, a re-entry, a
            /// renewal) was not acknowledged by the replicas the client asks
            /// for. Always true when the client asks for none. No I/O.
            pub fn is_replicated(&self) -> bool {
                self.held.hold.is_replicated()
            }

            /// Releases this acquisition, like dropping the guard, but returns
            /// the outcome.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) if the hold
            /// had been lost (lease expired, renewal refused);
            /// [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner) if Redis
            /// says this thread holds nothing there though no loss was known
            /// (force-unlocked); a Redis failure, in which case the hold, if
            /// still there, expires with its lease.
            pub fn unlock(mut self) -> Result<()> {
                self.held.unlock()
            }
        }
    };
}

/// An RAII guard for one read acquisition of a
/// [`ReadWriteLock`](crate::ReadWriteLock) (through its
/// [`read`](crate::ReadWriteLock::read) handle).
///
/// Dropping the guard releases that acquisition (best effort: one script
/// call, retried once if its reply was lost; an error is logged, never a
/// panic); [`unlock`](ReadGuard::unlock) does the same and returns the
/// error. Write `let _guard = lock.read().lock()?;`, not `let _ = ...`,
/// which would release at once. Like [`LockGuard`](crate::LockGuard) it
/// stays on the thread that acquired it (the owner is the thread): it is
/// neither `Send` nor `Sync`.
///
/// ```compile_fail
/// # fn demo(lock: keyholder::ReadWriteLock) -> Result<(), keyholder::Error> {
/// let guard = lock.read().lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `ReadGuard` cannot be sent between threads
/// # Ok(()) }
/// ```
#[must_use = "if unused the read lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct ReadGuard {
    pub(crate) held: Held,
}

/// An RAII guard for one write acquisition of a
/// [`ReadWriteLock`](crate::ReadWriteLock) (through its
/// [`write`](crate::ReadWriteLock::write) handle), with the hold's fencing
/// token when the handle was [`fenced`](crate::WriteLock::fenced).
///
/// Released on drop like [`ReadGuard`]; neither `Send` nor `Sync`.
///
/// ```compile_fail
/// # fn demo(lock: keyholder::ReadWriteLock) -> Result<(), keyholder::Error> {
/// let guard = lock.write().lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `WriteGuard` cannot be sent between threads
/// # Ok(()) }
/// ```
#[must_use = "if unused the write lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct WriteGuard {
    pub(crate) held: Held,
}

guard_common!(ReadGuard);
guard_common!(WriteGuard);

impl WriteGuard {
    /// The fencing token of this write hold, for handles made with
    /// [`WriteLock::fenced`](crate::WriteLock::fenced): minted in the
    /// acquire script from `redisson_lock_token:{<name>}` (the counter
    /// Redisson's `RFencedLock` and keyholder's fenced [`Lock`](crate::Lock)
    /// use), strictly larger than any token minted before it. Re-entrant
    /// guards share their hold's token. `None` for unfenced handles.
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.hold.token()
    }
}

impl std::fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadGuard").field("name", &self.name()).field("lost", &self.lost_reason()).finish()
    }
}

impl std::fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteGuard")
            .field("name", &self.name())
            .field("token", &self.fencing_token())
            .field("lost", &self.lost_reason())
            .finish()
    }
}
