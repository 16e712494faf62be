//! Riding out an outage: a waiting call keeps waiting while Redis is
//! unreachable, within bounds.
//!
//! `lock()` means "block until held". Redis restarting, a Sentinel failover
//! or a cluster shard failing over takes Redis away for a moment; Redisson's
//! waiters keep waiting through it and acquire once Redis is back, and so
//! must keyholder's. So an attempt of a waiting call (a lock's, a permit's,
//! a latch's) that fails because Redis cannot serve for now
//! ([`Error::is_outage`]: the connection failed, or `LOADING`,
//! `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`) does not end the wait while the
//! call has time left: until its own deadline, and at most the client's
//! outage budget (`ClientBuilder::outage_budget`) counted from the start of
//! the outage. Then it returns that error. Calls that do not wait (a
//! `try_lock`, a query, a release) fail at once, as before.
//!
//! Waiting stays event-driven. Between attempts the thread sleeps on its
//! own wake-up (the lock's entry, or its `ChannelWait` on the kind's or the fair
//! waiter's channels), which the pub/sub reader signals when its connection
//! is back, that is when Redis is; the sleep is bounded by a back-off of
//! 50 ms doubling to 1 s, for when the wake-up does not come (a waiter not
//! subscribed yet, a command connection that fails while the pub/sub one is
//! fine), and never past the call's end. No polling while Redis is up: the
//! first reply resets the back-off and the outage.
//!
//! The outage's start is shared by the client's waiters ([`OutageClock`]):
//! a thread that takes over the reentrant lock's local gate after another
//! thread gave up is in the same outage, and does not start a budget of its
//! own, so N local waiters give up together, not one budget after another.
//! A failure more than [`Outage::new`]'s `fresh` after the client's last
//! one starts a new outage; a waiter's own first failure bounds its budget
//! whatever other waiters saw (on a cluster, another node's waiters may end
//! the shared outage while this node's is still down).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// The first pause between attempts during an outage.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// The longest pause between attempts during an outage: also the longest a
/// waiter that no wake-up reaches waits after Redis is back.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// When the client's current outage began, as its waiters saw it: one per
/// client.
#[derive(Debug, Default)]
pub(crate) struct OutageClock {
    span: Mutex<Option<Span>>,
}

#[derive(Debug, Clone, Copy)]
struct Span {
    /// The first failure of the outage.
    since: Instant,
    /// The latest failure.
    last: Instant,
}

impl OutageClock {
    /// Records a failure at `now`; returns when its outage began: the
    /// current one if its last failure is at most `fresh` old, else now.
    fn failed(&self, now: Instant, fresh: Duration) -> Instant {
        let mut span = self.span.lock();
        let since = match *span {
            Some(s) if now.saturating_duration_since(s.last) <= fresh => s.since,
            _ => now,
        };
        *span = Some(Span { since, last: now });
        since
    }

    /// Redis answered a waiter that had met the outage: it is over.
    fn ended(&self) {
        *self.span.lock() = None;
    }
}

/// One waiting call's ride through outages.
#[derive(Debug)]
pub(crate) struct Outage<'a> {
    clock: &'a OutageClock,
    /// Zero for a call that does not wait: every error is returned.
    budget: Duration,
    /// Failures further apart than this are different outages.
    fresh: Duration,
    /// When the outage this call is in began (`None`: not in one).
    since: Option<Instant>,
    backoff: Duration,
}

impl<'a> Outage<'a> {
    /// A call's ride, on the client's `clock`, for at most `budget` per
    /// outage (zero: none).
    pub(crate) fn new(clock: &'a OutageClock, budget: Duration, fresh: Duration) -> Self {
        Outage { clock, budget, fresh, since: None, backoff: FIRST_BACKOFF }
    }

    /// An attempt got Redis's answer (whatever it was): any outage is over.
    pub(crate) fn answered(&mut self) {
        if self.since.take().is_some() {
            self.clock.ended();
            self.backoff = FIRST_BACKOFF;
        }
    }

