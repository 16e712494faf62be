//! The spin-lock guard, and the release it runs on drop.
//!
//! A nested release (other guards of the hold remain) carries an unlock
//! latch, so a retry after a lost reply returns the first outcome instead of
//! decrementing twice; the last release needs none (once the owner's field
//! is gone a retry releases nothing). Nothing is published: spin-lock
//! waiters retry on their own.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Inner;
use crate::error::{Error, LostReason, Result};
use crate::holds::hold::Hold;
use crate::kinds::spin_lock::holds;
use crate::kinds::spin_lock::scripts::{self, Release};
use crate::lease::Lease;
use crate::observe;

/// An RAII guard for one acquisition of a [`SpinLock`](crate::SpinLock).
///
/// Dropping it releases that acquisition (one script call, errors logged);
/// [`unlock`](SpinLockGuard::unlock) does the same and returns the error.
/// The owner is a thread, so the guard is neither `Send` nor `Sync`.
#[must_use = "if unused the lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct SpinLockGuard {
    client: Arc<Inner>,
    hold: Arc<Hold>,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for SpinLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLockGuard")
            .field("name", &self.name())
            .field("lease", &self.hold.lease)
            .field("lost", &self.lost_reason())
            .finish()
    }
}

impl SpinLockGuard {
    pub(crate) fn new(client: Arc<Inner>, hold: Arc<Hold>) -> Self {
        SpinLockGuard { client, hold, released: false, _not_send: PhantomData }
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

    /// A channel that receives the [`LostReason`] once, the moment this
    /// client learns the hold is lost (a renewal refused, the lease deadline
    /// passed without renewal, a release or re-entry that found it gone);
    /// at once if the loss is already known. As
    /// [`LockGuard::lost_signal`](crate::LockGuard::lost_signal).
    pub fn lost_signal(&self) -> crossbeam_channel::Receiver<LostReason> {
        let signal = self.hold.lost_signal();
        if self.hold.lease != Lease::Watchdog && !self.hold.is_finished() {
            self.client.watchdog.watch(Arc::clone(&self.hold), None);
        }
        signal
    }

    /// True if this hold is known lost. No I/O. `false` means no loss is
    /// known, not that the lock is certainly still held.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Why this hold is known lost, if it is. No I/O.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.hold.lost_reason()
    }

    /// Releases this acquisition, like dropping the guard, but returns the
    /// outcome. The last guard of the thread's hold deletes the lock
    /// (publishing nothing); earlier ones decrement the hold count.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) if the hold had
    /// been lost; [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner) if
    /// Redis says this thread holds nothing there though no loss was known
    /// (force-unlocked); a Redis failure, in which case the lock, if still
    /// held, expires with its lease.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        release(&self.client, &self.hold)
    }
}

impl Drop for SpinLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(e) = release(&self.client, &self.hold) {
            log::warn!("keyholder: releasing spin lock '{}' on drop failed: {e}", self.name());
        }
    }
}

/// Releases one guard's share of `hold`, in a `keyholder.release` span.
fn release(inner: &Inner, hold: &Arc<Hold>) -> Result<()> {
    observe::release(&hold.name, || release_guard(inner, hold))
}

fn release_guard(inner: &Inner, hold: &Arc<Hold>) -> Result<()> {
    let client = inner.uuid.as_u128();
    let superseded = holds::current(client, &hold.name).is_some_and(|h| h.id != hold.id);
    if let Some(reason) = hold.lost_reason()
        && superseded
    {
        // The thread locked again after this hold was lost; the count in
        // Redis is the new hold's: leave it alone.
        if hold.drop_guard() == 0 {
            finish(inner, hold);
        }
        return Err(Error::lock_lost(&hold.name, reason));
    }
    let nested = hold.guards() > 1;
    if !nested {
        hold.start_release();
    }
    let sent = Instant::now();
    let (outcome, retried) =
        if nested { (release_nested(inner, hold), false) } else { release_last(inner, hold) };
    let guards_left = hold.drop_guard();
    match outcome {
        Ok(Release::StillHeld) => {
            hold.set_deadline(sent + Duration::from_millis(hold.lease_ms));
            if guards_left == 0 {
                // Redis counts more holds than this thread has guards (an
                // acquire whose reply was lost): stop renewing, so the
                // orphaned count expires with the lease.
                finish(inner, hold);
            }
            Ok(())
        }
        Ok(Release::Released) => {
            if guards_left > 0 {
                hold.mark_lost(LostReason::ReleaseFoundGone);
            }
            finish(inner, hold);
            Ok(())
        }
        // The first attempt's reply was lost, and it did release.
        Ok(Release::NotOwner) if retried && hold.lost_reason().is_none() => {
            finish(inner, hold);
            Ok(())
        }
        Ok(Release::NotOwner) => {
            let known = hold.lost_reason();
            hold.mark_lost(LostReason::ReleaseFoundGone);
            if guards_left == 0 {
                finish(inner, hold);
            }
            Err(match known {
                Some(reason) => Error::lock_lost(&hold.name, reason),
                None => Error::not_owner(&hold.name),
            })
        }
        Err(e) => {
            if guards_left == 0 {
                finish(inner, hold);
            }
            Err(e)
        }
    }
}

/// A nested release: latched, retried once on a fresh connection if the
/// reply was lost (the latch returns the first outcome; `kinds/latch.rs`).
fn release_nested(inner: &Inner, hold: &Hold) -> Result<Release> {
    inner.run_latched(&hold.name, hold.thread, true, |conn, latch| {
        scripts::release(&inner.scripts, conn, &hold.name, hold.lease_ms, &hold.owner, Some(latch))
    })
}

/// The last release: unlatched, retried once if the reply was lost. Returns
/// whether the outcome is the retry's.
fn release_last(inner: &Inner, hold: &Hold) -> (Result<Release>, bool) {
    let run = || {
        inner.with_conn(&hold.name, |conn| {
            scripts::release(&inner.scripts, conn, &hold.name, hold.lease_ms, &hold.owner, None)
        })
    };
    match run() {
        Err(e) if e.is_transport() => (run(), true),
        outcome => (outcome, false),
    }
}

/// Ends a hold locally: no more renewal, forgotten by its thread.
fn finish(inner: &Inner, hold: &Arc<Hold>) {
    if hold.finish() {
        observe::hold_ended(&hold.name, hold.acquired_at());
        inner.forget_hold(hold.id);
        holds::forget(inner.uuid.as_u128(), hold);
    }
}
