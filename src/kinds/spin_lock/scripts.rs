//! The spin lock's Lua scripts (`lua/spin_lock/`) and their typed replies.
//!
//! Each script's header comment is its contract; a reply outside it becomes
//! an `UnexpectedReply` error. Renewal is the hash layout's, shared with
//! the reentrant lock (`kinds/lock/renewal.rs`).

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::kinds::latch::Latch;
use crate::store::eval::LuaScript;
use crate::store::lanes::Session;
use crate::store::scripts::{Scripts, unexpected};

static ACQUIRE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/spin_lock/acquire.lua")
));
static RELEASE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/latch.lua"),
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/spin_lock/release.lua")
));

/// Which acquire: `ARGV[3]` of `acquire.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A new hold: a stale count of the owner is set to 1.
    Fresh,
    /// A re-entry of the caller's live hold: never takes a free lock.
    Reentry,
}

/// Outcome of `acquire.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Acquired or re-entered; `replicated` as the replicas acknowledged
    /// it (`None` when none were asked for).
    Acquired { replicated: Option<bool> },
    /// Held by another owner, for this much longer (`None`: no TTL).
    Held { remaining: Option<Duration> },
    /// A re-entry found the lock free: the caller's hold vanished.
    Free,
}

/// Outcome of the release script (shared by the lock-like kinds).
pub(crate) use crate::kinds::family::release::Release;

/// One attempt to take (or re-enter) `name` for `owner`.
pub(crate) fn acquire(
    scripts: &Scripts,
    session: &mut Session<'_>,
    name: &str,
    lease_ms: u64,
    owner: &str,
    mode: Mode,
) -> Result<Acquire> {
    let mut call = ACQUIRE.call();
    call.key(name).arg(lease_ms).arg(owner).arg(if mode == Mode::Fresh { "1" } else { "0" });
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(name, e))?;
    session.note_replicated(acked);
    match reply {
        Value::Nil => Ok(Acquire::Acquired { replicated: acked }),
        Value::Int(-2) if mode == Mode::Reentry => Ok(Acquire::Free),
        Value::Int(-1) => Ok(Acquire::Held { remaining: None }),
        Value::Int(ms) if ms >= 0 => {
            Ok(Acquire::Held { remaining: Some(Duration::from_millis(ms.unsigned_abs())) })
        }
        other => Err(unexpected("spin_lock acquire", &other)),
    }
}

/// Releases one hold of `owner` on `name`; latched for a nested release.
pub(crate) fn release(
    scripts: &Scripts,
    session: &mut Session<'_>,
    name: &str,
    lease_ms: u64,
    owner: &str,
    latch: Option<Latch<'_>>,
) -> Result<Release> {
    let mut call = RELEASE.call();
    call.key(name);
    if let Some(latch) = latch {
        call.key(latch.key);
    }
    call.arg(lease_ms).arg(owner);
    if let Some(latch) = latch {
        call.arg(latch.ttl_ms).arg(latch.request).arg(u8::from(latch.retry));
    }
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(name, e))?;
    session.note_replicated(acked);
    match reply {
        Value::Nil => Ok(Release::NotOwner),
        Value::Int(0) => Ok(Release::StillHeld),
        Value::Int(1) => Ok(Release::Released),
        other => Err(unexpected("spin_lock release", &other)),
    }
}
