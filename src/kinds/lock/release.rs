//! Releasing a hold: the last guard's release, a nested one, or a hand-off.
//!
//! A release of a thread's last hold runs `release.lua` unlatched: once the
//! owner's field is gone a retry releases nothing, so a lost reply is simply
//! retried. A nested release (other holds remain) reads the owner's count
//! after a lost reply, as a re-entry does, and is sent again only when it
//! did not run. A hand-off (`handoff.lua`, the lock passed straight to a
//! queued thread of this client) carries an unlock latch, so its retry
//! returns the first outcome instead of handing over twice. Whatever Redis answers, the client's local
//! state is cleared: renewal stops and the gate passes on.

use std::sync::Arc;
use std::time::Instant;

use crate::client::Context;
use crate::error::{Error, Result};
use crate::holds::hold::{Acquisition, Hold};
use crate::kinds::family::{self, fresh, fresh::Keeping};
use crate::kinds::latch::Latch;
use crate::kinds::lock::renewal::HashRenewal;
use crate::kinds::lock::scripts::{self, Handoff, HandoffArgs, Release, ReleaseArgs, Turns};
use crate::store::lanes::Session;
use crate::wait::entry::{Entry, Successor};

/// Releases one of several holds of `hold`'s thread on `entry`'s lock. A
/// reply lost in transit is told apart by the count, as a re-entry's is
/// (`kinds/family/reentry.rs`): one fewer than the hold's guards, it ran;
/// as many, it did not, and it is sent again, once, on a fresh connection;
/// any other count (or none) answers that the hold is not what this thread
/// thinks, and the error stands. No unlock latch: the latch's key, written
/// once per nested release, cost Redis more than the release itself.
fn release_nested(ctx: Context<'_>, entry: &Entry, hold: &Hold) -> Result<Release> {
    let name = &entry.keys.name;
    let args = release_args(ctx, entry, &hold.owner, hold.lease_ms, None, true);
    let release = |conn: &mut Session<'_>| {
        let (outcome, _) = scripts::release(ctx.calls().scripts(), conn, &args)?;
        check_replicated(ctx, name, conn.replicated()).map(|()| outcome)
    };
    let first = ctx.calls().with_conn(name, release);
    if !matches!(&first, Err(e) if e.is_transport()) {
        return first;
    }
    let guards = hold.guards();
    let mut hget = redis::cmd("HGET");
    hget.arg(&**name).arg(&hold.owner);
    let count = ctx.calls().with_live_conn(name, |conn| {
        conn.query::<Option<u32>>(&hget)?.map_err(|e| Error::from_redis(name, e))
    });
    match count {
        Ok(Some(c)) if c.checked_add(1) == Some(guards) => Ok(Release::StillHeld),
        Ok(Some(c)) if c == guards => ctx.calls().with_conn(name, release),
        _ => first,
    }
}

/// Releases the last hold of `owner` on `entry`'s lock. This needs no
/// latch: once the owner's field is gone a retry releases nothing, so it
/// is retried once, unlatched, if the first reply was lost. Returns the
/// outcome and whether it is the retry's (whose `NotOwner` most likely
/// means the first attempt released the lock).
///
/// A barging release (see `ClientBuilder::barging_window`) leaves the lock
/// to this client for a head start and owes the queue's front client a
/// wake when it ends (`wait/owed.rs`); any other release settles what an
/// earlier one owed.
fn release_last(ctx: Context<'_>, entry: &Arc<Entry>, owner: &str, lease_ms: u64) -> (Result<Release>, bool) {
    let args = release_args(ctx, entry, owner, lease_ms, None, true);
    let release = |conn: &mut Session<'_>| {
        let sent = Instant::now();
        let (outcome, front) = scripts::release(ctx.calls().scripts(), conn, &args)?;
        match front {
            Some(front) => ctx.waits().owed().owe(entry, front, sent + scripts::BARGE_HEAD_START),
            None => ctx.waits().owed().settle(&entry.keys.name),
        }
        check_replicated(ctx, &entry.keys.name, conn.replicated()).map(|()| outcome)
    };
    match ctx.calls().with_conn(&entry.keys.name, release) {
        Err(e) if e.is_transport() => (ctx.calls().with_conn(&entry.keys.name, release), true),
        outcome => (outcome, false),
    }
}

/// One unlatched release attempt, to give back what an acquire whose
/// reply was lost may have taken. It never barges: nobody here takes the
/// lock back, so it goes to the next queued client at once.
pub(crate) fn release_orphan(ctx: Context<'_>, entry: &Entry, owner: &str, lease_ms: u64) -> Result<Release> {
    let args = release_args(ctx, entry, owner, lease_ms, None, false);
    ctx.calls()
        .with_live_conn(&entry.keys.name, |conn| scripts::release(ctx.calls().scripts(), conn, &args))
        .map(|(outcome, _)| outcome)
}

/// What `release.lua` needs to release one hold of `owner` on `entry`'s
/// lock; `barges`: within the client's barging window, the lock may be left
/// free for this client to take back (see `ClientBuilder::barging_window`).
fn release_args<'a>(
    ctx: Context<'a>,
    entry: &'a Entry,
    owner: &'a str,
    lease_ms: u64,
    latch: Option<Latch<'a>>,
    barges: bool,
) -> ReleaseArgs<'a> {
    ReleaseArgs {
        name: &entry.keys.name,
        channel: &entry.keys.channel,
        turns: Turns::of(&entry.keys, ctx.id()),
        lease_ms,
        owner,
        latch,
        listening: ctx.waits().subscribers().listening_for(&entry.keys.channel),
        barging: if barges { ctx.config().barging_window } else { std::time::Duration::ZERO },
    }
}

