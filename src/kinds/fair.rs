//! The fair lock: Redisson's `RFairLock`, strictly first come, first served
//! across every client and thread.
//!
//! Why a second lock: the reentrant lock wakes whoever is quickest, and its
//! waiters of different clients are served in no particular order. The fair
//! lock keeps one queue in Redis (`redisson_lock_queue:{<name>}`) of every
//! waiting thread, Java's and Rust's alike, and a release wakes exactly the
//! queue's head, on that waiter's own channel
//! (`redisson_lock__channel:{<name>}:<owner id>`): no herd, and no waiter
//! can overtake another.
//!
//! Acquiring:
//!
//! 1. **Re-entry**: a thread that holds the lock re-enters it (one more
//!    guard; its count in Redis incremented), without touching the queue.
//! 2. **Queueing**: the acquire script takes the lock if it is free and the
//!    queue is empty or headed by the caller; otherwise it queues the caller
//!    (or keeps its place) and says how long to wait at most.
//! 3. **Waiting**: the thread subscribes to its own channel (then tries again
//!    at once, since a release in between would go unheard), and sleeps
//!    until its wake-up, the holder's lease, or half a wait slot, and tries
//!    again. Every retry also proves the waiter alive (see below).
//!
//! Dead waiters. A waiter whose process died stays in the queue; Redisson
//! gives each one a deadline (`redisson_lock_timeout:{<name>}`, scored in
//! epoch ms) after which it is dropped when it reaches the head: its *wait
//! slot*, [`FairLock::with_wait_timeout`] (Redisson's `fairLockWaitTimeout`,
//! 5 minutes by default). Java's waiters keep Redisson's deadlines; a
//! keyholder waiter's is its place in the queue: each of its calls (the one
//! that queues it and every retry) re-arms its own deadline at
//! `now + (position + 1) × slot`, lowering it as well as raising it, and a
//! waiter retries at least every half slot. So a live waiter is never
//! dropped however long the lock is held (Redisson's issue #3004), a dead
//! one is dropped about a slot after its last call whatever the holder's
//! lease (under Redisson's rule it could stall the queue for that whole
//! lease), and a lost wake-up costs at most the holder's lease or half a
//! slot (Redisson's #3730), never a stalled queue.

mod guard;
mod held;
pub(crate) mod scripts;

pub use guard::FairLockGuard;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::client::{Client, Inner};
use crate::error::{Error, Result};
use crate::holds::hash_kinds::{self, HashKind};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::lock::renewal::HashRenewal;
use crate::kinds::lock::scripts::Confirm;
use crate::lease::Lease;
use crate::observe;
use crate::owner;
use crate::wait::channel::ChannelWait;

use scripts::{Acquire, AcquireArgs, Attempt, FairKeys};

/// The default wait slot of a fair lock's waiters (Redisson's
/// `fairLockWaitTimeout`): 5 minutes.
pub const DEFAULT_FAIR_WAIT_TIMEOUT: Duration = Duration::from_secs(300);

/// The shortest wait slot accepted. A live waiter retries every half slot,
/// so a shorter slot would be polling, and a waiter late by half a slot
/// (a loaded machine) would be taken for dead.
pub const MIN_FAIR_WAIT_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest wait slot accepted: 30 days, as for leases.
pub const MAX_FAIR_WAIT_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);

impl Client {
    /// A fair lock handle for `name` with the default [`Lease::Watchdog`]
    /// and wait slot ([`DEFAULT_FAIR_WAIT_TIMEOUT`]). No I/O.
    ///
    /// The Redis key is `name` itself, as in Redisson, so a Java service
    /// calling `getFairLock(name)` contends for the same lock, in the same
    /// queue. Do not use one name for a fair and a plain
    /// [`lock`](Client::lock): the plain lock ignores the queue.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) as for
    /// [`Client::lock`]: an empty name, one longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes or with control
    /// characters, a reserved prefix, or, on a Redis Cluster, braces that
    /// make no hash tag.
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        self.inner().validate_name(name)?;
        Ok(FairLock {
            client: self.clone(),
            keys: Arc::new(FairKeys::new(name)),
            lease: Lease::Watchdog,
            wait_timeout: DEFAULT_FAIR_WAIT_TIMEOUT,
            fenced: false,
        })
    }
}

