//! Two questions asked of a port on a connection of their own, when a
//! connection's setup failed in a way that a TLS mismatch explains, so
//! that the error says what is wrong instead of how it looked:
//!
//! - **Does it speak plain Redis?** A `rediss://` client's TLS hello to a
//!   plain Redis port gets no answer at all: Redis reads it as an inline
//!   command and waits for its end of line (one comes only by chance, from
//!   the hello's random bytes). So a TLS handshake that hears nothing for a
//!   moment ([`PLAIN_PROBE_AFTER`]) asks the port `PING` in plain text: a
//!   RESP answer (`+PONG`, or `-NOAUTH` from a server with a password)
//!   means the URL should be `redis://`. A TLS server that is merely slow
//!   drops the probe (a line in its log) and the handshake goes on.
//! - **Does it speak TLS?** A plain client's setup sent to a TLS port is
//!   reset without a byte in answer (the server's TLS library finds no TLS
//!   record). So a setup reset before any answer sends the port a minimal
//!   TLS 1.2 hello: any TLS record in answer (a server hello, or an alert
//!   refusing the hello's one cipher suite) means the URL should be
//!   `rediss://`. No TLS library is needed to ask, so a build without the
//!   `tls` feature says it too.
//!
//! Each probe is bounded by what is left of the connect timeout (at most
//! [`PROBE_TIMEOUT`]) and runs only on a connection that has already
//! failed, or is failing, its setup: never on a healthy one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// How long a TLS handshake waits for the server's first bytes before it
/// asks the port whether it speaks plain Redis (or half the connect
/// timeout, when that is shorter). A TLS server answers a hello within a
/// round trip: far less, on any network a lock service runs on.
#[cfg(feature = "tls")]
pub(crate) const PLAIN_PROBE_AFTER: Duration = Duration::from_millis(300);

/// The longest a probe waits for its answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// A TLS 1.2 ClientHello: record header (handshake, length 45), hello
/// header (length 41), version 1.2, 32 bytes of "random", no session, one
/// cipher suite (ECDHE-RSA-AES128-GCM-SHA256), no compression, no
/// extensions. Enough for any TLS server to answer with a record. The
/// "random" spells "keyholder asks: is this port TLS".
const TLS_HELLO: [u8; 50] = [
    0x16, 0x03, 0x01, 0x00, 0x2d, 0x01, 0x00, 0x00, 0x29, 0x03, 0x03, 0x6b, 0x65, 0x79, 0x68, 0x6f, 0x6c,
    0x64, 0x65, 0x72, 0x20, 0x61, 0x73, 0x6b, 0x73, 0x3a, 0x20, 0x69, 0x73, 0x20, 0x74, 0x68, 0x69, 0x73,
    0x20, 0x70, 0x6f, 0x72, 0x74, 0x20, 0x54, 0x4c, 0x53, 0x00, 0x00, 0x02, 0xc0, 0x2f, 0x01, 0x00,
];

/// True when the port at `addr` answers a plain `PING` in RESP within
/// `timeout`.
#[cfg(feature = "tls")]
pub(crate) fn speaks_plain_redis(addr: SocketAddr, timeout: Duration) -> bool {
    let answer = ask(addr, timeout, b"PING\r\n");
    matches!(answer.first(), Some(b'+' | b'-')) && answer.contains(&b'\n')
}

/// True when the port at `addr` answers a TLS hello with a TLS record (a
/// handshake or an alert, of TLS 1.0 to 1.3) within `timeout`.
pub(crate) fn speaks_tls(addr: SocketAddr, timeout: Duration) -> bool {
    let answer = ask(addr, timeout, &TLS_HELLO);
    matches!(answer.as_slice(), [0x15 | 0x16, 0x03, ..])
}

/// Connects to `addr`, sends `question`, and returns the first bytes of the
/// answer (none on any failure), all within `timeout` for each step.
fn ask(addr: SocketAddr, timeout: Duration, question: &[u8]) -> Vec<u8> {
    let timeout = timeout.min(PROBE_TIMEOUT).max(Duration::from_millis(1));
    let asked = || -> std::io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(question)?;
        let mut answer = [0; 16];
        let n = stream.read(&mut answer)?;
        Ok(answer.get(..n).unwrap_or_default().to_vec())
    };
    asked().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_hello_says_its_own_lengths() {
        let hello = TLS_HELLO;
        assert_eq!(usize::from(u16::from_be_bytes([hello[3], hello[4]])), hello.len() - 5);
        assert_eq!(usize::from(hello[8]), hello.len() - 9);
    }

    #[test]
    fn a_closed_port_speaks_nothing() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        #[cfg(feature = "tls")]
        assert!(!speaks_plain_redis(port, Duration::from_millis(100)));
        assert!(!speaks_tls(port, Duration::from_millis(100)));
    }
}
