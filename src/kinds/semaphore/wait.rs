//! How the semaphores and the latch wait: on the one contention loop of
//! every kind (`kinds/family/contend.rs`), sleeping on the object's channel.
//!
//! Redisson's loop, bounded: try; if refused, subscribe to the object's
//! channel (once per client, through
//! [`ChannelWait`](crate::wait::channel::ChannelWait)) and try again at once;
//! then sleep until a message on the channel (a semaphore's wakes at most as
//! many of the client's threads as it counts permits, see [`Wakes`]), the
//! bound the refusal gave (a permit's expiry), the caller's deadline, or at
//! most the watchdog timeout without any of these, and try again. Java's
//! blocking calls wait for a message without limit; the re-check bound makes
//! a message that never comes (a publisher that died between its write and
//! its publish) cost latency, never a hang. Outages are ridden out as every
//! kind's are (`wait/outage.rs`). What is the counted kinds' own: the
//! channel is joined only when the call first sleeps or subscribes, so a
//! call that wins at once (or a try) never counts among its waiters, which
//! a semaphore's hand-over reads (`handover.rs`).

use std::cell::{Cell, OnceCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Context;
use crate::error::Result;
use crate::kinds::family::contend::{self, Bounds, Contender, Step, Wait};
use crate::observe;
use crate::wait::channel::{ChannelWait, Wakes};
use crate::wait::patience::Patience;

/// The outcome of one attempt.
pub(crate) enum Attempt<T> {
    /// Done: the permits, or the open latch.
    Won(T),
    /// Not now; worth trying again after a message, or after `retry_in`
    /// at the latest (a permit's expiry), when given.
    Refused { retry_in: Option<Duration> },
}

/// Runs a semaphore's acquire (on a channel of [`Wakes::Permits`]) inside
/// a `keyholder.acquire` span, counted by the acquire metrics (see
/// docs/observability.md): the semaphore's name as the lock. `pause`: the
/// hand-over of this thread's own release (`handover.rs`), one bounded
/// pause before the first attempt, not a poll.
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
    let on = Joining::new(ctx, name, channel, Wakes::Permits);
    let outcome = obs.in_scope(|| {
        if let (true, Some(pause)) = (patience.waits(), pause) {
            obs.waiting();
            let until = patience.deadline().map_or(pause, |d| d.min(pause));
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        run(ctx, &on, patience, Some(&obs), attempt)
    });
    obs.finish(|| match &outcome {
        Ok(Some(_)) => observe::AcquireOutcome::Acquired { reentrant: false },
        Ok(None) if !patience.waits() => observe::AcquireOutcome::Busy,
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
    let on = Joining::new(ctx, name, channel, Wakes::All);
    run(ctx, &on, patience, None, attempt)
}

fn run<T>(
    ctx: Context<'_>,
    on: &Joining<'_>,
    patience: Patience,
    obs: Option<&observe::Acquire<'_>>,
    attempt: impl FnMut() -> Result<Attempt<T>>,
) -> Result<Option<T>> {
    let (deadline, block) = (patience.deadline(), patience.waits());
    let bounds =
        Bounds { deadline, block, obs, outage: ctx.waits().outage(block), recheck: ctx.waits().recheck() };
    let mut counted = Counted { ctx, attempt, recheck: bounds.recheck };
    contend::contend(&mut counted, on, bounds).outcome
}

/// A counted kind's side of the loop: its attempt, and a refusal's bound
/// kept between 1 ms (a permit expiring now is reclaimed by the next try)
/// and the re-check.
struct Counted<'a, F> {
    ctx: Context<'a>,
    attempt: F,
    recheck: Duration,
}

impl<T, F: FnMut() -> Result<Attempt<T>>> Contender for Counted<'_, F> {
    type Won = T;

    fn attempt(&mut self, _sent: Instant, _listening: bool) -> Result<Step<T>> {
        self.ctx.check_running()?;
        Ok(match (self.attempt)()? {
            Attempt::Won(won) => Step::Won(won),
            Attempt::Refused { retry_in } => {
                let retry_in = retry_in.map(|r| r.clamp(Duration::from_millis(1), self.recheck));
                Step::Refused { retry_in, queued: false }
            }
        })
    }
}

/// The object's channel, joined when the call first needs it.
struct Joining<'a> {
    ctx: Context<'a>,
    name: &'a Arc<str>,
    channel: &'a str,
    wakes: Wakes,
    wait: OnceCell<ChannelWait>,
    /// Whether the wake-up counter read before the last attempt was the
    /// channel's (it was joined then).
    seen_is_known: Cell<bool>,
}

impl<'a> Joining<'a> {
    fn new(ctx: Context<'a>, name: &'a Arc<str>, channel: &'a str, wakes: Wakes) -> Self {
        Joining { ctx, name, channel, wakes, wait: OnceCell::new(), seen_is_known: Cell::new(false) }
    }

    fn joined(&self) -> &ChannelWait {
        self.wait.get_or_init(|| self.ctx.waits().join(self.name, self.channel, self.wakes))
    }
}

impl Wait for Joining<'_> {
    /// Before joining, unknown: see [`wait`](Wait::wait).
    fn seen(&self) -> u64 {
        let seen = self.wait.get().map(ChannelWait::seen);
        self.seen_is_known.set(seen.is_some());
        seen.unwrap_or(0)
    }

    fn is_subscribed(&self) -> bool {
        self.joined().is_subscribed()
    }

    fn start(&self) -> bool {
        // Nothing joined yet; the loop checks the subscription after the
        // first refusal.
        true
    }

    fn subscribe(&self, deadline: Option<Instant>) -> Result<()> {
        self.joined().subscribe(self.ctx.waits().subscribers(), deadline)
    }

    fn wait(&self, seen: u64, until: Instant) -> Result<()> {
        // Joined after the last attempt (another thread had subscribed
        // already, or that attempt met an outage): a message between the
        // attempt and the join was not counted, so attempt again at once,
        // once; the next attempt's counter is the channel's.
        let wait = self.joined();
        if self.seen_is_known.get() {
            wait.wait_past(seen, until);
        }
        Ok(())
    }
}
