//! The one RESP reader: replies and pushes off every connection keyholder
//! opens (command and pub/sub alike) into `redis::Value`s, with one read
//! buffer per connection.
//!
//! **Why not redis-rs's reader.** `redis::Parser` parses through combine's
//! buffered reader, which zero-fills up to 8 KiB of spare buffer before
//! *every* socket read. The "36% memset" once blamed on it was callgrind
//! counting `rep stosb` bytes; the reader was then measured at 0.3-0.7 µs
//! per pair (2-3%), and kept only on the benchmark's verdict (issue 23,
//! design.md ADR 45). [`ReplyReader::next`] is its one entry point: putting
//! `redis::Parser` behind it changes nothing outside this file. Here the
//! buffer is allocated and zeroed once per connection, read into directly,
//! and grown (doubling) only for a reply bigger than it; replies already
//! in it are taken without a read.
//!
//! **Parsing.** A reply is decoded only once all of it is in the buffer:
//! [`frame_len`] walks the frame without allocating (so a reply split
//! across reads costs a re-walk, not a re-decode), then [`decode`] builds
//! the value. The values are the ones redis-rs gives for RESP2: `+OK` is
//! [`Value::Okay`], other status lines [`Value::SimpleString`], a nil bulk
//! string or nil array [`Value::Nil`]; a pub/sub push is the array it is in
//! RESP2. An error reply is handed to [`redis::parse_redis_value`] (error
//! replies are rare, and this gives the very `ServerError`, code, kind and
//! text, that every `code()`/`kind()` check in keyholder was written
//! against). Anything else (a RESP3 type, a malformed length) is a parse
//! error.
//!
//! **Errors.** A read that times out leaves what arrived in the buffer: the
//! next call goes on with the same reply (a pub/sub connection waits through
//! quiet periods so). Any other error leaves the stream's framing unknown,
//! and the connection is dropped; a command connection drops itself at a
//! timeout too (see `store/connection.rs`).

use std::io::{self, Read};

use redis::{ErrorKind, RedisError, RedisResult, Value};

/// The buffer a connection starts with: many pipelined replies fit.
const INITIAL_CAPACITY: usize = 16 * 1024;
/// Redis's own limit on a bulk string (`proto-max-bulk-len`'s default).
const MAX_BULK: usize = 512 * 1024 * 1024;
/// As redis-rs: deeper nesting is taken as a corrupt stream.
const MAX_DEPTH: usize = 100;

/// A connection's read buffer: `buf[start..end]` is read but not yet taken.
pub(crate) struct ReplyReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for ReplyReader {
    fn default() -> Self {
        ReplyReader { buf: vec![0; INITIAL_CAPACITY], start: 0, end: 0 }
    }
}

impl ReplyReader {
    /// The next reply, reading from `input` until all of it has arrived.
    /// Errors: the I/O error of a read (a timeout, after which the reply
    /// can still be read, included), an end of stream (`UnexpectedEof`, as
    /// redis-rs reports a closed connection: `is_connection_dropped`), or a
    /// parse error. After any but a timeout, the stream's framing is
    /// unknown: the caller drops the connection.
    pub(crate) fn next<R: Read>(&mut self, input: &mut R) -> RedisResult<Value> {
        loop {
            let pending = self.buf.get(self.start..self.end).unwrap_or_default();
            if let Some(len) = frame_len(pending, 0)? {
                let frame = pending.get(..len).ok_or_else(|| protocol("frame past the buffer"))?;
                let (value, _) = decode(frame, 0)?;
                self.start += len;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                return Ok(value);
            }
            self.fill(input)?;
        }
    }

    /// Reads more of the stream: into the free end of the buffer, after
    /// moving what is pending to its front, or doubling it when a reply
    /// fills it all.
    fn fill<R: Read>(&mut self, input: &mut R) -> RedisResult<()> {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let grown = self.buf.len().saturating_mul(2).max(INITIAL_CAPACITY);
                self.buf.resize(grown, 0);
            }
        }
        let free = self.buf.get_mut(self.end..).unwrap_or_default();
        let read = loop {
            match input.read(free) {
                Ok(read) => break read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        };
        if read == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "redis closed the connection").into());
        }
        self.end += read;
        Ok(())
    }
}

