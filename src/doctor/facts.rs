//! What one primary tells about itself: `INFO` (the `server`, `memory`,
//! `persistence` and `replication` sections, one command each, as Redis
//! before 7.0 takes one section a call) and `CONFIG GET` of each setting
//! the checks read (one parameter a call, for the same reason), in one
//! pipelined round trip. A command the server refuses is kept as its
//! refusal: the checks fall back on `INFO`, or answer "unknown".
//!
//! The parsing is pure and unit-tested: `INFO` text, `CONFIG GET` replies
//! in RESP2 (a flat array) and RESP3 (a map).

use std::collections::BTreeMap;

use redis::Value;

use super::skew::Clock;
use crate::admin::send;
use crate::config::Config;
use crate::error::Result;
use crate::store::connection::Conn;
use crate::store::lanes::Session;
use crate::store::sentinel::Sentinels;

/// The `INFO` sections read.
const SECTIONS: [&str; 4] = ["server", "memory", "persistence", "replication"];

/// The settings read with `CONFIG GET`.
pub(super) const SETTINGS: [&str; 11] = [
    "maxmemory",
    "maxmemory-policy",
    "appendonly",
    "appendfsync",
    "save",
    "min-replicas-to-write",
    "min-replicas-max-lag",
    "busy-reply-threshold",
    "lua-time-limit",
    "cluster-node-timeout",
    "client-output-buffer-limit",
];

/// `INFO` of each section read and `CONFIG GET` of each setting read.
fn commands() -> Vec<redis::Cmd> {
    let mut commands: Vec<redis::Cmd> =
        SECTIONS.iter().map(|section| redis::cmd("INFO").arg(*section).clone()).collect();
    commands.extend(SETTINGS.iter().map(|name| redis::cmd("CONFIG").arg("GET").arg(*name).clone()));
    commands
}

/// What one primary said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Facts {
    /// Every `INFO` field read, by name (`redis_version`, `maxmemory`).
    info: BTreeMap<String, String>,
    /// Why an `INFO` section could not be read, by section.
    info_refused: BTreeMap<&'static str, String>,
    /// The settings `CONFIG GET` gave, by name.
    config: BTreeMap<String, String>,
    /// Why `CONFIG GET` was refused (the first refusal).
    config_refused: Option<String>,
    /// What the sentinels say of the master, for a client built with
    /// Sentinel (`failover.rs` asks them).
    pub(super) sentinel: Option<SentinelView>,
    /// The replicas' clocks (and on a cluster, this primary's against the
    /// first primary's), read by `skew.rs`.
    pub(super) clocks: Vec<Clock>,
}

impl Facts {
    /// Reads one node, in one round trip.
    ///
    /// # Errors
    ///
    /// A connection failure; a refused command is no error (see
    /// [`Facts::config_refused`]).
    pub(super) fn read(session: &mut Session<'_>) -> Result<Facts> {
        Ok(Facts::from_replies(send(session, &commands())?))
    }

    /// Reads one node on a connection of its own (a replica), in one round
    /// trip; a failure is the reason.
    pub(super) fn read_on(conn: &mut Conn) -> std::result::Result<Facts, String> {
        let commands = commands();
        let packed: Vec<u8> = commands.iter().flat_map(redis::Cmd::get_packed_command).collect();
        conn.send(&packed).map_err(|e| e.to_string())?;
        let (replies, failure) = conn.receive(commands.len());
        match failure {
            Some(e) => Err(e.to_string()),
            None => Ok(Facts::from_replies(replies)),
        }
    }

    /// The facts the replies to [`commands`] tell.
    fn from_replies(replies: Vec<Value>) -> Facts {
        let mut replies = replies.into_iter();
        let mut facts = Facts::default();
        for section in SECTIONS {
            match text(replies.next().unwrap_or(Value::Nil)) {
                Ok(text) => facts.info.extend(parse_info(&text)),
                Err(refusal) => {
                    facts.info_refused.insert(section, refusal);
                }
            }
        }
        for _ in SETTINGS {
            match replies.next().unwrap_or(Value::Nil) {
                Value::ServerError(e) => {
                    facts.config_refused.get_or_insert_with(|| refusal(&e));
                }
                value => facts.config.extend(parse_config(value)),
            }
        }
        facts
    }

