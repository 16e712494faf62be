//! Redis Cluster's arithmetic: which of the 16 384 hash slots a key or
//! shard channel falls in, the slot map a node describes with
//! `CLUSTER SLOTS`, and the redirections (`MOVED`, `ASK`) a node answers
//! for a slot it does not serve.
//!
//! Pure functions, unit-tested; `store/cluster.rs` does the I/O.

use redis::Value;

use crate::names::hash_tag;

/// The number of hash slots in a Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0): Redis Cluster's key
/// hash, as a table built at compile time.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ b)])
}

/// The hash slot of a key (or a shard channel), as `CLUSTER KEYSLOT`.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS as u16
}

/// A node's address as the cluster announces it.
pub(crate) type Addr = (String, u16);

/// One contiguous range of slots and the primary that serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotRange {
    pub(crate) first: u16,
    pub(crate) last: u16,
    pub(crate) primary: Addr,
}

/// Reads a `CLUSTER SLOTS` reply. `asked` is the host of the node that
/// answered: a node announces itself with an empty host (or `?`) when it
/// does not know its own address, meaning "where you reached me".
pub(crate) fn parse_cluster_slots(reply: &Value, asked: &str) -> Option<Vec<SlotRange>> {
    let Value::Array(ranges) = reply else { return None };
    let mut parsed = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else { return None };
        let (Some(first), Some(last), Some(Value::Array(primary))) =
            (fields.first().and_then(as_int), fields.get(1).and_then(as_int), fields.get(2))
        else {
            return None;
        };
        let host = primary.first().and_then(as_text)?;
        let port = primary.get(1).and_then(as_int)?;
        let host = if host.is_empty() || host == "?" { asked.to_owned() } else { host };
        let (first, last, port) =
            (u16::try_from(first).ok()?, u16::try_from(last).ok()?, u16::try_from(port).ok()?);
        if first > last || usize::from(last) >= SLOTS {
            return None;
        }
        parsed.push(SlotRange { first, last, primary: (host, port) });
    }
    Some(parsed)
}

/// Where a node sent a command for a slot it does not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED slot host:port`: the slot lives there now; update the map.
    Moved { slot: u16, to: Addr },
    /// `ASK slot host:port`: the slot is being migrated and this key is
    /// already there; send this one command there, after `ASKING`.
    Ask { to: Addr },
    /// `TRYAGAIN`: the keys of a multi-key command are split by a migration
    /// under way; the same command succeeds once it is done.
    TryAgain,
}

/// The redirection an error reply asks for, if it is one.
pub(crate) fn redirect(value: &Value) -> Option<Redirect> {
    let Value::ServerError(e) = value else { return None };
    let target = || {
        let mut words = e.details()?.split_whitespace();
        let slot: u16 = words.next()?.parse().ok()?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        Some((slot, (host.to_owned(), port.parse().ok()?)))
    };
    match e.code() {
        "MOVED" => target().map(|(slot, to)| Redirect::Moved { slot, to }),
        "ASK" => target().map(|(_, to)| Redirect::Ask { to }),
        "TRYAGAIN" => Some(Redirect::TryAgain),
        _ => None,
    }
}

fn as_int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on redis-server 7.0.
        assert_eq!(key_slot(b"a"), 15495);
        assert_eq!(key_slot(b"b"), 3300);
        assert_eq!(key_slot(b"123456789"), 12739, "the CRC16/XMODEM check value, mod 16384");
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags_follow_the_first_brace_pair() {
        assert_eq!(hash_tag(b"orders:42"), b"orders:42");
        assert_eq!(hash_tag(b"redisson_lock__channel:{orders:42}"), b"orders:42");
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}", "an empty first tag: the whole key");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"a{b"), b"a{b", "no closing brace: the whole key");
    }

    #[test]
    fn a_lock_and_everything_derived_from_it_share_a_slot() {
        for name in ["orders:42", "{user}:1", "x", "{x}", "job{nightly}", "{x}}", "a{b}{c}"] {
            assert!(crate::names::validate_cluster_name(name).is_ok(), "{name}");
            let slot = key_slot(name.as_bytes());
            let keys = crate::names::LockKeys::new(&std::sync::Arc::from(name), "c");
            for derived in
                [&keys.channel, &keys.marker, &keys.queue, &keys.grants, &keys.listening, &keys.wake_channel]
            {
                assert_eq!(key_slot(derived.as_bytes()), slot, "{name}: {derived}");
            }
            assert_eq!(key_slot(crate::names::token_key(name).as_bytes()), slot, "{name}");
        }
        // A `{` without a tag: the lock key and its channel are hashed
        // whole, and differ; such names are refused on a cluster.
        for name in ["a{b", "x{}y", "{}", "a}b", "{}{x}"] {
            assert!(crate::names::validate_cluster_name(name).is_err(), "{name}");
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn cluster_slots_replies_are_read_with_the_asked_host_for_blank_ones() {
        let node = |host: &str, port: i64| Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]);
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("", 7001)]),
        ]);
        let ranges = parse_cluster_slots(&reply, "10.0.0.1").unwrap();
        assert_eq!(ranges[0], SlotRange { first: 0, last: 5460, primary: ("127.0.0.1".into(), 7000) });
        assert_eq!(ranges[1].primary, ("10.0.0.1".to_owned(), 7001));
        let backwards = Value::Array(vec![Value::Array(vec![Value::Int(9), Value::Int(3), node("h", 1)])]);
        assert!(parse_cluster_slots(&backwards, "h").is_none());
        assert!(parse_cluster_slots(&Value::Nil, "h").is_none());
    }

    #[test]
    fn redirections_are_recognised() {
        let moved = parse_error("MOVED 3999 127.0.0.1:6381");
        assert_eq!(redirect(&moved), Some(Redirect::Moved { slot: 3999, to: ("127.0.0.1".into(), 6381) }));
        let ask = parse_error("ASK 3999 ::1:6381");
        assert_eq!(redirect(&ask), Some(Redirect::Ask { to: ("::1".into(), 6381) }));
        assert_eq!(
            redirect(&parse_error("TRYAGAIN Multiple keys request during rehashing of slot")),
            Some(Redirect::TryAgain)
        );
        assert_eq!(redirect(&parse_error("ERR unknown command")), None);
        assert_eq!(redirect(&Value::Int(1)), None);
    }

    /// An error reply as redis-rs parses it off the wire.
    fn parse_error(text: &str) -> Value {
        let wire = format!("-{text}\r\n");
        redis::parse_redis_value(wire.as_bytes()).unwrap()
    }
}
