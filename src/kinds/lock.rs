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

pub(crate) mod confirm;
mod release;
pub(crate) mod renewal;
pub(crate) mod scripts;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Client, Context};
use crate::error::{ErrorKind, Result};
use crate::holds::hash_kinds::{self, HashKind};
use crate::holds::hold::{Acquisition, Hold};
use crate::holds::renew::OnLost;
use crate::kinds::family::contend::{self, Bounds, Contended, Contender, Step, Wait};
use crate::kinds::family::fresh::{self, Won};
use crate::kinds::family::reentry::{self, Reenter, Reentry};
use crate::kinds::family::sealed::{Core, Fences, Reenters, Tokens};
use crate::kinds::family::tokens::{self, TokenHold};
use crate::kinds::family::{self, Acquirer, ByToken, Call, Fenced, Guard, Handle, Kind, TokenOwned};
use crate::kinds::lock::scripts::{Acquire, AcquireArgs, Confirm, Turns};
use crate::lease::Lease;
use crate::names;
use crate::observe;
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
        self.context().validate_name(name)?;
        lease.validate()?;
        Ok(Handle::of(Reentrant::new(self.clone(), name), lease))
    }
}

/// A handle to one named distributed lock: Redisson's `RLock`.
///
/// Cheap to clone (`Arc`s inside) and shareable across threads; it does no
/// I/O until asked. The guard-returning methods follow parking_lot's
/// vocabulary: [`lock`](Lock::lock) blocks, [`try_lock`](Lock::try_lock)
/// never waits, [`try_lock_for`](Lock::try_lock_for) and
/// [`try_lock_until`](Lock::try_lock_until) wait at most so long. Not getting
/// the lock in time is `Ok(None)`, not an error. The shared API is
/// [`Handle`]'s; what only this kind does (migration mode, its unlock
/// channel) is below, on `Handle<Reentrant>`.
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
pub type Lock = Handle<Reentrant>;

/// An RAII guard for one acquisition of a [`Lock`]; see [`Guard`]. It
/// stays on the thread that acquired it; [`Guard`] says what to do instead
/// of moving it.
pub type LockGuard = Guard<Reentrant>;

/// An RAII guard for one acquisition of a [`Lock`] owned by an
/// [`OwnerToken`](crate::OwnerToken) ([`Lock::lock_owned`], [`Lock::lock_with`],
/// [`Lock::resume`]); see [`Guard`]. It is `Send` (and `Sync`): move it to
/// the thread that finishes the work, which drops it or calls
/// [`unlock`](Guard::unlock); [`token`](Guard::token) names its owner.
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// # let lock = keyholder::Client::open("redis://127.0.0.1/")?.lock("orders:42")?;
/// let guard = lock.lock_owned()?;
/// let worker = std::thread::spawn(move || -> keyholder::Result<()> {
///     // ... the guarded work, on a pool thread ...
///     guard.unlock() // released here, not where it was taken
/// });
/// # let _ = worker.join();
/// # Ok(()) }
/// ```
pub type OwnedLockGuard = Guard<Reentrant, ByToken>;

/// The reentrant lock's core (Redisson's `RLock`): the kind of a [`Lock`].
#[derive(Clone, Debug)]
pub struct Reentrant {
    client: Client,
    name: Arc<str>,
    channel: Arc<str>,
    /// The fencing-token counter, for fenced handles.
    token_key: Option<Arc<str>>,
    /// Migration mode: a string key at the name is a legacy holder.
    migration: bool,
    /// A waiting call rides out an outage (off for a RedLock's masters).
    rides_outages: bool,
}

impl Reentrant {
    fn new(client: Client, name: &str) -> Self {
        let migration = client.context().config().migration_mode;
        Reentrant {
            migration,
            client,
            name: Arc::from(name),
            channel: Arc::from(names::unlock_channel(name)),
            token_key: None,
            rides_outages: true,
        }
    }
}

impl Handle<Reentrant> {
    /// A handle to the same lock whose waiting calls return an outage's
    /// error at once instead of riding it out: a RedLock asks the next
    /// master rather than wait for a dead one.
    pub(crate) fn failing_fast(&self) -> Lock {
        self.with_kind(Reentrant { rides_outages: false, ..self.kind().clone() })
    }

    /// The unlock channel waiters listen on: `redisson_lock__channel:{<name>}`.
    pub fn channel(&self) -> &str {
        &self.kind().channel
    }

