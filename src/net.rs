//! The wire under every connection keyholder opens itself, written once for
//! the command connections (`store/`) and the pub/sub connections
//! (`pubsub/`), which both stand on it; it knows nothing of either: the
//! sockets (TCP, TLS over TCP, a Unix socket), the connection's setup
//! (login, database, name, library, a master's `ROLE`, in one round trip),
//! the one writer (commands packed by redis-rs) and the one reader
//! (redis-rs's parser, one per connection: replies and pushes as
//! `redis::Value`s). A connection that cannot be set up says why, at which
//! address (`error/reaching.rs`), asking the port on the side when a TLS
//! mismatch would explain the failure (`probe.rs`).

pub(crate) mod commands;
pub(crate) mod handshake;
mod probe;
pub(crate) mod replies;
pub(crate) mod stream;
#[cfg(feature = "tls")]
mod tls_stream;