/// A handle to one named fair lock: strict FIFO across all clients and
/// threads, Redisson's `RFairLock` on the wire.
///
/// Cheap to clone and shareable across threads; no I/O until asked. The
/// methods mirror [`Lock`](crate::Lock)'s: [`lock`](FairLock::lock) blocks,
/// [`try_lock`](FairLock::try_lock) never waits (nor queues: it takes the
/// lock only when it is free and nobody is queued),
/// [`try_lock_for`](FairLock::try_lock_for) and
/// [`try_lock_until`](FairLock::try_lock_until) wait in the queue at most so
/// long and then leave it. Not getting the lock in time is `Ok(None)`.
///
/// The lock is reentrant, as Redisson's fair lock is: a thread that holds it
/// may acquire it again without queueing.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
///
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
/// let lock = client.fair_lock("printer")?.fenced();
/// if let Some(guard) = lock.try_lock_for(Duration::from_secs(5))? {
///     // Served in arrival order; the token orders writes downstream.
///     println!("my turn, token {:?}", guard.fencing_token());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    client: Client,
    keys: Arc<FairKeys>,
    lease: Lease,
    wait_timeout: Duration,
    fenced: bool,
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.keys.name)
            .field("lease", &self.lease)
            .field("wait_timeout", &self.wait_timeout)
            .field("fenced", &self.fenced)
            .finish_non_exhaustive()
    }
}

/// A successful fresh acquisition.
struct Won {
    sent: Instant,
    token: Option<u64>,
    replicated: Option<bool>,
}

/// Numbers of waiting calls, so that a grant meant for an earlier call of
/// the same thread (heard late) is never taken for this one's.
static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

impl FairLock {
    /// The lock name (also its Redis key).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The lease policy of this handle's acquisitions.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// A handle to the same lock whose acquisitions use `lease`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// fixed lease outside 1 ms to 30 days.
    pub fn with_lease(&self, lease: Lease) -> Result<FairLock> {
        lease.validate()?;
        Ok(FairLock { lease, ..self.clone() })
    }

    /// The wait slot of this handle's waiters (Redisson's
    /// `fairLockWaitTimeout`).
    pub fn wait_timeout(&self) -> Duration {
        self.wait_timeout
    }

    /// A handle to the same lock whose waiters use the wait slot `slot`:
    /// a waiter that has not retried for `slot` (its process died) is
    /// dropped from the queue when it reaches the head, so the next waiter
    /// gets its turn at most about one slot late, however long the holder's
    /// lease. A live waiter retries every half slot at least and is never
    /// dropped. Waiters queued behind a dead one wait up to a slot each; a
    /// shorter slot skips dead waiters sooner, at the cost of more retries
    /// of sleeping waiters. Java waiters use the slot of their own Redisson
    /// configuration; every acquisition lowers the queued deadlines by the
    /// acquirer's slot (Redisson's rule), so on a name shared with Java give
    /// keyholder waiters a slot at least as long as Java's, or a Java
    /// acquisition ahead of them can cost them their place (see
    /// `docs/redisson-compat.md`). No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// outside [`MIN_FAIR_WAIT_TIMEOUT`] ..= [`MAX_FAIR_WAIT_TIMEOUT`].
    pub fn with_wait_timeout(&self, slot: Duration) -> Result<FairLock> {
        if !(MIN_FAIR_WAIT_TIMEOUT..=MAX_FAIR_WAIT_TIMEOUT).contains(&slot) {
            return Err(Error::invalid_argument(format!(
                "fair lock wait timeout {slot:?} is outside {MIN_FAIR_WAIT_TIMEOUT:?} ..= 30 days"
            )));
        }
        Ok(FairLock { wait_timeout: slot, ..self.clone() })
    }

