//! The semaphore's scripts (`lua/semaphore/`) and their typed replies,
//! run through the client's [`Calls`].

use redis::Value;

use crate::client::{Calls, Repeat};
use crate::error::{Error, Result};
use crate::store::eval::LuaScript;
use crate::store::scripts::unexpected;

static TRY_ACQUIRE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/semaphore/try_acquire.lua")
));
static RELEASE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/common/add.lua"),
    include_str!("../../../lua/semaphore/release.lua")
));
pub(crate) static TRY_SET_PERMITS: LuaScript =
    LuaScript::new(include_str!("../../../lua/semaphore/try_set_permits.lua"));
static ADD_PERMITS: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/common/add.lua"),
    include_str!("../../../lua/semaphore/add_permits.lua")
));
static DRAIN: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/semaphore/drain.lua")
));

/// An integer reply, or a count the script returned as a decimal string
/// (exact over the 64-bit range, where a Lua number is not past 2^53); any
/// other reply breaks the contract.
pub(crate) fn int(script: &'static str, reply: &Value) -> Result<i64> {
    match reply {
        Value::Int(n) => Ok(*n),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| unexpected(script, reply)),
        other => Err(unexpected(script, other)),
    }
}

/// `try_acquire.lua`: true when the permits were taken. Taken without the
/// replicas' acknowledgement that the client requires, they are given back
/// and the call is `ReplicaAcks`.
pub(crate) fn try_acquire(calls: Calls<'_>, name: &str, channel: &str, permits: u32) -> Result<bool> {
    let (reply, replicated) = calls.eval_replicated(name, &TRY_ACQUIRE, Repeat::Once, |call| {
        call.key(name).arg(permits);
    })?;
    match int("semaphore try_acquire", &reply)? {
        1 if !replicated && calls.acks_required() => {
            if let Err(e) = release(calls, name, channel, permits) {
                log::warn!(
                    "keyholder: giving back {permits} unreplicated permits of semaphore '{name}' failed: {e}"
                );
            }
            Err(Error::replica_acks(name))
        }
        1 => Ok(true),
        0 => Ok(false),
        _ => Err(unexpected("semaphore try_acquire", &reply)),
    }
}

/// What `release.lua` answers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Released {
    /// The new count.
    pub(crate) count: i64,
    /// The connections its message reached (see `handover.rs`).
    pub(crate) listeners: i64,
}

/// `release.lua`: the new count, and how many connections heard it.
pub(crate) fn release(calls: Calls<'_>, name: &str, channel: &str, permits: u32) -> Result<Released> {
    let reply = calls.eval(name, &RELEASE, Repeat::Once, |call| {
        call.key(name).key(channel).arg(permits).arg(calls.publish());
    })?;
    match &reply {
        Value::Array(parts) => match parts.as_slice() {
            [count, listeners] => Ok(Released {
                count: int("semaphore release", count)?,
                listeners: int("semaphore release", listeners)?,
            }),
            _ => Err(unexpected("semaphore release", &reply)),
        },
        other => Err(unexpected("semaphore release", other)),
    }
}

/// `try_set_permits.lua`: true when set.
pub(crate) fn try_set_permits(
    calls: Calls<'_>,
    name: &str,
    channel: &str,
    permits: u32,
    ttl_ms: Option<u64>,
) -> Result<bool> {
    let reply = calls.eval(name, &TRY_SET_PERMITS, Repeat::Safe, |call| {
        call.key(name).key(channel).arg(permits).arg(calls.publish());
        if let Some(ttl) = ttl_ms {
            call.arg(ttl);
        }
    })?;
    match int("semaphore try_set_permits", &reply)? {
        1 => Ok(true),
        0 => Ok(false),
        _ => Err(unexpected("semaphore try_set_permits", &reply)),
    }
}

/// `add_permits.lua`: the new count.
pub(crate) fn add_permits(calls: Calls<'_>, name: &str, channel: &str, delta: i64) -> Result<i64> {
    let reply = calls.eval(name, &ADD_PERMITS, Repeat::Once, |call| {
        call.key(name).key(channel).arg(delta).arg(calls.publish());
    })?;
    int("semaphore add_permits", &reply)
}

/// `drain.lua`: the count taken.
pub(crate) fn drain(calls: Calls<'_>, name: &str) -> Result<i64> {
    let reply = calls.eval(name, &DRAIN, Repeat::Once, |call| {
        call.key(name).arg("");
    })?;
    int("semaphore drain", &reply)
}

/// A plain `GET` of a counter key: its integer, 0 when absent.
pub(crate) fn read_count(calls: Calls<'_>, name: &str, what: &'static str) -> Result<i64> {
    let value: Option<String> = calls.with_live_conn(name, |session| {
        session.query(redis::cmd("GET").arg(name)).and_then(|r| r.map_err(|e| Error::from_redis(name, e)))
    })?;
    match value {
        None => Ok(0),
        Some(text) => text.parse().map_err(|_| Error::unexpected_reply(what, format!("{text:?}"))),
    }
}
