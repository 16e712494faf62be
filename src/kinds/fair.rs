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

pub(crate) mod scripts;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::client::{Client, Context};
use crate::error::{Error, Result};
use crate::holds::hash_kinds::{self, HashKind};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::family::contend::{self, Bounds, Contended, Contender, OnChannel, Step};
use crate::kinds::family::fresh::{self, Keeping, Won};
use crate::kinds::family::reentry::{self, Reenter, Reentry};
use crate::kinds::family::release as released;
use crate::kinds::family::sealed::{Core, Fences, Reenters, Tokens};
use crate::kinds::family::tokens::{self, TokenHold};
use crate::kinds::family::{self, Acquirer, ByToken, Call, Fenced, Guard, Handle, Kind, TokenOwned};
use crate::kinds::lock::confirm;
use crate::kinds::lock::renewal::HashRenewal;
use crate::kinds::lock::scripts::Confirm;
use crate::lease::{Lease, for_people};
use crate::observe;
use crate::owner;
use crate::pubsub::subscriber::Grant;
use crate::wait::channel::ChannelWait;

use scripts::{Acquire, AcquireArgs, Attempt, FairKeys, Release};

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
        self.context().validate_name(name)?;
        let fair = Fair {
            client: self.clone(),
            keys: Arc::new(FairKeys::new(name)),
            wait_timeout: DEFAULT_FAIR_WAIT_TIMEOUT,
            fenced: false,
        };
        Ok(Handle::of(fair, Lease::Watchdog))
    }
}

/// A handle to one named fair lock: strict FIFO across all clients and
/// threads, Redisson's `RFairLock` on the wire.
///
/// Cheap to clone and shareable across threads; no I/O until asked. The
/// methods are [`Lock`](crate::Lock)'s ([`Handle`]'s): [`lock`](FairLock::lock)
/// blocks, [`try_lock`](FairLock::try_lock) never waits (nor queues: it takes
/// the lock only when it is free and nobody is queued),
/// [`try_lock_for`](FairLock::try_lock_for) and
/// [`try_lock_until`](FairLock::try_lock_until) wait in the queue at most so
/// long and then leave it. Not getting the lock in time is `Ok(None)`. A
/// release wakes (or hands the lock to) the queue's head, and no one else.
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
pub type FairLock = Handle<Fair>;

/// An RAII guard for one acquisition of a [`FairLock`]; see [`Guard`].
pub type FairLockGuard = Guard<Fair>;

/// An RAII guard for one acquisition of a [`FairLock`] owned by an
/// [`OwnerToken`](crate::OwnerToken) ([`FairLock::lock_owned`],
/// [`FairLock::lock_with`], [`FairLock::resume`]): `Send`, released from
/// any thread; see [`Guard`].
pub type OwnedFairLockGuard = Guard<Fair, ByToken>;

/// The fair lock's core (Redisson's `RFairLock`): the kind of a
/// [`FairLock`].
#[derive(Clone, Debug)]
pub struct Fair {
    client: Client,
    keys: Arc<FairKeys>,
    wait_timeout: Duration,
    fenced: bool,
}

/// Numbers of waiting calls, so that a grant meant for an earlier call of
/// the same thread (heard late) is never taken for this one's.
static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

impl Handle<Fair> {
    /// The wait slot of this handle's waiters (Redisson's
    /// `fairLockWaitTimeout`).
    pub fn wait_timeout(&self) -> Duration {
        self.kind().wait_timeout
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
                "fair lock wait timeout {} is outside {} ..= {}",
                for_people(slot),
                for_people(MIN_FAIR_WAIT_TIMEOUT),
                for_people(MAX_FAIR_WAIT_TIMEOUT)
            )));
        }
        Ok(self.with_kind(Fair { wait_timeout: slot, ..self.kind().clone() }))
    }

    /// How many waiters (of any client, Java's included) are queued for the
    /// lock, dead ones not yet dropped included (one `LLEN`).
    ///
    /// # Errors
    ///
    /// A Redis failure, or [`ErrorKind::WrongType`](crate::ErrorKind::WrongType).
    pub fn queue_len(&self) -> Result<usize> {
        let keys = &self.kind().keys;
        family::query(&self.kind().client, &keys.name, redis::cmd("LLEN").arg(&keys.queue))
    }
}

impl Kind for Fair {}

