//! The crate's one error type.
//!
//! "Not acquired within the wait" is not here: it is the ordinary `Ok(None)` of
//! [`Lock::try_lock_for`](crate::Lock::try_lock_for). Every [`ErrorKind`] is a
//! failure a caller may want to tell apart from the others, and each has a
//! predicate so callers ask questions instead of matching strings. The error
//! is opaque, as redis-rs's and rust-postgres's are: no dependency's type
//! appears in keyholder's API, only behind `source()`.

pub(crate) mod reaching;

use std::error::Error as StdError;
use std::fmt;

use reaching::{Class, NetError};

/// Why a hold was found lost.
///
/// Carried by errors of kind [`ErrorKind::LockLost`] and reported by
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
    /// A check found the lock no longer held by this owner: the client
    /// heard an unlock message on the lock's channel (or resubscribed it)
    /// and asked Redis, or a re-entry found it gone (force-unlocked by any
    /// client, or lost by Redis); or this client's own `force_unlock`
    /// deleted it.
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

/// What kind of failure an [`Error`] is.
///
/// New kinds may be added: match with a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The connection to Redis failed, timed out, or could not be opened
    /// within the connect timeout (or Redis proved unreachable just before).
    /// Whether a command sent meanwhile ran is unknown. A failure to
    /// connect says what happened (refused, timed out after the connect
    /// timeout, the host name did not resolve, closed before answering) and
    /// names the address tried, also in [`Error::address`].
    Connection,
    /// Redis answered a command with an error that is none of the kinds
    /// below (out of memory, a script error, a command an ACL denies).
    Redis,
    /// Redis says the calling thread does not hold the lock, and the hold was
    /// not already known to be lost. The current holder, if any, is
    /// unaffected.
    NotOwner,
    /// The hold was lost before it was released: see
    /// [`Error::lost_reason`].
    LockLost,
    /// A key of another type sits where the lock needs one of its own: at
    /// the lock's name, or at a key derived from it that the lock cannot do
    /// without (the fencing-token counter); see [`Error::key`]. keyholder
    /// leaves it untouched.
    WrongType,
    /// In migration mode (see
    /// [`ClientBuilder::migration_mode`](crate::ClientBuilder::migration_mode)),
    /// the string key at the lock's name, a hand-rolled `SET NX` lock, has
    /// no TTL: its holder never expires it, so waiting for it could last
    /// forever. A waiting acquire reports it only if the key still has no
    /// TTL 1 s after it first saw it (`SETNX` + `EXPIRE` sets the TTL one
    /// round trip after the key); `try_lock` and a job's run, which never
    /// wait, report it at once. See [`Error::key`]. keyholder leaves it untouched; delete it
    /// by hand once its holder is known dead (or give the old code a TTL).
    LegacyLockWithoutTtl,
    /// The fencing-token counter of a fenced lock holds a value no token can
    /// follow: not a decimal integer, negative, or at the largest 64-bit
    /// integer. Nothing was acquired; the counter is left untouched.
    BadFencingCounter,
    /// The Redis server refused this client's credentials or permissions: a
    /// missing or wrong password, an unknown ACL user, or an ACL that denies
    /// PING. Reported by [`ClientBuilder::build`](crate::ClientBuilder::build).
    AccessDenied,
    /// A TLS handshake with Redis was refused: this client did not trust
    /// the server's certificate (wrong or missing CA, a name that does not
    /// match the URL's host), the server did not accept this client (a
    /// client certificate missing or not trusted); or TLS is on one side
    /// only: a `rediss://` URL to a port that speaks plain Redis, a
    /// `redis://` URL to a port that speaks TLS (both found out within
    /// about a round trip, not at the connect timeout). Reported by
    /// [`ClientBuilder::build`](crate::ClientBuilder::build), with the
    /// address in [`Error::address`]; TLS settings that are wrong by
    /// themselves (a PEM without a certificate, a key that does not match)
    /// are [`ErrorKind::InvalidConfig`].
    Tls,
    /// The server at the address does not speak Redis's protocol (RESP): its
    /// first answer was something else, such as an HTTP server's
    /// `HTTP/1.1 400 Bad Request`. The URL's host or port is wrong. Reported
    /// by [`ClientBuilder::build`](crate::ClientBuilder::build), with the
    /// address in [`Error::address`], and never ridden out as an outage.
    NotRedis,
    /// An argument was refused before any I/O (an empty or oversized lock
    /// name, a reserved one, a lease out of range).
    InvalidArgument,
    /// The client configuration was refused: before any I/O (a malformed
    /// URL, a setting out of range), or by the server (a database index it
    /// does not have; the `WAITAOF` of
    /// [`ClientBuilder::replica_acks_aof`](crate::ClientBuilder::replica_acks_aof)).
    InvalidConfig,
    /// A script replied outside its documented contract.
    UnexpectedReply,
    /// A change to a stored count (a semaphore's permits) would take it
    /// outside the signed 64-bit range that Redis and Redisson keep it in.
    /// Refused before anything was written: the count is unchanged.
    CountOverflow,
    /// Fewer replicas than asked for acknowledged a write within the wait
    /// (see [`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks)
    /// and [`replica_acks_aof`](crate::ClientBuilder::replica_acks_aof));
    /// reported only when the client requires them.
    ReplicaAcks,
    /// A background thread (pub/sub reader, watchdog) could not be started.
    Spawn,
    /// The client was shut down; no new acquisitions are made.
    Shutdown,
    /// The caller already holds the non-reentrant lock it asked for
    /// ([`NonReentrantLock`](crate::NonReentrantLock),
    /// [`NonReentrantFairLock`](crate::NonReentrantFairLock)): a second hold
    /// would wait for itself forever, as Redisson's refuses it with an
    /// `IllegalMonitorStateException`. Nothing was sent or changed; the
    /// first hold is untouched. See [`Error::lock_name`].
    AlreadyHeld,
}

