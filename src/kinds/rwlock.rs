//! The read-write lock: Redisson's `RReadWriteLock` (`RedissonReadLock` +
//! `RedissonWriteLock`), many readers or one writer, on Redisson's layout so
//! that a Java service sharing the name contends correctly.
//!
//! Why a kind of its own: readers share, so a read hold is not the hash
//! layout's single owner. Redisson keeps one HASH `<name>` with a `mode`
//! field, one count per read owner and one for the writer, and one timeout
//! key per read hold (`{<name>}:<owner>:rwlock_timeout:<n>`) whose TTL lets
//! a release tell live readers from dead ones. This module adds what the
//! rest of keyholder adds to Redisson's RLock:
//!
//! - **Waiting without polling.** A refused attempt subscribes the lock's
//!   channel `redisson_rwlock:{<name>}` (one subscription per client, shared
//!   by readers and writers, see `wait/channel.rs`), tries again, then
//!   sleeps until a message, the holder's PTTL, or the deadline.
//! - **Writers are not starved.** Redisson lets readers in as long as any
//!   reader holds, so a steady stream of overlapping readers keeps a writer
//!   out forever. A keyholder writer that waits records itself in a sorted
//!   set of waiting writers (`keyholder_rwlock_writers:{<name>}`, each entry
//!   stale after the writer's next retry bound plus slack, so a dead writer
//!   holds nobody back for long); keyholder readers refuse to take a *new*
//!   read hold while it has live entries (a re-entry, and the writer's own
//!   downgrade, still pass). The readers inside drain, the last one's
//!   release publishes `1` (wake all) because a writer waits, and the writer
//!   gets in. Java readers do not know of the set and are not held back.
//! - **No silent upgrade deadlock.** Redisson refuses read → write upgrade
//!   by design and its `lock()` then waits forever; here a write acquire by
//!   a thread holding a read hold fails at once with `InvalidArgument`.
//! - **Fencing** on write holds, from the shared `redisson_lock_token`
//!   counter, as the fenced [`Lock`](crate::Lock) does.
//! - **Holds**: reentrant guards released on drop, read holds renewed with
//!   their timeout keys (`renewal.rs`, Redisson's `ReadLockTask`), write
//!   holds renewed like the reentrant lock's, lost-hold signals.

mod guard;
mod local;
pub(crate) mod renewal;
pub(crate) mod scripts;

pub use guard::{ReadGuard, WriteGuard};

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Client, Inner};
use crate::error::{Error, Result};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::lock::renewal::HashRenewal;
use crate::kinds::rwlock::guard::Held;
use crate::kinds::rwlock::renewal::ReadRenewal;
use crate::kinds::rwlock::scripts::{Acquire, RwKeys, WriteAcquire};
use crate::lease::Lease;
use crate::observe;
use crate::owner;

impl Client {
    /// A read-write lock handle for `name`, with the default
    /// [`Lease::Watchdog`] for both modes. No I/O.
    ///
    /// The Redis key is `name` itself, as in Redisson, so a Java service
    /// calling `getReadWriteLock(name)` shares the lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// a name [`Client::lock`] refuses (empty, longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), control characters, a prefix
    /// reserved for derived keys such as `keyholder_rwlock_writers:`; on a
    /// Redis Cluster braces that make no hash tag).
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        self.inner().validate_name(name)?;
        let shared = Arc::new(Shared { client: self.clone(), keys: Arc::new(RwKeys::new(name)) });
        Ok(ReadWriteLock { shared })
    }
}

/// What the handles of one read-write lock share.
struct Shared {
    client: Client,
    keys: Arc<RwKeys>,
}

