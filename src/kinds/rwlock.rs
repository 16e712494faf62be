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

mod release;
pub(crate) mod renewal;
pub(crate) mod scripts;

use std::sync::Arc;
use std::time::Instant;

use crate::client::{Client, Context};
use crate::error::{Error, Result};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::family::contend::{self, Bounds, Contender, OnChannel, Step};
use crate::kinds::family::fresh::{self, Keeping, Won};
use crate::kinds::family::reentry::{self, Reenter, Reentry};
use crate::kinds::family::sealed::{Core, Fences, Tokens};
use crate::kinds::family::tokens::{self, TokenHold};
use crate::kinds::family::{self, Acquirer, ByToken, Call, Fenced, Guard, Handle, Kind, TokenOwned};
use crate::kinds::lock::renewal::HashRenewal;
use crate::kinds::rwlock::renewal::ReadRenewal;
use crate::kinds::rwlock::scripts::{Acquire, RwKeys, WriteAcquire};
use crate::lease::Lease;
use crate::observe;
use crate::wait::channel::Wakes;

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
        self.context().validate_name(name)?;
        let shared = Arc::new(Shared { client: self.clone(), keys: Arc::new(RwKeys::new(name)) });
        Ok(ReadWriteLock { shared })
    }
}

/// What the handles of one read-write lock share.
#[derive(Debug)]
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
        Handle::of(RwSide { shared: Arc::clone(&self.shared), fenced: false }, Lease::Watchdog)
    }

    /// The write side, with the default [`Lease::Watchdog`], unfenced.
    pub fn write(&self) -> WriteLock {
        Handle::of(RwSide { shared: Arc::clone(&self.shared), fenced: false }, Lease::Watchdog)
    }
}

/// The read side of a [`ReadWriteLock`]: shared holds.
///
/// The methods are [`Lock`](crate::Lock)'s ([`Handle`]'s):
/// [`lock`](ReadLock::lock) blocks, [`try_lock`](ReadLock::try_lock) never
/// waits, [`try_lock_for`](ReadLock::try_lock_for) and
/// [`try_lock_until`](ReadLock::try_lock_until) wait at most so long; not
/// getting the lock in time is `Ok(None)`. A new read hold waits while a
/// keyholder writer waits.
pub type ReadLock = Handle<Read>;

/// The write side of a [`ReadWriteLock`]: one holder at a time, and no
/// reader meanwhile (but its own read holds). Write holds can carry fencing
/// tokens ([`fenced`](WriteLock::fenced)).
///
/// The methods are [`Lock`](crate::Lock)'s (see [`ReadLock`]).
pub type WriteLock = Handle<Write>;

/// An RAII guard for one read acquisition of a [`ReadWriteLock`] (through
/// its [`read`](ReadWriteLock::read) handle); see [`Guard`].
pub type ReadGuard = Guard<Read>;

/// An RAII guard for one write acquisition of a [`ReadWriteLock`] (through
/// its [`write`](ReadWriteLock::write) handle), with the hold's fencing
/// token when the handle was [`fenced`](WriteLock::fenced); see [`Guard`].
pub type WriteGuard = Guard<Write>;

/// An RAII guard for one write acquisition of a [`ReadWriteLock`] owned by
/// an [`OwnerToken`](crate::OwnerToken) ([`WriteLock::lock_owned`], [`WriteLock::lock_with`],
/// [`WriteLock::resume`]): `Send`, released from any thread; see [`Guard`].
pub type OwnedWriteGuard = Guard<Write, ByToken>;

/// An RAII guard for one read acquisition of a [`ReadWriteLock`] owned by
/// an [`OwnerToken`](crate::OwnerToken) ([`ReadLock::lock_owned`], [`ReadLock::lock_with`],
/// [`ReadLock::resume`]): `Send`, released from any thread; see [`Guard`].
pub type OwnedReadGuard = Guard<Read, ByToken>;

/// The core of one side of a [`ReadWriteLock`]: the read side
/// ([`Read`], Redisson's `RedissonReadLock`), or with `WRITE` the write side
/// ([`Write`], Redisson's `RedissonWriteLock`); the kind of a [`ReadLock`]
/// or a [`WriteLock`].
#[derive(Clone, Debug)]
pub struct RwSide<const WRITE: bool> {
    shared: Arc<Shared>,
    /// Write side only: fresh acquisitions mint fencing tokens.
    fenced: bool,
}

/// The read side's core: the kind of a [`ReadLock`].
pub type Read = RwSide<false>;

/// The write side's core: the kind of a [`WriteLock`].
pub type Write = RwSide<true>;

impl<const WRITE: bool> Kind for RwSide<WRITE> {}

impl Fenced for Write {}

impl Fences for Write {
    fn fence(&self) -> Self {
        RwSide { fenced: true, ..self.clone() }
    }

