//! The guard of every lock-like kind: proof of one acquisition, released on
//! drop, with the hold's accessors written once.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::client::Inner;
use crate::error::{LostReason, Result};
use crate::holds::hold::Hold;
use crate::kinds::family::kind::Kind;
use crate::lease::Lease;
use crate::observe;

/// The marker that keeps a lock's guard on the thread that acquired it.
///
/// A Redisson-style lock is owned by a thread (`<client-uuid>:<thread-id>`
/// in Redis), so its guards ([`LockGuard`](crate::LockGuard),
/// [`FairLockGuard`](crate::FairLockGuard),
/// [`SpinLockGuard`](crate::SpinLockGuard), [`ReadGuard`](crate::ReadGuard),
/// [`WriteGuard`](crate::WriteGuard), and the
/// [`MultiLockGuard`](crate::MultiLockGuard) and
/// [`RedLockGuard`](crate::RedLockGuard) made of them) carry a
/// `PhantomData<*const ThreadOwnedHold>`, which makes them neither `Send`
/// nor `Sync`. The compiler names it when a guard is moved to or shared
/// with another thread: "`*const ThreadOwnedHold` cannot be sent between
/// threads safely". Take the lock on the thread that releases it, or ask
/// the owning thread to release it over a channel; see [`Guard`]'s
/// documentation. No value of this type exists.
#[derive(Debug)]
pub enum ThreadOwnedHold {}

/// Who owns a guard's hold, the second parameter of [`Guard`]: a thread
/// ([`ByThread`], the default) or an [`OwnerToken`](crate::OwnerToken)
/// ([`ByToken`]). It decides only whether the guard may leave its thread,
/// as `lock_api`'s `GuardSend` and `GuardNoSend` do. Sealed.
#[allow(private_bounds)]
pub trait Ownership: sealed::Sealed + 'static {}

/// A hold owned by the thread that acquired it (`<client-uuid>:<thread-id>`):
/// its guard is neither `Send` nor `Sync` ([`ThreadOwnedHold`] says so).
#[derive(Debug)]
pub struct ByThread(PhantomData<*const ThreadOwnedHold>);

/// A hold owned by an [`OwnerToken`](crate::OwnerToken): its guard is
/// `Send` (any thread may release it) and `Sync` (every `&self` method
/// only reads the hold's atomics; releasing takes the guard by value).
#[derive(Debug)]
pub enum ByToken {}

impl Ownership for ByThread {}
impl Ownership for ByToken {}

mod sealed {
    pub(crate) trait Sealed {
        /// Put before the kind's guard name in `Debug` ("Owned").
        const DEBUG_PREFIX: &'static str;
    }
    impl Sealed for super::ByThread {
        const DEBUG_PREFIX: &'static str = "";
    }
    impl Sealed for super::ByToken {
        const DEBUG_PREFIX: &'static str = "Owned";
    }
}

