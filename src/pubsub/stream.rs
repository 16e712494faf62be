//! The pub/sub connection's socket: TCP, or a Unix domain socket for
//! `redis+unix://` and `unix://` URLs. The subscriber needs a little more
//! than `Read` and `Write` of it: a clone for the writing half, timeouts,
//! and a shutdown that wakes the reader.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Where the server listens.
#[derive(Debug, Clone)]
pub(crate) enum Address {
    Tcp {
        host: String,
        port: u16,
    },
    #[cfg(unix)]
    Unix(PathBuf),
}

/// A connected socket.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Address {
    /// Connects, trying each resolved address of a host name in turn, each
    /// within `timeout` (a Unix socket connects at once or not at all).
    pub(crate) fn connect(&self, timeout: Duration) -> io::Result<Stream> {
        match self {
            Address::Tcp { host, port } => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address for the redis host");
                for addr in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&addr, timeout) {
                        Ok(stream) => {
                            stream.set_nodelay(true)?;
                            return Ok(Stream::Tcp(stream));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            #[cfg(unix)]
            Address::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
        }
    }

    /// For logs and `Debug`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Address::Tcp { host, port } => format!("{host}:{port}"),
            #[cfg(unix)]
            Address::Unix(path) => path.display().to_string(),
        }
    }
}

impl Stream {
    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        match self {
            Stream::Tcp(s) => s.try_clone().map(Stream::Tcp),
            #[cfg(unix)]
            Stream::Unix(s) => s.try_clone().map(Stream::Unix),
        }
    }

    pub(crate) fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_read_timeout(timeout),
        }
    }

    pub(crate) fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(timeout),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    /// Closes both directions: a reader blocked on the other half returns.
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            #[cfg(unix)]
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            #[cfg(unix)]
            Stream::Unix(s) => s.flush(),
        }
    }
}
