//! The one RESP reader: replies and pushes off every connection keyholder
//! opens (command and pub/sub alike) into `redis::Value`s, through
//! redis-rs's own parser (`redis::Parser`), one per connection.
//!
//! **Why redis-rs's.** The command connections had a reader of keyholder's
//! own, for a "36% memset" that turned out to be callgrind counting the
//! `rep stosb` bytes of combine's zero-fill (up to 8 KiB before every socket
//! read); measured in time, on W1 and W7 in the same minutes, the two
//! readers did not differ above noise (issue 23, docs/reference/decisions.md, ADR 45). So the
//! values, the error replies (`ServerError`, with the code and kind every
//! `code()`/`kind()` check in keyholder was written against) and the parse
//! errors are redis-rs's, and keyholder keeps no parser of its own.
//!
//! **One parser per connection, kept across calls.** The parser buffers
//! what it read past the reply it returns: pipelined replies already read
//! are taken without a read, so a connection must keep its [`ReplyReader`]
//! for as long as it lives, and never read its socket otherwise.
//!
//! **Errors.** A read that times out keeps what arrived (the parser's
//! partial state survives the error): the next call goes on with the same
//! reply, which a pub/sub connection relies on to wait through quiet
//! periods. The end of the stream, inside a reply or between two, is an
//! `UnexpectedEof` I/O error (`is_io_error`, `is_connection_dropped`). Any
//! error but a timeout leaves the stream's framing unknown, and the
//! connection is dropped; a command connection drops itself at a timeout
//! too (see `store/connection.rs`).

use std::io::{self, Read};

use redis::{RedisResult, Value};

/// A connection's reader: redis-rs's parser and what it buffered.
#[derive(Default)]
pub(crate) struct ReplyReader {
    parser: redis::Parser,
}

impl ReplyReader {
    /// The next reply (or push), reading from `input` until all of it has
    /// arrived. Errors: the I/O error of a read (a timeout, after which the
    /// reply can still be read, included), the end of the stream, or a
    /// parse error.
    pub(crate) fn next<R: Read>(&mut self, input: &mut R) -> RedisResult<Value> {
        self.parser.parse_value(Uninterrupted(input))
    }
}

/// Reads again when a read is interrupted by a signal (`EINTR`), which
/// redis-rs's parser would take for a failure.
struct Uninterrupted<'a, R>(&'a mut R);

impl<R: Read> Read for Uninterrupted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.0.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                outcome => return outcome,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError};

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
    fn pipelined_replies_already_read_take_no_read() {
        let mut input = Chunks { data: b":1\r\n:2\r\n:3\r\n", chunk: usize::MAX, reads: 0 };
        let mut replies = ReplyReader::default();
        for expected in 1..=3 {
            assert_eq!(replies.next(&mut input).unwrap(), Value::Int(expected));
        }
        assert_eq!(input.reads, 1);
    }

    #[test]
    fn a_closed_connection_is_a_dropped_one() {
        for data in [&b"$5\r\nhel"[..], b""] {
            let e =
                ReplyReader::default().next(&mut Chunks { data, chunk: usize::MAX, reads: 0 }).unwrap_err();
            assert!(e.is_connection_dropped() && e.is_io_error() && !e.is_timeout(), "{e:?}");
        }
    }

    #[test]
    fn an_interrupted_read_is_read_again() {
        /// Interrupted before each read that hands out data.
        struct Interrupting<'a>(&'a [u8], bool);
        impl Read for Interrupting<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.1 = !self.1;
                if self.1 {
                    return Err(io::ErrorKind::Interrupted.into());
                }
                let n = self.0.len().min(buf.len()).min(3);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut input = Interrupting(b"$5\r\nhello\r\n", false);
        assert_eq!(ReplyReader::default().next(&mut input).unwrap(), bulk("hello"));
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
        data.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\n0\r\n");
        let (whole, end) = read_cut(&data, &[]);
        let mut expected = mixed();
        expected.push(Value::Array(vec![bulk("message"), bulk("c"), bulk("0")]));
        assert_eq!(whole, expected);
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
