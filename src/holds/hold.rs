//! A hold: one thread's possession of one lock, shared by its re-entrant guards.
//!
//! The hold count itself lives in Redis. A `Hold` keeps only what the client
//! needs without I/O: how many live guards share it, its fencing token, the
//! local lease deadline (measured from when the acquire or renewal was *sent*,
//! so it never runs later than the server's), whether the hold is known lost,
//! and who wants to hear the moment it is.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::LostReason;
use crate::lease::Lease;

pub(crate) struct Hold {
    /// Unique within the client; tells one hold of a thread from a later one.
    pub(crate) id: u64,
    /// The lock name.
    pub(crate) name: Arc<str>,
    /// The hash field `<client-uuid>:<thread-id>`.
    pub(crate) owner: String,
    pub(crate) thread: u64,
    pub(crate) lease: Lease,
    /// The TTL re-applied by a partial release, in milliseconds.
    pub(crate) lease_ms: u64,
    /// The fencing token minted by the acquisition, or by the first fenced
    /// re-entry of a hold taken without one.
    token: OnceLock<u64>,
    guards: AtomicU32,
    /// The last guard's release has been sent.
    releasing: AtomicBool,
    lost_listeners: Mutex<Vec<Sender<LostReason>>>,
    lost: AtomicU8,
    finished: AtomicBool,
    /// Every write of the hold so far reached the replicas asked for.
    replicated: AtomicBool,
    /// The local lease deadline, in nanoseconds after `base`.
    deadline_ns: AtomicU64,
    base: Instant,
    /// The hold's unit of the held-now gauge: given back at the first of
    /// its release (`finish`), its loss (`mark_lost`) and its drop.
    counted: crate::observe::Counted,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("lease", &self.lease)
            .field("lost", &self.lost_reason())
            .finish_non_exhaustive()
    }
}

/// What a successful acquire script call established.
pub(crate) struct Acquisition {
    pub(crate) owner: String,
    pub(crate) thread: u64,
    pub(crate) lease: Lease,
    pub(crate) lease_ms: u64,
    pub(crate) token: Option<u64>,
    /// When the acquire script was sent: the lease runs from here at the latest.
    pub(crate) sent: Instant,
}

const NOT_LOST: u8 = 0;

fn encode(reason: LostReason) -> u8 {
    match reason {
        LostReason::RenewalRefused => 1,
        LostReason::LeaseExpired => 2,
        LostReason::ReleaseFoundGone => 3,
        LostReason::Gone => 4,
    }
}

fn decode(code: u8) -> Option<LostReason> {
    match code {
        1 => Some(LostReason::RenewalRefused),
        2 => Some(LostReason::LeaseExpired),
        3 => Some(LostReason::ReleaseFoundGone),
        4 => Some(LostReason::Gone),
        _ => None,
    }
}

impl Hold {
    /// When the acquire script call that began the hold was sent.
    pub(crate) fn acquired_at(&self) -> Instant {
        self.base
    }

    /// The hold begun by `acquisition`, with one guard, by the client
    /// `client` (its id: the held-now gauge's `client` label).
    pub(crate) fn new(
        id: u64,
        name: Arc<str>,
        acquisition: Acquisition,
        client: &str,
        kind: &'static str,
    ) -> Self {
        let Acquisition { owner, thread, lease, lease_ms, token, sent } = acquisition;
        let counted = crate::observe::hold_started(&name, client, kind);
        let hold = Hold {
            id,
            name,
            owner,
            thread,
            lease,
            lease_ms,
            token: token.map_or_else(OnceLock::new, OnceLock::from),
            guards: AtomicU32::new(1),
            releasing: AtomicBool::new(false),
            lost_listeners: Mutex::new(Vec::new()),
            lost: AtomicU8::new(NOT_LOST),
            finished: AtomicBool::new(false),
            replicated: AtomicBool::new(true),
            deadline_ns: AtomicU64::new(0),
            base: sent,
            counted,
        };
        hold.set_deadline(sent + Duration::from_millis(lease_ms));
        hold
    }

    /// The hold's fencing token, if one was minted for it.
    pub(crate) fn token(&self) -> Option<u64> {
        self.token.get().copied()
    }

    /// Records the token minted by a fenced re-entry (the first one wins).
    pub(crate) fn set_token(&self, token: u64) {
        let _ = self.token.set(token);
    }