    fn is_fenced(&self) -> bool {
        self.fenced
    }
}

impl<const WRITE: bool> TokenOwned for RwSide<WRITE> {}

/// A write hold is one field, `<token>:write`, with a count, and the key's
/// PTTL as lease: RLock's renewal takes it on. A read hold is the field
/// `<token>` with a count and a timeout key per count: the read side's
/// renewal takes those on (and refuses a token that holds none).
impl<const WRITE: bool> Tokens for RwSide<WRITE> {
    fn resume(
        &self,
        ctx: Context<'_>,
        owner: &str,
        lease: Lease,
        lease_ms: u64,
    ) -> Result<(Arc<Hold>, Arc<RwKeys>)> {
        let side = Side { shared: &self.shared, lease, write: WRITE };
        let keys = &self.shared.keys;
        let held = TokenHold::of(Self::NOUN, &keys.name, owner, lease, lease_ms);
        let held = if WRITE { TokenHold { field: scripts::write_owner(owner), ..held } } else { held };
        let hold = if WRITE {
            tokens::resume(ctx, held, side.keeping())?
        } else {
            let read = [(&*keys.name, keys.key_prefix.as_str(), owner)];
            tokens::resume_by(ctx, held, side.keeping(), |conn| {
                let renewed = scripts::read_renew(ctx.calls().scripts(), conn, &read, lease_ms)?;
                Ok(renewed.first() == Some(&true))
            })?
        };
        Ok((hold, Arc::clone(keys)))
    }
}

impl<const WRITE: bool> Core for RwSide<WRITE> {
    const NOUN: &'static str = if WRITE { "write lock" } else { "read lock" };
    const HANDLE: &'static str = if WRITE { "WriteLock" } else { "ReadLock" };
    const GUARD: &'static str = if WRITE { "WriteGuard" } else { "ReadGuard" };
    type Keep = Arc<RwKeys>;

    fn client(&self) -> &Client {
        &self.shared.client
    }

    fn name(&self) -> &Arc<str> {
        &self.shared.keys.name
    }

    fn acquire(&self, call: Call<'_>) -> Result<Option<(Arc<Hold>, Arc<RwKeys>)>> {
        let client = call.ctx.uuid();
        let name = &self.shared.keys.name;
        // A read hold known lost does not count: Redis has the last word
        // (`write_acquire.lua` refuses an upgrade too).
        // A token's write hold is not the thread's: no upgrade of it.
        if WRITE
            && call.acquirer == Acquirer::Thread
            && reentry::unfinished(client, Self::NOUN, name).is_none()
            && reentry::unfinished(client, Read::NOUN, name).is_some_and(|h| !h.is_lost())
        {
            return Err(upgrade_refused(name));
        }
        let side = Side { shared: &self.shared, lease: call.lease, write: WRITE };
        Ok(side.acquire(call, self.fenced)?.map(|hold| (hold, Arc::clone(&self.shared.keys))))
    }

    fn release(ctx: Context<'_>, keys: &Arc<RwKeys>, hold: &Arc<Hold>) -> Result<()> {
        release::release(ctx, keys, hold, WRITE, Self::NOUN)
    }

    /// Redisson's read `isLocked` (any reader, or the writer holding read
    /// holds too; one script call), or write `isLocked` (the `mode` field
    /// is `write`; one `HGET`).
    fn is_locked(&self) -> Result<bool> {
        let (client, keys) = (&self.shared.client, &self.shared.keys);
        if !WRITE {
            return client
                .context()
                .calls()
                .with_live_conn(&keys.name, |conn| scripts::read_is_locked(conn, keys));
        }
        let mode: Option<String> =
            family::query(client, &keys.name, redis::cmd("HGET").arg(&*keys.name).arg("mode"))?;
        Ok(mode.as_deref() == Some("write"))
    }

    /// A hash without a `mode` field is another kind's lock, whose owner
    /// fields look like this thread's.
    fn hold_count(&self) -> Result<u32> {
        let (client, name) = (&self.shared.client, &self.shared.keys.name);
        let owner = family::current_owner(client);
        let owner = if WRITE { scripts::write_owner(&owner) } else { owner };
        let (count, mode): (Option<u32>, Option<String>) =
            family::query(client, name, redis::cmd("HMGET").arg(&**name).arg(owner).arg("mode"))?;
        if count.is_some() && mode.is_none() {
            return Err(Error::another_kinds_lock(
                name,
                "a lock hash without a \"mode\" field (a Lock, SpinLock or FairLock)",
            ));
        }
        Ok(count.unwrap_or(0))
    }

    /// Redisson's per-mode `forceUnlock`: deletes the lock if it is held in
    /// the side's mode, and wakes the waiters (the read side publishes `0`,
    /// the write side `1`).
    fn force_unlock(&self) -> Result<bool> {
        let (ctx, keys) = (self.shared.client.context(), &self.shared.keys);
        ctx.calls().with_live_conn(&keys.name, |conn| {
            scripts::force_unlock(ctx.calls().scripts(), conn, keys, WRITE)
        })
    }

