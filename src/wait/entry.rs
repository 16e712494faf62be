//! A client's local state for one lock name: the gate, the wake-up slot, and
//! the shared subscription.
//!
//! **The gate.** Threads of one client that want the same lock queue here, in
//! FIFO order, before they talk to Redis. Only the thread at the gate runs the
//! acquire script or waits for an unlock message, so
//!
//! * the releasing thread cannot barge ahead of its own client's waiters;
//! * however many threads wait, an unlock message wakes one thread per client;
//! * a release can hand the lock straight to the next local thread in one
//!   script call (`handoff.lua`), for as long as the client's fairness window
//!   allows: the lock never becomes free, nobody else is woken, and the next
//!   thread finds its guard ready when it wakes.
//!
//! The gate is advisory: Redis stays the only authority on who holds the lock.
//! A gate whose holder's lease has run out (a leaked guard, a lost hold) is
//! taken over by the next waiter, so a stuck local thread can never block the
//! others longer than its lease.
//!
//! **The wake-up slot** is a sticky permit: an unlock message, or this
//! client's turn, that arrives before the waiting thread parks is kept, never
//! lost; a lock handed over by another client's release waits in it as a
//! [`Grant`] for the thread at the gate.
//!
//! **The subscription** to the lock's unlock and wake channels is made by the first
//! thread that has to wait, in Redis or in the queue behind a local holder,
//! and kept while any local thread waits, so a queue of local waiters
//! subscribes once, not once per thread. Queued threads listen too: an
//! unlock message while a local thread holds the lock makes the front of the
//! queue ask Redis whether that hold still exists (it may have been
//! force-unlocked or lost with a Redis restart).

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::error::{Error, LostReason, Result};
use crate::holds::hold::Hold;
use crate::holds::renew::OnLost;
use crate::lease::Lease;
use crate::names::LockKeys;
use crate::pubsub::subscriber::{Grant, Interest, Subscription, Waiters};

pub(crate) struct Entry {
    /// The lock's name and the keys and channels derived from it.
    pub(crate) keys: LockKeys,
    state: Mutex<State>,
    woken: Condvar,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("name", &self.keys.name).finish_non_exhaustive()
    }
}

/// Who is at the gate.
enum Gate {
    Free,
    /// A thread is running the acquire script or waiting in Redis.
    Acquiring(u64),
    /// The holder's release is handing the lock to this queued thread.
    Handing(u64),
    /// The lock was handed to `hold.thread`, which has not woken yet.
    Handed(Arc<Hold>),
    /// A thread holds the lock.
    Held(Arc<Hold>),
}

/// What a queued thread would need to receive the lock by hand-off.
#[derive(Debug, Clone)]
pub(crate) struct Successor {
    pub(crate) thread: u64,
    pub(crate) owner: String,
    pub(crate) lease: Lease,
    pub(crate) lease_ms: u64,
    /// A fenced acquisition needs a token from the acquire script: no hand-off.
    pub(crate) fenced: bool,
}

struct Queued {
    successor: Successor,
    wake: Sender<()>,
}

struct State {
    gate: Gate,
    queue: VecDeque<Queued>,
    /// When the lock last passed to this client from a free state: local
    /// hand-offs continue only within the fairness window from here.
    run_started: Option<Instant>,
    /// An unlock message arrived and was not yet consumed.
    wake_pending: bool,
    /// The lock was handed to a thread of this client.
    grant: Option<Grant>,
    subscription: Option<Subscription>,
    /// An unlock message arrived while a local thread held the lock.
    holder_suspect: bool,
    /// A queued thread is subscribing on the queue's behalf.
    subscribing: bool,
    shutdown: bool,
}

/// What the gate needs from Redis while threads queue.
pub(crate) trait GateRedis {
    /// Subscribes the entry's unlock channel.
    fn subscribe(&self, entry: &Arc<Entry>) -> Result<Subscription>;
    /// Whether `hold`'s owner still holds the lock (true if unsure).
    fn still_held(&self, hold: &Hold) -> bool;
}

/// How a thread got through the gate.
#[derive(Debug)]
pub(crate) enum Entered {
    /// It is at the gate and must acquire in Redis.
    Gate,
    /// The previous holder handed it the lock.
    Handed(Arc<Hold>),
}

/// How a wait for an unlock message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    Notified,
    TimedOut,
}

