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