    fn debug_fields(&self, f: &mut std::fmt::DebugStruct<'_, '_>) {
        if WRITE {
            f.field("fenced", &self.fenced);
        }
    }
}

/// One side of the lock, for one acquire call.
struct Side<'a> {
    shared: &'a Shared,
    lease: Lease,
    write: bool,
}

impl Side<'_> {
    fn context(&self) -> Context<'_> {
        self.shared.client.context()
    }

    fn noun(&self) -> &'static str {
        if self.write { Write::NOUN } else { Read::NOUN }
    }

    /// Re-enters the thread's live hold of this mode (or adds a count to
    /// a presented token's write hold), or takes a new one.
    fn acquire(&self, call: Call<'_>, fenced: bool) -> Result<Option<Arc<Hold>>> {
        let Call { ctx, deadline, block, obs, lease_ms, thread, owner, acquirer, .. } = call;
        let keys = &self.shared.keys;
        // A token's holds are not the thread's (`kinds/family/tokens.rs`).
        let by_thread = acquirer == Acquirer::Thread;
        let current = if by_thread { reentry::current(ctx.uuid(), self.noun(), &keys.name) } else { None };
        if let Some(hold) = current {
            let mint = fenced && hold.token().is_none();
            // A re-entry increments a count: sent once, never repeated.
            let attempt = || match ctx
                .calls()
                .with_conn(&keys.name, |conn| self.attempt(conn, &owner, lease_ms, mint, None))?
            {
                Acquire::Acquired { token, replicated } => Ok(Reentry::Acquired { token, replicated }),
                Acquire::Refused { .. } | Acquire::Upgrade => Ok(Reentry::Gone),
            };
            let count: Option<fn() -> Result<Option<u32>>> = None;
            // The write script adds the lease to the key's TTL.
            let how = Reenter { attempt, count, extends: self.write, mints: mint };
            if reentry::reenter(&hold, lease_ms, how)? {
                return Ok(Some(hold));
            }
            // The hold vanished unnoticed: it is lost; take a new one.
            release::finish(ctx, &hold);
        }
        if acquirer == Acquirer::PresentedToken
            && let Some(hold) = self.join(&owner, lease_ms)?
        {
            return Ok(Some(hold));
        }
        self.contend(Want { deadline, block, fenced, by_thread }, &owner, thread, lease_ms, obs)
    }

    /// A presented token's hold of this side, taken or resumed elsewhere:
    /// one re-entry of its field in Redis, if it is there (the acquire
    /// scripts would take a free lock as well, so the field is looked for
    /// first).
    fn join(&self, owner: &str, lease_ms: u64) -> Result<Option<Arc<Hold>>> {
        let (ctx, keys) = (self.context(), &self.shared.keys);
        let field = if self.write { scripts::write_owner(owner) } else { owner.to_owned() };
        let attempt = || {
            let held: bool = family::query(
                &self.shared.client,
                &keys.name,
                redis::cmd("HEXISTS").arg(&*keys.name).arg(&field),
            )?;
            if !held {
                return Ok(Reentry::Gone);
            }
            match ctx
                .calls()
                .with_conn(&keys.name, |conn| self.attempt(conn, owner, lease_ms, false, None))?
            {
                Acquire::Acquired { token, replicated } => Ok(Reentry::Acquired { token, replicated }),
                Acquire::Refused { .. } | Acquire::Upgrade => Ok(Reentry::Gone),
            }
        };
        let held = TokenHold {
            field: field.clone(),
            ..TokenHold::of(self.noun(), &keys.name, owner, self.lease, lease_ms)
        };
        tokens::join(ctx, held, attempt, || self.keeping())
    }

    /// How a new hold of this side is kept. Both sides' force unlocks
    /// publish on the lock's channel; every hold's owner field is in the
    /// lock's hash. Read holds renew their timeout keys too.
    fn keeping(&self) -> Keeping {
        let ctx = self.context();
        let renew_watchdog = if self.write { None } else { Some(ReadRenewal::of(ctx)) };
        let channel = Some(Arc::from(self.shared.keys.channel.as_str()));
        Keeping { renew: HashRenewal::of(ctx), renew_watchdog, channel, on_lost: None }
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
        let ctx = self.context();
        let keys = &self.shared.keys;
        if self.write {
            let args = WriteAcquire { owner, lease_ms, mint, waiting_ms };
            scripts::write_acquire(ctx.calls().scripts(), conn, keys, args)
        } else {
            scripts::read_acquire(ctx.calls().scripts(), conn, keys, owner, lease_ms)
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
    ) -> Result<Option<Arc<Hold>>> {
        let Want { deadline, block, .. } = want;
        let ctx = self.context();
        let keys = &self.shared.keys;
        let wait = ctx.waits().join(&keys.name, &keys.channel, Wakes::All);
        let mut contender = Contending { side: self, owner, lease_ms, want, waiting: false };
        let wait = OnChannel { wait: &wait, subscribers: ctx.waits().subscribers(), resume: false };
        let bounds = Bounds::of(ctx, deadline, block, obs, true);
        let outcome = contend::contend(&mut contender, &wait, bounds).outcome;
        if contender.waiting && !matches!(outcome, Ok(Some(_))) {
            // Stop holding readers back; wake them if this was the last
            // waiting writer.
            let _ = ctx.calls().with_live_conn(&keys.name, |conn| {
                scripts::write_withdraw(ctx.calls().scripts(), conn, keys, owner)
            });
        }
        let Some(Won { sent, token, replicated }) = outcome? else { return Ok(None) };
        fresh::refuse_unreplicated(ctx, &keys.name, replicated, || self.release_orphan(owner))?;
        let owner = if self.write { scripts::write_owner(owner) } else { owner.to_owned() };
        let acquisition = Acquisition { owner, thread, lease: self.lease, lease_ms, token, sent };
        let hold = fresh::hold(ctx, self.noun(), &keys.name, acquisition, replicated);
        if want.by_thread {
            reentry::set(ctx.uuid(), self.noun(), &hold);
        }
        fresh::keep(ctx, &hold, self.keeping());
        Ok(Some(hold))
    }

    /// One best-effort release of a hold an acquire may have taken with its
    /// reply lost, or that the caller refuses.
    fn release_orphan(&self, owner: &str) {
        let ctx = self.context();
        let keys = &self.shared.keys;
        let lease_ms = self.lease.ttl_ms(ctx.config().watchdog_timeout);
        // One attempt: whether it ran or not, what is left expires.
        let _ =
            ctx.calls().run_latched(&keys.name, crate::owner::current_thread_id(), false, |conn, latch| {
                if self.write {
                    scripts::write_release(ctx.calls().scripts(), conn, keys, owner, lease_ms, latch)
                } else {
                    scripts::read_release(ctx.calls().scripts(), conn, keys, owner, latch)
                }
            });
    }
}

