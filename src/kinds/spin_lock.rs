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
mod scripts;

pub use back_off::BackOff;
use back_off::Sleeps;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Client, Context};
use crate::error::{ErrorKind, Result};
use crate::holds::hash_kinds::{self, HashKind};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::family::contend::{self, Bounds, Contender, Sleep, Step};
use crate::kinds::family::fresh::{self, Keeping, Won};
use crate::kinds::family::reentry::{self, Reenter, Reentry};
use crate::kinds::family::release as released;
use crate::kinds::family::sealed::{Core, Tokens};
use crate::kinds::family::tokens::{self, TokenHold};
use crate::kinds::family::{self, Acquirer, ByToken, Call, Guard, Handle, Kind, TokenOwned};
use crate::kinds::lock::renewal::HashRenewal;
use crate::lease::Lease;
use scripts::{Acquire, Mode, Release};

impl Client {
    /// A spin-lock handle for `name` with the default [`Lease::Watchdog`]
    /// and [`BackOff::default`] (Redisson's `getSpinLock(name)`). No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
    /// a name [`Client::lock`] refuses.
    pub fn spin_lock(&self, name: &str) -> Result<SpinLock> {
        self.context().validate_name(name)?;
        let spin = Spin { client: self.clone(), name: Arc::from(name), back_off: BackOff::default() };
        Ok(Handle::of(spin, Lease::Watchdog))
    }
}

/// A handle to one named spin lock: a reentrant lock that never uses
/// pub/sub.
///
/// The API is [`Lock`](crate::Lock)'s ([`Handle`]'s): [`lock`](SpinLock::lock)
/// blocks, [`try_lock`](SpinLock::try_lock) makes one attempt,
/// [`try_lock_for`](SpinLock::try_lock_for) and
/// [`try_lock_until`](SpinLock::try_lock_until) wait at most so long
/// (`Ok(None)` when time runs out). Between refused attempts the thread
/// sleeps its [`BackOff`], never past its deadline. Reentrant per thread;
/// renewed by the client's watchdog while held (or a fixed lease); the
/// guard releases on drop, publishing nothing.
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
pub type SpinLock = Handle<Spin>;

/// An RAII guard for one acquisition of a [`SpinLock`]; see [`Guard`].
pub type SpinLockGuard = Guard<Spin>;

/// An RAII guard for one acquisition of a [`SpinLock`] owned by an
/// [`OwnerToken`](crate::OwnerToken) ([`SpinLock::lock_owned`], [`SpinLock::lock_with`],
/// [`SpinLock::resume`]): `Send`, released from any thread; see [`Guard`].
pub type OwnedSpinLockGuard = Guard<Spin, ByToken>;

/// The spin lock's core (Redisson's `RedissonSpinLock`): the kind of a
/// [`SpinLock`].
#[derive(Clone, Debug)]
pub struct Spin {
    client: Client,
    name: Arc<str>,
    back_off: BackOff,
}

impl Handle<Spin> {
    /// The pause policy between refused attempts.
    pub fn back_off(&self) -> BackOff {
        self.kind().back_off
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
        Ok(self.with_kind(Spin { back_off, ..self.kind().clone() }))
    }
}

impl Kind for Spin {}

impl Core for Spin {
    const NOUN: &'static str = "spin lock";
    const HANDLE: &'static str = "SpinLock";
    const GUARD: &'static str = "SpinLockGuard";
    type Keep = ();

