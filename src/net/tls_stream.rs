//! A connection over TLS (the `tls` feature), for commands or pub/sub: one
//! TLS session that a pub/sub connection's reader thread and its writing
//! waiters can use at once.
//!
//! A plain socket is cloned into a read half and a write half. A TLS session
//! cannot be: reading and writing share its state (keys, sequence numbers,
//! post-handshake messages). rustls's `StreamOwned` would have to be locked
//! by the reader for as long as it blocks in `read`, and no waiter could
//! write SUBSCRIBE meanwhile. So the halves share the session behind a mutex
//! and the TCP socket by cloning it, and the reader blocks on the socket
//! *without* the session: it reads ciphertext, then takes the mutex only to
//! decrypt it. A writer takes the mutex to encrypt and send. Neither ever
//! waits on the other's I/O for longer than a write timeout.
//!
//! The handshake runs before the halves exist, under the connect timeout as a
//! whole, so a server that accepts TCP and then stalls cannot hang a connect.
//! Socket timeouts, shutdown and the subscriber's use of them work as for
//! plain TCP, on the shared socket.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use crate::error::reaching::{Failed, Stage, What, failed_io};
use crate::net::probe;

/// Ciphertext read from the socket per call; a TLS record is at most 16 KiB
/// and a pub/sub message is usually a few dozen bytes.
const READ_CHUNK: usize = 16 * 1024;

/// One half of a TLS connection.
#[derive(Debug)]
pub(crate) struct TlsStream {
    tcp: TcpStream,
    session: Arc<Mutex<ClientConnection>>,
    /// Decrypted bytes not yet handed to the caller (reading half only).
    plaintext: Vec<u8>,
    /// How much of `plaintext` was handed out.
    consumed: usize,
    /// Where ciphertext is read to (reading half only): allocated and
    /// zeroed on the first read, then reused, since every reply of a
    /// connection is a read (see `replies.rs`).
    ciphertext: Vec<u8>,
}

