//! The fair lock's guard: proof of one acquisition, released on drop, and
//! the release itself.
//!
//! Every release runs `fair/release.lua` with the owner's unlock latch (the
//! key RLock's releases use), and is retried once on a fresh connection if
//! its reply was lost: the latch makes the retry return the first outcome
//! instead of releasing a second hold. The last release wakes the queue's
//! head, and only the head. Whatever Redis answers, the local state of the
//! last guard's hold is cleared: renewal stops.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::client::Inner;
use crate::error::{Error, LostReason, Result};
use crate::holds::hold::Hold;
use crate::lease::Lease;
use crate::names;
use crate::observe;

use super::held;
use super::scripts::{self, FairKeys, Latch, Release};

/// An RAII guard for one acquisition of a [`FairLock`](crate::FairLock).
///
/// Dropping the guard releases that acquisition (best effort: bounded by
/// the client's timeouts; an error is logged, never a panic);
/// [`unlock`](FairLockGuard::unlock) does the same and returns the error.
/// The last guard of a thread's hold deletes the lock and wakes the next
/// waiter in the queue, and no one else. Write `let _guard = lock.lock()?;`,
/// not `let _ = ...`, which would release at once.
///
/// The owner of a Redisson-style lock is a thread, so a guard stays on the
/// thread that acquired it: it is neither `Send` nor `Sync`.
///
/// ```compile_fail
/// # fn demo(lock: keyholder::FairLock) -> Result<(), keyholder::Error> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `FairLockGuard` cannot be sent between threads
/// # Ok(()) }
/// ```
///
/// As with [`LockGuard`](crate::LockGuard), the watchdog renews a hold while
/// some handle of its client is alive.
#[must_use = "if unused the lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct FairLockGuard {
    client: Arc<Inner>,
    keys: Arc<FairKeys>,
    hold: Arc<Hold>,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for FairLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLockGuard")
            .field("name", &self.name())
            .field("lease", &self.hold.lease)
            .field("token", &self.hold.token())
            .field("lost", &self.lost_reason())
            .finish()
    }
}

impl FairLockGuard {
    pub(super) fn new(client: Arc<Inner>, keys: Arc<FairKeys>, hold: Arc<Hold>) -> Self {
        FairLockGuard { client, keys, hold, released: false, _not_send: PhantomData }
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
    /// [`FairLock::fenced`](crate::FairLock::fenced): strictly larger than the
    /// token of any earlier fresh acquisition of the lock (through a fair,
    /// plain or Java `RFencedLock` handle: they share one counter).
    /// Re-entrant guards share their hold's token. `None` for unfenced locks.
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.token()
    }

    /// A channel that receives the [`LostReason`] once, the moment this
    /// client learns the hold is lost (a renewal refused, the lease deadline
    /// passed without renewal, a release that found it gone); at once if
    /// the loss is already known. See
    /// [`LockGuard::lost_signal`](crate::LockGuard::lost_signal).
    pub fn lost_signal(&self) -> crossbeam_channel::Receiver<LostReason> {
        let signal = self.hold.lost_signal();
        if self.hold.lease != Lease::Watchdog && !self.hold.is_finished() {
            self.client.watchdog.watch(Arc::clone(&self.hold), None);
        }
        signal
    }

    /// True if this hold is known lost: a renewal was refused, a release
    /// found the lock gone, or the lease deadline passed on the local clock
    /// without a successful renewal. No I/O.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Why this hold is known lost, if it is. No I/O.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.hold.lost_reason()
    }

    /// False once a write of this hold was not acknowledged by the replicas
    /// the client asks for. Always true when it asks for none. No I/O.
    pub fn is_replicated(&self) -> bool {
        self.hold.is_replicated()
    }

    /// Releases this acquisition, like dropping the guard, but returns the
    /// outcome.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) if the hold had been
    /// lost (lease expired, renewal refused, force-unlocked: the lock was
    /// gone); [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner) if another
    /// owner holds the lock though no loss was known; a Redis failure, in
    /// which case the lock, if still held, expires with its lease.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        observe::release(&self.hold.name, || release(&self.client, &self.keys, &self.hold))
    }
}

impl Drop for FairLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let outcome = observe::release(&self.hold.name, || release(&self.client, &self.keys, &self.hold));
        if let Err(e) = outcome {
            log::warn!("keyholder: releasing fair lock '{}' on drop failed: {e}", self.name());
        }
    }
}

/// Request ids of latched releases: unique within the process, which is
/// all a latch needs (its key is per owner).
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// Releases one guard's share of `hold`.
fn release(inner: &Inner, keys: &FairKeys, hold: &Arc<Hold>) -> Result<()> {
    if let Some(reason) = hold.lost_reason()
        && held::has_newer(hold)
    {
        // The thread locked again after this hold was lost: the count in
        // Redis is the new hold's, so this release must not touch Redis.
        if hold.drop_guard() == 0 {
            finish(inner, hold);
        }
        return Err(Error::lock_lost(&hold.name, reason));
    }
    if hold.guards() == 1 {
        hold.start_release();
    }
    let sent = Instant::now();
    let outcome = release_latched(inner, keys, hold);
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
        Ok(outcome @ (Release::Gone | Release::NotOwner)) => {
            let known = hold.lost_reason();
            hold.mark_lost(LostReason::ReleaseFoundGone);
            if guards_left == 0 {
                finish(inner, hold);
            }
            Err(match (known, outcome) {
                (Some(reason), _) => Error::lock_lost(&hold.name, reason),
                (None, Release::Gone) => Error::lock_lost(&hold.name, LostReason::ReleaseFoundGone),
                (None, _) => Error::not_owner(&hold.name),
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

/// Runs the release script with the owner's latch; once more, as a retry,
/// on a fresh connection if the first reply was lost.
fn release_latched(inner: &Inner, keys: &FairKeys, hold: &Hold) -> Result<Release> {
    let key = names::unlock_latch(&keys.name, inner.uuid.as_u128(), hold.thread);
    let request = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
    let ttl = inner.config.command_timeout * 2 + inner.config.connect_timeout + Duration::from_secs(1);
    let latch = Latch { key: &key, ttl_ms: crate::lease::millis_ceil(ttl), request, retry: false };
    let run = |latch: Latch<'_>| {
        inner.with_conn(&keys.name, |conn| {
            let outcome = scripts::release(&inner.scripts, conn, keys, &hold.owner, hold.lease_ms, latch)?;
            if conn.replicated() == Some(false) {
                if inner.config.replica_acks_required {
                    return Err(Error::replica_acks(&keys.name));
                }
                log::warn!(
                    "keyholder: fair lock '{}' released, but not acknowledged by the replicas",
                    keys.name
                );
            }
            Ok(outcome)
        })
    };
    match run(latch) {
        Err(e) if e.is_transport() => run(Latch { retry: true, ..latch }),
        outcome => outcome,
    }
}

/// Ends a hold locally: no more renewal, and the thread's next lock is a
/// fresh one.
pub(super) fn finish(inner: &Inner, hold: &Arc<Hold>) {
    if hold.finish() {
        observe::hold_ended(&hold.name, hold.acquired_at());
        inner.forget_hold(hold.id);
        held::remove(hold);
    }
}
