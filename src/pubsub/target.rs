//! Where a pub/sub-style connection goes and how it logs in: an address
//! (TCP, TLS over TCP, a Unix socket), credentials and a connection name.
//! The subscriber connects to the primary with it, the sentinel watch to
//! each sentinel, the operators' watch to a lock's node. Opening one is
//! the setup every connection goes through (`net/handshake.rs`), without
//! `SELECT` (channels belong to no database), and gives a reading half
//! (one thread reads) and a writing half (any thread writes).

use std::fmt;
use std::io;
use std::time::Duration;

use redis::{RedisResult, Value};

use crate::error::Result;
use crate::net::commands::write_commands;
use crate::net::handshake::{self, Opened, Setup};
use crate::net::replies::ReplyReader;
use crate::net::stream::{Address, Stream, TlsConfig};
use crate::pubsub::push::refusal_text;

/// Where and how to connect.
#[derive(Clone)]
pub(crate) struct Target {
    address: Address,
    username: Option<String>,
    password: Option<String>,
    /// The connection's `CLIENT SETNAME`.
    name: String,
    /// The client's database: a pub/sub connection selects none (channels
    /// belong to no database), a tracking connection selects it (its
    /// renewals write there, `pubsub/tracking.rs`).
    db: i64,
}

/// Never prints the password, so a `{:?}` in a log line cannot leak it.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("address", &self.address)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("name", &self.name)
            .field("db", &self.db)
            .finish()
    }
}

impl Target {
    /// The pub/sub target of a redis-rs connection description: TCP, a Unix
    /// socket, or, with the `tls` feature, TLS over TCP with `tls` (the
    /// configuration made from the client's TLS settings).
    pub(crate) fn from_info(
        info: &redis::ConnectionInfo,
        name: String,
        tls: Option<TlsConfig>,
    ) -> Result<Target> {
        let address = Address::of(info, tls)?;
        Ok(Target {
            address,
            username: info.redis_settings().username().map(str::to_owned),
            password: info.redis_settings().password().map(str::to_owned),
            name,
            db: info.redis_settings().db(),
        })
    }
}

/// The reading half of a pub/sub connection: the socket, shared with the
/// writing half, and the connection's reader.
pub(crate) struct Incoming {
    stream: Stream,
    replies: ReplyReader,
}

impl Incoming {
    /// The next reply or push. A read timeout leaves a push that was
    /// arriving to the next call (see `net/replies.rs`); after any other
    /// error the connection is dropped.
    pub(crate) fn next(&mut self) -> RedisResult<Value> {
        self.replies.next(&mut self.stream)
    }

    /// How long a read waits for the next bytes.
    pub(crate) fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.stream.set_read_timeout(Some(timeout))
    }
}

impl Target {
    /// Connects and sets the connection up in one round trip: logs in
    /// (when the target has a password) and names the connection (best
    /// effort: an ACL may deny `CLIENT SETNAME`), within the connect
    /// timeout; returns the read half (read timeout: the command timeout)
    /// and the write half.
    pub(crate) fn open(
        &self,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> RedisResult<(Incoming, Stream)> {
        self.open_in(0, connect_timeout, command_timeout)
    }

    /// As [`open`](Self::open), with the client's database selected: for a
    /// connection that reads and writes keys (the tracking connection).
    pub(crate) fn open_in_database(
        &self,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> RedisResult<(Incoming, Stream)> {
        self.open_in(self.db, connect_timeout, command_timeout)
    }

    fn open_in(
        &self,
        db: i64,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> RedisResult<(Incoming, Stream)> {
        let setup = Setup {
            username: self.username.as_deref(),
            password: self.password.as_deref(),
            db,
            name: &self.name,
            require_master: false,
        };
        let Opened { stream, replies } =
            handshake::open(&self.address, &setup, connect_timeout, command_timeout)?;
        let writer = stream.try_clone()?;
        Ok((Incoming { stream, replies }, writer))
    }

    /// Subscribes to `channels` on a connection of its own, and closes it
    /// (which leaves them): the server's refusal, if it refuses (an ACL user
    /// denied SUBSCRIBE or these channels), so that `build()` can say so
    /// instead of every wait failing later.
    pub(crate) fn refused_subscription(
        &self,
        connect_timeout: Duration,
        command_timeout: Duration,
        channels: &[&str],
    ) -> RedisResult<Option<String>> {
        let (mut incoming, mut writer) = self.open(connect_timeout, command_timeout)?;
        write_commands(&mut writer, &[redis::cmd("SUBSCRIBE").arg(channels).clone()])?;
        // One confirmation per channel, or one error for the command.
        for _ in channels {
            if let Value::ServerError(refusal) = incoming.next()? {
                return Ok(Some(refusal_text(&refusal)));
            }
        }
        // Leave as the server sees it: QUIT, its +OK, then the server's
        // close (end of file), so that no probe outlives `build()` in
        // `CLIENT LIST`.
        write_commands(&mut writer, &[redis::cmd("QUIT")])?;
        for _ in 0..2 {
            if incoming.next().is_err() {
                break;
            }
        }
        writer.shutdown();
        Ok(None)
    }

    /// The same target for the node's tracking connection
    /// (`pubsub/tracking.rs`): named `keyholder:<client id>:tracking`
    /// rather than `...:pubsub`, so that `CLIENT LIST` tells them apart.
    pub(crate) fn for_tracking(&self) -> Target {
        let base = self.name.strip_suffix(":pubsub").unwrap_or(&self.name);
        Target { name: format!("{base}:tracking"), ..self.clone() }
    }

    /// For logs and `Debug`.
    pub(crate) fn describe(&self) -> String {
        self.address.describe()
    }
}
