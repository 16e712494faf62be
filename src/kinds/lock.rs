//! A lock handle: acquisition, waiting, and inspection.
//!
//! Acquiring runs in three steps:
//!
//! 1. **Re-entry**: a thread that already holds the lock runs the acquire
//!    script again (the hold count lives in Redis) and gets another guard.
//! 2. **The gate**: threads of this client queue locally, FIFO, so that one
//!    of them at a time talks to Redis (see `wait/entry.rs`).
//! 3. **Contention**: try the acquire script; if another owner holds the
//!    lock, subscribe to its unlock channel, try again (a release between the
//!    first try and the subscription would otherwise go unnoticed), then
//!    sleep until an unlock message, the holder's remaining lease, or the
//!    caller's deadline, whichever is first, and repeat. No connection is
//!    held while sleeping.

mod confirm;
mod guard;
mod release;
pub(crate) mod renewal;
pub(crate) mod scripts;

pub use guard::LockGuard;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::holds::hash_kinds::{self, HashKind};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::lock::renewal::HashRenewal;
use crate::kinds::lock::scripts::{Acquire, AcquireArgs, Confirm, Turns};
use crate::lease::Lease;
use crate::names;
use crate::observe;
use crate::owner;
use crate::pubsub::subscriber::{Grant, Subscription};
use crate::wait::entry::{Entered, Entry, GateRedis, Successor};

impl Client {
    /// A lock handle for `name` with the default [`Lease::Watchdog`]. No I/O.
    ///
    /// The Redis key is `name` itself, as in Redisson, so a Java service
    /// calling `getLock(name)` contends for the same lock.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for an empty name, a name longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, or one with control
    /// characters; on a Redis Cluster, also for a name with a `{` but no
    /// hash tag (`a{b`, `x{}y`), whose keys would fall in different slots.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        self.lock_with_lease(name, Lease::Watchdog)
    }

    /// A lock handle for `name` whose acquisitions use `lease`. No I/O.
    ///
    /// # Errors
    ///
    /// As [`lock`](Client::lock), and [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a fixed
    /// lease outside 1 ms to 30 days.
    pub fn lock_with_lease(&self, name: &str, lease: Lease) -> Result<Lock> {
        self.inner().validate_name(name)?;
        lease.validate()?;
        Ok(Lock::new(self.clone(), name, lease))
    }
}

