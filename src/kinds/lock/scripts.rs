//! The reentrant lock's Lua scripts and their typed replies.
//!
//! Each script is a real file under `lua/lock/` whose header comment is its
//! contract. Calls go out as EVALSHA, falling back to EVAL on NOSCRIPT
//! (see `store/eval.rs`). Replies are decoded into small enums
//! here; a reply outside a contract becomes an `UnexpectedReply` error, never a
//! panic and never a raw integer leaking upward. Every call takes the
//! client's script settings ([`Scripts`]: replica acknowledgement, the
//! publish command) first.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::kinds::latch::Latch;
use crate::store::eval::{Call, LuaScript};
use crate::store::lanes::Session;
use crate::store::scripts::{Scripts, UNLOCK_MESSAGE, unexpected};

/// Outcome of `acquire.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Acquired or re-entered; with the fencing token minted, when asked.
    /// `replicated`: whether the replicas asked for acknowledged it (`None`
    /// when none were asked for).
    Acquired { token: Option<u64>, replicated: Option<bool> },
    /// Held by another owner, with that holder's remaining lease (`None` when
    /// the key has no TTL).
    Held { remaining: Option<Duration> },
    /// A re-entry found the lock free: the caller's hold vanished.
    Free,
}

/// Outcome of the release script (shared by the lock-like kinds).
pub(crate) use crate::kinds::family::release::Release;

/// Outcome of `handoff.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// The giving owner held nothing; nothing changed.
    NotOwner,
    /// The giving owner still holds other holds; nothing handed over.
    StillHeld,
    /// Released, not handed over: another client was woken for its turn.
    Released,
    /// The receiving owner now holds the lock.
    HandedOver,
    /// Nothing changed: Redisson waiters listen, so the lock goes through
    /// `release.lua`, which gives them their turns.
    Declined,
}

/// Outcome of `confirm.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirm {
    /// The owner holds the lock; `replicated`: whether the replicas asked
    /// for acknowledged it and every earlier write of the lock (`None` when
    /// none were asked for).
    Held { replicated: Option<bool> },
    /// The owner holds nothing there.
    Gone,
}

/// Outcome of `job_finish.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobFinish {
    /// The run no longer held the lock; nothing changed.
    NotOwner,
    /// Kept for the rest of the job's minimum hold time.
    Kept,
    /// Released: key deleted, unlock message published.
    Released,
}

static ACQUIRE: LuaScript = LuaScript::new(include_str!("../../../lua/lock/acquire.lua"));
static RELEASE: LuaScript = LuaScript::new(include_str!("../../../lua/lock/release.lua"));
static HANDOFF: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/latch.lua"),
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/lock/handoff.lua")
));
static RENEW: LuaScript = LuaScript::new(include_str!("../../../lua/lock/renew.lua"));
static CONFIRM: LuaScript = LuaScript::new(include_str!("../../../lua/lock/confirm.lua"));
static FORCE_UNLOCK: LuaScript = LuaScript::new(concat!(
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/common/force.lua"),
    include_str!("../../../lua/lock/force_unlock.lua")
));
static DEQUEUE: LuaScript = LuaScript::new(include_str!("../../../lua/lock/dequeue.lua"));
static JOB_FINISH: LuaScript = LuaScript::new(include_str!("../../../lua/lock/job_finish.lua"));

/// How long a client woken by a release has to claim the lock before other
/// waiters may take it: its wake-up and one round trip, with room for a
/// loaded machine.
const CLAIM_MS: &str = "1000";

/// How long a foreign turn keeps keyholder clients off a free lock, so that
/// a Redisson waiter woken by its `0` gets there first (see
/// `lua/lock/release.lua`): its wake-up and one round trip, with room for a
/// loaded machine; and the most a free lock can sit idle when the Redisson
/// waiter does not come, or comes and goes sooner.
const FOREIGN_TURN_MS: &str = "5";

/// How long a barging release keeps the free lock for the releasing client
/// (see `lua/lock/release.lua`, "Barging"): its own thread's turnaround, a
/// round trip, with room for a loaded machine; and the most a free lock can
/// sit idle when that client does not take it back.
const BARGE_HEAD_START_MS: &str = "2";

