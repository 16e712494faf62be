//! One shape for the lock-like kinds, in the manner of `lock_api`: a small
//! per-kind core under one generic handle and one generic guard.
//!
//! Why: the reentrant, fair and spin locks and the two sides of the
//! read-write lock are the same thing to a caller (a name, a lease, a hold
//! per thread, `lock` / `try_lock` / `try_lock_for` / `try_lock_until`, a
//! guard that releases on drop and says when its hold is lost), and differ
//! only in how they acquire and release in Redis. So each kind writes only
//! its core, the sealed [`sealed::Core`] (acquire, release, and the few
//! queries whose scripts differ), and [`Handle`] and [`Guard`] carry the
//! shared API once. What only one kind can do is an inherent method of the
//! specialised handle (`impl Handle<Fair> { fn queue_len .. }`), as
//! `lock_api` unlocks `try_lock_for` for a `RawMutexTimed`; fencing, which
//! three kinds share, is unlocked by [`Fenced`]. The public names are type
//! aliases (`Lock = Handle<Reentrant>`, `LockGuard = Guard<Reentrant>`, ...),
//! so code written against them reads as before.
//!
//! The core trait and what an acquire call hands it are in `kind.rs`. The
//! steps every kind shares are written here too: the contention loop
//! (`contend.rs`), the re-entry of a thread's live hold (`reentry.rs`),
//! making and registering a new hold (`fresh.rs`), and settling one guard's
//! release (`release.rs`). A new lock-like kind writes its core, its
//! scripts and its tests.
//! Semaphores and the count-down latch keep their own vocabulary (permits,
//! counts), as `tokio` keeps `Semaphore` apart from `Mutex`.

pub(crate) mod contend;
pub(crate) mod fresh;
mod guard;
mod kind;
pub(crate) mod reentry;
pub(crate) mod release;
pub(crate) mod silent;
pub(crate) mod tokens;

pub use guard::{ByThread, ByToken, Guard, Ownership, ThreadOwnedHold};
pub(crate) use kind::sealed;
pub(crate) use kind::{Acquirer, Call};
pub use kind::{Fenced, Kind, TokenOwned};

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::lease::Lease;
use crate::names;
use crate::observe;
use crate::owner::{self, OwnerToken};
use crate::wait::patience::Patience;

/// A handle to one named lock of kind `K`; the public names are its
/// aliases ([`Lock`](crate::Lock), [`FairLock`](crate::FairLock),
/// [`SpinLock`](crate::SpinLock), [`ReadLock`](crate::ReadLock),
/// [`WriteLock`](crate::WriteLock)).
///
/// Cheap to clone (`Arc`s inside) and shareable across threads; it does no
/// I/O until asked. The guard-returning methods follow parking_lot's
/// vocabulary: [`lock`](Handle::lock) blocks,
/// [`try_lock`](Handle::try_lock) never waits,
/// [`try_lock_for`](Handle::try_lock_for) and
/// [`try_lock_until`](Handle::try_lock_until) wait at most so long. Not
/// getting the lock in time is `Ok(None)`, not an error. Every kind but the
/// non-reentrant twins ([`NonReentrantLock`](crate::NonReentrantLock),
/// [`NonReentrantFairLock`](crate::NonReentrantFairLock), which refuse it
/// with [`ErrorKind::AlreadyHeld`](crate::ErrorKind::AlreadyHeld)) is
/// reentrant per thread: a thread that holds the lock may acquire it again,
/// and each acquisition is released by its own [`Guard`].
#[derive(Clone)]
pub struct Handle<K: Kind> {
    kind: K,
    lease: Lease,
}

impl<K: Kind> std::fmt::Debug for Handle<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct(K::HANDLE);
        debug.field("name", self.kind.name()).field("lease", &self.lease);
        self.kind.debug_fields(&mut debug);
        debug.finish_non_exhaustive()
    }
}

impl<K: Kind> Handle<K> {
    pub(crate) fn of(kind: K, lease: Lease) -> Self {
        Handle { kind, lease }
    }

    /// The kind's own state.
    pub(crate) fn kind(&self) -> &K {
        &self.kind
    }

    /// The same handle with the kind's state replaced.
    pub(crate) fn with_kind(&self, kind: K) -> Self {
        Handle { kind, lease: self.lease }
    }

