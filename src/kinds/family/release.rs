//! Releasing one guard's share of a hold, for every lock-like kind: what
//! the release script's answer means for the hold, written once.
//!
//! The kind sends its script (latched where a retry could release twice,
//! see `kinds/latch.rs`); whatever Redis answers, the hold's local state is
//! cleared with its last guard, so renewal stops and the thread's next
//! acquisition is a fresh one: a lock still there expires with its lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Context;
use crate::error::{Error, LostReason, Result};
use crate::holds::hold::Hold;
use crate::kinds::family::reentry;
use crate::observe;

/// What a release script said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// One hold released; others remain.
    StillHeld,
    /// The last hold released.
    Released,
    /// The owner held nothing there (another owner may hold the lock).
    NotOwner,
    /// There was no lock at all (it expired or was force-unlocked).
    Gone,
}

/// How one kind releases.
pub(crate) struct Releasing<N, S, F> {
    /// Whether the calling thread holds a newer hold of the lock: the count
    /// in Redis is that hold's. Asked only of a hold known lost.
    pub(crate) superseded: N,
    /// A partial release re-applies the lease to the key's TTL.
    pub(crate) renews: bool,
    /// Sends the release (`last`: the hold's last guard); its outcome, and
    /// whether that is a retry's after a lost reply (whose `NotOwner` most
    /// likely means the first attempt released the lock).
    pub(crate) send: S,
    /// Ends the hold locally: no more renewal, no more re-entry.
    pub(crate) finish: F,
}

/// Releases one guard's share of `hold`.
pub(crate) fn release<N, S, F>(hold: &Arc<Hold>, how: Releasing<N, S, F>) -> Result<()>
where
    N: FnOnce() -> bool,
    S: FnOnce(bool) -> (Result<Release>, bool),
    F: Fn(),
{
    let Releasing { superseded, renews, send, finish } = how;
    if let Some(reason) = hold.lost_reason()
        && superseded()
    {
        // The thread locked again after this hold was lost: leave Redis,
        // whose count is the new hold's, alone.
        if hold.drop_guard() == 0 {
            finish();
        }
        return Err(Error::lock_lost(&hold.name, reason));
    }
    let last = hold.guards() == 1;
    if last {
        hold.start_release();
    }
    // A last release that Redis finds still held ends the hold anyway
    // (below): the clock is read for nested ones only.
    let sent = (!last).then(Instant::now);
    let (outcome, retried) = send(last);
    let guards_left = hold.drop_guard();
    let result = match outcome {
        Ok(Release::StillHeld) => {
            if renews && let Some(sent) = sent {
                hold.set_deadline(sent + Duration::from_millis(hold.lease_ms));
            }
            // With no guard left, Redis counts more holds than this client
            // has guards (an acquire whose reply was lost): the hold ends
            // below, so the orphaned count expires with the lease.
            Ok(())
        }
        Ok(Release::Released) => {
            if guards_left > 0 {
                // Redis counted fewer holds than this thread has guards.
                hold.mark_lost(LostReason::ReleaseFoundGone);
            }
            finish();
            Ok(())
        }
        // The first attempt's reply was lost, and it did release.
        Ok(Release::NotOwner) if retried && hold.lost_reason().is_none() => {
            finish();
            Ok(())
        }
        Ok(outcome @ (Release::NotOwner | Release::Gone)) => Err(not_owner(hold, outcome == Release::Gone)),
        Err(e) => Err(e),
    };
    if guards_left == 0 {
        // Whatever Redis did: the lock, if still there, expires with its
        // lease.
        finish();
    }
    result
}

/// Releases one guard's share of `hold`, a hold of a kind whose live holds
/// are in the thread's registry (`reentry.rs`) as `noun`.
pub(crate) fn release_registered<S>(
    ctx: Context<'_>,
    noun: &'static str,
    hold: &Arc<Hold>,
    renews: bool,
    send: S,
) -> Result<()>
where
    S: FnOnce(bool) -> (Result<Release>, bool),
{
    let client = ctx.uuid();
    release(
        hold,
        Releasing {
            superseded: || reentry::superseded(client, noun, hold),
            renews,
            send,
            finish: || end(ctx, hold, || reentry::forget(hold.id)),
        },
    )
}