/// A handle to one named distributed read-write lock: any number of
/// readers at once, or one writer.
///
/// Get the two sides with [`read`](ReadWriteLock::read) and
/// [`write`](ReadWriteLock::write). Cheap to clone and shareable across
/// threads; no I/O until asked.
///
/// - Both sides are reentrant, per thread.
/// - The thread holding the write lock may also take the read lock (a
///   *downgrade*: release the write guard afterwards and keep reading).
/// - A thread holding only read holds may not take the write lock (an
///   *upgrade*, refused as in Redisson): [`WriteLock::lock`] fails at once
///   with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
///   instead of waiting forever.
/// - A waiting keyholder writer holds back new keyholder readers, so a
///   stream of readers cannot starve it (Java readers are not held back).
///   As with any writer-preferring lock, a thread holding a read hold must
///   not wait for another thread to take a *new* read hold of the same lock:
///   with a writer waiting, that thread waits for the writer, which waits
///   for the first thread's hold. (A thread's own read re-entry is never
///   held back.) Writers arriving faster than they finish hold new readers
///   back in turn.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
/// let rw = client.read_write_lock("catalog")?;
/// {
///     let _reading = rw.read().lock()?;
///     // ... many threads and processes may read at once ...
/// }
/// let writing = rw.write().fenced().lock()?;
/// let token = writing.fencing_token(); // pass it to the store you write to
/// # let _ = token;
/// writing.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWriteLock").field("name", &self.name()).finish_non_exhaustive()
    }
}

impl ReadWriteLock {
    /// The lock name (also its Redis key).
    pub fn name(&self) -> &str {
        &self.shared.keys.name
    }

    /// The channel readers and writers wait on: `redisson_rwlock:{<name>}`.
    pub fn channel(&self) -> &str {
        &self.shared.keys.channel
    }

    /// The read side, with the default [`Lease::Watchdog`].
    pub fn read(&self) -> ReadLock {
        ReadLock { side: Side { shared: Arc::clone(&self.shared), lease: Lease::Watchdog, write: false } }
    }

    /// The write side, with the default [`Lease::Watchdog`], unfenced.
    pub fn write(&self) -> WriteLock {
        WriteLock {
            side: Side { shared: Arc::clone(&self.shared), lease: Lease::Watchdog, write: true },
            fenced: false,
        }
    }
}

/// One side of the lock with its lease.
#[derive(Clone)]
struct Side {
    shared: Arc<Shared>,
    lease: Lease,
    write: bool,
}

/// The read side of a [`ReadWriteLock`]: shared holds.
///
/// The methods mirror [`Lock`](crate::Lock)'s: [`lock`](ReadLock::lock)
/// blocks, [`try_lock`](ReadLock::try_lock) never waits,
/// [`try_lock_for`](ReadLock::try_lock_for) and
/// [`try_lock_until`](ReadLock::try_lock_until) wait at most so long; not
/// getting the lock in time is `Ok(None)`.
#[derive(Clone)]
pub struct ReadLock {
    side: Side,
}

/// The write side of a [`ReadWriteLock`]: one holder at a time, and no
/// reader meanwhile (but its own read holds).
///
/// The methods mirror [`Lock`](crate::Lock)'s (see [`ReadLock`]).
#[derive(Clone)]
pub struct WriteLock {
    side: Side,
    fenced: bool,
}

impl std::fmt::Debug for ReadLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadLock").field("name", &self.name()).field("lease", &self.side.lease).finish()
    }
}

impl std::fmt::Debug for WriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteLock")
            .field("name", &self.name())
            .field("lease", &self.side.lease)
            .field("fenced", &self.fenced)
            .finish()
    }
}