    /// The client this handle acquires through.
    pub(crate) fn client(&self) -> &Client {
        self.kind.client()
    }

    /// The lock name (also its Redis key).
    pub fn name(&self) -> &str {
        self.kind.name()
    }

    /// The lease policy of this handle's acquisitions.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// A handle to the same lock whose acquisitions use `lease`: the per-call
    /// form, as in `lock.with_lease(Lease::Fixed(d)).try_lock()`. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// a fixed lease outside 1 ms to 30 days.
    pub fn with_lease(&self, lease: Lease) -> Result<Self> {
        lease.validate()?;
        Ok(Handle { kind: self.kind.clone(), lease })
    }

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// The wait rides out an outage (Redis restarting, a failover): while
    /// Redis is unreachable the thread keeps waiting, tries again when the
    /// client's pub/sub connection is back (or after a back-off of at most
    /// 1 s), and acquires once Redis serves again. It returns the
    /// connection error only once the outage has lasted the client's outage
    /// budget ([`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget),
    /// 4.5 s by default); [`try_lock_for`](Handle::try_lock_for) and
    /// [`try_lock_until`](Handle::try_lock_until) ride it out until their
    /// deadline at most, [`try_lock`](Handle::try_lock) not at all.
    ///
    /// A [`FairLock`](crate::FairLock) waits its turn in Redisson's queue; a
    /// [`SpinLock`](crate::SpinLock) sleeps its [`BackOff`](crate::BackOff)
    /// between tries; the others sleep until an unlock message, the
    /// holder's lease, or the deadline.
    ///
    /// # Errors
    ///
    /// A Redis or connection failure ([`ErrorKind::Connection`],
    /// [`ErrorKind::Redis`]), [`ErrorKind::WrongType`] when a foreign key sits
    /// at the lock name (or its queue, or the fencing counter), or another
    /// kind of lock of this thread holds the name,
    /// [`ErrorKind::BadFencingCounter`] for a fenced handle,
    /// [`ErrorKind::ReplicaAcks`] when the client requires replica
    /// acknowledgements that did not come, or [`ErrorKind::Shutdown`]. A
    /// [`Lock`](crate::Lock) in migration mode (see
    /// [`with_migration_mode`](crate::Lock::with_migration_mode)) waits on a
    /// legacy holder's string key by its PTTL, and returns
    /// [`ErrorKind::LegacyLockWithoutTtl`] when that key has no TTL and
    /// still has none 1 s later (a timed wait whose deadline comes first
    /// returns `Ok(None)`; [`try_lock`](Handle::try_lock) reports it at
    /// once). A [`WriteLock`](crate::WriteLock) fails with
    /// [`ErrorKind::InvalidArgument`] at once when the calling thread holds
    /// a read hold of the lock (an upgrade).
    ///
    /// [`ErrorKind::LegacyLockWithoutTtl`]: crate::ErrorKind::LegacyLockWithoutTtl
    /// [`ErrorKind::Connection`]: crate::ErrorKind::Connection
    /// [`ErrorKind::Redis`]: crate::ErrorKind::Redis
    /// [`ErrorKind::WrongType`]: crate::ErrorKind::WrongType
    /// [`ErrorKind::BadFencingCounter`]: crate::ErrorKind::BadFencingCounter
    /// [`ErrorKind::ReplicaAcks`]: crate::ErrorKind::ReplicaAcks
    /// [`ErrorKind::InvalidArgument`]: crate::ErrorKind::InvalidArgument
    /// [`ErrorKind::Shutdown`]: crate::ErrorKind::Shutdown
    pub fn lock(&self) -> Result<Guard<K>> {
        // Without a deadline, acquire returns only once the lock is held.
        self.acquire(Patience::forever())?.ok_or_else(Error::shutdown)
    }

