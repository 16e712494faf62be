//! The read-write lock's Lua scripts (`lua/rwlock/`) and their typed
//! replies, and the keys and channel derived from a lock's name.
//!
//! Redisson's names follow its `prefixName`/`suffixName` rule, so that Java
//! and Rust meet on them. The waiting-writers set is keyholder's own, one to
//! one with names like keyholder's other keys (see `names.rs`).

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::kinds::latch::Latch;
use crate::names;
use crate::store::eval::{Call, LuaScript};
use crate::store::lanes::Session;
use crate::store::scripts::{Scripts, UNLOCK_MESSAGE, unexpected};

static READ_ACQUIRE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/rwlock/read_acquire.lua")
));
static READ_RELEASE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/latch.lua"),
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/rwlock/read_release.lua")
));
static READ_RENEW: LuaScript = LuaScript::new(include_str!("../../../lua/rwlock/read_renew.lua"));
static READ_IS_LOCKED: LuaScript = LuaScript::new(include_str!("../../../lua/rwlock/read_is_locked.lua"));
static WRITE_ACQUIRE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/fencing.lua"),
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/rwlock/write_acquire.lua")
));
static WRITE_RELEASE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/latch.lua"),
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/rwlock/write_release.lua")
));
static WRITE_WITHDRAW: LuaScript = LuaScript::new(include_str!("../../../lua/rwlock/write_withdraw.lua"));
static FORCE_UNLOCK: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/common/force.lua"),
    include_str!("../../../lua/rwlock/force_unlock.lua")
));

/// Redisson's `READ_UNLOCK_MESSAGE`: wakes every waiter.
pub(crate) const WAKE_ALL_MESSAGE: &str = "1";

/// Added to a waiting writer's entry beyond the longest it sleeps before
/// trying again: its wake-up and one round trip, on a loaded machine.
pub(crate) const WRITER_SLACK_MS: u64 = 1000;

/// The keys and channel of one read-write lock.
#[derive(Debug)]
pub(crate) struct RwKeys {
    /// The lock key: the name itself.
    pub(crate) name: std::sync::Arc<str>,
    /// `redisson_rwlock:{<name>}`.
    pub(crate) channel: String,
    /// `{<name>}`, or the name when it has a `{`: the base of the timeout keys.
    pub(crate) key_prefix: String,
    /// keyholder's waiting writers.
    pub(crate) writers: String,
    /// The fencing-token counter `redisson_lock_token:{<name>}`.
    pub(crate) token: String,
}

impl RwKeys {
    pub(crate) fn new(name: &str) -> RwKeys {
        RwKeys {
            name: std::sync::Arc::from(name),
            channel: names::rw_channel(name),
            key_prefix: names::rw_timeout_base(name),
            writers: names::rw_writers(name),
            token: names::token_key(name),
        }
    }

    /// The prefix of `owner`'s read holds' timeout keys:
    /// `{<name>}:<owner>:rwlock_timeout`.
    pub(crate) fn timeout_prefix(&self, owner: &str) -> String {
        format!("{}:{owner}:rwlock_timeout", self.key_prefix)
    }
}

/// The write owner id of a read owner id: `<client-uuid>:<thread-id>:write`.
pub(crate) fn write_owner(owner: &str) -> String {
    format!("{owner}:write")
}

/// Outcome of an acquire script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Acquired or re-entered, with the token minted when asked, and
    /// whether the replicas asked for acknowledged it.
    Acquired { token: Option<u64>, replicated: Option<bool> },
    /// Not acquired: worth waiting this long (`None`: the key has no TTL).
    Refused { retry_in: Option<Duration> },
    /// A write acquire by a thread holding a read hold: never granted.
    Upgrade,
}

/// Outcome of the release script (shared by the lock-like kinds).
pub(crate) use crate::kinds::family::release::Release;

fn refused(ms: i64) -> Option<Acquire> {
    match ms {
        -3 => Some(Acquire::Upgrade),
        -1.. => Some(Acquire::Refused { retry_in: u64::try_from(ms).ok().map(Duration::from_millis) }),
        _ => None,
    }
}

/// One read acquire of `owner` (a new hold or a re-entry).
pub(crate) fn read_acquire(
    scripts: &Scripts,
    session: &mut Session<'_>,
    keys: &RwKeys,
    owner: &str,
    lease_ms: u64,
) -> Result<Acquire> {
    let mut call = READ_ACQUIRE.call();
    call.key(&*keys.name).key(keys.timeout_prefix(owner)).key(&keys.writers);
    call.arg(lease_ms).arg(owner).arg(write_owner(owner));
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(&keys.name, e))?;
    session.note_replicated(acked);
    let outcome = match &reply {
        Value::Nil => Some(Acquire::Acquired { token: None, replicated: acked }),
        Value::Int(ms) if *ms != -3 => refused(*ms),
        _ => None,
    };
    outcome.ok_or_else(|| unexpected("rwlock read_acquire", &reply))
}

