//! Just enough RESP2 for the pub/sub connection.
//!
//! The subscriber reads on one thread while waiters write SUBSCRIBE on others,
//! which redis-rs's `Connection` (one `&mut` for both directions) cannot do.
//! So the subscriber owns a plain `TcpStream` and this module encodes its few
//! commands and decodes the replies: arrays of bulk strings and integers.

use std::io::{self, BufRead, Write};

/// A decoded RESP2 value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    /// The value as text, for bulk and simple strings.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Resp::Simple(s) => Some(s),
            Resp::Bulk(Some(b)) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }
}

/// Writes one command as a RESP array of bulk strings.
pub(crate) fn write_command<W: Write>(out: &mut W, args: &[&[u8]]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
    out.write_all(&buf)?;
    out.flush()
}

const MAX_DEPTH: usize = 8;
const MAX_LEN: i64 = 512 * 1024 * 1024;

/// Reads one value. An error leaves the stream at an unknown position: the
/// caller drops the connection.
pub(crate) fn read_value<R: BufRead>(input: &mut R) -> io::Result<Resp> {
    read_at_depth(input, 0)
}

fn read_at_depth<R: BufRead>(input: &mut R, depth: usize) -> io::Result<Resp> {
    if depth > MAX_DEPTH {
        return Err(invalid("nesting too deep"));
    }
    let line = read_line(input)?;
    let (kind, rest) = line.split_at(1);
    match kind {
        "+" => Ok(Resp::Simple(rest.to_owned())),
        "-" => Ok(Resp::Error(rest.to_owned())),
        ":" => Ok(Resp::Int(parse_int(rest)?)),
        "$" => {
            let len = parse_int(rest)?;
            if len < 0 {
                return Ok(Resp::Bulk(None));
            }
            if len > MAX_LEN {
                return Err(invalid("bulk string too long"));
            }
            let len = usize::try_from(len).map_err(|_| invalid("bad length"))?;
            let mut data = vec![0; len + 2];
            input.read_exact(&mut data)?;
            if !data.ends_with(b"\r\n") {
                return Err(invalid("bulk string not terminated"));
            }
            data.truncate(len);
            Ok(Resp::Bulk(Some(data)))
        }
        "*" => {
            let len = parse_int(rest)?;
            if len < 0 {
                return Ok(Resp::Array(None));
            }
            if len > MAX_LEN {
                return Err(invalid("array too long"));
            }
            let mut items = Vec::new();
            for _ in 0..len {
                items.push(read_at_depth(input, depth + 1)?);
            }
            Ok(Resp::Array(Some(items)))
        }
        _ => Err(invalid("unknown type byte")),
    }
}

fn read_line<R: BufRead>(input: &mut R) -> io::Result<String> {
    let mut line = Vec::new();
    let n = input.read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
    }
    if !line.ends_with(b"\r\n") || line.len() < 3 {
        return Err(invalid("line not terminated"));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| invalid("line is not UTF-8"))
}

fn parse_int(s: &str) -> io::Result<i64> {
    s.parse().map_err(|_| invalid("bad integer"))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad RESP reply: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Resp> {
        read_value(&mut io::BufReader::new(bytes))
    }

    fn bulk(s: &str) -> Resp {
        Resp::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn decodes_a_pubsub_message() {
        let msg = b"*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$1\r\n0\r\n";
        assert_eq!(parse(msg).unwrap(), Resp::Array(Some(vec![bulk("message"), bulk("chan"), bulk("0")])));
    }

    #[test]
    fn decodes_scalars() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Resp::Simple("OK".into()));
        assert_eq!(parse(b"-ERR no\r\n").unwrap(), Resp::Error("ERR no".into()));
        assert_eq!(parse(b":-12\r\n").unwrap(), Resp::Int(-12));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Resp::Bulk(None));
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), bulk(""));
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b"$5\r\nab").is_err());
        assert!(parse(b"").is_err());
        assert!(parse(b":12\n").is_err());
        assert!(parse(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n").is_err());
    }

    #[test]
    fn encodes_commands() {
        let mut out = Vec::new();
        write_command(&mut out, &[b"SUBSCRIBE", b"a"]).unwrap();
        assert_eq!(out, b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n");
    }
}