    fn client(&self) -> &Client {
        &self.client
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn acquire(&self, call: Call<'_>) -> Result<Option<(Arc<Hold>, ())>> {
        Ok(self.acquire_hold(call)?.map(|hold| (hold, ())))
    }

    fn release(ctx: Context<'_>, _: &(), hold: &Arc<Hold>) -> Result<()> {
        // A token's hold may be one count of several (a re-entry with the
        // token, here or in another process, is a hold of its own): its
        // last guard's release is latched too, so a retry after a lost
        // reply never releases a second count.
        let token = crate::owner::is_token_id(hold.thread);
        released::release_registered(ctx, Self::NOUN, hold, true, |last| {
            if last && !token { release_last(ctx, hold) } else { (release_nested(ctx, hold), false) }
        })
    }

    fn is_locked(&self) -> Result<bool> {
        family::hash_is_locked(&self.client, &self.name, false)
    }

    fn hold_count(&self) -> Result<u32> {
        family::hash_hold_count(&self.client, &self.name, false)
    }

    /// Publishes nothing (as Redisson's spin lock): waiters find the lock
    /// free at their next try.
    fn force_unlock(&self) -> Result<bool> {
        let ctx = self.client.context();
        ctx.calls().with_live_conn(&self.name, |conn| {
            crate::kinds::lock::scripts::force_unlock(ctx.calls().scripts(), conn, &self.name, None)
        })
    }

    fn debug_fields(&self, f: &mut std::fmt::DebugStruct<'_, '_>) {
        f.field("back_off", &self.back_off);
    }
}

impl Spin {
    fn acquire_hold(&self, call: Call<'_>) -> Result<Option<Arc<Hold>>> {
        let Call { ctx, deadline, block, obs, lease, lease_ms, thread, owner, acquirer } = call;
        let client = ctx.uuid();
        // A token's holds are not the thread's (`kinds/family/tokens.rs`).
        let by_thread = acquirer == Acquirer::Thread;
        if by_thread
            && let Some(hold) = reentry::current(client, Self::NOUN, &self.name)
            && self.reenter(ctx, &hold, lease_ms)?
        {
            return Ok(Some(hold));
        }
        if acquirer == Acquirer::PresentedToken {
            let held = TokenHold::of(Self::NOUN, &self.name, &owner, lease, lease_ms);
            let attempt = || self.reentry_attempt(ctx, &owner, lease_ms);
            if let Some(hold) = tokens::join(ctx, held, attempt, || keeping(ctx))? {
                return Ok(Some(hold));
            }
        }
        if by_thread {
            hash_kinds::check(client, &self.name, HashKind::SpinLock)?;
        }
        let mut spinning =
            Spinning { spin: self, ctx, owner: &owner, lease_ms, sleeps: self.back_off.sleeps() };
        let bounds = Bounds::of(ctx, deadline, block, obs, true);
        let won = match contend::contend(&mut spinning, &Sleep, bounds).outcome {
            Ok(Some(won)) => won,
            Ok(None) => return Ok(None),
            Err(e) => {
                if e.is_transport() || e.kind() == ErrorKind::UnexpectedReply {
                    // The script may have run with its reply lost: give back
                    // what it may have taken, in one attempt.
                    self.give_back(ctx, &owner, lease_ms);
                }
                return Err(e);
            }
        };
        let Won { sent, replicated, .. } = won;
        fresh::refuse_unreplicated(ctx, &self.name, replicated, || self.give_back(ctx, &owner, lease_ms))?;
        let acquisition = Acquisition { owner, thread, lease, lease_ms, token: None, sent };
        let hold = fresh::hold(ctx, Self::NOUN, &self.name, acquisition, replicated);
        fresh::keep(ctx, &hold, keeping(ctx));
        if by_thread {
            reentry::set(client, Self::NOUN, &hold);
            hash_kinds::note(client, HashKind::SpinLock, &hold);
        }
        Ok(Some(hold))
    }

    /// One re-entry script call for `owner`: sent once (it increments a
    /// count).
    fn reentry_attempt(&self, ctx: Context<'_>, owner: &str, lease_ms: u64) -> Result<Reentry> {
        let outcome = ctx.calls().with_conn(&self.name, |conn| {
            scripts::acquire(ctx.calls().scripts(), conn, &self.name, lease_ms, owner, Mode::Reentry)
        })?;
        Ok(match outcome {
            Acquire::Acquired { replicated } => Reentry::Acquired { token: None, replicated },
            Acquire::Held { .. } | Acquire::Free => Reentry::Gone,
        })
    }