    /// Makes one attempt, never waiting: `Ok(None)` if the lock is held
    /// elsewhere (or another thread of this client is acquiring it; for a
    /// fair lock, if waiters are queued; for a read lock, if a writer
    /// waits).
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock).
    pub fn try_lock(&self) -> Result<Option<Guard<K>>> {
        self.acquire(Patience::once())
    }

    /// Acquires the lock, waiting at most `wait`; `Ok(None)` if it was not
    /// acquired in time (a fair lock's waiter then leaves the queue). At
    /// least one attempt is made, even for a zero wait.
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock).
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<Guard<K>>> {
        self.acquire(Patience::within(wait))
    }

    /// Acquires the lock, waiting until `deadline` at the latest; `Ok(None)`
    /// if it was not acquired by then. At least one attempt is made. An
    /// outage is ridden out until the deadline at most (and the outage
    /// budget, see [`lock`](Handle::lock)); a deadline that passes with Redis
    /// unreachable returns the connection error, not `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<Guard<K>>> {
        self.acquire(Patience::until(deadline))
    }

    /// True if any owner holds the lock (one round trip): for the hash
    /// kinds one `TYPE` (in migration mode a legacy holder's string key
    /// counts); for a [`ReadLock`](crate::ReadLock), any reader (or the
    /// writer holding read holds too, Redisson's read `isLocked`); for a
    /// [`WriteLock`](crate::WriteLock), a writer.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
    /// when a key of another type sits at the lock name.
    pub fn is_locked(&self) -> Result<bool> {
        self.kind.is_locked()
    }

    /// True if the calling thread holds the lock, as Redis sees it (one
    /// `HMGET`).
    ///
    /// # Errors
    ///
    /// As [`hold_count`](Handle::hold_count).
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.hold_count()? > 0)
    }

    /// How many times the calling thread holds the lock (0 when it does
    /// not), as Redis counts it (one `HMGET`).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Handle::is_locked), and
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when the hash at
    /// the name is another family's: a read-write lock's (a `mode` field)
    /// for the hash kinds, a plain hash (no `mode`) for the read-write
    /// sides, whose owner fields look like this thread's.
    pub fn hold_count(&self) -> Result<u32> {
        self.kind.hold_count()
    }

    /// The lock's remaining lease (its key's PTTL), whoever holds it; `None`
    /// when it is not locked or its key has no expiry. One round trip.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
    /// when a key of another type sits at the lock name.
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        let name = self.kind.name();
        let ctx = self.kind.client().context();
        let (kind, pttl): (String, i64) = ctx.calls().with_live_conn(name, |conn| {
            let reply =
                conn.query_all(&[redis::cmd("TYPE").arg(&**name), redis::cmd("PTTL").arg(&**name)])?;
            reply.map_err(|e| Error::from_redis(name, e))
        })?;
        match kind.as_str() {
            "none" | "hash" => Ok(u64::try_from(pttl).ok().map(Duration::from_millis)),
            "string" if self.kind.legacy() => Ok(u64::try_from(pttl).ok().map(Duration::from_millis)),
            _ => Err(Error::wrong_type(name, name)),
        }
    }

    /// Deletes the lock whoever holds it (for a read-write side, if it is
    /// held in that side's mode), and wakes its waiters. Returns whether
    /// there was a lock.
    ///
    /// An administrative escape hatch for a lock whose holder is known
    /// dead: anything the holder still does is unprotected. A keyholder
    /// holder is told ([`LostReason::Gone`](crate::LostReason::Gone)): at
    /// once when it is a thread of this client; otherwise, for every kind,
    /// within milliseconds of the deletion, since its client has Redis tell
    /// it when the key of a lock it holds changes (client-side caching
    /// invalidations, armed once a hold is 20 ms old; a younger hold is
    /// checked when it is armed) and, for the reentrant and read-write
    /// locks, also listens for the unlock message this publishes. A client
    /// cut off from Redis, or on a server without `CLIENT TRACKING` (for
    /// the fair and spin locks), learns at its next renewal or release. A
    /// key of another type at the name is refused, not deleted.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType).
    pub fn force_unlock(&self) -> Result<bool> {
        let ctx = self.kind.client().context();
        ctx.force_unlocking(self.kind.name(), || self.kind.force_unlock())
    }

    /// One acquire call of the calling thread.
    fn acquire(&self, patience: Patience) -> Result<Option<Guard<K>>> {
        self.acquire_for(None, patience)
    }

    /// One acquire call, for the calling thread or for `token` (and
    /// whether it was minted for this call), in a `keyholder.acquire`
    /// span, with its metrics.
    fn acquire_for<O: Ownership>(
        &self,
        token: Option<(&OwnerToken, bool)>,
        patience: Patience,
    ) -> Result<Option<Guard<K, O>>> {
        let (deadline, block) = (patience.deadline(), patience.waits());
        let mode = patience.mode();
        let obs = observe::Acquire::start(self.kind.name(), self.kind.client().context().id(), K::NOUN, mode);
        let acquired = obs.in_scope(|| {
            let ctx = self.kind.client().context();
            ctx.check_running()?;
            let (thread, acquirer) = match token {
                None => (owner::current_thread_id(), Acquirer::Thread),
                Some((token, true)) => (token.local_id(), Acquirer::MintedToken),
                Some((token, false)) => (token.local_id(), Acquirer::PresentedToken),
            };
            // Built for each attempt (a call takes it), which is almost
            // always the only one.
            let owner_id = || match token {
                None => owner::owner_id(ctx.id(), thread),
                Some((token, _)) => token.as_str().to_owned(),
            };
            loop {
                let owner = owner_id();
                let call = Call {
                    ctx,
                    deadline,
                    block,
                    obs: &obs,
                    lease: self.lease,
                    lease_ms: self.lease.ttl_ms(ctx.config().watchdog_timeout),
                    thread,
                    owner,
                    acquirer,
                };
                let Some((hold, keep)) = self.kind.acquire(call)? else { return Ok(None) };
                let client = Arc::clone(self.kind.client().inner());
                let guard = Guard::new(client, hold, keep);
                if !guard.lost_at_birth() {
                    return Ok(Some(guard));
                }
                // Acquired across a failover and found gone by the check at
                // its registration: the caller never sees a lost guard.
                // Dropping it ends the hold without I/O (it is known lost).
                log::debug!(
                    "keyholder: {} '{}' lost as it was acquired; trying again",
                    K::NOUN,
                    guard.name()
                );
                drop(guard);
                if !block || deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(None);
                }
            }
        });
        obs.finish(|| match &acquired {
            // A re-entry adds a guard to the thread's hold.
            Ok(Some(guard)) => observe::AcquireOutcome::Acquired { reentrant: guard.hold_guards() > 1 },
            Ok(None) if mode == observe::Mode::Try => observe::AcquireOutcome::Busy,
            Ok(None) => observe::AcquireOutcome::TimedOut,
            Err(_) => observe::AcquireOutcome::Error,
        });
        acquired
    }
}