    /// A handle to the same lock with migration mode on or off, whatever
    /// the client's setting: on, a string key at the lock's name (a
    /// hand-rolled `SET NX` lock of code not yet migrated) counts as held by
    /// a legacy holder, is waited on until it is deleted or expires, and is
    /// never modified. See
    /// [`ClientBuilder::migration_mode`](crate::ClientBuilder::migration_mode)
    /// and `docs/migrating.md`. No I/O.
    pub fn with_migration_mode(&self, on: bool) -> Lock {
        self.with_kind(Reentrant { migration: on, ..self.kind().clone() })
    }

    /// True when this handle treats a string key at its name as a legacy
    /// holder (see [`with_migration_mode`](Lock::with_migration_mode)).
    pub fn is_migration_mode(&self) -> bool {
        self.kind().migration
    }
}

impl Kind for Reentrant {}

impl TokenOwned for Reentrant {}

impl Tokens for Reentrant {
    fn resume(
        &self,
        ctx: Context<'_>,
        owner: &str,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<(Arc<Hold>, Arc<Entry>)> {
        let entry = ctx.waits().entry(&self.name);
        let held = TokenHold::of(Self::NOUN, &entry.keys.name, owner, lease, lease_ms);
        let hold = tokens::resume(ctx, held, release::keeping(ctx, &entry))?;
        Ok((hold, entry))
    }
}

impl Reenters for Reentrant {
    const ONCE: [&'static str; 3] = ["non-reentrant lock", "NonReentrantLock", "NonReentrantLockGuard"];

    fn live_hold(&self, ctx: Context<'_>, thread: u64) -> Option<Arc<Hold>> {
        ctx.waits().entry(&self.name).hold_of(thread)
    }
}

impl Fenced for Reentrant {}

impl Fences for Reentrant {
    fn fence(&self) -> Self {
        Reentrant { token_key: Some(Arc::from(names::token_key(&self.name))), ..self.clone() }
    }

    fn is_fenced(&self) -> bool {
        self.token_key.is_some()
    }
}

impl Core for Reentrant {
    const NOUN: &'static str = "lock";
    const HANDLE: &'static str = "Lock";
    const GUARD: &'static str = "LockGuard";
    /// The lock's local state in the client, which the release passes on.
    type Keep = Arc<Entry>;

    fn client(&self) -> &Client {
        &self.client
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn acquire(&self, call: Call<'_>) -> Result<Option<(Arc<Hold>, Arc<Entry>)>> {
        let entry = call.ctx.waits().entry(&self.name);
        let acquired = self.acquire_in(&entry, call)?;
        Ok(acquired.map(|hold| (hold, entry)))
    }

    fn release(ctx: Context<'_>, entry: &Arc<Entry>, hold: &Arc<Hold>) -> Result<()> {
        release::release(ctx, entry, hold)
    }

    fn on_lost(entry: &Arc<Entry>) -> Option<Arc<dyn OnLost>> {
        Some(Arc::clone(entry) as _)
    }

    fn is_locked(&self) -> Result<bool> {
        family::hash_is_locked(&self.client, &self.name, self.migration)
    }

    fn hold_count(&self) -> Result<u32> {
        family::hash_hold_count(&self.client, &self.name, self.migration)
    }

    fn force_unlock(&self) -> Result<bool> {
        let ctx = self.client.context();
        ctx.calls().with_live_conn(&self.name, |conn| {
            scripts::force_unlock(ctx.calls().scripts(), conn, &self.name, Some(&self.channel))
        })
    }

    fn legacy(&self) -> bool {
        self.migration
    }

    fn debug_fields(&self, f: &mut std::fmt::DebugStruct<'_, '_>) {
        f.field("migration", &self.migration);
    }
}

impl Reentrant {
    fn acquire_in(&self, entry: &Arc<Entry>, call: Call<'_>) -> Result<Option<Arc<Hold>>> {
        let Call { ctx, deadline, block, obs, lease, lease_ms, thread, owner, acquirer } = call;
        // A token's live hold here sits at the gate under the token's id.
        if let Some(hold) = entry.hold_of(thread).filter(|h| h.owner == owner)
            && self.reenter(entry, &hold, &owner, lease_ms)?
        {
            return Ok(Some(hold));
        }
        if acquirer == Acquirer::PresentedToken
            && let Some(hold) = self.join(entry, &owner, lease, lease_ms)?
        {
            return Ok(Some(hold));
        }

        // A token is not a thread: its holds do not count as the thread's.
        let by_thread = acquirer == Acquirer::Thread;
        if by_thread {
            hash_kinds::check(ctx.uuid(), &entry.keys.name, HashKind::Lock)?;
        }
        let successor = Successor { thread, owner, lease, lease_ms, fenced: self.token_key.is_some() };
        match entry.enter_gate(&successor, deadline, block, || obs.waiting(), self)? {
            None => return Ok(None),
            Some(Entered::Handed(hold)) => {
                if by_thread {
                    hash_kinds::note(ctx.uuid(), HashKind::Lock, &hold);
                }
                return Ok(Some(hold));
            }
            Some(Entered::Gate) => {}
        }
        match self.contend(entry, &successor, deadline, block, obs) {
            Ok(Some(Won { sent, token, replicated })) => {
                fresh::refuse_unreplicated(ctx, &self.name, replicated, || {
                    let _ = release::release_orphan(ctx, entry, &successor.owner, lease_ms);
                    entry.leave_gate(thread);
                })?;
                let owner = successor.owner;
                let acquisition = Acquisition { owner, thread, lease, lease_ms, token, sent };
                let hold = fresh::hold(ctx, Self::NOUN, &entry.keys.name, acquisition, replicated);
                entry.set_held(Arc::clone(&hold));
                if by_thread {
                    hash_kinds::note(ctx.uuid(), HashKind::Lock, &hold);
                }
                fresh::keep(ctx, &hold, release::keeping(ctx, entry));
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
                    let _ = release::release_orphan(ctx, entry, &successor.owner, lease_ms);
                }
                entry.leave_gate(thread);
                other.map(|_| None)
            }
        }
    }