/// A side's part in the contention loop.
struct Contending<'a> {
    side: &'a Side<'a>,
    owner: &'a str,
    lease_ms: u64,
    want: Want,
    /// Whether this writer may be recorded among the waiting writers.
    waiting: bool,
}

impl Contender for Contending<'_> {
    type Won = Won;

    fn attempt(&mut self, sent: Instant, _listening: bool) -> Result<Step> {
        let Want { deadline, block, fenced, .. } = self.want;
        let (side, ctx) = (self.side, self.side.context());
        ctx.check_running()?;
        let watchdog = ctx.config().watchdog_timeout;
        // A writer that will wait is recorded as waiting, for at most its
        // next sleep (it re-checks at least every watchdog timeout; before
        // its first sleep it subscribes and retries at once).
        let will_wait = block && deadline.is_none_or(|d| sent < d);
        let waiting_ms = (side.write && will_wait).then(|| {
            let left = deadline.map_or(watchdog, |d| d.saturating_duration_since(sent));
            crate::lease::millis_ceil(left.min(watchdog))
        });
        let name = &side.shared.keys.name;
        let attempt = ctx
            .calls()
            .with_conn(name, |conn| side.attempt(conn, self.owner, self.lease_ms, fenced, waiting_ms));
        match attempt {
            Ok(Acquire::Acquired { token, replicated }) => Ok(Step::Won(Won { sent, token, replicated })),
            Ok(Acquire::Upgrade) => Err(upgrade_refused(name)),
            Ok(Acquire::Refused { retry_in }) => {
                self.waiting |= waiting_ms.is_some();
                // A waiting writer's record goes stale after its bound.
                let retry_in =
                    if side.write { Some(retry_in.unwrap_or(watchdog).min(watchdog)) } else { retry_in };
                Ok(Step::Refused { retry_in, queued: false })
            }
            Err(e) => {
                if e.is_transport() {
                    // The acquire may have run with its reply lost: give
                    // back what it may have taken (one attempt).
                    side.release_orphan(self.owner);
                }
                Err(e)
            }
        }
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
    /// For the calling thread (not a token): the hold is the thread's.
    by_thread: bool,
}

/// The error for a write acquire by a thread holding a read hold.
fn upgrade_refused(name: &str) -> Error {
    Error::invalid_argument(format!(
        "read-write lock '{name}': the calling thread holds a read hold, and a read hold is never \
         upgraded to a write hold (as in Redisson, where the write lock would wait forever); \
         release the read guards first"
    ))
}
