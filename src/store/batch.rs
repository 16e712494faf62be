//! Several callers' commands as one write, and the replies back to each.
//!
//! Threads share a few connections by pipelining (see `store/lane.rs`):
//! whoever leads a connection writes every queued caller's commands at
//! once and reads the replies in order. This module is the pure part of
//! that: what one caller sends (a [`Request`]), how a batch of them is laid
//! out on the wire, and how the replies read back, or the failure that cut
//! them short, are dealt out. An error reply belongs to its own command
//! only; a transport failure belongs to every request it left without all
//! its replies.
//!
//! **Replica acknowledgement.** A request that writes a lock may ask for
//! the replicas' acknowledgement. The batch then ends with one `WAIT` (or
//! `WAITAOF`, when the client waits for the append-only files): it waits
//! for every earlier write of the connection, so one `WAIT` answers for the
//! whole batch, and a batch never waits for the replicas more than once
//! (several `WAIT`s would run one after another, each up to its timeout).
//! A `WAITAOF` the server refuses (a server without it, appendonly turned
//! off since the client was built) is an acknowledgement not given, and
//! the refusal is logged.

use redis::{RedisError, Value};

/// A replica acknowledgement to wait for, as Redisson's `syncSlaves` and
/// `syncAOF`: `WAIT replicas timeout`, or `WAITAOF local replicas timeout`,
/// behind the commands that asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
    /// `WAITAOF`: the write fsynced to the append-only file of `replicas`
    /// replicas, and of the primary itself too when `local`. `None`:
    /// `WAIT`, the write in the replicas' memory.
    pub(crate) aof: Option<Aof>,
}

/// What a `WAITAOF` asks of the primary itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Aof {
    /// The primary's own fsync too (`numlocal` 1).
    pub(crate) local: bool,
}

impl Wait {
    /// The command that waits: `WAIT replicas timeout` or `WAITAOF local
    /// replicas timeout`.
    fn command(&self) -> redis::Cmd {
        match self.aof {
            None => redis::cmd("WAIT").arg(self.replicas).arg(self.timeout_ms).clone(),
            Some(Aof { local }) => {
                redis::cmd("WAITAOF").arg(u8::from(local)).arg(self.replicas).arg(self.timeout_ms).clone()
            }
        }
    }

    /// A `WAITAOF` that waits for no replica, to learn before any lock is
    /// taken whether the server has `WAITAOF` and, with `local`, an
    /// append-only file (it answers at once on a connection that wrote
    /// nothing); `None` for `WAIT`, which every supported server has.
    pub(crate) fn probe(&self) -> Option<redis::Cmd> {
        self.aof.map(|_| Wait { replicas: 0, ..*self }.command())
    }

    /// Whether `reply`, the reply to [`command`](Wait::command), counts
    /// enough acknowledgements. An error reply (a server without
    /// `WAITAOF`, or with appendonly turned off) counts none, and is
    /// logged: it is a server that does not do what the client was built
    /// for, not a slow replica.
    fn met_by(&self, reply: &Value) -> bool {
        let at_least = |value: &Value, wanted: u32| match value {
            Value::Int(n) => u64::try_from(*n).unwrap_or(0) >= u64::from(wanted),
            _ => false,
        };
        match (self.aof, reply) {
            (None, reply) => at_least(reply, self.replicas),
            (Some(Aof { local }), Value::Array(counts)) if counts.len() == 2 => {
                at_least(&counts[0], u32::from(local)) && at_least(&counts[1], self.replicas)
            }
            (_, Value::ServerError(e)) => {
                log::warn!(
                    "keyholder: the server refused the replica acknowledgement (not acknowledged): {e}"
                );
                false
            }
            _ => false,
        }
    }
}

/// One caller's commands, packed for the wire.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    packed: Vec<u8>,
    commands: usize,
    acked: bool,
}