/// How long a thread chosen as successor waits, per round, for the
/// releasing thread to finish the hand-off (which is bounded by the client's
/// timeouts anyway).
const HANDING_POLL: Duration = Duration::from_secs(1);

impl Entry {
    pub(crate) fn new(keys: LockKeys) -> Self {
        Entry {
            keys,
            state: Mutex::new(State {
                gate: Gate::Free,
                queue: VecDeque::new(),
                run_started: None,
                wake_pending: false,
                grant: None,
                subscription: None,
                holder_suspect: false,
                subscribing: false,
                shutdown: false,
            }),
            woken: Condvar::new(),
        }
    }

    /// The live hold of `thread`, for re-entry.
    pub(crate) fn hold_of(&self, thread: u64) -> Option<Arc<Hold>> {
        match &self.state.lock().gate {
            Gate::Held(hold) if hold.thread == thread && !hold.is_lost() => Some(Arc::clone(hold)),
            _ => None,
        }
    }

    /// True when `thread` holds (or was handed) a hold here other than
    /// `hold_id`: it locked again after `hold_id` was lost.
    pub(crate) fn has_newer_hold(&self, thread: u64, hold_id: u64) -> bool {
        match &self.state.lock().gate {
            Gate::Held(h) | Gate::Handed(h) => h.thread == thread && h.id != hold_id,
            _ => false,
        }
    }

    /// Enters the gate as `successor.thread`. Without `block`, returns
    /// `Ok(None)` at once if another local thread is there; with it, queues
    /// until the gate (or the lock itself) is handed over, or `deadline`
    /// passes; `queued` is called when it queues (to observe the wait).
    pub(crate) fn enter_gate(
        self: &Arc<Self>,
        successor: &Successor,
        deadline: Option<Instant>,
        block: bool,
        queued: impl FnOnce(),
        redis: &dyn GateRedis,
    ) -> Result<Option<Entered>> {
        let thread = successor.thread;
        let wake: Receiver<()> = {
            let mut st = self.state.lock();
            if st.shutdown {
                return Err(Error::shutdown());
            }
            if st.is_acquiring(thread) {
                // Only a token's id can be here twice: two threads acquiring
                // with one token at once, which would share one place.
                return Err(Error::invalid_argument(format!(
                    "lock '{}': another thread of this client is acquiring it with the same owner token",
                    self.keys.name
                )));
            }
            if st.queue.is_empty() && st.try_take(thread) {
                return Ok(Some(Entered::Gate));
            }
            if !block {
                return Ok(None);
            }
            let (tx, rx) = crossbeam_channel::bounded(1);
            st.queue.push_back(Queued { successor: successor.clone(), wake: tx });
            rx
        };
        queued();
        self.subscribe_for_queue(redis);
        loop {
            let until = {
                let st = self.state.lock();
                match &st.gate {
                    Gate::Handing(t) if *t == thread => Some(Instant::now() + HANDING_POLL),
                    Gate::Held(hold) => Some(deadline.map_or(hold.deadline(), |d| d.min(hold.deadline()))),
                    _ => deadline,
                }
            };
            // A message, a timeout and a disconnect all mean "look again".
            let _ = match until {
                Some(until) => wake.recv_deadline(until).map_err(drop),
                None => wake.recv().map_err(drop),
            };
            let mut st = self.state.lock();
            match &st.gate {
                Gate::Acquiring(t) if *t == thread => return Ok(Some(Entered::Gate)),
                Gate::Handed(hold) if hold.thread == thread => {
                    let hold = Arc::clone(hold);
                    st.gate = Gate::Held(Arc::clone(&hold));
                    return Ok(Some(Entered::Handed(hold)));
                }
                // Chosen as successor: wait for the hand-off to finish,
                // whatever the deadline, since it may bring the lock.
                Gate::Handing(t) if *t == thread => continue,
                _ => {}
            }
            let at_front = st.queue.front().is_some_and(|q| q.successor.thread == thread);
            if at_front && std::mem::take(&mut st.holder_suspect) {
                // An unlock message arrived while a local thread holds the
                // lock: it may have been force-unlocked or lost. Ask Redis.
                if let Gate::Held(hold) = &st.gate {
                    let hold = Arc::clone(hold);
                    drop(st);
                    // A hold being released vanishes from Redis normally.
                    if !hold.is_releasing() && !redis.still_held(&hold) && !hold.is_releasing() {
                        hold.mark_lost(LostReason::Gone);
                    }
                    st = self.state.lock();
                }
            }
            if at_front && st.try_take(thread) {
                st.queue.pop_front();
                return Ok(Some(Entered::Gate));
            }
            if st.shutdown || deadline.is_some_and(|d| Instant::now() >= d) {
                st.queue.retain(|q| q.successor.thread != thread);
                st.drop_unneeded_subscription();
                return if st.shutdown { Err(Error::shutdown()) } else { Ok(None) };
            }
        }
    }

