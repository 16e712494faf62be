//! The baseline: the hand-rolled lock keyholder replaces. `SET key token NX
//! PX 30000`; on failure sleep 10 ms and retry; release with the Lua
//! compare-and-delete. A connection per session (on a Redis Cluster, one
//! per primary per session, the one serving the key's slot taken).

use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use super::{ACQUIRE_LIMIT, LEASE_MS, LockImpl, Session};
use crate::env::{Conns, Env};
use crate::error::{Res, err};

/// The baseline's retry sleep.
const RETRY: Duration = Duration::from_millis(10);

/// Commands that the compare-and-delete runs inside EVALSHA.
const SCRIPT_COMMANDS: &[&str] = &["get", "del"];

/// The hand-rolled `SET NX PX` lock.
pub(crate) struct Baseline<'e> {
    env: &'e Env,
}

impl<'e> Baseline<'e> {
    pub(crate) fn new(env: &'e Env) -> Baseline<'e> {
        Baseline { env }
    }
}

impl<'e> LockImpl for Baseline<'e> {
    type Session = BaselineSession<'e>;

    fn session(&self, _index: usize) -> Res<Self::Session> {
        Ok(BaselineSession { env: self.env, con: self.env.conns()? })
    }

    fn attempt_command(&self) -> &'static str {
        "set"
    }

    fn script_commands(&self) -> &'static [&'static str] {
        SCRIPT_COMMANDS
    }

    fn polls(&self) -> bool {
        true
    }
}

/// A baseline connection.
pub(crate) struct BaselineSession<'e> {
    env: &'e Env,
    con: Conns<'e>,
}

impl BaselineSession<'_> {
    /// One `SET key token NX PX 30000`; true when it set the key.
    fn try_set(&mut self, key: &str, token: &str) -> Res<bool> {
        let reply: Value = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(LEASE_MS)
            .query(self.con.for_key(key)?)?;
        match reply {
            Value::Nil => Ok(false),
            Value::Okay | Value::SimpleString(_) => Ok(true),
            other => Err(err(format!("SET NX replied {other:?}"))),
        }
    }
}

impl Session for BaselineSession<'_> {
    /// The key and the token that owns it.
    type Held = (String, String);

    fn acquire(&mut self, name: &str) -> Res<(String, String)> {
        let token = uuid::Uuid::new_v4().to_string();
        let deadline = Instant::now() + ACQUIRE_LIMIT;
        while !self.try_set(name, &token)? {
            if Instant::now() >= deadline {
                return Err(err(format!("baseline: {name} not acquired within {ACQUIRE_LIMIT:?}")));
            }
            thread::sleep(RETRY);
        }
        Ok((name.to_owned(), token))
    }

    fn release(&mut self, (key, token): (String, String)) -> Res<()> {
        let deleted: i64 =
            self.env.scripts.compare_and_delete.key(&key).arg(&token).invoke(self.con.for_key(&key)?)?;
        if deleted == 1 { Ok(()) } else { Err(err(format!("baseline: {key} was gone at release"))) }
    }
}
