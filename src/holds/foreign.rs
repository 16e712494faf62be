//! Foreign unlocks and removals: telling a holder, within about a round
//! trip, that its lock was unlocked or removed elsewhere.
//!
//! Another client, the operators' CLI or a Java service can force-unlock a
//! lock this client holds, an operator can `DEL` it, and Redis can expire
//! or evict it; a waiter elsewhere then takes it at once. The watchdog
//! would tell the holder only at its next renewal (up to a third of the
//! watchdog timeout later), so for seconds two owners would each believe
//! they hold the lock. Instead, once a hold is [`LISTEN_AFTER`] old, the
//! client arms a removal alarm on its key (`pubsub/tracking.rs`: Redis's
//! client-side caching invalidations, redirected to the pub/sub
//! connection), and for the kinds that publish an unlock message (the
//! reentrant and read-write locks) also listens on the lock's unlock
//! channel. An invalidation of the key (any write, delete, expiry,
//! eviction or flush, by anyone but the tracking connection itself), a
//! message on the channel, or the confirmation of the channel's
//! subscription (before which anything may have been published) has the
//! holds of that lock checked in Redis at once (`Renew::check`: `HSTRLEN`
//! of the owner field, many holds per round trip). A hold found gone is
//! marked lost ([`LostReason::Gone`]) and its local waiters are told.
//!
//! A key is armed by a read on the tracking connection, right before the
//! check (a removal before the read is found by the check, one after it
//! is told), and an invalidation leaves it unarmed, so every check arms
//! its holds' keys again first. The `PTTL` that arms a key also tells
//! when it ends: a key someone shortened below the hold's lease is checked
//! when it ends, since Redis tells an expiry only when it deletes the key
//! (up to its active-expiry cycle later for a key nobody reads).
//!
//! What it costs, and how that is bounded:
//!
//! - Nothing on the acquire and release paths but a map insertion and
//!   removal: no round trip is added. A hold is armed and listened for
//!   only once it is [`LISTEN_AFTER`] old, so the short holds of a busy
//!   lock cost nothing; the channels of holds that come of age together go
//!   out in one SUBSCRIBE per 500 (`subscriber::HOLD_SUBSCRIBE_BATCH`), and
//!   their keys are armed 500 per round trip. The thread wakes about once
//!   per [`LISTEN_AFTER`] while young holds come and go, never per
//!   acquisition.
//! - While locks stay held, nothing but the renewals: the watchdog renews
//!   on the tracking connection (`kinds/family/silent.rs`), so the client's
//!   own renewals sound no alarm, and re-arms the renewed keys in the same
//!   round trip. A subscription and a tracked key are passive.
//! - A release that ends the last hold of a lock lets its channel linger
//!   and be unsubscribed with the others ([`LINGER`], many per
//!   UNSUBSCRIBE); its key is forgotten by Redis at its next modification.
//!
//! What it does not cover: a server that refuses `CLIENT TRACKING` (Redis
//! before 6, an ACL user denied it) arms nothing: there, as before, a lock
//! deleted without a message (a plain `DEL`, an expiry), a spin lock's
//! force unlock (it publishes nothing) and a fair lock's (only to the head
//! waiter's own channel) are found at the next renewal, or at the lease
//! deadline. A tracking connection that the server closes on its own
//! (`CLIENT KILL` of it, the server's `timeout` for idle clients) is
//! noticed at its next use, at the latest the next renewal of a watchdog
//! hold, which then arms and checks every hold again: a removal in between
//! is found then. A force unlock by this client itself needs neither: it
//! marks the holds it deleted at once ([`ForeignUnlocks::mark_gone`]), for
//! every kind.
//!
//! [`LINGER`]: crate::pubsub::subscriber::LINGER

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

use foldhash::HashMapExt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};
use parking_lot::Mutex;

use crate::error::{LostReason, Result};
use crate::holds::hold::Hold;
use crate::holds::renew::{OnLost, Renew};
use crate::pubsub::router::Subscribers;
use crate::pubsub::subscriber::Holders;
use crate::pubsub::tracking::Armed;
use crate::store::slots::Addr;

