//! What a lane (`store/lane.rs`) needs of a command connection ([`Wire`])
//! and of whatever opens one ([`Dial`]), and the command connections'
//! answers to both.
//!
//! Why: the lane is the subtlest concurrency code in the crate (tickets,
//! the hand-over of the reading between callers, withdrawal at the
//! deadline), and it needs only these few operations of a connection. With
//! the lane generic over them, a fake wire drives it in unit tests and in a
//! `loom` model, and whatever hands out connections (a connector today, a
//! pool tomorrow) plugs in as a [`Dial`]. The lanes use the concrete types,
//! so the generics are monomorphised: no dynamic dispatch per call.

#[cfg(all(test, not(loom)))]
pub(crate) mod fake;

use std::time::Instant;

use redis::{RedisError, Value};

use crate::store::connection::{Conn, Connector, Generation};

/// What a lane needs of a connection: write a batch, read its replies,
/// and tell whether the connection can take the next batch.
pub(crate) trait Wire: Send {
    /// Writes `bytes` (packed commands) at `now` (the caller's clock read,
    /// shared with [`is_usable`](Wire::is_usable)). A failure retires the
    /// connection.
    fn send(&mut self, bytes: &[u8], now: Instant) -> Result<(), RedisError>;

    /// Reads `replies` replies, stopping at the first failure (which
    /// retires the connection). Error replies are replies.
    fn receive(&mut self, replies: usize) -> (Vec<Value>, Option<RedisError>);

    /// True when no failure left the connection in an unknown state, it is
    /// of `generation`'s current generation, and (pooled connections) it is
    /// neither idle past its idle timeout nor past its lifetime at `now`.
    fn is_usable(&self, generation: &Generation, now: Instant) -> bool;

    /// True once the connection was found dropped or reset (not merely
    /// slow): its siblings are most likely dead too.
    fn is_dead(&self) -> bool;

    /// The generation the connection was opened in.
    fn generation(&self) -> u64;
}

/// Where a lane gets a connection when it has none fit for use.
pub(crate) trait Dial {
    /// The connections it opens.
    type Wire: Wire;

    /// Opens a connection, within the connect timeout.
    fn connect(&self) -> redis::RedisResult<Self::Wire>;

    /// The generation of the connections it opens: a connection found dead
    /// starts a new one, and every older connection is replaced before its
    /// next use.
    fn generation(&self) -> &Generation;
}

impl Wire for Conn {
    #[inline]
    fn send(&mut self, bytes: &[u8], now: Instant) -> Result<(), RedisError> {
        Conn::send_at(self, bytes, now)
    }

    #[inline]
    fn receive(&mut self, replies: usize) -> (Vec<Value>, Option<RedisError>) {
        Conn::receive(self, replies)
    }

    #[inline]
    fn is_usable(&self, generation: &Generation, _now: Instant) -> bool {
        Conn::is_usable(self, generation)
    }

    #[inline]
    fn is_dead(&self) -> bool {
        Conn::is_dead(self)
    }

    #[inline]
    fn generation(&self) -> u64 {
        Conn::generation(self)
    }
}

impl Dial for Connector {
    type Wire = Conn;

    #[inline]
    fn connect(&self) -> redis::RedisResult<Conn> {
        Connector::connect(self)
    }

    #[inline]
    fn generation(&self) -> &Generation {
        Connector::generation(self)
    }
}
