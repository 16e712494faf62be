//! A waiter's share of the pub/sub connection: the channels it asked for,
//! counted while it lives and left to linger when it is dropped.

use std::sync::Arc;
use std::time::Instant;

use super::Subscriber;

/// A waiter's share of a lock's channel subscriptions (its unlock channel
/// and, for the reentrant lock, this client's wake channel); unsubscribes
/// when dropped.
pub(crate) struct Subscription {
    pub(super) subscriber: Arc<Subscriber>,
    pub(super) channels: Vec<String>,
    /// The lock name it was made for.
    pub(super) name: Arc<str>,
}

impl Subscription {
    /// False once the subscriber dropped the subscription's channels (their
    /// slot moved to another cluster node) or stopped: the waiter must
    /// subscribe again to hear its lock's unlocks.
    pub(crate) fn is_live(&self) -> bool {
        let st = self.subscriber.state.lock();
        !st.shutdown
            && self.channels.iter().all(|name| {
                st.channels.get(name).is_some_and(|c| c.listeners.iter().any(|l| l.name == self.name))
            })
    }
}

impl Subscription {
    /// Waits until the server has confirmed every channel of the
    /// subscription on the current connection (the connection may be down
    /// or being replaced), at most until `until`; true when confirmed.
    pub(crate) fn wait_confirmed(&self, until: Instant) -> bool {
        let subscriber = &self.subscriber;
        let mut st = subscriber.state.lock();
        loop {
            if st.shutdown {
                return false;
            }
            if self.channels.iter().all(|name| st.channels.contains_key(name) && st.is_confirmed(name)) {
                return true;
            }
            if subscriber.confirmed.wait_until(&mut st, until).timed_out() {
                return false;
            }
        }
    }

    /// Where the subscription's connection goes (`host:port`, or a
    /// socket path).
    pub(crate) fn node(&self) -> String {
        self.subscriber.target.lock().describe()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut st = self.subscriber.state.lock();
        let mut wake_timer = false;
        let now = Instant::now();
        for name in &self.channels {
            let Some(channel) = st.channels.get_mut(name) else { continue };
            if let Some(at) = channel.listeners.iter().position(|l| l.name == self.name) {
                let listener = &mut channel.listeners[at];
                listener.refs = listener.refs.saturating_sub(1);
                if listener.refs == 0 {
                    channel.listeners.swap_remove(at);
                }
            }
            if !channel.in_use() {
                wake_timer |= st.start_lingering(name, now);
            }
        }
        drop(st);
        if wake_timer {
            // The linger timer sleeps with no deadline: nothing lingered.
            self.subscriber.linger_due.notify_one();
        }
    }
}
