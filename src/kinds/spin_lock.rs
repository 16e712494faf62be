//! SpinLock: Redisson's `RedissonSpinLock`, for deployments without pub/sub.
//!
//! Same hash layout as the reentrant lock (`<name>` → `{owner: count}`,
//! the PTTL as lease), renewed by the same watchdog script, but no channel
//! at all: acquiring never subscribes, releasing never publishes. A refused
//! thread sleeps a back-off (Redisson's exponential 1 ms → 128 ms with
//! jitter, or a constant pause; see `spin_lock/back_off.rs`) and tries
//! again, until its deadline. Why a kind that polls: some deployments have
//! no pub/sub (proxies that do not forward it, very large clusters where
//! Redisson users avoid its broadcast, #3349), and there a bounded,
//! jittered retry is the only way to wait. Everywhere else, [`Lock`]
//! waits for less, at less cost.
//!
//! A Java `RedissonSpinLock` on the same name shares the lock exactly. A
//! Java `RLock` waiter on the same name is not woken by a spin-lock release
//! (nothing is published) and waits out its sleep (the holder's PTTL at the
//! latest), as with Redisson's own spin lock.
//!
//! [`Lock`]: crate::Lock

mod back_off;
mod guard;
mod holds;
mod scripts;

pub use back_off::BackOff;
pub use guard::SpinLockGuard;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Client, Inner};
use crate::error::{Error, ErrorKind, Result};
use crate::holds::hash_kinds::{self, HashKind};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::lock::renewal::HashRenewal;
use crate::lease::Lease;
use crate::observe;
use crate::owner;
use scripts::{Acquire, Mode};

impl Client {
    /// A spin-lock handle for `name` with the default [`Lease::Watchdog`]
    /// and [`BackOff::default`] (Redisson's `getSpinLock(name)`). No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// a name [`Client::lock`] refuses.
    pub fn spin_lock(&self, name: &str) -> Result<SpinLock> {
        self.inner().validate_name(name)?;
        Ok(SpinLock {
            client: self.clone(),
            name: Arc::from(name),
            lease: Lease::Watchdog,
            back_off: BackOff::default(),
        })
    }
}

/// A handle to one named spin lock: a reentrant lock that never uses
/// pub/sub.
///
/// The API is [`Lock`](crate::Lock)'s: [`lock`](SpinLock::lock) blocks,
/// [`try_lock`](SpinLock::try_lock) makes one attempt,
/// [`try_lock_for`](SpinLock::try_lock_for) and
/// [`try_lock_until`](SpinLock::try_lock_until) wait at most so long
/// (`Ok(None)` when time runs out). Between refused attempts the thread
/// sleeps its [`BackOff`], never past its deadline. Reentrant per thread;
/// renewed by the client's watchdog while held (or a fixed lease); the
/// guard releases on drop.
///
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
/// let lock = client.spin_lock("reports:daily")?.with_back_off(keyholder::BackOff::constant())?;
/// if let Some(guard) = lock.try_lock_for(Duration::from_secs(2))? {
///     // ... guarded work ...
///     guard.unlock()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SpinLock {
    client: Client,
    name: Arc<str>,
    lease: Lease,
    back_off: BackOff,
}

impl std::fmt::Debug for SpinLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("back_off", &self.back_off)
            .finish_non_exhaustive()
    }
}

impl SpinLock {
    /// The lock name (also its Redis key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lease policy of this handle's acquisitions.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The pause policy between refused attempts.
    pub fn back_off(&self) -> BackOff {
        self.back_off
    }

    /// A handle to the same lock whose acquisitions use `lease`. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a fixed lease outside 1 ms to 30 days.
    pub fn with_lease(&self, lease: Lease) -> Result<SpinLock> {
        lease.validate()?;
        Ok(SpinLock { lease, ..self.clone() })
    }

    /// A handle to the same lock that pauses by `back_off` between refused
    /// attempts. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] for a zero or negative-growth policy, an
    /// initial pause above the maximum, or a pause above 60 s.
    pub fn with_back_off(&self, back_off: BackOff) -> Result<SpinLock> {
        back_off.validate()?;
        Ok(SpinLock { back_off, ..self.clone() })
    }

    /// Acquires the lock, waiting as long as it takes; an outage is ridden
    /// out as by [`Lock::lock`](crate::Lock::lock) (between tries, the
    /// outage's back-off), within the client's outage budget
    /// ([`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget)).
    ///
    /// # Errors
    ///
    /// A Redis or connection failure, [`ErrorKind::WrongType`] when a key of
    /// another type sits at the name, [`ErrorKind::ReplicaAcks`] when the
    /// client requires replica acknowledgements that did not come, or
    /// [`ErrorKind::Shutdown`].
    pub fn lock(&self) -> Result<SpinLockGuard> {
        self.acquire(None, true)?.ok_or_else(Error::shutdown)
    }

    /// Makes one attempt, never waiting: `Ok(None)` if the lock is held
    /// elsewhere.
    ///
    /// # Errors
    ///
    /// As [`lock`](SpinLock::lock).
    pub fn try_lock(&self) -> Result<Option<SpinLockGuard>> {
        self.acquire(Some(Instant::now()), false)
    }