    /// Subscribes the unlock channel for threads queued behind a local
    /// holder, so that they hear if its lock is force-unlocked or lost. One
    /// queued thread does it; the subscription is kept while any waits.
    fn subscribe_for_queue(self: &Arc<Self>, redis: &dyn GateRedis) {
        {
            let mut st = self.state.lock();
            if st.has_live_subscription() || st.subscribing || st.shutdown {
                return;
            }
            st.subscribing = true;
        }
        let subscription = redis.subscribe(self);
        let mut st = self.state.lock();
        st.subscribing = false;
        if let Ok(subscription) = subscription
            && st.subscription.is_none()
            && !st.shutdown
        {
            st.subscription = Some(subscription);
            st.drop_unneeded_subscription();
        }
    }

    /// Wakes the first queued thread to look at the gate again (its holder
    /// was found lost).
    pub(crate) fn wake_front(&self) {
        if let Some(front) = self.state.lock().queue.front() {
            let _ = front.wake.try_send(());
        }
    }

    /// Leaves the gate after a failed or abandoned acquisition.
    pub(crate) fn leave_gate(&self, thread: u64) {
        let mut st = self.state.lock();
        if matches!(st.gate, Gate::Acquiring(t) if t == thread) {
            st.hand_off();
        }
    }

    /// Records that the thread at the gate acquired the lock from Redis:
    /// local hand-offs may follow for a fairness window.
    pub(crate) fn set_held(&self, hold: Arc<Hold>) {
        let mut st = self.state.lock();
        // The run starts when the acquisition was sent: no clock read.
        st.run_started = Some(hold.acquired_at());
        st.gate = Gate::Held(hold);
        st.drop_unneeded_subscription();
    }

    /// Hands the gate on after the hold `hold_id` ended; a no-op if the gate
    /// has moved on already (taken over after the hold was lost, or handed).
    pub(crate) fn release_gate(&self, hold_id: u64) {
        let mut st = self.state.lock();
        if matches!(&st.gate, Gate::Held(h) if h.id == hold_id) {
            st.hand_off();
        }
    }

    /// True when threads of this client are queued for the gate: one of them
    /// takes over a waiter's place in Redis's queue when that waiter leaves.
    pub(crate) fn has_queued_threads(&self) -> bool {
        !self.state.lock().queue.is_empty()
    }

    /// Picks the next queued thread to receive the lock from the hold
    /// `hold_id` by hand-off, if the local run is younger than `window`.
    /// The chosen thread stays reserved until [`finish_handoff`](Entry::finish_handoff).
    pub(crate) fn reserve_successor(&self, hold_id: u64, window: Duration) -> Option<Successor> {
        let mut st = self.state.lock();
        if !matches!(&st.gate, Gate::Held(h) if h.id == hold_id) {
            return None;
        }
        if st.run_started.is_none_or(|started| started.elapsed() >= window) {
            return None;
        }
        let next = st.queue.front().filter(|q| !q.successor.fenced)?.successor.clone();
        st.gate = Gate::Handing(next.thread);
        Some(next)
    }

    /// Ends a hand-off begun by [`reserve_successor`](Entry::reserve_successor):
    /// gives the successor its hold, or, when the lock was not handed over,
    /// the gate, to acquire in Redis itself.
    pub(crate) fn finish_handoff(&self, handed: Option<Arc<Hold>>) {
        let mut st = self.state.lock();
        let Gate::Handing(thread) = st.gate else { return };
        let Some(position) = st.queue.iter().position(|q| q.successor.thread == thread) else {
            st.hand_off();
            return;
        };
        let queued = st.queue.remove(position);
        st.gate = match handed {
            Some(hold) => Gate::Handed(hold),
            None => Gate::Acquiring(thread),
        };
        if let Some(queued) = queued {
            let _ = queued.wake.try_send(());
        }
        st.drop_unneeded_subscription();
    }

