//! Redisson's `RSemaphore`: a counter of permits shared across processes.
//!
//! The semaphore is one Redis STRING at the name itself, holding the number
//! of available permits; taking N permits decrements it only if N are
//! there, giving them back increments it and publishes the new count on
//! `redisson_sc:{<name>}`, which wakes waiters (Java's and keyholder's).
//! Nobody owns a permit: Redis does not know who holds what, so a holder
//! that dies keeps its permits forever (use the
//! [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore) when
//! holders may die). keyholder adds what Java's `RSemaphore` lacks: a
//! guard that gives its permits back when dropped, waits that are always
//! bounded (see `wait.rs`), and bad input refused before any I/O.

mod guard;
mod handover;
pub(crate) mod scripts;
pub(crate) mod wait;

pub use guard::SemaphorePermits;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Calls, Client};
use crate::error::{Error, Result};
use crate::lease::millis_ceil;
use crate::wait::patience::Patience;
use wait::Attempt;

impl Client {
    /// A handle to the semaphore `name`, Redisson's
    /// `getSemaphore(name)`. No I/O.
    ///
    /// The Redis key is `name` itself and the channel
    /// `redisson_sc:{<name>}`, so a Java service using Redisson on the
    /// same name shares the permits.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a name [`Client::lock`] would refuse.
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        self.context().validate_name(name)?;
        Ok(Semaphore {
            client: self.clone(),
            name: Arc::from(name),
            channel: Arc::from(crate::names::semaphore_channel(name)),
        })
    }
}

/// Refuses 0 permits before any I/O.
pub(crate) fn check_permits(permits: u32, what: &str) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid_argument(format!("{what}: 0 permits (at least 1 is needed)")));
    }
    Ok(())
}

/// A handle to one named semaphore (Redisson's `RSemaphore`).
///
/// Cheap to clone and shareable across threads; no I/O until asked. The
/// guard-returning calls follow [`Lock`](crate::Lock)'s vocabulary:
/// [`try_acquire`](Semaphore::try_acquire) never waits,
/// [`try_acquire_for`](Semaphore::try_acquire_for) and
/// [`try_acquire_until`](Semaphore::try_acquire_until) wait at most so
/// long (`Ok(None)` when time runs out), [`acquire`](Semaphore::acquire)
/// waits as long as it takes. The raw calls (`release`, `add_permits`,
/// `drain_permits` ...) are Redisson's, for permits taken without a guard.
///
/// Like Redisson's, the semaphore is not fair, but its barging is bounded:
/// a thread that gives permits back while others wait for them leaves them
/// to those waiters for up to 2 ms, so its next waiting acquire of the same
/// semaphore (`acquire`, `try_acquire_for/until`) within 2 ms of the
/// release first waits out the rest of them; `try_acquire` never does.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1/")?;
/// let pool = client.semaphore("db-connections")?;
/// pool.try_set_permits(4)?;                 // once; false if already set
/// {
///     let _permit = pool.acquire(1)?;       // waits for a permit
///     // ... at most 4 of these run at once, across every process ...
/// }                                         // given back here
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Client,
    name: Arc<str>,
    channel: Arc<str>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore").field("name", &self.name).finish()
    }
}