impl Reenters for Fair {
    const ONCE: [&'static str; 3] =
        ["non-reentrant fair lock", "NonReentrantFairLock", "NonReentrantFairLockGuard"];

    fn live_hold(&self, ctx: Context<'_>, _thread: u64) -> Option<Arc<Hold>> {
        // The calling thread's: a fair lock's holds are registered per thread.
        reentry::current(ctx.uuid(), Self::NOUN, &self.keys.name)
    }
}

impl Fenced for Fair {}

impl Fences for Fair {
    fn fence(&self) -> Self {
        Fair { fenced: true, ..self.clone() }
    }

    fn is_fenced(&self) -> bool {
        self.fenced
    }
}

impl Core for Fair {
    const NOUN: &'static str = "fair lock";
    const HANDLE: &'static str = "FairLock";
    const GUARD: &'static str = "FairLockGuard";
    type Keep = Arc<FairKeys>;

    fn client(&self) -> &Client {
        &self.client
    }

    fn name(&self) -> &Arc<str> {
        &self.keys.name
    }

    fn acquire(&self, call: Call<'_>) -> Result<Option<(Arc<Hold>, Arc<FairKeys>)>> {
        Ok(self.acquire_in(call)?.map(|hold| (hold, Arc::clone(&self.keys))))
    }

    /// Every release runs `fair/release.lua` with the owner's unlock latch
    /// (the key RLock's releases use), retried once on a fresh connection
    /// if its reply was lost: the latch makes the retry return the first
    /// outcome instead of releasing a second hold. The last release wakes
    /// the queue's head, and only the head.
    fn release(ctx: Context<'_>, keys: &Arc<FairKeys>, hold: &Arc<Hold>) -> Result<()> {
        released::release_registered(ctx, Self::NOUN, hold, true, |_| {
            (release_latched(ctx, keys, hold), false)
        })
    }

    fn is_locked(&self) -> Result<bool> {
        family::hash_is_locked(&self.client, &self.keys.name, false)
    }

    fn hold_count(&self) -> Result<u32> {
        family::hash_hold_count(&self.client, &self.keys.name, false)
    }

    fn force_unlock(&self) -> Result<bool> {
        let ctx = self.client.context();
        ctx.calls().with_live_conn(&self.keys.name, |conn| {
            scripts::force_unlock(ctx.calls().scripts(), conn, &self.keys)
        })
    }

    fn debug_fields(&self, f: &mut std::fmt::DebugStruct<'_, '_>) {
        f.field("wait_timeout", &self.wait_timeout).field("fenced", &self.fenced);
    }
}

impl Fair {
    /// Re-enters the thread's live hold (or adds a count to a presented
    /// token's), or takes a new one in its turn.
    fn acquire_in(&self, call: Call<'_>) -> Result<Option<Arc<Hold>>> {
        let Call { ctx, deadline, block, obs, lease, lease_ms, thread, owner, acquirer } = call;
        let client = ctx.uuid();
        // A token's holds are not the thread's (`kinds/family/tokens.rs`).
        let by_thread = acquirer == Acquirer::Thread;
        if by_thread
            && let Some(hold) = reentry::current(client, Self::NOUN, &self.keys.name)
            && self.reenter(&hold, &owner, lease_ms)?
        {
            return Ok(Some(hold));
        }
        if acquirer == Acquirer::PresentedToken {
            let held = TokenHold::of(Self::NOUN, &self.keys.name, &owner, lease, lease_ms);
            let attempt = || self.reentry_attempt(&owner, lease_ms, false);
            if let Some(hold) = tokens::join(ctx, held, attempt, || keeping(ctx))? {
                return Ok(Some(hold));
            }
        }
        if by_thread {
            hash_kinds::check(client, &self.keys.name, HashKind::FairLock)?;
        }

        let Some(Won { sent, token, replicated }) = self.contend(&owner, lease_ms, deadline, block, obs)?
        else {
            return Ok(None);
        };
        fresh::refuse_unreplicated(ctx, &self.keys.name, replicated, || {
            self.give_back(ctx, &owner, lease_ms);
        })?;
        let acquisition = Acquisition { owner, thread, lease, lease_ms, token, sent };
        let hold = fresh::hold(ctx, Self::NOUN, &self.keys.name, acquisition, replicated);
        fresh::keep(ctx, &hold, keeping(ctx));
        if by_thread {
            reentry::set(client, Self::NOUN, &hold);
            hash_kinds::note(client, HashKind::FairLock, &hold);
        }
        Ok(Some(hold))
    }