    /// True while a thread of this client holds the lock, or is being
    /// handed it.
    pub(crate) fn is_held_here(&self) -> bool {
        matches!(self.state.lock().gate, Gate::Held(_) | Gate::Handed(_) | Gate::Handing(_))
    }

    /// True when no thread is at or queued for the gate.
    pub(crate) fn is_idle(&self) -> bool {
        let st = self.state.lock();
        matches!(st.gate, Gate::Free) && st.queue.is_empty()
    }

    /// True when the entry keeps an unlock-channel subscription that still
    /// hears its lock: on a Redis Cluster, one whose slot moved to another
    /// node is dropped here, and the caller subscribes again.
    pub(crate) fn is_subscribed(&self) -> bool {
        self.state.lock().has_live_subscription()
    }

    /// Keeps `subscription` for the local waiters, unless one is kept already.
    pub(crate) fn keep_subscription(&self, subscription: Subscription) {
        let mut st = self.state.lock();
        if st.subscription.is_none() && !st.shutdown {
            st.subscription = Some(subscription);
        }
    }

    /// Forgets unlock messages that arrived before the caller's next attempt.
    pub(crate) fn clear_wake(&self) {
        self.state.lock().wake_pending = false;
    }

    /// Waits for an unlock message until `until`.
    pub(crate) fn wait_wake(&self, until: Instant) -> Result<Wake> {
        let mut st = self.state.lock();
        loop {
            if st.shutdown {
                return Err(Error::shutdown());
            }
            if st.wake_pending {
                st.wake_pending = false;
                return Ok(Wake::Notified);
            }
            if self.woken.wait_until(&mut st, until).timed_out() {
                let notified = std::mem::take(&mut st.wake_pending);
                return Ok(if notified { Wake::Notified } else { Wake::TimedOut });
            }
        }
    }

    /// What the subscriber needs to wake this entry's waiting threads.
    pub(crate) fn interest(self: &Arc<Self>) -> Interest<'_> {
        let waiters: Weak<dyn Waiters> = Arc::downgrade(self) as Weak<Entry>;
        Interest {
            name: &self.keys.name,
            channel: &self.keys.channel,
            wake_channel: Some(&self.keys.wake_channel),
            waiters,
        }
    }

    /// An unlock message (or a reconnect) arrived: wake the waiting thread;
    /// if a local thread holds the lock, have the first queued thread check
    /// that it still does.
    pub(crate) fn notify(&self) {
        let mut st = self.state.lock();
        st.wake_pending = true;
        self.woken.notify_all();
        if matches!(st.gate, Gate::Held(_)) && !st.queue.is_empty() {
            st.holder_suspect = true;
            if let Some(front) = st.queue.front() {
                let _ = front.wake.try_send(());
            }
        }
    }

    /// A release handed the lock to `grant.owner`: wake the waiting thread.
    pub(crate) fn grant(&self, grant: Grant) {
        let mut st = self.state.lock();
        st.grant = Some(grant);
        st.wake_pending = true;
        self.woken.notify_all();
    }

    /// The grant received for a thread of this client, if any (once).
    pub(crate) fn take_grant(&self) -> Option<Grant> {
        self.state.lock().grant.take()
    }

    /// Wakes everyone with a shutdown error.
    pub(crate) fn shut_down(&self) {
        let mut st = self.state.lock();
        st.shutdown = true;
        st.subscription = None;
        for queued in &st.queue {
            let _ = queued.wake.try_send(());
        }
        self.woken.notify_all();
    }
}

impl OnLost for Entry {
    /// Threads of this client queued behind the lost hold may take the
    /// lock now.
    fn hold_lost(&self, _hold: &Hold) {
        self.wake_front();
    }
}

impl Waiters for Entry {
    fn notify(&self) {
        Entry::notify(self);
    }

    fn grant(&self, grant: Grant) {
        Entry::grant(self, grant);
    }

    /// The lock's channels are unlock and wake channels, never another
    /// kind's; any other message is a reason to look again.
    fn message(&self, _payload: &str) {
        Entry::notify(self);
    }
}