    /// A token presented with no live hold at this client's gate may hold
    /// the lock all the same: a hold resumed here, or taken or resumed in
    /// another process. One re-entry attempt in Redis adds a count to its
    /// field if it is there, as a hold of its own outside the gate, whose
    /// guard releases that count; `None` when the token holds nothing here
    /// (the caller then takes a new hold).
    fn join(
        &self,
        entry: &Arc<Entry>,
        owner: &str,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<Option<Arc<Hold>>> {
        let ctx = self.client.context();
        let held = TokenHold::of(Self::NOUN, &entry.keys.name, owner, lease, lease_ms);
        let attempt = || match self.try_acquire(entry, owner, lease_ms, Attempt::Reentry { mint: false })? {
            Acquire::Acquired { token, replicated } => Ok(Reentry::Acquired { token, replicated }),
            Acquire::Held { .. } | Acquire::Free => Ok(Reentry::Gone),
        };
        tokens::join(ctx, held, attempt, || release::keeping(ctx, entry))
    }

    /// Re-enters `hold`, this thread's live hold (see
    /// `kinds/family/reentry.rs`): true with one more guard, false when the
    /// hold vanished unnoticed (it is marked lost and the gate let go, so
    /// the caller takes a new hold like anyone else). The owner's count
    /// tells whether a re-entry whose reply was lost ran, so connections
    /// that all died at once (a restart, a proxy) do not fail it either.
    fn reenter(&self, entry: &Arc<Entry>, hold: &Arc<Hold>, owner: &str, lease_ms: u64) -> Result<bool> {
        // A fenced handle re-entering a hold taken without a token mints one.
        let mints = self.token_key.is_some() && hold.token().is_none();
        let attempt = || match self.try_acquire(entry, owner, lease_ms, Attempt::Reentry { mint: mints })? {
            Acquire::Acquired { token, replicated } => Ok(Reentry::Acquired { token, replicated }),
            // Another owner has the lock, or nobody has.
            Acquire::Held { .. } | Acquire::Free => Ok(Reentry::Gone),
        };
        let count =
            || family::query(&self.client, &self.name, redis::cmd("HGET").arg(&*self.name).arg(owner));
        let reentered =
            reentry::reenter(hold, lease_ms, Reenter { attempt, count: Some(count), extends: true, mints })?;
        if !reentered {
            // Its guards must not touch whatever hold comes next.
            entry.release_gate(hold.id);
        }
        Ok(reentered)
    }

    /// Contends in Redis from the gate (`kinds/family/contend.rs`), until
    /// the acquire script succeeds, a release hands the lock over, or the
    /// deadline passes (`None`).
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
        let ctx = self.client.context();
        let (owner, lease_ms) = (me.owner.as_str(), me.lease_ms);
        if let Some(stale) = entry.take_grant()
            && granted_owner(&stale) != owner
        {
            // The lock was handed to a thread of this client that has since
            // given up (without leaving the queue, since this thread took
            // over its place): give it back, which passes it on.
            let _ = release::release_orphan(ctx, entry, granted_owner(&stale), lease_ms);
        }
        // This wait's ticket: a grant answers the wait whose ticket it
        // carries. A grant to this thread made during an earlier wait, which
        // that wait's own attempt took over before the message arrived (and
        // which has since been released), may still be on its way.
        let ticket = (!me.fenced).then(|| ctx.holds().next_id());
        let mut contender =
            Contending { lock: self, ctx, entry, owner, lease_ms, ticket, block, no_ttl_since: None };
        let wait = GateWait { entry, ctx, lock: self };
        let bounds = Bounds::of(ctx, deadline, block, obs, self.rides_outages);
        let Contended { outcome, queued_at } = contend::contend(&mut contender, &wait, bounds);
        let gave_up = match &outcome {
            Ok(won) => won.is_none(),
            Err(e) => !e.is_redis_error(),
        };
        if gave_up && queued_at.is_some() && !entry.has_queued_threads() {
            // Giving up with no thread of this client behind to take over the
            // place: leave the queue, and pass on a turn (or a lock) this
            // client was given meanwhile. (With Redis failing, the place is
            // dropped when its turn comes and nobody listens.)
            let turns = Turns::of(&entry.keys, ctx.id());
            let _ = ctx.calls().with_live_conn(&self.name, |conn| {
                scripts::dequeue(
                    ctx.calls().scripts(),
                    conn,
                    &entry.keys.name,
                    &entry.keys.channel,
                    turns,
                    owner,
                )
            });
        }
        outcome
    }

