//! The non-reentrant locks: Redisson 4.4's `RedissonNonReentrantLock` and
//! `RedissonNonReentrantFairLock`, one wrapper over the reentrant and fair
//! cores.
//!
//! Why a lock that refuses its holder: where taking a lock twice on one
//! thread is a bug (a callback that re-enters the code that holds it, a job
//! scheduled twice on one worker), a reentrant lock hides it by counting,
//! and the inner scope's release leaves the outer one's work unprotected
//! only if someone miscounts. A non-reentrant lock makes the bug an error
//! at the second acquire: [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld),
//! before any I/O for a thread's hold, with the first hold untouched.
//!
//! Everything else is the wrapped kind's: the same key, channel, queue and
//! scripts, so a Java `RedissonNonReentrantLock` (or `RLock`) on the same
//! name shares the lock, and so does keyholder's [`Lock`](crate::Lock) (a
//! thread holding a name through either is refused by the other's
//! non-reentrant handle). Redis never counts a non-reentrant holder above 1:
//! its acquisitions are always new holds, which set the count to 1. A
//! token ([`OwnerToken`](crate::OwnerToken)) presented while it holds the
//! lock, here or in another process, is refused the same way: one `HEXISTS`
//! of its field first.

use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, Context};
use crate::error::{Error, Result};
use crate::holds::hold::Hold;
use crate::holds::renew::OnLost;
use crate::kinds::fair::Fair;
use crate::kinds::family::sealed::{Core, Reenters, Tokens};
use crate::kinds::family::{self, Acquirer, ByToken, Call, Guard, Handle, Kind, TokenOwned};
use crate::kinds::lock::Reentrant;
use crate::lease::Lease;

impl Client {
    /// A non-reentrant lock handle for `name` with the default
    /// [`Lease::Watchdog`] (Redisson 4.4's `getNonReentrantLock(name)`): a
    /// [`lock`](Client::lock) whose holder's second acquire fails with
    /// [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld). No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// a name [`Client::lock`] refuses.
    pub fn non_reentrant_lock(&self, name: &str) -> Result<NonReentrantLock> {
        Ok(NonReentrant::of(self.lock(name)?))
    }

    /// A non-reentrant fair lock handle for `name` (Redisson 4.4's
    /// `getNonReentrantFairLock(name)`): a [`fair_lock`](Client::fair_lock)
    /// whose holder's second acquire fails with
    /// [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld), without
    /// queueing. No I/O.
    ///
    /// # Errors
    ///
    /// As [`Client::fair_lock`].
    pub fn non_reentrant_fair_lock(&self, name: &str) -> Result<NonReentrantFairLock> {
        Ok(NonReentrant::of(self.fair_lock(name)?))
    }
}

/// A handle to one named non-reentrant lock: [`Lock`](crate::Lock)'s API
/// and layout, but a holder that acquires it again is refused.
///
/// [`lock`](Handle::lock), [`try_lock`](Handle::try_lock),
/// [`try_lock_for`](Handle::try_lock_for) and
/// [`try_lock_until`](Handle::try_lock_until) fail with
/// [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld) when the caller
/// (the thread, or the presented token) holds the lock already; otherwise
/// they wait as the reentrant lock's do, woken by the unlock channel.
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
/// let lock = client.non_reentrant_lock("orders:42")?;
/// let guard = lock.lock()?;
/// // A second acquire by this thread is a bug, reported rather than counted.
/// assert!(lock.try_lock().unwrap_err().is_already_held());
/// drop(guard);
/// # Ok(()) }
/// ```
pub type NonReentrantLock = Handle<NonReentrant<Reentrant>>;

/// An RAII guard for the acquisition of a [`NonReentrantLock`]; see [`Guard`].
pub type NonReentrantLockGuard = Guard<NonReentrant<Reentrant>>;

/// A [`NonReentrantLock`]'s guard owned by an [`OwnerToken`](crate::OwnerToken).
pub type OwnedNonReentrantLockGuard = Guard<NonReentrant<Reentrant>, ByToken>;

/// A handle to one named non-reentrant fair lock:
/// [`FairLock`](crate::FairLock)'s API, queue and layout, but a holder that
/// acquires it again is refused with
/// [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld) (it never
/// queues behind itself).
pub type NonReentrantFairLock = Handle<NonReentrant<Fair>>;

/// An RAII guard for the acquisition of a [`NonReentrantFairLock`]; see [`Guard`].
pub type NonReentrantFairLockGuard = Guard<NonReentrant<Fair>>;

/// A [`NonReentrantFairLock`]'s guard owned by an [`OwnerToken`](crate::OwnerToken).
pub type OwnedNonReentrantFairLockGuard = Guard<NonReentrant<Fair>, ByToken>;