    /// One re-entry script call for `owner` (`mint`: a fencing token),
    /// which never touches the queue; sent once (it increments a count).
    fn reentry_attempt(&self, owner: &str, lease_ms: u64, mint: bool) -> Result<Reentry> {
        let ctx = self.client.context();
        let args = AcquireArgs {
            keys: &self.keys,
            owner,
            lease_ms,
            slot_ms: crate::lease::millis_ceil(self.wait_timeout),
            attempt: Attempt::Reentry,
            mint,
        };
        match ctx
            .calls()
            .with_conn(&self.keys.name, |conn| scripts::acquire(ctx.calls().scripts(), conn, &args))?
        {
            Acquire::Acquired { token, replicated } => Ok(Reentry::Acquired { token, replicated }),
            Acquire::Gone | Acquire::Refused { .. } => Ok(Reentry::Gone),
        }
    }

    /// Re-enters `hold`, this thread's live hold (see
    /// `kinds/family/reentry.rs`), without touching the queue: true with one
    /// more guard, false when the hold vanished unnoticed.
    fn reenter(&self, hold: &Arc<Hold>, owner: &str, lease_ms: u64) -> Result<bool> {
        // A fenced handle re-entering a hold taken without a token mints one.
        let mint = self.fenced && hold.token().is_none();
        let attempt = || self.reentry_attempt(owner, lease_ms, mint);
        let count = || {
            family::query(&self.client, &self.keys.name, redis::cmd("HGET").arg(&*self.keys.name).arg(owner))
        };
        reentry::reenter(hold, lease_ms, Reenter { attempt, count: Some(count), extends: true, mints: mint })
    }

    /// One fresh attempt; `queue` with a grant `ticket`, or `None` for an
    /// attempt that never queues.
    fn attempt(&self, owner: &str, lease_ms: u64, queue: Option<Option<u64>>) -> Result<Acquire> {
        let ctx = self.client.context();
        ctx.check_running()?;
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
        ctx.calls()
            .with_live_conn(&self.keys.name, |conn| scripts::acquire(ctx.calls().scripts(), conn, &args))
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
        let ctx = self.client.context();
        if !block || deadline.is_some_and(|d| Instant::now() >= d) {
            // One attempt, which never queues.
            let sent = Instant::now();
            return match self.attempt(owner, lease_ms, None) {
                Ok(Acquire::Acquired { token, replicated }) => Ok(Some(Won { sent, token, replicated })),
                Ok(_) => Ok(None),
                Err(e) => Err(self.after_error(ctx, owner, lease_ms, e, false)),
            };
        }
        let name = &self.keys.name;
        let (channel, grant_channel) = (self.keys.wake_channel(owner), self.keys.grant_channel(owner));
        let wait = ChannelWait::alone(Arc::clone(name), channel, Some(grant_channel));
        // Fenced acquisitions mint their token in their own script call:
        // they are never handed the lock.
        let ticket = (!self.fenced).then(|| NEXT_TICKET.fetch_add(1, Ordering::Relaxed));
        let expected = ticket.map(|t| format!("{owner}/{t}"));
        let mut queueing = Queueing { fair: self, ctx, owner, lease_ms, ticket, expected };
        // Channels still lingering from this thread's last wait are taken
        // back without a round trip: the first refusal can sleep at once.
        let on_channel = OnChannel { wait: &wait, subscribers: ctx.waits().subscribers(), resume: true };
        let bounds = Bounds::of(ctx, deadline, block, obs, true);
        let Contended { outcome, queued_at } = contend::contend(&mut queueing, &on_channel, bounds);
        drop(wait);
        match outcome {
            Ok(None) => {
                // Out of time: leave the queue, passing on a turn (or a
                // lock) that may have come meanwhile.
                self.leave_queue(ctx, owner);
                Ok(None)
            }
            Err(e) => Err(self.after_error(ctx, owner, lease_ms, e, queued_at.is_some())),
            won => won,
        }
    }

    /// Cleans up after a failed attempt: an attempt whose reply was lost
    /// (or unreadable) may have taken the lock, which is given back; a
    /// queued waiter leaves the queue. Best effort, one try each.
    fn after_error(&self, ctx: Context<'_>, owner: &str, lease_ms: u64, e: Error, queued: bool) -> Error {
        if e.is_transport() || e.kind() == crate::ErrorKind::UnexpectedReply {
            self.give_back(ctx, owner, lease_ms);
        }
        if queued && !e.is_redis_error() {
            self.leave_queue(ctx, owner);
        }
        e
    }