    /// Takes the lock's channels back if they still linger, subscribed and
    /// confirmed, from this client's last wait: no round trip.
    fn resubscribe_lingering(&self, entry: &Arc<Entry>) -> bool {
        match self.client.context().waits().subscribers().resume(entry.interest()) {
            Some(subscription) => {
                entry.keep_subscription(subscription);
                true
            }
            None => false,
        }
    }

    /// One acquire script call.
    fn try_acquire(&self, entry: &Entry, owner: &str, lease_ms: u64, attempt: Attempt) -> Result<Acquire> {
        let ctx = self.client.context();
        ctx.check_running()?;
        let (fresh, enqueue, grant_ticket, mint) = match attempt {
            Attempt::Reentry { mint } => (false, false, None, mint),
            Attempt::Fresh { enqueue, grant_ticket } => (true, enqueue, grant_ticket, true),
        };
        let args = AcquireArgs {
            name: &self.name,
            turns: Turns::of(&entry.keys, ctx.id()),
            // Re-entries keep their hold's token.
            token_key: self.token_key.as_deref().filter(|_| mint),
            lease_ms,
            owner,
            fresh,
            enqueue,
            grant_ticket,
            legacy: self.migration,
        };
        if fresh {
            // A new hold's acquire sets the count to 1: safe to repeat.
            ctx.calls()
                .with_live_conn(&self.name, |conn| scripts::acquire(ctx.calls().scripts(), conn, &args))
        } else {
            ctx.calls().with_conn(&self.name, |conn| scripts::acquire(ctx.calls().scripts(), conn, &args))
        }
    }
}

impl GateRedis for Reentrant {
    fn subscribe(&self, entry: &Arc<Entry>) -> Result<Subscription> {
        self.client.context().waits().subscribers().subscribe(entry.interest(), None)
    }

    fn still_held(&self, hold: &Hold) -> bool {
        family::query(&self.client, &self.name, redis::cmd("HEXISTS").arg(&*hold.name).arg(&hold.owner))
            .unwrap_or(true)
    }
}

/// How long a waiter in migration mode gives a legacy holder's string key
/// without a TTL to get one (`SETNX` + `EXPIRE` sets it one round trip after
/// the key) before failing with `LegacyLockWithoutTtl`.
pub(crate) const LEGACY_NO_TTL_GRACE: Duration = Duration::from_secs(1);

/// Which kind of acquire attempt.
#[derive(Debug, Clone, Copy)]
enum Attempt {
    /// The thread holds the lock already; `mint` a fencing token for a hold
    /// that has none.
    Reentry { mint: bool },
    /// A new hold; `enqueue` once the thread listens on its wake channel;
    /// `grant_ticket`, its wait's ticket, unless it must mint a fencing token.
    Fresh { enqueue: bool, grant_ticket: Option<u64> },
}

/// The reentrant lock's side of the contention loop.
struct Contending<'a> {
    lock: &'a Reentrant,
    ctx: Context<'a>,
    entry: &'a Arc<Entry>,
    owner: &'a str,
    lease_ms: u64,
    /// This wait's ticket, when a release may hand the lock over (not to a
    /// fenced acquisition, which mints its token in its own script call).
    ticket: Option<u64>,
    block: bool,
    /// When a legacy holder's string was first seen without a TTL.
    no_ttl_since: Option<Instant>,
}

impl Contender for Contending<'_> {
    type Won = Won;