impl Request {
    /// One command.
    pub(crate) fn command(cmd: &redis::Cmd) -> Request {
        Request { packed: cmd.get_packed_command(), commands: 1, acked: false }
    }

    /// A script call, `verb body numkeys KEYS... ARGV...` (`EVALSHA` or
    /// `EVAL`), from keys and arguments packed into RESP as they were
    /// given: no `redis::Cmd` and no allocation per argument on the calls
    /// every lock operation makes.
    pub(crate) fn script(verb: &str, body: &str, keys: &Bulks, args: &Bulks) -> Request {
        let mut packed =
            Vec::with_capacity(verb.len() + body.len() + keys.bytes.len() + args.bytes.len() + 48);
        packed.push(b'*');
        push_decimal(&mut packed, 3 + keys.count + args.count);
        packed.extend_from_slice(b"\r\n");
        push_bulk(&mut packed, verb.as_bytes());
        push_bulk(&mut packed, body.as_bytes());
        push_bulk(&mut packed, itoa::Buffer::new().format(keys.count).as_bytes());
        packed.extend_from_slice(&keys.bytes);
        packed.extend_from_slice(&args.bytes);
        Request { packed, commands: 1, acked: false }
    }

    /// The commands as they go on the wire, and how many replies they get:
    /// for a connection of its own (see `pubsub/tracking.rs`).
    pub(crate) fn into_packed(self) -> (Vec<u8>, usize) {
        (self.packed, self.commands)
    }

    /// Several commands, replied to in order.
    pub(crate) fn commands(cmds: &[&redis::Cmd]) -> Request {
        let mut packed = Vec::new();
        for cmd in cmds {
            cmd.write_packed_command(&mut packed);
        }
        Request { packed, commands: cmds.len(), acked: false }
    }

    /// The same commands behind an `ASKING` (Redis Cluster: a slot being
    /// migrated, and the key already moved), whose reply comes first.
    pub(crate) fn asking(self) -> Request {
        let mut packed = b"*1\r\n$6\r\nASKING\r\n".to_vec();
        packed.extend_from_slice(&self.packed);
        Request { packed, commands: self.commands + 1, acked: self.acked }
    }

    /// Asks for the replicas' acknowledgement of what these commands write
    /// (when the client waits for replicas at all).
    pub(crate) fn acknowledged(mut self) -> Request {
        self.acked = true;
        self
    }
}

/// Arguments packed as RESP bulk strings as they are written, for a
/// script call assembled from them ([`Request::script`]): one buffer, not
/// an allocation per argument.
#[derive(Debug, Default)]
pub(crate) struct Bulks {
    bytes: Vec<u8>,
    count: usize,
}

impl Bulks {
    /// Room for `bytes` bytes of packed arguments before the first growth.
    pub(crate) fn with_capacity(bytes: usize) -> Bulks {
        Bulks { bytes: Vec::with_capacity(bytes), count: 0 }
    }
}

impl Bulks {
    /// Packs `parts`, joined by single spaces, as one bulk string.
    pub(crate) fn write_joined(&mut self, parts: &[&str]) {
        let len = parts.iter().map(|p| p.len()).sum::<usize>() + parts.len().saturating_sub(1);
        self.bytes.push(b'$');
        push_decimal(&mut self.bytes, len);
        self.bytes.extend_from_slice(b"\r\n");
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                self.bytes.push(b' ');
            }
            self.bytes.extend_from_slice(part.as_bytes());
        }
        self.bytes.extend_from_slice(b"\r\n");
        self.count += 1;
    }
}

impl redis::RedisWrite for Bulks {
    fn write_arg(&mut self, arg: &[u8]) {
        push_bulk(&mut self.bytes, arg);
        self.count += 1;
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        BulkWriter { bulks: self, scratch: Vec::new() }
    }
}

/// An argument written piecewise: packed when done with.
struct BulkWriter<'a> {
    bulks: &'a mut Bulks,
    scratch: Vec<u8>,
}

