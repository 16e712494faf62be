//! How long a hold lasts: renewed by the watchdog, or a fixed lease.

use std::time::Duration;

pub(crate) use crate::durations::for_people;
use crate::error::{Error, Result};

/// The shortest fixed lease accepted.
pub const MIN_LEASE: Duration = Duration::from_millis(1);
/// The longest fixed lease accepted (30 days).
pub const MAX_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The lease policy of a lock handle.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use keyholder::Lease;
///
/// assert_eq!(Lease::default(), Lease::Watchdog);
/// let fixed = Lease::Fixed(Duration::from_secs(10));
/// assert_ne!(fixed, Lease::Watchdog);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Lease {
    /// No fixed lease: the key's TTL is the client's watchdog timeout, and the
    /// client's watchdog thread renews it every third of that timeout while
    /// the lock is held. If the process dies, the lock frees itself within the
    /// watchdog timeout. This is Redisson's default.
    #[default]
    Watchdog,
    /// A fixed lease: the key's TTL is set to this duration on acquisition and
    /// never renewed; the lock expires after it unless released earlier.
    /// Rounded up to whole milliseconds; 1 ms to 30 days.
    Fixed(Duration),
}

impl Lease {
    /// Checks the lease before any I/O.
    pub(crate) fn validate(self) -> Result<()> {
        if let Lease::Fixed(d) = self
            && (d < MIN_LEASE || d > MAX_LEASE)
        {
            return Err(Error::invalid_argument(format!(
                "fixed lease {} is outside {} ..= {}",
                for_people(d),
                for_people(MIN_LEASE),
                for_people(MAX_LEASE)
            )));
        }
        Ok(())
    }

    /// The TTL to send to Redis, in milliseconds.
    pub(crate) fn ttl_ms(self, watchdog_timeout: Duration) -> u64 {
        match self {
            Lease::Watchdog => millis_ceil(watchdog_timeout),
            Lease::Fixed(d) => millis_ceil(d),
        }
    }
}

/// A duration in whole milliseconds, rounded up, saturating.
pub(crate) fn millis_ceil(d: Duration) -> u64 {
    let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_bounds_read_as_people_write_them() {
        assert_eq!(for_people(MAX_LEASE), "30 days");
        assert_eq!(for_people(MIN_LEASE), "1 ms");
        let refused = Lease::Fixed(Duration::MAX).validate().unwrap_err().to_string();
        assert!(refused.contains("fixed lease 584942417355 years is outside 1 ms ..= 30 days"), "{refused}");
    }

    #[test]
    fn fixed_leases_are_range_checked() {
        assert!(Lease::Watchdog.validate().is_ok());
        assert!(Lease::Fixed(Duration::from_millis(1)).validate().is_ok());
        assert!(Lease::Fixed(Duration::ZERO).validate().unwrap_err().is_invalid());
        assert!(Lease::Fixed(Duration::from_micros(999)).validate().is_err());
        assert!(Lease::Fixed(MAX_LEASE).validate().is_ok());
        assert!(Lease::Fixed(MAX_LEASE + Duration::from_secs(1)).validate().is_err());
    }

    #[test]
    fn ttl_rounds_up_to_milliseconds() {
        let wd = Duration::from_secs(30);
        assert_eq!(Lease::Watchdog.ttl_ms(wd), 30_000);
        assert_eq!(Lease::Fixed(Duration::from_micros(1500)).ttl_ms(wd), 2);
        assert_eq!(Lease::Fixed(Duration::from_millis(7)).ttl_ms(wd), 7);
    }
}