    /// A handle to the same lock whose fresh acquisitions also mint a
    /// fencing token, in the same script call, from the counter
    /// `redisson_lock_token:{<name>}`: the counter [`Lock::fenced`](crate::Lock::fenced)
    /// and Java's `RFencedLock` use, so all of them share one strictly
    /// increasing sequence. Re-entries keep their hold's token. Read it
    /// with [`FairLockGuard::fencing_token`].
    pub fn fenced(&self) -> FairLock {
        FairLock { fenced: true, ..self.clone() }
    }

    /// True for handles made by [`fenced`](FairLock::fenced).
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The last fencing token minted for this lock by any client (one
    /// `GET`); `None` before the first fenced acquisition.
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType).
    pub fn last_fencing_token(&self) -> Result<Option<u64>> {
        self.query(redis::cmd("GET").arg(&self.keys.token))
    }

    /// Acquires the lock in its turn, waiting as long as it takes; an
    /// outage is ridden out as by [`Lock::lock`](crate::Lock::lock), within
    /// the client's outage budget
    /// ([`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget)).
    ///
    /// # Errors
    ///
    /// A Redis or connection failure, [`ErrorKind::WrongType`] when a key of
    /// another type sits at the lock's name, queue, deadlines or fencing
    /// counter (nothing is changed), [`ErrorKind::BadFencingCounter`], or
    /// [`ErrorKind::Shutdown`].
    ///
    /// [`ErrorKind::WrongType`]: crate::ErrorKind::WrongType
    /// [`ErrorKind::BadFencingCounter`]: crate::ErrorKind::BadFencingCounter
    /// [`ErrorKind::Shutdown`]: crate::ErrorKind::Shutdown
    pub fn lock(&self) -> Result<FairLockGuard> {
        self.acquire(None, true)?.ok_or_else(Error::shutdown)
    }

    /// Makes one attempt, never waiting and never queueing: `Ok(None)` if
    /// the lock is held, or free but with waiters queued (their turn comes
    /// first).
    ///
    /// # Errors
    ///
    /// As [`lock`](FairLock::lock).
    pub fn try_lock(&self) -> Result<Option<FairLockGuard>> {
        self.acquire(Some(Instant::now()), false)
    }

    /// Acquires the lock in its turn, waiting at most `wait`; `Ok(None)`
    /// (and out of the queue) if the turn did not come in time.
    ///
    /// # Errors
    ///
    /// As [`lock`](FairLock::lock).
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<FairLockGuard>> {
        match Instant::now().checked_add(wait) {
            Some(deadline) => self.try_lock_until(deadline),
            None => self.lock().map(Some),
        }
    }

    /// Acquires the lock in its turn, waiting until `deadline` at the
    /// latest; `Ok(None)` (and out of the queue) if the turn did not come
    /// by then. At least one attempt is made.
    ///
    /// # Errors
    ///
    /// As [`lock`](FairLock::lock).
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<FairLockGuard>> {
        self.acquire(Some(deadline), true)
    }

    /// True if any owner holds the lock (one `TYPE`).
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
    /// when a key of another type sits at the lock name.
    pub fn is_locked(&self) -> Result<bool> {
        let kind: String = self.query(redis::cmd("TYPE").arg(&*self.keys.name))?;
        match kind.as_str() {
            "none" => Ok(false),
            "hash" => Ok(true),
            _ => Err(Error::wrong_type(&self.keys.name, &self.keys.name)),
        }
    }

