//! keyholder's sockets to Redis: TCP, TLS over TCP for `rediss://` URLs
//! (the `tls` feature; see `tls_stream.rs`), or a Unix domain socket for
//! `redis+unix://` and `unix://` URLs. The pub/sub connections and the
//! command connections (`store/connection.rs`) both connect through here, in `net/`, below both.
//! The subscriber needs a little more than `Read` and `Write` of it: a
//! clone for the writing half, timeouts, and a shutdown that wakes the
//! reader.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::reaching::{Failed, NetError, Stage, What, failed_io};
use crate::error::{Error, Result};
#[cfg(feature = "tls")]
use crate::net::tls_stream::TlsStream;

/// What a socket of keyholder's own (pub/sub, commands) needs for TLS: the rustls configuration
/// (nothing can be given without the `tls` feature).
#[cfg(feature = "tls")]
pub(crate) type TlsConfig = Arc<rustls::ClientConfig>;
/// What a socket of keyholder's own (pub/sub, commands) needs for TLS: the rustls configuration
/// (nothing can be given without the `tls` feature).
#[cfg(not(feature = "tls"))]
pub(crate) type TlsConfig = std::convert::Infallible;

/// Where the server listens.
#[derive(Debug, Clone)]
pub(crate) enum Address {
    Tcp {
        host: String,
        port: u16,
    },
    #[cfg(feature = "tls")]
    Tls {
        host: String,
        port: u16,
        config: Arc<rustls::ClientConfig>,
    },
    #[cfg(unix)]
    Unix(PathBuf),
}

/// A connected socket.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    #[cfg(feature = "tls")]
    Tls(TlsStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Address {
    /// The address of a redis-rs connection description: TCP, a Unix socket,
    /// or, with the `tls` feature, TLS over TCP with `tls` (the configuration
    /// made from the client's TLS settings). Used by the pub/sub connections
    /// and the command connections alike.
    pub(crate) fn of(info: &redis::ConnectionInfo, tls: Option<TlsConfig>) -> Result<Address> {
        match (info.addr(), tls) {
            (redis::ConnectionAddr::Tcp(host, port), _) => {
                Ok(Address::Tcp { host: host.clone(), port: *port })
            }
            #[cfg(feature = "tls")]
            (redis::ConnectionAddr::TcpTls { host, port, .. }, Some(config)) => {
                Ok(Address::Tls { host: host.clone(), port: *port, config })
            }
            #[cfg(unix)]
            (redis::ConnectionAddr::Unix(path), _) => Ok(Address::Unix(path.clone())),
            (other, _) => Err(Error::invalid_config(format!(
                "keyholder connects to redis:// (TCP), rediss:// (TLS, with the `tls` feature) and \
                 redis+unix:// URLs; got {other}"
            ))),
        }
    }

    /// Connects, trying each resolved address of a host name in turn, all
    /// within `timeout` (a TLS handshake included; a Unix socket connects at
    /// once or not at all). A failure says what happened, at which address
    /// (see `error/reaching.rs`).
    pub(crate) fn connect(&self, timeout: Duration) -> Result<Stream, NetError> {
        let deadline = Instant::now() + timeout;
        match self {
            Address::Tcp { host, port } => connect_tcp(host, *port, deadline, timeout)
                .map(Stream::Tcp)
                .map_err(|(what, cause)| self.failure(what, cause)),
            #[cfg(feature = "tls")]
            Address::Tls { host, port, config } => {
                let tcp = connect_tcp(host, *port, deadline, timeout)
                    .map_err(|(what, cause)| self.failure(what, cause))?;
                TlsStream::handshake(tcp, host, Arc::clone(config), deadline, timeout)
                    .map(Stream::Tls)
                    .map_err(|(what, cause)| self.failure(what, cause))
            }
            #[cfg(unix)]
            Address::Unix(path) => UnixStream::connect(path).map(Stream::Unix).map_err(|e| {
                let what =
                    if e.kind() == io::ErrorKind::ConnectionRefused { What::Refused } else { What::Failed };
                NetError::caused(self.shown(), what, e)
            }),
        }
    }

    /// The same kind of address (TCP, or TLS with the same configuration)
    /// at another node, `host:port`: one a primary names as its replica.
    /// A Unix socket's node names its replicas by TCP address.
    pub(crate) fn at(&self, host: String, port: u16) -> Address {
        match self {
            #[cfg(feature = "tls")]
            Address::Tls { config, .. } => Address::Tls { host, port, config: Arc::clone(config) },
            _ => Address::Tcp { host, port },
        }
    }

    /// A failure at this address.
    pub(crate) fn failure(&self, what: What, cause: Option<io::Error>) -> NetError {
        match cause {
            Some(cause) => NetError::caused(self.shown(), what, cause),
            None => NetError::new(self.shown(), what),
        }
    }

    /// The address as a user wrote it: `host:port` (`[v6]:port`), or the
    /// socket's path.
    pub(crate) fn shown(&self) -> String {
        match self {
            Address::Tcp { host, port } => host_port(host, *port),
            #[cfg(feature = "tls")]
            Address::Tls { host, port, .. } => host_port(host, *port),
            #[cfg(unix)]
            Address::Unix(path) => path.display().to_string(),
        }
    }

    /// True for plain TCP (not TLS, not a Unix socket).
    pub(crate) fn is_plain_tcp(&self) -> bool {
        matches!(self, Address::Tcp { .. })
    }

    /// For logs and `Debug`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Address::Tcp { host, port } => format!("{host}:{port}"),
            #[cfg(feature = "tls")]
            Address::Tls { host, port, .. } => format!("{host}:{port} (TLS)"),
            #[cfg(unix)]
            Address::Unix(path) => path.display().to_string(),
        }
    }
}