    /// Re-enters the thread's live `hold` (see `kinds/family/reentry.rs`):
    /// true with one more guard, false when the hold vanished unnoticed.
    fn reenter(&self, ctx: Context<'_>, hold: &Arc<Hold>, lease_ms: u64) -> Result<bool> {
        let attempt = || self.reentry_attempt(ctx, &hold.owner, lease_ms);
        let count =
            || family::query(&self.client, &self.name, redis::cmd("HGET").arg(&*self.name).arg(&hold.owner));
        reentry::reenter(hold, lease_ms, Reenter { attempt, count: Some(count), extends: true, mints: false })
    }

    /// One unlatched release attempt for `owner`, for an acquire whose
    /// reply was lost or refused by this client.
    fn give_back(&self, ctx: Context<'_>, owner: &str, lease_ms: u64) {
        let _ = ctx.calls().with_live_conn(&self.name, |conn| {
            scripts::release(ctx.calls().scripts(), conn, &self.name, lease_ms, owner, None)
        });
    }
}

/// How a spin lock's hold is kept: renewed as RLock's hash is. Nothing is
/// published on a spin lock's force unlock: nothing to listen on, but this
/// client's finds the hold.
fn keeping(ctx: Context<'_>) -> Keeping {
    Keeping { renew: HashRenewal::of(ctx), renew_watchdog: None, channel: None, on_lost: None }
}

impl TokenOwned for Spin {}

impl Tokens for Spin {
    fn resume(&self, ctx: Context<'_>, owner: &str, lease: Lease, lease_ms: u64) -> Result<(Arc<Hold>, ())> {
        let held = TokenHold::of(Self::NOUN, &self.name, owner, lease, lease_ms);
        Ok((tokens::resume(ctx, held, keeping(ctx))?, ()))
    }
}

/// The spin lock's side of the contention loop: a refused thread sleeps
/// its back-off, never past the holder's lease (the lock is free then at
/// the latest).
struct Spinning<'a> {
    spin: &'a Spin,
    ctx: Context<'a>,
    owner: &'a str,
    lease_ms: u64,
    sleeps: Sleeps,
}

impl Contender for Spinning<'_> {
    type Won = Won;

    fn attempt(&mut self, sent: Instant, _listening: bool) -> Result<Step> {
        let (ctx, name) = (self.ctx, &self.spin.name);
        ctx.check_running()?;
        // A fresh attempt is safe to repeat: one whose reply was lost found
        // this owner's field and takes it. With nothing to wake it, the
        // outage's back-off is the pause.
        let outcome = ctx.calls().with_live_conn(name, |conn| {
            scripts::acquire(ctx.calls().scripts(), conn, name, self.lease_ms, self.owner, Mode::Fresh)
        })?;
        let remaining = match outcome {
            Acquire::Acquired { replicated } => return Ok(Step::Won(Won { sent, token: None, replicated })),
            Acquire::Held { remaining } => remaining,
            Acquire::Free => Some(Duration::ZERO),
        };
        let mut pause = self.sleeps.next_sleep();
        if let Some(remaining) = remaining {
            pause = pause.min(remaining.max(Duration::from_millis(1)));
        }
        Ok(Step::Refused { retry_in: Some(pause), queued: false })
    }
}

/// A nested release: latched, retried once on a fresh connection if the
/// reply was lost (the latch returns the first outcome; `kinds/latch.rs`).
fn release_nested(ctx: Context<'_>, hold: &Hold) -> Result<Release> {
    ctx.calls().run_latched(&hold.name, hold.thread, true, |conn, latch| {
        scripts::release(ctx.calls().scripts(), conn, &hold.name, hold.lease_ms, &hold.owner, Some(latch))
    })
}

/// The last release: unlatched (once the owner's field is gone a retry
/// releases nothing), retried once if the reply was lost. Returns whether
/// the outcome is the retry's. Nothing is published: spin-lock waiters
/// retry on their own.
fn release_last(ctx: Context<'_>, hold: &Hold) -> (Result<Release>, bool) {
    let run = || {
        ctx.calls().with_conn(&hold.name, |conn| {
            scripts::release(ctx.calls().scripts(), conn, &hold.name, hold.lease_ms, &hold.owner, None)
        })
    };
    match run() {
        Err(e) if e.is_transport() => (run(), true),
        outcome => (outcome, false),
    }
}