    /// An attempt failed with `e`. `Ok(until)`: sleep on the call's wake-up
    /// until then at the latest, and try again. `Err(e)`: return it (not an
    /// outage, no budget, or the call's time is up: the deadline, or the
    /// budget since the outage began).
    pub(crate) fn ride(&mut self, e: Error, deadline: Option<Instant>) -> Result<Instant> {
        if self.budget.is_zero() || !e.is_outage() {
            return Err(e);
        }
        let now = Instant::now();
        let began = self.clock.failed(now, self.fresh);
        let since = *self.since.get_or_insert(began);
        let mut end = since.checked_add(self.budget).unwrap_or(now + self.budget);
        if let Some(deadline) = deadline {
            end = end.min(deadline);
        }
        if now >= end {
            return Err(e);
        }
        let until = (now + self.backoff).min(end);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Ok(until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRESH: Duration = Duration::from_secs(10);

    fn refused() -> Error {
        Error::unreachable()
    }

    #[test]
    fn an_outage_is_ridden_with_a_growing_back_off_until_the_budget() {
        let clock = OutageClock::default();
        let budget = Duration::from_millis(400);
        let mut outage = Outage::new(&clock, budget, FRESH);
        let start = Instant::now();
        let first = outage.ride(refused(), None).unwrap();
        assert!(first <= Instant::now() + FIRST_BACKOFF);
        let second = outage.ride(refused(), None).unwrap();
        assert!(second > first, "the back-off grows");
        // Every wait ends by the budget; then the error is returned.
        let mut rides = 0;
        while let Ok(until) = outage.ride(refused(), None) {
            assert!(until <= start + budget + Duration::from_millis(50));
            rides += 1;
            assert!(rides < 100, "never gave up");
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        assert!(start.elapsed() >= budget);
    }

    #[test]
    fn errors_other_than_an_outage_and_calls_that_do_not_wait_end_at_once() {
        let clock = OutageClock::default();
        let mut waiting = Outage::new(&clock, Duration::from_secs(5), FRESH);
        assert!(waiting.ride(Error::shutdown(), None).unwrap_err().is_shutdown());
        assert!(waiting.ride(Error::invalid_argument("x"), None).is_err());
        let mut once = Outage::new(&clock, Duration::ZERO, FRESH);
        assert!(once.ride(refused(), None).unwrap_err().is_connection_error());
    }

    #[test]
    fn the_deadline_ends_the_ride_before_the_budget() {
        let clock = OutageClock::default();
        let mut outage = Outage::new(&clock, Duration::from_secs(60), FRESH);
        let deadline = Instant::now() + Duration::from_millis(20);
        let until = outage.ride(refused(), Some(deadline)).unwrap();
        assert!(until <= deadline);
        let past = Instant::now() - Duration::from_millis(1);
        let mut late = Outage::new(&clock, Duration::from_secs(60), FRESH);
        assert!(late.ride(refused(), Some(past)).is_err());
    }

    #[test]
    fn a_waiter_joining_an_outage_shares_its_start_and_an_answer_ends_it() {
        let clock = OutageClock::default();
        let mut first = Outage::new(&clock, Duration::from_millis(30), FRESH);
        assert!(first.ride(refused(), None).is_ok());
        std::thread::sleep(Duration::from_millis(40));
        // A thread that takes over (the gate) gives up at once: the
        // outage began before it, and its budget is spent.
        let mut next = Outage::new(&clock, Duration::from_millis(30), FRESH);
        assert!(next.ride(refused(), None).is_err());
        // An answer ends the outage: the next failure starts a new one.
        first.answered();
        let mut later = Outage::new(&clock, Duration::from_millis(30), FRESH);
        assert!(later.ride(refused(), None).is_ok());
    }

    #[test]
    fn failures_further_apart_than_fresh_are_different_outages() {
        let clock = OutageClock::default();
        let start = Instant::now();
        assert_eq!(clock.failed(start, Duration::from_millis(5)), start);
        let later = start + Duration::from_millis(3);
        assert_eq!(clock.failed(later, Duration::from_millis(5)), start);
        let much_later = later + Duration::from_millis(6);
        assert_eq!(clock.failed(much_later, Duration::from_millis(5)), much_later);
    }
}