/// A handle to one named distributed lock.
///
/// Cheap to clone (`Arc`s inside) and shareable across threads; it does no
/// I/O until asked. The guard-returning methods follow parking_lot's
/// vocabulary: [`lock`](Lock::lock) blocks, [`try_lock`](Lock::try_lock)
/// never waits, [`try_lock_for`](Lock::try_lock_for) and
/// [`try_lock_until`](Lock::try_lock_until) wait at most so long. Not getting
/// the lock in time is `Ok(None)`, not an error.
///
/// The lock is reentrant: a thread that holds it may acquire it again, and
/// each acquisition is released by its own guard.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
///
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
/// let lock = client.lock("reports:daily")?;
/// match lock.try_lock_for(Duration::from_secs(2))? {
///     Some(guard) => {
///         // ... run the job ...
///         guard.unlock()?;
///     }
///     None => println!("another node is running it"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Client,
    name: Arc<str>,
    channel: Arc<str>,
    lease: Lease,
    /// The fencing-token counter, for fenced handles.
    token_key: Option<Arc<str>>,
    /// Migration mode: a string key at the name is a legacy holder.
    migration: bool,
    /// A waiting call rides out an outage (off for a RedLock's masters).
    rides_outages: bool,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("migration", &self.migration)
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(client: Client, name: &str, lease: Lease) -> Self {
        let migration = client.inner().config.migration_mode;
        Lock {
            migration,
            client,
            name: Arc::from(name),
            channel: Arc::from(names::unlock_channel(name)),
            lease,
            token_key: None,
            rides_outages: true,
        }
    }

    /// A handle to the same lock whose waiting calls return an outage's
    /// error at once instead of riding it out: a RedLock asks the next
    /// master rather than wait for a dead one.
    pub(crate) fn failing_fast(&self) -> Lock {
        Lock { rides_outages: false, ..self.clone() }
    }

    /// The client this handle acquires through.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The lock name (also its Redis key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lease policy of this handle's acquisitions.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// The unlock channel waiters listen on: `redisson_lock__channel:{<name>}`.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// A handle to the same lock whose acquisitions use `lease`: the per-call
    /// form, as in `lock.with_lease(Lease::Fixed(d)).try_lock()`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a fixed lease outside 1 ms to 30 days.
    pub fn with_lease(&self, lease: Lease) -> Result<Lock> {
        lease.validate()?;
        Ok(Lock { lease, ..self.clone() })
    }

    /// A handle to the same lock whose fresh acquisitions also mint a
    /// fencing token: a 64-bit number, strictly larger for each fresh
    /// acquisition, taken in the same script call from the counter
    /// `redisson_lock_token:{<name>}` (Redisson's `RFencedLock` counter, so
    /// Java and Rust holders share one sequence). Re-entries keep the token
    /// of the hold. Read it with [`LockGuard::fencing_token`]; have the
    /// protected resource refuse writes carrying a token lower than the
    /// highest it has seen. `docs/guarantees.md` explains what a Redis restart
    /// without persistence does to the sequence.
    pub fn fenced(&self) -> Lock {
        Lock { token_key: Some(Arc::from(names::token_key(&self.name))), ..self.clone() }
    }

    /// A handle to the same lock with migration mode on or off, whatever
    /// the client's setting: on, a string key at the lock's name (a
    /// hand-rolled `SET NX` lock of code not yet migrated) counts as held by
    /// a legacy holder, is waited on until it is deleted or expires, and is
    /// never modified. See
    /// [`ClientBuilder::migration_mode`](crate::ClientBuilder::migration_mode)
    /// and `docs/migrating.md`. No I/O.
    pub fn with_migration_mode(&self, on: bool) -> Lock {
        Lock { migration: on, ..self.clone() }
    }

    /// True when this handle treats a string key at its name as a legacy
    /// holder (see [`with_migration_mode`](Lock::with_migration_mode)).
    pub fn is_migration_mode(&self) -> bool {
        self.migration
    }

    /// True for handles made by [`fenced`](Lock::fenced).
    pub fn is_fenced(&self) -> bool {
        self.token_key.is_some()
    }

    /// The last fencing token minted for this lock by any client (one `GET`
    /// of the counter); `None` before the first fenced acquisition.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when the counter key holds
    /// something else.
    pub fn last_fencing_token(&self) -> Result<Option<u64>> {
        self.query(redis::cmd("GET").arg(names::token_key(&self.name)))
    }

    /// Acquires the lock, waiting as long as it takes.
    ///
    /// The wait rides out an outage (Redis restarting, a failover): while
    /// Redis is unreachable the thread keeps waiting, tries again when the
    /// client's pub/sub connection is back (or after a back-off of at most
    /// 1 s), and acquires once Redis serves again. It returns the
    /// connection error only once the outage has lasted the client's outage
    /// budget ([`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget), 4.5 s by default); [`try_lock_for`](Lock::try_lock_for)
    /// and [`try_lock_until`](Lock::try_lock_until) ride it out until their
    /// deadline at most, [`try_lock`](Lock::try_lock) not at all.
    ///
    /// # Errors
    ///
    /// A Redis or connection failure ([`ErrorKind::Connection`],
    /// [`ErrorKind::Redis`]), [`ErrorKind::WrongType`] when a foreign key sits
    /// at the lock name (or the fencing counter),
    /// [`ErrorKind::LegacyLockWithoutTtl`] in migration mode when a string
    /// key at the lock name has no TTL and still has none 1 s later (an old
    /// `SETNX` + `EXPIRE` holder sets it one round trip after the key; a
    /// timed wait whose deadline comes first returns `Ok(None)`;
    /// [`try_lock`](Lock::try_lock), which cannot wait, reports it at once),
    /// [`ErrorKind::BadFencingCounter`], or [`ErrorKind::Shutdown`].
    ///
    /// In migration mode (see [`with_migration_mode`](Lock::with_migration_mode))
    /// a legacy holder's string key is waited on like any holder, but it
    /// publishes no unlock message: the wait re-checks at the key's PTTL
    /// (each time again if the legacy holder renews it).
    ///
    /// [`ErrorKind::LegacyLockWithoutTtl`]: crate::ErrorKind::LegacyLockWithoutTtl
    /// [`ErrorKind::Connection`]: crate::ErrorKind::Connection
    /// [`ErrorKind::Redis`]: crate::ErrorKind::Redis
    /// [`ErrorKind::WrongType`]: crate::ErrorKind::WrongType
    /// [`ErrorKind::BadFencingCounter`]: crate::ErrorKind::BadFencingCounter
    /// [`ErrorKind::Shutdown`]: crate::ErrorKind::Shutdown
    pub fn lock(&self) -> Result<LockGuard> {
        // Without a deadline, acquire returns only once the lock is held.
        self.acquire(None, true)?.ok_or_else(Error::shutdown)
    }

    /// Makes one attempt, never waiting: `Ok(None)` if the lock is held
    /// elsewhere (or another thread of this client is acquiring it).
    ///
    /// # Errors
    ///
    /// As [`lock`](Lock::lock).
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Some(Instant::now()), false)
    }

    /// Acquires the lock, waiting at most `wait`; `Ok(None)` if it was not
    /// acquired in time. At least one attempt is made, even for a zero wait.
    ///
    /// # Errors
    ///
    /// As [`lock`](Lock::lock).
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        match Instant::now().checked_add(wait) {
            Some(deadline) => self.try_lock_until(deadline),
            None => self.lock().map(Some),
        }
    }

    /// Acquires the lock, waiting until `deadline` at the latest; `Ok(None)`
    /// if it was not acquired by then. At least one attempt is made. An
    /// outage is ridden out until the deadline at most (and the outage
    /// budget, see [`lock`](Lock::lock)); a deadline that passes with Redis
    /// unreachable returns the connection error, not `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`lock`](Lock::lock).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard>> {
        self.acquire(Some(deadline), true)
    }

    /// True if any owner holds the lock (one `TYPE` command); in migration
    /// mode, a legacy holder's string key counts.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when a key of another type
    /// sits at the lock name.
    pub fn is_locked(&self) -> Result<bool> {
        let kind: String = self.query(redis::cmd("TYPE").arg(&*self.name))?;
        match kind.as_str() {
            "none" => Ok(false),
            "hash" => Ok(true),
            "string" if self.migration => Ok(true),
            _ => Err(Error::wrong_type(&self.name, &self.name)),
        }
    }

    /// True if the calling thread holds the lock, as Redis sees it
    /// (one `HMGET`).
    ///
    /// # Errors
    ///
    /// As [`hold_count`](Lock::hold_count).
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.hold_count()? > 0)
    }

    /// How many times the calling thread holds the lock (0 when it does
    /// not), as Redis counts it (one `HMGET`).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Lock::is_locked), and
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when the hash
    /// at the name is a read-write lock's (its read holders' fields look
    /// like this thread's owner id).
    pub fn hold_count(&self) -> Result<u32> {
        let reply = self.query(redis::cmd("HMGET").arg(&*self.name).arg(self.current_owner()).arg("mode"));
        let (count, mode): (Option<u32>, Option<String>) = self.legacy_holds_none(reply, (None, None))?;
        if mode.is_some() {
            return Err(Error::another_kinds_lock(
                &self.name,
                "a read-write lock (a hash with a \"mode\" field)",
            ));
        }
        Ok(count.unwrap_or(0))
    }

    /// In migration mode, `WRONGTYPE` from a hash command on a legacy
    /// holder's string key means this thread holds nothing: `none`.
    fn legacy_holds_none<T>(&self, reply: Result<T>, none: T) -> Result<T> {
        match reply {
            Err(e) if self.migration && e.is_wrong_type() => {
                let kind: String = self.query(redis::cmd("TYPE").arg(&*self.name))?;
                if kind == "string" { Ok(none) } else { Err(e) }
            }
            other => other,
        }
    }

    /// The lock's remaining lease (its key's PTTL), whoever holds it; `None`
    /// when it is not locked or its key has no expiry. One round trip.
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Lock::is_locked).
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        let (kind, pttl): (String, i64) = self.client.inner().with_live_conn(&self.name, |conn| {
            let reply =
                conn.query_all(&[redis::cmd("TYPE").arg(&*self.name), redis::cmd("PTTL").arg(&*self.name)])?;
            reply.map_err(|e| Error::from_redis(&self.name, e))
        })?;
        match kind.as_str() {
            "none" | "hash" => Ok(u64::try_from(pttl).ok().map(Duration::from_millis)),
            "string" if self.migration => Ok(u64::try_from(pttl).ok().map(Duration::from_millis)),
            _ => Err(Error::wrong_type(&self.name, &self.name)),
        }
    }

    /// Deletes the lock whoever holds it, and wakes a waiter. Returns whether
    /// there was a lock.
    ///
    /// This is an administrative escape hatch for a lock whose holder is
    /// known dead: anything the holder still does is unprotected. A
    /// keyholder holder is told ([`LostReason::Gone`]): at once when it is
    /// a thread of this client, and otherwise within about a round trip of
    /// the unlock message this publishes, since its client listens on the
    /// channels of the locks it holds (a hold younger than 20 ms is checked
    /// when that listening starts, 20 to 30 ms after its acquisition; a
    /// client cut off from Redis learns at its next renewal or release). A key of another
    /// type at the name is refused, not deleted.
    ///
    /// [`LostReason::Gone`]: crate::LostReason::Gone
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType).
    pub fn force_unlock(&self) -> Result<bool> {
        let inner = self.client.inner();
        inner.force_unlocking(&self.name, || {
            inner.with_live_conn(&self.name, |conn| {
                scripts::force_unlock(&inner.scripts, conn, &self.name, &self.channel)
            })
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

    fn acquire(&self, deadline: Option<Instant>, block: bool) -> Result<Option<LockGuard>> {
        let mode = observe::Mode::of(deadline, block);
        let obs = observe::Acquire::start(&self.name, mode);
        let acquired = obs.in_scope(|| {
            let inner = self.client.inner();
            inner.check_running()?;
            let entry = inner.entry(&self.name);
            let acquired = self.acquire_in(&entry, deadline, block, &obs)?;
            Ok(acquired.map(|hold| LockGuard::new(Arc::clone(inner), entry, hold)))
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

    fn acquire_in(
        &self,
        entry: &Arc<Entry>,
        deadline: Option<Instant>,
        block: bool,
        obs: &observe::Acquire<'_>,
    ) -> Result<Option<Arc<Hold>>> {
        let inner = self.client.inner();
        let thread = owner::current_thread_id();
        let owner = owner::owner_id(&inner.id, thread);
        let lease_ms = self.lease.ttl_ms(inner.config.watchdog_timeout);

        if let Some(hold) = entry.hold_of(thread)
            && let Some(hold) = self.reenter(entry, hold, &owner, lease_ms)?
        {
            return Ok(Some(hold));
        }

        hash_kinds::check(inner.uuid.as_u128(), &entry.keys.name, HashKind::Lock)?;
        let successor =
            Successor { thread, owner, lease: self.lease, lease_ms, fenced: self.token_key.is_some() };
        match entry.enter_gate(&successor, deadline, block, || obs.waiting(), self)? {
            None => return Ok(None),
            Some(Entered::Handed(hold)) => {
                hash_kinds::note(inner.uuid.as_u128(), HashKind::Lock, &hold);
                return Ok(Some(hold));
            }
            Some(Entered::Gate) => {}
        }
        match self.contend(entry, &successor, deadline, block, obs) {
            Ok(Some(Won { replicated: Some(false), .. })) if inner.config.replica_acks_required => {
                // Not on the replicas: a failover could lose it. Give it
                // back rather than hand out a hold the caller refused.
                let _ = inner.release_orphan(entry, &successor.owner, lease_ms);
                entry.leave_gate(thread);
                Err(Error::replica_acks(&self.name))
            }
            Ok(Some(Won { sent, token, replicated })) => {
                let owner = successor.owner;
                let acquisition = Acquisition { owner, thread, lease: self.lease, lease_ms, token, sent };
                let hold =
                    Arc::new(Hold::new(inner.next_hold_id(), Arc::clone(&entry.keys.name), acquisition));
                if replicated == Some(false) {
                    log::warn!(
                        "keyholder: lock '{}' acquired, but not acknowledged by the replicas",
                        self.name
                    );
                    hold.mark_unreplicated();
                }
                entry.set_held(Arc::clone(&hold));
                hash_kinds::note(inner.uuid.as_u128(), HashKind::Lock, &hold);
                let renewal = HashRenewal::of(inner);
                if self.lease == Lease::Watchdog {
                    inner.watchdog.register(
                        Arc::clone(&hold),
                        Some(Arc::clone(entry) as _),
                        Arc::clone(&renewal),
                    );
                }
                inner.listen_for_unlocks(&hold, entry, renewal);
                Ok(Some(hold))
            }
            other => {
                let maybe_taken =
                    other.as_ref().is_err_and(|e| e.is_transport() || e.kind() == ErrorKind::UnexpectedReply);
                if maybe_taken {
                    // The acquire may have run with its reply lost, or
                    // replied something this client cannot accept. This
                    // thread holds no live hold here, so give back whatever
                    // it may have taken rather than orphan it for a lease:
                    // one attempt, so a dead Redis costs one more timeout.
                    let _ = inner.release_orphan(entry, &successor.owner, lease_ms);
                }
                entry.leave_gate(thread);
                other.map(|_| None)
            }
        }
    }

    /// Re-enters `hold`, this thread's live hold: `Some` with one more guard,
    /// or `None` when the hold vanished unnoticed (it is marked lost and the
    /// gate let go, so the caller takes a new hold like anyone else).
    ///
    /// A re-entry increments a count, so a call lost in transit is not simply
    /// repeated: the owner's count in Redis says whether it ran (the hold's
    /// guards plus one) or not (the guards), and only then is it sent again,
    /// on a new connection. So connections that all died at once (a
    /// restart, a proxy) do not fail the re-entry either.
    fn reenter(
        &self,
        entry: &Arc<Entry>,
        hold: Arc<Hold>,
        owner: &str,
        lease_ms: u64,
    ) -> Result<Option<Arc<Hold>>> {
        // A fenced handle re-entering a hold taken without a token mints one.
        let mint = self.token_key.is_some() && hold.token().is_none();
        let mut sent = Instant::now();
        let mut outcome = self.try_acquire(entry, owner, lease_ms, Attempt::Reentry { mint });
        if let Err(e) = &outcome
            && e.is_transport()
            && !mint
        {
            let count: Option<u32> = self.query(redis::cmd("HGET").arg(&*self.name).arg(owner))?;
            let guards = hold.guards();
            outcome = match count {
                Some(c) if c == guards + 1 => Ok(Acquire::Acquired { token: None, replicated: None }),
                Some(c) if c == guards => {
                    sent = Instant::now();
                    self.try_acquire(entry, owner, lease_ms, Attempt::Reentry { mint })
                }
                None => Ok(Acquire::Free),
                Some(_) => outcome,
            };
        }
        match outcome? {
            Acquire::Acquired { token, replicated } => {
                if let Some(token) = token {
                    hold.set_token(token);
                }
                if replicated == Some(false) {
                    hold.mark_unreplicated();
                }
                hold.add_guard();
                // The script never shortens the key's TTL on a re-entry.
                hold.extend_deadline(sent + Duration::from_millis(lease_ms));
                Ok(Some(hold))
            }
            // The hold vanished unnoticed (another owner has the lock, or
            // nobody has): it is lost, and its guards must not touch whatever
            // hold comes next.
            Acquire::Held { .. } | Acquire::Free => {
                hold.mark_lost(crate::error::LostReason::Gone);
                entry.release_gate(hold.id);
                Ok(None)
            }
        }
    }

    /// Contends in Redis from the gate, until the acquire script succeeds or
    /// the deadline passes (`None`).
    ///
    /// The first refusal subscribes the lock's channels (Redisson's unlock
    /// channel and this client's wake channel) and retries at once; from
    /// then on a refusal also queues this client in Redis, and the thread
    /// sleeps until it is woken (its turn came, or a foreign unlock message),
    /// the holder's lease runs out, or the deadline passes.
    fn contend(
        &self,
        entry: &Arc<Entry>,
        me: &Successor,
        deadline: Option<Instant>,
        block: bool,
        obs: &observe::Acquire<'_>,
    ) -> Result<Option<Won>> {
        let inner = self.client.inner();
        let (owner, lease_ms) = (me.owner.as_str(), me.lease_ms);
        // A channel still lingering from this client's last wait is taken
        // back without a round trip, so the first refusal queues already.
        let mut subscribed = entry.is_subscribed() || self.resubscribe_lingering(entry);
        if subscribed {
            // Messages from before this attempt concern earlier holders.
            entry.clear_wake();
        }
        // Send time of the last refused attempt that queued this client: a
        // grant is measured from there (see `granted`).
        let mut queued_at: Option<Instant> = None;
        // When a legacy holder's string was first seen without a TTL.
        let mut no_ttl_since: Option<Instant> = None;
        if let Some(stale) = entry.take_grant()
            && stale.owner != owner
        {
            // The lock was handed to a thread of this client that has since
            // given up (without leaving the queue, since this thread took
            // over its place): give it back, which passes it on.
            let _ = inner.release_orphan(entry, &stale.owner, lease_ms);
        }
        // Redis unreachable for a while is waited out (`wait/outage.rs`).
        let mut outage = inner.outage(block && self.rides_outages);
        let outcome = loop {
            let sent = Instant::now();
            let attempt = Attempt::Fresh { enqueue: subscribed, grantable: !me.fenced };
            let remaining = match self.try_acquire(entry, owner, lease_ms, attempt) {
                Ok(Acquire::Acquired { token, replicated }) => {
                    outage.answered();
                    // A grant that raced this attempt is the same hold.
                    entry.take_grant();
                    return Ok(Some(Won { sent, token, replicated }));
                }
                Ok(Acquire::Held { remaining }) => {
                    outage.answered();
                    no_ttl_since = None;
                    remaining
                }
                // Only a re-entry is told the lock is free; retry at once.
                Ok(Acquire::Free) => Some(Duration::ZERO),
                Err(e) if e.is_legacy_lock_without_ttl() && block => {
                    // `SETNX` + `EXPIRE` leaves a live holder's key without a
                    // TTL between its two commands: only a key that stays so
                    // for the grace period is an error.
                    let since = *no_ttl_since.get_or_insert(sent);
                    match (since + LEGACY_NO_TTL_GRACE).checked_duration_since(Instant::now()) {
                        Some(left) if !left.is_zero() => Some(left),
                        _ => break Err(e),
                    }
                }
                // A fresh attempt is safe to repeat: one whose reply was
                // lost found this owner's field and takes it.
                Err(e) => match outage.ride(e, deadline) {
                    Ok(until) => match entry.wait_wake(until) {
                        Ok(_) => continue,
                        Err(e) => break Err(e),
                    },
                    Err(e) => break Err(e),
                },
            };
            if subscribed {
                queued_at = Some(sent);
            }
            let now = Instant::now();
            if !block || deadline.is_some_and(|d| now >= d) {
                break Ok(None);
            }
            obs.waiting();
            // A subscription whose slot moved to another cluster node
            // hears nothing more: subscribe again, where the slot went.
            subscribed = subscribed && entry.is_subscribed();
            if !subscribed {
                // Subscribe, then try again at once: a release between the
                // first try and the subscription would otherwise go unheard.
                match inner.subscribers.subscribe(entry.interest(), deadline) {
                    Ok(subscription) => entry.keep_subscription(subscription),
                    Err(e) => match outage.ride(e, deadline) {
                        Ok(until) => match entry.wait_wake(until) {
                            Ok(_) => continue,
                            Err(e) => break Err(e),
                        },
                        Err(e) => break Err(e),
                    },
                }
                subscribed = true;
                entry.clear_wake();
                continue;
            }
            // A key without a TTL (a foreign writer) is re-checked every
            // watchdog timeout rather than waited on forever.
            let mut until = now + remaining.unwrap_or(inner.config.watchdog_timeout);
            if let Some(deadline) = deadline {
                until = until.min(deadline);
            }
            if let Err(e) = entry.wait_wake(until) {
                break Err(e);
            }
            if let Some(grant) = entry.take_grant() {
                match queued_at.filter(|_| grant.owner == owner) {
                    Some(queued_at) => {
                        let sent = granted(&grant, queued_at);
                        // The releaser's WAIT acknowledged the grant, not
                        // this thread: confirm it, as an acquisition would.
                        match inner.confirm_grant(&self.name, owner) {
                            Ok(Confirm::Held { replicated }) => {
                                return Ok(Some(Won { sent, token: None, replicated }));
                            }
                            // Gone since (expired, deleted): contend again.
                            Ok(Confirm::Gone) => continue,
                            Err(e) => break Err(e),
                        }
                    }
                    // Handed to a thread of this client that gave up since:
                    // give it back, which passes it on.
                    None => {
                        let _ = inner.release_orphan(entry, &grant.owner, lease_ms);
                    }
                }
            }
        };
        if queued_at.is_some()
            && !entry.has_queued_threads()
            && !outcome.as_ref().is_err_and(Error::is_redis_error)
        {
            // Giving up with no thread of this client behind to take over the
            // place: leave the queue, and pass on a turn (or a lock) this
            // client was given meanwhile. (With Redis failing, the place is
            // dropped when its turn comes and nobody listens.)
            let turns = Turns::of(&entry.keys, &inner.id);
            let _ = inner.with_live_conn(&self.name, |conn| {
                scripts::dequeue(&inner.scripts, conn, &entry.keys.name, &entry.keys.channel, turns, owner)
            });
        }
        outcome
    }

    /// Takes the lock's channels back if they still linger, subscribed and
    /// confirmed, from this client's last wait: no round trip.
    fn resubscribe_lingering(&self, entry: &Arc<Entry>) -> bool {
        match self.client.inner().subscribers.resume(entry.interest()) {
            Some(subscription) => {
                entry.keep_subscription(subscription);
                true
            }
            None => false,
        }
    }

    /// One acquire script call.
    fn try_acquire(&self, entry: &Entry, owner: &str, lease_ms: u64, attempt: Attempt) -> Result<Acquire> {
        let inner = self.client.inner();
        inner.check_running()?;
        let (fresh, enqueue, grantable, mint) = match attempt {
            Attempt::Reentry { mint } => (false, false, false, mint),
            Attempt::Fresh { enqueue, grantable } => (true, enqueue, grantable, true),
        };
        let args = AcquireArgs {
            name: &self.name,
            turns: Turns::of(&entry.keys, &inner.id),
            // Re-entries keep their hold's token.
            token_key: self.token_key.as_deref().filter(|_| mint),
            lease_ms,
            owner,
            fresh,
            enqueue,
            grantable,
            legacy: self.migration,
        };
        if fresh {
            // A new hold's acquire sets the count to 1: safe to repeat.
            inner.with_live_conn(&self.name, |conn| scripts::acquire(&inner.scripts, conn, &args))
        } else {
            inner.with_conn(&self.name, |conn| scripts::acquire(&inner.scripts, conn, &args))
        }
    }
}

impl GateRedis for Lock {
    fn subscribe(&self, entry: &Arc<Entry>) -> Result<Subscription> {
        self.client.inner().subscribers.subscribe(entry.interest(), None)
    }

    fn still_held(&self, hold: &Hold) -> bool {
        self.query(redis::cmd("HEXISTS").arg(&*hold.name).arg(&hold.owner)).unwrap_or(true)
    }
}

/// How long a waiter in migration mode gives a legacy holder's string key
/// without a TTL to get one (`SETNX` + `EXPIRE` sets it one round trip after
/// the key) before failing with `LegacyLockWithoutTtl`.
pub(crate) const LEGACY_NO_TTL_GRACE: Duration = Duration::from_secs(1);

/// A successful fresh acquisition.
#[derive(Debug, Clone, Copy)]
struct Won {
    /// When the successful acquire script was sent.
    sent: Instant,
    /// The fencing token, for a fenced handle.
    token: Option<u64>,
    /// Whether the replicas asked for acknowledged it (for a grant, the
    /// grantee's confirmation; `None`: none asked).
    replicated: Option<bool>,
}

/// Where a granted hold's lease runs from, on this client's clock: the grant
/// happened `grant.elapsed` (server time) after the grantee's last refused
/// attempt reached Redis, which was after `queued_at`, the attempt's send
/// time; and before the grant was heard. So this instant is never later than
/// the grant, and the hold's local deadline never later than the server's.
fn granted(grant: &Grant, queued_at: Instant) -> Instant {
    queued_at + grant.elapsed.min(grant.received.saturating_duration_since(queued_at))
}

/// Which kind of acquire attempt.
#[derive(Debug, Clone, Copy)]
enum Attempt {
    /// The thread holds the lock already; `mint` a fencing token for a hold
    /// that has none.
    Reentry { mint: bool },
    /// A new hold; `enqueue` once the thread listens on its wake channel;
    /// `grantable` unless it must mint a fencing token.
    Fresh { enqueue: bool, grantable: bool },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(elapsed_ms: u64, received: Instant) -> Grant {
        Grant { owner: "c:1".into(), elapsed: Duration::from_millis(elapsed_ms), received }
    }

    #[test]
    fn a_granted_lease_runs_from_no_later_than_the_grant() {
        let queued_at = Instant::now();
        let received = queued_at + Duration::from_millis(40);
        // The server saw 30 ms pass between the refusal and the grant.
        assert_eq!(granted(&grant(30, received), queued_at), queued_at + Duration::from_millis(30));
        // A server clock that jumped ahead is capped by when the grant was heard.
        assert_eq!(granted(&grant(5_000, received), queued_at), received);
        assert_eq!(granted(&grant(0, received), queued_at), queued_at);
    }
}