/// What a write acquire needs besides the keys.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteAcquire<'a> {
    /// The read owner id of the calling thread.
    pub(crate) owner: &'a str,
    pub(crate) lease_ms: u64,
    /// Mint a fencing token.
    pub(crate) mint: bool,
    /// On refusal, record the caller as a waiting writer for at most this
    /// many milliseconds (plus slack).
    pub(crate) waiting_ms: Option<u64>,
}

/// One write acquire.
pub(crate) fn write_acquire(
    scripts: &Scripts,
    session: &mut Session<'_>,
    keys: &RwKeys,
    args: WriteAcquire<'_>,
) -> Result<Acquire> {
    let mut call = WRITE_ACQUIRE.call();
    call.key(&*keys.name).key(&keys.writers);
    if args.mint {
        call.key(&keys.token);
    }
    call.arg(args.lease_ms).arg(write_owner(args.owner)).arg(args.owner);
    match args.waiting_ms {
        Some(ms) => call.arg(1).arg(ms).arg(WRITER_SLACK_MS),
        None => call.arg(0).arg(0).arg(0),
    };
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| acquire_error(keys, args.mint, e))?;
    session.note_replicated(acked);
    let outcome = match (&reply, args.mint) {
        (Value::Nil, false) => Some(Acquire::Acquired { token: None, replicated: acked }),
        (Value::Int(ms), false) => refused(*ms),
        (Value::Array(items), true) => match items.as_slice() {
            [Value::Int(-1), token] => {
                parse_token(token).map(|t| Acquire::Acquired { token: Some(t), replicated: acked })
            }
            [Value::Int(ms), Value::Int(-1)] => refused(*ms),
            _ => None,
        },
        _ => None,
    };
    outcome.ok_or_else(|| unexpected("rwlock write_acquire", &reply))
}

/// A writer stops waiting; true when it woke the readers it held back.
pub(crate) fn write_withdraw(
    scripts: &Scripts,
    session: &mut Session<'_>,
    keys: &RwKeys,
    owner: &str,
) -> Result<bool> {
    let mut call = WRITE_WITHDRAW.call();
    call.key(&*keys.name).key(&keys.writers).key(&keys.channel);
    call.arg(write_owner(owner)).arg(scripts.publish());
    let (reply, _) = call.invoke(session, false)?;
    match reply.map_err(|e| Error::from_redis(&keys.name, e))? {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("rwlock write_withdraw", &other)),
    }
}

fn decode_release(script: &'static str, reply: &Value) -> Result<Release> {
    match reply {
        Value::Nil => Ok(Release::NotOwner),
        Value::Int(0) => Ok(Release::StillHeld),
        Value::Int(1) => Ok(Release::Released),
        other => Err(unexpected(script, other)),
    }
}

/// Releases one read hold of `owner`.
pub(crate) fn read_release(
    scripts: &Scripts,
    session: &mut Session<'_>,
    keys: &RwKeys,
    owner: &str,
    latch: Latch<'_>,
) -> Result<Release> {
    let mut call = READ_RELEASE.call();
    call.key(&*keys.name).key(&keys.channel).key(keys.timeout_prefix(owner)).key(&keys.key_prefix);
    call.key(latch.key).key(&keys.writers);
    call.arg(UNLOCK_MESSAGE).arg(owner).arg(scripts.publish());
    call.arg(latch.ttl_ms).arg(latch.request).arg(u8::from(latch.retry));
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(&keys.name, e))?;
    session.note_replicated(acked);
    decode_release("rwlock read_release", &reply)
}

/// Releases one write hold of `owner` (its read owner id).
pub(crate) fn write_release(
    scripts: &Scripts,
    session: &mut Session<'_>,
    keys: &RwKeys,
    owner: &str,
    lease_ms: u64,
    latch: Latch<'_>,
) -> Result<Release> {
    let mut call = WRITE_RELEASE.call();
    call.key(&*keys.name).key(&keys.channel).key(latch.key);
    call.arg(WAKE_ALL_MESSAGE).arg(lease_ms).arg(write_owner(owner)).arg(scripts.publish());
    call.arg(latch.ttl_ms).arg(latch.request).arg(u8::from(latch.retry));
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(&keys.name, e))?;
    session.note_replicated(acked);
    decode_release("rwlock write_release", &reply)
}

