//! Wakes owed by barging releases (ADR 48, issue 24).
//!
//! Within the barging window a release leaves the lock free for its own
//! client for a short head start and wakes nobody: the queue's front client
//! sleeps on. If one of the releasing client's threads takes the lock back,
//! which is the point of barging, nothing more is needed; its next release
//! barges again or hands the lock over. If none does, the releasing client
//! owes the front client a wake once the head start ends: an empty message on
//! its wake channel, after which it takes the free lock. Waking the front
//! client at every barging release instead (as before) cost it two thread
//! wake-ups and a refused try each time, as much as barging saved.
//!
//! This registry keeps what is owed, one wake per lock (a later barging
//! release of the same lock replaces it; a release that hands the lock over
//! settles it), and one thread per client, started with the client when
//! its barging window is above zero, pays what falls due. It sleeps until
//! the earliest due wake and is kicked only when a wake falls due earlier
//! than that, so a lock barged back and forth costs it about one wake-up
//! per head start, not one per release. A wake is not paid while a thread
//! of this client holds the lock (it took it back). A client shutting down
//! pays what it owes at once. A client that dies owing a wake leaves the
//! front client waiting out the lease of the hold it gave back, as if it had
//! died holding it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, select};
use foldhash::HashMap;
use parking_lot::Mutex;

use crate::wait::entry::Entry;

/// A wake owed to the front client of one lock's queue.
#[derive(Debug, Clone)]
pub(crate) struct Owed {
    /// The lock (its keys, and whether a thread here holds it).
    pub(crate) entry: Arc<Entry>,
    /// The client id of the queue's front client.
    pub(crate) front: String,
    /// When the head start ends.
    pub(crate) due: Instant,
}

/// What the client does to pay a wake (see `client.rs`).
pub(crate) trait PayWakes: Send + Sync {
    /// The registry of wakes owed.
    fn owed(&self) -> &OwedWakes;

    /// Wakes `owed.front`, unless a thread of this client holds the lock.
    fn pay(&self, owed: &Owed);
}

/// The wakes a client owes, by lock name.
#[derive(Debug)]
pub(crate) struct OwedWakes {
    state: Mutex<State>,
    /// Whether anything is owed: lets the many releases that owe nothing
    /// skip the lock.
    any: AtomicBool,
    /// Tells the paying thread a wake fell due earlier than it sleeps.
    kick: Sender<()>,
}

#[derive(Debug, Default)]
struct State {
    owed: HashMap<Arc<str>, Owed>,
    /// When the paying thread wakes next (`None`: it sleeps until kicked).
    wakes_at: Option<Instant>,
}

impl OwedWakes {
    /// A registry whose paying thread `kick` wakes.
    pub(crate) fn new(kick: Sender<()>) -> Self {
        OwedWakes { state: Mutex::new(State::default()), any: AtomicBool::new(false), kick }
    }

    /// A barging release of `entry`'s lock left it to this client until
    /// `due`: `front` is owed a wake then, in place of any earlier one.
    pub(crate) fn owe(&self, entry: &Arc<Entry>, front: String, due: Instant) {
        let mut st = self.state.lock();
        st.owed.insert(Arc::clone(&entry.keys.name), Owed { entry: Arc::clone(entry), front, due });
        self.any.store(true, Ordering::Release);
        if st.wakes_at.is_none_or(|at| due < at) {
            st.wakes_at = Some(due);
            let _ = self.kick.try_send(());
        }
    }

    /// A release of `name` that did not barge (it handed the lock over, or
    /// released it to nobody): what was owed for it is settled.
    pub(crate) fn settle(&self, name: &str) {
        if !self.any.load(Ordering::Acquire) {
            return;
        }
        let mut st = self.state.lock();
        st.owed.remove(name);
        self.any.store(!st.owed.is_empty(), Ordering::Release);
    }

    /// Takes the wakes due by `now` (all of them with `all`), and records
    /// when the paying thread wakes next: the earliest wake still owed.
    fn take_due(&self, now: Instant, all: bool) -> (Vec<Owed>, Option<Instant>) {
        let mut st = self.state.lock();
        let due: Vec<Arc<str>> = st
            .owed
            .iter()
            .filter(|(_, owed)| all || owed.due <= now)
            .map(|(name, _)| Arc::clone(name))
            .collect();
        let taken = due.iter().filter_map(|name| st.owed.remove(name)).collect();
        st.wakes_at = st.owed.values().map(|owed| owed.due).min();
        self.any.store(!st.owed.is_empty(), Ordering::Release);
        (taken, st.wakes_at)
    }
}

/// Pays every wake owed now (a client shutting down).
pub(crate) fn pay_all(client: &dyn PayWakes) {
    let (owed, _) = client.owed().take_due(Instant::now(), true);
    for owed in &owed {
        client.pay(owed);
    }
}

/// The paying thread's loop: pays wakes as they fall due, until `stop`
/// disconnects or the client is gone.
pub(crate) fn run(client: Weak<dyn PayWakes>, stop: Receiver<()>, kick: Receiver<()>) {
    loop {
        let wakes_at = {
            let Some(client) = client.upgrade() else { return };
            let (owed, wakes_at) = client.owed().take_due(Instant::now(), false);
            for owed in &owed {
                client.pay(owed);
            }
            wakes_at
        };
        match wakes_at {
            Some(at) => select! {
                recv(stop) -> _ => return,
                recv(kick) -> _ => {}
                default(at.saturating_duration_since(Instant::now())) => {}
            },
            None => select! {
                recv(stop) -> _ => return,
                recv(kick) -> _ => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::LockKeys;
    use std::time::Duration;

    fn entry(name: &str) -> Arc<Entry> {
        Arc::new(Entry::new(LockKeys::new(&Arc::from(name), "client")))
    }

    #[test]
    fn a_later_barging_release_replaces_the_wake_owed_and_a_hand_over_settles_it() {
        let (kick, kicked) = crossbeam_channel::bounded(1);
        let owed = OwedWakes::new(kick);
        let (a, b) = (entry("a"), entry("b"));
        let now = Instant::now();
        owed.owe(&a, "front-1".into(), now + Duration::from_millis(2));
        assert!(kicked.try_recv().is_ok(), "the first wake owed wakes the thread");
        owed.owe(&a, "front-2".into(), now + Duration::from_millis(4));
        assert!(kicked.try_recv().is_err(), "a later one need not: the thread wakes earlier anyway");
        owed.owe(&b, "front-3".into(), now + Duration::from_millis(1));
        assert!(kicked.try_recv().is_ok(), "an earlier one does");
        owed.settle("b");
        let (due, next) = owed.take_due(now + Duration::from_millis(3), false);
        assert!(due.is_empty(), "a's wake was replaced by a later one, b's settled: {due:?}");
        assert_eq!(next, Some(now + Duration::from_millis(4)));
        let (due, next) = owed.take_due(now + Duration::from_millis(4), false);
        assert_eq!(due.iter().map(|o| o.front.as_str()).collect::<Vec<_>>(), ["front-2"]);
        assert_eq!(next, None);
        owed.settle("a");
        assert!(!owed.any.load(Ordering::Acquire));
    }
}
