//! The fair lock's Lua scripts (`lua/fair/`) and their typed replies.
//!
//! Each script's header comment is its contract; this module turns a call's
//! arguments into the script's `KEYS`/`ARGV` and its reply into a small
//! enum, so that no raw integer leaks upward and a reply outside the
//! contract is an `UnexpectedReply` error, never a panic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::{Error, Result};
use crate::names;
use crate::store::eval::LuaScript;
use crate::store::lanes::Session;
use crate::store::scripts::{Scripts, UNLOCK_MESSAGE, unexpected};

static ACQUIRE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/fencing.lua"),
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/common/fair.lua"),
    include_str!("../../../lua/fair/acquire.lua")
));
static RELEASE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/latch.lua"),
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/common/fair.lua"),
    include_str!("../../../lua/fair/release.lua")
));
static DEQUEUE: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/common/fair.lua"),
    include_str!("../../../lua/fair/dequeue.lua")
));
static FORCE_UNLOCK: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/common/fair.lua"),
    include_str!("../../../lua/fair/force_unlock.lua")
));

/// A fair lock's keys and channel prefix (Redisson's `RedissonFairLock`
/// names, all in the lock key's cluster slot).
#[derive(Debug)]
pub(crate) struct FairKeys {
    /// The lock key: the name itself.
    pub(crate) name: std::sync::Arc<str>,
    /// `redisson_lock_queue:{<name>}`.
    pub(crate) queue: String,
    /// `redisson_lock_timeout:{<name>}`.
    pub(crate) timeouts: String,
    /// `redisson_lock__channel:{<name>}`: waiter `<owner>` listens on
    /// `<prefix>:<owner>`.
    pub(crate) channel_prefix: String,
    /// `redisson_lock_token:{<name>}`.
    pub(crate) token: String,
    /// keyholder's own: `keyholder_fair_grants:{<name>}`, whom a release
    /// may hand the lock to.
    pub(crate) grants: String,
    /// keyholder's own: `keyholder_fair__grant:{<name>}`: waiter `<owner>`
    /// hears its grants on `<prefix>:<owner>`.
    pub(crate) grant_prefix: String,
}

impl FairKeys {
    pub(crate) fn new(name: &str) -> FairKeys {
        FairKeys {
            name: std::sync::Arc::from(name),
            queue: names::fair_queue(name),
            timeouts: names::fair_timeouts(name),
            channel_prefix: names::unlock_channel(name),
            token: names::token_key(name),
            grants: names::fair_grants(name),
            grant_prefix: names::fair_grant_prefix(name),
        }
    }

    /// The wake channel of the waiter `owner`.
    pub(crate) fn wake_channel(&self, owner: &str) -> String {
        format!("{}:{owner}", self.channel_prefix)
    }

    /// The grant channel of the keyholder waiter `owner`.
    pub(crate) fn grant_channel(&self, owner: &str) -> String {
        format!("{}:{owner}", self.grant_prefix)
    }
}

/// This client's clock in epoch milliseconds, as Redisson passes it.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, crate::lease::millis_ceil)
}

/// Outcome of `fair/acquire.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Acquired or re-entered; with the fencing token minted, when asked.
    /// `replicated`: whether the replicas asked for acknowledged it.
    Acquired { token: Option<u64>, replicated: Option<bool> },
    /// Not acquired: try again after this long at the latest.
    Refused { retry_in: Duration },
    /// A re-entry found no field of the owner: its hold vanished.
    Gone,
}

/// How an acquire attempt treats the owner's field and the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// A new hold; `queue`: join (or keep) a place in the queue if refused;
    /// `ticket`: the waiting call's number, when it accepts a grant.
    Fresh { queue: bool, ticket: Option<u64> },
    /// A re-entry of the owner's live hold.
    Reentry,
}

/// What `fair/acquire.lua` needs for one attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireArgs<'a> {
    pub(crate) keys: &'a FairKeys,
    pub(crate) owner: &'a str,
    pub(crate) lease_ms: u64,
    pub(crate) slot_ms: u64,
    pub(crate) attempt: Attempt,
    /// Mint a fencing token with the acquisition.
    pub(crate) mint: bool,
}

/// One acquire attempt.
pub(crate) fn acquire(
    scripts: &Scripts,
    session: &mut Session<'_>,
    args: &AcquireArgs<'_>,
) -> Result<Acquire> {
    let AcquireArgs { keys, owner, lease_ms, slot_ms, attempt, mint } = *args;
    let mut call = ACQUIRE.call();
    call.key(&*keys.name).key(&keys.queue).key(&keys.timeouts).key(&keys.channel_prefix).key(&keys.grants);
    if mint {
        call.key(&keys.token);
    }
    let (queue, mode, ticket) = match attempt {
        Attempt::Fresh { queue, ticket } => (queue, "1", ticket),
        Attempt::Reentry => (false, "0", None),
    };
    call.arg(lease_ms).arg(owner).arg(slot_ms).arg(now_ms()).arg(u8::from(queue)).arg(mode);
    call.arg(scripts.publish());
    if let Some(ticket) = ticket {
        call.arg(ticket);
    }
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| script_error(&keys.name, mint.then_some(keys.token.as_str()), e))?;
    session.note_replicated(acked);
    let refused = |ms: i64| match ms {
        -2 if attempt == Attempt::Reentry => Some(Acquire::Gone),
        1.. => u64::try_from(ms).ok().map(|ms| Acquire::Refused { retry_in: Duration::from_millis(ms) }),
        _ => None,
    };
    let outcome = match (&reply, mint) {
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
    outcome.ok_or_else(|| unexpected("fair acquire", &reply))
}