impl Semaphore {
    fn calls(&self) -> Calls<'_> {
        self.client.context().calls()
    }

    /// The semaphore's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes `permits` permits if that many are available now; never waits.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for 0 permits (before any I/O);
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when another
    /// type sits at the name; `ErrorKind::Redis` when it holds a string that
    /// is no count; connection failures.
    pub fn try_acquire(&self, permits: u32) -> Result<Option<SemaphorePermits>> {
        self.acquire_with(permits, Patience::once())
    }

    /// Takes `permits` permits, waiting at most `timeout` for them.
    /// `Ok(None)` when time runs out.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Semaphore::try_acquire).
    pub fn try_acquire_for(&self, permits: u32, timeout: Duration) -> Result<Option<SemaphorePermits>> {
        self.acquire_with(permits, Patience::within(timeout))
    }

    /// Takes `permits` permits, waiting until `deadline` at most.
    /// `Ok(None)` when time runs out.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Semaphore::try_acquire).
    pub fn try_acquire_until(&self, permits: u32, deadline: Instant) -> Result<Option<SemaphorePermits>> {
        self.acquire_with(permits, Patience::until(deadline))
    }

    /// Takes `permits` permits, waiting as long as it takes. The wait
    /// sleeps on the semaphore's channel and tries again after every
    /// message, and at least every watchdog timeout without one, so it
    /// never polls and never hangs on a lost message. An outage is ridden
    /// out as by [`Lock::lock`](crate::Lock::lock), within the client's
    /// outage budget ([`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget)).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Semaphore::try_acquire); a connection failure
    /// that outlasts the outage budget ends the wait.
    pub fn acquire(&self, permits: u32) -> Result<SemaphorePermits> {
        self.acquire_with(permits, Patience::forever())?
            .ok_or_else(|| Error::unexpected_reply("semaphore acquire", "an endless wait ended".to_owned()))
    }

    fn acquire_with(&self, permits: u32, patience: Patience) -> Result<Option<SemaphorePermits>> {
        check_permits(permits, "acquire")?;
        let (ctx, calls) = (self.client.context(), self.calls());
        // A waiting acquire right after this thread's own release leaves
        // the permits to the waiters first (`handover.rs`).
        let pause = if patience.waits() { handover::pause_until(ctx, &self.name) } else { None };
        wait::observed(ctx, &self.name, "semaphore", &self.channel, patience, pause, || {
            Ok(if scripts::try_acquire(calls, &self.name, &self.channel, permits)? {
                Attempt::Won(())
            } else {
                Attempt::Refused { retry_in: None }
            })
        })
        .map(|won| {
            won.map(|()| {
                SemaphorePermits::new(
                    Arc::clone(self.client.inner()),
                    Arc::clone(&self.name),
                    Arc::clone(&self.channel),
                    permits,
                )
            })
        })
    }

    /// Gives `permits` permits to the semaphore, held or not (Redisson's
    /// `release(n)`): the count grows by `permits` and the new count is
    /// published. Returns the new count. A guard does this by itself.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for 0 permits;
    /// [`ErrorKind::CountOverflow`](crate::ErrorKind::CountOverflow) when
    /// the new count would pass `i64::MAX` (nothing is changed); otherwise
    /// as [`try_acquire`](Semaphore::try_acquire).
    pub fn release(&self, permits: u32) -> Result<i64> {
        check_permits(permits, "release")?;
        let released = scripts::release(self.calls(), &self.name, &self.channel, permits)?;
        handover::released(self.client.context(), &self.name, &self.channel, released);
        Ok(released.count)
    }

    /// Sets the number of permits if the semaphore has none set yet (its
    /// key is absent), and publishes it. True when set (Redisson's
    /// `trySetPermits`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for 0 permits; connection failures.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        check_permits(permits, "try_set_permits")?;
        scripts::try_set_permits(self.calls(), &self.name, &self.channel, permits, None)
    }

    /// As [`try_set_permits`](Semaphore::try_set_permits), with the key
    /// expiring after `ttl` (Redisson's `trySetPermits(permits, ttl)`).
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Semaphore::try_set_permits), and
    /// `InvalidArgument` for a `ttl` under 1 ms.
    pub fn try_set_permits_with_ttl(&self, permits: u32, ttl: Duration) -> Result<bool> {
        check_permits(permits, "try_set_permits_with_ttl")?;
        if ttl < Duration::from_millis(1) {
            return Err(Error::invalid_argument(format!(
                "semaphore time to live {} is under 1 ms",
                crate::lease::for_people(ttl)
            )));
        }
        scripts::try_set_permits(self.calls(), &self.name, &self.channel, permits, Some(millis_ceil(ttl)))
    }

    /// Adds `delta` permits (negative: takes them away, possibly below 0, as
    /// Java allows) and publishes the new count; returns it. The sum is
    /// exact (Redis's `INCRBY`), and a TTL the key had is dropped, as
    /// Redisson's plain `SET` drops it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a `delta` of 0;
    /// [`ErrorKind::CountOverflow`](crate::ErrorKind::CountOverflow) when
    /// the new count would leave the `i64` range (nothing is changed);
    /// otherwise as [`try_acquire`](Semaphore::try_acquire).
    pub fn add_permits(&self, delta: i64) -> Result<i64> {
        if delta == 0 {
            return Err(Error::invalid_argument("add_permits: a delta of 0 permits"));
        }
        scripts::add_permits(self.calls(), &self.name, &self.channel, delta)
    }

    /// The number of available permits now (0 when never set; negative
    /// after Java took more away than there were).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Semaphore::try_acquire).
    pub fn available_permits(&self) -> Result<i64> {
        scripts::read_count(self.calls(), &self.name, "semaphore available_permits")
    }

    /// Takes every available permit at once, without a guard, and returns
    /// how many (Redisson's `drainPermits`): the count becomes 0.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Semaphore::try_acquire).
    pub fn drain_permits(&self) -> Result<i64> {
        scripts::drain(self.calls(), &self.name)
    }
}
