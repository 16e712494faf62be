//! What Redis pushes on a pub/sub connection, in redis-rs's words: a RESP2
//! pub/sub reply (an array whose first item names its kind) read as a
//! `redis::PushInfo`, and a message in it as a `redis::Msg`.
//!
//! redis-rs's `Msg::from_owned_value` reads RESP2 `message` and `pmessage`
//! arrays, but not `smessage` (the shard channels' message, which keyholder
//! hears on a Redis Cluster: redis-rs reads it only as a RESP3 push) nor
//! the confirmations. So the array becomes a `PushInfo` here, its kind
//! redis-rs's `PushKind`, and `Msg::from_push_info` reads the messages of
//! every kind.

use redis::{Msg, PushInfo, PushKind, ServerError, Value};

/// The push `value` is (a RESP2 pub/sub array, or a RESP3 push), if it is
/// one.
pub(crate) fn push_of(value: Value) -> Option<PushInfo> {
    match value {
        Value::Push { kind, data } => Some(PushInfo { kind, data }),
        Value::Array(mut items) => {
            let kind = match items.first()? {
                Value::BulkString(name) => kind_of(name),
                _ => return None,
            };
            items.remove(0);
            Some(PushInfo { kind, data: items })
        }
        _ => None,
    }
}

/// The message a push carries (`message`, `smessage`, `pmessage`).
pub(crate) fn message_of(push: PushInfo) -> Option<Msg> {
    Msg::from_push_info(push)
}

/// The channel a confirmation (`subscribe`, `unsubscribe`, their shard
/// forms) is about.
pub(crate) fn channel_of(push: &PushInfo) -> Option<&str> {
    text(push.data.first()?)
}

/// A message's payload as text.
pub(crate) fn payload_of(message: &Msg) -> Option<&str> {
    std::str::from_utf8(message.get_payload_bytes()).ok()
}

/// An error reply as Redis wrote it: its code, then its details.
pub(crate) fn refusal_text(error: &ServerError) -> String {
    match error.details() {
        Some(details) => format!("{} {details}", error.code()),
        None => error.code().to_owned(),
    }
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

/// redis-rs's name for a RESP2 push's kind (redis-rs's own mapping is not
/// public).
fn kind_of(name: &[u8]) -> PushKind {
    match name {
        b"message" => PushKind::Message,
        b"pmessage" => PushKind::PMessage,
        b"smessage" => PushKind::SMessage,
        b"subscribe" => PushKind::Subscribe,
        b"psubscribe" => PushKind::PSubscribe,
        b"ssubscribe" => PushKind::SSubscribe,
        b"unsubscribe" => PushKind::Unsubscribe,
        b"punsubscribe" => PushKind::PUnsubscribe,
        b"sunsubscribe" => PushKind::SUnsubscribe,
        other => PushKind::Other(String::from_utf8_lossy(other).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(items: &[&str]) -> Value {
        Value::Array(items.iter().map(|item| Value::BulkString(item.as_bytes().to_vec())).collect())
    }

    #[test]
    fn messages_of_every_kind_read_as_redis_rs_messages() {
        for (kind, expected) in [("message", PushKind::Message), ("smessage", PushKind::SMessage)] {
            let push = push_of(array(&[kind, "chan", "0"])).unwrap();
            assert_eq!(push.kind, expected);
            let message = message_of(push).unwrap();
            assert_eq!((message.get_channel_name(), payload_of(&message)), ("chan", Some("0")));
        }
        let pattern = message_of(push_of(array(&["pmessage", "ch*", "chan", "1"])).unwrap()).unwrap();
        assert_eq!((pattern.get_channel_name(), payload_of(&pattern)), ("chan", Some("1")));
    }

    #[test]
    fn confirmations_name_their_channel_and_other_replies_are_no_message() {
        for (kind, expected) in [
            ("subscribe", PushKind::Subscribe),
            ("ssubscribe", PushKind::SSubscribe),
            ("unsubscribe", PushKind::Unsubscribe),
            ("sunsubscribe", PushKind::SUnsubscribe),
        ] {
            let push = push_of(Value::Array(vec![
                Value::BulkString(kind.as_bytes().to_vec()),
                Value::BulkString(b"chan".to_vec()),
                Value::Int(1),
            ]))
            .unwrap();
            assert_eq!((&push.kind, channel_of(&push)), (&expected, Some("chan")));
            assert!(message_of(push).is_none());
        }
        let pong = push_of(array(&["pong", ""])).unwrap();
        assert_eq!(pong.kind, PushKind::Other("pong".into()));
        assert!(push_of(Value::Okay).is_none() && push_of(Value::Array(vec![])).is_none());
        assert!(push_of(Value::Array(vec![Value::Int(1)])).is_none());
    }

    #[test]
    fn a_refusal_reads_as_redis_wrote_it() {
        let Value::ServerError(e) = redis::parse_redis_value(b"-NOPERM no rights to 'x'\r\n").unwrap() else {
            panic!()
        };
        assert_eq!(refusal_text(&e), "NOPERM no rights to 'x'");
    }
}