/// The length of the complete frame at the front of `buf`, `None` when only
/// part of it is there yet. Checks the framing (type bytes, lengths,
/// terminators), not the contents.
fn frame_len(buf: &[u8], depth: usize) -> RedisResult<Option<usize>> {
    let Some((kind, line, after)) = line(buf)? else {
        return Ok(None);
    };
    match kind {
        b'+' | b'-' => Ok(Some(after)),
        b':' => integer(line).map(|_| Some(after)),
        b'$' => match bulk_len(line)? {
            None => Ok(Some(after)),
            Some(len) => {
                let total = after.saturating_add(len).saturating_add(2);
                match buf.get(total - 2..total) {
                    None => Ok(None),
                    Some(b"\r\n") => Ok(Some(total)),
                    Some(_) => Err(protocol("a bulk string longer than its length")),
                }
            }
        },
        b'*' => {
            if depth >= MAX_DEPTH {
                return Err(protocol("arrays nested too deep"));
            }
            let Some(items) = array_len(line)? else {
                return Ok(Some(after));
            };
            let mut at = after;
            for _ in 0..items {
                let rest = buf.get(at..).unwrap_or_default();
                match frame_len(rest, depth + 1)? {
                    Some(len) => at += len,
                    None => return Ok(None),
                }
            }
            Ok(Some(at))
        }
        other => Err(unknown_type(other)),
    }
}

/// The value of the complete frame at the front of `buf` (see
/// [`frame_len`]), and the frame's length.
fn decode(buf: &[u8], depth: usize) -> RedisResult<(Value, usize)> {
    let (kind, line, after) = line(buf)?.ok_or_else(|| protocol("a reply cut short"))?;
    let value = match kind {
        b'+' => match std::str::from_utf8(line).map_err(|_| protocol("a status line that is not UTF-8"))? {
            "OK" => Value::Okay,
            status => Value::SimpleString(status.to_owned()),
        },
        b'-' => server_error(buf.get(..after).unwrap_or_default())?,
        b':' => Value::Int(integer(line)?),
        b'$' => match bulk_len(line)? {
            None => Value::Nil,
            Some(len) => {
                let data =
                    buf.get(after..after.saturating_add(len)).ok_or_else(|| protocol("a reply cut short"))?;
                return Ok((Value::BulkString(data.to_vec()), after + len + 2));
            }
        },
        b'*' => match array_len(line)? {
            None => Value::Nil,
            Some(items) => {
                if depth >= MAX_DEPTH {
                    return Err(protocol("arrays nested too deep"));
                }
                // Each item takes at least 3 bytes: no capacity beyond the frame.
                let mut values = Vec::with_capacity(items.min(buf.len() / 3));
                let mut at = after;
                for _ in 0..items {
                    let (value, len) = decode(buf.get(at..).unwrap_or_default(), depth + 1)?;
                    values.push(value);
                    at += len;
                }
                return Ok((Value::Array(values), at));
            }
        },
        other => return Err(unknown_type(other)),
    };
    Ok((value, after))
}

/// The type byte, the rest of the first line, and where the line ends (past
/// its CRLF); `None` when the line is not complete yet.
fn line(buf: &[u8]) -> RedisResult<Option<(u8, &[u8], usize)>> {
    let Some(newline) = buf.iter().position(|&b| b == b'\n') else {
        return Ok(None);
    };
    match buf.get(..newline) {
        Some([kind, line @ .., b'\r']) => Ok(Some((*kind, line, newline + 1))),
        _ => Err(protocol("a line not ended by CRLF")),
    }
}

fn integer(line: &[u8]) -> RedisResult<i64> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| protocol("an integer that does not parse"))
}

/// A bulk string's length; `None` for the nil bulk string.
fn bulk_len(line: &[u8]) -> RedisResult<Option<usize>> {
    match integer(line)? {
        len if len < 0 => Ok(None),
        len => match usize::try_from(len) {
            Ok(len) if len <= MAX_BULK => Ok(Some(len)),
            _ => Err(protocol("a bulk string longer than Redis allows")),
        },
    }
}

/// An array's length; `None` for the nil array.
fn array_len(line: &[u8]) -> RedisResult<Option<usize>> {
    match integer(line)? {
        len if len < 0 => Ok(None),
        len => usize::try_from(len).map(Some).map_err(|_| protocol("an array too long")),
    }
}

/// redis-rs's own value for an error reply (`frame` is the whole line).
fn server_error(frame: &[u8]) -> RedisResult<Value> {
    match redis::parse_redis_value(frame)? {
        error @ Value::ServerError(_) => Ok(error),
        _ => Err(protocol("an error reply that redis-rs does not read as one")),
    }
}

fn unknown_type(kind: u8) -> RedisError {
    RedisError::from((
        ErrorKind::Parse,
        "bad RESP2 reply",
        format!("unexpected type byte {:?} (keyholder speaks RESP2)", char::from(kind)),
    ))
}