macro_rules! side_common {
    ($side:ident, $guard:ident) => {
        impl $side {
            /// The lock name (also its Redis key).
            pub fn name(&self) -> &str {
                &self.side.shared.keys.name
            }

            /// The lease policy of this handle's acquisitions.
            pub fn lease(&self) -> Lease {
                self.side.lease
            }

            /// A handle to the same side whose acquisitions use `lease`.
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
            /// for a fixed lease outside 1 ms to 30 days.
            pub fn with_lease(&self, lease: Lease) -> Result<$side> {
                lease.validate()?;
                let mut handle = self.clone();
                handle.side.lease = lease;
                Ok(handle)
            }

            /// Acquires, waiting as long as it takes; an outage is ridden
            /// out as by [`Lock::lock`](crate::Lock::lock), within the
            /// client's outage budget
            /// ([`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget)).
            ///
            /// # Errors
            ///
            /// A Redis or connection failure, [`ErrorKind::WrongType`] when a
            /// foreign key sits at the lock name, [`ErrorKind::Shutdown`], and
            /// for the write side [`ErrorKind::InvalidArgument`] when the
            /// calling thread holds a read hold of this lock (an upgrade) and
            /// [`ErrorKind::BadFencingCounter`] for a fenced handle.
            ///
            /// [`ErrorKind::WrongType`]: crate::ErrorKind::WrongType
            /// [`ErrorKind::Shutdown`]: crate::ErrorKind::Shutdown
            /// [`ErrorKind::InvalidArgument`]: crate::ErrorKind::InvalidArgument
            /// [`ErrorKind::BadFencingCounter`]: crate::ErrorKind::BadFencingCounter
            pub fn lock(&self) -> Result<$guard> {
                self.acquire(None, true)?.ok_or_else(Error::shutdown)
            }

            /// Makes one attempt, never waiting: `Ok(None)` if the lock is held
            /// in the other mode (or a writer waits, for a new read hold).
            ///
            /// # Errors
            ///
            /// As `lock`.
            pub fn try_lock(&self) -> Result<Option<$guard>> {
                self.acquire(Some(Instant::now()), false)
            }

            /// Acquires, waiting at most `wait`; `Ok(None)` if not acquired in
            /// time. At least one attempt is made, even for a zero wait.
            ///
            /// # Errors
            ///
            /// As `lock`.
            pub fn try_lock_for(&self, wait: Duration) -> Result<Option<$guard>> {
                match Instant::now().checked_add(wait) {
                    Some(deadline) => self.try_lock_until(deadline),
                    None => self.lock().map(Some),
                }
            }

            /// Acquires, waiting until `deadline` at the latest; `Ok(None)` if
            /// not acquired by then. At least one attempt is made.
            ///
            /// # Errors
            ///
            /// As `lock`.
            pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<$guard>> {
                self.acquire(Some(deadline), true)
            }

            /// True if the calling thread holds this side, as Redis sees it
            /// (one `HEXISTS`).
            ///
            /// # Errors
            ///
            /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
            /// when a key of another type sits at the lock name, or a hash
            /// without a `mode` field (another kind's lock, whose owner
            /// fields look like this thread's).
            pub fn is_held_by_current_thread(&self) -> Result<bool> {
                Ok(self.hold_count()? > 0)
            }

            /// How many times the calling thread holds this side (0 when it does
            /// not), as Redis counts it (one `HMGET`).
            ///
            /// # Errors
            ///
            /// As [`is_held_by_current_thread`](Self::is_held_by_current_thread).
            pub fn hold_count(&self) -> Result<u32> {
                let owner = self.side.current_owner();
                let (count, mode): (Option<u32>, Option<String>) =
                    self.side.query(redis::cmd("HMGET").arg(self.name()).arg(owner).arg("mode"))?;
                if count.is_some() && mode.is_none() {
                    return Err(Error::another_kinds_lock(
                        self.name(),
                        "a lock hash without a \"mode\" field (a Lock, SpinLock or FairLock)",
                    ));
                }
                Ok(count.unwrap_or(0))
            }

            /// Deletes the lock if it is held in this side's mode, whoever
            /// holds it, and wakes the waiters (Redisson's per-mode
            /// `forceUnlock`: the read side publishes `0`, the write side
            /// `1`). Returns whether it did. An administrative escape hatch.
            /// The holders are told ([`LostReason::Gone`](crate::LostReason::Gone)):
            /// this client's at once, another client's within about a round
            /// trip of the message (see [`Lock::force_unlock`](crate::Lock::force_unlock)).
            ///
            /// # Errors
            ///
            /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType).
            pub fn force_unlock(&self) -> Result<bool> {
                let inner = self.side.shared.client.inner();
                let keys = &self.side.shared.keys;
                let write = self.side.write;
                inner.force_unlocking(&keys.name, || {
                    inner.with_live_conn(&keys.name, |conn| {
                        scripts::force_unlock(&inner.scripts, conn, keys, write)
                    })
                })
            }
        }
    };
}

side_common!(ReadLock, ReadGuard);
side_common!(WriteLock, WriteGuard);

impl ReadLock {
    /// True if any reader holds the lock, or the writer holds read holds too
    /// (Redisson's read `isLocked`; one script call).
    ///
    /// # Errors
    ///
    /// A Redis failure.
    pub fn is_locked(&self) -> Result<bool> {
        let inner = self.side.shared.client.inner();
        let keys = &self.side.shared.keys;
        inner.with_live_conn(&keys.name, |conn| scripts::read_is_locked(conn, keys))
    }

