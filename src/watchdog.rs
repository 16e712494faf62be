//! The watchdog: one thread per client renews every watchdog-lease hold.
//!
//! Every third of the watchdog timeout it renews all registered holds, up to
//! [`BATCH`] keys per script call (Redisson's `lockWatchdogBatchSize`). A reply
//! of 0 means the owner no longer holds the key: the hold is marked lost and
//! dropped from renewal. A failed call (Redis unreachable) is retried next
//! period; if no renewal succeeds before the local lease deadline, the hold
//! reports itself lost without I/O, and the watchdog drops it.
//!
//! A hold is registered before its guard is returned and deregistered by the
//! release of its last guard, before that release returns. A renewal already
//! in flight at that moment is harmless: the script renews only keys whose
//! owner field still exists.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use parking_lot::Mutex;

use crate::client::Inner;
use crate::error::LostReason;
use crate::hold::Hold;

/// Keys renewed per script call.
pub(crate) const BATCH: usize = 100;

/// The holds to renew, by hold id.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    holds: Mutex<HashMap<u64, Arc<Hold>>>,
}

impl Registry {
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        self.holds.lock().insert(hold.id, hold);
    }

    pub(crate) fn deregister(&self, hold_id: u64) {
        self.holds.lock().remove(&hold_id);
    }

    pub(crate) fn len(&self) -> usize {
        self.holds.lock().len()
    }

    fn snapshot(&self) -> Vec<Arc<Hold>> {
        self.holds.lock().values().cloned().collect()
    }
}

/// The watchdog thread's body. Runs until `stop` disconnects or the client
/// is gone.
pub(crate) fn run(client: Weak<Inner>, period: Duration, stop: Receiver<()>) {
    let mut next = Instant::now() + period;
    loop {
        match stop.recv_deadline(next) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let Some(inner) = client.upgrade() else { return };
        renew_all(&inner);
        drop(inner);
        next += period;
        let now = Instant::now();
        if next < now {
            // A slow round (Redis timing out) must not trigger a burst.
            next = now + period;
        }
    }
}

/// Renews every registered hold once, in batches.
pub(crate) fn renew_all(inner: &Inner) {
    let holds: Vec<Arc<Hold>> = inner
        .watchdog
        .snapshot()
        .into_iter()
        .filter(|hold| {
            if let Some(reason) = hold.lost_reason() {
                // Lost already (deadline passed without renewal): stop renewing.
                hold.mark_lost(reason);
                inner.watchdog.deregister(hold.id);
                return false;
            }
            true
        })
        .collect();
    let lease_ms = crate::lease::millis_ceil(inner.config.watchdog_timeout);
    for batch in holds.chunks(BATCH) {
        let pairs: Vec<(&str, &str)> = batch.iter().map(|h| (&*h.entry.name, h.owner.as_str())).collect();
        let sent = Instant::now();
        let replies =
            inner.connection().and_then(|mut conn| inner.scripts.renew(&mut conn, &pairs, lease_ms));
        match replies {
            Ok(replies) => {
                for (hold, held) in batch.iter().zip(replies) {
                    if held {
                        hold.extend_deadline(sent + inner.config.watchdog_timeout);
                    } else if !hold.is_finished() {
                        hold.mark_lost(LostReason::RenewalRefused);
                        inner.watchdog.deregister(hold.id);
                    }
                }
            }
            Err(e) => log::warn!("keyholder watchdog could not renew {} locks: {e}", batch.len()),
        }
    }
}