/// Holds owned by a token, not a thread (the [`TokenOwned`] kinds: the
/// reentrant, spin and fair locks and both sides of a read-write lock; see
/// [`OwnerToken`] and `docs/guarantees.md`). The guards are
/// `Guard<K, ByToken>` ([`OwnedLockGuard`](crate::OwnedLockGuard),
/// [`OwnedSpinLockGuard`](crate::OwnedSpinLockGuard),
/// [`OwnedFairLockGuard`](crate::OwnedFairLockGuard),
/// [`OwnedReadGuard`](crate::OwnedReadGuard),
/// [`OwnedWriteGuard`](crate::OwnedWriteGuard)): `Send`, released from
/// whichever thread drops them, renewed by the watchdog while they live.
///
/// A token is one owner, as a thread is: its acquisitions and releases
/// should follow one another, not race (two threads of one client
/// acquiring a [`Lock`](crate::Lock) with the same token at once: the
/// second is refused with
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument); on
/// the other kinds, which have no local gate, both may get it, sharing a
/// count of 1, as two processes may).
/// A [`Lock`](crate::Lock)'s token holds queue at its local gate like the
/// client's threads, under their own ids, so a token hold released by
/// another thread passes the gate on as a thread's would; a re-entry with
/// the token never queues there. The other kinds have no gate: a token
/// waits as a thread of its own would (a fair lock's token waits in the
/// queue under the token's owner id). A re-entry with a token adds a count
/// to its field in Redis, whichever guard or process holds it.
impl<K: TokenOwned> Handle<K> {
    /// Acquires the lock for a new token, waiting as long as it takes
    /// ([`lock`](Handle::lock)'s wait). The token is minted by this client
    /// (its UUID, a random number of the token range) and read from the
    /// guard with [`Guard::token`].
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock).
    pub fn lock_owned(&self) -> Result<Guard<K, ByToken>> {
        self.acquire_owned(Patience::forever())?.ok_or_else(Error::shutdown)
    }

    /// One attempt for a new token, never waiting: `Ok(None)` if the lock
    /// is held elsewhere (or a thread of this client is acquiring it).
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock).
    pub fn try_lock_owned(&self) -> Result<Option<Guard<K, ByToken>>> {
        self.acquire_owned(Patience::once())
    }

    /// Acquires the lock for a new token, waiting at most `wait`;
    /// `Ok(None)` if it was not acquired in time.
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock).
    pub fn try_lock_owned_for(&self, wait: Duration) -> Result<Option<Guard<K, ByToken>>> {
        self.acquire_owned(Patience::within(wait))
    }

    /// Acquires the lock for a new token, waiting until `deadline` at the
    /// latest; `Ok(None)` if it was not acquired by then.
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock).
    pub fn try_lock_owned_until(&self, deadline: Instant) -> Result<Option<Guard<K, ByToken>>> {
        self.acquire_owned(Patience::until(deadline))
    }

    /// Acquires the lock for `token`, waiting as long as it takes: a
    /// re-entry, at once, when the token holds the lock already (a live
    /// guard of it in this client, or its field in Redis: a hold taken or
    /// resumed in another process), one more count released by the new
    /// guard; otherwise a new hold owned by the token, waited for as
    /// [`lock`](Handle::lock) waits.
    ///
    /// A token is one owner: two processes acquiring the lock afresh with
    /// the same token at the same moment may both get it (the second finds
    /// the first's field and shares it), so hand a token to one place at a
    /// time, as its hold's guard is.
    ///
    /// # Errors
    ///
    /// As [`lock`](Handle::lock), and
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// when another thread of this client is acquiring a
    /// [`Lock`](crate::Lock) with the same token right now.
    pub fn lock_with(&self, token: &OwnerToken) -> Result<Guard<K, ByToken>> {
        self.acquire_for(Some((token, false)), Patience::forever())?.ok_or_else(Error::shutdown)
    }

    /// [`lock_with`](Handle::lock_with) that makes one attempt, never
    /// waiting (a re-entry never needs to).
    ///
    /// # Errors
    ///
    /// As [`lock_with`](Handle::lock_with).
    pub fn try_lock_with(&self, token: &OwnerToken) -> Result<Option<Guard<K, ByToken>>> {
        self.acquire_for(Some((token, false)), Patience::once())
    }

    /// [`lock_with`](Handle::lock_with) that waits at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`lock_with`](Handle::lock_with).
    pub fn try_lock_with_for(&self, token: &OwnerToken, wait: Duration) -> Result<Option<Guard<K, ByToken>>> {
        self.acquire_for(Some((token, false)), Patience::within(wait))
    }

    /// [`lock_with`](Handle::lock_with) that waits until `deadline` at the
    /// latest.
    ///
    /// # Errors
    ///
    /// As [`lock_with`](Handle::lock_with).
    pub fn try_lock_with_until(
        &self,
        token: &OwnerToken,
        deadline: Instant,
    ) -> Result<Option<Guard<K, ByToken>>> {
        self.acquire_for(Some((token, false)), Patience::until(deadline))
    }

    /// Takes on the hold `token` has on this lock, made elsewhere (another
    /// process of the deployment, or a guard of this client that will not
    /// release it): one round trip that renews the lock's lease to this
    /// handle's lease if, and only if, the token's field is there. The
    /// guard stands for one count of the token's hold: dropping it (or
    /// [`Guard::unlock`]) releases that count, from any thread, and under a
    /// watchdog lease this client renews the hold while the guard lives.
    ///
    /// Both processes may renew: each resets the same field's TTL, one
    /// lease, so that is harmless. Whichever releases the last count frees
    /// the lock; the other's later release, renewal or re-entry then finds
    /// the field gone: `NotOwner` (or `LockLost` once the loss is known),
    /// its hold reported lost, and nothing else's hold touched (every
    /// script compares the owner field).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner) when the token
    /// holds nothing here (released, expired, never held: a stale or
    /// foreign token); a Redis failure; [`ErrorKind::Shutdown`](crate::ErrorKind::Shutdown).
    pub fn resume(&self, token: &OwnerToken) -> Result<Guard<K, ByToken>> {
        let ctx = self.kind.client().context();
        ctx.check_running()?;
        let lease_ms = self.lease.ttl_ms(ctx.config().watchdog_timeout);
        let (hold, keep) = self.kind.resume(ctx, token.as_str(), self.lease, lease_ms)?;
        Ok(Guard::new(Arc::clone(self.kind.client().inner()), hold, keep))
    }

    fn acquire_owned(&self, patience: Patience) -> Result<Option<Guard<K, ByToken>>> {
        let token = OwnerToken::mint(self.kind.client().context().id());
        self.acquire_for(Some((&token, true)), patience)
    }
}

