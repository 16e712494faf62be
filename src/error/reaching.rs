//! What went wrong on the way to a server, said once, with the address
//! tried: refused, timed out after the connect timeout, the host name not
//! resolved, closed before answering, a server that does not speak Redis,
//! TLS on one side only, a TLS handshake refused (and by which side).
//!
//! A [`NetError`] is made where the address is known (`stream.rs`,
//! `tls_stream.rs`, `handshake.rs`, and the few connections redis-rs still
//! opens: the sentinels' lookups, `CLUSTER SLOTS`), and travels to
//! keyholder's [`Error`](crate::Error) inside the `redis::RedisError` the
//! connection layers pass around: an I/O error of the same
//! `std::io::ErrorKind` as the failure underneath, so that every check of
//! a `RedisError` (`is_timeout`, `is_connection_dropped`, a refusal) reads
//! it as before. [`of`] finds it again; `error.rs` turns it into the
//! error's kind, address and sentence.
//!
//! **Said once.** The sentence is the whole story. The I/O error beneath
//! is kept as the error's `source()` only where it adds to the sentence
//! (the resolver's reason, the TLS library's, an I/O error with no words
//! of keyholder's own); a refusal or a timeout has none, so that a report
//! that prints the chain (`anyhow`'s, the CLI's) says it once, and never
//! "Resource temporarily unavailable (os error 11)" for a timeout.

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;

use crate::durations::for_people;

/// A failure to reach a server, or to set a connection to it up.
#[derive(Debug)]
pub(crate) struct NetError {
    /// `host:port`, or a Unix socket's path.
    address: String,
    /// Who was being reached: `redis`, `the sentinel`, `the cluster node`.
    peer: &'static str,
    what: What,
    /// What the system or a library said, when it adds to `what`.
    cause: Option<Arc<dyn StdError + Send + Sync>>,
    /// The connection was set up, and failed later (a command's).
    established: bool,
}

/// What happened.
#[derive(Debug, Clone)]
pub(crate) enum What {
    /// The host name did not resolve (the resolver says why).
    Unresolved,
    /// Nothing listens at the port (or a firewall said so).
    Refused,
    /// No connection, handshake or answer within the connect timeout.
    TimedOut { after: Duration, stage: Stage },
    /// The server closed (`reset`: reset) the connection before it
    /// answered the setup.
    Closed { reset: bool },
    /// The server answered with something that is not RESP.
    NotRedis { answer: String },
    /// A `redis://` URL, and the port speaks TLS.
    TlsPort,
    /// A `rediss://` URL, and the port speaks plain Redis.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    PlainPort,
    /// The TLS handshake was refused, as the words say (by which side, and
    /// what to check).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    TlsRefused(String),
    /// No sentinel answered for the master (the cause: the last one's
    /// failure).
    NoSentinel { master: String },
    /// Another I/O failure: the cause says what.
    Failed,
}

/// How far the connection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The TCP connect.
    Connect,
    /// The TLS handshake.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    TlsHandshake,
    /// The setup's round trip (`AUTH`, `CLIENT SETNAME`, ...).
    Setup,
    /// A command on a connection set up (bounded by the command timeout).
    Command,
}

/// What kind of keyholder error a failure is (see `error.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Connection,
    Tls,
    NotRedis,
}

impl NetError {
    /// A failure reaching redis at `address` (see [`NetError::peer`] for a
    /// sentinel or a cluster node).
    pub(crate) fn new(address: impl Into<String>, what: What) -> NetError {
        NetError { address: address.into(), peer: "redis", what, cause: None, established: false }
    }

    /// A failure of a connection to `address` that was set up: a command
    /// timed out, or the server dropped it. `cause`, when its words are the
    /// only ones (`What::Failed`).
    pub(crate) fn broken(address: impl Into<String>, what: What, cause: Option<RedisError>) -> NetError {
        NetError {
            cause: cause.map(|e| Arc::new(e) as Arc<dyn StdError + Send + Sync>),
            established: true,
            ..NetError::new(address, what)
        }
    }

    /// The same, with what the system or a library said.
    pub(crate) fn caused(address: impl Into<String>, what: What, cause: io::Error) -> NetError {
        NetError { cause: Some(Arc::new(cause)), ..NetError::new(address, what) }
    }

