//! The generic wait: one per channel and client, shared by the client's
//! threads that wait on that channel.
//!
//! Every kind but the reentrant lock waits the same way, Redisson's way:
//! try; if refused, subscribe to the kind's channel and try again at once
//! (a release between the first try and the subscription would otherwise
//! go unheard); then sleep until a message on the channel, or until a bound
//! the caller chooses (the holder's remaining lease, a permit's expiry, the
//! deadline), and try again. A [`ChannelWait`] gives that loop its two
//! pieces: one subscription for all of the client's waiting threads
//! (reference-counted by the subscriber, lingering briefly after the last
//! one leaves), and a wake-up counter the threads sleep on.
//!
//! The counter makes wake-ups impossible to miss: a thread reads it with
//! [`ChannelWait::seen`] *before* its attempt, and [`ChannelWait::wait_past`]
//! returns at once if a message arrived since. A replaced pub/sub
//! connection (messages may have been lost) counts as a message.
//!
//! ```text
//! let wait = inner.channel_wait(&name, &channel);
//! loop {
//!     let seen = wait.seen();
//!     match attempt()? { Won => break, Refused { retry_in } => {} }
//!     if out of time { break }
//!     if !wait.is_subscribed() { wait.subscribe(&inner.subscribers, deadline)?; continue }
//!     wait.wait_past(seen, now + retry_in (capped by the deadline));
//! }
//! ```

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::pubsub::router::Subscribers;
use crate::pubsub::subscriber::{Grant, Interest, Subscription, Waiters};

/// The waiting threads of one client on one channel.
pub(crate) struct ChannelWait {
    /// The object waited for (a lock or semaphore name).
    name: Arc<str>,
    channel: String,
    state: Mutex<State>,
    woken: Condvar,
    /// Held while subscribing, so that threads arriving together send one
    /// SUBSCRIBE.
    subscribing: Mutex<()>,
}

#[derive(Default)]
struct State {
    /// Messages (and reconnects) heard so far.
    wakeups: u64,
    /// The client's share of the channel, while anyone waits here.
    subscription: Option<Subscription>,
}

impl std::fmt::Debug for ChannelWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelWait").field("name", &self.name).field("channel", &self.channel).finish()
    }
}

impl ChannelWait {
    /// A wait on `channel` for the object `name`. Get one through the
    /// client (`Inner::channel_wait`), which shares it between threads.
    pub(crate) fn new(name: Arc<str>, channel: String) -> Self {
        ChannelWait {
            name,
            channel,
            state: Mutex::new(State::default()),
            woken: Condvar::new(),
            subscribing: Mutex::new(()),
        }
    }

    /// The wake-ups so far; read it before an attempt and pass it to
    /// [`ChannelWait::wait_past`] after a refusal.
    pub(crate) fn seen(&self) -> u64 {
        self.state.lock().wakeups
    }

    /// True while the channel is subscribed and still heard (a cluster
    /// slot that moved drops its subscription).
    pub(crate) fn is_subscribed(&self) -> bool {
        self.state.lock().subscription.as_ref().is_some_and(Subscription::is_live)
    }

    /// Subscribes the channel for this client, once however many threads
    /// call, and waits (at most the command timeout, not past `deadline`)
    /// for Redis to confirm it. The caller should try again right after.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        subscribers: &Subscribers,
        deadline: Option<Instant>,
    ) -> Result<()> {
        let _one_at_a_time = self.subscribing.lock();
        if self.is_subscribed() {
            return Ok(());
        }
        let waiters: Arc<dyn Waiters> = Arc::<ChannelWait>::clone(self);
        let interest = Interest {
            name: &self.name,
            channel: &self.channel,
            wake_channel: None,
            waiters: Arc::downgrade(&waiters),
        };
        let subscription = subscribers.subscribe(interest, deadline)?;
        self.state.lock().subscription = Some(subscription);
        Ok(())
    }

    /// Sleeps until a wake-up after `seen`, or until `until`; true when
    /// woken.
    pub(crate) fn wait_past(&self, seen: u64, until: Instant) -> bool {
        let mut st = self.state.lock();
        while st.wakeups == seen {
            if self.woken.wait_until(&mut st, until).timed_out() {
                return st.wakeups != seen;
            }
        }
        true
    }

    /// Wakes every waiting thread, as a message would (a kind that learns
    /// of a release by itself, e.g. its own release on this client).
    pub(crate) fn wake_all(&self) {
        self.state.lock().wakeups += 1;
        self.woken.notify_all();
    }
}

impl Waiters for ChannelWait {
    fn notify(&self) {
        self.wake_all();
    }

    fn grant(&self, _grant: Grant) {
        // Only the reentrant lock's wake channels carry grants.
        self.wake_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn wait() -> ChannelWait {
        ChannelWait::new(Arc::from("lock"), "channel".to_owned())
    }

    #[test]
    fn a_wakeup_after_the_reading_is_never_missed() {
        let wait = wait();
        let seen = wait.seen();
        wait.notify();
        let started = Instant::now();
        assert!(wait.wait_past(seen, started + Duration::from_secs(5)));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn without_a_wakeup_the_wait_ends_at_its_bound() {
        let wait = wait();
        let seen = wait.seen();
        assert!(!wait.wait_past(seen, Instant::now() + Duration::from_millis(20)));
    }

    #[test]
    fn one_message_wakes_every_waiting_thread() {
        let wait = Arc::new(wait());
        let seen = wait.seen();
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let wait = Arc::clone(&wait);
                std::thread::spawn(move || wait.wait_past(seen, Instant::now() + Duration::from_secs(10)))
            })
            .collect();
        wait.notify();
        for thread in threads {
            assert_eq!(thread.join().ok(), Some(true));
        }
    }
}