/// An RAII guard for one acquisition of a lock of kind `K`; the public
/// names are its aliases ([`LockGuard`](crate::LockGuard),
/// [`FairLockGuard`](crate::FairLockGuard),
/// [`SpinLockGuard`](crate::SpinLockGuard), [`ReadGuard`](crate::ReadGuard),
/// [`WriteGuard`](crate::WriteGuard)).
///
/// Dropping the guard releases that acquisition (best effort: one script
/// call, retried once if its reply was lost, bounded by the client's
/// timeouts; an error is logged, never a panic).
/// [`unlock`](Guard::unlock) does the same and returns the error. Write
/// `let _guard = lock.lock()?;`, not `let _ = ...`, which would release at
/// once. Re-entrant acquisitions of one thread share a hold; the last
/// guard's release frees the lock (a reentrant lock may hand it straight to
/// a waiting thread of the same client, a fair lock wakes the queue's head
/// alone, a spin lock publishes nothing).
///
/// The owner of a Redisson-style lock is a thread, so a guard stays on the
/// thread that acquired it: it is neither `Send` nor `Sync` (its
/// [`ThreadOwnedHold`] marker says so). Moving one to another thread, or
/// into `std::thread::spawn`, fails to compile with "`*const
/// ThreadOwnedHold` cannot be sent between threads safely". What to do
/// instead:
///
/// - take the lock on the thread that releases it: move the handle
///   ([`Lock`](crate::Lock) and the other handles are `Send + Sync` and
///   cheap to clone), not the guard, and call `lock()` there;
/// - or keep the guard on its thread and ask that thread to release it,
///   over a channel:
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// # let lock = keyholder::Client::open("redis://127.0.0.1/")?.lock("orders:42")?;
/// let (release, release_asked) = std::sync::mpsc::channel::<()>();
/// let owner = std::thread::spawn(move || -> keyholder::Result<()> {
///     let guard = lock.lock()?; // taken on the thread that releases it
///     // ... start work elsewhere, then wait until asked (or every sender
///     // is gone) ...
///     let _ = release_asked.recv();
///     guard.unlock()
/// });
/// // ... on another thread, when the guarded work is done:
/// let _ = release.send(());
/// # let _ = owner.join();
/// # Ok(()) }
/// ```
///
/// Permits ([`SemaphorePermits`](crate::SemaphorePermits),
/// [`ExpirablePermits`](crate::ExpirablePermits)) belong to no thread and
/// may move. So does a hold owned by an [`OwnerToken`](crate::OwnerToken)
/// instead of a thread ([`Lock::lock_owned`](crate::Lock::lock_owned)): its
/// guard, an [`OwnedLockGuard`](crate::OwnedLockGuard) (`Guard<K, ByToken>`),
/// is `Send` and may be released from any thread.
///
/// ```compile_fail,E0277
/// # fn demo(lock: keyholder::Lock) -> Result<(), keyholder::Error> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `*const ThreadOwnedHold` cannot be sent between threads
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0277
/// # fn demo(lock: keyholder::FairLock) -> Result<(), keyholder::Error> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `*const ThreadOwnedHold` cannot be sent between threads
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0277
/// # fn demo(lock: keyholder::SpinLock) -> Result<(), keyholder::Error> {
/// let guard = lock.lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `*const ThreadOwnedHold` cannot be sent between threads
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0277
/// # fn demo(lock: keyholder::ReadWriteLock) -> Result<(), keyholder::Error> {
/// let guard = lock.read().lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `*const ThreadOwnedHold` cannot be sent between threads
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0277
/// # fn demo(lock: keyholder::ReadWriteLock) -> Result<(), keyholder::Error> {
/// let guard = lock.write().lock()?;
/// std::thread::spawn(move || drop(guard)); // error: `*const ThreadOwnedHold` cannot be sent between threads
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0277
/// # fn demo(guard: &keyholder::LockGuard) {
/// fn shared<T: Sync>(_: &T) {}
/// shared(guard); // error: `*const ThreadOwnedHold` cannot be shared between threads
/// # }
/// ```
///
/// A guard does not keep its client running: the watchdog renews a hold
/// while some [`Client`](crate::Client) or handle of the client is alive
/// (as Redisson renews while its client lives). Once the last of them is
/// dropped the client shuts down, renewal stops, and a guard still held
/// keeps only what is left of its lease; it can still release. So keep a
/// `Client` or a handle for as long as you hold its locks. A leaked guard
/// (`mem::forget`) leaves its acquisition held until then, and at most one
/// lease longer.
#[must_use = "if unused the lock will immediately unlock"]
#[clippy::has_significant_drop]
pub struct Guard<K: Kind, O: Ownership = ByThread> {
    client: Arc<Inner>,
    hold: Arc<Hold>,
    /// What the kind's release needs besides the hold.
    keep: K::Keep,
    released: bool,
    /// For [`ByThread`], neither `Send` nor `Sync`; the pointer's target
    /// names the reason in the compiler's error.
    _owner: PhantomData<O>,
}

impl<K: Kind, O: Ownership> std::fmt::Debug for Guard<K, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(&format!("{}{}", <O as sealed::Sealed>::DEBUG_PREFIX, K::GUARD))
            .field("name", &self.name())
            .field("owner", &self.hold.owner)
            .field("lease", &self.hold.lease)
            .field("token", &self.hold.token())
            .field("lost", &self.lost_reason())
            .finish()
    }
}

impl<K: Kind, O: Ownership> Guard<K, O> {
    pub(crate) fn new(client: Arc<Inner>, hold: Arc<Hold>, keep: K::Keep) -> Self {
        Guard { client, hold, keep, released: false, _owner: PhantomData }
    }