    /// A failure of a connection redis-rs opened (a sentinel's lookup,
    /// `CLUSTER SLOTS`) to `address`, classified from its error; `None`
    /// when `e` is not a failure to reach the server (a refused password,
    /// an error reply).
    pub(crate) fn of_redis_rs(
        address: impl Into<String>,
        timeout: Duration,
        e: &RedisError,
    ) -> Option<NetError> {
        if of(e).is_some() || !e.is_io_error() {
            return None;
        }
        let what = if e.is_connection_refusal() {
            What::Refused
        } else if e.is_timeout() {
            What::TimedOut { after: timeout, stage: Stage::Connect }
        } else {
            What::Failed
        };
        let cause: Option<Arc<dyn StdError + Send + Sync>> =
            matches!(what, What::Failed).then(|| Arc::new(e.clone()) as _);
        Some(NetError { address: address.into(), peer: "redis", what, cause, established: false })
    }

    /// Who was being reached, when not a Redis server: `the sentinel`,
    /// `the cluster node`.
    pub(crate) fn peer(mut self, peer: &'static str) -> NetError {
        self.peer = peer;
        self
    }

    /// The address tried.
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    /// The keyholder error kind it is.
    pub(crate) fn class(&self) -> Class {
        match self.what {
            What::TlsPort | What::PlainPort | What::TlsRefused(_) => Class::Tls,
            What::NotRedis { .. } => Class::NotRedis,
            _ => Class::Connection,
        }
    }

    /// What the system or a library said, where it adds to the sentence
    /// (not said in it already).
    pub(crate) fn cause(&self) -> Option<Arc<dyn StdError + Send + Sync>> {
        match self.what {
            What::Failed | What::NoSentinel { .. } => None,
            _ => self.cause.clone(),
        }
    }

    /// The `std::io::ErrorKind` it travels as: the one of the failure
    /// underneath, so that `RedisError`'s checks read it as before.
    fn io_kind(&self) -> io::ErrorKind {
        match &self.what {
            What::Refused => io::ErrorKind::ConnectionRefused,
            What::TimedOut { .. } => io::ErrorKind::TimedOut,
            What::Closed { reset: true } => io::ErrorKind::ConnectionReset,
            What::Closed { reset: false } => io::ErrorKind::UnexpectedEof,
            What::NotRedis { .. } | What::TlsPort | What::PlainPort | What::TlsRefused(_) => {
                io::ErrorKind::InvalidData
            }
            What::NoSentinel { .. } => io::ErrorKind::NotConnected,
            What::Unresolved | What::Failed => {
                let cause = self.cause.as_deref();
                let io = cause.and_then(|cause| {
                    cause
                        .downcast_ref::<io::Error>()
                        .or_else(|| cause.downcast_ref::<RedisError>().and_then(io_of))
                });
                io.map_or(io::ErrorKind::Other, io::Error::kind)
            }
        }
    }
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let NetError { address, peer, what, cause, established } = self;
        if *established {
            write!(f, "the connection to {peer} at {address} failed: ")?;
        } else {
            write!(f, "cannot connect to {peer} at {address}: ")?;
        }
        match what {
            What::Unresolved => f.write_str("its host name did not resolve"),
            What::Refused => f.write_str("connection refused"),
            What::TimedOut { after, stage: Stage::Command } => {
                write!(f, "timed out after {} (the command timeout)", for_people(*after))
            }
            What::TimedOut { after, stage } => {
                write!(f, "timed out after {} (the connect timeout)", for_people(*after))?;
                f.write_str(match stage {
                    Stage::Connect | Stage::Command => "",
                    Stage::TlsHandshake => ": no answer to the TLS handshake",
                    Stage::Setup => ": the server accepted the connection and never answered",
                })
            }
            What::Closed { reset } => {
                write!(f, "the server {} the connection", if *reset { "reset" } else { "closed" })?;
                f.write_str(if *established { "" } else { " before answering" })
            }
            What::NotRedis { answer } => {
                write!(f, "the server there does not speak Redis (it answered {answer:?})")
            }
            What::TlsPort => f.write_str(
                "the port speaks TLS, and the URL asks for plain TCP: use a rediss:// URL (with \
                 keyholder's `tls` feature)",
            ),
            What::PlainPort => f.write_str(
                "the port speaks plain Redis, and the URL asks for TLS: use a redis:// URL, or the \
                 server's tls-port",
            ),
            What::TlsRefused(words) => write!(f, "the TLS handshake failed: {words}"),
            What::NoSentinel { master } => {
                write!(f, "none answered for master {master:?}")?;
                match cause {
                    Some(last) => write!(f, " (the last: {last})"),
                    None => Ok(()),
                }
            }
            What::Failed => match cause {
                Some(cause) => write!(f, "{cause}"),
                None => f.write_str("the connection failed"),
            },
        }
    }
}

impl StdError for NetError {}

impl From<NetError> for RedisError {
    fn from(e: NetError) -> RedisError {
        io::Error::from(e).into()
    }
}