impl<K: Fenced> Handle<K> {
    /// A handle to the same lock whose fresh acquisitions also mint a
    /// fencing token: a 64-bit number, strictly larger for each fresh
    /// acquisition, minted in the same script call into the counter
    /// `redisson_lock_token:{<name>}` (Redisson's `RFencedLock` counter,
    /// shared by fenced [`Lock`](crate::Lock)s, [`FairLock`](crate::FairLock)s
    /// and [`WriteLock`](crate::WriteLock)s, Java's and Rust's: one
    /// sequence). A token is the larger of the counter plus one and the
    /// server's clock in microseconds, so the sequence goes on above every
    /// earlier token after a restart without persistence, a failover that
    /// lost the counter's latest writes or a `DEL` of the counter, provided
    /// the new server's clock is not behind the old one's by more than the
    /// outage lasted (`docs/guarantees.md`, "Fencing tokens"). Re-entries
    /// keep the token of the hold (a fenced re-entry of a hold taken
    /// without one mints one). Read it with [`Guard::fencing_token`]; have
    /// the protected resource refuse writes carrying a token lower than the
    /// highest it has seen. A fenced lock is never handed over by a
    /// release: each acquisition mints its own token. No I/O.
    pub fn fenced(&self) -> Self {
        self.with_kind(self.kind.fence())
    }