/// A release's replica acknowledgement (`None`: none asked for): an error
/// when the client requires it, a warning otherwise. The release itself
/// happened on the primary either way.
fn check_replicated(ctx: Context<'_>, name: &str, replicated: Option<bool>) -> Result<()> {
    if replicated != Some(false) {
        return Ok(());
    }
    if ctx.config().replica_acks_required {
        return Err(Error::replica_acks(name));
    }
    log::warn!("keyholder: lock '{name}' released, but not acknowledged by the replicas");
    Ok(())
}

/// Releases one guard's share of `hold`: the last guard's hands the lock
/// to a queued thread of this client when it may (see `hand_over`).
pub(crate) fn release(ctx: Context<'_>, entry: &Arc<Entry>, hold: &Arc<Hold>) -> Result<()> {
    let superseded = || entry.has_newer_hold(hold.thread, hold.id);
    if hold.lost_reason().is_none() || !superseded() {
        if hold.guards() == 1 {
            hold.start_release();
        }
        if hold.guards() == 1
            && hold.token().is_none()
            && let Some(successor) = entry.reserve_successor(hold.id, ctx.config().fairness_window)
        {
            return hand_over(ctx, entry, hold, successor);
        }
    }
    family::release::release(
        hold,
        family::release::Releasing {
            superseded,
            renews: true,
            send: |last| {
                if last {
                    release_last(ctx, entry, &hold.owner, hold.lease_ms)
                } else {
                    (release_nested(ctx, entry, hold), false)
                }
            },
            finish: || finish(ctx, entry, hold),
        },
    )
}

/// Releases the last guard of `hold` by handing the lock to `successor`,
/// a queued thread of this client, in one script call. If another
/// client was woken for its turn the script releases instead, and the
/// successor contends in Redis like any waiter.
fn hand_over(ctx: Context<'_>, entry: &Arc<Entry>, hold: &Arc<Hold>, successor: Successor) -> Result<()> {
    let sent = Instant::now();
    let outcome = ctx.calls().run_latched(&entry.keys.name, hold.thread, true, |conn, latch| {
        let args = HandoffArgs {
            name: &entry.keys.name,
            channel: &entry.keys.channel,
            turns: Turns::of(&entry.keys, ctx.id()),
            lease_ms: successor.lease_ms,
            from: &hold.owner,
            to: &successor.owner,
            latch,
        };
        let outcome = scripts::handoff(ctx.calls().scripts(), conn, &args)?;
        Ok((outcome, conn.replicated()))
    });
    hold.drop_guard();
    let name = &entry.keys.name;
    let result = match outcome {
        Ok((Handoff::HandedOver, Some(false))) if ctx.config().replica_acks_required => {
            // Not on the replicas, and the successor must not be handed
            // a hold its client refuses. It takes the gate instead and
            // acquires afresh (the script finds its owner's count and
            // sets it to 1): that acquisition's own WAIT decides, and an
            // unacknowledged one is given back, as any.
            entry.finish_handoff(None);
            Err(Error::replica_acks(name))
        }
        Ok((Handoff::HandedOver, replicated)) => {
            let Successor { thread, owner, lease, lease_ms, .. } = successor;
            let acquisition = Acquisition { owner, thread, lease, lease_ms, token: None, sent };
            let handed =
                Arc::new(Hold::new(ctx.holds().next_id(), Arc::clone(name), acquisition, ctx.id(), "lock"));
            if replicated == Some(false) {
                // The hand-off is the new hold's acquisition: its
                // acknowledgement is the hold's.
                log::warn!("keyholder: lock '{name}' handed over, but not acknowledged by the replicas");
                handed.mark_unreplicated();
            }
            fresh::keep(ctx, &handed, keeping(ctx, entry));
            entry.finish_handoff(Some(handed));
            Ok(())
        }
        Ok((Handoff::Released | Handoff::StillHeld, replicated)) => {
            entry.finish_handoff(None);
            check_replicated(ctx, name, replicated)
        }
        Ok((Handoff::Declined, _)) => {
            // Redisson waiters listen: the lock goes through release.lua,
            // which gives them their turns, and then the successor
            // contends in Redis. Not before: while this hold lives, the
            // successor must not act on the gate (it gives back a grant
            // that arrived late for this hold's owner, see `Lock::contend`).
            let released = match release_last(ctx, entry, &hold.owner, hold.lease_ms) {
                (Ok(Release::Released | Release::StillHeld), _) => Ok(()),
                (Ok(Release::NotOwner), true) if hold.lost_reason().is_none() => Ok(()),
                (Ok(Release::NotOwner | Release::Gone), _) => Err(family::release::not_owner(hold, false)),
                (Err(e), _) => Err(e),
            };
            entry.finish_handoff(None);
            released
        }
        Ok((Handoff::NotOwner, _)) => {
            entry.finish_handoff(None);
            Err(family::release::not_owner(hold, false))
        }
        Err(e) => {
            entry.finish_handoff(None);
            Err(e)
        }
    };
    finish(ctx, entry, hold);
    result
}

/// How a new hold of `entry`'s lock is kept: renewed with the hash
/// layout's renewer, and listened for on its unlock channel (see
/// `holds/foreign.rs`); a loss found there wakes the lock's local waiters.
pub(crate) fn keeping(ctx: Context<'_>, entry: &Arc<Entry>) -> Keeping {
    Keeping {
        renew: HashRenewal::of(ctx),
        renew_watchdog: None,
        channel: Some(Arc::clone(&entry.keys.channel)),
        on_lost: Some(Arc::clone(entry) as _),
    }
}

/// Ends a hold locally: no more renewal, the gate passes on.
fn finish(ctx: Context<'_>, entry: &Entry, hold: &Arc<Hold>) {
    family::release::end(ctx, hold, || entry.release_gate(hold.id));
}
