//! What every workload shares: the Redis server (the user's or a private
//! one) or, with `--cluster`, the primaries of a private Redis Cluster and
//! its slot map; plain redis-rs connections to them, the scripts the two
//! floors, the baseline and the Redisson 4 row run, and the key prefix of
//! this run.

use std::collections::HashMap;
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
            Ok(out) if out.status.success() => Ok(Redis::Private(RedisServer::start_standalone())),
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

pub(crate) const ACQUIRE_LUA: &str = include_str!("../../lua/lock/acquire.lua");
pub(crate) const RELEASE_LUA: &str = include_str!("../../lua/lock/release.lua");
pub(crate) const RENEW_LUA: &str = include_str!("../../lua/lock/renew.lua");
const HANDOFF_LUA: &str = concat!(
    include_str!("../../lua/common/latch.lua"),
    include_str!("../../lua/common/kinds.lua"),
    include_str!("../../lua/lock/handoff.lua")
);
const DEQUEUE_LUA: &str = include_str!("../../lua/lock/dequeue.lua");
/// The minimal floor's acquire (SPEC section 2, Redisson's `tryLockInner`
/// without its extras): KEYS lock key; ARGV lease ms, owner id. nil when
/// taken or re-entered, else the holder's PTTL.
pub(crate) const MINIMAL_ACQUIRE_LUA: &str = "\
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
";

/// The minimal floor's release (SPEC section 2, Redisson's `unlockInner`
/// without the unlock latch), publishing with `$publish`: KEYS lock key,
/// channel; ARGV unlock message, lease ms, owner id. nil when not the
/// owner, 0 when still held (lease re-applied), 1 when freed.
macro_rules! minimal_release {
    ($publish:literal) => {
        concat!(
            "\
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
redis.call('",
            $publish,
            "', KEYS[2], ARGV[1])
return 1
"
        )
    };
}
/// The minimal release on one server: `PUBLISH`.
pub(crate) const MINIMAL_RELEASE_LUA: &str = minimal_release!("publish");
/// The minimal release on a Redis Cluster: `SPUBLISH`, as keyholder's
/// cluster client (and Redisson's sharded subscription mode) publishes.
pub(crate) const MINIMAL_RELEASE_SHARDED_LUA: &str = minimal_release!("spublish");

/// Redisson 3.24+/4's release with its unlock latch (`RedissonLock.
/// unlockInnerAsync`, as the wire reference describes it; the Redisson 4
/// row): KEYS lock key, channel, latch `redisson_unlock_latch:{<name>}:<request
/// id>`; ARGV unlock message, lease ms, owner id, publish command, latch TTL
/// ms. The latch's value when it is set (a retried call); else nil when not
/// the owner (no latch written), 0 when still held (lease re-applied), 1 when
/// freed (key deleted, message published); the latch then holds the reply.
pub(crate) const REDISSON_UNLOCK_LUA: &str = "\
local latched = redis.call('get', KEYS[3])
if latched then
  return tonumber(latched)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
";

/// The hand-rolled release: Lua compare-and-delete.
pub(crate) const COMPARE_AND_DELETE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// Every script a measured window may run, loaded up front so that no
/// window pays a NOSCRIPT round trip (keyholder's force_unlock.lua is not
/// used).
pub(crate) const PRELOADED: [&str; 10] = [
    ACQUIRE_LUA,
    RELEASE_LUA,
    RENEW_LUA,
    HANDOFF_LUA,
    DEQUEUE_LUA,
    MINIMAL_ACQUIRE_LUA,
    MINIMAL_RELEASE_LUA,
    MINIMAL_RELEASE_SHARDED_LUA,
    REDISSON_UNLOCK_LUA,
    COMPARE_AND_DELETE,
];

/// The scripts the two floors and the baseline call themselves.
pub(crate) struct Scripts {
    /// keyholder's own scripts (the `keyholder scripts` floor, W3's and
    /// W4's raw holders).
    pub(crate) acquire: redis::Script,
    pub(crate) release: redis::Script,
    pub(crate) renew: redis::Script,
    /// The minimal Redisson-semantics pair (the `minimal floor`).
    pub(crate) minimal_acquire: redis::Script,
    pub(crate) minimal_release: redis::Script,
    pub(crate) minimal_release_sharded: redis::Script,
    /// Redisson 4's release with its unlock latch (the Redisson 4 row,
    /// whose acquire is `minimal_acquire`).
    pub(crate) redisson_unlock: redis::Script,
    pub(crate) compare_and_delete: redis::Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            acquire: redis::Script::new(ACQUIRE_LUA),
            release: redis::Script::new(RELEASE_LUA),
            renew: redis::Script::new(RENEW_LUA),
            minimal_acquire: redis::Script::new(MINIMAL_ACQUIRE_LUA),
            minimal_release: redis::Script::new(MINIMAL_RELEASE_LUA),
            minimal_release_sharded: redis::Script::new(MINIMAL_RELEASE_SHARDED_LUA),
            redisson_unlock: redis::Script::new(REDISSON_UNLOCK_LUA),
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
    /// With `--cluster`: the cluster's primaries and slot map. Then `url`
    /// and `raw` are the first primary's, and every connection to a key
    /// goes to the primary serving its slot.
    pub(crate) shards: Option<Shards>,
}

impl Env {
    pub(crate) fn new(cfg: Cfg, url: String, slowlog_threshold: String) -> Res<Env> {
        let raw = raw_client(&url)?;
        let prefix = format!("kh-bench:{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        Ok(Env { cfg, url, raw, scripts: Scripts::new(), prefix, slowlog_threshold, shards: None })
    }

    /// The same environment on a Redis Cluster.
    pub(crate) fn with_shards(self, shards: Shards) -> Env {
        Env { shards: Some(shards), ..self }
    }

    /// A key of this run: `what` under the run's own prefix.
    pub(crate) fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.prefix)
    }

    /// A new plain connection, with timeouts.
    pub(crate) fn connect(&self) -> Res<redis::Connection> {
        connect(&self.raw)
    }

    /// A new plain connection to the server that serves `key`: the one
    /// server, or the cluster primary serving its slot.
    pub(crate) fn connect_for(&self, key: &str) -> Res<redis::Connection> {
        match &self.shards {
            None => self.connect(),
            Some(shards) => connect(shards.client_for(key)?),
        }
    }

    /// A session's connections: one to the server, or one to each cluster
    /// primary, all opened now so that no measured window pays for it.
    pub(crate) fn conns(&self) -> Res<Conns<'_>> {
        match &self.shards {
            None => Ok(Conns { shards: None, one: Some(self.connect()?), by_port: HashMap::new() }),
            Some(shards) => {
                let by_port = shards
                    .primaries
                    .iter()
                    .map(|(port, client)| Ok((*port, connect(client)?)))
                    .collect::<Res<HashMap<u16, redis::Connection>>>()?;
                Ok(Conns { shards: Some(shards), one: None, by_port })
            }
        }
    }
}

