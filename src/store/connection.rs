//! The command connection pool: r2d2 over redis-rs connections with timeouts.
//!
//! redis-rs's own r2d2 manager connects without a timeout and leaves read and
//! write timeouts unset, so a black-holed Redis would hang a caller. Worse, a
//! command whose reply timed out leaves that reply in flight: a connection
//! returned to the pool after it would hand the stale reply to the next caller.
//! This manager connects with the configured timeout, sets both socket
//! timeouts, and retires any connection on which an I/O error happened.
//!
//! **Dead idle connections.** When Redis, a proxy or a load balancer drops
//! every connection at once (a restart, `CLIENT KILL`, an idle `timeout`),
//! the pool still holds them, and r2d2 hands idle connections back without
//! checking them. So a connection that turns out dead (dropped or reset; a
//! timeout is not taken as proof) starts a new *generation*: every
//! connection opened before it is discarded when next checked out or
//! returned, without any I/O, and callers whose call is safe to repeat retry
//! it once on a new connection. One outage costs one reconnect per
//! connection in use, not one failed call per pooled connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::primary::Primary;

/// A pooled Redis connection that remembers whether an I/O error left it in
/// an unknown state.
pub(crate) struct Conn {
    inner: redis::Connection,
    broken: bool,
    /// The connection was found dropped or reset by the other side.
    dead: bool,
    /// The generation the connection was opened in.
    generation: u64,
    /// Whether the last script call's write reached the replicas asked for
    /// (`None` when no acknowledgement was asked).
    replicated: Option<bool>,
}

impl Conn {
    /// Runs `f` on the connection; an I/O-level failure retires it.
    pub(crate) fn run<T>(
        &mut self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        let result = f(&mut self.inner).map_err(demoted_as_dropped);
        if let Err(e) = &result
            && (is_transport_error(e) || e.is_unrecoverable_error())
        {
            self.broken = true;
            self.dead |= !e.is_timeout();
        }
        result
    }

    /// True once a call found the connection dropped or reset (not merely
    /// slow): the others opened with it are most likely dead too.
    pub(crate) fn is_dead(&self) -> bool {
        self.dead
    }

    /// Records whether the last call's write reached the replicas.
    pub(crate) fn note_replicated(&mut self, replicated: Option<bool>) {
        self.replicated = replicated;
    }

    /// Whether the last script call's write reached the replicas asked for;
    /// `None` when none were asked for.
    pub(crate) fn replicated(&self) -> Option<bool> {
        self.replicated
    }

    /// Retires the connection: the pool closes it when it comes back.
    pub(crate) fn retire(&mut self) {
        self.broken = true;
    }
}

/// The pool's current connection generation, shared by the connector and
/// the client.
#[derive(Debug, Default)]
pub(crate) struct Generation(AtomicU64);

impl Generation {
    pub(crate) fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Starts a new generation: every connection opened before is stale.
    pub(crate) fn advance(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// True for a connection of an earlier generation.
    pub(crate) fn is_stale(&self, conn: &Conn) -> bool {
        conn.generation < self.current()
    }
}

/// True when a command failed in transit (I/O error, timeout, dropped
/// connection): it may or may not have run on the server.
pub(crate) fn is_transport_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

/// A primary demoted by a failover refuses writes with `READONLY` but
/// still answers PING: its connections are as useless as dropped ones. The
/// refusal is turned into a reset connection, so that the connection's
/// generation is retired, calls that are safe to repeat run again on a new
/// connection (which `ROLE` sends to the new primary), and the rest report a
/// connection error. The script did not write anything: on a replica, its
/// first write fails.
fn demoted_as_dropped(e: redis::RedisError) -> redis::RedisError {
    if e.code() != Some("READONLY") {
        return e;
    }
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        format!("the primary was demoted (a failover): {e}"),
    )
    .into()
}

/// Opens command connections for the pool.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    /// Where connections go: asked at every connect.
    primary: Arc<Primary>,
    connect_timeout: Duration,
    command_timeout: Duration,
    generation: Arc<Generation>,
    /// The `CLIENT SETNAME` of every connection: `keyholder:<client-uuid>`.
    name: Arc<str>,
}

impl Connector {
    pub(crate) fn new(
        primary: Arc<Primary>,
        connect_timeout: Duration,
        command_timeout: Duration,
        generation: Arc<Generation>,
        name: Arc<str>,
    ) -> Self {
        Connector { primary, connect_timeout, command_timeout, generation, name }
    }
}