    fn attempt(&mut self, sent: Instant, listening: bool) -> Result<Step> {
        // Once the thread listens on its wake channel, a refusal queues
        // this client in Redis.
        let attempt = Attempt::Fresh { enqueue: listening, grant_ticket: self.ticket };
        let refused = |retry_in| Ok(Step::Refused { retry_in, queued: listening });
        // A fresh attempt is safe to repeat: one whose reply was lost found
        // this owner's field and takes it.
        match self.lock.try_acquire(self.entry, self.owner, self.lease_ms, attempt) {
            Ok(Acquire::Acquired { token, replicated }) => {
                // A grant that raced this attempt is the same hold.
                self.entry.take_grant();
                Ok(Step::Won(Won { sent, token, replicated }))
            }
            Ok(Acquire::Held { remaining }) => {
                self.no_ttl_since = None;
                refused(remaining)
            }
            // Only a re-entry is told the lock is free; retry at once.
            Ok(Acquire::Free) => refused(Some(Duration::ZERO)),
            Err(e) if e.is_legacy_lock_without_ttl() && self.block => {
                // `SETNX` + `EXPIRE` leaves a live holder's key without a
                // TTL between its two commands: only a key that stays so
                // for the grace period is an error.
                let since = *self.no_ttl_since.get_or_insert(sent);
                match (since + LEGACY_NO_TTL_GRACE).checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => refused(Some(left)),
                    _ => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn granted(&mut self, grant: Grant, queued_at: Option<Instant>) -> Result<Option<Won>> {
        match queued_at.filter(|_| self.ticket.is_some() && granted_ticket(&grant, self.owner) == self.ticket)
        {
            Some(queued_at) => {
                let sent = grant.granted_at(queued_at);
                // The releaser's WAIT acknowledged the grant, not this
                // thread: confirm it, as an acquisition would. Gone since
                // (expired, deleted): contend again.
                match confirm::grant(self.ctx, &self.lock.name, self.owner)? {
                    Confirm::Held { replicated } => Ok(Some(Won { sent, token: None, replicated })),
                    Confirm::Gone => Ok(None),
                }
            }
            // This thread's grant from an earlier wait, which that wait's
            // own attempt took over: long released, nothing to give back
            // (the field may be a newer, genuine grant by now).
            None if granted_owner(&grant) == self.owner => Ok(None),
            // Handed to a thread of this client that gave up since: give it
            // back, which passes it on.
            None => {
                let _ = release::release_orphan(self.ctx, self.entry, granted_owner(&grant), self.lease_ms);
                Ok(None)
            }
        }
    }
}

/// The owner id a grant gave the lock to: its message names
/// `<owner id>/<ticket>` (an older keyholder's release: `<owner id>`; see
/// `lua/lock/release.lua`).
fn granted_owner(grant: &Grant) -> &str {
    grant.owner.rsplit_once('/').map_or(grant.owner.as_str(), |(owner, _)| owner)
}

/// The ticket of `owner`'s wait that a grant answers, if it names one
/// (compared without building the expected text: `contend` runs on every
/// fresh acquisition).
fn granted_ticket(grant: &Grant, owner: &str) -> Option<u64> {
    grant.owner.strip_prefix(owner)?.strip_prefix('/')?.parse().ok()
}

/// The reentrant lock waits on its entry: the gate's sticky wake-up slot,
/// woken by the lock's unlock and wake channels and by local releases.
struct GateWait<'a> {
    entry: &'a Arc<Entry>,
    ctx: Context<'a>,
    lock: &'a Reentrant,
}

impl Wait for GateWait<'_> {
    fn is_subscribed(&self) -> bool {
        self.entry.is_subscribed()
    }

    fn start(&self) -> bool {
        // A channel still lingering from this client's last wait is taken
        // back without a round trip, so the first refusal queues already.
        let listening = self.entry.is_subscribed() || self.lock.resubscribe_lingering(self.entry);
        if listening {
            // Messages from before this attempt concern earlier holders.
            self.entry.clear_wake();
        }
        listening
    }

    fn subscribe(&self, deadline: Option<Instant>) -> Result<()> {
        let subscription = self.ctx.waits().subscribers().subscribe(self.entry.interest(), deadline)?;
        self.entry.keep_subscription(subscription);
        self.entry.clear_wake();
        Ok(())
    }

    fn wait(&self, _seen: u64, until: Instant) -> Result<()> {
        self.entry.wait_wake(until).map(|_| ())
    }

    fn take_grant(&self) -> Option<Grant> {
        self.entry.take_grant()
    }
}
