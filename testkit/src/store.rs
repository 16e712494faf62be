//! A fenced store: a value in Redis guarded by fencing tokens, through
//! `fenced_store.lua`. It stands for the resource a lock protects: it takes
//! a read or a write only with a token at least as high as any it has seen,
//! so a holder that lost its lock (paused past its lease) and acts late is
//! refused once a newer holder has touched the resource.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use redis::Value;

/// The keys of one fenced value.
#[derive(Debug, Clone)]
pub struct FencedStore {
    value: String,
    highest: String,
    refused: String,
    log: String,
}

/// What the store said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted; the value read or written (`None`: nothing stored yet).
    Accepted(Option<String>),
    /// Refused: the token was lower than this highest one seen.
    Refused { highest: u64 },
}

impl Outcome {
    pub fn is_accepted(&self) -> bool {
        matches!(self, Outcome::Accepted(_))
    }
}

fn script() -> redis::Script {
    redis::Script::new(include_str!("fenced_store.lua"))
}

impl FencedStore {
    /// The store named `name` (its keys start with `fenced-store:<name>:`).
    pub fn new(name: &str) -> FencedStore {
        let key = |what: &str| format!("fenced-store:{name}:{what}");
        FencedStore { value: key("value"), highest: key("highest"), refused: key("refused"), log: key("log") }
    }

    fn call(
        &self,
        con: &mut redis::Connection,
        op: &str,
        token: u64,
        value: &str,
    ) -> redis::RedisResult<Outcome> {
        let reply: Value = script()
            .key(&self.value)
            .key(&self.highest)
            .key(&self.refused)
            .key(&self.log)
            .arg(op)
            .arg(token)
            .arg(value)
            .invoke(con)?;
        let text = |v: &Value| -> Option<String> {
            match v {
                Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                Value::SimpleString(s) => Some(s.clone()),
                Value::Int(n) => Some(n.to_string()),
                _ => None,
            }
        };
        match &reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1)] => Ok(Outcome::Accepted(None)),
                [Value::Int(1), v] => Ok(Outcome::Accepted(text(v))),
                [Value::Int(0), Value::Int(highest)] => {
                    Ok(Outcome::Refused { highest: highest.unsigned_abs() })
                }
                _ => panic!("fenced store: unexpected reply {reply:?}"),
            },
            _ => panic!("fenced store: unexpected reply {reply:?}"),
        }
    }

    /// Reads the value with `token`.
    pub fn read(&self, con: &mut redis::Connection, token: u64) -> redis::RedisResult<Outcome> {
        self.call(con, "read", token, "")
    }

    /// Writes `value` with `token`.
    pub fn write(&self, con: &mut redis::Connection, token: u64, value: &str) -> redis::RedisResult<Outcome> {
        self.call(con, "write", token, value)
    }

    /// The stored value, read without a token (for checking).
    pub fn value(&self, con: &mut redis::Connection) -> Option<String> {
        redis::cmd("GET").arg(&self.value).query(con).unwrap()
    }

    /// The highest token seen.
    pub fn highest(&self, con: &mut redis::Connection) -> u64 {
        redis::cmd("GET").arg(&self.highest).query::<Option<u64>>(con).unwrap().unwrap_or(0)
    }

    /// How many requests were refused.
    pub fn refused(&self, con: &mut redis::Connection) -> u64 {
        redis::cmd("GET").arg(&self.refused).query::<Option<u64>>(con).unwrap().unwrap_or(0)
    }

    /// Every accepted write, in order: `(token, value)`.
    pub fn log(&self, con: &mut redis::Connection) -> Vec<(u64, String)> {
        let entries: Vec<String> = redis::cmd("LRANGE").arg(&self.log).arg(0).arg(-1).query(con).unwrap();
        entries
            .iter()
            .map(|e| {
                let (token, value) = e.split_once(':').unwrap();
                (token.parse().unwrap(), value.to_owned())
            })
            .collect()
    }
}