fn protocol(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::Parse, "bad RESP2 reply", what.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out `data` in reads of at most `chunk` bytes, then EOF.
    struct Chunks<'a> {
        data: &'a [u8],
        chunk: usize,
        reads: usize,
    }

    impl Read for Chunks<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.data.len().min(self.chunk).min(buf.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            self.reads += 1;
            Ok(n)
        }
    }

    fn all(data: &[u8], chunk: usize) -> Vec<RedisResult<Value>> {
        let mut input = Chunks { data, chunk, reads: 0 };
        let mut replies = ReplyReader::default();
        let mut out = Vec::new();
        loop {
            let next = replies.next(&mut input);
            let eof = matches!(&next, Err(e) if e.is_connection_dropped());
            out.push(next);
            if eof || out.len() > 100 {
                return out;
            }
        }
    }

    fn values(data: &[u8], chunk: usize) -> Vec<Value> {
        let mut out = all(data, chunk);
        assert!(out.pop().is_some_and(|last| last.is_err()), "ends at EOF");
        out.into_iter().map(|v| v.unwrap()).collect()
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    const MIXED: &[u8] = b"+OK\r\n+QUEUED\r\n:-42\r\n$5\r\nhello\r\n$0\r\n\r\n$-1\r\n*-1\r\n*0\r\n\
        *3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n+x\r\n";

    fn mixed() -> Vec<Value> {
        vec![
            Value::Okay,
            Value::SimpleString("QUEUED".into()),
            Value::Int(-42),
            bulk("hello"),
            bulk(""),
            Value::Nil,
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![
                Value::Int(1),
                Value::Array(vec![bulk("a"), Value::Nil]),
                Value::SimpleString("x".into()),
            ]),
        ]
    }

    #[test]
    fn decodes_every_resp2_type_as_redis_rs_does() {
        assert_eq!(values(MIXED, usize::MAX), mixed());
        for frame in [&b"+OK\r\n"[..], b":7\r\n", b"$3\r\nabc\r\n", b"*2\r\n$-1\r\n:0\r\n", b"*-1\r\n"] {
            assert_eq!(values(frame, usize::MAX), vec![redis::parse_redis_value(frame).unwrap()]);
        }
    }

    #[test]
    fn a_reply_split_anywhere_across_reads_is_the_same() {
        for chunk in 1..=MIXED.len() {
            assert_eq!(values(MIXED, chunk), mixed(), "reads of {chunk} bytes");
        }
    }

    #[test]
    fn error_replies_are_redis_rs_server_errors() {
        let data = b"-NOSCRIPT No matching script. Please use EVAL.\r\n-READONLY You can't write\r\n\
            -ERR DB index is out of range\r\n-BUSYKEY exists\r\n*2\r\n:1\r\n-WRONGTYPE Operation\r\n";
        let got = values(data, 7);
        let code = |v: &Value| match v {
            Value::ServerError(e) => e.code().to_owned(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            got.iter().take(4).map(code).collect::<Vec<_>>(),
            ["NOSCRIPT", "READONLY", "ERR", "BUSYKEY"]
        );
        let Value::ServerError(noscript) = &got[0] else { panic!() };
        assert_eq!(noscript.kind(), Some(redis::ServerErrorKind::NoScript));
        let as_error = RedisError::from(noscript.clone());
        assert_eq!(as_error.kind(), ErrorKind::Server(redis::ServerErrorKind::NoScript));
        let Value::ServerError(out_of_range) = &got[2] else { panic!() };
        assert!(RedisError::from(out_of_range.clone()).to_string().contains("DB index is out of range"));
        let Value::Array(items) = &got[4] else { panic!("{:?}", got[4]) };
        assert_eq!(code(&items[1]), "WRONGTYPE");
        assert_eq!(
            got[0],
            redis::parse_redis_value(b"-NOSCRIPT No matching script. Please use EVAL.\r\n").unwrap()
        );
    }

    #[test]
    fn a_bulk_string_bigger_than_the_buffer_grows_it() {
        let big = vec![b'x'; INITIAL_CAPACITY * 5 + 3];
        let mut data = format!("${}\r\n", big.len()).into_bytes();
        data.extend_from_slice(&big);
        data.extend_from_slice(b"\r\n:1\r\n");
        for chunk in [1000, 4096, usize::MAX] {
            assert_eq!(values(&data, chunk), vec![Value::BulkString(big.clone()), Value::Int(1)]);
        }
    }

    #[test]
    fn pipelined_replies_already_read_take_no_read() {
        let mut input = Chunks { data: b":1\r\n:2\r\n:3\r\n", chunk: usize::MAX, reads: 0 };
        let mut replies = ReplyReader::default();
        for expected in 1..=3 {
            assert_eq!(replies.next(&mut input).unwrap(), Value::Int(expected));
        }
        assert_eq!(input.reads, 1);
    }

    #[test]
    fn many_small_replies_reuse_the_buffer() {
        let data: Vec<u8> = (0..5000).flat_map(|i| format!(":{i}\r\n").into_bytes()).collect();
        let mut input = Chunks { data: &data, chunk: 3000, reads: 0 };
        let mut replies = ReplyReader::default();
        for expected in 0..5000 {
            assert_eq!(replies.next(&mut input).unwrap(), Value::Int(expected));
        }
        assert_eq!(replies.buf.len(), INITIAL_CAPACITY, "never grown");
    }

    #[test]
    fn a_closed_connection_is_a_dropped_one() {
        let out = all(b"$5\r\nhel", usize::MAX);
        let e = out[0].as_ref().unwrap_err();
        assert!(e.is_connection_dropped() && e.is_io_error() && !e.is_timeout(), "{e:?}");
    }

    #[test]
    fn garbage_is_a_parse_error() {
        for data in [
            &b"?1\r\n"[..],
            b":x\r\n",
            b"+OK\n",
            b"$3\r\nabcd\r\n",
            b"$99999999999\r\n",
            b"%1\r\n+a\r\n+b\r\n",
            b"*1\r\n:z\r\n",
        ] {
            let out = all(data, usize::MAX);
            let e = out[0].as_ref().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Parse, "{data:?}: {e:?}");
        }
        let deep: Vec<u8> = b"*1\r\n".repeat(MAX_DEPTH + 1).into_iter().chain(*b":1\r\n").collect();
        assert_eq!(all(&deep, usize::MAX)[0].as_ref().unwrap_err().kind(), ErrorKind::Parse);
    }

    #[test]
    fn a_timeout_keeps_what_arrived_and_the_next_call_goes_on() {
        /// Hands out `parts` one per read, a timeout between each two.
        struct Stalling<'a> {
            parts: Vec<&'a [u8]>,
            stall: bool,
        }
        impl Read for Stalling<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if std::mem::take(&mut self.stall) {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                self.stall = true;
                let Some(part) = self.parts.first().copied() else { return Ok(0) };
                self.parts.remove(0);
                buf[..part.len()].copy_from_slice(part);
                Ok(part.len())
            }
        }
        let mut input = Stalling {
            parts: vec![b"*3\r\n$7\r\nmess", b"age\r\n$1\r\nc\r\n$1", b"\r\n0\r\n"],
            stall: false,
        };
        let mut replies = ReplyReader::default();
        let mut timeouts = 0;
        let value = loop {
            match replies.next(&mut input) {
                Ok(value) => break value,
                Err(e) if e.is_timeout() => timeouts += 1,
                Err(e) => panic!("{e:?}"),
            }
        };
        assert_eq!(value, Value::Array(vec![bulk("message"), bulk("c"), bulk("0")]));
        assert_eq!(timeouts, 2);
        let e = replies.next(&mut input).unwrap_err();
        assert!(e.is_timeout(), "{e:?}");
        let e = replies.next(&mut input).unwrap_err();
        assert!(e.is_connection_dropped() && e.is_io_error(), "{e:?}");
    }

    /// A small seeded generator (splitmix64): the property tests below are
    /// the same on every run, and need no crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// A random RESP2 value, at most `depth` arrays deep.
    fn arbitrary(rng: &mut Rng, depth: usize) -> Value {
        let text = |rng: &mut Rng| -> String {
            let len = rng.below(12);
            (0..len).map(|_| char::from(b'a' + rng.below(26) as u8)).collect()
        };
        match rng.below(if depth == 0 { 6 } else { 8 }) {
            0 => Value::Okay,
            1 => Value::SimpleString(format!("S{}", text(rng))),
            2 => Value::Int(rng.next() as i64 >> rng.below(64)),
            3 => Value::BulkString((0..rng.below(40)).map(|_| rng.next() as u8).collect()),
            4 => Value::Nil,
            5 => redis::parse_redis_value(format!("-ERR {}\r\n", text(rng)).as_bytes()).unwrap(),
            _ => Value::Array((0..rng.below(5)).map(|_| arbitrary(rng, depth - 1)).collect()),
        }
    }

    /// `value` in RESP2, as Redis writes it.
    fn encode(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Okay => out.extend_from_slice(b"+OK\r\n"),
            Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Value::Int(i) => out.extend_from_slice(format!(":{i}\r\n").as_bytes()),
            Value::BulkString(data) => {
                out.extend_from_slice(format!("${}\r\n", data.len()).as_bytes());
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            Value::Nil => out.extend_from_slice(b"$-1\r\n"),
            Value::ServerError(e) => {
                out.extend_from_slice(format!("-{} {}\r\n", e.code(), e.details().unwrap_or("")).as_bytes())
            }
            Value::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                items.iter().for_each(|item| encode(item, out));
            }
            other => panic!("not RESP2: {other:?}"),
        }
    }

    /// Reads everything `data` holds when it arrives in the pieces `cuts`
    /// makes, a timeout between each two (as a slow network does).
    fn read_cut(data: &[u8], cuts: &[usize]) -> (Vec<Value>, RedisError) {
        struct Cut<'a> {
            data: &'a [u8],
            cuts: Vec<usize>,
            at: usize,
            stall: bool,
        }
        impl Read for Cut<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if std::mem::take(&mut self.stall) {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                self.stall = true;
                let until = self.cuts.iter().copied().find(|&c| c > self.at).unwrap_or(self.data.len());
                let n = (until - self.at).min(buf.len());
                buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
                self.at += n;
                Ok(n)
            }
        }
        let mut input = Cut { data, cuts: cuts.to_vec(), at: 0, stall: false };
        let mut replies = ReplyReader::default();
        let mut values = Vec::new();
        // Every call either returns a value, or fails: bounded by the bytes.
        for _ in 0..=4 * (data.len() + cuts.len() + 2) {
            match replies.next(&mut input) {
                Ok(value) => values.push(value),
                Err(e) if e.is_timeout() => {}
                Err(e) => return (values, e),
            }
        }
        panic!("the reader did not come to an end of {data:?}");
    }

    #[test]
    fn every_split_of_a_stream_of_replies_reads_the_same() {
        let mut data = MIXED.to_vec();
        data.extend_from_slice(b"-ERR x\r\n*2\r\n$7\r\nmessage\r\n*1\r\n$0\r\n\r\n");
        let (whole, end) = read_cut(&data, &[]);
        assert!(end.is_connection_dropped(), "{end:?}");
        for first in 0..=data.len() {
            for second in first..=data.len() {
                let (values, end) = read_cut(&data, &[first, second]);
                assert_eq!(values, whole, "cut at {first} and {second}");
                assert!(end.is_connection_dropped(), "{end:?}");
            }
        }
    }

    #[test]
    fn random_replies_cut_at_random_read_as_redis_rs_reads_them() {
        let mut rng = Rng(23);
        for _ in 0..500 {
            let values: Vec<Value> = (0..1 + rng.below(6)).map(|_| arbitrary(&mut rng, 4)).collect();
            let mut data = Vec::new();
            for value in &values {
                let start = data.len();
                encode(value, &mut data);
                assert_eq!(&redis::parse_redis_value(&data[start..]).unwrap(), value, "the oracle");
            }
            let mut cuts: Vec<usize> = (0..rng.below(8)).map(|_| rng.below(data.len() + 1)).collect();
            cuts.sort_unstable();
            let (read, end) = read_cut(&data, &cuts);
            assert_eq!(read, values, "{data:?} cut at {cuts:?}");
            assert!(end.is_connection_dropped(), "{end:?}");
        }
    }

    #[test]
    fn random_damage_is_an_error_or_other_values_never_a_panic_or_a_hang() {
        let mut rng = Rng(45);
        let alphabet = b"+-:$*\r\n0123456789-x%";
        for _ in 0..2000 {
            let values: Vec<Value> = (0..1 + rng.below(4)).map(|_| arbitrary(&mut rng, 3)).collect();
            let mut data = Vec::new();
            values.iter().for_each(|value| encode(value, &mut data));
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(data.len());
                match rng.below(3) {
                    0 => data[at] = alphabet[rng.below(alphabet.len())],
                    1 => data.insert(at, alphabet[rng.below(alphabet.len())]),
                    _ => {
                        data.remove(at);
                    }
                }
            }
            let mut cuts: Vec<usize> = (0..rng.below(4)).map(|_| rng.below(data.len() + 1)).collect();
            cuts.sort_unstable();
            // What a damaged stream gives is whatever it frames; what it may
            // not do is panic, loop, or end other than in an error.
            let (read, end) = read_cut(&data, &cuts);
            assert!(read.len() <= data.len());
            assert!(end.kind() == ErrorKind::Parse || end.is_connection_dropped(), "{end:?}");
        }
    }
}