impl std::io::Write for BulkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.scratch.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for BulkWriter<'_> {
    fn drop(&mut self) {
        let scratch = std::mem::take(&mut self.scratch);
        redis::RedisWrite::write_arg(self.bulks, &scratch);
    }
}

/// Appends `part` as a RESP bulk string.
fn push_bulk(buf: &mut Vec<u8>, part: &[u8]) {
    buf.push(b'$');
    push_decimal(buf, part.len());
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(part);
    buf.extend_from_slice(b"\r\n");
}

/// Appends `n` in decimal ASCII.
fn push_decimal(buf: &mut Vec<u8>, n: usize) {
    // Argument lengths and counts: nearly always one or two digits.
    match u8::try_from(n) {
        Ok(n) if n < 10 => buf.push(b'0' + n),
        Ok(n) if n < 100 => buf.extend_from_slice(&[b'0' + n / 10, b'0' + n % 10]),
        _ => buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
    }
}

/// Why a request got no replies: `failure`, or a connection that stopped
/// before every reply was read.
fn cut_short(failure: Option<&RedisError>) -> RedisError {
    failure.cloned().unwrap_or_else(|| {
        RedisError::from((redis::ErrorKind::Io, "the connection stopped before every reply was read"))
    })
}

/// What a request gets back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replies {
    /// One reply per command, error replies included, in order.
    pub(crate) values: Vec<Value>,
    /// For a request that asked for it, whether enough replicas
    /// acknowledged; `None` when none were asked for.
    pub(crate) acked: Option<bool>,
}

/// The requests of one write, laid out on the wire.
#[derive(Debug)]
pub(crate) struct Batch {
    bytes: Vec<u8>,
    /// Each request's number of replies and whether it asked for the
    /// acknowledgement.
    shape: Vec<(usize, bool)>,
    /// The `WAIT` at the end, when a request asked for it.
    wait: Option<Wait>,
}

