//! Re-entry, for every lock-like kind: which hold the calling thread has,
//! and taking one more guard of it.
//!
//! A hold belongs to a thread (its owner id names the thread) and its guards
//! never leave that thread, so the record of the thread's live holds is
//! thread-local, keyed by client, kind and name: no lock, nothing another
//! thread could see half-done. A finished hold no longer counts and is
//! removed by its last guard's release. The reentrant lock keeps its holds in its entry instead, where
//! its gate needs them, and shares the rest.
//!
//! A re-entry increments the count in Redis, so a call lost in transit is
//! not simply repeated: where the kind can read its count, the count says
//! whether it ran (the hold's guards plus one) or not (the guards), and
//! only then is it sent again, on a new connection. A re-entry that finds
//! the hold gone marks it lost, and the caller takes a new hold like anyone
//! else.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{LostReason, Result};
use crate::holds::hold::Hold;

struct Held {
    client: u128,
    /// The kind (its noun: the read and write sides differ).
    kind: &'static str,
    hold: Arc<Hold>,
}

thread_local! {
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's live hold of `name` as `kind` on `client`: not
/// finished, not known lost, and not being released.
pub(crate) fn current(client: u128, kind: &'static str, name: &str) -> Option<Arc<Hold>> {
    unfinished(client, kind, name).filter(|h| !h.is_lost() && !h.is_releasing())
}

/// The calling thread's latest unfinished hold of `name` as `kind`.
pub(crate) fn unfinished(client: u128, kind: &'static str, name: &str) -> Option<Arc<Hold>> {
    // `try_with` (here and below): a guard dropped during thread teardown
    // must not panic.
    HELD.try_with(|held| {
        held.borrow()
            .iter()
            .find(|h| h.client == client && h.kind == kind && &*h.hold.name == name)
            .filter(|h| !h.hold.is_finished())
            .map(|h| Arc::clone(&h.hold))
    })
    .ok()
    .flatten()
}

/// True when the calling thread has a newer hold of `hold`'s lock as
/// `kind`, under the same owner: the count in Redis is that hold's, which
/// `hold`'s guards must not touch. (A token's hold, released on whichever
/// thread, is never superseded by that thread's own.)
pub(crate) fn superseded(client: u128, kind: &'static str, hold: &Hold) -> bool {
    unfinished(client, kind, &hold.name).is_some_and(|h| h.id != hold.id && h.owner == hold.owner)
}

/// Records `hold` as the calling thread's hold of its lock as `kind`,
/// replacing any earlier one.
pub(crate) fn set(client: u128, kind: &'static str, hold: &Arc<Hold>) {
    let _ = HELD.try_with(|held| {
        let mut held = held.borrow_mut();
        held.retain(|h| !(h.client == client && h.kind == kind && h.hold.name == hold.name));
        held.push(Held { client, kind, hold: Arc::clone(hold) });
    });
}

/// Forgets the hold `id` (its last guard was released); a newer hold stays.
pub(crate) fn forget(id: u64) {
    let _ = HELD.try_with(|held| held.borrow_mut().retain(|h| h.hold.id != id));
}

/// What a kind's acquire script said to a re-entry.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reentry {
    /// Re-entered; with a token minted for a hold that had none, and
    /// whether the replicas asked for acknowledged it.
    Acquired { token: Option<u64>, replicated: Option<bool> },
    /// The owner's field is gone: the hold vanished unnoticed.
    Gone,
}

/// How a kind re-enters.
pub(crate) struct Reenter<F, C> {
    /// One re-entry script call.
    pub(crate) attempt: F,
    /// Reads the owner's count in Redis, to tell whether a re-entry whose
    /// reply was lost ran; `None` for a kind that cannot tell (it returns
    /// the error).
    pub(crate) count: Option<C>,
    /// The script extends the key's TTL to at least the lease.
    pub(crate) extends: bool,
    /// The attempt mints a token (its loss cannot be told from the count).
    pub(crate) mints: bool,
}

