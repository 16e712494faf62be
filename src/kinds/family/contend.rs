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

use crate::client::Context;
use crate::error::Result;
use crate::kinds::family::fresh::Won;
use crate::observe;
use crate::pubsub::router::Subscribers;
use crate::pubsub::subscriber::Grant;
use crate::wait::channel::ChannelWait;
use crate::wait::outage::Outage;

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
    /// Whether the waiter hears releases as the call begins; a wait may
    /// take back channels still lingering from its client's last wait here.
    fn start(&self) -> bool {
        self.is_subscribed()
    }
    /// Subscribes the channels, within `deadline`.
    fn subscribe(&self, deadline: Option<Instant>) -> Result<()>;
    /// Sleeps until a wake-up past `seen`, or `until`.
    fn wait(&self, seen: u64, until: Instant) -> Result<()>;
    /// A grant heard while asleep: a release handed the lock over.
    fn take_grant(&self) -> Option<Grant> {
        None
    }
}

/// What one attempt said: won (the lock's [`Won`], a semaphore's permits,
/// an open latch), or refused.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Step<W = Won> {
    Won(W),
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
    /// What winning gives.
    type Won;
    /// One attempt, sent at `sent`; `listening`: the caller hears releases.
    fn attempt(&mut self, sent: Instant, listening: bool) -> Result<Step<Self::Won>>;
    /// A grant heard while asleep, to the caller if it is theirs (`queued_at`:
    /// when the caller's last queueing attempt was sent): the lock, `None`
    /// to attempt again.
    fn granted(&mut self, _grant: Grant, _queued_at: Option<Instant>) -> Result<Option<Self::Won>> {
        Ok(None)
    }
}

/// One acquire call's bounds.
pub(crate) struct Bounds<'a> {
    pub(crate) deadline: Option<Instant>,
    pub(crate) block: bool,
    /// The call's span and metrics, told when it starts to wait (none for
    /// a latch's await, which acquires nothing).
    pub(crate) obs: Option<&'a observe::Acquire<'a>>,
    /// The call's ride through outages (`Waits::outage`; none for a
    /// RedLock's masters, which ask the next master instead).
    pub(crate) outage: Outage<'a>,
    /// How long a refusal without a bound of its own sleeps at most (the
    /// watchdog timeout: a key without a TTL is re-checked that often).
    pub(crate) recheck: Duration,
}

impl<'a> Bounds<'a> {
    /// The bounds of a call on `ctx`'s lock: waiting until `deadline`
    /// (if `block`), riding out outages if `rides_outages` too.
    pub(crate) fn of(
        ctx: Context<'a>,
        deadline: Option<Instant>,
        block: bool,
        obs: &'a observe::Acquire<'a>,
        rides_outages: bool,
    ) -> Self {
        let outage = ctx.waits().outage(block && rides_outages);
        Bounds { deadline, block, obs: Some(obs), outage, recheck: ctx.config().watchdog_timeout }
    }
}

/// How the loop ended: the lock or not, and when the caller last queued
/// itself in Redis (`None`: never).
pub(crate) struct Contended<W = Won> {
    pub(crate) outcome: Result<Option<W>>,
    pub(crate) queued_at: Option<Instant>,
}