/// Added to the waiter queue's TTL beyond the longest wait of its waiters.
const QUEUE_SLACK_MS: u64 = 1000;

/// The waiter queue of one lock, as one client sees it: the keys and channel
/// prefix that decide whose turn it is (see `lua/lock/release.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Turns<'a> {
    /// The claim marker key.
    pub(crate) marker: &'a str,
    /// The queue key.
    pub(crate) queue: &'a str,
    /// The grants key.
    pub(crate) grants: &'a str,
    /// keyholder's listening channel (see `names::listening_channel`).
    pub(crate) listening: &'a str,
    /// The prefix of the lock's per-client wake channels.
    pub(crate) wake_prefix: &'a str,
    /// This client's id.
    pub(crate) client: &'a str,
}

impl<'a> Turns<'a> {
    /// The queue of the lock whose keys are `keys`, for the client `client`.
    pub(crate) fn of(keys: &'a crate::names::LockKeys, client: &'a str) -> Turns<'a> {
        Turns {
            marker: &keys.marker,
            queue: &keys.queue,
            grants: &keys.grants,
            listening: &keys.listening,
            wake_prefix: &keys.wake_prefix,
            client,
        }
    }
}

/// What `acquire.lua` needs for one attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireArgs<'a> {
    pub(crate) name: &'a str,
    pub(crate) turns: Turns<'a>,
    /// The fencing-token counter, to mint a token.
    pub(crate) token_key: Option<&'a str>,
    pub(crate) lease_ms: u64,
    pub(crate) owner: &'a str,
    /// A new hold, not a re-entry: the owner's count is set to 1. A
    /// re-entry succeeds only onto the owner's existing field.
    pub(crate) fresh: bool,
    /// The caller listens on its wake channel: if refused, its client
    /// joins the queue.
    pub(crate) enqueue: bool,
    /// The caller takes the lock handed over by a release (unfenced): the
    /// ticket of its wait, never used by this client for another wait, which
    /// the grant's message carries back (`Some(ticket)`, above 0).
    pub(crate) grant_ticket: Option<u64>,
    /// Migration mode: a string key at the name is a hand-rolled lock's
    /// holder (refused with its PTTL), not a `WRONGTYPE` error.
    pub(crate) legacy: bool,
}

/// What `handoff.lua` needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandoffArgs<'a> {
    pub(crate) name: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) turns: Turns<'a>,
    /// The receiving owner's lease.
    pub(crate) lease_ms: u64,
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
    pub(crate) latch: Latch<'a>,
}

/// What `release.lua` needs to release one hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseArgs<'a> {
    pub(crate) name: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) turns: Turns<'a>,
    /// The TTL re-applied while holds remain.
    pub(crate) lease_ms: u64,
    pub(crate) owner: &'a str,
    /// Needed only when a retry could release a second hold.
    pub(crate) latch: Option<Latch<'a>>,
    /// For how much longer this client listens on the lock's unlock channel
    /// itself (zero when it does not).
    pub(crate) listening: Duration,
    /// The barging window (`ClientBuilder::barging_window`): while the
    /// queue's front client has waited less, the lock is left free for
    /// whoever takes it first rather than handed over. Zero: handed over.
    pub(crate) barging: Duration,
}

