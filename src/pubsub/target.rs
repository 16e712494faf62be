//! Where a pub/sub-style connection goes and how it logs in: an address
//! (TCP, TLS over TCP, a Unix socket), credentials and a connection name.
//! The subscriber connects to the primary with it, the sentinel watch to
//! each sentinel.

use std::fmt;
use std::io::{self, BufReader};
use std::time::Duration;

use crate::error::Result;
use crate::net::stream::{Address, Stream, TlsConfig};
use crate::pubsub::resp::{self, Resp};

/// Where and how to connect.
#[derive(Clone)]
pub(crate) struct Target {
    address: Address,
    username: Option<String>,
    password: Option<String>,
    /// The connection's `CLIENT SETNAME`.
    name: String,
}

/// Never prints the password, so a `{:?}` in a log line cannot leak it.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("address", &self.address)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("name", &self.name)
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
        })
    }
}

impl Target {
    /// Why a TLS handshake with the server fails, if it does: one
    /// connection and a PING, for `build()` to explain a refused pool
    /// connection (see `tls.rs`). `None` when it succeeds, or fails for
    /// another reason than TLS.
    #[cfg(feature = "tls")]
    pub(crate) fn tls_refusal(&self, timeout: Duration) -> Option<crate::error::Error> {
        if !matches!(self.address, Address::Tls { .. }) {
            return None;
        }
        let probe = || -> io::Result<()> {
            let mut stream = self.address.connect(timeout)?;
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            // A server that refuses this client's certificate says so after
            // the handshake (TLS 1.3): read one reply.
            resp::write_command(&mut stream, &[b"PING"])?;
            resp::read_value(&mut BufReader::new(stream)).map(drop)
        };
        crate::tls::refusal(probe().err()?).ok()
    }
}

impl Target {
    /// Connects, logs in (when the target has a password) and names the
    /// connection (best effort: an ACL may deny `CLIENT SETNAME`), all
    /// within the connect timeout and a command timeout per reply; returns
    /// the read half (read timeout: the command timeout) and the write half.
    pub(crate) fn open(
        &self,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> io::Result<(BufReader<Stream>, Stream)> {
        let stream = self.address.connect(connect_timeout)?;
        stream.set_write_timeout(Some(command_timeout))?;
        stream.set_read_timeout(Some(command_timeout))?;
        let mut writer = stream.try_clone()?;
        let mut reader = BufReader::new(stream);
        if let Some(password) = self.password.as_deref() {
            match self.username.as_deref() {
                Some(user) => {
                    resp::write_command(&mut writer, &[b"AUTH", user.as_bytes(), password.as_bytes()])?
                }
                None => resp::write_command(&mut writer, &[b"AUTH", password.as_bytes()])?,
            }
            if let Resp::Error(e) = resp::read_value(&mut reader)? {
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, e));
            }
        }
        resp::write_command(&mut writer, &[b"CLIENT", b"SETNAME", self.name.as_bytes()])?;
        resp::read_value(&mut reader)?;
        Ok((reader, writer))
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
    ) -> io::Result<Option<String>> {
        let (mut reader, mut writer) = self.open(connect_timeout, command_timeout)?;
        let mut command: Vec<&[u8]> = vec![b"SUBSCRIBE"];
        command.extend(channels.iter().map(|c| c.as_bytes()));
        resp::write_command(&mut writer, &command)?;
        // One confirmation per channel, or one error for the command.
        for _ in channels {
            if let Resp::Error(refusal) = resp::read_value(&mut reader)? {
                return Ok(Some(refusal));
            }
        }
        // Leave as the server sees it: QUIT, its +OK, then the server's
        // close (end of file), so that no probe outlives `build()` in
        // `CLIENT LIST`.
        resp::write_command(&mut writer, &[b"QUIT"])?;
        for _ in 0..2 {
            if resp::read_value(&mut reader).is_err() {
                break;
            }
        }
        writer.shutdown();
        Ok(None)
    }

    /// For logs and `Debug`.
    pub(crate) fn describe(&self) -> String {
        self.address.describe()
    }
}
