//! [`Election::observe`]: leadership changes told on a channel, from two
//! [`UnlockWatch`]es (the lock's unlock channel, on which a resignation is
//! published, and the election's, on which a new leader announces its
//! term) and the lease of the leader (a leader that dies publishes
//! nothing). Every message makes the observer read the leader from Redis
//! and report what changed, so a lost or reordered message costs nothing
//! but a late report. Each watch has a thread, because a thread can wait on
//! one watch only; they share the state and report under one lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::{Election, Leader, elected_channel};
use crate::admin::{LockKind, UnlockWatch};
use crate::error::Result;
use crate::names;

/// A change of an election's leadership, from [`Election::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeadershipChange {
    /// A leader holds the election in a new term (or, as the first
    /// change, holds it already).
    Elected(Leader),
    /// Nobody leads any more: the leader of `term` resigned, or its lease
    /// ran out.
    Vacated {
        /// The term that ended.
        term: u64,
    },
}

/// How long a listener waits, while nobody leads, before it looks whether
/// the receiver was dropped (it reads nothing from Redis then).
const IDLE: Duration = Duration::from_secs(1);

/// What the two listeners share.
struct Shared {
    election: Election,
    tx: Sender<LeadershipChange>,
    /// The last leader reported, and when its lease ends (or when to read
    /// again after a failed read).
    state: Mutex<(Option<Leader>, Option<Instant>)>,
    closed: AtomicBool,
}

/// The leadership changes of one election, from [`Election::observe`]: a
/// crossbeam [`Receiver`] (it derefs to one: `recv`, `recv_timeout`,
/// `iter`, `select!`). Dropping it stops its listeners within a second.
pub struct LeadershipChanges {
    rx: Receiver<LeadershipChange>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LeadershipChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeadershipChanges")
            .field("election", &self.shared.election.name())
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for LeadershipChanges {
    type Target = Receiver<LeadershipChange>;

    fn deref(&self) -> &Receiver<LeadershipChange> {
        &self.rx
    }
}

impl Drop for LeadershipChanges {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
    }
}

pub(super) fn start(election: Election) -> Result<LeadershipChanges> {
    let name = election.name().to_owned();
    let client = election.client.clone();
    let unlocks = client.watch_channel(&name, names::unlock_channel(&name), LockKind::Reentrant)?;
    let elected = client.watch_channel(&name, elected_channel(&name), LockKind::Reentrant)?;
    let (tx, rx) = crossbeam_channel::unbounded();
    let shared =
        Arc::new(Shared { election, tx, state: Mutex::new((None, None)), closed: AtomicBool::new(false) });
    // Subscribed first, read second: no change falls in between.
    shared.look();
    for (watch, follows_lease) in [(unlocks, true), (elected, false)] {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("keyholder-election-observer".into())
            .spawn(move || shared.listen(watch, follows_lease))
            .map_err(|e| crate::error::Error::connect(redis::RedisError::from(e)))?;
    }
    Ok(LeadershipChanges { rx, shared })
}

impl Shared {
    /// One listener's loop; `follows_lease` for the one that also wakes at
    /// the end of the leader's lease.
    fn listen(&self, mut watch: UnlockWatch, follows_lease: bool) {
        while !self.closed.load(Ordering::Relaxed) {
            // At most IDLE, to notice a dropped receiver.
            let idle = Instant::now() + IDLE;
            let until = match self.state.lock().1 {
                Some(at) if follows_lease => at.min(idle),
                _ => idle,
            };
            match watch.next_event(until.saturating_duration_since(Instant::now())) {
                // Shut down.
                Err(_) => break,
                Ok(Some(_)) => self.look(),
                Ok(None) if follows_lease && self.state.lock().1.is_some_and(|at| at <= Instant::now()) => {
                    self.look()
                }
                Ok(None) => {}
            }
        }
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Reads the leader and reports the difference.
    fn look(&self) {
        let mut state = self.state.lock();
        let (leader, left) = match self.election.look() {
            Ok(seen) => seen,
            Err(e) => {
                log::debug!("keyholder: observing election '{}': {e}", self.election.name());
                // Read again a little later, while someone may lead.
                state.1 = state.0.as_ref().map(|_| Instant::now() + IDLE);
                return;
            }
        };
        // A read a moment before the lease's end looks again just after.
        state.1 = leader.as_ref().map(|_| Instant::now() + left.unwrap_or(IDLE) + Duration::from_millis(1));
        let change = match (&state.0, &leader) {
            (old, Some(new)) if old.as_ref() != Some(new) => Some(LeadershipChange::Elected(new.clone())),
            (Some(old), None) => Some(LeadershipChange::Vacated { term: old.term }),
            _ => None,
        };
        state.0 = leader;
        if let Some(change) = change
            && self.tx.send(change).is_err()
        {
            self.closed.store(true, Ordering::Relaxed);
        }
    }
}