/// The core of a non-reentrant lock: the reentrant kind `K`
/// ([`Reentrant`](crate::kind::Reentrant) or [`Fair`](crate::kind::Fair))
/// with its second holds refused.
#[derive(Clone, Debug)]
pub struct NonReentrant<K> {
    inner: K,
}

#[allow(private_bounds)]
impl<K: Reenters + Kind> NonReentrant<K> {
    /// The non-reentrant twin of `handle`, with its lease.
    fn of(handle: Handle<K>) -> Handle<Self> {
        Handle::of(NonReentrant { inner: handle.kind().clone() }, handle.lease())
    }

    /// The reentrant handle of the same lock and lease, for what the twin
    /// shares unchanged.
    fn reentrant(handle: &Handle<Self>) -> Handle<K> {
        Handle::of(handle.kind().inner.clone(), handle.lease())
    }

    /// Refuses an acquire by a caller that holds the lock: a thread's live
    /// hold at this client, or a presented token's field in Redis.
    fn refuse_second_hold(&self, call: &Call<'_>) -> Result<()> {
        let name = self.inner.name();
        let held = match call.acquirer {
            Acquirer::Thread => self.inner.live_hold(call.ctx, call.thread).is_some(),
            Acquirer::MintedToken => false,
            Acquirer::PresentedToken => {
                let mut exists = redis::cmd("HEXISTS");
                family::query::<bool>(self.inner.client(), name, exists.arg(&**name).arg(&call.owner))?
            }
        };
        if held { Err(Error::already_held(K::ONCE[0], name)) } else { Ok(()) }
    }
}

impl Handle<NonReentrant<Fair>> {
    /// The wait slot of this handle's waiters; see
    /// [`FairLock::wait_timeout`](crate::FairLock::wait_timeout).
    pub fn wait_timeout(&self) -> Duration {
        NonReentrant::reentrant(self).wait_timeout()
    }

    /// A handle to the same lock whose waiters use the wait slot `slot`; see
    /// [`FairLock::with_wait_timeout`](crate::FairLock::with_wait_timeout).
    ///
    /// # Errors
    ///
    /// As [`FairLock::with_wait_timeout`](crate::FairLock::with_wait_timeout).
    pub fn with_wait_timeout(&self, slot: Duration) -> Result<NonReentrantFairLock> {
        Ok(NonReentrant::of(NonReentrant::reentrant(self).with_wait_timeout(slot)?))
    }

    /// How many waiters are queued for the lock; see
    /// [`FairLock::queue_len`](crate::FairLock::queue_len).
    ///
    /// # Errors
    ///
    /// As [`FairLock::queue_len`](crate::FairLock::queue_len).
    pub fn queue_len(&self) -> Result<usize> {
        NonReentrant::reentrant(self).queue_len()
    }
}

impl<K: Reenters + Kind> Kind for NonReentrant<K> {}

impl<K: Reenters + Kind> Core for NonReentrant<K> {
    const NOUN: &'static str = K::ONCE[0];
    const HANDLE: &'static str = K::ONCE[1];
    const GUARD: &'static str = K::ONCE[2];
    type Keep = K::Keep;

    fn client(&self) -> &Client {
        self.inner.client()
    }

    fn name(&self) -> &Arc<str> {
        self.inner.name()
    }

    fn acquire(&self, call: Call<'_>) -> Result<Option<(Arc<Hold>, K::Keep)>> {
        self.refuse_second_hold(&call)?;
        self.inner.acquire(call)
    }

    fn release(ctx: Context<'_>, keep: &K::Keep, hold: &Arc<Hold>) -> Result<()> {
        K::release(ctx, keep, hold)
    }

    fn on_lost(keep: &K::Keep) -> Option<Arc<dyn OnLost>> {
        K::on_lost(keep)
    }

    fn is_locked(&self) -> Result<bool> {
        self.inner.is_locked()
    }

    fn hold_count(&self) -> Result<u32> {
        self.inner.hold_count()
    }

    fn force_unlock(&self) -> Result<bool> {
        self.inner.force_unlock()
    }

    fn legacy(&self) -> bool {
        self.inner.legacy()
    }

    fn debug_fields(&self, f: &mut std::fmt::DebugStruct<'_, '_>) {
        self.inner.debug_fields(f);
    }
}

impl<K: Reenters + Kind + Tokens> TokenOwned for NonReentrant<K> {}

impl<K: Reenters + Kind + Tokens> Tokens for NonReentrant<K> {
    fn resume(
        &self,
        ctx: Context<'_>,
        owner: &str,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<(Arc<Hold>, K::Keep)> {
        self.inner.resume(ctx, owner, lease, lease_ms)
    }
}
