//! A RedLock's fencing token: per-master tokens combined into one.
//!
//! Each master keeps its own counter, `redisson_lock_token:{<name>}` (the
//! one Redisson's `RFencedLock` and keyholder's fenced `Lock` mint from),
//! and the counters drift apart: every attempt mints on the masters it
//! reaches, successful or not. The combined token is the largest token the
//! acquisition minted on the masters it took. Before the acquisition counts
//! as made, a second round raises each taken master's counter to at least
//! that value, on the masters where it still holds the lock
//! (`lua/red_lock/raise_token.lua`), and a quorum of them must confirm.
//!
//! Why that makes combined tokens strictly increasing across successive
//! holders: the next holder takes a quorum of masters, and any two quorums
//! share a master. On a shared master, this holder raised the counter to at
//! least its combined token *while it held the lock there*, so the next
//! holder, who could only take that master after, mints a larger token
//! there; and its combined token is at least that. A storage that accepts
//! a write only with a combined token at least the highest it has seen
//! therefore refuses a paused former holder's late write.

use redis::Value;

use crate::error::{Error, Result};
use crate::store::eval::LuaScript;
use crate::store::lanes::Session;
use crate::store::scripts::{Scripts, unexpected};

static RAISE_TOKEN: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/red_lock/raise_token.lua")
));

/// Raises `name`'s counter on one master to at least `combined` while
/// `owner` holds the lock there; false when it no longer does.
pub(crate) fn raise(
    scripts: &Scripts,
    session: &mut Session<'_>,
    name: &str,
    counter: &str,
    owner: &str,
    combined: u64,
) -> Result<bool> {
    let mut call = RAISE_TOKEN.call();
    call.key(name).key(counter).arg(owner).arg(combined.to_string());
    let (reply, acked) = call.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| {
        if e.to_string().contains("BADCOUNTER") {
            Error::bad_fencing_counter(name, counter)
        } else {
            Error::from_redis(name, e)
        }
    })?;
    session.note_replicated(acked);
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected("red_lock raise_token", &other)),
    }
}