    fn leave_queue(&self, ctx: Context<'_>, owner: &str) {
        let slot_ms = crate::lease::millis_ceil(self.wait_timeout);
        let _ = ctx.calls().with_live_conn(&self.keys.name, |conn| {
            scripts::dequeue(ctx.calls().scripts(), conn, &self.keys, owner, slot_ms)
        });
    }

    /// Releases what `owner` may hold here (one latched release).
    fn give_back(&self, ctx: Context<'_>, owner: &str, lease_ms: u64) {
        let thread = owner::current_thread_id();
        let latch_key = crate::names::unlock_latch(&self.keys.name, ctx.uuid(), thread);
        let latch = scripts::Latch { key: &latch_key, ttl_ms: 1, request: 0, retry: false };
        let _ = ctx.calls().with_live_conn(&self.keys.name, |conn| {
            scripts::release(ctx.calls().scripts(), conn, &self.keys, owner, lease_ms, latch)
        });
    }
}

/// How a fair lock's hold is kept. Its hash is RLock's: the same renewer
/// keeps it. Its unlocks are published on its head waiter's channel only:
/// nothing to listen on, but this client's force unlock finds the hold.
fn keeping(ctx: Context<'_>) -> Keeping {
    Keeping { renew: HashRenewal::of(ctx), renew_watchdog: None, channel: None, on_lost: None }
}

impl TokenOwned for Fair {}

impl Tokens for Fair {
    fn resume(
        &self,
        ctx: Context<'_>,
        owner: &str,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<(Arc<Hold>, Arc<FairKeys>)> {
        let held = TokenHold::of(Self::NOUN, &self.keys.name, owner, lease, lease_ms);
        Ok((tokens::resume(ctx, held, keeping(ctx))?, Arc::clone(&self.keys)))
    }
}

/// A waiter's side of the contention loop: every attempt takes (or keeps)
/// its place in the queue; a grant on its own channel for this call's
/// ticket is the lock.
struct Queueing<'a> {
    fair: &'a Fair,
    ctx: Context<'a>,
    owner: &'a str,
    lease_ms: u64,
    /// This call's number, when it accepts a grant (unfenced).
    ticket: Option<u64>,
    /// The grant's owner that means this call: `<owner>/<ticket>`.
    expected: Option<String>,
}

impl Contender for Queueing<'_> {
    type Won = Won;

    fn attempt(&mut self, sent: Instant, _listening: bool) -> Result<Step> {
        // A fresh attempt is safe to repeat (see `Fair::attempt`).
        let retry_in = match self.fair.attempt(self.owner, self.lease_ms, Some(self.ticket))? {
            Acquire::Acquired { token, replicated } => return Ok(Step::Won(Won { sent, token, replicated })),
            Acquire::Refused { retry_in } => retry_in,
            // Only a re-entry is told its field is gone.
            Acquire::Gone => Duration::from_millis(1),
        };
        Ok(Step::Refused { retry_in: Some(retry_in), queued: true })
    }

    fn granted(&mut self, grant: Grant, queued_at: Option<Instant>) -> Result<Option<Won>> {
        let Some(queued_at) = queued_at else { return Ok(None) };
        if self.expected.as_deref() != Some(grant.owner.as_str()) {
            return Ok(None);
        }
        // Handed over by the release: held since about then. The releaser's
        // WAIT acknowledged the grant, not this thread: confirm it, as an
        // acquisition would. Gone since (expired, deleted): take a turn again.
        let sent = grant.granted_at(queued_at);
        match confirm::grant(self.ctx, &self.fair.keys.name, self.owner)? {
            Confirm::Held { replicated } => Ok(Some(Won { sent, token: None, replicated })),
            Confirm::Gone => Ok(None),
        }
    }
}

/// Runs the release script with the owner's latch; once more, as a retry,
/// on a fresh connection if the first reply was lost.
fn release_latched(ctx: Context<'_>, keys: &FairKeys, hold: &Hold) -> Result<Release> {
    ctx.calls().run_latched(&keys.name, hold.thread, true, |conn, latch| {
        let outcome = scripts::release(ctx.calls().scripts(), conn, keys, &hold.owner, hold.lease_ms, latch)?;
        if conn.replicated() == Some(false) {
            if ctx.config().replica_acks_required {
                return Err(Error::replica_acks(&keys.name));
            }
            log::warn!("keyholder: fair lock '{}' released, but not acknowledged by the replicas", keys.name);
        }
        Ok(outcome)
    })
}