/// How old a hold must be before its lock's channel is listened on: holds
/// released sooner (an uncontended acquire and release, a busy lock's
/// short holds, and most holds that a loaded scheduler keeps a few
/// milliseconds longer) cost no subscription. A force unlock before that is
/// found by the check that follows the subscription.
pub(crate) const LISTEN_AFTER: Duration = Duration::from_millis(20);

/// How long holds coming of age are gathered before their channels are
/// subscribed together: a hold is listened for between [`LISTEN_AFTER`]
/// and this much later.
const GATHER: Duration = Duration::from_millis(10);

/// How much sooner than a hold's lease its key must end to be checked
/// then: more than a `PTTL`'s rounding, less than any shortening worth
/// telling.
const ENDING_SLACK: Duration = Duration::from_millis(5);

/// Holds checked per round trip.
const CHECK_BATCH: usize = 500;

/// The first and the longest wait before a failed check is tried again.
const FIRST_RETRY: Duration = Duration::from_millis(50);
const MAX_RETRY: Duration = Duration::from_secs(1);

/// The holds a client listens for, by lock channel.
pub(crate) struct ForeignUnlocks {
    state: Mutex<State>,
    /// Wakes the thread: a hold to check, or a first young hold.
    kick: Sender<()>,
}

impl std::fmt::Debug for ForeignUnlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignUnlocks").field("holds", &self.state.lock().holds.len()).finish()
    }
}

/// A hold to mark lost or check, and whom to tell.
struct Suspect {
    hold: Arc<Hold>,
    on_lost: Option<Arc<dyn OnLost>>,
    check: Arc<dyn Renew>,
}

/// A hold listened for.
struct Watched {
    hold: Arc<Hold>,
    /// The channel its lock's unlocks are published on, if one is listened
    /// to for its kind.
    channel: Option<Arc<str>>,
    /// Told when the hold is found gone (the lock's local waiters).
    on_lost: Option<Arc<dyn OnLost>>,
    /// How to check it in Redis.
    check: Arc<dyn Renew>,
    /// Queued for a check.
    suspect: bool,
}

/// One lock channel's holds.
struct Channel {
    holds: Vec<u64>,
    /// Subscribed (or asked to be) for its holds.
    listened: bool,
    /// When something was last heard on it.
    heard: Option<Instant>,
}

struct State {
    holds: foldhash::HashMap<u64, Watched>,
    /// The holds of each lock name (the key an invalidation names).
    names: foldhash::HashMap<Arc<str>, Vec<u64>>,
    channels: foldhash::HashMap<Arc<str>, Channel>,
    /// Holds whose channel is not listened on yet, oldest first: (when
    /// registered, hold id). Released holds are dropped from here lazily.
    young: VecDeque<(Instant, u64)>,
    /// Holds to check now.
    suspects: Vec<u64>,
    /// Holds to check when their key ends: someone shortened its TTL below
    /// the hold's lease (an expiry is told only when Redis deletes the key,
    /// which for a key nobody reads may be much later; a read then deletes
    /// it).
    ending: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The thread sleeps without a deadline: a first young hold wakes it.
    idle: bool,
}

/// What the thread needs of its client.
pub(crate) trait HeldLocks: Send + Sync {
    fn foreign(&self) -> &ForeignUnlocks;
    fn subscribers(&self) -> &Subscribers;
    /// The node `name`'s lock lives on, when the client talks to several:
    /// holds are checked per node.
    fn check_group(&self, name: &str) -> Option<Addr>;
}

impl ForeignUnlocks {
    pub(crate) fn new(kick: Sender<()>) -> Self {
        ForeignUnlocks {
            state: Mutex::new(State {
                holds: foldhash::HashMap::new(),
                names: foldhash::HashMap::new(),
                channels: foldhash::HashMap::new(),
                young: VecDeque::new(),
                suspects: Vec::new(),
                ending: BinaryHeap::new(),
                idle: true,
            }),
            kick,
        }
    }

