//! A permit's hand-over: why a thread that gives permits back does not take
//! them again at once while others wait for them (ADR 49).
//!
//! Redisson's semaphore is not fair, and its layout has no queue (ADR 38):
//! a release raises the count and publishes it, and whoever asks next takes
//! the permits. The thread that just gave them back asks next nearly every
//! time, one round trip after its release, where a waiter needs the
//! message's delivery and two thread wake-ups first; so a thread that
//! releases and asks again in a loop re-took its permit ahead of the
//! waiters, again and again (SEM's worst wait: 40 ms against 5 to 17 ms for
//! N plain locks, at `dbba99d`).
//!
//! The release's script says how many connections heard its message
//! (`PUBLISH`'s reply). When some other than the client's own heard it, or
//! threads of the client itself wait, the release is noted on the releasing
//! thread, and that thread's next waiting acquire of the same semaphore
//! (through the same client) within [`HANDOVER`] of the release first
//! pauses until the hand-over is over: the woken waiters have their turn,
//! and if none took the permits, the thread takes them when it asks. The
//! pause is bounded ([`HANDOVER`]) and taken at most once per release, so
//! barging is bounded in time, not forbidden; a `try_acquire`, which never
//! waits, never pauses. Redis keeps Redisson's layout and messages, so a
//! Java client sees nothing new.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Context;
use crate::kinds::semaphore::scripts::Released;

/// How long a release's permits are left to the waiters it woke: a pub/sub
/// delivery, two thread wake-ups and a round trip, with room for a loaded
/// machine (SEM measures each at tens of microseconds, up to a millisecond
/// under load).
pub(crate) const HANDOVER: Duration = Duration::from_millis(2);

/// This thread's last release that others heard.
struct Noted {
    /// The client's identity (its context's address), so that another
    /// client's acquire does not pause.
    client: usize,
    name: Arc<str>,
    until: Instant,
}

thread_local! {
    static LAST: RefCell<Option<Noted>> = const { RefCell::new(None) };
}

/// Notes a release of `name` by this thread, when anyone else waits for
/// its permits: listeners other than the client's own subscription, or
/// threads of the client in the semaphore's wait.
pub(crate) fn released(ctx: Context<'_>, name: &Arc<str>, channel: &str, released: Released) {
    if released.listeners <= 0 {
        // Nobody heard it (the client's own waiters would have: they are
        // subscribed before they sleep); the common case costs nothing.
        return;
    }
    let waits = ctx.waits();
    let own = i64::from(!waits.subscribers().listening_for(channel).is_zero());
    if released.listeners <= own && waits.waiting_on(channel) == 0 {
        return;
    }
    let noted = Noted { client: waits.client_id(), name: Arc::clone(name), until: Instant::now() + HANDOVER };
    LAST.with(|last| *last.borrow_mut() = Some(noted));
}

/// Until when this thread leaves `name`'s permits to the waiters before
/// its own first attempt, if it released them moments ago (taken: one
/// pause per release).
pub(crate) fn pause_until(ctx: Context<'_>, name: &str) -> Option<Instant> {
    let client = ctx.waits().client_id();
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        let noted = last.as_ref()?;
        if noted.client != client || *noted.name != *name {
            return None;
        }
        let until = noted.until;
        *last = None;
        (Instant::now() < until).then_some(until)
    })
}