/// The connections of one floor or baseline session: the one server's, or
/// one per cluster primary, picked by the key's slot (locally computed, as
/// a cluster client does: the bench's names never move, so no `MOVED`).
pub(crate) struct Conns<'e> {
    shards: Option<&'e Shards>,
    one: Option<redis::Connection>,
    by_port: HashMap<u16, redis::Connection>,
}

impl Conns<'_> {
    /// The connection that serves `key`.
    pub(crate) fn for_key(&mut self, key: &str) -> Res<&mut redis::Connection> {
        match (self.shards, self.one.as_mut()) {
            (None, Some(one)) => Ok(one),
            (Some(shards), _) => {
                let port = shards.owner(key)?;
                self.by_port.get_mut(&port).ok_or_else(|| err(format!("no connection to primary {port}")))
            }
            (None, None) => Err(err("a session without a connection")),
        }
    }
}

/// A Redis Cluster's primaries and who serves which slots, read once at
/// the start (the bench moves no slot).
pub(crate) struct Shards {
    /// Every node's URL, for keyholder's cluster clients.
    pub(crate) seeds: Vec<String>,
    /// Each primary's port and a raw client of it, in port order.
    pub(crate) primaries: Vec<(u16, redis::Client)>,
    /// `(first slot, last slot, primary port)`, from `CLUSTER SLOTS`.
    pub(crate) ranges: Vec<(u16, u16, u16)>,
}

impl Shards {
    /// The port of the primary serving `key`'s slot.
    pub(crate) fn owner(&self, key: &str) -> Res<u16> {
        let slot = key_slot(key);
        self.ranges
            .iter()
            .find(|(first, last, _)| *first <= slot && slot <= *last)
            .map(|(_, _, port)| *port)
            .ok_or_else(|| err(format!("no primary serves slot {slot} ({key})")))
    }

    /// A raw client of the primary serving `key`.
    pub(crate) fn client_for(&self, key: &str) -> Res<&redis::Client> {
        let port = self.owner(key)?;
        self.primaries
            .iter()
            .find(|(p, _)| *p == port)
            .map(|(_, client)| client)
            .ok_or_else(|| err(format!("primary {port} is not known")))
    }

    /// The slot ranges a primary serves, as `0-5460`.
    pub(crate) fn slots_of(&self, port: u16) -> String {
        let ranges: Vec<String> =
            self.ranges.iter().filter(|r| r.2 == port).map(|(a, b, _)| format!("{a}-{b}")).collect();
        ranges.join(",")
    }
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag
/// (the text between the first `{` and the next `}`, when not empty) or of
/// the whole key, modulo 16384. The bench checks it against `CLUSTER
/// KEYSLOT` for every name it uses.
pub(crate) fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        rest.iter().position(|b| *b == b'}').filter(|close| *close > 0).map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(bytes)) % 16384
}

/// CRC-16/XMODEM: polynomial 0x1021, initial value 0, not reflected.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in data {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
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

/// keyholder's own key `prefix` of the lock `name` (`src/names.rs`'s
/// `own_key`): `<prefix>:{<name>}`, or `<prefix>:tagged:<name>` when the
/// name carries its own hash tag.
pub(crate) fn own_key_of(prefix: &str, name: &str) -> String {
    if name.contains('{') { format!("{prefix}:tagged:{name}") } else { format!("{prefix}:{{{name}}}") }
}

/// The keys and channels keyholder's common acquire and release of the lock
/// `name` declare (`src/names.rs`), and the wake prefix a release passes.
pub(crate) struct LockKeys {
    pub(crate) channel: String,
    pub(crate) marker: String,
    pub(crate) queue: String,
    pub(crate) grants: String,
    pub(crate) recent: String,
    pub(crate) wake_prefix: String,
}

impl LockKeys {
    pub(crate) fn of(name: &str) -> LockKeys {
        LockKeys {
            channel: channel_of(name),
            marker: own_key_of("keyholder_lock_next", name),
            queue: own_key_of("keyholder_lock_queue", name),
            grants: own_key_of("keyholder_lock_grants", name),
            recent: own_key_of("keyholder_lock_recent", name),
            wake_prefix: own_key_of("keyholder_lock__wake", name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{crc16, key_slot};

    #[test]
    fn crc16_and_key_slots_match_the_cluster_spec() {
        // The check value of CRC-16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot("123456789"), 0x31C3);
        // Hash tags: the first {...} with something in it.
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
    }
}