    /// True for handles made by [`fenced`](Handle::fenced).
    pub fn is_fenced(&self) -> bool {
        self.kind.is_fenced()
    }

    /// The last fencing token minted for this lock by any client (one `GET`
    /// of the counter); `None` before the first fenced acquisition.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
    /// when the counter key holds something else.
    pub fn last_fencing_token(&self) -> Result<Option<u64>> {
        query(self.kind.client(), self.kind.name(), redis::cmd("GET").arg(names::token_key(self.kind.name())))
    }
}

/// One command about the lock `name`, safe to repeat.
pub(crate) fn query<T: redis::FromRedisValue>(
    client: &Client,
    name: &str,
    cmd: &mut redis::Cmd,
) -> Result<T> {
    client
        .context()
        .calls()
        .with_live_conn(name, |conn| conn.query(cmd)?.map_err(|e| Error::from_redis(name, e)))
}

/// The calling thread's owner id on `client`.
pub(crate) fn current_owner(client: &Client) -> String {
    owner::owner_id(client.id(), owner::current_thread_id())
}

/// `is_locked` of the kinds on Redisson's RLock hash: one `TYPE`; a legacy
/// holder's string key counts when `legacy`.
pub(crate) fn hash_is_locked(client: &Client, name: &str, legacy: bool) -> Result<bool> {
    let kind: String = query(client, name, redis::cmd("TYPE").arg(name))?;
    match kind.as_str() {
        "none" => Ok(false),
        "hash" => Ok(true),
        "string" if legacy => Ok(true),
        _ => Err(Error::wrong_type(name, name)),
    }
}

/// `hold_count` of the kinds on Redisson's RLock hash: one `HMGET` of the
/// thread's field and `mode` (a read-write lock's hash, refused). When
/// `legacy`, a `WRONGTYPE` on a legacy holder's string key means none.
pub(crate) fn hash_hold_count(client: &Client, name: &str, legacy: bool) -> Result<u32> {
    let reply = query(client, name, redis::cmd("HMGET").arg(name).arg(current_owner(client)).arg("mode"));
    let (count, mode): (Option<u32>, Option<String>) = match reply {
        Err(e) if legacy && e.is_wrong_type() => {
            let kind: String = query(client, name, redis::cmd("TYPE").arg(name))?;
            if kind == "string" { (None, None) } else { return Err(e) }
        }
        other => other?,
    };
    if mode.is_some() {
        return Err(Error::another_kinds_lock(name, "a read-write lock (a hash with a \"mode\" field)"));
    }
    Ok(count.unwrap_or(0))
}