    /// Listens for unlocks of `hold` on `channel` (if its kind has one)
    /// once it is [`LISTEN_AFTER`] old, until [`remove`](Self::remove);
    /// `check` checks it in Redis, `on_lost` is told when it is found gone.
    /// No I/O.
    pub(crate) fn add(
        &self,
        hold: &Arc<Hold>,
        channel: Option<Arc<str>>,
        on_lost: Option<Arc<dyn OnLost>>,
        check: Arc<dyn Renew>,
    ) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let id = hold.id;
        let mut suspect = false;
        if let Some(channel) = &channel {
            let slot = st.channels.entry(Arc::clone(channel)).or_insert_with(|| Channel {
                holds: Vec::new(),
                listened: false,
                heard: None,
            });
            slot.holds.push(id);
            if slot.listened {
                // Listened on already (another hold of the lock): only what
                // was heard since this hold was taken is worth a check.
                suspect = slot.heard.is_some_and(|heard| heard >= hold.acquired_at());
            }
        }
        // Every kind's hold is armed (removal alarms) once grown.
        let mut kick = st.young.is_empty() && std::mem::take(&mut st.idle);
        // Its age counts from its acquisition: no clock read.
        st.young.push_back((hold.acquired_at(), id));
        st.names.entry(Arc::clone(&hold.name)).or_default().push(id);
        let watched = Watched { hold: Arc::clone(hold), channel, on_lost, check, suspect };
        st.holds.insert(id, watched);
        if suspect {
            st.suspects.push(id);
            kick = true;
        }
        drop(guard);
        if kick {
            let _ = self.kick.try_send(());
        }
    }

    /// Stops listening for the hold `hold_id` (its last guard was
    /// released); a channel no hold needs any more lingers and goes.
    pub(crate) fn remove(&self, hold_id: u64, subscribers: &Subscribers) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let Some(watched) = st.holds.remove(&hold_id) else { return };
        if let Some(ids) = st.names.get_mut(&watched.hold.name) {
            ids.retain(|id| *id != hold_id);
            if ids.is_empty() {
                st.names.remove(&watched.hold.name);
            }
        }
        let Some(channel) = watched.channel else { return };
        let Some(slot) = st.channels.get_mut(&channel) else { return };
        slot.holds.retain(|id| *id != hold_id);
        if slot.holds.is_empty() && st.channels.remove(&channel).is_some_and(|slot| slot.listened) {
            // Under the lock: a new hold's subscription of the same channel
            // (made by the thread after this) must not be undone.
            subscribers.unhold_channels(&[channel]);
        }
    }

    /// Has every hold armed again, and checked: keys armed on a tracking
    /// connection that was replaced are not tracked any more.
    pub(crate) fn rearm_all(&self) {
        Holders::retrack(self);
    }

    /// The holds of lock `name` this client has now (see
    /// [`mark_gone`](Self::mark_gone)).
    pub(crate) fn holds_of(&self, name: &str) -> Vec<u64> {
        let st = self.state.lock();
        st.holds.iter().filter(|(_, w)| &*w.hold.name == name).map(|(id, _)| *id).collect()
    }

    /// Marks the holds `ids` lost ([`LostReason::Gone`]) unless they are
    /// being released: this client deleted their lock (a force unlock that
    /// found it), and knows without a message.
    pub(crate) fn mark_gone(&self, ids: &[u64]) {
        let gone: Vec<Suspect> = {
            let st = self.state.lock();
            ids.iter().filter_map(|id| st.holds.get(id)).map(Watched::suspect).collect()
        };
        for Suspect { hold, on_lost, .. } in gone {
            lose(&hold, on_lost.as_deref());
        }
    }

    /// Something was heard on `channel`: its holds are checked.
    fn suspect_channel(&self, st: &mut State, channel: &str, now: Instant) -> bool {
        let Some(slot) = st.channels.get_mut(channel) else { return false };
        slot.heard = Some(now);
        let ids = slot.holds.clone();
        suspect_ids(st, ids)
    }

    /// When the thread must wake next for young holds and for ending keys
    /// (`None`: when kicked), and whether holds wait to be checked.
    fn next_wake(&self) -> (Option<Instant>, Option<Instant>, bool) {
        let mut st = self.state.lock();
        let young = st.young.front().map(|(at, _)| *at + LISTEN_AFTER + GATHER);
        st.idle = young.is_none();
        let ending = st.ending.peek().map(|Reverse((at, _))| *at);
        (young, ending, !st.suspects.is_empty())
    }

    /// Queues for a check the holds whose key has ended by `now`.
    fn check_ended(&self, now: Instant) {
        let mut st = self.state.lock();
        let mut due = Vec::new();
        while let Some(Reverse((at, id))) = st.ending.peek().copied() {
            if at > now {
                break;
            }
            st.ending.pop();
            due.push(id);
        }
        suspect_ids(&mut st, due);
    }

    /// Subscribes the channels of holds at least [`LISTEN_AFTER`] old, and
    /// has every such hold checked, which arms its removal alarm.
    fn listen_to_grown(&self, subscribers: &Subscribers, now: Instant) {
        let due: Vec<Arc<str>> = {
            let mut st = self.state.lock();
            let mut seen = HashSet::new();
            let mut due = Vec::new();
            while let Some(&(at, id)) = st.young.front() {
                if now.saturating_duration_since(at) < LISTEN_AFTER {
                    break;
                }
                st.young.pop_front();
                // Checked after its key is armed: a removal before the
                // arming is found by the check, one after it is told.
                suspect_ids(&mut st, [id]);
                let Some(channel) = st.holds.get(&id).and_then(|w| w.channel.clone()) else { continue };
                if st.channels.get(&channel).is_some_and(|c| !c.listened) && seen.insert(Arc::clone(&channel))
                {
                    due.push(channel);
                }
            }
            due
        };
        if due.is_empty() {
            return;
        }
        // Written outside the lock: acquisitions and releases go on.
        let (confirmed, unserved) = subscribers.hold_channels(&due);
        let unserved: HashSet<Arc<str>> = unserved.into_iter().collect();
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut orphans = Vec::new();
        for channel in &due {
            let retry = unserved.contains(channel);
            match st.channels.get_mut(channel) {
                Some(slot) if retry => {
                    // No node serves its slot right now: again later.
                    let holds = slot.holds.clone();
                    st.young.extend(holds.into_iter().map(|id| (now, id)));
                }
                Some(slot) => slot.listened = true,
                // Every hold went while it was being subscribed.
                None if !retry => orphans.push(Arc::clone(channel)),
                None => {}
            }
        }
        if !orphans.is_empty() {
            subscribers.unhold_channels(&orphans);
        }
        // Subscribed before (by a waiter): no confirmation will come, and
        // what was published before was not listened for.
        let mut queued = false;
        for channel in &confirmed {
            queued |= self.suspect_channel(st, channel, now);
        }
        drop(guard);
        if queued {
            let _ = self.kick.try_send(());
        }
    }

    /// Checks the suspect holds in Redis; marks those gone lost. Err when
    /// Redis could not be asked (the unchecked holds stay suspect).
    fn check_suspects(&self, held: &dyn HeldLocks) -> Result<()> {
        let suspects: Vec<Suspect> = {
            let mut guard = self.state.lock();
            let st = &mut *guard;
            let ids = std::mem::take(&mut st.suspects);
            ids.into_iter()
                .filter_map(|id| {
                    let w = st.holds.get_mut(&id)?;
                    // Heard again during the check: checked again.
                    w.suspect = false;
                    let worth = !w.hold.is_releasing() && !w.hold.is_lost();
                    worth.then(|| w.suspect())
                })
                .collect()
        };
        // Armed before they are checked: a removal after the check is told.
        let armed = self.arm(held, &suspects);
        // One round trip per batch of holds of one layout and node.
        let mut groups: HashMap<(&'static str, Option<Addr>), Vec<usize>> = HashMap::new();
        for (at, s) in suspects.iter().enumerate() {
            groups.entry((s.check.batch_key(), held.check_group(&s.hold.name))).or_default().push(at);
        }
        let mut failed: Option<crate::error::Error> = None;
        for positions in groups.values() {
            for batch in positions.chunks(CHECK_BATCH) {
                let holds: Vec<&Hold> = batch.iter().map(|&at| &*suspects[at].hold).collect();
                let outcome =
                    if failed.is_none() { suspects[batch[0]].check.check(&holds) } else { Ok(Vec::new()) };
                match outcome {
                    Ok(replies) if replies.len() == batch.len() => {
                        for (&at, held) in batch.iter().zip(replies) {
                            if !held {
                                let Suspect { hold, on_lost, .. } = &suspects[at];
                                lose(hold, on_lost.as_deref());
                            }
                        }
                    }
                    other => {
                        if let Err(e) = other {
                            failed.get_or_insert(e);
                        }
                        let mut guard = self.state.lock();
                        let st = &mut *guard;
                        for &at in batch {
                            let id = suspects[at].hold.id;
                            if let Some(w) = st.holds.get_mut(&id)
                                && !w.suspect
                            {
                                w.suspect = true;
                                st.suspects.push(id);
                            }
                        }
                    }
                }
            }
        }
        match armed {
            Ok(Armed::Fresh) => {
                // A new tracking (or pub/sub) connection: the keys armed
                // before are not tracked there. Every hold is armed again.
                let mut st = self.state.lock();
                let ids: Vec<u64> = st.holds.keys().copied().collect();
                if suspect_ids(&mut st, ids) {
                    let _ = self.kick.try_send(());
                }
            }
            Err(e) => {
                // Checked, but not armed: armed (and checked) again later.
                let mut st = self.state.lock();
                let ids: Vec<u64> = suspects.iter().map(|s| s.hold.id).collect();
                suspect_ids(&mut st, ids);
                failed.get_or_insert(e);
            }
            Ok(_) => {}
        }
        failed.map_or(Ok(()), Err)
    }

    /// Arms the removal alarms of the keys of `suspects` (see
    /// `pubsub/tracking.rs`), and has those whose key ends before their
    /// lease does checked when it ends.
    fn arm(&self, held: &dyn HeldLocks, suspects: &[Suspect]) -> Result<Armed> {
        let mut seen = HashSet::new();
        let keys: Vec<Arc<str>> = suspects
            .iter()
            .filter(|s| seen.insert(Arc::clone(&s.hold.name)))
            .map(|s| Arc::clone(&s.hold.name))
            .collect();
        if keys.is_empty() {
            return Ok(Armed::Same);
        }
        let (armed, ttls) = held.subscribers().arm(&keys)?;
        // No earlier than the key's end: a read then finds it gone.
        let now = Instant::now();
        let ends: HashMap<&str, Instant> = keys
            .iter()
            .zip(ttls)
            .filter_map(|(key, ttl)| {
                Some((&**key, now + Duration::from_millis(u64::try_from(ttl).ok()? + 1)))
            })
            .collect();
        let mut st = self.state.lock();
        for s in suspects {
            // The local deadline is never later than the server's: a key
            // ending well before it was shortened by someone.
            if let Some(&end) = ends.get(&*s.hold.name)
                && end + ENDING_SLACK < s.hold.deadline()
            {
                st.ending.push(Reverse((end, s.hold.id)));
            }
        }
        drop(st);
        Ok(armed)
    }
}