/// One acquisition attempt; mints a fencing token when `token_key` is set.
pub(crate) fn acquire(
    scripts: &Scripts,
    session: &mut Session<'_>,
    args: &AcquireArgs<'_>,
) -> Result<Acquire> {
    let AcquireArgs { name, turns, token_key, lease_ms, owner, fresh, enqueue, grant_ticket, legacy } = *args;
    let mut invocation = ACQUIRE.call();
    invocation.key(name).key(turns.marker);
    invocation.arg(lease_ms).arg(owner).arg(u8::from(fresh));
    // A caller that does not listen never queues: the queue's keys and
    // arguments are left off (the script's optional tail), which saves
    // Redis seven arguments on the most common call of all; so is the
    // client id when the script derives it from the owner id (a token's
    // owner id may have been made by another client).
    if enqueue || legacy || token_key.is_some() {
        invocation.arg(turns.client);
        invocation.key(turns.queue).key(turns.grants);
        invocation.arg(u8::from(enqueue)).arg(QUEUE_SLACK_MS).arg(grant_ticket.unwrap_or(0));
    } else if client_of(owner) != Some(turns.client) {
        invocation.arg(turns.client);
    }
    if legacy {
        invocation.arg(1);
    }
    if let Some(token_key) = token_key {
        invocation.key(token_key);
    }
    let (reply, acked) = invocation.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| acquire_error(name, token_key, e))?;
    session.note_replicated(acked);
    let refused = |ms: i64| match ms {
        -2 if !fresh => Some(Acquire::Free),
        -1.. => Some(Acquire::Held { remaining: u64::try_from(ms).ok().map(Duration::from_millis) }),
        _ => None,
    };
    let outcome = match (&reply, token_key) {
        (Value::Nil, None) => Some(Acquire::Acquired { token: None, replicated: acked }),
        (Value::Int(ms), None) => refused(*ms),
        (Value::Array(items), Some(_)) => match items.as_slice() {
            [Value::Int(-1), token] => {
                parse_token(token).map(|t| Acquire::Acquired { token: Some(t), replicated: acked })
            }
            [Value::Int(ms), Value::Int(-1)] => refused(*ms),
            _ => None,
        },
        _ => None,
    };
    outcome.ok_or_else(|| unexpected("acquire", &reply))
}

/// Releases one hold; with a latch, a retry with the same latch key
/// returns the first outcome instead of releasing twice. A barging release
/// (see `ReleaseArgs::barging`) also returns the client id of the queue's
/// front client, owed a wake once the head start ends (see
/// `wait/owed.rs`).
pub(crate) fn release(
    scripts: &Scripts,
    session: &mut Session<'_>,
    args: &ReleaseArgs<'_>,
) -> Result<(Release, Option<String>)> {
    let ReleaseArgs { name, channel, turns, lease_ms, owner, latch, listening, barging } = *args;
    let mut invocation = RELEASE.call();
    invocation.key(name).key(channel).key(turns.marker).key(turns.queue).key(turns.grants);
    invocation.key(turns.listening);
    invocation.arg(lease_ms).arg(owner).arg(crate::lease::millis_ceil(listening));
    // What only passing the lock on reads goes out as one argument, which
    // the common release never parses: Redis's cost of a call grows with
    // its argument count.
    // Packed as it is written, without `format!` (on every release).
    let mut window_ms = itoa::Buffer::new();
    let window_ms = window_ms.format(crate::lease::millis_ceil(barging));
    invocation.arg_joined(&[
        CLAIM_MS,
        FOREIGN_TURN_MS,
        window_ms,
        BARGE_HEAD_START_MS,
        turns.client,
        turns.wake_prefix,
    ]);
    // The publish command and the latch are the optional tail.
    if let Some(latch) = latch {
        invocation.key(latch.key).arg(scripts.publish());
        invocation.arg(latch.ttl_ms).arg(latch.request).arg(u8::from(latch.retry));
    } else if scripts.sharded() {
        invocation.arg(scripts.publish());
    }
    let (reply, acked) = invocation.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(name, e))?;
    session.note_replicated(acked);
    match reply {
        Value::Nil => Ok((Release::NotOwner, None)),
        Value::Int(0) => Ok((Release::StillHeld, None)),
        Value::Int(1) => Ok((Release::Released, None)),
        Value::BulkString(front) => match String::from_utf8(front) {
            Ok(front) => Ok((Release::Released, Some(front))),
            Err(e) => Err(unexpected("release", &Value::BulkString(e.into_bytes()))),
        },
        other => Err(unexpected("release", &other)),
    }
}

/// How long a barging release keeps the lock for its own client:
/// [`BARGE_HEAD_START_MS`] as a duration (a unit test keeps them equal).
pub(crate) const BARGE_HEAD_START: Duration = Duration::from_millis(2);

