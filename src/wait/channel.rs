//! The generic wait: how a client's threads sleep on a kind's channel, and
//! whom each message wakes.
//!
//! Every kind but the reentrant lock waits the same way, Redisson's way:
//! try; if refused, subscribe to the kind's channel and try again at once
//! (a release between the first try and the subscription would otherwise
//! go unheard); then sleep until a message on the channel, or until a bound
//! the caller chooses (the holder's remaining lease, a permit's expiry, the
//! deadline), and try again. A [`ChannelWait`] is one thread's place in that
//! loop; the threads of one client on one channel share what is behind it
//! (through [`ChannelWaits`]): one subscription however many threads wait
//! (reference-counted by the subscriber, lingering briefly after the last
//! one leaves), the wake-ups they sleep on, and a grant, for the fair lock.
//!
//! **Whom a message wakes** depends on what the channel carries ([`Wakes`]).
//! Most messages wake every waiting thread of the client: a latch opening, a
//! read-write lock's release, a fair lock's turn. A semaphore's message is a
//! number of permits (Redisson publishes the new count; the
//! permit-expirable semaphore's `addPermits`, the permits added), and, as in
//! Redisson, it wakes at most that many of the client's waiting threads:
//! a release of one permit costs one retry, not one per waiting thread.
//! Threads that want several permits each count as one, as in Redisson: a
//! message of 1 may wake a thread that wants 3 and leave asleep one that
//! wants 1, until the next message or its bound.
//!
//! Wake-ups are impossible to miss: a thread reads [`ChannelWait::seen`]
//! *before* its attempt, and [`ChannelWait::wait_past`] returns at once if
//! every thread was woken since; a semaphore's wake-ups are kept as tickets
//! (at most one per waiting thread) until threads take them, so one that
//! arrives before its thread sleeps is not lost either. A replaced pub/sub
//! connection (messages may have been lost) wakes every thread.
//!
//! ```text
//! let wait = waits.join(&name, &channel, wakes);
//! loop {
//!     let seen = wait.seen();
//!     match attempt()? { Won => break, Refused { retry_in } => {} }
//!     if out of time { break }
//!     if !wait.is_subscribed() { wait.subscribe(&subscribers, deadline)?; continue }
//!     wait.wait_past(seen, now + retry_in (capped by the deadline));
//! }
//! ```

use foldhash::HashMap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::pubsub::router::Subscribers;
use crate::pubsub::subscriber::{Grant, Interest, Subscription, Waiters};

/// What a message on a channel says, and so whom it wakes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wakes {
    /// Something changed: every waiting thread looks again.
    All,
    /// A number of available permits (Redisson's semaphore channel): at most
    /// that many waiting threads look again; none for 0 or less. A message
    /// that is no number wakes every thread.
    Permits,
}

/// One thread's place among the client's waiting threads on a channel.
/// Dropping it leaves; the last one to leave lets the subscription go.
pub(crate) struct ChannelWait {
    shared: Arc<Shared>,
}

/// The client's threads waiting on one channel, and what they hear.
struct Shared {
    /// The object waited for (a lock or semaphore name).
    name: Arc<str>,
    channel: String,
    /// A channel whose messages carry grants (the fair lock's), if any.
    grant_channel: Option<String>,
    wakes: Wakes,
    state: Mutex<State>,
    woken: Condvar,
    /// Held while subscribing, so that threads arriving together send one
    /// SUBSCRIBE.
    subscribing: Mutex<()>,
}

#[derive(Default)]
struct State {
    /// Times every thread was woken so far.
    wakeups: u64,
    /// Wake-ups for one thread each, not yet taken (never more than
    /// `waiting`).
    tickets: usize,
    /// The threads here (their [`ChannelWait`]s).
    waiting: usize,
    /// A lock handed over on the grant channel, until taken.
    grant: Option<Grant>,
    /// The client's share of the channel, while anyone waits here.
    subscription: Option<Subscription>,
}

impl std::fmt::Debug for ChannelWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelWait")
            .field("name", &self.shared.name)
            .field("channel", &self.shared.channel)
            .finish_non_exhaustive()
    }
}