/// Outcome of the release script (shared by the lock-like kinds).
pub(crate) use crate::kinds::family::release::Release;

/// An unlock latch: the outcome of a release request, kept for its retry
/// (`kinds/latch.rs`).
pub(crate) use crate::kinds::latch::Latch;

/// Releases one hold of `owner`, latched.
pub(crate) fn release(
    scripts: &Scripts,
    session: &mut Session<'_>,
    keys: &FairKeys,
    owner: &str,
    lease_ms: u64,
    latch: Latch<'_>,
) -> Result<Release> {
    let mut call = RELEASE.call();
    call.key(&*keys.name).key(&keys.queue).key(&keys.timeouts).key(&keys.channel_prefix).key(&keys.grants);
    call.key(latch.key);
    call.arg(UNLOCK_MESSAGE).arg(lease_ms).arg(owner).arg(now_ms()).arg(scripts.publish());
    call.arg(latch.ttl_ms).arg(latch.request).arg(u8::from(latch.retry)).arg(&keys.grant_prefix);
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| script_error(&keys.name, None, e))?;
    session.note_replicated(acked);
    match reply {
        Value::Nil => Ok(Release::NotOwner),
        Value::Int(0) => Ok(Release::StillHeld),
        Value::Int(1) => Ok(Release::Released),
        Value::Int(2) => Ok(Release::Gone),
        other => Err(unexpected("fair release", &other)),
    }
}

/// A waiter that gives up leaves the queue (giving back a lock a release
/// handed it meanwhile); true if it was queued or handed the lock.
pub(crate) fn dequeue(
    scripts: &Scripts,
    session: &mut Session<'_>,
    keys: &FairKeys,
    owner: &str,
    slot_ms: u64,
) -> Result<bool> {
    let mut call = DEQUEUE.call();
    call.key(&*keys.name).key(&keys.queue).key(&keys.timeouts).key(&keys.channel_prefix).key(&keys.grants);
    call.arg(owner).arg(slot_ms).arg(scripts.publish());
    let (reply, _) = call.invoke(session, scripts.acks())?;
    match reply.map_err(|e| script_error(&keys.name, None, e))? {
        Value::Int(n @ 0..=2) => Ok(n > 0),
        other => Err(unexpected("fair dequeue", &other)),
    }
}

/// Deletes the lock whoever holds it and wakes the head waiter; true if
/// there was a lock.
pub(crate) fn force_unlock(scripts: &Scripts, session: &mut Session<'_>, keys: &FairKeys) -> Result<bool> {
    let mut call = FORCE_UNLOCK.call();
    call.key(&*keys.name).key(&keys.queue).key(&keys.timeouts).key(&keys.channel_prefix);
    call.arg(UNLOCK_MESSAGE).arg(now_ms()).arg(scripts.publish());
    let (reply, _) = call.invoke(session, scripts.acks())?;
    match reply.map_err(|e| script_error(&keys.name, None, e))? {
        Value::Int(n @ 0..=1) => Ok(n == 1),
        other => Err(unexpected("fair force unlock", &other)),
    }
}

fn parse_token(value: &Value) -> Option<u64> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok().filter(|t| *t > 0),
        _ => None,
    }
}

/// Maps a script error: a bad fencing counter, or a key of another type
/// (named in the script's message), or any other Redis error.
fn script_error(name: &str, token_key: Option<&str>, e: redis::RedisError) -> Error {
    let text = e.to_string();
    if let Some(key) = token_key {
        if text.contains("BADCOUNTER") {
            return Error::bad_fencing_counter(name, key);
        }
        if text.contains("WRONGTYPE fencing counter") {
            return Error::wrong_type(name, key);
        }
    }
    // "WRONGTYPE <key> is a <type>, ...": the key is the detail's first word.
    let detail = match (e.code(), e.detail()) {
        (Some("WRONGTYPE"), Some(detail)) => Some(detail),
        _ => text.split("WRONGTYPE").nth(1),
    };
    if let Some(detail) = detail
        && let Some((key, _)) = detail.trim_start_matches(['"', ':', ' ']).split_once(" is a ")
    {
        return Error::wrong_type(name, key);
    }
    Error::from_redis(name, e)
}