impl TlsStream {
    /// Runs the TLS handshake with `host` on a connected socket, by
    /// `deadline` (`timeout` after the connect began). A handshake refused
    /// says by which side and why; a port that speaks plain Redis says so
    /// (see `probe.rs`: when the server sends nothing for a moment, the
    /// port is asked on a connection of its own).
    pub(crate) fn handshake(
        tcp: TcpStream,
        host: &str,
        config: Arc<ClientConfig>,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<TlsStream, Failed> {
        let timed_out = || (What::TimedOut { after: timeout, stage: Stage::TlsHandshake }, None);
        let failed = |e: io::Error| failed_io(e, timeout, Stage::TlsHandshake);
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| (What::Failed, Some(io::Error::new(io::ErrorKind::InvalidInput, e))))?;
        let mut session =
            ClientConnection::new(config, name).map_err(|e| (What::Failed, Some(io::Error::other(e))))?;
        let mut socket = &tcp;
        // Until the server's first bytes: when to ask the port whether it
        // speaks plain Redis, and its first bytes once they come.
        let mut probe_at = Some(Instant::now() + probe::PLAIN_PROBE_AFTER.min(timeout / 2));
        let mut first = Vec::new();
        // One step at a time rather than rustls's `complete_io`, so that each
        // read and write is bounded by what is left of the timeout.
        while session.is_handshaking() {
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(timed_out());
            }
            let wait = match probe_at {
                Some(at) if first.is_empty() => {
                    at.saturating_duration_since(now).clamp(Duration::from_millis(1), left)
                }
                _ => left,
            };
            tcp.set_read_timeout(Some(wait)).map_err(failed)?;
            tcp.set_write_timeout(Some(left)).map_err(failed)?;
            if session.wants_write() {
                session.write_tls(&mut socket).map_err(failed)?;
                continue;
            }
            let read = session.read_tls(&mut Recorder { socket: &tcp, first: &mut first });
            match read {
                Ok(0) => return Err((What::Closed { reset: false }, None)),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    if let (Some(_), true) = (probe_at.take(), first.is_empty()) {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if let Ok(peer) = tcp.peer_addr()
                            && probe::speaks_plain_redis(peer, left)
                        {
                            return Err((What::PlainPort, None));
                        }
                    }
                    continue;
                }
                Err(e) => return Err(failed(e)),
            }
            if let Err(e) = session.process_new_packets() {
                // A plain Redis that found an end of line in the hello
                // answered it with an error reply.
                if matches!(first.first(), Some(b'-' | b'+')) {
                    return Err((What::PlainPort, None));
                }
                // Tell the server why, as far as the timeout allows.
                let _ = session.write_tls(&mut socket);
                return Err((
                    What::TlsRefused(crate::tls::refusal_words(&e)),
                    Some(io::Error::new(io::ErrorKind::InvalidData, e)),
                ));
            }
        }
        // The last flight; the server's verdict on a client certificate
        // (TLS 1.3) comes after it, and is read as the first reply.
        while session.wants_write() {
            session.write_tls(&mut socket).map_err(failed)?;
        }
        Ok(TlsStream {
            tcp,
            session: Arc::new(Mutex::new(session)),
            plaintext: Vec::new(),
            consumed: 0,
            ciphertext: Vec::new(),
        })
    }

    /// Another half of the same connection, sharing its session and socket.
    pub(crate) fn try_clone(&self) -> io::Result<TlsStream> {
        Ok(TlsStream {
            tcp: self.tcp.try_clone()?,
            session: Arc::clone(&self.session),
            plaintext: Vec::new(),
            consumed: 0,
            ciphertext: Vec::new(),
        })
    }

    pub(crate) fn socket(&self) -> &TcpStream {
        &self.tcp
    }

    /// Closes both directions: a reader blocked on the other half returns.
    pub(crate) fn shutdown(&self) {
        let _ = self.tcp.shutdown(Shutdown::Both);
    }

    /// Decrypts `ciphertext` into `self.plaintext`, and sends whatever the
    /// session must answer (alerts, key updates). True once the server has
    /// closed the TLS session (`close_notify`).
    fn decrypt(&mut self, mut ciphertext: &[u8]) -> io::Result<bool> {
        let mut session = self.session.lock();
        let mut closed = false;
        while !ciphertext.is_empty() {
            session.read_tls(&mut ciphertext)?;
            let state = session.process_new_packets();
            // Keep what was decrypted even when a later record failed. The
            // reader reports "no more for now" as `WouldBlock`, and the end
            // of the session as the end of the stream.
            match session.reader().read_to_end(&mut self.plaintext) {
                Ok(_) => closed = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = state {
                let _ = session.write_tls(&mut &self.tcp);
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
        let mut socket = &self.tcp;
        while session.wants_write() {
            session.write_tls(&mut socket)?;
        }
        Ok(closed)
    }
}

/// The socket, read during the handshake, keeping the server's first
/// bytes (to tell a plain Redis's error reply from TLS).
struct Recorder<'a> {
    socket: &'a TcpStream,
    first: &'a mut Vec<u8>,
}

impl Read for Recorder<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.socket.read(buf)?;
        if self.first.is_empty() {
            self.first.extend_from_slice(buf.get(..n.min(8)).unwrap_or_default());
        }
        Ok(n)
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.consumed < self.plaintext.len() {
                let pending = &self.plaintext[self.consumed..];
                let n = pending.len().min(buf.len());
                buf[..n].copy_from_slice(&pending[..n]);
                self.consumed += n;
                if self.consumed == self.plaintext.len() {
                    self.plaintext.clear();
                    self.consumed = 0;
                }
                return Ok(n);
            }
            // Blocks (up to the read timeout) without holding the session.
            let mut ciphertext = std::mem::take(&mut self.ciphertext);
            ciphertext.resize(READ_CHUNK, 0);
            let decrypted = match (&self.tcp).read(&mut ciphertext) {
                Ok(0) => Ok(None),
                Ok(n) => self.decrypt(ciphertext.get(..n).unwrap_or_default()).map(Some),
                Err(e) => Err(e),
            };
            self.ciphertext = ciphertext;
            match decrypted? {
                None => return Ok(0),
                Some(closed) if closed && self.plaintext.is_empty() => return Ok(0),
                Some(_) => {}
            }
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut session = self.session.lock();
        let n = session.writer().write(buf)?;
        let mut socket = &self.tcp;
        while session.wants_write() {
            session.write_tls(&mut socket)?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut session = self.session.lock();
        session.writer().flush()?;
        let mut socket = &self.tcp;
        while session.wants_write() {
            session.write_tls(&mut socket)?;
        }
        Ok(())
    }
}