/// The client's channel waits in use, by channel, so that its threads on
/// one channel share one.
#[derive(Default)]
pub(crate) struct ChannelWaits {
    map: Mutex<HashMap<String, Weak<Shared>>>,
}

/// Past this many channels, waits nobody uses are forgotten now and then.
const MIN_SWEEP_AT: usize = 1024;

impl ChannelWaits {
    /// A place among this client's threads waiting on `channel` for the
    /// object `name`, whose messages say what `wakes` says; the first
    /// thread makes the shared wait, the last one to leave drops it.
    pub(crate) fn join(&self, name: &Arc<str>, channel: &str, wakes: Wakes) -> ChannelWait {
        let mut map = self.map.lock();
        let shared = match map.get(channel).and_then(Weak::upgrade) {
            Some(shared) => shared,
            None => {
                let shared = Arc::new(Shared::new(Arc::clone(name), channel.to_owned(), None, wakes));
                map.insert(channel.to_owned(), Arc::downgrade(&shared));
                if map.len() > MIN_SWEEP_AT && map.len().is_power_of_two() {
                    // Forget waits nobody uses: amortised O(1).
                    map.retain(|_, w| w.strong_count() > 0);
                }
                shared
            }
        };
        ChannelWait::enter(shared)
    }
}

impl ChannelWaits {
    /// How many of the client's threads are in the wait on `channel`.
    pub(crate) fn waiting(&self, channel: &str) -> usize {
        let shared = self.map.lock().get(channel).and_then(Weak::upgrade);
        shared.map_or(0, |s| s.state.lock().waiting)
    }
}

impl Shared {
    fn new(name: Arc<str>, channel: String, grant_channel: Option<String>, wakes: Wakes) -> Self {
        Shared {
            name,
            channel,
            grant_channel,
            wakes,
            state: Mutex::new(State::default()),
            woken: Condvar::new(),
            subscribing: Mutex::new(()),
        }
    }

    fn interest(self: &Arc<Self>) -> Interest<'_> {
        let waiters: Arc<dyn Waiters> = Arc::<Shared>::clone(self);
        Interest {
            name: &self.name,
            channel: &self.channel,
            wake_channel: self.grant_channel.as_deref(),
            waiters: Arc::downgrade(&waiters),
        }
    }

    /// Wakes every waiting thread.
    fn wake_all(&self) {
        let mut st = self.state.lock();
        st.wakeups += 1;
        // Everyone looks again: tickets would only cost extra attempts.
        st.tickets = 0;
        self.woken.notify_all();
    }

    /// Wakes at most `permits` waiting threads (one each).
    fn wake_some(&self, permits: i64) {
        let mut st = self.state.lock();
        let before = st.tickets;
        let wanted = usize::try_from(permits.max(0)).unwrap_or(usize::MAX);
        st.tickets = st.tickets.saturating_add(wanted).min(st.waiting);
        for _ in before..st.tickets {
            self.woken.notify_one();
        }
    }
}

impl ChannelWait {
    /// A wait of its own for one thread, not shared: the fair lock's, on
    /// its waiter's own channel and, when given, grant channel (whose
    /// messages hand it the lock; see [`ChannelWait::take_grant`]).
    pub(crate) fn alone(name: Arc<str>, channel: String, grant_channel: Option<String>) -> Self {
        ChannelWait::enter(Arc::new(Shared::new(name, channel, grant_channel, Wakes::All)))
    }

    fn enter(shared: Arc<Shared>) -> Self {
        shared.state.lock().waiting += 1;
        ChannelWait { shared }
    }

    /// The wake-ups so far; read it before an attempt and pass it to
    /// [`ChannelWait::wait_past`] after a refusal.
    pub(crate) fn seen(&self) -> u64 {
        self.shared.state.lock().wakeups
    }

    /// True while the channel is subscribed and still heard (a cluster
    /// slot that moved drops its subscription).
    pub(crate) fn is_subscribed(&self) -> bool {
        self.shared.state.lock().subscription.as_ref().is_some_and(Subscription::is_live)
    }