    fn nanos_after_base(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Sets the lease deadline (after an acquire, re-entry or partial release).
    pub(crate) fn set_deadline(&self, deadline: Instant) {
        self.deadline_ns.store(self.nanos_after_base(deadline), Ordering::Release);
    }

    /// Moves the deadline later (after a successful renewal sent before it).
    pub(crate) fn extend_deadline(&self, deadline: Instant) {
        self.deadline_ns.fetch_max(self.nanos_after_base(deadline), Ordering::AcqRel);
    }

    /// The local lease deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.deadline_ns.load(Ordering::Acquire))
    }

    /// Records that the hold is lost and tells the listeners; the first
    /// reason recorded wins. Returns true when this call recorded it.
    pub(crate) fn mark_lost(&self, reason: LostReason) -> bool {
        let first =
            self.lost.compare_exchange(NOT_LOST, encode(reason), Ordering::AcqRel, Ordering::Acquire).is_ok();
        if first {
            self.counted.end();
            crate::observe::hold_lost(&self.name, reason);
            for listener in self.lost_listeners.lock().drain(..) {
                let _ = listener.try_send(reason);
            }
        }
        first
    }

    /// A channel that receives the loss reason once, the moment the client
    /// learns of it (at once if it already knows).
    pub(crate) fn lost_signal(&self) -> Receiver<LostReason> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let known = {
            let mut listeners = self.lost_listeners.lock();
            let known = self.lost_reason();
            if known.is_none() {
                listeners.push(tx.clone());
            }
            known
        };
        if let Some(reason) = known {
            // Record a deadline-based loss too, so every listener agrees.
            self.mark_lost(reason);
            let _ = tx.try_send(self.lost_reason().unwrap_or(reason));
        }
        rx
    }

    /// Why the hold is known lost, if it is: a recorded loss, or the local
    /// lease deadline having passed. No I/O.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        if let Some(reason) = decode(self.lost.load(Ordering::Acquire)) {
            return Some(reason);
        }
        (Instant::now() >= self.deadline()).then_some(LostReason::LeaseExpired)
    }

    /// The loss recorded so far, if any (not the deadline's: see
    /// [`Hold::lost_reason`]).
    pub(crate) fn recorded_loss(&self) -> Option<LostReason> {
        decode(self.lost.load(Ordering::Acquire))
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    pub(crate) fn add_guard(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }

    /// The number of live guards sharing the hold.
    pub(crate) fn guards(&self) -> u32 {
        self.guards.load(Ordering::Acquire)
    }

    /// Drops one guard's share; returns the number of guards left.
    pub(crate) fn drop_guard(&self) -> u32 {
        let before = self.guards.fetch_sub(1, Ordering::AcqRel);
        before.saturating_sub(1)
    }

    /// Records that the last guard's release is about to be sent: from now
    /// on the lock may vanish from Redis without the hold being lost.
    pub(crate) fn start_release(&self) {
        self.releasing.store(true, Ordering::Release);
    }

    /// True once the last guard's release was sent (or has run).
    pub(crate) fn is_releasing(&self) -> bool {
        self.releasing.load(Ordering::Acquire) || self.is_finished()
    }

    /// True once the last guard's release has run.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Records that a write of the hold (its acquisition, a re-entry, a
    /// renewal) did not reach the replicas asked for.
    pub(crate) fn mark_unreplicated(&self) {
        self.replicated.store(false, Ordering::Release);
    }

    /// False once a write of the hold did not reach the replicas.
    pub(crate) fn is_replicated(&self) -> bool {
        self.replicated.load(Ordering::Acquire)
    }

    /// Marks the hold finished; true only for the first caller.
    pub(crate) fn finish(&self) -> bool {
        self.counted.end();
        !self.finished.swap(true, Ordering::AcqRel)
    }
}

#[cfg(test)]
impl Hold {
    /// A watchdog-lease hold of `c:1` (thread 1) on `name`, with one guard,
    /// its acquisition sent at `sent`: for unit tests.
    pub(crate) fn for_test(id: u64, name: &str, sent: Instant) -> Arc<Hold> {
        let acquisition = Acquisition {
            owner: "c:1".into(),
            thread: 1,
            lease: Lease::Watchdog,
            lease_ms: 30_000,
            token: None,
            sent,
        };
        Arc::new(Hold::new(id, Arc::from(name), acquisition, "c", "lock"))
    }
}
