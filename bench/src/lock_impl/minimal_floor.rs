//! The minimal floor, the reference every "vs floor" ratio and every
//! target is measured against (SPEC section 4): the smallest scripts that
//! carry Redisson's lock semantics of SPEC section 2 (`MINIMAL_ACQUIRE_LUA`
//! and `MINIMAL_RELEASE_LUA` in `env.rs`: acquire `exists`/`hexists` →
//! `hincrby` + `pexpire`, else `pttl`; release `hexists` → `hincrby -1` →
//! `pexpire`, or `del` + `publish`; 3 keys and arguments to acquire, 5 to
//! release), loaded once and called with EVALSHA on a plain connection per
//! session: two round trips per pair, no library logic, none of keyholder's
//! extra script work. On a Redis Cluster, a connection per session to each
//! primary, the one serving the lock's slot taken, and the release
//! publishes with `SPUBLISH`, as keyholder's cluster client does.

use std::collections::HashMap;

use redis::Value;

use super::{LEASE_MS, LockImpl, Session};
use crate::env::{Conns, Env, channel_of};
use crate::error::{Res, err};

/// Commands the minimal scripts run inside EVALSHA (`spublish` on a
/// cluster).
const SCRIPT_COMMANDS: &[&str] =
    &["exists", "hexists", "hincrby", "pexpire", "pttl", "del", "publish", "spublish"];

/// The minimal Redisson-semantics script pair, raw.
pub(crate) struct MinimalFloor<'e> {
    env: &'e Env,
}

impl<'e> MinimalFloor<'e> {
    pub(crate) fn new(env: &'e Env) -> MinimalFloor<'e> {
        MinimalFloor { env }
    }
}

impl<'e> LockImpl for MinimalFloor<'e> {
    type Session = MinimalFloorSession<'e>;

    fn session(&self, index: usize) -> Res<Self::Session> {
        Ok(MinimalFloorSession {
            env: self.env,
            con: self.env.conns()?,
            owner: format!("bench-minimal:{index}"),
            depth: HashMap::new(),
        })
    }

    /// The acquire script's one `exists`; the release runs none.
    fn attempt_command(&self) -> &'static str {
        "exists"
    }

    fn script_commands(&self) -> &'static [&'static str] {
        SCRIPT_COMMANDS
    }
}

/// A minimal-floor connection and owner id, with the hold count of each
/// key it holds (the release replies 0 until the last release, then 1).
pub(crate) struct MinimalFloorSession<'e> {
    env: &'e Env,
    con: Conns<'e>,
    owner: String,
    depth: HashMap<String, u32>,
}

impl Session for MinimalFloorSession<'_> {
    /// The key.
    type Held = String;

    fn acquire(&mut self, name: &str) -> Res<String> {
        let reply: Value = self
            .env
            .scripts
            .minimal_acquire
            .key(name)
            .arg(LEASE_MS)
            .arg(&self.owner)
            .invoke(self.con.for_key(name)?)?;
        match reply {
            Value::Nil => {}
            Value::Int(_) => return Err(err(format!("minimal floor: {name} is unexpectedly held"))),
            other => return Err(err(format!("minimal floor: acquire replied {other:?}"))),
        }
        *self.depth.entry(name.to_owned()).or_insert(0) += 1;
        Ok(name.to_owned())
    }

    fn release(&mut self, key: String) -> Res<()> {
        let Some(depth) = self.depth.get_mut(&key) else {
            return Err(err(format!("minimal floor: {key} released but not held")));
        };
        *depth -= 1;
        let expected = if *depth == 0 {
            self.depth.remove(&key);
            1
        } else {
            0
        };
        let script = match self.env.shards {
            Some(_) => &self.env.scripts.minimal_release_sharded,
            None => &self.env.scripts.minimal_release,
        };
        let reply: Value = script
            .key(&key)
            .key(channel_of(&key))
            .arg("0")
            .arg(LEASE_MS)
            .arg(&self.owner)
            .invoke(self.con.for_key(&key)?)?;
        match reply {
            Value::Int(n) if n == expected => Ok(()),
            other => Err(err(format!("minimal floor: release replied {other:?}, expected {expected}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use keyholder_testkit::server::RedisServer;
    use redis::Value;

    use crate::env::{MINIMAL_ACQUIRE_LUA, MINIMAL_RELEASE_LUA, channel_of, connect, raw_client};

    /// The minimal pair keeps SPEC section 2's semantics on a real server:
    /// take, re-enter, refuse another owner with the PTTL, refuse a release
    /// by a non-owner with nil, re-apply the lease while still held, and
    /// free the key with one `0` on the channel at the last release.
    #[test]
    fn the_minimal_scripts_keep_redissons_semantics() {
        let server = RedisServer::start();
        let client = raw_client(&server.url()).unwrap();
        let mut con = connect(&client).unwrap();
        let mut listener = connect(&client).unwrap();
        let (acquire, release) =
            (redis::Script::new(MINIMAL_ACQUIRE_LUA), redis::Script::new(MINIMAL_RELEASE_LUA));
        let (name, channel) = ("bench:minimal", channel_of("bench:minimal"));
        let mut pubsub = listener.as_pubsub();
        pubsub.subscribe(&channel).unwrap();
        pubsub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let take = |con: &mut redis::Connection, owner: &str| -> Value {
            acquire.key(name).arg(30_000).arg(owner).invoke(con).unwrap()
        };
        let give = |con: &mut redis::Connection, owner: &str| -> Value {
            release.key(name).key(&channel).arg("0").arg(30_000).arg(owner).invoke(con).unwrap()
        };

        assert_eq!(take(&mut con, "a:1"), Value::Nil);
        assert_eq!(take(&mut con, "a:1"), Value::Nil, "re-entered");
        let count: i64 = redis::cmd("HGET").arg(name).arg("a:1").query(&mut con).unwrap();
        assert_eq!(count, 2);
        match take(&mut con, "b:1") {
            Value::Int(pttl) => assert!(pttl > 0 && pttl <= 30_000, "{pttl}"),
            other => panic!("another owner got {other:?}"),
        }
        assert_eq!(give(&mut con, "b:1"), Value::Nil, "not the owner");
        redis::cmd("PEXPIRE").arg(name).arg(1_000).query::<i64>(&mut con).unwrap();
        assert_eq!(give(&mut con, "a:1"), Value::Int(0), "still held once");
        let pttl: i64 = redis::cmd("PTTL").arg(name).query(&mut con).unwrap();
        assert!(pttl > 1_000, "lease re-applied: {pttl}");
        assert_eq!(give(&mut con, "a:1"), Value::Int(1), "freed");
        let exists: i64 = redis::cmd("EXISTS").arg(name).query(&mut con).unwrap();
        assert_eq!(exists, 0);
        let message = pubsub.get_message().unwrap();
        assert_eq!(message.get_channel_name(), channel);
        assert_eq!(message.get_payload::<String>().unwrap(), "0");
    }
}
