//! The wire under every connection keyholder opens itself, written once for
//! the command connections (`store/`) and the pub/sub connections
//! (`pubsub/`), which both stand on it; it knows nothing of either: the
//! sockets (TCP, TLS over TCP, a Unix socket), the connection's setup
//! (login, database, name, library, a master's `ROLE`, in one round trip),
//! the one writer (commands packed by redis-rs) and the one reader
//! (redis-rs's parser, one per connection: replies and pushes as
//! `redis::Value`s).

pub(crate) mod commands;
pub(crate) mod handshake;
pub(crate) mod replies;
pub(crate) mod stream;
#[cfg(feature = "tls")]
mod tls_stream;
