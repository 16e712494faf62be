//! The wire under every connection keyholder opens itself: the sockets
//! (TCP, TLS over TCP, a Unix socket). The command connections (`store/`)
//! and the pub/sub connections (`pubsub/`) both stand on it; it knows
//! nothing of either.

pub(crate) mod stream;
#[cfg(feature = "tls")]
mod tls_stream;