    /// Facts from `INFO` text and `CONFIG GET` pairs, for the checks'
    /// unit tests.
    #[cfg(test)]
    pub(super) fn from_parts(info: &str, config: &[(&str, &str)], config_refused: Option<&str>) -> Facts {
        Facts {
            info: parse_info(info),
            info_refused: BTreeMap::new(),
            config: config.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            config_refused: config_refused.map(str::to_owned),
            sentinel: None,
            clocks: Vec::new(),
        }
    }

    /// An `INFO` field.
    pub(super) fn info(&self, field: &str) -> Option<&str> {
        self.info.get(field).map(String::as_str)
    }

    /// An `INFO` field as a number.
    pub(super) fn info_number(&self, field: &str) -> Option<i64> {
        self.info(field).and_then(|v| v.trim().parse().ok())
    }

    /// A setting `CONFIG GET` gave (`None` when refused, or unknown to
    /// this server's version).
    pub(super) fn config(&self, name: &str) -> Option<&str> {
        self.config.get(name).map(String::as_str)
    }

    /// A setting as a number.
    pub(super) fn config_number(&self, name: &str) -> Option<i64> {
        self.config(name).and_then(|v| v.trim().parse().ok())
    }

    /// Why `CONFIG GET` was refused, if it was.
    pub(super) fn config_refused(&self) -> Option<&str> {
        self.config_refused.as_deref()
    }

    /// Why an `INFO` section was refused, if it was.
    pub(super) fn info_refused(&self, section: &str) -> Option<&str> {
        self.info_refused.get(section).map(String::as_str)
    }

    /// The replicas' addresses (`host:port`).
    pub(super) fn replica_addrs(&self) -> Vec<String> {
        self.replicas().into_iter().map(|r| r.addr).collect()
    }

    /// The `INFO replication` lines of the replicas (`slave0:ip=...`), in
    /// order, parsed.
    pub(super) fn replicas(&self) -> Vec<Replica> {
        let mut replicas: Vec<(usize, Replica)> = self
            .info
            .iter()
            .filter_map(|(key, value)| {
                let index = key.strip_prefix("slave")?.parse::<usize>().ok()?;
                Some((index, parse_replica(value)))
            })
            .collect();
        replicas.sort_by_key(|(index, _)| *index);
        replicas.into_iter().map(|(_, replica)| replica).collect()
    }
}

/// One replica as its primary sees it (`INFO replication`'s `slaveN`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Replica {
    /// `ip:port`.
    pub(super) addr: String,
    /// `online`, `wait_bgsave`, `send_bulk`...
    pub(super) state: String,
    /// Seconds since its last acknowledgement (`lag`).
    pub(super) lag: Option<i64>,
}

/// A reply as text, or the server's refusal.
fn text(value: Value) -> std::result::Result<String, String> {
    match value {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => Ok(text),
        Value::ServerError(e) => Err(refusal(&e)),
        other => Err(format!("an unexpected reply: {other:?}")),
    }
}

/// A refusal as the server worded it: `NOPERM User doctor has no
/// permissions to run the 'config|get' command`.
fn refusal(e: &redis::ServerError) -> String {
    match e.details() {
        Some(detail) if !detail.is_empty() => format!("{} {detail}", e.code()),
        _ => e.code().to_owned(),
    }
}

/// `INFO` text (`# Section` headers, `field:value` lines) as a map.
pub(super) fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(field, value)| (field.to_owned(), value.to_owned()))
        .collect()
}

/// A `CONFIG GET` reply as name → value: RESP2's flat array of names and
/// values, or RESP3's map. Anything else gives nothing.
pub(super) fn parse_config(value: Value) -> BTreeMap<String, String> {
    let word = |value: &Value| match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(name), Some(value)) = (items.next(), items.next()) {
                pairs.push((name, value));
            }
            pairs
        }
        _ => Vec::new(),
    };
    pairs.iter().filter_map(|(name, value)| Some((word(name)?, word(value)?))).collect()
}

/// A `slaveN` value: `ip=127.0.0.1,port=6380,state=online,offset=14,lag=0`.
pub(super) fn parse_replica(value: &str) -> Replica {
    let mut replica = Replica::default();
    let (mut ip, mut port) = (String::new(), String::new());
    for (key, field) in value.split(',').filter_map(|pair| pair.split_once('=')) {
        match key {
            "ip" => field.clone_into(&mut ip),
            "port" => field.clone_into(&mut port),
            "state" => field.clone_into(&mut replica.state),
            "lag" => replica.lag = field.parse().ok(),
            _ => {}
        }
    }
    replica.addr = format!("{ip}:{port}");
    replica
}