/// Deletes the lock if it is held in `write` (or read) mode; true if it was.
pub(crate) fn force_unlock(
    scripts: &Scripts,
    session: &mut Session<'_>,
    keys: &RwKeys,
    write: bool,
) -> Result<bool> {
    let mut call = FORCE_UNLOCK.call();
    call.key(&*keys.name).key(&keys.channel);
    if write {
        call.arg("write").arg(WAKE_ALL_MESSAGE);
    } else {
        call.arg("read").arg(UNLOCK_MESSAGE);
    }
    call.arg(scripts.publish());
    let (reply, _) = call.invoke(session, scripts.acks())?;
    match reply.map_err(|e| Error::from_redis(&keys.name, e))? {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("rwlock force_unlock", &other)),
    }
}

/// Redisson's read `isLocked`.
pub(crate) fn read_is_locked(session: &mut Session<'_>, keys: &RwKeys) -> Result<bool> {
    let mut call = READ_IS_LOCKED.call();
    call.key(&*keys.name);
    let (reply, _) = call.invoke(session, false)?;
    match reply.map_err(|e| Error::from_redis(&keys.name, e))? {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("rwlock read_is_locked", &other)),
    }
}

/// Renews read holds: `(lock key, key prefix, owner)` per hold, one per
/// pair of KEYS (a lock may repeat, so that each hold is answered for).
/// All keys must share one slot on a cluster.
pub(crate) fn read_renew(
    scripts: &Scripts,
    session: &mut Session<'_>,
    holds: &[(&str, &str, &str)],
    lease_ms: u64,
) -> Result<Vec<bool>> {
    let (reply, acked) = read_renew_call(holds, lease_ms).invoke(session, scripts.acks())?;
    let reply = reply.map_err(Error::redis)?;
    session.note_replicated(acked);
    read_renewed(&reply, holds.len())
}

/// The renewal call of [`read_renew`], to be sent on a session or on a
/// connection of its own (`kinds/family/silent.rs`).
pub(crate) fn read_renew_call(holds: &[(&str, &str, &str)], lease_ms: u64) -> Call<'static> {
    let mut call = READ_RENEW.call();
    call.arg(lease_ms);
    for (key, prefix, owner) in holds {
        call.key(*key).key(*prefix).arg(1).arg(*owner);
    }
    call
}

/// Per hold, whether [`read_renew_call`]'s `reply` (for `holds` holds)
/// says it is still held.
pub(crate) fn read_renewed(reply: &Value, holds: usize) -> Result<Vec<bool>> {
    match reply {
        Value::Array(items) if items.len() == holds => items
            .iter()
            .map(|v| match v {
                Value::Int(n) => Ok(*n == 1),
                other => Err(unexpected("rwlock read_renew", other)),
            })
            .collect(),
        other => Err(unexpected("rwlock read_renew", other)),
    }
}

/// A fencing token as the script returns it: the counter's decimal string.
fn parse_token(value: &Value) -> Option<u64> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok().filter(|t| *t > 0),
        _ => None,
    }
}

/// Maps an error of `write_acquire.lua`, telling a bad fencing counter from
/// a bad lock key.
fn acquire_error(keys: &RwKeys, mint: bool, e: redis::RedisError) -> Error {
    let text = e.to_string();
    if mint && text.contains("BADCOUNTER") {
        return Error::bad_fencing_counter(&keys.name, &keys.token);
    }
    if mint && text.contains("WRONGTYPE") && text.contains("fencing counter") {
        return Error::wrong_type(&keys.name, &keys.token);
    }
    Error::from_redis(&keys.name, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_redissons_rule() {
        let keys = RwKeys::new("order:42");
        assert_eq!(keys.channel, "redisson_rwlock:{order:42}");
        assert_eq!(keys.key_prefix, "{order:42}");
        assert_eq!(keys.timeout_prefix("u:1"), "{order:42}:u:1:rwlock_timeout");
        assert_eq!(keys.token, "redisson_lock_token:{order:42}");
        assert_eq!(keys.writers, "keyholder_rwlock_writers:{order:42}");
        let braced = RwKeys::new("{user}:1");
        assert_eq!(braced.channel, "redisson_rwlock:{user}:1");
        assert_eq!(braced.timeout_prefix("u:1"), "{user}:1:u:1:rwlock_timeout");
        assert_eq!(braced.writers, "keyholder_rwlock_writers:tagged:{user}:1");
        assert_eq!(write_owner("u:1"), "u:1:write");
    }
}
