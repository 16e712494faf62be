//! The client's pub/sub connection: the subscriber and its reader thread,
//! and the little RESP it speaks on its own socket. It wakes `Waiters` and
//! knows nothing else of locks.

mod resp;
mod stream;
pub(crate) mod subscriber;
#[cfg(feature = "tls")]
mod tls_stream;
