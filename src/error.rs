//! The crate's one error type.
//!
//! "Not acquired within the wait" is not here: it is the ordinary `Ok(None)` of
//! [`Lock::try_lock_for`](crate::Lock::try_lock_for). Every variant below is a
//! failure a caller may want to tell apart from the others, and each has a
//! predicate so callers ask questions instead of matching strings.

use std::error::Error as StdError;
use std::fmt;

/// Why a hold was found lost.
///
/// Carried by [`Error::LockLost`] and reported by
/// [`LockGuard::lost_reason`](crate::LockGuard::lost_reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The watchdog's renewal found that this owner no longer holds the lock
    /// (it expired, was force-unlocked, or Redis lost its data).
    RenewalRefused,
    /// The lease deadline passed on the local clock without a successful
    /// renewal (Redis unreachable, or a fixed lease ran out).
    LeaseExpired,
    /// The release found the lock no longer held by this owner.
    ReleaseFoundGone,
    /// An unlock message led the client to check, and the lock was no longer
    /// held by this owner (force-unlocked, or Redis lost it).
    Gone,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::RenewalRefused => "the watchdog's renewal was refused",
            LostReason::LeaseExpired => "the lease ran out without a successful renewal",
            LostReason::ReleaseFoundGone => "the release found it no longer held",
            LostReason::Gone => "a check found it no longer held",
        })
    }
}

/// Errors returned by keyholder.
///
/// `Display` describes this layer only; the underlying Redis or pool error is
/// reached through [`source`](std::error::Error::source).
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A Redis command failed, or the connection to Redis failed or timed out.
    Redis(redis::RedisError),
    /// No connection to Redis could be had within the connect timeout.
    Pool(r2d2::Error),
    /// Redis says the calling thread does not hold this lock, and the hold was
    /// not already known to be lost. The current holder, if any, is unaffected.
    NotOwner {
        /// The lock name.
        name: String,
    },
    /// The hold was lost before it was released: the lease ran out, the
    /// watchdog's renewal was refused, or the lock was force-unlocked.
    LockLost {
        /// The lock name.
        name: String,
        /// How the loss was detected.
        reason: LostReason,
    },
    /// A key of another type sits where the lock needs one of its own: at
    /// the lock's name, or at a key derived from it that the lock cannot do
    /// without (the fencing-token counter). keyholder leaves it untouched.
    WrongType {
        /// The lock name.
        name: String,
        /// The key that holds something else: the lock name itself, or the
        /// derived key.
        key: String,
    },
    /// The fencing-token counter of a fenced lock holds a value no token can
    /// follow: not a decimal integer, negative, or at the largest 64-bit
    /// integer. Nothing was acquired; the counter is left untouched.
    BadFencingCounter {
        /// The lock name.
        name: String,
        /// The counter key, `redisson_lock_token:{<name>}`.
        key: String,
    },
    /// The Redis server refused this client's credentials or permissions: a
    /// missing or wrong password, an unknown ACL user, or an ACL that denies
    /// a command keyholder needs. Reported by
    /// [`ClientBuilder::build`](crate::ClientBuilder::build).
    AccessDenied(String),
    /// An argument was refused before any I/O (an empty or oversized lock name,
    /// a lease out of range).
    InvalidArgument(String),
    /// The client configuration was refused before any I/O.
    InvalidConfig(String),
    /// A script replied outside its documented contract.
    UnexpectedReply {
        /// The script that replied.
        script: &'static str,
        /// The reply, formatted.
        reply: String,
    },
    /// The client was shut down; no new acquisitions are made.
    Shutdown,
}

/// `Result` with keyholder's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True when Redis or the connection to it failed (including timeouts).
    pub fn is_connection_error(&self) -> bool {
        match self {
            Error::Pool(_) => true,
            Error::Redis(e) => {
                e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal()
            }
            _ => false,
        }
    }

    /// True when a Redis command or connection failed, whatever the cause.
    pub fn is_redis_error(&self) -> bool {
        matches!(self, Error::Redis(_) | Error::Pool(_))
    }

    /// True for [`Error::NotOwner`].
    pub fn is_not_owner(&self) -> bool {
        matches!(self, Error::NotOwner { .. })
    }

    /// True for [`Error::LockLost`].
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Error::LockLost { .. })
    }

    /// True for [`Error::WrongType`].
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, Error::WrongType { .. })
    }

    /// True for [`Error::BadFencingCounter`].
    pub fn is_bad_fencing_counter(&self) -> bool {
        matches!(self, Error::BadFencingCounter { .. })
    }

    /// True for [`Error::AccessDenied`].
    pub fn is_access_denied(&self) -> bool {
        matches!(self, Error::AccessDenied(_))
    }

    /// True for [`Error::InvalidArgument`] and [`Error::InvalidConfig`].
    pub fn is_invalid(&self) -> bool {
        matches!(self, Error::InvalidArgument(_) | Error::InvalidConfig(_))
    }

    /// True for [`Error::Shutdown`].
    pub fn is_shutdown(&self) -> bool {
        matches!(self, Error::Shutdown)
    }

    /// Maps a Redis error raised on the lock `name` to the crate's error,
    /// recognising `WRONGTYPE` (a foreign key at the lock's name).
    pub(crate) fn from_redis(name: &str, e: redis::RedisError) -> Error {
        let wrong_type = e.code() == Some("WRONGTYPE")
            || e.detail().is_some_and(|d| d.contains("WRONGTYPE"))
            || e.to_string().contains("WRONGTYPE");
        if wrong_type {
            Error::WrongType { name: name.to_owned(), key: name.to_owned() }
        } else {
            Error::Redis(e)
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(_) => f.write_str("redis command failed"),
            Error::Pool(_) => f.write_str("no redis connection within the connect timeout"),
            Error::NotOwner { name } => write!(f, "lock '{name}' is not held by this thread"),
            Error::LockLost { name, reason } => write!(f, "lock '{name}' was lost: {reason}"),
            Error::WrongType { name, key } if name == key => {
                write!(f, "a key of another type already exists at lock name '{name}'")
            }
            Error::WrongType { name, key } => {
                write!(f, "key '{key}', which lock '{name}' needs, holds a value of another type")
            }
            Error::BadFencingCounter { name, key } => write!(
                f,
                "the fencing-token counter '{key}' of lock '{name}' does not hold a \
                 non-negative integer below 2^63 - 1"
            ),
            Error::AccessDenied(what) => write!(f, "redis refused access: {what}"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::InvalidConfig(what) => write!(f, "invalid configuration: {what}"),
            Error::UnexpectedReply { script, reply } => {
                write!(f, "script '{script}' replied outside its contract: {reply}")
            }
            Error::Shutdown => f.write_str("the keyholder client was shut down"),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::Pool(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e)
    }
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::Pool(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_layer_only() {
        let e = Error::LockLost { name: "orders:1".into(), reason: LostReason::RenewalRefused };
        assert_eq!(e.to_string(), "lock 'orders:1' was lost: the watchdog's renewal was refused");
        assert!(e.is_lock_lost());
        assert!(!e.is_connection_error());
        assert!(e.source().is_none());
    }

    #[test]
    fn wrongtype_is_recognised() {
        let e = redis::RedisError::from((
            redis::ErrorKind::Client,
            "script failed",
            "WRONGTYPE Operation against a key holding the wrong kind of value".to_string(),
        ));
        assert!(Error::from_redis("x", e).is_wrong_type());
    }

    #[test]
    fn errors_are_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
    }
}