/// How long a TCP connection may be silent before the kernel probes it
/// (then every 10 s where the platform lets that be set): a NAT or load
/// balancer keeps the flow's mapping (their idle cut-offs are 4 min and
/// up), and a peer gone without a word is noticed by a connection nobody
/// writes to.
const KEEPALIVE_TIME: Duration = Duration::from_secs(60);

/// Turns TCP keepalive on (best effort: a platform that refuses it still
/// gets a working connection, retired by its idle timeout).
fn keep_alive(stream: &TcpStream) {
    let keepalive = socket2::TcpKeepalive::new().with_time(KEEPALIVE_TIME);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos", target_os = "ios", windows))]
    let keepalive = keepalive.with_interval(Duration::from_secs(10));
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive) {
        log::debug!("keyholder: TCP keepalive could not be turned on: {e}");
    }
}

/// `host:port`, with an IPv6 address in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A TCP connection to `host:port` by `deadline` (`timeout` after the
/// start), trying each of its addresses in turn, with keepalive on.
fn connect_tcp(host: &str, port: u16, deadline: Instant, timeout: Duration) -> Result<TcpStream, Failed> {
    let timed_out = (What::TimedOut { after: timeout, stage: Stage::Connect }, None);
    let addrs = (host, port).to_socket_addrs().map_err(|e| (What::Unresolved, Some(e)))?;
    let mut last = (What::Unresolved, None);
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out);
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => {
                stream.set_nodelay(true).map_err(|e| (What::Failed, Some(e)))?;
                keep_alive(&stream);
                return Ok(stream);
            }
            Err(e) => last = failed_io(e, timeout, Stage::Connect),
        }
    }
    Err(last)
}

impl Stream {
    /// The server's socket address, for a TCP connection (TLS or not).
    pub(crate) fn tcp_peer(&self) -> Option<std::net::SocketAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok(),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.socket().peer_addr().ok(),
            #[cfg(unix)]
            Stream::Unix(_) => None,
        }
    }
}

impl Stream {
    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        match self {
            Stream::Tcp(s) => s.try_clone().map(Stream::Tcp),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.try_clone().map(Stream::Tls),
            #[cfg(unix)]
            Stream::Unix(s) => s.try_clone().map(Stream::Unix),
        }
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.socket().set_read_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.socket().set_write_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    /// Closes both directions: a reader blocked on the other half returns.
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => {
                s.shutdown();
                Ok(())
            }
            #[cfg(unix)]
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.flush(),
            #[cfg(unix)]
            Stream::Unix(s) => s.flush(),
        }
    }
}