/// Releases the last hold and hands the lock to another owner of this
/// client in one call, unless another client was woken for its turn.
pub(crate) fn handoff(
    scripts: &Scripts,
    session: &mut Session<'_>,
    args: &HandoffArgs<'_>,
) -> Result<Handoff> {
    let HandoffArgs { name, channel, turns, lease_ms, from, to, latch } = *args;
    let mut invocation = HANDOFF.call();
    invocation.key(name).key(channel).key(turns.marker).key(latch.key).key(turns.listening);
    invocation.key(turns.grants);
    invocation.arg(UNLOCK_MESSAGE).arg(lease_ms).arg(from).arg(to).arg(scripts.publish()).arg(latch.ttl_ms);
    invocation.arg(latch.request).arg(u8::from(latch.retry)).arg(turns.client);
    let (reply, acked) = invocation.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(name, e))?;
    session.note_replicated(acked);
    match reply {
        Value::Nil => Ok(Handoff::NotOwner),
        Value::Int(0) => Ok(Handoff::StillHeld),
        Value::Int(1) => Ok(Handoff::Released),
        Value::Int(2) => Ok(Handoff::HandedOver),
        Value::Int(3) => Ok(Handoff::Declined),
        other => Err(unexpected("handoff", &other)),
    }
}

/// Takes this client out of the lock's queue, and passes on its turn if
/// it was woken for one.
pub(crate) fn dequeue(
    scripts: &Scripts,
    session: &mut Session<'_>,
    name: &str,
    channel: &str,
    turns: Turns<'_>,
    owner: &str,
) -> Result<()> {
    let mut invocation = DEQUEUE.call();
    invocation.key(turns.queue).key(turns.grants).key(turns.marker).key(name).key(channel);
    invocation.arg(turns.client).arg(owner).arg(UNLOCK_MESSAGE).arg(scripts.publish());
    let (reply, _) = invocation.invoke(session, false)?;
    reply.map_err(Error::redis)?;
    Ok(())
}

/// Renews the `(key, owner)` pairs in one call; `true` = still held.
/// `declared`: the lock keys go out as the script's `KEYS`, as they
/// must unless the session is on a cluster node that serves all of
/// them (see `lua/lock/renew.lua`).
pub(crate) fn renew(
    scripts: &Scripts,
    session: &mut Session<'_>,
    holds: &[(&str, &str)],
    lease_ms: u64,
    declared: bool,
) -> Result<Vec<bool>> {
    let (reply, acked) = renew_call(holds, lease_ms, declared).invoke(session, scripts.acks())?;
    let reply = reply.map_err(Error::redis)?;
    session.note_replicated(acked);
    renewed(reply, holds.len())
}

/// The renewal call of [`renew`], to be sent on a session or on a
/// connection of its own (`kinds/family/silent.rs`).
pub(crate) fn renew_call(holds: &[(&str, &str)], lease_ms: u64, declared: bool) -> Call<'static> {
    let mut invocation = RENEW.call();
    invocation.arg(lease_ms);
    for (key, owner) in holds {
        if declared {
            invocation.key(*key).arg(*owner);
        } else {
            invocation.arg(*key).arg(*owner);
        }
    }
    invocation
}