/// Re-enters `hold`, the thread's live hold: true with one more guard,
/// false when the hold vanished unnoticed (it is marked lost; the caller
/// cleans up and takes a new hold).
pub(crate) fn reenter<F, C>(hold: &Hold, lease_ms: u64, how: Reenter<F, C>) -> Result<bool>
where
    F: Fn() -> Result<Reentry>,
    C: FnOnce() -> Result<Option<u32>>,
{
    let Reenter { attempt, count, extends, mints } = how;
    let mut sent = Instant::now();
    let mut outcome = attempt();
    if let Err(e) = &outcome
        && e.is_transport()
        && !mints
        && let Some(count) = count
    {
        let guards = hold.guards();
        outcome = match count()? {
            Some(c) if c == guards + 1 => Ok(Reentry::Acquired { token: None, replicated: None }),
            Some(c) if c == guards => {
                sent = Instant::now();
                attempt()
            }
            None => Ok(Reentry::Gone),
            Some(_) => outcome,
        };
    }
    match outcome? {
        Reentry::Acquired { token, replicated } => {
            if let Some(token) = token {
                hold.set_token(token);
            }
            if replicated == Some(false) {
                hold.mark_unreplicated();
            }
            hold.add_guard();
            if extends {
                // The script never shortens the key's TTL on a re-entry.
                hold.extend_deadline(sent + Duration::from_millis(lease_ms));
            }
            Ok(true)
        }
        Reentry::Gone => {
            hold.mark_lost(LostReason::Gone);
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(id: u64, name: &str) -> Arc<Hold> {
        Hold::for_test(id, name, Instant::now())
    }

    #[test]
    fn a_thread_finds_its_live_hold_by_client_kind_and_name_until_it_ends() {
        let held = hold(1, "k");
        set(7, "lock", &held);
        assert_eq!(current(7, "lock", "k").map(|h| h.id), Some(1));
        assert!(current(8, "lock", "k").is_none(), "another client");
        assert!(current(7, "read lock", "k").is_none(), "another kind");
        assert!(current(7, "lock", "j").is_none(), "another name");
        held.mark_lost(LostReason::Gone);
        assert!(current(7, "lock", "k").is_none(), "a lost hold is not re-entered");
        assert!(unfinished(7, "lock", "k").is_some());
        forget(1);
        assert!(unfinished(7, "lock", "k").is_none());
    }

    #[test]
    fn a_newer_hold_supersedes_an_older_one() {
        let (old, new) = (hold(1, "s"), hold(2, "s"));
        set(7, "lock", &old);
        assert!(!superseded(7, "lock", &old));
        set(7, "lock", &new);
        assert!(superseded(7, "lock", &old));
        forget(1);
        assert_eq!(current(7, "lock", "s").map(|h| h.id), Some(2), "forgetting the old keeps the new");
        forget(2);
    }

    #[test]
    fn a_re_entry_adds_a_guard_or_finds_the_hold_gone() {
        let held = hold(1, "r");
        let how = |answer: Reentry| Reenter {
            attempt: move || Ok(answer),
            count: None::<fn() -> Result<Option<u32>>>,
            extends: true,
            mints: false,
        };
        let answer = Reentry::Acquired { token: Some(9), replicated: Some(false) };
        assert!(reenter(&held, 30_000, how(answer)).unwrap());
        assert_eq!((held.guards(), held.token(), held.is_replicated()), (2, Some(9), false));
        assert!(!reenter(&held, 30_000, how(Reentry::Gone)).unwrap());
        assert_eq!(held.lost_reason(), Some(LostReason::Gone));
    }

    #[test]
    fn a_lost_re_entry_reply_is_told_apart_by_the_count() {
        let held = hold(1, "c");
        let sent = std::cell::Cell::new(0);
        let attempt = || {
            sent.set(sent.get() + 1);
            if sent.get() > 1 {
                return Ok(Reentry::Gone);
            }
            // A reply lost on the way back: the script may have run.
            let dropped = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
            Err(crate::error::Error::redis(redis::RedisError::from(dropped)))
        };
        // The count says the first one ran: no second attempt.
        let how = Reenter { attempt, count: Some(|| Ok(Some(2))), extends: true, mints: false };
        assert!(reenter(&held, 30_000, how).unwrap());
        assert_eq!((sent.get(), held.guards()), (1, 2));
        // The count says it did not run: sent again, once.
        let how = Reenter { attempt, count: Some(|| Ok(Some(2))), extends: true, mints: false };
        sent.set(0);
        assert!(!reenter(&held, 30_000, how).unwrap(), "the second attempt found the hold gone");
        assert_eq!(sent.get(), 2);
    }
}