    fn acquire(&self, deadline: Option<Instant>, block: bool) -> Result<Option<ReadGuard>> {
        let held =
            self.side.observed(deadline, block, |obs| self.side.acquire(deadline, block, false, obs))?;
        Ok(held.map(|held| ReadGuard { held }))
    }
}

impl WriteLock {
    /// A handle to the same write side whose fresh acquisitions also mint a
    /// fencing token from `redisson_lock_token:{<name>}` (shared with
    /// Redisson's `RFencedLock` and keyholder's fenced
    /// [`Lock`](crate::Lock)), in the acquire script. Re-entries keep the
    /// hold's token. Read it with [`WriteGuard::fencing_token`].
    pub fn fenced(&self) -> WriteLock {
        WriteLock { fenced: true, ..self.clone() }
    }

    /// True for handles made by [`fenced`](WriteLock::fenced).
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The last fencing token minted for this lock name by any client (one
    /// `GET`); `None` before the first.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
    /// when the counter key holds something else.
    pub fn last_fencing_token(&self) -> Result<Option<u64>> {
        self.side.query(redis::cmd("GET").arg(&self.side.shared.keys.token))
    }

    /// True if a writer holds the lock (Redisson's write `isLocked`: the
    /// `mode` field is `write`; one `HGET`).
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType).
    pub fn is_locked(&self) -> Result<bool> {
        let mode: Option<String> = self.side.query(redis::cmd("HGET").arg(self.name()).arg("mode"))?;
        Ok(mode.as_deref() == Some("write"))
    }

    fn acquire(&self, deadline: Option<Instant>, block: bool) -> Result<Option<WriteGuard>> {
        let held = self
            .side
            .observed(deadline, block, |obs| self.side.acquire_write(deadline, block, self.fenced, obs))?;
        Ok(held.map(|held| WriteGuard { held }))
    }
}

impl Side {
    fn inner(&self) -> &Arc<Inner> {
        self.shared.client.inner()
    }