    /// How many guards the hold has (more than one after a re-entry).
    pub(crate) fn hold_guards(&self) -> u32 {
        self.hold.guards()
    }

    /// The guard of a fresh hold that was found gone before it was handed
    /// out (the check of a hold acquired across a failover, at its
    /// registration). A re-entry shares a hold that its first guard
    /// already knows of; a lease that merely ran out is not a reason to
    /// try again.
    pub(crate) fn lost_at_birth(&self) -> bool {
        self.hold.guards() == 1 && self.hold.recorded_loss().is_some_and(|r| r != LostReason::LeaseExpired)
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The lease policy of the acquisition this guard's hold began with.
    pub fn lease(&self) -> Lease {
        self.hold.lease
    }

    /// The owner id written in Redis: `<client-uuid>:<thread-id>`
    /// (`<client-uuid>:<thread-id>:write` for a write hold; the token's
    /// `<uuid>:<number>` for a token-owned hold, `<uuid>:<number>:write`
    /// for a token-owned write hold).
    pub fn owner_id(&self) -> &str {
        &self.hold.owner
    }

    /// The fencing token of this hold, for handles made with
    /// [`fenced`](crate::Handle::fenced): strictly larger than the token of
    /// any earlier fresh acquisition of the lock (through a fenced
    /// [`Lock`](crate::Lock), [`FairLock`](crate::FairLock),
    /// [`WriteLock`](crate::WriteLock) or Java `RFencedLock`: they share one
    /// counter). Re-entrant guards share their hold's token. `None` for
    /// unfenced handles and the kinds that cannot fence.
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.token()
    }

    /// A channel that receives the [`LostReason`] once, the moment this
    /// client learns the hold is lost: a renewal refused, the lease deadline
    /// passed without renewal (noticed on time by the watchdog thread, for
    /// fixed leases too), a release or re-entry that found it gone, a force
    /// unlock (by this client at once; by another, for the kinds that
    /// publish one, heard on the lock's channel and checked within about a
    /// round trip). If the loss is already known the reason is waiting in
    /// the channel. Nothing is sent while the hold is intact, or after it
    /// was released normally.
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
            self.client.context().holds().watch(Arc::clone(&self.hold), K::on_lost(&self.keep));
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

    /// Why this hold is known lost, if it is. No I/O.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.hold.lost_reason()
    }

    /// False once a write of this hold (its acquisition, a re-entry, a
    /// renewal) was not acknowledged by the replicas the client asks for
    /// ([`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks)):
    /// a failover to a replica could then lose the lock. Always true when
    /// the client asks for none. No I/O.
    pub fn is_replicated(&self) -> bool {
        self.hold.is_replicated()
    }

    /// Releases this acquisition, like dropping the guard, but returns the
    /// outcome. The last guard of a thread's hold frees the lock and wakes
    /// a waiter; earlier ones decrement the hold count.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LockLost`](crate::ErrorKind::LockLost) if the hold had
    /// been lost (lease expired, renewal refused, force-unlocked: the lock
    /// was gone); [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner) if
    /// Redis says this thread holds nothing there though no loss was known;
    /// a Redis failure, in which case the lock, if still held, expires with
    /// its lease.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.release()
    }

    /// The kind's release, in a `keyholder.release` span.
    fn release(&self) -> Result<()> {
        observe::release(&self.hold.name, || K::release(self.client.context(), &self.keep, &self.hold))
    }
}

impl<K: Kind> Guard<K, ByToken> {
    /// The token that owns this hold: present it to re-enter the lock
    /// ([`Handle::lock_with`](crate::Handle::lock_with)), or carry it as a
    /// string to another process to release or renew the hold there
    /// ([`Handle::resume`](crate::Handle::resume)).
    pub fn token(&self) -> crate::OwnerToken {
        // A write hold's field is `<token>:write`; a token never ends so.
        let owner = &self.hold.owner;
        crate::OwnerToken::of_owner(owner.strip_suffix(":write").unwrap_or(owner))
    }
}

impl<K: Kind, O: Ownership> Drop for Guard<K, O> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Err(e) = self.release() {
            log::warn!("keyholder: releasing {} '{}' on drop failed: {e}", K::NOUN, self.name());
        }
    }
}
