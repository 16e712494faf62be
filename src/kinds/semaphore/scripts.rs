//! The semaphore's scripts (`lua/semaphore/`) and their typed replies, and
//! the one way this family runs a script.

use redis::Value;

use crate::client::Inner;
use crate::error::{Error, Result};
use crate::store::eval::{Call, LuaScript};
use crate::store::lanes::Session;
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

/// Whether a call may be sent again on a new connection when the first
/// one died under it (see `Inner::with_live_conn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Safe to repeat: a read, or a write whose second run changes nothing.
    Safe,
    /// Not safe (a count changed twice): sent once.
    Once,
}

/// Runs `script` on the node of `name`'s keys, with the keys and arguments
/// `fill` gives it; a Redis error reply becomes the crate's error
/// (`WRONGTYPE` → [`ErrorKind::WrongType`](crate::ErrorKind::WrongType),
/// `OVERFLOW` → [`ErrorKind::CountOverflow`](crate::ErrorKind::CountOverflow),
/// anything else, `BADCOUNT` included, → `ErrorKind::Redis`). When the
/// client requires the replicas' acknowledgement
/// ([`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks))
/// and they did not give it, the call is
/// [`ErrorKind::ReplicaAcks`](crate::ErrorKind::ReplicaAcks) (an acquire
/// uses [`eval_replicated`] instead, to give back what it took).
pub(crate) fn eval(
    inner: &Inner,
    name: &str,
    script: &LuaScript,
    repeat: Repeat,
    fill: impl Fn(&mut Call<'_>),
) -> Result<Value> {
    let (value, replicated) = eval_replicated(inner, name, script, repeat, fill)?;
    if !replicated && inner.config.replica_acks_required {
        return Err(Error::replica_acks(name));
    }
    Ok(value)
}

/// As [`eval`], returning whether the replicas asked for acknowledged the
/// call (true when none were asked for) instead of failing without them.
pub(crate) fn eval_replicated(
    inner: &Inner,
    name: &str,
    script: &LuaScript,
    repeat: Repeat,
    fill: impl Fn(&mut Call<'_>),
) -> Result<(Value, bool)> {
    let run = |session: &mut Session<'_>| -> Result<(Value, bool)> {
        let mut call = script.call();
        fill(&mut call);
        let (reply, acked) = call.invoke(session, inner.scripts.acks())?;
        session.note_replicated(acked);
        reply.map_err(|e| count_error(name, e)).map(|value| (value, acked != Some(false)))
    };
    match repeat {
        Repeat::Safe => inner.with_live_conn(name, run),
        Repeat::Once => inner.with_conn(name, run),
    }
}

/// Maps a script's error reply: `OVERFLOW` (a count would leave the 64-bit
/// range; the script wrote nothing) is typed, the rest as for any lock.
fn count_error(name: &str, e: redis::RedisError) -> Error {
    let text = e.to_string();
    if text.contains("OVERFLOW") {
        return Error::count_overflow(name, e.detail().unwrap_or(&text).to_owned());
    }
    Error::from_redis(name, e)
}

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
pub(crate) fn try_acquire(inner: &Inner, name: &str, channel: &str, permits: u32) -> Result<bool> {
    let (reply, replicated) = eval_replicated(inner, name, &TRY_ACQUIRE, Repeat::Once, |call| {
        call.key(name).arg(permits);
    })?;
    match int("semaphore try_acquire", &reply)? {
        1 if !replicated && inner.config.replica_acks_required => {
            if let Err(e) = release(inner, name, channel, permits) {
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

/// `release.lua`: the new count.
pub(crate) fn release(inner: &Inner, name: &str, channel: &str, permits: u32) -> Result<i64> {
    let reply = eval(inner, name, &RELEASE, Repeat::Once, |call| {
        call.key(name).key(channel).arg(permits).arg(inner.scripts.publish());
    })?;
    int("semaphore release", &reply)
}

/// `try_set_permits.lua`: true when set.
pub(crate) fn try_set_permits(
    inner: &Inner,
    name: &str,
    channel: &str,
    permits: u32,
    ttl_ms: Option<u64>,
) -> Result<bool> {
    let reply = eval(inner, name, &TRY_SET_PERMITS, Repeat::Safe, |call| {
        call.key(name).key(channel).arg(permits).arg(inner.scripts.publish());
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
pub(crate) fn add_permits(inner: &Inner, name: &str, channel: &str, delta: i64) -> Result<i64> {
    let reply = eval(inner, name, &ADD_PERMITS, Repeat::Once, |call| {
        call.key(name).key(channel).arg(delta).arg(inner.scripts.publish());
    })?;
    int("semaphore add_permits", &reply)
}

/// `drain.lua`: the count taken.
pub(crate) fn drain(inner: &Inner, name: &str) -> Result<i64> {
    let reply = eval(inner, name, &DRAIN, Repeat::Once, |call| {
        call.key(name).arg("");
    })?;
    int("semaphore drain", &reply)
}

/// A plain `GET` of a counter key: its integer, 0 when absent.
pub(crate) fn read_count(inner: &Inner, name: &str, what: &'static str) -> Result<i64> {
    let value: Option<String> = inner.with_live_conn(name, |session| {
        session.query(redis::cmd("GET").arg(name)).and_then(|r| r.map_err(|e| Error::from_redis(name, e)))
    })?;
    match value {
        None => Ok(0),
        Some(text) => text.parse().map_err(|_| Error::unexpected_reply(what, format!("{text:?}"))),
    }
}