    /// Acquires the lock, trying until `wait` has passed; `Ok(None)` if it
    /// was not acquired by then. At least one attempt is made.
    ///
    /// # Errors
    ///
    /// As [`lock`](SpinLock::lock).
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<SpinLockGuard>> {
        match Instant::now().checked_add(wait) {
            Some(deadline) => self.try_lock_until(deadline),
            None => self.lock().map(Some),
        }
    }

    /// Acquires the lock, trying until `deadline`; `Ok(None)` if it was not
    /// acquired by then. At least one attempt is made.
    ///
    /// # Errors
    ///
    /// As [`lock`](SpinLock::lock).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<SpinLockGuard>> {
        self.acquire(Some(deadline), true)
    }

    /// True if any owner holds the lock (one `TYPE`).
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`].
    pub fn is_locked(&self) -> Result<bool> {
        let kind: String = self.query(redis::cmd("TYPE").arg(&*self.name))?;
        match kind.as_str() {
            "none" => Ok(false),
            "hash" => Ok(true),
            _ => Err(Error::wrong_type(&self.name, &self.name)),
        }
    }

    /// True if the calling thread holds the lock, as Redis sees it (one
    /// `HMGET`).
    ///
    /// # Errors
    ///
    /// As [`hold_count`](SpinLock::hold_count).
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.hold_count()? > 0)
    }

    /// How many times the calling thread holds the lock (0 when it does
    /// not), as Redis counts it (one `HMGET`).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](SpinLock::is_locked), and
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when the hash
    /// at the name is a read-write lock's (its read holders' fields look
    /// like this thread's owner id).
    pub fn hold_count(&self) -> Result<u32> {
        let (count, mode): (Option<u32>, Option<String>) =
            self.query(redis::cmd("HMGET").arg(&*self.name).arg(self.current_owner()).arg("mode"))?;
        if mode.is_some() {
            return Err(Error::another_kinds_lock(
                &self.name,
                "a read-write lock (a hash with a \"mode\" field)",
            ));
        }
        Ok(count.unwrap_or(0))
    }

    /// The lock's remaining lease (its PTTL), whoever holds it; `None` when
    /// it is not locked or has no expiry. One round trip.
    ///
    /// # Errors
    ///
    /// A Redis failure.
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        let pttl: i64 = self.query(redis::cmd("PTTL").arg(&*self.name))?;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// Deletes the lock whoever holds it; returns whether there was one.
    /// Publishes nothing (as Redisson's spin lock): waiters find it free at
    /// their next try. A holder of this client is told at once
    /// ([`LostReason::Gone`](crate::LostReason::Gone)); one of another
    /// client learns of it at its next renewal or release. A key of
    /// another type is refused, not deleted.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`].
    pub fn force_unlock(&self) -> Result<bool> {
        let inner = self.client.inner();
        inner.force_unlocking(&self.name, || {
            inner.with_live_conn(&self.name, |conn| scripts::force_unlock(conn, &self.name))
        })
    }

    fn current_owner(&self) -> String {
        owner::owner_id(self.client.id(), owner::current_thread_id())
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> Result<T> {
        self.client
            .inner()
            .with_live_conn(&self.name, |conn| conn.query(cmd)?.map_err(|e| Error::from_redis(&self.name, e)))
    }

    fn acquire(&self, deadline: Option<Instant>, block: bool) -> Result<Option<SpinLockGuard>> {
        let mode = observe::Mode::of(deadline, block);
        let obs = observe::Acquire::start(&self.name, mode);
        let acquired = obs.in_scope(|| {
            let inner = self.client.inner();
            inner.check_running()?;
            let hold = self.acquire_hold(inner, deadline, block, &obs)?;
            Ok(hold.map(|hold| SpinLockGuard::new(Arc::clone(inner), hold)))
        });
        obs.finish(|| match &acquired {
            Ok(Some(guard)) => observe::AcquireOutcome::Acquired { reentrant: guard.hold_guards() > 1 },
            Ok(None) if mode == observe::Mode::Try => observe::AcquireOutcome::Busy,
            Ok(None) => observe::AcquireOutcome::TimedOut,
            Err(_) => observe::AcquireOutcome::Error,
        });
        acquired
    }

    fn acquire_hold(
        &self,
        inner: &Arc<Inner>,
        deadline: Option<Instant>,
        block: bool,
        obs: &observe::Acquire<'_>,
    ) -> Result<Option<Arc<Hold>>> {
        let client = inner.uuid.as_u128();
        let thread = owner::current_thread_id();
        let owner = owner::owner_id(&inner.id, thread);
        let lease_ms = self.lease.ttl_ms(inner.config.watchdog_timeout);
        if let Some(hold) = holds::current(client, &self.name).filter(|h| !h.is_lost() && !h.is_releasing())
            && let Some(hold) = self.reenter(inner, hold, lease_ms)?
        {
            return Ok(Some(hold));
        }
        hash_kinds::check(client, &self.name, HashKind::SpinLock)?;
        let mut sleeps = self.back_off.sleeps();
        // Redis unreachable for a while is waited out (`wait/outage.rs`).
        let mut outage = inner.outage(block);
        loop {
            inner.check_running()?;
            let sent = Instant::now();
            let attempt = inner.with_live_conn(&self.name, |conn| {
                scripts::acquire(&inner.scripts, conn, &self.name, lease_ms, &owner, Mode::Fresh)
            });
            if attempt.is_ok() {
                outage.answered();
            }
            let remaining = match attempt {
                Ok(Acquire::Acquired { replicated }) => {
                    if replicated == Some(false) && inner.config.replica_acks_required {
                        self.give_back(inner, &owner, lease_ms);
                        return Err(Error::replica_acks(&self.name));
                    }
                    let acquisition =
                        Acquisition { owner, thread, lease: self.lease, lease_ms, token: None, sent };
                    let hold = Arc::new(Hold::new(inner.next_hold_id(), Arc::clone(&self.name), acquisition));
                    if replicated == Some(false) {
                        log::warn!(
                            "keyholder: spin lock '{}' acquired, but not acknowledged by the replicas",
                            self.name
                        );
                        hold.mark_unreplicated();
                    }
                    if self.lease == Lease::Watchdog {
                        inner.watchdog.register(Arc::clone(&hold), None, HashRenewal::of(inner));
                    }
                    // Nothing is published on a spin lock's force unlock:
                    // nothing to listen on, but this client's finds it here.
                    inner.foreign.add(&hold, None, None, HashRenewal::of(inner));
                    holds::set(client, &hold);
                    hash_kinds::note(client, HashKind::SpinLock, &hold);
                    return Ok(Some(hold));
                }
                Ok(Acquire::Held { remaining }) => Ok(remaining),
                Ok(Acquire::Free) => Ok(Some(Duration::ZERO)),
                // A fresh attempt is safe to repeat: one whose reply was
                // lost found this owner's field and takes it. With nothing
                // to wake it, the outage's back-off is the pause.
                Err(e) => match outage.ride(e, deadline) {
                    Ok(until) => Err(until),
                    Err(e) => {
                        if e.is_transport() || e.kind() == ErrorKind::UnexpectedReply {
                            // The script may have run with its reply lost:
                            // give back what it may have taken, in one attempt.
                            self.give_back(inner, &owner, lease_ms);
                        }
                        return Err(e);
                    }
                },
            };
            let now = Instant::now();
            let pause = match remaining {
                Err(until) => until.saturating_duration_since(now),
                Ok(remaining) => {
                    if !block || deadline.is_some_and(|d| now >= d) {
                        return Ok(None);
                    }
                    obs.waiting();
                    // The back-off, but never past the holder's lease (it is
                    // free then at the latest) nor past the deadline.
                    let mut pause = sleeps.next_sleep();
                    if let Some(remaining) = remaining {
                        pause = pause.min(remaining.max(Duration::from_millis(1)));
                    }
                    if let Some(deadline) = deadline {
                        pause = pause.min(deadline.saturating_duration_since(now));
                    }
                    pause
                }
            };
            // The one sleep between tries in keyholder: a spin lock has
            // nothing to wait on (see the module docs).
            std::thread::sleep(pause);
        }
    }

    /// Re-enters the thread's live `hold`: `Some` with one more guard, or
    /// `None` when the hold vanished unnoticed (it is marked lost, and the
    /// caller takes a new hold).
    fn reenter(&self, inner: &Inner, hold: Arc<Hold>, lease_ms: u64) -> Result<Option<Arc<Hold>>> {
        let reenter = || {
            inner.with_conn(&self.name, |conn| {
                scripts::acquire(&inner.scripts, conn, &self.name, lease_ms, &hold.owner, Mode::Reentry)
            })
        };
        let mut sent = Instant::now();
        let mut outcome = reenter();
        if let Err(e) = &outcome
            && e.is_transport()
        {
            // A re-entry increments: ask Redis whether it ran before
            // sending it again.
            let count: Option<u32> = self.query(redis::cmd("HGET").arg(&*self.name).arg(&hold.owner))?;
            let guards = hold.guards();
            outcome = match count {
                Some(c) if c == guards + 1 => Ok(Acquire::Acquired { replicated: None }),
                Some(c) if c == guards => {
                    sent = Instant::now();
                    reenter()
                }
                None => Ok(Acquire::Free),
                Some(_) => outcome,
            };
        }
        match outcome? {
            Acquire::Acquired { replicated } => {
                if replicated == Some(false) {
                    hold.mark_unreplicated();
                }
                hold.add_guard();
                hold.extend_deadline(sent + Duration::from_millis(lease_ms));
                Ok(Some(hold))
            }
            Acquire::Held { .. } | Acquire::Free => {
                hold.mark_lost(crate::error::LostReason::Gone);
                Ok(None)
            }
        }
    }

    /// One unlatched release attempt for `owner`, for an acquire whose
    /// reply was lost or refused by this client.
    fn give_back(&self, inner: &Inner, owner: &str, lease_ms: u64) {
        let _ = inner.with_live_conn(&self.name, |conn| {
            scripts::release(&inner.scripts, conn, &self.name, lease_ms, owner, None)
        });
    }
}
