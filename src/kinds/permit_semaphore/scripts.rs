//! The permit-expirable semaphore's scripts (`lua/permit_semaphore/`) and
//! their typed replies.

use std::time::Duration;

use redis::Value;

use super::layout::{Keys, PermitId};
use crate::client::{Calls, Repeat};
use crate::error::Result;
use crate::kinds::semaphore::scripts::int;
use crate::store::lanes::Session;
use crate::store::scripts::unexpected;

static ACQUIRE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/common/add.lua"),
    include_str!("../../../lua/common/clock.lua"),
    include_str!("../../../lua/common/permits.lua"),
    include_str!("../../../lua/permit_semaphore/acquire.lua")
));
static RELEASE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/common/add.lua"),
    include_str!("../../../lua/common/clock.lua"),
    include_str!("../../../lua/common/permits.lua"),
    include_str!("../../../lua/permit_semaphore/release.lua")
));
static RENEW: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/common/add.lua"),
    include_str!("../../../lua/common/clock.lua"),
    include_str!("../../../lua/common/permits.lua"),
    include_str!("../../../lua/permit_semaphore/renew.lua")
));
static STATUS: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/common/add.lua"),
    include_str!("../../../lua/common/clock.lua"),
    include_str!("../../../lua/common/permits.lua"),
    include_str!("../../../lua/permit_semaphore/status.lua")
));
static ADD_PERMITS: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/integer.lua"),
    include_str!("../../../lua/common/add.lua"),
    include_str!("../../../lua/permit_semaphore/add_permits.lua")
));

use crate::store::eval::LuaScript;

/// Redisson's score for a permit that never expires.
pub(crate) const NEVER: &str = "922337203685477";

/// What `acquire.lua` answered.
pub(crate) enum Acquired {
    /// Taken; `replicated` unless the replicas asked for did not
    /// acknowledge it.
    Yes { replicated: bool },
    /// Refused; worth trying again after this long at the latest (the
    /// nearest expiry of a held permit), when some permit expires.
    No { retry_in: Option<Duration> },
}

/// `acquire.lua` with `ids` (one per permit) and a lease in ms (`None`: the
/// permits never expire). Safe to repeat: a second run with the same ids
/// finds them held and takes nothing more.
pub(crate) fn acquire(
    calls: Calls<'_>,
    keys: &Keys,
    ids: &[PermitId],
    lease_ms: Option<u64>,
) -> Result<Acquired> {
    let (reply, replicated) = calls.eval_replicated(&keys.name, &ACQUIRE, Repeat::Safe, |call| {
        call.key(&*keys.name).key(&*keys.timeouts).key(&*keys.channel);
        call.arg(ids.len()).arg(lease_ms.map_or(-1, |ms| i64::try_from(ms).unwrap_or(i64::MAX)));
        call.arg(NEVER).arg(calls.publish());
        for id in ids {
            call.arg(id.as_bytes().as_slice());
        }
    })?;
    let pair = match &reply {
        Value::Array(items) if items.len() == 2 => {
            (int("permit acquire", &items[0])?, int("permit acquire", &items[1])?)
        }
        other => return Err(unexpected("permit acquire", other)),
    };
    match pair {
        (1, _) => Ok(Acquired::Yes { replicated }),
        (0, -1) => Ok(Acquired::No { retry_in: None }),
        (0, ms) if ms >= 0 => Ok(Acquired::No { retry_in: Some(Duration::from_millis(ms.unsigned_abs())) }),
        _ => Err(unexpected("permit acquire", &reply)),
    }
}

/// What `release.lua` answered.
pub(crate) enum Released {
    /// Every id was held; `live` of them had not expired yet.
    Held { live: usize },
    /// Some id was not held: nothing changed.
    NotHeld,
}

/// `release.lua`: all the ids or none. Sent once (a repeat would find them
/// gone).
pub(crate) fn release(calls: Calls<'_>, keys: &Keys, ids: &[PermitId]) -> Result<Released> {
    let reply = calls.eval(&keys.name, &RELEASE, Repeat::Once, |call| {
        call.key(&*keys.name).key(&*keys.timeouts).key(&*keys.channel).arg(calls.publish());
        for id in ids {
            call.arg(id.as_bytes().as_slice());
        }
    })?;
    match int("permit release", &reply)? {
        -1 => Ok(Released::NotHeld),
        n if n >= 0 => Ok(Released::Held { live: usize::try_from(n).unwrap_or(usize::MAX) }),
        _ => Err(unexpected("permit release", &reply)),
    }
}

/// `renew.lua` on `session`: per id, whether it is still held.
pub(crate) fn renew(
    calls: Calls<'_>,
    session: &mut Session<'_>,
    keys: &Keys,
    ids: &[PermitId],
    lease_ms: u64,
) -> Result<Vec<bool>> {
    let mut call = RENEW.call();
    call.key(&*keys.name).key(&*keys.timeouts).key(&*keys.channel).arg(lease_ms).arg(calls.publish());
    for id in ids {
        call.arg(id.as_bytes().as_slice());
    }
    let (reply, acked) = call.invoke(session, calls.scripts().acks())?;
    session.note_replicated(acked);
    let reply = reply.map_err(|e| crate::error::Error::from_redis(&keys.name, e))?;
    match &reply {
        Value::Array(items) if items.len() == ids.len() => {
            items.iter().map(|item| int("permit renew", item).map(|n| n == 1)).collect()
        }
        other => Err(unexpected("permit renew", other)),
    }
}

/// `status.lua`: (available, held).
pub(crate) fn status(calls: Calls<'_>, keys: &Keys) -> Result<(i64, i64)> {
    let reply = calls.eval(&keys.name, &STATUS, Repeat::Safe, |call| {
        call.key(&*keys.name).key(&*keys.timeouts).key(&*keys.channel).arg(calls.publish());
    })?;
    match &reply {
        Value::Array(items) if items.len() == 2 => {
            Ok((int("permit status", &items[0])?, int("permit status", &items[1])?))
        }
        other => Err(unexpected("permit status", other)),
    }
}

/// `add_permits.lua`: the new count.
pub(crate) fn add_permits(calls: Calls<'_>, keys: &Keys, delta: i64) -> Result<i64> {
    let reply = calls.eval(&keys.name, &ADD_PERMITS, Repeat::Once, |call| {
        call.key(&*keys.name).key(&*keys.channel).arg(delta).arg(calls.publish());
    })?;
    int("permit add_permits", &reply)
}
