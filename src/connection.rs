//! The command connection pool: r2d2 over redis-rs connections with timeouts.
//!
//! redis-rs's own r2d2 manager connects without a timeout and leaves read and
//! write timeouts unset, so a black-holed Redis would hang a caller. Worse, a
//! command whose reply timed out leaves that reply in flight: a connection
//! returned to the pool after it would hand the stale reply to the next caller.
//! This manager connects with the configured timeout, sets both socket
//! timeouts, and retires any connection on which an I/O error happened.

use std::time::Duration;

use crate::error::{Error, Result};

/// A pooled Redis connection that remembers whether an I/O error left it in
/// an unknown state.
pub(crate) struct Conn {
    inner: redis::Connection,
    broken: bool,
}

impl Conn {
    /// Runs `f` on the connection; an I/O-level failure retires it.
    pub(crate) fn run<T>(
        &mut self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        let result = f(&mut self.inner);
        if let Err(e) = &result
            && (is_transport_error(e) || e.is_unrecoverable_error())
        {
            self.broken = true;
        }
        result
    }
}

/// True when a command failed in transit (I/O error, timeout, dropped
/// connection): it may or may not have run on the server.
pub(crate) fn is_transport_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

/// Opens command connections for the pool.
#[derive(Debug)]
pub(crate) struct Connector {
    client: redis::Client,
    connect_timeout: Duration,
    command_timeout: Duration,
}

impl Connector {
    pub(crate) fn new(client: redis::Client, connect_timeout: Duration, command_timeout: Duration) -> Self {
        Connector { client, connect_timeout, command_timeout }
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
        return Error::AccessDenied(e.to_string());
    }
    if e.to_string().contains("DB index is out of range") {
        return Error::InvalidConfig(format!("the database index is out of range: {e}"));
    }
    Error::Redis(e)
}

impl r2d2::ManageConnection for Connector {
    type Connection = Conn;
    type Error = redis::RedisError;

    fn connect(&self) -> redis::RedisResult<Conn> {
        let inner = self.client.get_connection_with_timeout(self.connect_timeout)?;
        inner.set_read_timeout(Some(self.command_timeout))?;
        inner.set_write_timeout(Some(self.command_timeout))?;
        Ok(Conn { inner, broken: false })
    }

    fn is_valid(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        conn.run(|c| redis::cmd("PING").query::<String>(c)).map(drop)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || !redis::ConnectionLike::is_open(&conn.inner)
    }
}

/// The pool type used by a client.
pub(crate) type Pool = r2d2::Pool<Connector>;

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
        .map_err(Error::Pool)
}