impl Connector {
    /// Opens one connection and pings on it, so that a server that refuses
    /// this client (no password, a wrong one, an ACL user that may not PING,
    /// a database index out of range) fails `build()` with an error that
    /// says so, at once, rather than every later call.
    pub(crate) fn check_access(&self) -> Result<()> {
        let mut conn = r2d2::ManageConnection::connect(self).map_err(access_error)?;
        conn.run(|c| redis::cmd("PING").query::<String>(c)).map_err(access_error)?;
        Ok(())
    }
}

/// Classifies a failure to open or use a first connection.
fn access_error(e: redis::RedisError) -> Error {
    let refused = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"));
    if refused {
        return Error::access_denied(e);
    }
    if e.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
        return Error::invalid_config(format!("no sentinel monitors that master: {e}"));
    }
    if e.to_string().contains("DB index is out of range") {
        return Error::invalid_config(format!("the database index is out of range: {e}"));
    }
    Error::redis(e)
}

impl r2d2::ManageConnection for Connector {
    type Connection = Conn;
    type Error = redis::RedisError;

    fn connect(&self) -> redis::RedisResult<Conn> {
        // Through Sentinel, a node that refuses the connection or is no
        // longer a master sends the next attempt to the sentinels: once.
        match self.connect_to_primary() {
            Err(e) if self.primary.is_discovered() && is_transport_error(&e) => self.connect_to_primary(),
            outcome => outcome,
        }
    }

    fn is_valid(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        conn.run(|c| redis::cmd("PING").query::<String>(c)).map(drop)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || self.generation.is_stale(conn) || !redis::ConnectionLike::is_open(&conn.inner)
    }
}

impl Connector {
    /// One connection to the node [`Primary::locate`] names, confirmed a
    /// master when it was found through Sentinel.
    fn connect_to_primary(&self) -> redis::RedisResult<Conn> {
        let generation = self.generation.current();
        let node = self.primary.locate()?;
        let mut inner = match node.client().get_connection_with_timeout(self.connect_timeout) {
            Ok(inner) => inner,
            Err(e) => {
                self.primary.lost(&node);
                return Err(e);
            }
        };
        inner.set_read_timeout(Some(self.command_timeout))?;
        inner.set_write_timeout(Some(self.command_timeout))?;
        // So that CLIENT LIST tells keyholder's connections, and whose they
        // are. Best effort: an ACL that denies it costs nothing else.
        let named = redis::cmd("CLIENT").arg("SETNAME").arg(&*self.name).query::<()>(&mut inner);
        if let Err(e) = named
            && (is_transport_error(&e) || e.is_unrecoverable_error())
        {
            return Err(e);
        }
        self.primary.confirm(&node, &mut inner)?;
        Ok(Conn { inner, broken: false, dead: false, generation, replicated: None })
    }
}

/// The pool type used by a client.
pub(crate) type Pool = r2d2::Pool<Connector>;

/// A connection for one call: from the pool, or, once the client has shut
/// down and closed its pool, opened for the call alone (a guard released
/// after shutdown).
pub(crate) enum Checkout {
    Pooled(r2d2::PooledConnection<Connector>),
    Direct(Conn),
}

impl std::ops::Deref for Checkout {
    type Target = Conn;

    fn deref(&self) -> &Conn {
        match self {
            Checkout::Pooled(conn) => conn,
            Checkout::Direct(conn) => conn,
        }
    }
}

impl std::ops::DerefMut for Checkout {
    fn deref_mut(&mut self) -> &mut Conn {
        match self {
            Checkout::Pooled(conn) => conn,
            Checkout::Direct(conn) => conn,
        }
    }
}

impl Connector {
    /// Opens a connection outside the pool.
    pub(crate) fn open(&self) -> Result<Conn> {
        r2d2::ManageConnection::connect(self).map_err(Error::redis)
    }
}

/// Builds the pool. Blocks until one connection is open or the connect
/// timeout passes.
pub(crate) fn build_pool(connector: Connector, max_size: u32, connect_timeout: Duration) -> Result<Pool> {
    r2d2::Pool::builder()
        .max_size(max_size)
        .min_idle(Some(1))
        .connection_timeout(connect_timeout)
        // A PING before every checkout would double the round trips of every
        // lock operation; broken connections are retired on return instead.
        .test_on_check_out(false)
        .build(connector)
        .map_err(Error::pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_demoted_primary_counts_as_a_reset_connection() {
        let readonly = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        let mapped = demoted_as_dropped(readonly);
        assert!(is_transport_error(&mapped) && !mapped.is_timeout(), "{mapped:?}");
        let other =
            redis::RedisError::from((redis::ErrorKind::Server(redis::ServerErrorKind::NoScript), "NOSCRIPT"));
        assert!(!is_transport_error(&demoted_as_dropped(other)));
    }
}