/// Queues the holds `ids` for a check, but for those queued already, being
/// released or known lost; true when any was queued.
fn suspect_ids(st: &mut State, ids: impl IntoIterator<Item = u64>) -> bool {
    let mut queued = false;
    for id in ids {
        if let Some(w) = st.holds.get_mut(&id)
            && !w.suspect
            && !w.hold.is_releasing()
            && !w.hold.is_lost()
        {
            w.suspect = true;
            st.suspects.push(id);
            queued = true;
        }
    }
    queued
}

impl Watched {
    fn suspect(&self) -> Suspect {
        Suspect {
            hold: Arc::clone(&self.hold),
            on_lost: self.on_lost.clone(),
            check: Arc::clone(&self.check),
        }
    }
}

/// Marks `hold` lost as found gone, unless it is being released (its own
/// unlock message), and tells its local waiters.
fn lose(hold: &Hold, on_lost: Option<&dyn OnLost>) {
    if hold.is_releasing() {
        return;
    }
    hold.mark_lost(LostReason::Gone);
    if let Some(on_lost) = on_lost {
        on_lost.hold_lost(hold);
    }
}

impl Holders for ForeignUnlocks {
    fn heard(&self, channel: &str) {
        let queued = {
            let mut st = self.state.lock();
            self.suspect_channel(&mut st, channel, Instant::now())
        };
        if queued {
            let _ = self.kick.try_send(());
        }
    }