    /// Subscribes the channel for this client, once however many threads
    /// call, and waits (at most the command timeout, not past `deadline`)
    /// for Redis to confirm it. The caller should try again right after.
    pub(crate) fn subscribe(&self, subscribers: &Subscribers, deadline: Option<Instant>) -> Result<()> {
        let _one_at_a_time = self.shared.subscribing.lock();
        if self.is_subscribed() {
            return Ok(());
        }
        let subscription = subscribers.subscribe(self.shared.interest(), deadline)?;
        self.shared.state.lock().subscription = Some(subscription);
        Ok(())
    }

    /// Takes the channels back without a round trip when they still
    /// linger, subscribed, from an earlier wait; true when it did.
    pub(crate) fn resume(&self, subscribers: &Subscribers) -> bool {
        let _one_at_a_time = self.shared.subscribing.lock();
        if self.is_subscribed() {
            return true;
        }
        let Some(subscription) = subscribers.resume(self.shared.interest()) else { return false };
        self.shared.state.lock().subscription = Some(subscription);
        true
    }

    /// Sleeps until this thread is woken after `seen` (every thread was, or
    /// it took a ticket), or until `until`; true when woken.
    pub(crate) fn wait_past(&self, seen: u64, until: Instant) -> bool {
        let mut st = self.shared.state.lock();
        loop {
            if st.wakeups != seen {
                return true;
            }
            if st.tickets > 0 {
                st.tickets -= 1;
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            // Woken or timed out, look again: a ticket may be left over.
            self.shared.woken.wait_until(&mut st, until);
        }
    }

    /// The grant that arrived on the grant channel, if any (taken).
    pub(crate) fn take_grant(&self) -> Option<Grant> {
        self.shared.state.lock().grant.take()
    }
}

impl Drop for ChannelWait {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        st.waiting = st.waiting.saturating_sub(1);
        st.tickets = st.tickets.min(st.waiting);
    }
}

impl Waiters for Shared {
    fn notify(&self) {
        self.wake_all();
    }

    fn grant(&self, grant: Grant) {
        self.state.lock().grant = Some(grant);
        self.wake_all();
    }

    fn message(&self, payload: &str) {
        match (self.wakes, payload.trim().parse::<i64>()) {
            (Wakes::Permits, Ok(permits)) => self.wake_some(permits),
            _ => self.wake_all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    fn waits() -> ChannelWaits {
        ChannelWaits::default()
    }

    fn join(waits: &ChannelWaits, wakes: Wakes) -> ChannelWait {
        waits.join(&Arc::from("sem"), "channel", wakes)
    }

    /// `n` threads waiting on `wakes`, each until `bound` from now at most;
    /// whether each was woken arrives on the channel. Each joins before this
    /// returns, so a message sent next counts them all.
    fn waiting(waits: &ChannelWaits, wakes: Wakes, n: usize, bound: Duration) -> mpsc::Receiver<bool> {
        let (tx, rx) = mpsc::channel();
        for _ in 0..n {
            let wait = join(waits, wakes);
            let seen = wait.seen();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = tx.send(wait.wait_past(seen, Instant::now() + bound));
            });
        }
        rx
    }

    /// How many of `n` threads waiting on `wakes` (each at most `bound`)
    /// `send` wakes. One more thread is in the loop but never sleeps, and
    /// leaves after the message, taking its ticket along.
    fn woken_by(wakes: Wakes, n: usize, bound: Duration, send: impl FnOnce(&Shared)) -> usize {
        let waits = waits();
        let awake = join(&waits, wakes);
        let rx = waiting(&waits, wakes, n, bound);
        send(shared(&awake));
        drop(awake);
        (0..n).filter(|_| rx.recv_timeout(LIMIT * 2).expect("a waiter never returned")).count()
    }

    fn shared(wait: &ChannelWait) -> &Shared {
        &wait.shared
    }

    #[test]
    fn threads_on_one_channel_share_one_wait_and_the_last_one_drops_it() {
        let waits = waits();
        let (a, b) = (join(&waits, Wakes::All), join(&waits, Wakes::All));
        assert!(Arc::ptr_eq(&a.shared, &b.shared));
        assert_eq!(shared(&a).state.lock().waiting, 2);
        let weak = Arc::downgrade(&a.shared);
        drop((a, b));
        assert!(weak.upgrade().is_none());
        let other = waits.join(&Arc::from("l"), "other", Wakes::All);
        assert_eq!(shared(&other).state.lock().waiting, 1);
    }

