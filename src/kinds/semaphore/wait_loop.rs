//! The wait the semaphores and the latch share: Redisson's loop, bounded.
//!
//! Try; if refused, subscribe to the object's channel (once per client,
//! through [`ChannelWait`](crate::wait::channel::ChannelWait)) and try again
//! at once, since a release between the first try and the subscription
//! would otherwise go unheard; then sleep until a message on the channel (a
//! semaphore's wakes at most as many of the client's threads as it counts
//! permits, see [`Wakes`]), the bound the refusal gave (a permit's expiry),
//! the caller's deadline, or at most the watchdog timeout without any of
//! these (`Waits::recheck`), and try again. Java's blocking calls wait for a
//! message without limit; the re-check bound makes a message that never
//! comes (a publisher that died between its write and its publish) cost
//! latency, never a hang. A replaced pub/sub connection counts as a
//! message, so a reconnect never loses a wake-up either. An attempt that
//! fails because Redis is unreachable is tried again after a bounded sleep
//! on the channel, within the deadline and the client's outage budget
//! (`wait/outage.rs`). The loop sees the client through its `Context`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Context;
use crate::error::Result;
use crate::observe;
use crate::wait::channel::{ChannelWait, Wakes};

/// The outcome of one attempt.
pub(crate) enum Attempt<T> {
    /// Done: the permits, or the open latch.
    Won(T),
    /// Not now; worth trying again after a message, or after `retry_in`
    /// at the latest (a permit's expiry), when given.
    Refused { retry_in: Option<Duration> },
}

/// How long a caller waits.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Patience {
    /// One attempt, no wait.
    Once,
    /// Until this instant.
    Until(Instant),
    /// As long as it takes (each sleep still bounded by `Waits::recheck`).
    Forever,
}

impl Patience {
    /// The acquire mode this patience is observed as.
    pub(crate) fn mode(self) -> observe::Mode {
        match self {
            Patience::Once => observe::Mode::Try,
            Patience::Until(_) => observe::Mode::Timed,
            Patience::Forever => observe::Mode::Blocking,
        }
    }
}

/// Runs a semaphore's acquire through `wait_for` (on a channel of
/// [`Wakes::Permits`]) inside a
/// `keyholder.acquire` span, counted by the acquire metrics (see
/// docs/observability.md): the semaphore's name as the lock.
pub(crate) fn observed<T>(
    ctx: Context<'_>,
    name: &Arc<str>,
    kind: &'static str,
    channel: &str,
    patience: Patience,
    pause: Option<Instant>,
    attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    let obs = observe::Acquire::start(name, ctx.id(), kind, patience.mode());
    let on = On { name, channel, wakes: Wakes::Permits };
    let outcome = obs.in_scope(|| wait_for_observed(ctx, &on, patience, pause, Some(&obs), attempt));
    obs.finish(|| match &outcome {
        Ok(Some(_)) => observe::AcquireOutcome::Acquired { reentrant: false },
        Ok(None) if matches!(patience, Patience::Once) => observe::AcquireOutcome::Busy,
        Ok(None) => observe::AcquireOutcome::TimedOut,
        Err(_) => observe::AcquireOutcome::Error,
    });
    outcome
}

/// Runs `attempt` until it wins or `patience` runs out (`Ok(None)`),
/// sleeping on `channel` between attempts, where every message wakes every
/// waiting thread (the latch's).
pub(crate) fn wait_for<T>(
    ctx: Context<'_>,
    name: &Arc<str>,
    channel: &str,
    patience: Patience,
    attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    wait_for_observed(ctx, &On { name, channel, wakes: Wakes::All }, patience, None, None, attempt)
}

/// The channel a loop sleeps on, and what its messages say.
struct On<'a> {
    name: &'a Arc<str>,
    channel: &'a str,
    wakes: Wakes,
}

fn wait_for_observed<T>(
    ctx: Context<'_>,
    on: &On<'_>,
    patience: Patience,
    pause: Option<Instant>,
    obs: Option<&observe::Acquire<'_>>,
    mut attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    let mut wait: Option<ChannelWait> = None;
    let waits = ctx.waits();
    let join = || waits.join(on.name, on.channel, on.wakes);
    let (patient, deadline) = match patience {
        Patience::Once => (false, None),
        Patience::Until(deadline) => (true, Some(deadline)),
        Patience::Forever => (true, None),
    };
    // Redis unreachable for a while is waited out (`wait/outage.rs`). An
    // expirable permit's attempt is recognised when repeated (its ids);
    // permits a plain semaphore's attempt took with its reply lost are
    // lost whether the call returns the error or tries again.
    let mut outage = waits.outage(patient);
    if let (true, Some(pause)) = (patient, pause) {
        // The hand-over of this thread's own release (the semaphore's
        // `handover.rs`): one bounded pause, not a poll; the woken waiters
        // take the permits meanwhile, or this thread takes them next.
        if let Some(obs) = obs {
            obs.waiting();
        }
        let until = deadline.map_or(pause, |d| d.min(pause));
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
    }
    loop {
        ctx.check_running()?;
        let seen = wait.as_ref().map(|w| w.seen());
        let retry_in = match attempt() {
            Ok(Attempt::Won(won)) => return Ok(Some(won)),
            Ok(Attempt::Refused { retry_in }) => {
                outage.answered();
                retry_in
            }
            Err(e) => {
                let until = outage.ride(e, deadline)?;
                let wait = wait.get_or_insert_with(join);
                wait.wait_past(seen.unwrap_or_else(|| wait.seen()), until);
                continue;
            }
        };
        let now = Instant::now();
        if !patient || deadline.is_some_and(|d| now >= d) {
            return Ok(None);
        }
        let wait = wait.get_or_insert_with(join);
        if !wait.is_subscribed() {
            if let Err(e) = wait.subscribe(waits.subscribers(), deadline) {
                let until = outage.ride(e, deadline)?;
                wait.wait_past(seen.unwrap_or_else(|| wait.seen()), until);
            }
            continue;
        }
        // Subscribed by another thread before this one's attempt: the
        // counter must be read before an attempt to be trusted.
        let Some(seen) = seen else { continue };
        if let Some(obs) = obs {
            obs.waiting();
        }
        // At least 1 ms: a permit expiring now is reclaimed by the next try.
        let recheck = waits.recheck();
        let nap = retry_in.map_or(recheck, |r| r.clamp(Duration::from_millis(1), recheck));
        let until = deadline.map_or(now + nap, |d| d.min(now + nap));
        wait.wait_past(seen, until);
    }
}