    /// This side's owner id for the calling thread.
    fn current_owner(&self) -> String {
        let owner = owner::owner_id(&self.inner().id, owner::current_thread_id());
        if self.write { scripts::write_owner(&owner) } else { owner }
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> Result<T> {
        let name = &self.shared.keys.name;
        self.inner().with_live_conn(name, |conn| conn.query(cmd)?.map_err(|e| Error::from_redis(name, e)))
    }

    /// Runs one acquire call in a `keyholder.acquire` span, with its metrics.
    fn observed(
        &self,
        deadline: Option<Instant>,
        block: bool,
        f: impl FnOnce(&observe::Acquire<'_>) -> Result<Option<Held>>,
    ) -> Result<Option<Held>> {
        let mode = observe::Mode::of(deadline, block);
        let obs = observe::Acquire::start(&self.shared.keys.name, mode);
        let acquired = obs.in_scope(|| f(&obs));
        obs.finish(|| match &acquired {
            Ok(Some(held)) => observe::AcquireOutcome::Acquired { reentrant: held.hold.guards() > 1 },
            Ok(None) if mode == observe::Mode::Try => observe::AcquireOutcome::Busy,
            Ok(None) => observe::AcquireOutcome::TimedOut,
            Err(_) => observe::AcquireOutcome::Error,
        });
        acquired
    }

    fn acquire_write(
        &self,
        deadline: Option<Instant>,
        block: bool,
        fenced: bool,
        obs: &observe::Acquire<'_>,
    ) -> Result<Option<Held>> {
        let inner = self.inner();
        let name = &self.shared.keys.name;
        // A read hold known lost does not count: Redis has the last word
        // (`write_acquire.lua` refuses an upgrade too).
        if local::current(inner.uuid.as_u128(), name, true).is_none()
            && local::current(inner.uuid.as_u128(), name, false).is_some_and(|h| !h.is_lost())
        {
            return Err(upgrade_refused(name));
        }
        self.acquire(deadline, block, fenced, obs)
    }

    /// Re-enters the thread's live hold of this mode, or takes a new one.
    fn acquire(
        &self,
        deadline: Option<Instant>,
        block: bool,
        fenced: bool,
        obs: &observe::Acquire<'_>,
    ) -> Result<Option<Held>> {
        let inner = self.inner();
        inner.check_running()?;
        let keys = &self.shared.keys;
        let thread = owner::current_thread_id();
        let owner = owner::owner_id(&inner.id, thread);
        let lease_ms = self.lease.ttl_ms(inner.config.watchdog_timeout);
        if let Some(hold) = local::current(inner.uuid.as_u128(), &keys.name, self.write)
            && !hold.is_lost()
        {
            let mint = fenced && hold.token().is_none();
            let sent = Instant::now();
            // A re-entry increments a count: sent once, never repeated.
            let outcome =
                inner.with_conn(&keys.name, |conn| self.attempt(conn, &owner, lease_ms, mint, None))?;
            match outcome {
                Acquire::Acquired { token, replicated } => {
                    if let Some(token) = token {
                        hold.set_token(token);
                    }
                    if replicated == Some(false) {
                        hold.mark_unreplicated();
                    }
                    hold.add_guard();
                    if self.write {
                        // The write script adds the lease to the key's TTL.
                        hold.extend_deadline(sent + Duration::from_millis(lease_ms));
                    }
                    return Ok(Some(Held::new(Arc::clone(inner), Arc::clone(keys), hold, self.write)));
                }
                Acquire::Refused { .. } | Acquire::Upgrade => {
                    // The hold vanished unnoticed: it is lost; take a new one.
                    hold.mark_lost(crate::error::LostReason::Gone);
                    guard::finish(inner, &hold);
                }
            }
        }
        self.contend(Want { deadline, block, fenced }, &owner, thread, lease_ms, obs)
    }

    /// One acquire script call of this side.
    fn attempt(
        &self,
        conn: &mut crate::store::lanes::Session<'_>,
        owner: &str,
        lease_ms: u64,
        mint: bool,
        waiting_ms: Option<u64>,
    ) -> Result<Acquire> {
        let inner = self.inner();
        let keys = &self.shared.keys;
        if self.write {
            let args = WriteAcquire { owner, lease_ms, mint, waiting_ms };
            scripts::write_acquire(&inner.scripts, conn, keys, args)
        } else {
            scripts::read_acquire(&inner.scripts, conn, keys, owner, lease_ms)
        }
    }

    /// Takes a new hold, waiting on the lock's channel between attempts.
    fn contend(
        &self,
        want: Want,
        owner: &str,
        thread: u64,
        lease_ms: u64,
        obs: &observe::Acquire<'_>,
    ) -> Result<Option<Held>> {
        let Want { deadline, block, fenced } = want;
        let inner = self.inner();
        let keys = &self.shared.keys;
        let wait = inner.channel_wait(&keys.name, &keys.channel);
        let watchdog = inner.config.watchdog_timeout;
        // Whether this writer may be recorded among the waiting writers.
        let mut waiting = false;
        // Redis unreachable for a while is waited out (`wait/outage.rs`).
        let mut outage = inner.outage(block);
        let outcome = loop {
            if let Err(e) = inner.check_running() {
                break Err(e);
            }
            let seen = wait.seen();
            // A writer that will wait is recorded as waiting, for at most
            // its next sleep (it re-checks at least every watchdog timeout;
            // before its first sleep it subscribes and retries at once).
            let will_wait = block && deadline.is_none_or(|d| Instant::now() < d);
            let waiting_ms = (self.write && will_wait).then(|| {
                let left = deadline.map_or(watchdog, |d| d.saturating_duration_since(Instant::now()));
                crate::lease::millis_ceil(left.min(watchdog))
            });
            let sent = Instant::now();
            let attempt =
                inner.with_conn(&keys.name, |conn| self.attempt(conn, owner, lease_ms, fenced, waiting_ms));
            if attempt.is_ok() {
                outage.answered();
            }
            let retry_in = match attempt {
                Ok(Acquire::Acquired { token, replicated }) => {
                    let acquisition = Acquisition {
                        owner: if self.write { scripts::write_owner(owner) } else { owner.to_owned() },
                        thread,
                        lease: self.lease,
                        lease_ms,
                        token,
                        sent,
                    };
                    break Ok(Some((acquisition, replicated)));
                }
                Ok(Acquire::Upgrade) => break Err(upgrade_refused(&keys.name)),
                Ok(Acquire::Refused { retry_in }) => {
                    waiting |= waiting_ms.is_some();
                    retry_in
                }
                Err(e) => {
                    if e.is_transport() {
                        // The acquire may have run with its reply lost: give
                        // back what it may have taken (one attempt).
                        self.release_orphan(owner);
                    }
                    match outage.ride(e, deadline) {
                        Ok(until) => {
                            wait.wait_past(seen, until);
                            continue;
                        }
                        Err(e) => break Err(e),
                    }
                }
            };
            let now = Instant::now();
            if !block || deadline.is_some_and(|d| now >= d) {
                break Ok(None);
            }
            if !wait.is_subscribed() {
                // Subscribe, then try again at once: a release between the
                // first try and the subscription would otherwise go unheard.
                if let Err(e) = wait.subscribe(&inner.subscribers, deadline) {
                    match outage.ride(e, deadline) {
                        Ok(until) => wait.wait_past(seen, until),
                        Err(e) => break Err(e),
                    };
                }
                continue;
            }
            let mut bound = retry_in.unwrap_or(watchdog);
            if self.write {
                bound = bound.min(watchdog);
            }
            let until = deadline.map_or(now + bound, |d| d.min(now + bound));
            obs.waiting();
            wait.wait_past(seen, until);
        };
        let acquired = matches!(outcome, Ok(Some(_)));
        if waiting && !acquired {
            // Stop holding readers back; wake them if this was the last
            // waiting writer.
            let _ = inner.with_live_conn(&keys.name, |conn| {
                scripts::write_withdraw(&inner.scripts, conn, keys, owner)
            });
        }
        let Some((acquisition, replicated)) = outcome? else { return Ok(None) };
        if replicated == Some(false) && inner.config.replica_acks_required {
            // Not on the replicas: a failover could lose it. Give it back
            // rather than hand out a hold the caller refused.
            self.release_orphan(owner);
            return Err(Error::replica_acks(&keys.name));
        }
        let hold = Arc::new(Hold::new(inner.next_hold_id(), Arc::clone(&keys.name), acquisition));
        if replicated == Some(false) {
            log::warn!("keyholder: lock '{}' acquired, but not acknowledged by the replicas", keys.name);
            hold.mark_unreplicated();
        }
        local::set(inner.uuid.as_u128(), self.write, &hold);
        if self.lease == Lease::Watchdog {
            let renew = if self.write { HashRenewal::of(inner) } else { ReadRenewal::of(inner) };
            inner.watchdog.register(Arc::clone(&hold), None, renew);
        }
        // Both sides' force unlocks publish on the lock's channel; every
        // hold's owner field is in the lock's hash.
        let channel = Some(Arc::from(keys.channel.as_str()));
        inner.foreign.add(&hold, channel, None, HashRenewal::of(inner));
        Ok(Some(Held::new(Arc::clone(inner), Arc::clone(keys), hold, self.write)))
    }

    /// One best-effort release of a hold an acquire may have taken with its
    /// reply lost, or that the caller refuses.
    fn release_orphan(&self, owner: &str) {
        let inner = self.inner();
        let keys = &self.shared.keys;
        let lease_ms = self.lease.ttl_ms(inner.config.watchdog_timeout);
        // One attempt: whether it ran or not, what is left expires.
        let _ = inner.run_latched(&keys.name, owner::current_thread_id(), false, |conn, latch| {
            if self.write {
                scripts::write_release(&inner.scripts, conn, keys, owner, lease_ms, latch)
            } else {
                scripts::read_release(&inner.scripts, conn, keys, owner, latch)
            }
        });
    }
}

/// What an acquire call asked for.
#[derive(Debug, Clone, Copy)]
struct Want {
    /// Wait at most until then (`None`: as long as it takes).
    deadline: Option<Instant>,
    /// Wait at all (`false`: one attempt).
    block: bool,
    /// Mint a fencing token (write side).
    fenced: bool,
}

/// The error for a write acquire by a thread holding a read hold.
fn upgrade_refused(name: &str) -> Error {
    Error::invalid_argument(format!(
        "read-write lock '{name}': the calling thread holds a read hold, and a read hold is never \
         upgraded to a write hold (as in Redisson, where the write lock would wait forever); \
         release the read guards first"
    ))
}
