//! What every workload shares: the Redis server (the user's or a private
//! one), plain redis-rs connections to it, the scripts the floor and the
//! baseline run, and the key prefix of this run.

use std::process::Command;
use std::time::Duration;

use keyholder_testkit::server::RedisServer;

use crate::config::Cfg;
use crate::error::{Res, err};

/// Where Redis is: the user's server, or a private one stopped on drop.
pub(crate) enum Redis {
    External(String),
    Private(RedisServer),
}

impl Redis {
    /// `REDIS_URL` when set, else a private `redis-server` (or
    /// `$REDIS_SERVER_BIN`) on a free loopback port.
    pub(crate) fn start() -> Res<Redis> {
        if let Ok(url) = std::env::var("REDIS_URL")
            && !url.trim().is_empty()
        {
            return Ok(Redis::External(url));
        }
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned());
        match Command::new(&bin).arg("--version").output() {
            Ok(out) if out.status.success() => Ok(Redis::Private(RedisServer::start())),
            _ => Err(err(format!(
                "cannot run {bin}: install redis-server, set REDIS_SERVER_BIN to a redis-server binary, \
                 or set REDIS_URL to a running server"
            ))),
        }
    }

    pub(crate) fn url(&self) -> String {
        match self {
            Redis::External(url) => url.clone(),
            Redis::Private(server) => server.url(),
        }
    }

    /// For the report's header.
    pub(crate) fn describe(&self) -> String {
        match self {
            Redis::External(url) => format!("REDIS_URL={url} (counters include any other traffic on it)"),
            Redis::Private(server) => format!("private redis-server on 127.0.0.1:{}", server.port()),
        }
    }
}

pub(crate) const ACQUIRE_LUA: &str = include_str!("../../lua/acquire.lua");
pub(crate) const RELEASE_LUA: &str = include_str!("../../lua/release.lua");
pub(crate) const RENEW_LUA: &str = include_str!("../../lua/renew.lua");
const HANDOFF_LUA: &str = include_str!("../../lua/handoff.lua");
const DEQUEUE_LUA: &str = include_str!("../../lua/dequeue.lua");
/// The hand-rolled release: Lua compare-and-delete.
pub(crate) const COMPARE_AND_DELETE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Every script a measured window may run, loaded up front so that no
/// window pays a NOSCRIPT round trip (keyholder's force_unlock.lua is not
/// used).
pub(crate) const PRELOADED: [&str; 6] =
    [ACQUIRE_LUA, RELEASE_LUA, RENEW_LUA, HANDOFF_LUA, DEQUEUE_LUA, COMPARE_AND_DELETE];

/// The scripts the floor and the baseline call themselves.
pub(crate) struct Scripts {
    pub(crate) acquire: redis::Script,
    pub(crate) release: redis::Script,
    pub(crate) renew: redis::Script,
    pub(crate) compare_and_delete: redis::Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            acquire: redis::Script::new(ACQUIRE_LUA),
            release: redis::Script::new(RELEASE_LUA),
            renew: redis::Script::new(RENEW_LUA),
            compare_and_delete: redis::Script::new(COMPARE_AND_DELETE),
        }
    }
}

/// What every workload shares; read-only, so threads borrow it.
pub(crate) struct Env {
    pub(crate) cfg: Cfg,
    pub(crate) url: String,
    /// A redis-rs client whose connections set TCP_NODELAY, as keyholder's do.
    pub(crate) raw: redis::Client,
    pub(crate) scripts: Scripts,
    prefix: String,
    /// The server's own `slowlog-log-slower-than`, restored after each audit.
    pub(crate) slowlog_threshold: String,
}

impl Env {
    pub(crate) fn new(cfg: Cfg, url: String, slowlog_threshold: String) -> Res<Env> {
        let raw = raw_client(&url)?;
        let prefix = format!("kh-bench:{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        Ok(Env { cfg, url, raw, scripts: Scripts::new(), prefix, slowlog_threshold })
    }

    /// A key of this run: `what` under the run's own prefix.
    pub(crate) fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.prefix)
    }

    /// A new plain connection, with timeouts.
    pub(crate) fn connect(&self) -> Res<redis::Connection> {
        connect(&self.raw)
    }
}

/// A redis-rs client for `url` whose connections set TCP_NODELAY.
pub(crate) fn raw_client(url: &str) -> Res<redis::Client> {
    let client = redis::Client::open(url)?;
    let info = client
        .get_connection_info()
        .clone()
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
    Ok(redis::Client::open(info)?)
}

/// A connection of `client` with a 3 s connect and 10 s read and write
/// timeouts: nothing in the bench waits forever.
pub(crate) fn connect(client: &redis::Client) -> Res<redis::Connection> {
    let con = client.get_connection_with_timeout(Duration::from_secs(3))?;
    con.set_read_timeout(Some(Duration::from_secs(10)))?;
    con.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(con)
}

/// Redisson's unlock channel of a lock name.
pub(crate) fn channel_of(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_lock__channel:{name}")
    } else {
        format!("redisson_lock__channel:{{{name}}}")
    }
}