    /// True if the calling thread holds the lock, as Redis sees it (one
    /// `HMGET`).
    ///
    /// # Errors
    ///
    /// As [`hold_count`](FairLock::hold_count).
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.hold_count()? > 0)
    }

    /// How many times the calling thread holds the lock (0 when it does
    /// not), as Redis counts it (one `HMGET`).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](FairLock::is_locked), and
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when the hash
    /// at the name is a read-write lock's (its read holders' fields look
    /// like this thread's owner id).
    pub fn hold_count(&self) -> Result<u32> {
        let (count, mode): (Option<u32>, Option<String>) =
            self.query(redis::cmd("HMGET").arg(&*self.keys.name).arg(self.current_owner()).arg("mode"))?;
        if mode.is_some() {
            return Err(Error::another_kinds_lock(
                &self.keys.name,
                "a read-write lock (a hash with a \"mode\" field)",
            ));
        }
        Ok(count.unwrap_or(0))
    }

    /// How many waiters (of any client, Java's included) are queued for the
    /// lock, dead ones not yet dropped included (one `LLEN`).
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType).
    pub fn queue_len(&self) -> Result<usize> {
        self.query(redis::cmd("LLEN").arg(&self.keys.queue))
    }

    /// Deletes the lock whoever holds it, and wakes the queue's head.
    /// Returns whether there was a lock.
    ///
    /// An administrative escape hatch for a holder known dead. A holder of
    /// this client is told at once ([`LostReason::Gone`]); one of another
    /// client learns of the loss at its next renewal or release (a fair
    /// lock's force unlock publishes only on the head waiter's channel,
    /// which holders do not listen on).
    ///
    /// [`LostReason::Gone`]: crate::LostReason::Gone
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
    /// (nothing is deleted).
    pub fn force_unlock(&self) -> Result<bool> {
        let inner = self.client.inner();
        inner.force_unlocking(&self.keys.name, || {
            inner.with_live_conn(&self.keys.name, |conn| {
                scripts::force_unlock(&inner.scripts, conn, &self.keys)
            })
        })
    }

    fn current_owner(&self) -> String {
        owner::owner_id(self.client.id(), owner::current_thread_id())
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> Result<T> {
        let name = &self.keys.name;
        self.client
            .inner()
            .with_live_conn(name, |conn| conn.query(cmd)?.map_err(|e| Error::from_redis(name, e)))
    }

    fn acquire(&self, deadline: Option<Instant>, block: bool) -> Result<Option<FairLockGuard>> {
        let mode = observe::Mode::of(deadline, block);
        let obs = observe::Acquire::start(&self.keys.name, mode);
        let acquired = obs.in_scope(|| self.acquire_in(deadline, block, &obs));
        obs.finish(|| match &acquired {
            Ok(Some((_, reentrant))) => observe::AcquireOutcome::Acquired { reentrant: *reentrant },
            Ok(None) if mode == observe::Mode::Try => observe::AcquireOutcome::Busy,
            Ok(None) => observe::AcquireOutcome::TimedOut,
            Err(_) => observe::AcquireOutcome::Error,
        });
        acquired.map(|guard| guard.map(|(guard, _)| guard))
    }

    /// Acquires; the guard, and whether it re-entered a hold.
    fn acquire_in(
        &self,
        deadline: Option<Instant>,
        block: bool,
        obs: &observe::Acquire<'_>,
    ) -> Result<Option<(FairLockGuard, bool)>> {
        let inner = self.client.inner();
        inner.check_running()?;
        let thread = owner::current_thread_id();
        let owner = owner::owner_id(&inner.id, thread);
        let lease_ms = self.lease.ttl_ms(inner.config.watchdog_timeout);

        if let Some(hold) = held::of(&owner, &self.keys.name)
            && !hold.is_releasing()
            && self.reenter(&hold, &owner, lease_ms)?
        {
            let guard = FairLockGuard::new(Arc::clone(inner), Arc::clone(&self.keys), hold);
            return Ok(Some((guard, true)));
        }
        hash_kinds::check(inner.uuid.as_u128(), &self.keys.name, HashKind::FairLock)?;

        let Some(Won { sent, token, replicated }) = self.contend(&owner, lease_ms, deadline, block, obs)?
        else {
            return Ok(None);
        };
        if replicated == Some(false) && inner.config.replica_acks_required {
            // A failover could lose it: give it back rather than hand out a
            // hold the caller refused.
            self.give_back(inner, &owner, lease_ms);
            return Err(Error::replica_acks(&self.keys.name));
        }
        let acquisition = Acquisition { owner, thread, lease: self.lease, lease_ms, token, sent };
        let hold = Arc::new(Hold::new(inner.next_hold_id(), Arc::clone(&self.keys.name), acquisition));
        if replicated == Some(false) {
            log::warn!(
                "keyholder: fair lock '{}' acquired, but not acknowledged by the replicas",
                self.keys.name
            );
            hold.mark_unreplicated();
        }
        if self.lease == Lease::Watchdog {
            // The fair lock's hash is RLock's: the same renewer keeps it.
            inner.watchdog.register(Arc::clone(&hold), None, HashRenewal::of(inner));
        }
        // A fair lock's unlocks are published on its head waiter's channel
        // only: nothing to listen on, but this client's force unlock finds
        // the hold here.
        inner.foreign.add(&hold, None, None, HashRenewal::of(inner));
        held::insert(Arc::clone(&hold));
        hash_kinds::note(inner.uuid.as_u128(), HashKind::FairLock, &hold);
        Ok(Some((FairLockGuard::new(Arc::clone(inner), Arc::clone(&self.keys), hold), false)))
    }

    /// Re-enters `hold`, this thread's live hold: true with one more guard,
    /// false when the hold vanished unnoticed (it is marked lost, and the
    /// caller takes a new hold in its turn like anyone else).
    fn reenter(&self, hold: &Arc<Hold>, owner: &str, lease_ms: u64) -> Result<bool> {
        let inner = self.client.inner();
        // A fenced handle re-entering a hold taken without a token mints one.
        let mint = self.fenced && hold.token().is_none();
        let args = AcquireArgs {
            keys: &self.keys,
            owner,
            lease_ms,
            slot_ms: crate::lease::millis_ceil(self.wait_timeout),
            attempt: Attempt::Reentry,
            mint,
        };
        let sent = Instant::now();
        // A re-entry increments a count: not repeated on a fresh connection.
        match inner.with_conn(&self.keys.name, |conn| scripts::acquire(&inner.scripts, conn, &args))? {
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
                Ok(true)
            }
            Acquire::Gone | Acquire::Refused { .. } => {
                hold.mark_lost(crate::error::LostReason::Gone);
                Ok(false)
            }
        }
    }

    /// One fresh attempt; `queue` with a grant `ticket`, or `None` for an
    /// attempt that never queues.
    fn attempt(&self, owner: &str, lease_ms: u64, queue: Option<Option<u64>>) -> Result<Acquire> {
        let inner = self.client.inner();
        inner.check_running()?;
        let args = AcquireArgs {
            keys: &self.keys,
            owner,
            lease_ms,
            slot_ms: crate::lease::millis_ceil(self.wait_timeout),
            attempt: Attempt::Fresh { queue: queue.is_some(), ticket: queue.flatten() },
            mint: self.fenced,
        };
        // A fresh attempt sets the count to 1 and keeps its place in the
        // queue: safe to repeat on a fresh connection.
        inner.with_live_conn(&self.keys.name, |conn| scripts::acquire(&inner.scripts, conn, &args))
    }

    /// Takes a turn in the queue until the acquire script succeeds, a
    /// release hands the lock over, or the deadline passes (`None`, out of
    /// the queue again).
    fn contend(
        &self,
        owner: &str,
        lease_ms: u64,
        deadline: Option<Instant>,
        block: bool,
        obs: &observe::Acquire<'_>,
    ) -> Result<Option<Won>> {
        let inner = self.client.inner();
        if !block || deadline.is_some_and(|d| Instant::now() >= d) {
            // One attempt, which never queues.
            let sent = Instant::now();
            return match self.attempt(owner, lease_ms, None) {
                Ok(Acquire::Acquired { token, replicated }) => Ok(Some(Won { sent, token, replicated })),
                Ok(_) => Ok(None),
                Err(e) => Err(self.after_error(inner, owner, lease_ms, e, false)),
            };
        }
        let name = &self.keys.name;
        let (channel, grant_channel) = (self.keys.wake_channel(owner), self.keys.grant_channel(owner));
        let wait = ChannelWait::alone(Arc::clone(name), channel, Some(grant_channel));
        // Fenced acquisitions mint their token in their own script call:
        // they are never handed the lock.
        let ticket = (!self.fenced).then(|| NEXT_TICKET.fetch_add(1, Ordering::Relaxed));
        let expected = ticket.map(|t| format!("{owner}/{t}"));
        // Channels still lingering from this thread's last wait are taken
        // back without a round trip: the first refusal can sleep at once.
        wait.resume(&inner.subscribers);
        let mut queued_at = None;
        // Redis unreachable for a while is waited out (`wait/outage.rs`).
        let mut outage = inner.outage(true);
        let outcome = loop {
            let seen = wait.seen();
            let sent = Instant::now();
            let attempt = self.attempt(owner, lease_ms, Some(ticket));
            if attempt.is_ok() {
                outage.answered();
            }
            let retry_in = match attempt {
                Ok(Acquire::Acquired { token, replicated }) => {
                    break Ok(Some(Won { sent, token, replicated }));
                }
                Ok(Acquire::Refused { retry_in }) => retry_in,
                // Only a re-entry is told its field is gone.
                Ok(Acquire::Gone) => Duration::from_millis(1),
                // A fresh attempt is safe to repeat (see `attempt`).
                Err(e) => match outage.ride(e, deadline) {
                    Ok(until) => {
                        wait.wait_past(seen, until);
                        continue;
                    }
                    Err(e) => break Err(e),
                },
            };
            queued_at = Some(sent);
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break Ok(None);
            }
            obs.waiting();
            if !wait.is_subscribed() {
                // Subscribe, then try again at once: a wake-up between the
                // attempt and the subscription would otherwise go unheard.
                if let Err(e) = wait.subscribe(&inner.subscribers, deadline) {
                    match outage.ride(e, deadline) {
                        Ok(until) => wait.wait_past(seen, until),
                        Err(e) => break Err(e),
                    };
                }
                continue;
            }
            let mut until = now + retry_in;
            if let Some(deadline) = deadline {
                until = until.min(deadline);
            }
            wait.wait_past(seen, until);
            if let (Some(grant), Some(queued_at)) = (wait.take_grant(), queued_at)
                && expected.as_deref() == Some(grant.owner.as_str())
            {
                // Handed over by the release: held since about then. The
                // releaser's WAIT acknowledged the grant, not this thread:
                // confirm it, as an acquisition would.
                let sent = grant.granted_at(queued_at);
                match inner.confirm_grant(name, owner) {
                    Ok(Confirm::Held { replicated }) => {
                        break Ok(Some(Won { sent, token: None, replicated }));
                    }
                    // Gone since (expired, deleted): take a turn again.
                    Ok(Confirm::Gone) => continue,
                    Err(e) => break Err(e),
                }
            }
        };
        drop(wait);
        match outcome {
            Ok(None) => {
                // Out of time: leave the queue, passing on a turn (or a
                // lock) that may have come meanwhile.
                self.leave_queue(inner, owner);
                Ok(None)
            }
            Err(e) => Err(self.after_error(inner, owner, lease_ms, e, queued_at.is_some())),
            won => won,
        }
    }

    /// Cleans up after a failed attempt: an attempt whose reply was lost
    /// (or unreadable) may have taken the lock, which is given back; a
    /// queued waiter leaves the queue. Best effort, one try each.
    fn after_error(&self, inner: &Inner, owner: &str, lease_ms: u64, e: Error, queued: bool) -> Error {
        if e.is_transport() || e.kind() == crate::ErrorKind::UnexpectedReply {
            self.give_back(inner, owner, lease_ms);
        }
        if queued && !e.is_redis_error() {
            self.leave_queue(inner, owner);
        }
        e
    }

    fn leave_queue(&self, inner: &Inner, owner: &str) {
        let slot_ms = crate::lease::millis_ceil(self.wait_timeout);
        let _ = inner.with_live_conn(&self.keys.name, |conn| {
            scripts::dequeue(&inner.scripts, conn, &self.keys, owner, slot_ms)
        });
    }

    /// Releases what `owner` may hold here (one latched release).
    fn give_back(&self, inner: &Inner, owner: &str, lease_ms: u64) {
        let thread = owner::current_thread_id();
        let latch_key = crate::names::unlock_latch(&self.keys.name, inner.uuid.as_u128(), thread);
        let latch = scripts::Latch { key: &latch_key, ttl_ms: 1, request: 0, retry: false };
        let _ = inner.with_live_conn(&self.keys.name, |conn| {
            scripts::release(&inner.scripts, conn, &self.keys, owner, lease_ms, latch)
        });
    }
}
