//! The deadline thread: marks a hold lost the moment its local lease
//! deadline passes, whatever the watchdog is doing.
//!
//! The watchdog renews holds with calls that may each take up to the
//! command timeout, and ride an outage for the client's outage budget
//! after it (a hung server, a connect that waits). Were the lease deadlines
//! watched by that thread too, a holder would hear of its loss only when
//! the call gave up: seconds after its key could have expired and another
//! client taken the lock. This thread does no I/O: it sleeps until the
//! earliest deadline of a registered hold ([`Registry::plan_wake`]), marks
//! the holds past it lost (which tells their guards' lost-signal listeners
//! and the lock's local waiters), and sleeps again. A hold registered with
//! an earlier deadline than the one it sleeps until wakes it; that is rare,
//! since a new hold's deadline is a whole lease away.
//!
//! A renewal in flight when its hold's deadline passes cannot save it: the
//! client cannot tell whether the renewal reached Redis before the key
//! expired, so the hold is lost from its deadline on, as its guard's
//! `is_lost` already said without I/O.

use std::sync::Weak;
use std::time::Instant;

use crossbeam_channel::{Receiver, select};

use crate::holds::watchdog::{Registry, Renewals};

/// The deadline thread's body. Runs until `stop` disconnects or the client
/// is gone; `kick` wakes it to plan again (a hold with an earlier deadline).
pub(crate) fn run(client: Weak<dyn Renewals>, stop: Receiver<()>, kick: Receiver<()>) {
    loop {
        let wake_at = match client.upgrade() {
            Some(inner) => plan(inner.registry()),
            None => return,
        };
        match wake_at {
            Some(at) => select! {
                recv(stop) -> _ => return,
                recv(kick) -> _ => continue,
                default(at.saturating_duration_since(Instant::now())) => {}
            },
            None => select! {
                recv(stop) -> _ => return,
                recv(kick) -> _ => continue,
            },
        }
    }
}

/// Marks the overdue holds lost; returns when to wake next.
fn plan(registry: &Registry) -> Option<Instant> {
    registry.expire_overdue(Instant::now());
    registry.plan_wake()
}