impl State {
    /// True when `thread` is at the gate acquiring, being handed the lock,
    /// or queued.
    fn is_acquiring(&self, thread: u64) -> bool {
        let at_gate = match &self.gate {
            Gate::Acquiring(t) | Gate::Handing(t) => *t == thread,
            Gate::Handed(hold) => hold.thread == thread,
            Gate::Free | Gate::Held(_) => false,
        };
        at_gate || self.queue.iter().any(|q| q.successor.thread == thread)
    }

    /// Takes the gate if it is free, or if its holder's hold has run out.
    fn try_take(&mut self, thread: u64) -> bool {
        let takeable = match &self.gate {
            Gate::Free => true,
            Gate::Acquiring(_) | Gate::Handing(_) | Gate::Handed(_) => false,
            Gate::Held(hold) => {
                if hold.is_lost() {
                    hold.mark_lost(LostReason::LeaseExpired);
                    true
                } else {
                    false
                }
            }
        };
        if takeable {
            self.gate = Gate::Acquiring(thread);
        }
        takeable
    }

    /// Frees the gate and hands it to the first queued thread.
    fn hand_off(&mut self) {
        self.gate = Gate::Free;
        if let Some(next) = self.queue.pop_front() {
            self.gate = Gate::Acquiring(next.successor.thread);
            let _ = next.wake.try_send(());
        }
        self.drop_unneeded_subscription();
    }

    /// Drops a subscription that no longer hears the lock (see
    /// `Subscription::is_live`); true when one is kept.
    fn has_live_subscription(&mut self) -> bool {
        if self.subscription.as_ref().is_some_and(|s| !s.is_live()) {
            self.subscription = None;
        }
        self.subscription.is_some()
    }

    /// Lets the subscription go once no local thread waits for the lock.
    fn drop_unneeded_subscription(&mut self) {
        let waiting = !self.queue.is_empty() || matches!(self.gate, Gate::Acquiring(_) | Gate::Handing(_));
        if !waiting {
            self.subscription = None;
        }
    }
}