/// An error returned by keyholder.
///
/// Ask it questions: [`kind`](Error::kind), the predicates (`is_*`), the lock
/// and key it concerns, and, for a lost hold, [`lost_reason`](Error::lost_reason).
/// `Display` describes this layer only; the underlying Redis error is
/// reached through [`source`](std::error::Error::source). The type is opaque,
/// so keyholder's version is not tied to its dependencies'.
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    /// The lock concerned, if one is.
    name: Option<String>,
    /// The key concerned (`WrongType`, `BadFencingCounter`).
    key: Option<String>,
    /// Why a hold was lost (`LockLost`).
    reason: Option<LostReason>,
    /// What was refused or replied, in words.
    detail: Option<String>,
    /// The address a connection was tried at (`host:port`, a socket path).
    address: Option<String>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
    /// For `Connection` and `Redis`: the redis-rs error, to tell transport
    /// failures apart inside the crate.
    transport: bool,
}

/// Error replies that mean the server cannot serve yet, not that the call
/// is wrong: see [`Error::is_outage`].
const OUTAGE_CODES: [&str; 4] = ["LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"];

/// The words by which a script's `WRONGTYPE` says it found another kind's
/// lock at the name ("WRONGTYPE <key> holds another kind's lock: ...").
const ANOTHER_KIND: &str = "holds another kind's lock";