impl From<NetError> for io::Error {
    fn from(e: NetError) -> io::Error {
        io::Error::new(e.io_kind(), e)
    }
}

/// The I/O error inside a redis-rs error, if it is one.
pub(crate) fn io_of(e: &RedisError) -> Option<&io::Error> {
    // redis-rs keeps it as an `Arc<dyn Error + Send + Sync>` and gives that
    // as its `source()`.
    let source = e.source()?;
    match source.downcast_ref::<Arc<dyn StdError + Send + Sync>>() {
        Some(shared) => shared.downcast_ref::<io::Error>(),
        None => source.downcast_ref::<io::Error>(),
    }
}

/// The failure to reach a server inside a redis-rs error, if it is one.
pub(crate) fn of(e: &RedisError) -> Option<&NetError> {
    io_of(e)?.get_ref()?.downcast_ref::<NetError>()
}

/// A reply's first bytes, for a message: printable ASCII as it is,
/// anything else escaped, at most `LIMIT` bytes.
pub(crate) fn shown(bytes: &[u8]) -> String {
    const LIMIT: usize = 32;
    let line = bytes.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
    let mut text: String =
        line.iter().take(LIMIT).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    if line.len() > LIMIT {
        text.push_str("...");
    }
    text
}

/// What went wrong, and what the system said when it adds to it.
pub(crate) type Failed = (What, Option<io::Error>);

/// What an I/O error of a connection being set up means, at `stage`.
pub(crate) fn failed_io(e: io::Error, timeout: Duration, stage: Stage) -> Failed {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => (What::Refused, None),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            (What::TimedOut { after: timeout, stage }, None)
        }
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe
            if stage != Stage::Connect =>
        {
            (What::Closed { reset: true }, None)
        }
        io::ErrorKind::UnexpectedEof if stage != Stage::Connect => (What::Closed { reset: false }, None),
        _ => (What::Failed, Some(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn travels_inside_a_redis_error_as_the_io_kind_beneath() {
        let refused: RedisError = NetError::new("127.0.0.1:1", What::Refused).into();
        assert!(refused.is_connection_refusal() && refused.is_connection_dropped(), "{refused:?}");
        let found = of(&refused).unwrap();
        assert_eq!((found.address(), found.class()), ("127.0.0.1:1", Class::Connection));
        assert_eq!(refused.to_string(), "cannot connect to redis at 127.0.0.1:1: connection refused");

        let after = Duration::from_secs(3);
        let silent: RedisError =
            NetError::new("h:6379", What::TimedOut { after, stage: Stage::Setup }).into();
        assert!(silent.is_timeout());
        assert!(silent.to_string().contains("timed out after 3 s (the connect timeout)"), "{silent}");
        assert!(of(&RedisError::from(io::Error::from(io::ErrorKind::TimedOut))).is_none());
    }

    #[test]
    fn a_broken_connection_keeps_the_kind_and_words_beneath() {
        let demoted =
            RedisError::from(io::Error::new(io::ErrorKind::ConnectionReset, "the primary was demoted"));
        let broken: RedisError = NetError::broken("h:1", What::Failed, Some(demoted)).into();
        assert!(broken.is_connection_dropped(), "{broken:?}");
        assert_eq!(broken.to_string(), "the connection to redis at h:1 failed: the primary was demoted");
        let slow: RedisError = NetError::broken(
            "h:1",
            What::TimedOut { after: Duration::from_millis(1500), stage: Stage::Command },
            None,
        )
        .into();
        assert!(slow.is_timeout());
        assert_eq!(
            slow.to_string(),
            "the connection to redis at h:1 failed: timed out after 1.5 s (the command timeout)"
        );
    }

    #[test]
    fn redis_rs_failures_are_classified_and_others_left() {
        let refused = RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        let e =
            NetError::of_redis_rs("s:26379", Duration::from_secs(1), &refused).unwrap().peer("the sentinel");
        assert_eq!(e.to_string(), "cannot connect to the sentinel at s:26379: connection refused");
        let reply = RedisError::from((redis::ErrorKind::AuthenticationFailed, "no"));
        assert!(NetError::of_redis_rs("s:26379", Duration::from_secs(1), &reply).is_none());
    }

    #[test]
    fn answers_are_shown_as_their_first_line() {
        assert_eq!(shown(b"HTTP/1.1 400 Bad Request\r\nServer: x\r\n"), "HTTP/1.1 400 Bad Request");
        assert_eq!(shown(b"\x15\x03\x03"), "\\x15\\x03\\x03");
        assert_eq!(shown(&[b'a'; 40]).len(), 35);
    }
}