/// Per hold, whether [`renew_call`]'s `reply` (for `holds` holds) says it
/// is still held.
pub(crate) fn renewed(reply: Value, holds: usize) -> Result<Vec<bool>> {
    match reply {
        Value::Array(items) if items.len() == holds => items
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

/// Confirms that `owner` holds `name`, a lock of the hash layout (the
/// reentrant or the fair lock's), with a write the replicas receive after
/// every earlier write of the lock, acknowledged when the client asks for
/// acknowledgements: so a grant or hand-off made by another connection, or
/// an acquisition that ran before a failover, is known to be on the
/// replicas, or on the current primary at all.
pub(crate) fn confirm(
    scripts: &Scripts,
    session: &mut Session<'_>,
    name: &str,
    owner: &str,
) -> Result<Confirm> {
    let mut invocation = CONFIRM.call();
    invocation.key(name).arg(owner);
    let (reply, acked) = invocation.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(name, e))?;
    session.note_replicated(acked);
    match reply {
        Value::Int(1) => Ok(Confirm::Held { replicated: acked }),
        Value::Int(0) => Ok(Confirm::Gone),
        other => Err(unexpected("confirm", &other)),
    }
}

/// Deletes the lock whoever holds it; `true` when there was one. With
/// `channel` (the reentrant lock's), its waiters are told; without (the
/// spin lock's, as Redisson's), nothing is published.
pub(crate) fn force_unlock(
    scripts: &Scripts,
    session: &mut Session<'_>,
    name: &str,
    channel: Option<&str>,
) -> Result<bool> {
    let mut invocation = FORCE_UNLOCK.call();
    invocation.key(name);
    if let Some(channel) = channel {
        invocation.key(channel).arg(UNLOCK_MESSAGE).arg(scripts.publish());
    }
    let (reply, _) = invocation.invoke(session, false)?;
    let reply = reply.map_err(|e| Error::from_redis(name, e))?;
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected("force_unlock", &other)),
    }
}

/// Ends a run-once job's hold: kept for `keep` more (shortened, never
/// lengthened), or released now when `keep` is zero.
pub(crate) fn job_finish(
    scripts: &Scripts,
    session: &mut Session<'_>,
    name: &str,
    channel: &str,
    owner: &str,
    keep: Duration,
) -> Result<JobFinish> {
    let mut invocation = JOB_FINISH.call();
    invocation.key(name).key(channel);
    invocation.arg(owner).arg(crate::lease::millis_ceil(keep)).arg(UNLOCK_MESSAGE).arg(scripts.publish());
    let (reply, acked) = invocation.invoke(session, scripts.acks())?;
    let reply = reply.map_err(|e| Error::from_redis(name, e))?;
    session.note_replicated(acked);
    match reply {
        Value::Int(0) => Ok(JobFinish::NotOwner),
        Value::Int(1) => Ok(JobFinish::Kept),
        Value::Int(2) => Ok(JobFinish::Released),
        other => Err(unexpected("job_finish", &other)),
    }
}

/// The client id part of an owner id `<client-uuid>:<n>`, as `acquire.lua`
/// derives it when the caller sends none.
fn client_of(owner: &str) -> Option<&str> {
    owner.rsplit_once(':').map(|(client, _)| client)
}

/// A fencing token as `acquire.lua` returns it: the counter's decimal string,
/// exact over the whole range (a Lua number would round past 2^53).
fn parse_token(value: &Value) -> Option<u64> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok().filter(|t| *t > 0),
        _ => None,
    }
}

/// Maps an error of `acquire.lua`, telling a bad fencing counter from a bad
/// lock key.
fn acquire_error(name: &str, token_key: Option<&str>, e: redis::RedisError) -> Error {
    let text = e.to_string();
    if text.contains("LEGACYNOTTL") {
        return Error::legacy_lock_without_ttl(name);
    }
    match token_key {
        Some(key) if text.contains("BADCOUNTER") => Error::bad_fencing_counter(name, key),
        Some(key) if text.contains("WRONGTYPE") && text.contains("fencing counter") => {
            Error::wrong_type(name, key)
        }
        _ => Error::from_redis(name, e),
    }
}

#[cfg(test)]
mod tests {
    use super::{BARGE_HEAD_START, BARGE_HEAD_START_MS, client_of};

    #[test]
    fn the_head_start_the_script_is_sent_is_the_one_the_client_waits() {
        assert_eq!(BARGE_HEAD_START.as_millis().to_string(), BARGE_HEAD_START_MS);
    }

    #[test]
    fn the_client_id_is_the_owner_ids_part_before_its_last_colon() {
        let client = "8c1f0a4e-1111-4000-8000-000000000001";
        assert_eq!(client_of(&format!("{client}:7")), Some(client));
        assert_eq!(client_of(&format!("{client}:{}", 1_u64 << 62)), Some(client));
        assert_eq!(client_of("a:b:1"), Some("a:b"));
        assert_eq!(client_of("no-thread"), None);
    }
}
