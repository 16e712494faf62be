//! Redisson's `RPermitExpirableSemaphore`: a semaphore whose permits have
//! ids and leases, so that a holder that dies gives its permits back.
//!
//! Beside the count at the name, a sorted set `{<name>}:timeout` holds
//! every permit taken, by id, scored by its expiry. Every script first
//! reclaims the expired permits (adds them back to the count and publishes
//! the new count on `redisson_sc:{<name>}`), so a dead holder's permits
//! return at their expiry, whoever comes next, Java or Rust. keyholder
//! gives the permits a lease that its watchdog renews while their guard
//! lives (Java's permits have a fixed lease or none): a holder that dies
//! loses them within the watchdog timeout; one that lives keeps them as
//! long as it wants. A guard whose permits were reclaimed says so
//! (`is_lost`, `lost_signal`).

mod guard;
mod layout;
mod renewal;
pub(crate) mod scripts;

pub use guard::ExpirablePermits;
pub(crate) use layout::Keys;
pub use layout::PermitId;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Calls, Client};
use crate::error::{Error, Result};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::semaphore::check_permits;
use crate::kinds::semaphore::wait::{self, Attempt};
use crate::lease::Lease;
use crate::names;
use crate::wait::patience::Patience;
use renewal::PermitRenewal;
use scripts::{Acquired, Released};

/// The most permits one call takes or gives back by id.
pub const MAX_PERMITS_PER_CALL: u32 = 10_000;

impl Client {
    /// A handle to the permit-expirable semaphore `name`, Redisson's
    /// `getPermitExpirableSemaphore(name)`, whose permits have the default
    /// [`Lease::Watchdog`]. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a name [`Client::lock`] would refuse.
    pub fn permit_expirable_semaphore(&self, name: &str) -> Result<PermitExpirableSemaphore> {
        self.context().validate_name(name)?;
        let name: Arc<str> = Arc::from(name);
        let keys = Arc::new(Keys {
            timeouts: Arc::from(names::permit_timeouts(&name)),
            channel: Arc::from(names::semaphore_channel(&name)),
            name,
        });
        Ok(PermitExpirableSemaphore { client: self.clone(), keys, lease: Lease::Watchdog })
    }
}

/// A handle to one named permit-expirable semaphore (Redisson's
/// `RPermitExpirableSemaphore`).
///
/// Cheap to clone and shareable across threads; no I/O until asked.
/// [`try_acquire`](PermitExpirableSemaphore::try_acquire) never waits,
/// [`try_acquire_for`](PermitExpirableSemaphore::try_acquire_for) and
/// [`try_acquire_until`](PermitExpirableSemaphore::try_acquire_until) wait
/// at most so long, [`acquire`](PermitExpirableSemaphore::acquire) as long
/// as it takes; a wait also ends early when the nearest held permit
/// expires, to reclaim it.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1/")?;
/// let slots = client.permit_expirable_semaphore("render-slots")?;
/// slots.try_set_permits(2)?;
/// if let Some(permit) = slots.try_acquire_for(1, std::time::Duration::from_secs(5))? {
///     println!("holding {}", permit.ids()[0]);   // Java's permit id format
///     // ... if this process dies, the permit returns within 30 s ...
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    client: Client,
    keys: Arc<Keys>,
    lease: Lease,
}

impl fmt::Debug for PermitExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitExpirableSemaphore")
            .field("name", &self.keys.name)
            .field("lease", &self.lease)
            .finish()
    }
}

