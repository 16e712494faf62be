//! One fair-lock waiter's wait: its two channels and what arrived on them.
//!
//! A waiting thread listens on Redisson's per-waiter channel
//! (`redisson_lock__channel:{<name>}:<owner>`, where any release, Java's
//! included, sends `0` for its turn) and on keyholder's grant channel
//! (`keyholder_fair__grant:{<name>}:<owner>`, where a keyholder release
//! that handed it the lock says so, saving the waiter an acquire round
//! trip). Both go through the client's shared subscriber as one
//! [`Interest`]; this type is its [`Waiters`]: a wake-up counter the thread
//! sleeps on, as `wait::channel::ChannelWait`'s, plus the grant, if one came.
//! (`ChannelWait` carries no payload, hence this small twin.)

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::pubsub::router::Subscribers;
use crate::pubsub::subscriber::{Grant, Interest, Subscription, Waiters};

#[derive(Default)]
struct State {
    wakeups: u64,
    grant: Option<Grant>,
}

/// What one waiting call of one thread hears.
#[derive(Default)]
pub(super) struct FairWait {
    state: Mutex<State>,
    woken: Condvar,
}

impl FairWait {
    /// The wake-ups so far: read before an attempt.
    pub(super) fn seen(&self) -> u64 {
        self.state.lock().wakeups
    }

    /// Sleeps until a wake-up after `seen`, or until `until`.
    pub(super) fn wait_past(&self, seen: u64, until: Instant) {
        let mut st = self.state.lock();
        while st.wakeups == seen {
            if self.woken.wait_until(&mut st, until).timed_out() {
                return;
            }
        }
    }

    /// The grant that arrived, if any (taken).
    pub(super) fn take_grant(&self) -> Option<Grant> {
        self.state.lock().grant.take()
    }

    fn wake(&self, grant: Option<Grant>) {
        let mut st = self.state.lock();
        st.wakeups += 1;
        if grant.is_some() {
            st.grant = grant;
        }
        self.woken.notify_all();
    }

    fn interest<'a>(self: &Arc<Self>, name: &'a Arc<str>, channel: &'a str, grant: &'a str) -> Interest<'a> {
        let waiters: Arc<dyn Waiters> = Arc::<FairWait>::clone(self);
        Interest { name, channel, wake_channel: Some(grant), waiters: Arc::downgrade(&waiters) }
    }

    /// Takes both channels back without a round trip when they still
    /// linger, subscribed, from this thread's last wait.
    pub(super) fn resume(
        self: &Arc<Self>,
        subscribers: &Subscribers,
        name: &Arc<str>,
        channel: &str,
        grant: &str,
    ) -> Option<Subscription> {
        subscribers.resume(self.interest(name, channel, grant))
    }

    /// Subscribes both channels (one round trip for those not subscribed),
    /// waiting at most the command timeout, not past `deadline`.
    pub(super) fn subscribe(
        self: &Arc<Self>,
        subscribers: &Subscribers,
        name: &Arc<str>,
        channel: &str,
        grant: &str,
        deadline: Option<Instant>,
    ) -> Result<Subscription> {
        subscribers.subscribe(self.interest(name, channel, grant), deadline)
    }
}

impl Waiters for FairWait {
    fn notify(&self) {
        self.wake(None);
    }

    fn grant(&self, grant: Grant) {
        self.wake(Some(grant));
    }
}

/// Where a granted hold's lease runs from, on this client's clock: the
/// grant came `grant.elapsed` (server time) after the waiter's last refused
/// attempt reached Redis, which was after `queued_at`, that attempt's send
/// time; and before the grant was heard. So this instant is never later
/// than the grant.
pub(super) fn granted_at(grant: &Grant, queued_at: Instant) -> Instant {
    queued_at + grant.elapsed.min(grant.received.saturating_duration_since(queued_at))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_grant_wakes_and_is_kept_until_taken() {
        let wait = FairWait::default();
        let seen = wait.seen();
        let received = Instant::now();
        wait.grant(Grant { owner: "c:1/7".into(), elapsed: Duration::from_millis(3), received });
        wait.wait_past(seen, Instant::now() + Duration::from_secs(5));
        assert_eq!(wait.take_grant().map(|g| g.owner), Some("c:1/7".to_owned()));
        assert!(wait.take_grant().is_none());
        wait.notify();
        assert_eq!(wait.seen(), seen + 2);
    }

    #[test]
    fn a_granted_lease_runs_from_no_later_than_the_grant() {
        let queued_at = Instant::now();
        let received = queued_at + Duration::from_millis(40);
        let grant = |ms| Grant { owner: "c:1/1".into(), elapsed: Duration::from_millis(ms), received };
        assert_eq!(granted_at(&grant(30), queued_at), queued_at + Duration::from_millis(30));
        assert_eq!(granted_at(&grant(5_000), queued_at), received);
    }
}