impl Batch {
    /// Lays `requests` out in order, with one `WAIT` behind them when one
    /// asked for the acknowledgement and the client waits for replicas.
    /// The requests' bytes move into the batch (a batch of one is written
    /// without a copy).
    pub(crate) fn new<'r>(requests: impl IntoIterator<Item = &'r mut Request>, wait: Option<Wait>) -> Batch {
        let mut bytes = Vec::new();
        let mut shape = Vec::new();
        for request in requests {
            let packed = std::mem::take(&mut request.packed);
            if bytes.is_empty() {
                bytes = packed;
            } else {
                bytes.extend_from_slice(&packed);
            }
            shape.push((request.commands, request.acked && wait.is_some()));
        }
        let wait = wait.filter(|_| shape.iter().any(|&(_, acked)| acked));
        if let Some(wait) = wait {
            wait.command().write_packed_command(&mut bytes);
        }
        Batch { bytes, shape, wait }
    }

    /// What to write.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// How many replies to read.
    pub(crate) fn replies(&self) -> usize {
        self.shape.iter().map(|&(n, _)| n).sum::<usize>() + usize::from(self.wait.is_some())
    }

    /// [`split`](Batch::split) for a batch of one request: its outcome,
    /// without a vector of one.
    pub(crate) fn single(
        self,
        mut values: Vec<Value>,
        failure: Option<&RedisError>,
    ) -> Result<Replies, RedisError> {
        let read = values.len();
        let [(n, wants_ack)] = self.shape[..] else {
            return self.split(values, failure).into_iter().next().unwrap_or_else(|| Err(cut_short(failure)));
        };
        let acked = match (self.wait, values.last()) {
            (Some(wait), Some(reply)) if read == n + 1 => Some(wait.met_by(reply)),
            _ => None,
        };
        if read < n || (wants_ack && acked.is_none()) {
            return Err(cut_short(failure));
        }
        values.truncate(n);
        Ok(Replies { values, acked: acked.filter(|_| wants_ack) })
    }

    /// Deals out the replies read, in order; `failure` is what stopped the
    /// reading before every reply was in. A request gets its replies if all
    /// of them (and, when it asked, the `WAIT`'s) were read, and the
    /// failure otherwise.
    pub(crate) fn split(
        self,
        values: Vec<Value>,
        failure: Option<&RedisError>,
    ) -> Vec<Result<Replies, RedisError>> {
        let read = values.len();
        let acked = match (self.wait, values.last()) {
            (Some(wait), Some(reply)) if read == self.replies() => Some(wait.met_by(reply)),
            _ => None,
        };
        let cut = || cut_short(failure);
        let mut values = values.into_iter();
        let mut end = 0;
        self.shape
            .iter()
            .map(|&(n, wants_ack)| {
                let own: Vec<Value> = values.by_ref().take(n).collect();
                end += n;
                let complete = end <= read && (!wants_ack || acked.is_some());
                if complete {
                    Ok(Replies { values: own, acked: acked.filter(|_| wants_ack) })
                } else {
                    Err(cut())
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const WAIT: Wait = Wait { replicas: 1, timeout_ms: 50, aof: None };
    const WAITAOF: Wait = Wait { replicas: 1, timeout_ms: 50, aof: Some(Aof { local: true }) };

    fn get(key: &str) -> Request {
        Request::command(redis::cmd("GET").arg(key))
    }

    fn timeout() -> RedisError {
        RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))
    }

    #[test]
    fn a_batch_is_its_requests_back_to_back() {
        let (mut a, mut b) = (get("a"), get("b"));
        let batch = Batch::new([&mut a, &mut b], None);
        let expected: Vec<u8> = [redis::cmd("GET").arg("a"), redis::cmd("GET").arg("b")]
            .iter()
            .flat_map(|c| c.get_packed_command())
            .collect();
        assert_eq!(batch.bytes(), expected.as_slice());
        assert_eq!(batch.replies(), 2);
    }

    #[test]
    fn asking_goes_in_front_and_has_a_reply_of_its_own() {
        let mut asked = get("a").acknowledged().asking();
        let batch = Batch::new([&mut asked], Some(WAIT));
        let mut expected = redis::cmd("ASKING").get_packed_command();
        expected.extend(redis::cmd("GET").arg("a").get_packed_command());
        assert!(batch.bytes().starts_with(&expected));
        assert_eq!(batch.replies(), 3, "ASKING, GET and the WAIT");
    }

    #[test]
    fn a_script_call_packed_from_bulks_is_what_redis_rs_packs() {
        use redis::ToRedisArgs;
        let (mut keys, mut args) = (Bulks::default(), Bulks::default());
        "k1".write_redis_args(&mut keys);
        "".write_redis_args(&mut keys);
        42_u64.write_redis_args(&mut args);
        (&[0u8; 300][..]).write_redis_args(&mut args);
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg("abc").arg(2).arg("k1").arg("").arg(42_u64).arg(&[0u8; 300][..]);
        let mut packed = Request::script("EVALSHA", "abc", &keys, &args);
        assert_eq!(Batch::new([&mut packed], None).bytes(), cmd.get_packed_command().as_slice());
    }

    #[test]
    fn parts_joined_are_one_bulk() {
        let mut bulks = Bulks::default();
        bulks.write_joined(&["1000", "5", "0", "client", "wake:{a b}"]);
        bulks.write_joined(&[]);
        assert_eq!(bulks.count, 2);
        assert_eq!(bulks.bytes, b"$26\r\n1000 5 0 client wake:{a b}\r\n$0\r\n\r\n");
    }

    #[test]
    fn an_argument_written_piecewise_is_one_bulk() {
        use std::io::Write;
        let mut args = Bulks::default();
        {
            let mut writer = redis::RedisWrite::writer_for_next_arg(&mut args);
            writer.write_all(b"ab").unwrap();
            writer.write_all(b"c").unwrap();
        }
        assert_eq!((args.bytes.as_slice(), args.count), (&b"$3\r\nabc\r\n"[..], 1));
    }

    #[test]
    fn each_request_gets_its_own_replies_in_order() {
        let mut pair = Request::commands(&[redis::cmd("TYPE").arg("x"), redis::cmd("PTTL").arg("x")]);
        let mut one = get("y");
        let batch = Batch::new([&mut pair, &mut one], None);
        assert_eq!(batch.replies(), 3);
        let split = batch.split(vec![Value::Int(1), Value::Int(2), Value::Int(3)], None);
        assert_eq!(split[0].as_ref().unwrap().values, vec![Value::Int(1), Value::Int(2)]);
        assert_eq!(split[1].as_ref().unwrap().values, vec![Value::Int(3)]);
        assert_eq!(split[1].as_ref().unwrap().acked, None);
    }

    #[test]
    fn a_batch_of_one_deals_its_outcome_as_split_does() {
        let outcome = |acked: bool, wait: Option<Wait>, values: Vec<Value>, failure: Option<&RedisError>| {
            let request = || {
                if acked {
                    Request::commands(&[&redis::cmd("GET"), &redis::cmd("TYPE")]).acknowledged()
                } else {
                    Request::commands(&[&redis::cmd("GET"), &redis::cmd("TYPE")])
                }
            };
            let (mut a, mut b) = (request(), request());
            let split = Batch::new([&mut a], wait).split(values.clone(), failure).remove(0);
            let single = Batch::new([&mut b], wait).single(values, failure);
            assert_eq!(split.as_ref().map_err(|e| e.to_string()), single.as_ref().map_err(|e| e.to_string()));
            single
        };
        let two = vec![Value::Int(1), Value::Int(2)];
        assert_eq!(outcome(false, None, two.clone(), None).unwrap().values, two);
        assert_eq!(outcome(false, Some(WAIT), two.clone(), None).unwrap().acked, None);
        let acked =
            outcome(true, Some(WAIT), vec![Value::Int(1), Value::Int(2), Value::Int(1)], None).unwrap();
        assert_eq!((acked.values, acked.acked), (two.clone(), Some(true)));
        assert!(outcome(true, Some(WAIT), two.clone(), Some(&timeout())).unwrap_err().is_timeout());
        assert!(outcome(false, None, vec![Value::Int(1)], Some(&timeout())).unwrap_err().is_timeout());
        assert!(outcome(false, None, vec![Value::Int(1)], None).is_err());
    }

    #[test]
    fn an_error_reply_fails_only_its_own_command() {
        let (mut a, mut b) = (get("a"), get("b"));
        let error = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n").unwrap();
        let split = Batch::new([&mut a, &mut b], None).split(vec![error.clone(), Value::Nil], None);
        assert_eq!(split[0].as_ref().unwrap().values, vec![error]);
        assert_eq!(split[1].as_ref().unwrap().values, vec![Value::Nil]);
    }

    #[test]
    fn a_failure_fails_the_requests_it_cut_short_and_not_those_before() {
        let (mut a, mut b, mut c) = (get("a"), get("b"), get("c"));
        let split = Batch::new([&mut a, &mut b, &mut c], None).split(vec![Value::Nil], Some(&timeout()));
        assert!(split[0].is_ok());
        assert!(split[1].as_ref().unwrap_err().is_timeout());
        assert!(split[2].as_ref().unwrap_err().is_timeout());
    }

    #[test]
    fn one_wait_answers_for_every_request_that_asked() {
        let (mut a, mut b, mut c) = (get("a").acknowledged(), get("b"), get("c").acknowledged());
        let batch = Batch::new([&mut a, &mut b, &mut c], Some(WAIT));
        assert_eq!(batch.replies(), 4);
        assert!(batch.bytes().ends_with(&redis::cmd("WAIT").arg(1).arg(50).get_packed_command()));
        let split = batch.split(vec![Value::Nil, Value::Nil, Value::Nil, Value::Int(1)], None);
        assert_eq!(split[0].as_ref().unwrap().acked, Some(true));
        assert_eq!(split[1].as_ref().unwrap().acked, None);
        assert_eq!(split[2].as_ref().unwrap().acked, Some(true));
    }

    #[test]
    fn too_few_replicas_is_not_acknowledged() {
        let mut a = get("a").acknowledged();
        let split = Batch::new([&mut a], Some(WAIT)).split(vec![Value::Nil, Value::Int(0)], None);
        assert_eq!(split[0].as_ref().unwrap().acked, Some(false));
    }

    #[test]
    fn waitaof_needs_the_local_fsync_and_the_replicas_asked_for() {
        let mut a = get("a").acknowledged();
        let batch = Batch::new([&mut a], Some(WAITAOF));
        assert!(batch.bytes().ends_with(&redis::cmd("WAITAOF").arg(1).arg(1).arg(50).get_packed_command()));
        let acked = |local, replicas| {
            let mut a = get("a").acknowledged();
            let reply = Value::Array(vec![Value::Int(local), Value::Int(replicas)]);
            Batch::new([&mut a], Some(WAITAOF)).split(vec![Value::Nil, reply], None)[0]
                .as_ref()
                .unwrap()
                .acked
        };
        assert_eq!(acked(1, 1), Some(true));
        assert_eq!(acked(1, 0), Some(false), "one replica short");
        assert_eq!(acked(0, 1), Some(false), "not fsynced on the primary");
        let replicas_only = Wait { aof: Some(Aof { local: false }), ..WAITAOF };
        let mut b = get("b").acknowledged();
        let reply = Value::Array(vec![Value::Int(0), Value::Int(1)]);
        let split = Batch::new([&mut b], Some(replicas_only)).split(vec![Value::Nil, reply], None);
        assert_eq!(split[0].as_ref().unwrap().acked, Some(true));
    }

    #[test]
    fn a_refused_waitaof_is_not_an_acknowledgement_and_the_write_keeps_its_reply() {
        let mut a = get("a").acknowledged();
        let refusal = redis::parse_redis_value(b"-ERR unknown command 'WAITAOF'\r\n").unwrap();
        let split = Batch::new([&mut a], Some(WAITAOF)).split(vec![Value::Int(7), refusal], None);
        let replies = split[0].as_ref().unwrap();
        assert_eq!((replies.values.as_slice(), replies.acked), (&[Value::Int(7)][..], Some(false)));
    }

    #[test]
    fn only_waitaof_is_probed() {
        assert!(WAIT.probe().is_none());
        let probe = WAITAOF.probe().unwrap();
        assert_eq!(
            probe.get_packed_command(),
            redis::cmd("WAITAOF").arg(1).arg(0).arg(50).get_packed_command()
        );
    }

    #[test]
    fn no_wait_is_sent_unless_asked_for_and_configured() {
        let mut plain = get("a");
        assert_eq!(Batch::new([&mut plain], Some(WAIT)).replies(), 1);
        let mut asking = get("a").acknowledged();
        let batch = Batch::new([&mut asking], None);
        assert_eq!(batch.replies(), 1);
        assert_eq!(batch.split(vec![Value::Nil], None)[0].as_ref().unwrap().acked, None);
    }

    #[test]
    fn a_request_whose_wait_reply_was_lost_fails_and_one_that_did_not_ask_succeeds() {
        let (mut a, mut b) = (get("a").acknowledged(), get("b"));
        let split =
            Batch::new([&mut a, &mut b], Some(WAIT)).split(vec![Value::Nil, Value::Nil], Some(&timeout()));
        assert!(split[0].is_err());
        assert!(split[1].is_ok());
    }
}