/// Contends until an attempt wins, a grant hands the lock over, or the
/// deadline passes.
pub(crate) fn contend<C: Contender>(kind: &mut C, wait: &impl Wait, bounds: Bounds<'_>) -> Contended<C::Won> {
    // Redis unreachable for a while is waited out (`wait/outage.rs`).
    let Bounds { deadline, block, obs, mut outage, recheck } = bounds;
    let mut queued_at = None;
    let mut listening = wait.start();
    let outcome = loop {
        let seen = wait.seen();
        let sent = Instant::now();
        let retry_in = match kind.attempt(sent, listening) {
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
        if let Some(obs) = obs {
            obs.waiting();
        }
        // A subscription whose slot moved to another cluster node hears
        // nothing more: subscribe again, where the slot went.
        listening = listening && wait.is_subscribed();
        if !listening {
            // Subscribe, then try again at once: a release between the
            // attempt and the subscription would otherwise go unheard.
            match wait.subscribe(deadline) {
                Ok(()) => listening = true,
                Err(e) => match outage.ride(e, deadline) {
                    Ok(until) => {
                        if let Err(e) = wait.wait(seen, until) {
                            break Err(e);
                        }
                    }
                    Err(e) => break Err(e),
                },
            }
            continue;
        }
        // A key without a TTL (a foreign writer) is re-checked every
        // watchdog timeout rather than waited on forever.
        let mut until = now + retry_in.unwrap_or(recheck);
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
    /// Take back channels still lingering from this thread's last wait (a
    /// fair waiter's own channels), without a round trip.
    pub(crate) resume: bool,
}

impl Wait for OnChannel<'_> {
    fn seen(&self) -> u64 {
        self.wait.seen()
    }

    fn is_subscribed(&self) -> bool {
        self.wait.is_subscribed()
    }

    fn start(&self) -> bool {
        // These kinds' attempts do not depend on listening, and the loop
        // checks the subscription after the first refusal: no need to look
        // before it.
        !self.resume || self.wait.resume(self.subscribers)
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

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::collections::VecDeque;

    use super::*;
    use crate::error::Error;
    use crate::wait::outage::OutageClock;

    const SECOND: Duration = Duration::from_secs(1);

    /// A kind that answers from a script of steps, and records what it was
    /// asked.
    struct Fake {
        steps: VecDeque<Result<Step>>,
        /// Whether the caller listened, per attempt.
        listening: Vec<bool>,
        /// The grant that means the caller, and the `queued_at` it came with.
        mine: &'static str,
        granted: Vec<Option<Instant>>,
    }

    impl Fake {
        fn new(steps: impl IntoIterator<Item = Result<Step>>) -> Fake {
            Fake {
                steps: steps.into_iter().collect(),
                listening: Vec::new(),
                mine: "c:1",
                granted: Vec::new(),
            }
        }
    }

    impl Contender for Fake {
        type Won = Won;

        fn attempt(&mut self, _sent: Instant, listening: bool) -> Result<Step> {
            self.listening.push(listening);
            self.steps.pop_front().expect("an attempt past the script")
        }

        fn granted(&mut self, grant: Grant, queued_at: Option<Instant>) -> Result<Option<Won>> {
            self.granted.push(queued_at);
            Ok((grant.owner == self.mine && queued_at.is_some()).then(|| won(grant.received)))
        }
    }

    /// A wait that records its calls, and sleeps only if asked to.
    #[derive(Default)]
    struct FakeWait {
        sleeps: bool,
        subscribed: Cell<bool>,
        subscribes: Cell<usize>,
        fail_subscribe: Cell<usize>,
        waits: RefCell<Vec<Instant>>,
        grants: RefCell<VecDeque<Grant>>,
    }

    impl Wait for FakeWait {
        fn is_subscribed(&self) -> bool {
            self.subscribed.get()
        }

        fn subscribe(&self, _deadline: Option<Instant>) -> Result<()> {
            self.subscribes.set(self.subscribes.get() + 1);
            if self.fail_subscribe.get() > 0 {
                self.fail_subscribe.set(self.fail_subscribe.get() - 1);
                return Err(Error::unreachable());
            }
            self.subscribed.set(true);
            Ok(())
        }

        fn wait(&self, _seen: u64, until: Instant) -> Result<()> {
            self.waits.borrow_mut().push(until);
            if self.sleeps {
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
            }
            Ok(())
        }

        fn take_grant(&self) -> Option<Grant> {
            self.grants.borrow_mut().pop_front()
        }
    }

    fn won(sent: Instant) -> Won {
        Won { sent, token: None, replicated: None }
    }

    fn refused(retry_in: Option<Duration>, queued: bool) -> Result<Step> {
        Ok(Step::Refused { retry_in, queued })
    }

    /// Runs the loop over `kind` and `wait`.
    fn run(kind: &mut Fake, wait: &FakeWait, deadline: Option<Instant>, block: bool) -> Contended {
        let clock = OutageClock::default();
        let obs = observe::Acquire::start("k", "client", "lock", observe::Mode::of(deadline, block));
        let outage = Outage::new(&clock, if block { 5 * SECOND } else { Duration::ZERO }, 10 * SECOND);
        contend(kind, wait, Bounds { deadline, block, obs: Some(&obs), outage, recheck: 30 * SECOND })
    }

    #[test]
    fn a_free_lock_is_won_at_the_first_attempt_without_subscribing() {
        let mut kind = Fake::new([Ok(Step::Won(won(Instant::now())))]);
        let wait = FakeWait::default();
        let Contended { outcome, queued_at } = run(&mut kind, &wait, None, true);
        assert!(matches!(outcome, Ok(Some(_))));
        assert_eq!((queued_at, wait.subscribes.get(), wait.waits.borrow().len()), (None, 0, 0));
    }

    #[test]
    fn a_try_makes_one_attempt_and_never_subscribes() {
        let mut kind = Fake::new([refused(Some(SECOND), false)]);
        let wait = FakeWait::default();
        let outcome = run(&mut kind, &wait, Some(Instant::now()), false).outcome;
        assert!(matches!(outcome, Ok(None)));
        assert_eq!((kind.listening.len(), wait.subscribes.get()), (1, 0));
    }

    #[test]
    fn the_first_refusal_subscribes_and_tries_again_at_once_then_sleeps_bounded() {
        let mut kind = Fake::new([
            refused(Some(SECOND), false),
            refused(None, true),
            Ok(Step::Won(won(Instant::now()))),
        ]);
        let wait = FakeWait::default();
        let before = Instant::now();
        let Contended { outcome, queued_at } = run(&mut kind, &wait, None, true);
        assert!(matches!(outcome, Ok(Some(_))));
        // Subscribed once, with no sleep between the subscription and the
        // next attempt, which listened; that refusal queued the caller.
        assert_eq!(wait.subscribes.get(), 1);
        assert_eq!(kind.listening, [false, true, true]);
        assert!(queued_at.is_some_and(|q| q >= before));
        // A refusal without a bound of its own sleeps the re-check at most.
        let waits = wait.waits.borrow();
        assert_eq!(waits.len(), 1);
        assert!(waits[0] <= Instant::now() + 30 * SECOND && waits[0] >= before + 29 * SECOND);
    }

    #[test]
    fn a_sleep_never_passes_the_deadline_and_the_deadline_ends_the_call() {
        let deadline = Instant::now() + Duration::from_millis(30);
        let mut kind = Fake::new((0..10).map(|_| refused(Some(10 * SECOND), true)));
        let wait = FakeWait { subscribed: Cell::new(true), sleeps: true, ..FakeWait::default() };
        let outcome = run(&mut kind, &wait, Some(deadline), true).outcome;
        assert!(matches!(outcome, Ok(None)));
        // Slept once, until the deadline, not the refusal's 10 s; one more
        // attempt then found the deadline passed.
        assert_eq!(*wait.waits.borrow(), [deadline]);
        assert_eq!(kind.listening.len(), 2);
    }

    #[test]
    fn a_grant_for_the_caller_after_it_queued_is_the_lock_and_another_is_not() {
        let mut kind = Fake::new([refused(Some(SECOND), true), refused(Some(SECOND), true)]);
        let wait = FakeWait { subscribed: Cell::new(true), ..FakeWait::default() };
        let heard = Instant::now();
        let grant = |owner: &str| Grant { owner: owner.into(), elapsed: Duration::ZERO, received: heard };
        wait.grants.borrow_mut().extend([grant("c:2"), grant("c:1")]);
        let outcome = run(&mut kind, &wait, None, true).outcome;
        assert!(matches!(outcome, Ok(Some(w)) if w.sent == heard));
        assert_eq!(kind.granted.len(), 2);
        assert!(kind.granted.iter().all(Option::is_some), "both came after a queueing refusal");
    }

    #[test]
    fn an_outage_is_ridden_on_the_wait_and_another_error_ends_the_call() {
        let mut kind = Fake::new([Err(Error::unreachable()), Ok(Step::Won(won(Instant::now())))]);
        let wait = FakeWait::default();
        assert!(matches!(run(&mut kind, &wait, None, true).outcome, Ok(Some(_))));
        assert_eq!(wait.waits.borrow().len(), 1, "slept once on the wait");

        let mut kind = Fake::new([Err(Error::invalid_argument("no"))]);
        let wait = FakeWait::default();
        assert!(run(&mut kind, &wait, None, true).outcome.is_err());
        assert!(wait.waits.borrow().is_empty());

        // A try does not ride an outage.
        let mut kind = Fake::new([Err(Error::unreachable())]);
        assert!(run(&mut kind, &FakeWait::default(), Some(Instant::now()), false).outcome.is_err());
    }

    #[test]
    fn a_failed_subscription_is_ridden_then_tried_again() {
        let mut kind = Fake::new([
            refused(Some(SECOND), false),
            refused(Some(SECOND), false),
            Ok(Step::Won(won(Instant::now()))),
        ]);
        let wait = FakeWait { fail_subscribe: Cell::new(1), ..FakeWait::default() };
        assert!(matches!(run(&mut kind, &wait, None, true).outcome, Ok(Some(_))));
        assert_eq!(wait.subscribes.get(), 2);
        assert_eq!(kind.listening, [false, false, true]);
    }
}
