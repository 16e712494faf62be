//! Looking at locks from the outside, for operators: what sits at a name
//! and who waits for it ([`Client::inspect`]), which locks exist
//! ([`Client::list_locks`]), and the messages of a name's channel as they
//! come ([`Client::watch`]). The `keyholder` binary (`cli` feature) is
//! built on these; the kinds' `force_unlock` is the fourth operation it
//! offers.
//!
//! One concept per file: `layout.rs` tells keyholder's kinds apart by what
//! they keep in Redis (pure, unit-tested), `queues.rs` reads what waits
//! and what is held beside a name, `inspect.rs` reads one name,
//! `listing.rs` walks the keyspace, `watch.rs` follows a channel on the
//! client's own pub/sub connections.
//!
//! Every call goes where the client's locks go: the one server, the primary
//! Sentinel names, or on a Redis Cluster the primary that serves the name's
//! slot (a listing scans every primary). Nothing here writes to Redis.

mod inspect;
pub(crate) mod layout;
mod listing;
mod queues;
mod watch;

use std::time::Duration;

use redis::{FromRedisValue, Value};

pub use inspect::LockInfo;
pub use layout::{Holder, LockKind, ReadWriteMode};
pub use listing::ListedLock;
pub use queues::{HeldPermit, Waiter};
pub use watch::{UnlockMessage, UnlockWatch, WatchEvent};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::store::batch::Request;
use crate::store::lanes::Session;

impl Client {
    /// On a Redis Cluster, the primary that serves `name`'s slot now, as
    /// `host:port`, from the client's slot map (no I/O); `None` for a
    /// single server or Sentinel.
    pub fn node_of(&self, name: &str) -> Option<String> {
        self.inner().routes().node_of(name).map(|(host, port)| format!("{host}:{port}"))
    }
}

/// Sends `commands` in one request; one reply each, error replies included
/// (also the doctor's way of running commands on a primary).
pub(crate) fn send(session: &mut Session<'_>, commands: &[redis::Cmd]) -> Result<Vec<Value>> {
    let refs: Vec<&redis::Cmd> = commands.iter().collect();
    Ok(session.send(Request::commands(&refs))?.values)
}

/// A PTTL reply as a lease: `None` for no key (-2) or no expiry (-1).
fn lease(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A reply that must decode: an error reply is the call's error.
fn strict<T: FromRedisValue>(value: Value, name: &str) -> Result<T> {
    let value = value.extract_error().map_err(|e| Error::from_redis(name, e))?;
    T::from_redis_value(value.clone()).map_err(|_| Error::unexpected_reply("inspect", format!("{value:?}")))
}

/// A reply that may be an error (`WRONGTYPE` for a key of another type) or
/// nil: `None` then.
fn lenient<T: FromRedisValue>(value: Value) -> Option<T> {
    match value.extract_error() {
        Ok(Value::Nil) | Err(_) => None,
        Ok(value) => T::from_redis_value(value).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_positive_pttls() {
        assert_eq!(lease(1500), Some(Duration::from_millis(1500)));
        assert_eq!(lease(-1), None);
        assert_eq!(lease(-2), None);
    }
}