/// The gate's transitions, driven without Redis: a fake seam answers
/// "subscribe" (refused, so the queue relies on its own wake-ups) and "is
/// the holder still there".
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    use super::*;
    use crate::holds::hold::Acquisition;

    const LIMIT: Duration = Duration::from_secs(5);

    struct FakeRedis {
        holder_there: AtomicBool,
    }

    impl GateRedis for FakeRedis {
        fn subscribe(&self, _: &Arc<Entry>) -> Result<Subscription> {
            Err(Error::shutdown())
        }

        fn still_held(&self, _: &Hold) -> bool {
            self.holder_there.load(Ordering::Acquire)
        }
    }

    fn redis() -> Arc<FakeRedis> {
        Arc::new(FakeRedis { holder_there: AtomicBool::new(true) })
    }

    fn entry() -> Arc<Entry> {
        Arc::new(Entry::new(LockKeys::new(&Arc::from("l"), "me")))
    }

    fn successor(thread: u64) -> Successor {
        Successor {
            thread,
            owner: format!("me:{thread}"),
            lease: Lease::Watchdog,
            lease_ms: 30_000,
            fenced: false,
        }
    }

    fn hold(entry: &Arc<Entry>, id: u64, thread: u64) -> Arc<Hold> {
        let acquisition = Acquisition {
            owner: format!("me:{thread}"),
            thread,
            lease: Lease::Watchdog,
            lease_ms: 30_000,
            token: None,
            sent: Instant::now(),
        };
        Arc::new(Hold::new(id, Arc::clone(&entry.keys.name), acquisition, "me", "lock"))
    }

    /// Thread `thread` enters the gate on a thread of its own; its outcome
    /// arrives on the channel.
    fn enter(entry: &Arc<Entry>, redis: &Arc<FakeRedis>, thread: u64, deadline: Option<Instant>) -> Outcome {
        let (tx, rx) = mpsc::channel();
        let (entry, redis) = (Arc::clone(entry), Arc::clone(redis));
        std::thread::spawn(move || {
            let _ = tx.send(entry.enter_gate(&successor(thread), deadline, true, || {}, &*redis));
        });
        rx
    }

    /// Thread 1 holds the lock (hold 10), and thread 2 is queued behind it
    /// with `deadline`: the gate, its fake Redis, the hold, and thread 2's
    /// outcome.
    fn held_with_one_queued(deadline: Option<Instant>) -> (Arc<Entry>, Arc<FakeRedis>, Arc<Hold>, Outcome) {
        let (entry, redis) = (entry(), redis());
        assert!(matches!(
            entry.enter_gate(&successor(1), None, true, || {}, &*redis),
            Ok(Some(Entered::Gate))
        ));
        let holder = hold(&entry, 10, 1);
        entry.set_held(Arc::clone(&holder));
        let second = enter(&entry, &redis, 2, deadline);
        queued(&entry, 1);
        (entry, redis, holder, second)
    }

    /// Where a thread's `enter_gate` outcome arrives.
    type Outcome = mpsc::Receiver<Result<Option<Entered>>>;

    fn queued(entry: &Entry, n: usize) {
        let until = Instant::now() + LIMIT;
        while entry.state.lock().queue.len() != n {
            assert!(Instant::now() < until, "never {n} queued");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_free_gate_is_taken_at_once_and_a_busy_one_refuses_try_lock() {
        let (entry, redis) = (entry(), redis());
        assert!(matches!(
            entry.enter_gate(&successor(1), None, false, || {}, &*redis),
            Ok(Some(Entered::Gate))
        ));
        assert!(matches!(entry.enter_gate(&successor(2), None, false, || {}, &*redis), Ok(None)));
        entry.leave_gate(1);
        assert!(entry.is_idle());
    }

    #[test]
    fn a_release_passes_the_gate_to_the_first_queued_thread_in_order() {
        let (entry, redis) = (entry(), redis());
        assert!(matches!(
            entry.enter_gate(&successor(1), None, true, || {}, &*redis),
            Ok(Some(Entered::Gate))
        ));
        entry.set_held(hold(&entry, 10, 1));
        let second = enter(&entry, &redis, 2, None);
        queued(&entry, 1);
        let third = enter(&entry, &redis, 3, None);
        queued(&entry, 2);
        assert!(entry.has_queued_threads());
        entry.release_gate(10);
        assert!(matches!(second.recv_timeout(LIMIT).unwrap(), Ok(Some(Entered::Gate))));
        assert!(third.recv_timeout(Duration::from_millis(50)).is_err(), "the third thread jumped the queue");
        entry.leave_gate(2);
        assert!(matches!(third.recv_timeout(LIMIT).unwrap(), Ok(Some(Entered::Gate))));
    }

    #[test]
    fn a_hand_off_within_the_window_gives_the_successor_a_ready_hold() {
        let (entry, _redis, _holder, second) = held_with_one_queued(None);
        let chosen = entry.reserve_successor(10, Duration::from_secs(60)).expect("a successor");
        assert_eq!(chosen.thread, 2);
        entry.finish_handoff(Some(hold(&entry, 11, 2)));
        match second.recv_timeout(LIMIT).unwrap() {
            Ok(Some(Entered::Handed(hold))) => assert_eq!(hold.id, 11),
            other => panic!("expected the handed hold, got {other:?}"),
        }
        assert!(entry.hold_of(2).is_some(), "the successor holds the gate");
    }

    #[test]
    fn a_hand_off_that_did_not_happen_gives_the_successor_the_gate() {
        let (entry, _redis, _holder, second) = held_with_one_queued(None);
        entry.reserve_successor(10, Duration::from_secs(60)).unwrap();
        entry.finish_handoff(None);
        assert!(matches!(second.recv_timeout(LIMIT).unwrap(), Ok(Some(Entered::Gate))));
    }

    #[test]
    fn past_the_fairness_window_there_is_no_hand_off() {
        let (entry, _redis, _holder, _second) = held_with_one_queued(None);
        assert!(entry.reserve_successor(10, Duration::ZERO).is_none());
        assert!(entry.reserve_successor(99, Duration::from_secs(60)).is_none(), "not the current hold");
        entry.shut_down();
    }

    #[test]
    fn a_successor_waits_for_its_hand_off_past_its_own_deadline() {
        let (entry, _redis, _holder, second) =
            held_with_one_queued(Some(Instant::now() + Duration::from_millis(100)));
        entry.reserve_successor(10, Duration::from_secs(60)).unwrap();
        // Its deadline passes mid hand-off, and it keeps waiting.
        assert!(
            second.recv_timeout(Duration::from_millis(200)).is_err(),
            "the successor gave up while the lock was on its way"
        );
        entry.finish_handoff(Some(hold(&entry, 11, 2)));
        assert!(matches!(second.recv_timeout(LIMIT).unwrap(), Ok(Some(Entered::Handed(_)))));
    }

    #[test]
    fn a_queued_thread_gives_up_at_its_deadline_and_leaves_the_queue() {
        let (entry, redis) = (entry(), redis());
        entry.enter_gate(&successor(1), None, true, || {}, &*redis).unwrap();
        entry.set_held(hold(&entry, 10, 1));
        let second = enter(&entry, &redis, 2, Some(Instant::now() + Duration::from_millis(50)));
        assert!(matches!(second.recv_timeout(LIMIT).unwrap(), Ok(None)));
        assert!(!entry.has_queued_threads());
    }

    #[test]
    fn shutdown_wakes_queued_threads_with_an_error() {
        let (entry, redis) = (entry(), redis());
        entry.enter_gate(&successor(1), None, true, || {}, &*redis).unwrap();
        let second = enter(&entry, &redis, 2, None);
        queued(&entry, 1);
        entry.shut_down();
        assert!(second.recv_timeout(LIMIT).unwrap().unwrap_err().is_shutdown());
        assert!(entry.enter_gate(&successor(3), None, true, || {}, &*redis).unwrap_err().is_shutdown());
        assert!(entry.wait_wake(Instant::now() + LIMIT).unwrap_err().is_shutdown());
    }

    #[test]
    fn a_hold_found_gone_after_an_unlock_message_is_marked_lost_and_taken_over() {
        let (entry, redis, holder, second) = held_with_one_queued(None);
        // Still there: the unlock message was for someone else.
        entry.notify();
        assert!(second.recv_timeout(Duration::from_millis(100)).is_err());
        assert!(!holder.is_lost());
        // Gone behind the holder's back (force unlock, Redis restarted).
        redis.holder_there.store(false, Ordering::Release);
        entry.notify();
        assert!(matches!(second.recv_timeout(LIMIT).unwrap(), Ok(Some(Entered::Gate))));
        assert_eq!(holder.lost_reason(), Some(LostReason::Gone));
        // The lost hold's late release leaves the new gate alone.
        entry.release_gate(10);
        assert!(matches!(entry.state.lock().gate, Gate::Acquiring(2)));
    }

    #[test]
    fn a_hold_being_released_is_not_taken_for_lost() {
        let (entry, redis, holder, second) = held_with_one_queued(None);
        holder.start_release();
        redis.holder_there.store(false, Ordering::Release);
        entry.notify(); // its own unlock message, ahead of the release's reply
        assert!(second.recv_timeout(Duration::from_millis(100)).is_err());
        assert!(!holder.is_lost(), "a normal release was reported as a loss");
        entry.release_gate(10);
        assert!(matches!(second.recv_timeout(LIMIT).unwrap(), Ok(Some(Entered::Gate))));
    }

    #[test]
    fn an_id_already_acquiring_is_refused_rather_than_queued_twice() {
        let (entry, redis, _holder, _second) = held_with_one_queued(None);
        // Thread ids cannot be in two places; a token's id could.
        let twice = entry.enter_gate(&successor(2), None, true, || {}, &*redis);
        assert_eq!(twice.unwrap_err().kind(), crate::ErrorKind::InvalidArgument);
        entry.shut_down();
    }

    #[test]
    fn wake_ups_and_grants_are_sticky() {
        let entry = entry();
        entry.notify();
        assert_eq!(
            entry.wait_wake(Instant::now()).unwrap(),
            Wake::Notified,
            "a wake-up before the wait is kept"
        );
        assert_eq!(entry.wait_wake(Instant::now() + Duration::from_millis(10)).unwrap(), Wake::TimedOut);
        entry.grant(Grant { owner: "me:1".into(), elapsed: Duration::ZERO, received: Instant::now() });
        assert_eq!(entry.wait_wake(Instant::now() + LIMIT).unwrap(), Wake::Notified);
        assert_eq!(entry.take_grant().map(|g| g.owner).as_deref(), Some("me:1"));
        assert!(entry.take_grant().is_none(), "a grant is taken once");
        entry.notify();
        entry.clear_wake();
        assert_eq!(entry.wait_wake(Instant::now()).unwrap(), Wake::TimedOut, "cleared wake-ups are gone");
    }
}
