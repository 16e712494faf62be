//! The bundled Lua scripts and their typed replies.
//!
//! Each script is a real file under `lua/` whose header comment is its
//! contract. `redis::Script` hashes it once and sends EVALSHA, falling back to
//! SCRIPT LOAD and a retry on NOSCRIPT. Replies are decoded into small enums
//! here; a reply outside a contract becomes [`Error::UnexpectedReply`], never a
//! panic and never a raw integer leaking upward.

use std::time::Duration;

use redis::Value;

use crate::connection::Conn;
use crate::error::{Error, Result};

/// Outcome of `acquire.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Acquired or re-entered; with the fencing token minted, when asked.
    Acquired { token: Option<u64> },
    /// Held by another owner, with that holder's remaining lease (`None` when
    /// the key has no TTL).
    Held { remaining: Option<Duration> },
}

/// Outcome of `release.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The owner held nothing; nothing changed.
    NotOwner,
    /// One hold released; others remain.
    StillHeld,
    /// The last hold released: key deleted, unlock message published.
    Released,
}

/// The scripts of one client.
#[derive(Debug)]
pub(crate) struct Scripts {
    acquire: redis::Script,
    acquire_fenced: redis::Script,
    release: redis::Script,
    renew: redis::Script,
    force_unlock: redis::Script,
}

/// The unlock message that wakes one waiter (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// The command the scripts publish unlock messages with.
const PUBLISH: &str = "publish";

/// What `release.lua` needs to release one hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseArgs<'a> {
    pub(crate) name: &'a str,
    pub(crate) channel: &'a str,
    /// The TTL re-applied while holds remain.
    pub(crate) lease_ms: u64,
    pub(crate) owner: &'a str,
    pub(crate) latch: Option<Latch<'a>>,
}

/// An unlock latch: the first outcome of a release, kept for a retry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latch<'a> {
    pub(crate) key: &'a str,
    pub(crate) ttl_ms: u64,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: redis::Script::new(include_str!("../lua/acquire.lua")),
            acquire_fenced: redis::Script::new(include_str!("../lua/acquire_fenced.lua")),
            release: redis::Script::new(include_str!("../lua/release.lua")),
            renew: redis::Script::new(include_str!("../lua/renew.lua")),
            force_unlock: redis::Script::new(include_str!("../lua/force_unlock.lua")),
        }
    }

    pub(crate) fn acquire(&self, conn: &mut Conn, name: &str, lease_ms: u64, owner: &str) -> Result<Acquire> {
        let reply: Value = conn
            .run(|c| self.acquire.key(name).arg(lease_ms).arg(owner).invoke(c))
            .map_err(|e| Error::from_redis(name, e))?;
        match reply {
            Value::Nil => Ok(Acquire::Acquired { token: None }),
            Value::Int(ms) if ms >= 0 => {
                Ok(Acquire::Held { remaining: Some(Duration::from_millis(ms.unsigned_abs())) })
            }
            Value::Int(-1) => Ok(Acquire::Held { remaining: None }),
            other => Err(unexpected("acquire", &other)),
        }
    }

    /// Acquires and mints a fencing token from `token_key` in one call.
    pub(crate) fn acquire_fenced(
        &self,
        conn: &mut Conn,
        name: &str,
        token_key: &str,
        lease_ms: u64,
        owner: &str,
    ) -> Result<Acquire> {
        let reply: Value = conn
            .run(|c| self.acquire_fenced.key(name).key(token_key).arg(lease_ms).arg(owner).invoke(c))
            .map_err(|e| Error::from_redis(name, e))?;
        match &reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(-1), Value::Int(token)] if *token > 0 => {
                    Ok(Acquire::Acquired { token: Some(token.unsigned_abs()) })
                }
                [Value::Int(ms), Value::Int(-1)] if *ms >= 0 => {
                    Ok(Acquire::Held { remaining: Some(Duration::from_millis(ms.unsigned_abs())) })
                }
                [Value::Int(-1), Value::Int(-1)] => Ok(Acquire::Held { remaining: None }),
                _ => Err(unexpected("acquire_fenced", &reply)),
            },
            _ => Err(unexpected("acquire_fenced", &reply)),
        }
    }

    /// Releases one hold; with a latch, a retry with the same latch key
    /// returns the first outcome instead of releasing twice.
    pub(crate) fn release(&self, conn: &mut Conn, args: &ReleaseArgs<'_>) -> Result<Release> {
        let ReleaseArgs { name, channel, lease_ms, owner, latch } = *args;
        let reply: Value = conn
            .run(|c| {
                let mut invocation = self.release.prepare_invoke();
                invocation.key(name).key(channel).arg(UNLOCK_MESSAGE).arg(lease_ms).arg(owner);
                if let Some(latch) = latch {
                    invocation.key(latch.key).arg(PUBLISH).arg(latch.ttl_ms);
                }
                invocation.invoke(c)
            })
            .map_err(|e| Error::from_redis(name, e))?;
        match reply {
            Value::Nil => Ok(Release::NotOwner),
            Value::Int(0) => Ok(Release::StillHeld),
            Value::Int(1) => Ok(Release::Released),
            other => Err(unexpected("release", &other)),
        }
    }

    /// Renews the `(key, owner)` pairs in one call; `true` = still held.
    pub(crate) fn renew(&self, conn: &mut Conn, holds: &[(&str, &str)], lease_ms: u64) -> Result<Vec<bool>> {
        let mut invocation = self.renew.prepare_invoke();
        invocation.arg(lease_ms);
        for (key, owner) in holds {
            invocation.key(*key).arg(*owner);
        }
        let reply: Value = conn.run(|c| invocation.invoke(c))?;
        match reply {
            Value::Array(items) if items.len() == holds.len() => items
                .iter()
                .map(|item| match item {
                    Value::Int(1) => Ok(true),
                    Value::Int(0) => Ok(false),
                    other => Err(unexpected("renew", other)),
                })
                .collect(),
            other => Err(unexpected("renew", &other)),
        }
    }

    /// Deletes the lock whoever holds it; `true` when there was one.
    pub(crate) fn force_unlock(&self, conn: &mut Conn, name: &str, channel: &str) -> Result<bool> {
        let reply: Value = conn
            .run(|c| self.force_unlock.key(name).key(channel).arg(UNLOCK_MESSAGE).arg(PUBLISH).invoke(c))
            .map_err(|e| Error::from_redis(name, e))?;
        match reply {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected("force_unlock", &other)),
        }
    }
}

fn unexpected(script: &'static str, reply: &Value) -> Error {
    Error::UnexpectedReply { script, reply: format!("{reply:?}") }
}
