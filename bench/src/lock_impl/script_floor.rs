//! The `keyholder scripts` floor: keyholder's own acquire and release
//! scripts, raw, on a plain connection per session: two round trips per
//! pair and no library logic, but the scripts' own weight (queue,
//! reservations, unlock latch, fencing, migration mode), called with the
//! keys and arguments keyholder's common case sends (acquire: the lock and
//! its claim marker, lease, owner, mode; release: the lock, its channel and
//! keyholder's four keys, lease, owner, listening, the queue's settings).
//! Shown beside the minimal floor ([`super::MinimalFloor`]):
//! the gap between the two is the cost of that extra work. W3's raw holder
//! and W4's raw renewals use it too.
//! On a Redis Cluster, a connection per session to each primary, the one
//! serving the lock's slot taken, and the unlock message sent with
//! `SPUBLISH`, as keyholder's cluster client does.

use std::collections::HashMap;

use redis::Value;

use super::{LEASE_MS, LIBRARY_SCRIPT_COMMANDS, LockImpl, Session};
use crate::env::{Conns, Env, LockKeys};
use crate::error::{Res, err};

/// keyholder's scripts run raw.
pub(crate) struct ScriptFloor<'e> {
    env: &'e Env,
}

impl<'e> ScriptFloor<'e> {
    pub(crate) fn new(env: &'e Env) -> ScriptFloor<'e> {
        ScriptFloor { env }
    }

    /// The owner id (hash field) of session `index`.
    pub(crate) fn owner(index: usize) -> String {
        format!("bench-floor:{index}")
    }

    /// One `renew.lua` call over `keys`, all held by `owner`, to `lease_ms`;
    /// an error when one was not held.
    pub(crate) fn renew(
        &self,
        con: &mut redis::Connection,
        keys: &[String],
        owner: &str,
        lease_ms: u64,
    ) -> Res<()> {
        let mut invocation = self.env.scripts.renew.prepare_invoke();
        invocation.arg(lease_ms);
        for key in keys {
            invocation.key(key.as_str()).arg(owner);
        }
        let renewed: Vec<i64> = invocation.invoke(con)?;
        if renewed.iter().any(|r| *r != 1) {
            return Err(err("keyholder scripts floor: a renewal was refused"));
        }
        Ok(())
    }
}

impl<'e> LockImpl for ScriptFloor<'e> {
    type Session = ScriptFloorSession<'e>;

    fn session(&self, index: usize) -> Res<Self::Session> {
        Ok(ScriptFloorSession {
            env: self.env,
            con: self.env.conns()?,
            owner: ScriptFloor::owner(index),
            depth: HashMap::new(),
            keys: HashMap::new(),
        })
    }

    fn attempt_command(&self) -> &'static str {
        "exists"
    }

    fn script_commands(&self) -> &'static [&'static str] {
        LIBRARY_SCRIPT_COMMANDS
    }
}

/// A floor connection and owner id, with the hold count of each key it
/// holds (release.lua replies 0 until the last release, then 1), and the
/// keyholder keys of each lock it took (made once, as keyholder's are).
pub(crate) struct ScriptFloorSession<'e> {
    env: &'e Env,
    con: Conns<'e>,
    owner: String,
    depth: HashMap<String, u32>,
    keys: HashMap<String, LockKeys>,
}

/// The queue's settings a release passes as one argument (see
/// `lua/lock/release.lua`, ARGV[4]), as keyholder sends them without a
/// barging window: claim window, foreign turn, no window, head start,
/// client id (the floor's owner ids' client part), wake prefix.
fn queue_settings(keys: &LockKeys) -> String {
    format!("1000 5 0 2 bench-floor {}", keys.wake_prefix)
}

impl Session for ScriptFloorSession<'_> {
    /// The key.
    type Held = String;

    fn acquire(&mut self, name: &str) -> Res<String> {
        let keys = self.keys.entry(name.to_owned()).or_insert_with(|| LockKeys::of(name));
        // A new hold's mode is "1", a re-entry's "0", as keyholder sends.
        let mode = if self.depth.contains_key(name) { "0" } else { "1" };
        let reply: Value = self
            .env
            .scripts
            .acquire
            .key(name)
            .key(&keys.marker)
            .arg(LEASE_MS)
            .arg(&self.owner)
            .arg(mode)
            .invoke(self.con.for_key(name)?)?;
        match reply {
            Value::Nil => {}
            Value::Int(_) => {
                return Err(err(format!("keyholder scripts floor: {name} is unexpectedly held")));
            }
            other => return Err(err(format!("acquire.lua replied {other:?}"))),
        }
        match self.depth.get_mut(name) {
            Some(depth) => *depth += 1,
            None => {
                self.depth.insert(name.to_owned(), 1);
            }
        }
        Ok(name.to_owned())
    }

    fn release(&mut self, key: String) -> Res<()> {
        let Some(depth) = self.depth.get_mut(&key) else {
            return Err(err(format!("keyholder scripts floor: {key} released but not held")));
        };
        *depth -= 1;
        let expected = if *depth == 0 {
            self.depth.remove(&key);
            1
        } else {
            0
        };
        let keys =
            self.keys.get(&key).ok_or_else(|| err(format!("keyholder scripts floor: no keys of {key}")))?;
        let mut release = self.env.scripts.release.key(&key);
        release.key(&keys.channel).key(&keys.marker).key(&keys.queue).key(&keys.grants).key(&keys.recent);
        release.arg(LEASE_MS).arg(&self.owner).arg(0).arg(queue_settings(keys));
        if self.env.shards.is_some() {
            release.arg("spublish");
        }
        let reply: Value = release.invoke(self.con.for_key(&key)?)?;
        match reply {
            Value::Int(n) if n == expected => Ok(()),
            other => Err(err(format!(
                "keyholder scripts floor: release.lua replied {other:?}, expected {expected}"
            ))),
        }
    }
}
