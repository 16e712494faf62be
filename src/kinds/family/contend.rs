//! The contention loop of every lock-like kind, written once: Redisson's
//! try, subscribe, try again, sleep, bounded and riding out outages.
//!
//! A kind says how to make one attempt (its script, what a refusal means)
//! and, if its releases hand the lock over, what a grant it hears means;
//! a [`Wait`] says how to sleep until something worth another attempt
//! happens: the reentrant lock's entry (`wait/entry.rs`, its gate's
//! wake-up slot), a `ChannelWait` (`wait/channel.rs`: the fair lock's own
//! channels, the read-write lock's shared one), or, for the spin lock that
//! has no channel, a plain sleep. The loop is the same for all:
//!
//! 1. Attempt. Won: done. Refused: remember when, if the refusal queued
//!    the caller in Redis (a grant is measured from there).
//! 2. An attempt that failed because Redis cannot serve for now is ridden
//!    out (`wait/outage.rs`): sleep on the wait and try again.
//! 3. Out of time (or a `try_lock`): give up, `None`.
//! 4. Not listening yet: subscribe, then try again at once, since a release
//!    between the first attempt and the subscription would go unheard.
//! 5. Sleep until woken, the kind's bound (the holder's lease, a retry
//!    interval, a back-off) or the deadline; a grant heard meanwhile is
//!    the lock handed over.
//!
//! The kind's clean-up (leaving a queue, giving back an acquisition whose
//! reply was lost) follows the loop, in the kind, which knows its keys.

use std::time::{Duration, Instant};

use crate::client::Inner;
use crate::error::Result;
use crate::kinds::family::fresh::Won;
use crate::observe;
use crate::pubsub::router::Subscribers;
use crate::pubsub::subscriber::Grant;
use crate::wait::channel::ChannelWait;

/// How a kind sleeps between attempts.
pub(crate) trait Wait {
    /// A wake-up counter read before each attempt, so that a message
    /// between the attempt and the sleep is never lost (a wait whose
    /// wake-ups are sticky needs none).
    fn seen(&self) -> u64 {
        0
    }
    /// Whether the waiter hears releases (a wait without channels always
    /// does, in its way).
    fn is_subscribed(&self) -> bool;
    /// Subscribes the channels, within `deadline`.
    fn subscribe(&self, deadline: Option<Instant>) -> Result<()>;
    /// Sleeps until a wake-up past `seen`, or `until`.
    fn wait(&self, seen: u64, until: Instant) -> Result<()>;
    /// A grant heard while asleep: a release handed the lock over.
    fn take_grant(&self) -> Option<Grant> {
        None
    }
}

/// What one attempt said.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step {
    Won(Won),
    /// Refused; worth another attempt after `retry_in` at the latest
    /// (`None`: the key has no TTL; re-checked every watchdog timeout).
    /// `queued`: the attempt queued the caller in Redis.
    Refused {
        retry_in: Option<Duration>,
        queued: bool,
    },
}

/// A kind's side of the loop.
pub(crate) trait Contender {
    /// One attempt, sent at `sent`; `listening`: the caller hears releases.
    fn attempt(&mut self, sent: Instant, listening: bool) -> Result<Step>;
    /// A grant heard while asleep, to the caller if it is theirs (`queued_at`:
    /// when the caller's last queueing attempt was sent): the lock, `None`
    /// to attempt again.
    fn granted(&mut self, _grant: Grant, _queued_at: Option<Instant>) -> Result<Option<Won>> {
        Ok(None)
    }
}

/// One acquire call's bounds.
pub(crate) struct Bounds<'a> {
    pub(crate) inner: &'a Inner,
    pub(crate) deadline: Option<Instant>,
    pub(crate) block: bool,
    pub(crate) obs: &'a observe::Acquire<'a>,
    /// Ride out an outage (off for a RedLock's masters).
    pub(crate) rides_outages: bool,
}

/// How the loop ended: the lock or not, and when the caller last queued
/// itself in Redis (`None`: never).
pub(crate) struct Contended {
    pub(crate) outcome: Result<Option<Won>>,
    pub(crate) queued_at: Option<Instant>,
}

/// Contends until an attempt wins, a grant hands the lock over, or the
/// deadline passes.
pub(crate) fn contend(kind: &mut impl Contender, wait: &impl Wait, bounds: Bounds<'_>) -> Contended {
    let Bounds { inner, deadline, block, obs, rides_outages } = bounds;
    // Redis unreachable for a while is waited out (`wait/outage.rs`).
    let mut outage = inner.outage(block && rides_outages);
    let mut queued_at = None;
    let outcome = loop {
        let seen = wait.seen();
        let sent = Instant::now();
        let retry_in = match kind.attempt(sent, wait.is_subscribed()) {
            Ok(step) => {
                outage.answered();
                match step {
                    Step::Won(won) => break Ok(Some(won)),
                    Step::Refused { retry_in, queued } => {
                        if queued {
                            queued_at = Some(sent);
                        }
                        retry_in
                    }
                }
            }
            Err(e) => match outage.ride(e, deadline) {
                Ok(until) => match wait.wait(seen, until) {
                    Ok(()) => continue,
                    Err(e) => break Err(e),
                },
                Err(e) => break Err(e),
            },
        };
        let now = Instant::now();
        if !block || deadline.is_some_and(|d| now >= d) {
            break Ok(None);
        }
        obs.waiting();
        if !wait.is_subscribed() {
            // Subscribe, then try again at once: a release between the
            // attempt and the subscription would otherwise go unheard.
            if let Err(e) = wait.subscribe(deadline) {
                match outage.ride(e, deadline) {
                    Ok(until) => {
                        if let Err(e) = wait.wait(seen, until) {
                            break Err(e);
                        }
                    }
                    Err(e) => break Err(e),
                }
            }
            continue;
        }
        // A key without a TTL (a foreign writer) is re-checked every
        // watchdog timeout rather than waited on forever.
        let mut until = now + retry_in.unwrap_or(inner.config.watchdog_timeout);
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        if let Err(e) = wait.wait(seen, until) {
            break Err(e);
        }
        if let Some(grant) = wait.take_grant() {
            match kind.granted(grant, queued_at) {
                Ok(Some(won)) => break Ok(Some(won)),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        }
    };
    Contended { outcome, queued_at }
}

/// A wait on a `ChannelWait`: the fair lock's own channels, the read-write
/// lock's shared one.
pub(crate) struct OnChannel<'a> {
    pub(crate) wait: &'a ChannelWait,
    pub(crate) subscribers: &'a Subscribers,
}

impl Wait for OnChannel<'_> {
    fn seen(&self) -> u64 {
        self.wait.seen()
    }

    fn is_subscribed(&self) -> bool {
        self.wait.is_subscribed()
    }

    fn subscribe(&self, deadline: Option<Instant>) -> Result<()> {
        self.wait.subscribe(self.subscribers, deadline)
    }

    fn wait(&self, seen: u64, until: Instant) -> Result<()> {
        self.wait.wait_past(seen, until);
        Ok(())
    }

    fn take_grant(&self) -> Option<Grant> {
        self.wait.take_grant()
    }
}

/// The spin lock's wait: no channel at all, a sleep.
pub(crate) struct Sleep;

impl Wait for Sleep {
    fn is_subscribed(&self) -> bool {
        true
    }

    fn subscribe(&self, _deadline: Option<Instant>) -> Result<()> {
        Ok(())
    }

    fn wait(&self, _seen: u64, until: Instant) -> Result<()> {
        // The one sleep between tries in keyholder: a spin lock has nothing
        // to wait on (see `kinds/spin_lock.rs`).
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        Ok(())
    }
}