/// Ends a hold locally, once: no more renewal, no more listening for its
/// lock's unlocks; `then` clears the kind's own record of it.
pub(crate) fn end(ctx: Context<'_>, hold: &Hold, then: impl FnOnce()) {
    if hold.finish() {
        observe::hold_ended(&hold.name, hold.acquired_at());
        ctx.holds().forget(hold.id);
        then();
    }
}

/// The error for a release that found `hold` gone (`gone`: no lock at all);
/// records the loss.
pub(crate) fn not_owner(hold: &Hold, gone: bool) -> Error {
    let known = hold.lost_reason();
    hold.mark_lost(LostReason::ReleaseFoundGone);
    match known {
        Some(reason) => Error::lock_lost(&hold.name, reason),
        None if gone => Error::lock_lost(&hold.name, LostReason::ReleaseFoundGone),
        None => Error::not_owner(&hold.name),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::Instant;

    use super::*;

    fn hold(guards: u32) -> Arc<Hold> {
        let hold = Hold::for_test(1, "k", Instant::now());
        for _ in 1..guards {
            hold.add_guard();
        }
        hold
    }

    /// Releases one guard of `hold` with the script answering `outcome`
    /// (`retried`: a retry's answer); whether it was sent, and whether the
    /// hold was ended.
    fn release_with(hold: &Arc<Hold>, outcome: Result<Release>, retried: bool) -> (Result<()>, bool, bool) {
        let (sent, ended) = (Cell::new(false), Cell::new(false));
        let released = release(
            hold,
            Releasing {
                superseded: || true,
                renews: true,
                send: |_| {
                    sent.set(true);
                    (outcome, retried)
                },
                finish: || ended.set(true),
            },
        );
        (released, sent.get(), ended.get())
    }

    #[test]
    fn a_nested_release_keeps_the_hold_and_the_last_ends_it() {
        let held = hold(2);
        assert!(matches!(release_with(&held, Ok(Release::StillHeld), false), (Ok(()), true, false)));
        assert!(matches!(release_with(&held, Ok(Release::Released), false), (Ok(()), true, true)));
        assert!(!held.is_lost());
    }

    #[test]
    fn a_release_that_finds_the_lock_gone_with_guards_left_marks_the_hold_lost() {
        let held = hold(2);
        assert!(matches!(release_with(&held, Ok(Release::Released), false), (Ok(()), true, true)));
        assert_eq!(held.lost_reason(), Some(LostReason::ReleaseFoundGone));
    }

    #[test]
    fn not_owner_is_an_error_unless_it_answers_a_retry_of_a_release_that_ran() {
        let (released, _, ended) = release_with(&hold(1), Ok(Release::NotOwner), true);
        assert!(released.is_ok() && ended);
        let (released, _, ended) = release_with(&hold(1), Ok(Release::NotOwner), false);
        assert!(released.is_err_and(|e| e.is_not_owner()) && ended);
        let (released, _, _) = release_with(&hold(1), Ok(Release::Gone), false);
        assert!(released.is_err_and(|e| e.is_lock_lost()));
    }

    #[test]
    fn a_lost_hold_superseded_by_a_newer_one_is_released_without_redis() {
        let held = hold(1);
        held.mark_lost(LostReason::RenewalRefused);
        let (released, sent, ended) = release_with(&held, Ok(Release::Released), false);
        assert!(released.is_err_and(|e| e.is_lock_lost()));
        assert!(!sent && ended);
    }

    #[test]
    fn a_failed_release_ends_the_last_guard_s_hold_whatever_redis_did() {
        let (released, _, ended) = release_with(&hold(1), Err(Error::unreachable()), false);
        assert!(released.is_err() && ended);
        let (_, _, ended) = release_with(&hold(2), Err(Error::unreachable()), false);
        assert!(!ended);
    }
}