    fn invalidated(&self, keys: Option<&[String]>) {
        let queued = {
            let mut guard = self.state.lock();
            let st = &mut *guard;
            let ids: Vec<u64> = match keys {
                None => st.holds.keys().copied().collect(),
                Some(keys) => {
                    keys.iter().filter_map(|k| st.names.get(k.as_str())).flatten().copied().collect()
                }
            };
            suspect_ids(st, ids)
        };
        if queued {
            let _ = self.kick.try_send(());
        }
    }

    fn retrack(&self) {
        self.invalidated(None);
    }

    fn holding(&self) -> bool {
        !self.state.lock().holds.is_empty()
    }

    fn dropped(&self, channel: &str) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let Some(slot) = st.channels.get_mut(channel) else { return };
        slot.listened = false;
        // Due at once: subscribed again where the slot went, and checked
        // when confirmed.
        let holds = slot.holds.clone();
        let due = Instant::now().checked_sub(LISTEN_AFTER).unwrap_or_else(Instant::now);
        st.young.extend(holds.into_iter().map(|id| (due, id)));
        drop(guard);
        let _ = self.kick.try_send(());
    }
}

/// The thread's body: subscribes grown holds' channels, checks suspect
/// holds. Runs until `stop` disconnects or the client is gone.
pub(crate) fn run(client: Weak<dyn HeldLocks>, stop: Receiver<()>, kick: Receiver<()>) {
    // After a failed check: when to try again, and the delay after that.
    let mut retry: Option<(Instant, Duration)> = None;
    loop {
        let (young, ending, suspects) = match client.upgrade() {
            Some(held) => held.foreign().next_wake(),
            None => return,
        };
        let now = Instant::now();
        let check_at = match retry {
            Some((at, _)) if suspects => Some(at),
            _ if suspects => Some(now),
            _ => None,
        };
        let wake_at = [young, ending, check_at].into_iter().flatten().min();
        match wake_at {
            Some(at) => select! {
                recv(stop) -> _ => return,
                recv(kick) -> _ => {}
                default(at.saturating_duration_since(now)) => {}
            },
            None => select! {
                recv(stop) -> _ => return,
                recv(kick) -> _ => {}
            },
        }
        let Some(held) = client.upgrade() else { return };
        let now = Instant::now();
        // Only when due: a wake-up to check holds must not cut the
        // gathering short (one SUBSCRIBE per window).
        if young.is_some_and(|at| now >= at) {
            held.foreign().listen_to_grown(held.subscribers(), now);
        }
        if ending.is_some_and(|at| now >= at) {
            held.foreign().check_ended(now);
        }
        if retry.is_none_or(|(at, _)| now >= at) {
            retry = match held.foreign().check_suspects(&*held) {
                Ok(()) => None,
                Err(e) => {
                    log::debug!("keyholder: checking holds after an unlock message failed: {e}");
                    let delay = retry.map_or(FIRST_RETRY, |(_, d)| (d * 2).min(MAX_RETRY));
                    Some((Instant::now() + delay, delay))
                }
            };
        }
    }
}