    #[test]
    fn the_waiting_threads_of_a_channel_are_counted_while_they_wait() {
        let waits = waits();
        assert_eq!(waits.waiting("channel"), 0);
        let (a, b) = (join(&waits, Wakes::Permits), join(&waits, Wakes::Permits));
        assert_eq!(waits.waiting("channel"), 2);
        assert_eq!(waits.waiting("other"), 0);
        drop(a);
        assert_eq!(waits.waiting("channel"), 1);
        drop(b);
        assert_eq!(waits.waiting("channel"), 0);
    }

    #[test]
    fn a_wakeup_after_the_reading_is_never_missed() {
        let waits = waits();
        let wait = join(&waits, Wakes::All);
        let seen = wait.seen();
        shared(&wait).notify();
        let started = Instant::now();
        assert!(wait.wait_past(seen, started + LIMIT));
        assert!(started.elapsed() < LIMIT);
    }

    #[test]
    fn without_a_wakeup_the_wait_ends_at_its_bound() {
        let waits = waits();
        let wait = join(&waits, Wakes::Permits);
        let seen = wait.seen();
        assert!(!wait.wait_past(seen, Instant::now() + Duration::from_millis(20)));
    }

    #[test]
    fn one_message_wakes_every_waiting_thread_of_a_wake_all_channel() {
        assert_eq!(woken_by(Wakes::All, 3, LIMIT, |s| s.message("0")), 3);
    }

    #[test]
    fn a_permit_count_wakes_at_most_that_many_threads_each_once() {
        let short = Duration::from_millis(300);
        assert_eq!(woken_by(Wakes::Permits, 4, short, |s| s.message("2")), 2);
        assert_eq!(woken_by(Wakes::Permits, 3, LIMIT, |s| s.message("1000")), 3);
    }

    #[test]
    fn no_permit_wakes_nobody_and_a_message_that_is_no_count_wakes_everyone() {
        let waits = waits();
        let wait = join(&waits, Wakes::Permits);
        for nothing in ["0", "-3"] {
            shared(&wait).message(nothing);
            assert!(!wait.wait_past(wait.seen(), Instant::now() + Duration::from_millis(20)), "{nothing}");
        }
        let seen = wait.seen();
        shared(&wait).message("not a count");
        assert!(wait.wait_past(seen, Instant::now() + LIMIT));
    }

    #[test]
    fn tickets_are_kept_for_a_thread_not_asleep_yet_but_never_past_the_waiting_threads() {
        let waits = waits();
        let (a, b) = (join(&waits, Wakes::Permits), join(&waits, Wakes::Permits));
        let seen = a.seen();
        shared(&a).message("5");
        assert_eq!(shared(&a).state.lock().tickets, 2);
        drop(b);
        assert_eq!(shared(&a).state.lock().tickets, 1, "a leaving thread takes its ticket along");
        assert!(a.wait_past(seen, Instant::now()), "a ticket before the sleep is kept");
        assert!(!a.wait_past(seen, Instant::now() + Duration::from_millis(20)), "and taken once");
    }

    #[test]
    fn a_reconnect_wakes_every_thread_even_on_a_permit_channel() {
        assert_eq!(woken_by(Wakes::Permits, 3, LIMIT, Waiters::notify), 3);
    }

    #[test]
    fn a_grant_wakes_and_is_kept_until_taken() {
        let wait = ChannelWait::alone(Arc::from("fair"), "turn".to_owned(), Some("grant".to_owned()));
        let seen = wait.seen();
        let received = Instant::now();
        shared(&wait).grant(Grant { owner: "c:1/7".into(), elapsed: Duration::from_millis(3), received });
        assert!(wait.wait_past(seen, Instant::now() + LIMIT));
        assert_eq!(wait.take_grant().map(|g| g.owner), Some("c:1/7".to_owned()));
        assert!(wait.take_grant().is_none());
        shared(&wait).notify();
        assert_eq!(wait.seen(), seen + 2);
    }
}