/// One sentinel's `SENTINEL MASTER` fields, or why it gave none.
type Answer = Result<BTreeMap<String, String>, String>;

/// What the sentinels said of the master, each sentinel's answer or why it
/// gave none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SentinelView {
    /// By sentinel (`host:port`): the `SENTINEL MASTER` fields, or the
    /// error.
    pub(super) answers: Vec<(String, Answer)>,
}

impl SentinelView {
    /// The first answer's field as a number.
    pub(super) fn number(&self, field: &str) -> Option<i64> {
        self.answers.iter().find_map(|(_, a)| a.as_ref().ok()?.get(field)?.trim().parse().ok())
    }

    pub(super) fn answered(&self) -> usize {
        self.answers.iter().filter(|(_, a)| a.is_ok()).count()
    }
}

/// Asks every sentinel of a client built with
/// [`Client::builder_sentinel`](crate::Client::builder_sentinel) what it
/// knows of the master; `None` for other clients.
pub(super) fn ask_sentinels(config: &Config) -> Option<SentinelView> {
    let sentinel = config.sentinel.as_ref()?;
    let answers = match Sentinels::new(
        &sentinel.urls,
        &sentinel.master,
        config.connect_timeout,
        config.command_timeout,
    ) {
        Ok(sentinels) => sentinels
            .masters()
            .into_iter()
            .map(|(at, reply)| (at, reply.map(parse_config).map_err(|e| e.to_string())))
            .collect(),
        Err(e) => vec![(String::new(), Err(e.to_string()))],
    };
    Some(SentinelView { answers })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\r\n# Memory\r\n\
                        maxmemory:10485760\r\nmaxmemory_policy:allkeys-lru\r\n\r\n# Replication\r\n\
                        role:master\r\nconnected_slaves:2\r\n\
                        slave1:ip=10.0.0.3,port=6380,state=wait_bgsave,offset=0,lag=7\r\n\
                        slave0:ip=10.0.0.2,port=6379,state=online,offset=1442,lag=0\r\n";

    #[test]
    fn info_text_is_read_field_by_field() {
        let info = parse_info(INFO);
        assert_eq!(info.get("redis_version").map(String::as_str), Some("7.0.15"));
        assert_eq!(info.get("maxmemory_policy").map(String::as_str), Some("allkeys-lru"));
        assert!(!info.keys().any(|k| k.starts_with('#')), "{info:?}");
        // A value may hold colons (an IPv6 address, a path).
        assert_eq!(
            parse_info("executable:/usr/bin/redis-server\nx:a:b").get("x").map(String::as_str),
            Some("a:b")
        );
    }

    #[test]
    fn replicas_are_read_in_order_with_their_lag() {
        let facts = Facts::from_parts(INFO, &[], None);
        let replicas = facts.replicas();
        assert_eq!(
            replicas,
            [
                Replica { addr: "10.0.0.2:6379".into(), state: "online".into(), lag: Some(0) },
                Replica { addr: "10.0.0.3:6380".into(), state: "wait_bgsave".into(), lag: Some(7) },
            ]
        );
        assert_eq!(facts.info_number("connected_slaves"), Some(2));
        // No lag field (an old server, a replica mid-sync): unknown.
        assert_eq!(parse_replica("ip=::1,port=6380,state=online").lag, None);
    }

    #[test]
    fn config_replies_are_read_in_resp2_and_resp3() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![bulk("maxmemory"), bulk("0"), bulk("save"), bulk("")]);
        let resp3 = Value::Map(vec![(bulk("maxmemory-policy"), Value::SimpleString("noeviction".into()))]);
        let two = parse_config(resp2);
        assert_eq!(two.get("maxmemory").map(String::as_str), Some("0"));
        assert_eq!(two.get("save").map(String::as_str), Some(""));
        assert_eq!(parse_config(resp3).get("maxmemory-policy").map(String::as_str), Some("noeviction"));
        // A setting this version lacks: an empty reply, nothing known.
        assert!(parse_config(Value::Array(vec![])).is_empty());
        assert!(parse_config(Value::Nil).is_empty());
    }

    #[test]
    fn refusals_keep_the_servers_words() {
        let refused =
            redis::parse_redis_value(b"-NOPERM User doctor has no permissions to run the 'info' command\r\n")
                .unwrap();
        assert!(matches!(refused, Value::ServerError(_)), "{refused:?}");
        let err = text(refused).unwrap_err();
        assert!(err.starts_with("NOPERM User doctor"), "{err}");
    }
}