/// `Result` with keyholder's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    fn new(kind: ErrorKind) -> Error {
        Error {
            inner: Box::new(Inner {
                kind,
                name: None,
                key: None,
                reason: None,
                detail: None,
                address: None,
                source: None,
                transport: false,
            }),
        }
    }

    fn with_name(mut self, name: &str) -> Error {
        self.inner.name = Some(name.to_owned());
        self
    }

    fn with_key(mut self, key: &str) -> Error {
        self.inner.key = Some(key.to_owned());
        self
    }

    fn with_detail(mut self, detail: impl Into<String>) -> Error {
        self.inner.detail = Some(detail.into());
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The name of the lock the error concerns, if it concerns one.
    pub fn lock_name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// For [`ErrorKind::WrongType`], [`ErrorKind::LegacyLockWithoutTtl`] and
    /// [`ErrorKind::BadFencingCounter`]: the key that holds what keyholder
    /// cannot use (the lock name itself, or the fencing counter
    /// `redisson_lock_token:{<name>}`).
    pub fn key(&self) -> Option<&str> {
        self.inner.key.as_deref()
    }

    /// For a failure to reach a server ([`ErrorKind::Connection`],
    /// [`ErrorKind::Tls`], [`ErrorKind::NotRedis`]): the address tried, as
    /// `host:port` (`[v6]:port`) or a Unix socket's path: the server's, a
    /// sentinel's or a cluster node's, as `Display` says; also the server
    /// a call was for when no shared connection to it could send the call
    /// in time.
    pub fn address(&self) -> Option<&str> {
        self.inner.address.as_deref()
    }

    /// For [`ErrorKind::LockLost`]: how the loss was detected.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.inner.reason
    }

    /// True when the connection to Redis failed (including timeouts and an
    /// unreachable server).
    pub fn is_connection_error(&self) -> bool {
        self.kind() == ErrorKind::Connection
    }

    /// True when Redis or the connection to it failed, whatever the cause.
    pub fn is_redis_error(&self) -> bool {
        matches!(self.kind(), ErrorKind::Connection | ErrorKind::Redis)
    }

    /// True for [`ErrorKind::NotOwner`].
    pub fn is_not_owner(&self) -> bool {
        self.kind() == ErrorKind::NotOwner
    }

    /// True for [`ErrorKind::LockLost`].
    pub fn is_lock_lost(&self) -> bool {
        self.kind() == ErrorKind::LockLost
    }

    /// True for [`ErrorKind::WrongType`].
    pub fn is_wrong_type(&self) -> bool {
        self.kind() == ErrorKind::WrongType
    }

    /// True for [`ErrorKind::LegacyLockWithoutTtl`].
    pub fn is_legacy_lock_without_ttl(&self) -> bool {
        self.kind() == ErrorKind::LegacyLockWithoutTtl
    }

    /// True for [`ErrorKind::BadFencingCounter`].
    pub fn is_bad_fencing_counter(&self) -> bool {
        self.kind() == ErrorKind::BadFencingCounter
    }

    /// True for [`ErrorKind::AccessDenied`].
    pub fn is_access_denied(&self) -> bool {
        self.kind() == ErrorKind::AccessDenied
    }

    /// True for [`ErrorKind::Tls`].
    pub fn is_tls(&self) -> bool {
        self.kind() == ErrorKind::Tls
    }

    /// True for [`ErrorKind::NotRedis`].
    pub fn is_not_redis(&self) -> bool {
        self.kind() == ErrorKind::NotRedis
    }

    /// True for [`ErrorKind::InvalidArgument`] and [`ErrorKind::InvalidConfig`].
    pub fn is_invalid(&self) -> bool {
        matches!(self.kind(), ErrorKind::InvalidArgument | ErrorKind::InvalidConfig)
    }

    /// True for [`ErrorKind::CountOverflow`].
    pub fn is_count_overflow(&self) -> bool {
        self.kind() == ErrorKind::CountOverflow
    }

    /// True for [`ErrorKind::ReplicaAcks`].
    pub fn is_replica_acks(&self) -> bool {
        self.kind() == ErrorKind::ReplicaAcks
    }

    /// True for [`ErrorKind::Shutdown`].
    pub fn is_shutdown(&self) -> bool {
        self.kind() == ErrorKind::Shutdown
    }

    /// True for [`ErrorKind::AlreadyHeld`].
    pub fn is_already_held(&self) -> bool {
        self.kind() == ErrorKind::AlreadyHeld
    }

    // Constructors, for the crate only.

    /// A failure to reach a server (see `reaching.rs`): its kind, its
    /// address, its sentence, and the cause beneath where it adds to it.
    fn reaching(net: &NetError) -> Error {
        let kind = match net.class() {
            Class::Connection => ErrorKind::Connection,
            Class::Tls => ErrorKind::Tls,
            Class::NotRedis => ErrorKind::NotRedis,
        };
        let mut error = Error::new(kind).with_detail(net.to_string());
        error.inner.address = Some(net.address().to_owned());
        error.inner.source = net.cause().map(|cause| Box::new(cause) as Box<dyn StdError + Send + Sync>);
        error
    }

    /// A redis-rs error: a connection failure, or an error reply.
    pub(crate) fn redis(e: redis::RedisError) -> Error {
        let transport = e.is_io_error() || e.is_timeout() || e.is_connection_dropped();
        if let Some(net) = reaching::of(&e) {
            let mut error = Error::reaching(net);
            error.inner.transport = transport && error.kind() == ErrorKind::Connection;
            return error;
        }
        let kind =
            if transport || e.is_connection_refusal() { ErrorKind::Connection } else { ErrorKind::Redis };
        let mut error = Error::new(kind);
        error.inner.transport = transport;
        error.inner.source = Some(Box::new(e));
        error
    }

    /// No connection could be opened: nothing was sent.
    pub(crate) fn connect(e: redis::RedisError) -> Error {
        if let Some(net) = reaching::of(&e) {
            return Error::reaching(net);
        }
        let mut error = Error::new(ErrorKind::Connection).with_detail("no connection could be opened");
        error.inner.source = Some(Box::new(e));
        error
    }

    /// A call's time ran out while it waited for a shared connection: it
    /// was never sent.
    pub(crate) fn unsent(address: Option<String>) -> Error {
        let Some(address) = address else {
            return Error::new(ErrorKind::Connection).with_detail(
                "no shared connection could send the command within its timeout; it was not sent",
            );
        };
        let mut error = Error::new(ErrorKind::Connection).with_detail(format!(
            "no shared connection to {address} could send the command within its timeout; it was not sent"
        ));
        error.inner.address = Some(address);
        error
    }

    /// Redis is taken to be unreachable because a connect just before
    /// failed with `because`: said again, with its address, when known.
    pub(crate) fn unreachable_after(because: Option<&redis::RedisError>) -> Error {
        match because.and_then(reaching::of) {
            Some(net) => {
                let mut error = Error::reaching(net);
                let detail = format!(
                    "{} (just before; not tried again yet)",
                    error.inner.detail.take().unwrap_or_default()
                );
                error.inner.detail = Some(detail);
                error
            }
            None => Error::unreachable(),
        }
    }

    /// Redis is taken to be unreachable (see `Inner::connection`).
    pub(crate) fn unreachable() -> Error {
        Error::new(ErrorKind::Connection)
            .with_detail("no connection could be opened within the connect timeout just before")
    }

    pub(crate) fn not_owner(name: &str) -> Error {
        Error::new(ErrorKind::NotOwner).with_name(name)
    }

    pub(crate) fn lock_lost(name: &str, reason: LostReason) -> Error {
        let mut error = Error::new(ErrorKind::LockLost).with_name(name);
        error.inner.reason = Some(reason);
        error
    }

    pub(crate) fn wrong_type(name: &str, key: &str) -> Error {
        Error::new(ErrorKind::WrongType).with_name(name).with_key(key)
    }

    /// The calling thread holds `name` as `held`, and asked for it as
    /// `asked`: kinds that share one hash at the name (see
    /// `holds/hash_kinds.rs`).
    pub(crate) fn held_as_other_kind(name: &str, asked: &str, held: &str) -> Error {
        Error::wrong_type(name, name)
            .with_detail(format!("this thread holds it as {held}, and asked for it as {asked}"))
    }

    /// Redis holds another kind's lock at `name`: `what` it is.
    pub(crate) fn another_kinds_lock(name: &str, what: &str) -> Error {
        Error::wrong_type(name, name).with_detail(format!("Redis holds {what}"))
    }

    pub(crate) fn legacy_lock_without_ttl(name: &str) -> Error {
        Error::new(ErrorKind::LegacyLockWithoutTtl).with_name(name).with_key(name)
    }

    pub(crate) fn bad_fencing_counter(name: &str, key: &str) -> Error {
        Error::new(ErrorKind::BadFencingCounter).with_name(name).with_key(key)
    }

    /// The server refuses this client something it needs, as `detail` says.
    pub(crate) fn access_denied_to(detail: String) -> Error {
        Error::new(ErrorKind::AccessDenied).with_detail(detail)
    }

    pub(crate) fn access_denied(e: redis::RedisError) -> Error {
        let mut error = Error::new(ErrorKind::AccessDenied).with_detail(e.to_string());
        error.inner.source = Some(Box::new(e));
        error
    }

    pub(crate) fn invalid_argument(what: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument).with_detail(what)
    }

    pub(crate) fn invalid_config(what: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidConfig).with_detail(what)
    }

    pub(crate) fn unexpected_reply(script: &str, reply: String) -> Error {
        Error::new(ErrorKind::UnexpectedReply).with_name(script).with_detail(reply)
    }

    pub(crate) fn count_overflow(name: &str, detail: String) -> Error {
        Error::new(ErrorKind::CountOverflow).with_name(name).with_detail(detail)
    }

    pub(crate) fn spawn(what: &str, e: std::io::Error) -> Error {
        let mut error = Error::new(ErrorKind::Spawn).with_detail(what);
        error.inner.source = Some(Box::new(e));
        error
    }

    pub(crate) fn replica_acks(name: &str) -> Error {
        Error::new(ErrorKind::ReplicaAcks).with_name(name)
    }

    pub(crate) fn shutdown() -> Error {
        Error::new(ErrorKind::Shutdown)
    }

    /// A second acquire of a non-reentrant lock (`noun`) by its holder.
    pub(crate) fn already_held(noun: &str, name: &str) -> Error {
        Error::new(ErrorKind::AlreadyHeld).with_name(name).with_detail(noun)
    }

    /// True when a command failed in transit (I/O error, timeout, dropped
    /// connection): it may or may not have run on the server.
    pub(crate) fn is_transport(&self) -> bool {
        self.inner.transport
    }

    /// True when Redis could not serve the call for now: the connection
    /// failed (refused, timed out, dropped, or a demoted primary), or the
    /// server replied that it cannot serve yet: `LOADING` (a restart
    /// reading its data), `MASTERDOWN` (a replica cut from its primary),
    /// `CLUSTERDOWN` or `TRYAGAIN` (a cluster failover or slot move under
    /// way). A waiting call rides such an error out (see `wait/outage.rs`);
    /// any other error ends it.
    pub(crate) fn is_outage(&self) -> bool {
        match self.kind() {
            ErrorKind::Connection => true,
            ErrorKind::Redis => self
                .inner
                .source
                .as_ref()
                .and_then(|e| e.downcast_ref::<redis::RedisError>())
                .and_then(redis::RedisError::code)
                .is_some_and(|code| OUTAGE_CODES.contains(&code)),
            _ => false,
        }
    }

    /// Maps a Redis error raised on the lock `name` to the crate's error,
    /// recognising `WRONGTYPE` (a foreign key at the lock's name).
    pub(crate) fn from_redis(name: &str, e: redis::RedisError) -> Error {
        let wrong_type = e.code() == Some("WRONGTYPE")
            || e.detail().is_some_and(|d| d.contains("WRONGTYPE"))
            || e.to_string().contains("WRONGTYPE");
        if !wrong_type {
            return Error::redis(e);
        }
        // A script that found another kind's lock at the name says which.
        let text = e.to_string();
        match text.split_once(ANOTHER_KIND) {
            Some((_, what)) => Error::wrong_type(name, name)
                .with_detail(format!("Redis holds {}", what.trim_start_matches([':', ' ']))),
            None => Error::wrong_type(name, name),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Inner { kind, name, key, reason, detail, address, source, .. } = &*self.inner;
        let mut s = f.debug_struct("Error");
        s.field("kind", kind);
        for (field, value) in [("lock", name), ("key", key), ("address", address), ("detail", detail)] {
            if let Some(value) = value {
                s.field(field, value);
            }
        }
        if let Some(reason) = reason {
            s.field("reason", reason);
        }
        if let Some(source) = source {
            s.field("source", source);
        }
        s.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Inner { kind, name, key, reason, detail, address, .. } = &*self.inner;
        if let (Some(_), Some(sentence)) = (address, detail) {
            // A failure to reach a server: the sentence names the address
            // and says what happened.
            return f.write_str(sentence);
        }
        let name = name.as_deref().unwrap_or("?");
        let key = key.as_deref().unwrap_or(name);
        let detail = detail.as_deref().unwrap_or("");
        match kind {
            ErrorKind::Connection if detail.is_empty() => f.write_str("the connection to redis failed"),
            ErrorKind::Connection => write!(f, "redis unreachable: {detail}"),
            ErrorKind::Redis => f.write_str("redis answered with an error"),
            ErrorKind::NotOwner => write!(f, "lock '{name}' is not held by this thread"),
            ErrorKind::LockLost => match reason {
                Some(reason) => write!(f, "lock '{name}' was lost: {reason}"),
                None => write!(f, "lock '{name}' was lost"),
            },
            ErrorKind::WrongType if key == name && !detail.is_empty() => {
                write!(f, "lock name '{name}' is another kind's lock: {detail}")
            }
            ErrorKind::WrongType if key == name => {
                write!(f, "a key of another type already exists at lock name '{name}'")
            }
            ErrorKind::WrongType => {
                write!(f, "key '{key}', which lock '{name}' needs, holds a value of another type")
            }
            ErrorKind::LegacyLockWithoutTtl => write!(
                f,
                "lock '{name}': the string key '{key}' (a hand-rolled SET NX lock) has no TTL, \
                 so it may never be released; keyholder does not wait on it nor delete it"
            ),
            ErrorKind::BadFencingCounter => write!(
                f,
                "the fencing-token counter '{key}' of lock '{name}' does not hold a \
                 non-negative integer below 2^63 - 1"
            ),
            ErrorKind::AccessDenied => write!(f, "redis refused access: {detail}"),
            ErrorKind::Tls => write!(f, "TLS with redis failed: {detail}"),
            ErrorKind::NotRedis => write!(f, "the server does not speak Redis: {detail}"),
            ErrorKind::InvalidArgument => write!(f, "invalid argument: {detail}"),
            ErrorKind::InvalidConfig => write!(f, "invalid configuration: {detail}"),
            ErrorKind::UnexpectedReply => write!(f, "script '{name}' replied outside its contract: {detail}"),
            ErrorKind::CountOverflow => {
                write!(f, "'{name}': the change would take its count outside the 64-bit range ({detail})")
            }
            ErrorKind::Spawn => write!(f, "cannot start the {detail} thread"),
            ErrorKind::ReplicaAcks => {
                write!(f, "lock '{name}': fewer replicas than required acknowledged the write in time")
            }
            ErrorKind::Shutdown => f.write_str("the keyholder client was shut down"),
            ErrorKind::AlreadyHeld => {
                write!(f, "{detail} '{name}' is already held by this caller, and it is not reentrant")
            }
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner.source.as_deref().map(|e| e as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_layer_only() {
        let e = Error::lock_lost("orders:1", LostReason::RenewalRefused);
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
    fn redis_errors_split_into_connection_and_reply_kinds() {
        let io =
            Error::redis(redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset)));
        assert_eq!(io.kind(), ErrorKind::Connection);
        assert!(io.is_connection_error() && io.is_redis_error() && io.is_transport());
        assert!(io.source().is_some(), "the redis-rs error is the source");
        let reply =
            Error::redis(redis::RedisError::from((redis::ErrorKind::Client, "OOM", "no memory".to_owned())));
        assert_eq!(reply.kind(), ErrorKind::Redis);
        assert!(reply.is_redis_error() && !reply.is_connection_error() && !reply.is_transport());
        let unreachable = Error::unreachable();
        assert!(unreachable.is_connection_error() && !unreachable.is_transport());
    }

    #[test]
    fn outages_are_connection_failures_and_replies_that_say_not_yet() {
        let reply = |text: &[u8]| match redis::parse_redis_value(text) {
            Ok(redis::Value::ServerError(e)) => Error::from_redis("k", e.into()),
            other => panic!("{other:?}"),
        };
        assert!(Error::unreachable().is_outage());
        assert!(Error::unsent(None).is_outage());
        let unsent = Error::unsent(Some("127.0.0.1:6379".to_owned()));
        assert!(unsent.is_outage() && unsent.is_connection_error());
        assert_eq!(unsent.address(), Some("127.0.0.1:6379"));
        assert!(unsent.to_string().contains("127.0.0.1:6379"), "{unsent}");
        for code in OUTAGE_CODES {
            assert!(reply(format!("-{code} not now\r\n").as_bytes()).is_outage(), "{code}");
        }
        assert!(!reply(b"-ERR unknown command\r\n").is_outage());
        assert!(!reply(b"-WRONGTYPE Operation against a key\r\n").is_outage());
        assert!(!reply(b"-NOPERM no\r\n").is_outage());
        assert!(!Error::shutdown().is_outage());
    }

    #[test]
    fn the_lock_and_key_concerned_are_carried() {
        let e = Error::wrong_type("f", "redisson_lock_token:{f}");
        assert_eq!((e.lock_name(), e.key()), (Some("f"), Some("redisson_lock_token:{f}")));
        assert_eq!(
            e.to_string(),
            "key 'redisson_lock_token:{f}', which lock 'f' needs, holds a value of another type"
        );
        let e = Error::wrong_type("f", "f");
        assert_eq!(e.to_string(), "a key of another type already exists at lock name 'f'");
        assert_eq!(Error::lock_lost("x", LostReason::Gone).lost_reason(), Some(LostReason::Gone));
        assert!(Error::invalid_argument("empty").is_invalid());
        let e = Error::legacy_lock_without_ttl("jobs:nightly");
        assert!(e.is_legacy_lock_without_ttl());
        assert_eq!(e.key(), Some("jobs:nightly"));
        assert!(e.to_string().contains("'jobs:nightly'") && e.to_string().contains("no TTL"));
        assert!(Error::spawn("watchdog", std::io::Error::other("no threads")).source().is_some());
    }

    #[test]
    fn another_kinds_lock_is_wrong_type_and_says_which() {
        let e = Error::held_as_other_kind("k", "a SpinLock", "a Lock");
        assert!(e.is_wrong_type());
        assert_eq!(e.key(), Some("k"));
        assert!(e.to_string().contains("this thread holds it as a Lock"), "{e}");
        let reply = redis::RedisError::from((
            redis::ErrorKind::Client,
            "script failed",
            "WRONGTYPE k holds another kind's lock: a read-write lock (a hash with a \"mode\" field)"
                .to_owned(),
        ));
        let e = Error::from_redis("k", reply);
        assert!(e.is_wrong_type());
        assert!(e.to_string().contains("Redis holds a read-write lock"), "{e}");
        let e = Error::count_overflow("pool", "adding 1 would leave the 64-bit range".to_owned());
        assert!(e.is_count_overflow() && !e.is_wrong_type());
        assert_eq!(e.lock_name(), Some("pool"));
    }

    #[test]
    fn errors_are_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
    }
}