impl PermitExpirableSemaphore {
    fn calls(&self) -> Calls<'_> {
        self.client.context().calls()
    }

    /// The semaphore's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The lease of the permits this handle acquires.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// This handle with another lease for its acquisitions:
    /// [`Lease::Watchdog`] (the default: renewed while the guard lives) or
    /// [`Lease::Fixed`] (Redisson's `leaseTime`: never renewed, the permits
    /// expire after it unless given back earlier). No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a fixed lease outside 1 ms to 30 days.
    pub fn with_lease(&self, lease: Lease) -> Result<PermitExpirableSemaphore> {
        lease.validate()?;
        Ok(PermitExpirableSemaphore { lease, ..self.clone() })
    }

    /// Takes `permits` permits if that many are available now (after
    /// reclaiming expired ones); never waits.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for 0 permits or more than [`MAX_PERMITS_PER_CALL`] (before any
    /// I/O); [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when
    /// another type sits at the name or at `{<name>}:timeout`;
    /// `ErrorKind::Redis` for a count that is no integer; connection
    /// failures.
    pub fn try_acquire(&self, permits: u32) -> Result<Option<ExpirablePermits>> {
        self.acquire_with(permits, Patience::once())
    }

    /// Takes `permits` permits, waiting at most `timeout`; `Ok(None)` when
    /// time runs out.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](PermitExpirableSemaphore::try_acquire).
    pub fn try_acquire_for(&self, permits: u32, timeout: Duration) -> Result<Option<ExpirablePermits>> {
        self.acquire_with(permits, Patience::within(timeout))
    }

    /// Takes `permits` permits, waiting until `deadline` at most;
    /// `Ok(None)` when time runs out.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](PermitExpirableSemaphore::try_acquire).
    pub fn try_acquire_until(&self, permits: u32, deadline: Instant) -> Result<Option<ExpirablePermits>> {
        self.acquire_with(permits, Patience::until(deadline))
    }

    /// Takes `permits` permits, waiting as long as it takes: on the
    /// channel, and until the nearest held permit's expiry, re-checking at
    /// least every watchdog timeout. An outage is ridden out as by
    /// [`Lock::lock`](crate::Lock::lock), within the client's outage budget
    /// ([`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget)).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](PermitExpirableSemaphore::try_acquire).
    pub fn acquire(&self, permits: u32) -> Result<ExpirablePermits> {
        self.acquire_with(permits, Patience::forever())?.ok_or_else(|| {
            Error::unexpected_reply("permit semaphore acquire", "an endless wait ended".to_owned())
        })
    }

    fn acquire_with(&self, permits: u32, patience: Patience) -> Result<Option<ExpirablePermits>> {
        check_permits(permits, "acquire")?;
        check_at_most(permits as usize)?;
        let ctx = self.client.context();
        let calls = ctx.calls();
        let lease_ms = self.lease.ttl_ms(ctx.config().watchdog_timeout);
        // The same ids on every attempt: a repeated call is recognised.
        let ids: Vec<PermitId> = (0..permits).map(|_| PermitId::random()).collect();
        let sent = wait::observed(
            ctx,
            &self.keys.name,
            "permit semaphore",
            &self.keys.channel,
            patience,
            None,
            || {
                let sent = Instant::now();
                Ok(match scripts::acquire(calls, &self.keys, &ids, Some(lease_ms))? {
                    Acquired::Yes { replicated } => Attempt::Won((sent, replicated)),
                    Acquired::No { retry_in } => Attempt::Refused { retry_in },
                })
            },
        )?;
        let Some((sent, replicated)) = sent else { return Ok(None) };
        if !replicated && calls.acks_required() {
            // Not on the replicas: a failover could lose them. Give them
            // back rather than hand out permits the caller refused.
            if let Err(e) = scripts::release(calls, &self.keys, &ids) {
                log::warn!("keyholder: giving back unreplicated permits of '{}' failed: {e}", self.keys.name);
            }
            return Err(Error::replica_acks(&self.keys.name));
        }
        let owner = ids.iter().map(PermitId::to_string).collect::<Vec<_>>().join(",");
        let acquisition = Acquisition {
            owner,
            thread: crate::owner::current_thread_id(),
            lease: self.lease,
            lease_ms,
            token: None,
            sent,
        };
        let hold = Arc::new(Hold::new(
            ctx.holds().next_id(),
            Arc::clone(&self.keys.name),
            acquisition,
            ctx.id(),
            "permit",
        ));
        if !replicated {
            hold.mark_unreplicated();
        }
        if self.lease == Lease::Watchdog {
            ctx.holds().register(Arc::clone(&hold), None, PermitRenewal::of(ctx.holds()));
        }
        Ok(Some(ExpirablePermits::new(Arc::clone(self.client.inner()), Arc::clone(&self.keys), ids, hold)))
    }

    /// Gives back permits by id, held by this process or another (Java's
    /// ids parse into a [`PermitId`] with [`str::parse`]): all of them or none.
    /// Permits whose lease had run out but were not reclaimed yet are given
    /// back too. A guard does this by itself.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner) when some id is
    /// not held (never was, given back already, or reclaimed after it
    /// expired): Redis is left untouched.
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for no ids, a repeated id, or more than [`MAX_PERMITS_PER_CALL`];
    /// otherwise as [`try_acquire`](PermitExpirableSemaphore::try_acquire).
    pub fn release_ids(&self, ids: &[PermitId]) -> Result<()> {
        if ids.is_empty() {
            return Err(Error::invalid_argument("release_ids: no permit ids"));
        }
        check_at_most(ids.len())?;
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::invalid_argument("release_ids: a permit id is given twice"));
        }
        match scripts::release(self.calls(), &self.keys, ids)? {
            Released::Held { .. } => Ok(()),
            Released::NotHeld => Err(Error::not_owner(&self.keys.name)),
        }
    }

    /// Sets the number of permits if the semaphore has none set yet, and
    /// publishes it (Redisson's `trySetPermits`). True when set.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for 0 permits; connection failures.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        check_permits(permits, "try_set_permits")?;
        crate::kinds::semaphore::scripts::try_set_permits(
            self.calls(),
            &self.keys.name,
            &self.keys.channel,
            permits,
            None,
        )
    }

    /// Adds `delta` available permits (negative: takes them away); returns
    /// the new count. A positive delta is published (Redisson's
    /// `addPermits`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a delta of 0;
    /// [`ErrorKind::CountOverflow`](crate::ErrorKind::CountOverflow) when
    /// the new count would leave the `i64` range (nothing is changed);
    /// otherwise as [`try_acquire`](PermitExpirableSemaphore::try_acquire).
    pub fn add_permits(&self, delta: i64) -> Result<i64> {
        if delta == 0 {
            return Err(Error::invalid_argument("add_permits: a delta of 0 permits"));
        }
        scripts::add_permits(self.calls(), &self.keys, delta)
    }

    /// The permits available now, after reclaiming expired ones
    /// (Redisson's `availablePermits`).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](PermitExpirableSemaphore::try_acquire).
    pub fn available_permits(&self) -> Result<i64> {
        scripts::status(self.calls(), &self.keys).map(|(available, _)| available)
    }

    /// The permits held now, by anyone, after reclaiming expired ones
    /// (Redisson's `acquiredPermits`).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](PermitExpirableSemaphore::try_acquire).
    pub fn acquired_permits(&self) -> Result<i64> {
        scripts::status(self.calls(), &self.keys).map(|(_, held)| held)
    }

    /// Available plus held permits (Redisson's `getPermits`).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](PermitExpirableSemaphore::try_acquire), and
    /// [`ErrorKind::CountOverflow`](crate::ErrorKind::CountOverflow) when
    /// the sum is past `i64::MAX` (Java's `getPermits` would wrap).
    pub fn permits(&self) -> Result<i64> {
        let (available, held) = scripts::status(self.calls(), &self.keys)?;
        available.checked_add(held).ok_or_else(|| {
            Error::count_overflow(&self.keys.name, format!("{available} available plus {held} held"))
        })
    }
}

fn check_at_most(n: usize) -> Result<()> {
    if n > MAX_PERMITS_PER_CALL as usize {
        return Err(Error::invalid_argument(format!(
            "{n} permits in one call; at most {MAX_PERMITS_PER_CALL} are accepted"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_ids_read_and_write_javas_32_hex_digits() {
        let id: PermitId = "00112233445566778899AABBCCDDEEFF".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(id.to_string(), "00112233445566778899aabbccddeeff");
        assert_eq!(id.as_bytes()[15], 0xff);
        for bad in [
            "",
            "0011",
            "00112233445566778899aabbccddeefg",
            "00112233445566778899aabbccddeeff00",
            "é0112233445566778899aabbccddeef",
        ] {
            assert!(bad.parse::<PermitId>().is_err_and(|e| e.is_invalid()), "{bad:?}");
        }
        assert_ne!(PermitId::random(), PermitId::random());
    }
}
