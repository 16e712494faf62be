//! The watchdog: one thread per client renews every watchdog-lease hold and
//! notices leases that run out.
//!
//! Every third of the watchdog timeout it renews all registered holds, up to
//! [`BATCH`] keys per script call (Redisson's `lockWatchdogBatchSize`). A reply
//! of 0 means the owner no longer holds the key: the hold is marked lost and
//! dropped from renewal. A failed call (Redis unreachable) is retried next
//! period. If no renewal succeeds before the local lease deadline, the hold
//! is marked lost at that deadline, which tells the holder's lost-signal
//! listeners: not by this thread, which may be inside a renewal call that
//! waits out a hung server or a connect, but by the client's deadline thread
//! (`holds/deadlines.rs`), which does no I/O. Fixed-lease holds with a
//! listener are watched the same way, without renewal.
//!
//! When the pub/sub connection is replaced (Redis restarted or failed over)
//! every hold is renewed at once, which verifies it; a verification that
//! cannot reach Redis yet is tried again soon (50 ms, doubling to 1 s) rather
//! than a period later.
//!
//! A verification pass looks at the holds registered when it begins. An
//! acquisition sent before a failover whose reply arrives after the pass
//! began (a reply held back by `WAIT` on the old primary) registers its hold
//! too late for it: such a hold, sent before the last pass began and
//! registered after, is verified at its registration, in the acquiring
//! thread, before its guard is returned, so its holder is told at once if it
//! did not survive (issue 21, item 8). So is a hold sent before the client
//! learned that the primary moved and registered after, even when the pass
//! that follows the move has not begun yet: it may have been taken on the
//! old primary, which is still a primary until Sentinel demotes it.
//!
//! A hold is registered before its guard is returned and deregistered by the
//! release of its last guard, before that release returns. A renewal already
//! in flight at that moment is harmless: the script renews only keys whose
//! owner field still exists.

use foldhash::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, select};
use parking_lot::Mutex;

use crate::error::LostReason;
use crate::holds::hold::Hold;
use crate::holds::renew::{OnLost, Renew};
use crate::store::slots::Addr;

/// Keys renewed per script call.
pub(crate) const BATCH: usize = 100;

/// A hold the watchdog looks after.
#[derive(Clone)]
struct Watched {
    hold: Arc<Hold>,
    /// Told when the hold is lost (the lock's local waiters), if anyone
    /// local needs telling.
    on_lost: Option<Arc<dyn OnLost>>,
    /// How to renew it (watchdog lease), or `None` to only watch its
    /// deadline (fixed lease).
    renew: Option<Arc<dyn Renew>>,
    /// How to check that a fixed-lease hold still exists, changing nothing:
    /// no renewal looks at it, so a verification pass (a reconnect, a
    /// primary move) checks it instead. `None` for a renewed hold.
    check: Option<Arc<dyn Renew>>,
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched").field("hold", &self.hold).field("renew", &self.renew).finish()
    }
}

/// The holds to renew or watch, by hold id, and when the deadline thread
/// wakes next.
#[derive(Debug, Default)]
struct Watchlist {
    holds: HashMap<u64, Watched>,
    /// When the deadline thread is asleep until (`None`: until kicked).
    /// Set under the same lock as the holds it was computed from, so a
    /// hold registered afterwards with an earlier deadline always kicks.
    timer_at: Option<Instant>,
}

/// The holds to renew or watch, by hold id.
#[derive(Debug)]
pub(crate) struct Registry {
    holds: Mutex<Watchlist>,
    /// Wakes the deadline thread to reconsider its next deadline.
    kick: Sender<()>,
    /// When the last verification pass began, before it looked at the
    /// holds: a hold whose acquisition was sent earlier and that registers
    /// later may have been missed by it.
    verified_from: Mutex<Option<Instant>>,
    /// The lease a renewal re-applies (the watchdog timeout).
    lease: Duration,
}

impl Registry {
    pub(crate) fn new(kick: Sender<()>, lease: Duration) -> Self {
        Registry { holds: Mutex::new(Watchlist::default()), kick, verified_from: Mutex::new(None), lease }
    }

    /// Renews `hold` with `renew` until deregistered; tells `on_lost` if it
    /// is lost. A hold whose acquisition was sent before the last
    /// verification pass began, and that the pass may have missed, is
    /// verified now (one renewal, in the calling thread): its guard is then
    /// returned already lost if the lock did not survive a failover.
    pub(crate) fn register(&self, hold: Arc<Hold>, on_lost: Option<Arc<dyn OnLost>>, renew: Arc<dyn Renew>) {
        self.add_verified(Watched { hold, on_lost, renew: Some(renew), check: None });
    }

    /// Watches the deadline of `hold`, a fixed lease, and has verification
    /// passes check it with `check` (its lock may not have survived a
    /// failover, and nothing else would look before its lease ends); the
    /// same as [`Registry::register`] otherwise.
    pub(crate) fn register_fixed(
        &self,
        hold: Arc<Hold>,
        on_lost: Option<Arc<dyn OnLost>>,
        check: Arc<dyn Renew>,
    ) {
        self.add_verified(Watched { hold, on_lost, renew: None, check: Some(check) });
    }

    fn add_verified(&self, watched: Watched) {
        let acquired_at = watched.hold.acquired_at();
        self.insert(watched.clone());
        // After the insertion: a pass that began later sees the hold.
        let missed = self.verified_from.lock().is_some_and(|from| acquired_at < from);
        if missed {
            self.verify_missed(&watched);
        }
    }

    /// Records that a verification pass begins (before it looks at the
    /// holds).
    fn verification_started(&self) {
        *self.verified_from.lock() = Some(Instant::now());
    }

    /// The primary moved (a Sentinel switch, a cluster slot's failover):
    /// from now on acquisitions go to the new one, but one sent before may
    /// have been taken on the old one, which loses it, and may register
    /// before the verification pass that follows the move begins (its
    /// reply held back by a `WAIT` that timed out). Such a hold is verified
    /// at its registration, as one a pass missed.
    pub(crate) fn primary_moved(&self) {
        self.verification_started();
    }

    /// Verifies one hold that the last verification pass may have missed,
    /// as the pass would have: renewed if it is still held, reported lost if
    /// not. A call that fails leaves it to the next renewal (or the pass's
    /// retry, while Redis is unreachable).
    fn verify_missed(&self, watched: &Watched) {
        let Watched { hold, renew, check, .. } = watched;
        log::debug!("keyholder: verifying lock '{}', acquired across a verification pass", hold.name);
        let Some(renew) = renew else {
            if let Some(check) = check {
                match check.check(&[&**hold]) {
                    Ok(held) if held.first() == Some(&false) => self.lost(watched, LostReason::Gone),
                    Ok(_) => {}
                    Err(e) => log::debug!(
                        "keyholder: could not check lock '{}' acquired across a move: {e}",
                        hold.name
                    ),
                }
            }
            return;
        };
        let sent = Instant::now();
        match renew.renew(&[&**hold], crate::lease::millis_ceil(self.lease)) {
            Ok((held, replicated)) => {
                if !replicated {
                    hold.mark_unreplicated();
                }
                if held.first() == Some(&true) {
                    hold.extend_deadline(sent + self.lease);
                } else {
                    self.lost(watched, LostReason::RenewalRefused);
                }
            }
            Err(e) => {
                log::debug!("keyholder: could not verify lock '{}' acquired across a move: {e}", hold.name)
            }
        }
    }

    /// Records that `watched`'s hold turned out gone (unless its release
    /// was sent: the lock may vanish then), stops looking after it, and
    /// tells its local waiters.
    fn lost(&self, watched: &Watched, reason: LostReason) {
        let Watched { hold, on_lost, .. } = watched;
        if hold.is_releasing() {
            return;
        }
        hold.mark_lost(reason);
        self.deregister(hold.id);
        if let Some(on_lost) = on_lost {
            on_lost.hold_lost(hold);
        }
    }

    /// Watches the deadline of a hold that is not renewed.
    pub(crate) fn watch(&self, hold: Arc<Hold>, on_lost: Option<Arc<dyn OnLost>>) {
        if !self.holds.lock().holds.contains_key(&hold.id) {
            self.insert(Watched { hold, on_lost, renew: None, check: None });
        }
    }

    /// Adds `watched`, and wakes the deadline thread if it sleeps past the
    /// hold's deadline (rarely: a watchdog lease's deadline is a whole
    /// lease away, later than the one the thread already waits for while
    /// any hold is registered).
    fn insert(&self, watched: Watched) {
        let deadline = watched.hold.deadline();
        let mut list = self.holds.lock();
        list.holds.insert(watched.hold.id, watched);
        if list.timer_at.is_none_or(|at| deadline < at) {
            list.timer_at = Some(deadline);
            drop(list);
            let _ = self.kick.try_send(());
        }
    }

    pub(crate) fn deregister(&self, hold_id: u64) {
        self.holds.lock().holds.remove(&hold_id);
    }

    /// The number of holds being renewed.
    pub(crate) fn len(&self) -> usize {
        self.holds.lock().holds.values().filter(|w| w.renew.is_some()).count()
    }

    fn to_renew(&self) -> Vec<Watched> {
        self.holds.lock().holds.values().filter(|w| w.renew.is_some()).cloned().collect()
    }

    fn to_check(&self) -> Vec<Watched> {
        self.holds.lock().holds.values().filter(|w| w.check.is_some()).cloned().collect()
    }

    /// The deadline thread's next wake: the earliest deadline of a
    /// registered hold (`None`: none, sleep until kicked), recorded as
    /// the time the thread sleeps until.
    pub(crate) fn plan_wake(&self) -> Option<Instant> {
        let mut list = self.holds.lock();
        let earliest = list.holds.values().map(|w| w.hold.deadline()).min();
        list.timer_at = earliest;
        earliest
    }

    /// Marks lost, and drops, every hold whose deadline has passed.
    pub(crate) fn expire_overdue(&self, now: Instant) {
        let overdue: Vec<Watched> = {
            let mut list = self.holds.lock();
            let ids: Vec<u64> =
                list.holds.iter().filter(|(_, w)| w.hold.deadline() <= now).map(|(id, _)| *id).collect();
            ids.iter().filter_map(|id| list.holds.remove(id)).collect()
        };
        for Watched { hold, on_lost, .. } in overdue {
            if !hold.is_releasing() {
                hold.mark_lost(LostReason::LeaseExpired);
                if let Some(on_lost) = on_lost {
                    on_lost.hold_lost(&hold);
                }
            }
        }
    }
}

/// What the watchdog needs of its client: the holds to look after, the
/// lease to re-apply, and where each lock lives. (The client implements
/// it; the watchdog knows nothing else of it. The renewal calls themselves
/// are the holds' kinds', through [`Renew`].)
pub(crate) trait Renewals: Send + Sync {
    /// The holds to renew or watch.
    fn registry(&self) -> &Registry;
    /// The lease a renewal re-applies.
    fn watchdog_timeout(&self) -> Duration;

    /// Which node `name`'s lock lives on, when the client talks to several
    /// (a Redis Cluster): holds are batched per node, so that one call
    /// renews up to [`BATCH`] locks of one node.
    fn renewal_group(&self, _name: &str) -> Option<Addr> {
        None
    }
}

/// What wakes the watchdog thread besides its own timer.
pub(crate) struct Signals {
    /// Disconnects on shutdown.
    pub(crate) stop: Receiver<()>,
    /// The pub/sub connection was replaced (Redis may have restarted or
    /// failed over): renew, which verifies, every hold at once.
    pub(crate) verify: Receiver<()>,
}

/// The watchdog thread's body. Runs until `stop` disconnects or the client
/// is gone.
pub(crate) fn run(client: Weak<dyn Renewals>, period: Duration, signals: Signals) {
    let Signals { stop, verify } = signals;
    let mut next_renewal = Instant::now() + period;
    // A verification that could not reach Redis (no command connection yet
    // reaches the restarted or new primary) is tried again soon, not a period
    // later: when, and the delay after that.
    let mut reverify: Option<(Instant, Duration)> = None;
    loop {
        if client.strong_count() == 0 {
            return;
        }
        let wake_at = reverify.map_or(next_renewal, |(at, _)| at.min(next_renewal));
        let timeout = wake_at.saturating_duration_since(Instant::now());
        select! {
            recv(stop) -> _ => return,
            recv(verify) -> _ => {
                // Each hold is renewed if it still exists and reported lost
                // if not, one round trip after Redis is reachable again,
                // rather than at the next period or its lease deadline.
                if let Some(inner) = client.upgrade() {
                    reverify = (!verify_all(&*inner)).then(|| (Instant::now() + FIRST_REVERIFY, FIRST_REVERIFY));
                }
                continue;
            }
            default(timeout) => {}
        }
        let Some(inner) = client.upgrade() else { return };
        let now = Instant::now();
        if let Some((at, delay)) = reverify
            && now >= at
            && now < next_renewal
        {
            let delay = (delay * 2).min(MAX_REVERIFY);
            reverify = (!verify_all(&*inner)).then(|| (Instant::now() + delay, delay));
        }
        if now >= next_renewal {
            reverify = None;
            renew_all(&*inner);
            next_renewal += period;
            let now = Instant::now();
            if next_renewal + period < now {
                // A round slower than two periods (Redis timing out) skips
                // the rounds it missed rather than trigger a burst.
                next_renewal = now + period;
            }
            // A round that took up to a period longer than one (each call
            // waiting on `WAIT` for a replica, say) is followed at once:
            // renewals stay a period apart by when they were sent, which is
            // what each hold's deadline counts from, so a slow but
            // answering Redis never lets a deadline pass before the renewal
            // sent in time for it is heard.
        }
    }
}

/// The first and the longest wait before a failed verification is tried
/// again.
const FIRST_REVERIFY: Duration = Duration::from_millis(50);
const MAX_REVERIFY: Duration = Duration::from_secs(1);

/// A verification pass: [`renew_all`], recorded so that holds acquired
/// before it and registered after it are verified at their registration.
fn verify_all(inner: &dyn Renewals) -> bool {
    inner.registry().verification_started();
    renew_all(inner) && check_fixed(inner)
}

/// Checks every registered fixed-lease hold once, in batches, changing
/// nothing (a verification pass: a renewal would lengthen a fixed lease);
/// one found gone is lost ([`LostReason::Gone`]). False when a batch could
/// not be checked (Redis failing), which ends the round.
fn check_fixed(inner: &dyn Renewals) -> bool {
    let registry = inner.registry();
    for batch in batches(inner, registry.to_check(), |w| w.check.as_ref()) {
        let Some(checker) = batch.first().and_then(|w| w.check.as_ref()) else { continue };
        let batch_holds: Vec<&Hold> = batch.iter().map(|w| &*w.hold).collect();
        match checker.check(&batch_holds) {
            Ok(held) => {
                for (watched, held) in batch.iter().zip(held) {
                    if !held {
                        registry.lost(watched, LostReason::Gone);
                    }
                }
            }
            Err(e) => {
                log::warn!("keyholder watchdog could not check {} fixed-lease locks: {e}", batch.len());
                return false;
            }
        }
    }
    true
}

/// `holds` in batches of at most [`BATCH`] that one call of the renewer
/// `upkeep` picks can serve: the same batch key (layout) and, on a
/// cluster, the same node.
fn batches(
    inner: &dyn Renewals,
    holds: Vec<Watched>,
    upkeep: impl Fn(&Watched) -> Option<&Arc<dyn Renew>>,
) -> Vec<Vec<Watched>> {
    let mut keyed: Vec<((&'static str, Option<Addr>), Watched)> = holds
        .into_iter()
        .filter_map(|w| {
            let key = upkeep(&w)?.batch_key();
            Some(((key, inner.renewal_group(&w.hold.name)), w))
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut batches: Vec<Vec<Watched>> = Vec::new();
    let mut group_of_last = None;
    for (group, watched) in keyed {
        match batches.last_mut() {
            Some(batch) if group_of_last.as_ref() == Some(&group) && batch.len() < BATCH => {
                batch.push(watched)
            }
            _ => {
                batches.push(vec![watched]);
                group_of_last = Some(group);
            }
        }
    }
    batches
}

/// Renews every registered watchdog hold once, in batches; false when a
/// batch could not be renewed (Redis failing), which ends the round.
pub(crate) fn renew_all(inner: &dyn Renewals) -> bool {
    let started = crate::observe::renewal_start();
    let (holds, renewed) = renew_round(inner);
    crate::observe::renewal_round(holds, !renewed, started);
    renewed
}

/// [`renew_all`]'s round: how many holds it had to renew, and whether it
/// renewed them all.
fn renew_round(inner: &dyn Renewals) -> (usize, bool) {
    let registry = inner.registry();
    let timeout = inner.watchdog_timeout();
    let holds = registry.to_renew();
    let count = holds.len();
    let batches = batches(inner, holds, |w| w.renew.as_ref());
    let lease_ms = crate::lease::millis_ceil(timeout);
    for batch in batches {
        let Some(renewer) = batch.first().and_then(|w| w.renew.as_ref()) else { continue };
        let batch_holds: Vec<&Hold> = batch.iter().map(|w| &*w.hold).collect();
        let sent = Instant::now();
        // Renewing is safe to repeat: a dead connection costs no period.
        let replies = renewer.renew(&batch_holds, lease_ms);
        match replies {
            Ok((replies, replicated)) => {
                if !replicated {
                    log::warn!(
                        "keyholder watchdog: a renewal of {} locks was not acknowledged by the replicas",
                        batch.len()
                    );
                }
                for (watched, held) in batch.iter().zip(replies) {
                    if !replicated {
                        watched.hold.mark_unreplicated();
                    }
                    if held {
                        watched.hold.extend_deadline(sent + timeout);
                    } else {
                        // Threads of this client queued behind the lost
                        // hold may take the lock now.
                        registry.lost(watched, LostReason::RenewalRefused);
                    }
                }
            }
            Err(e) => {
                // Redis is failing: the other batches would each wait out a
                // timeout too, delaying the lease deadlines this thread must
                // notice. Try again next period.
                log::warn!("keyholder watchdog could not renew {} of {} locks: {e}", batch.len(), count);
                return (count, false);
            }
        }
    }
    (count, true)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::error::Result;

    /// A renewer that finds every lock gone, counting its calls.
    #[derive(Debug, Default)]
    struct Gone {
        calls: AtomicUsize,
    }

    impl Renew for Gone {
        fn batch_key(&self) -> &'static str {
            "gone"
        }

        fn renew(&self, holds: &[&Hold], _lease_ms: u64) -> Result<(Vec<bool>, bool)> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok((vec![false; holds.len()], true))
        }
    }

    fn hold(id: u64, sent: Instant) -> Arc<Hold> {
        Hold::for_test(id, "k", sent)
    }

    #[test]
    fn a_hold_sent_before_a_verification_pass_and_registered_after_is_verified_at_registration() {
        let (kick, _kicked) = crossbeam_channel::bounded(1);
        let registry = Registry::new(kick, Duration::from_secs(30));
        let gone = Arc::new(Gone::default());
        // No pass yet: registering does no I/O.
        let before_any = hold(1, Instant::now());
        registry.register(Arc::clone(&before_any), None, Arc::clone(&gone) as _);
        assert_eq!(gone.calls.load(Ordering::SeqCst), 0);

        let in_flight = Instant::now() - Duration::from_millis(2);
        registry.verification_started();
        // Sent before the pass began, registered after: verified now, and
        // found gone, so it is lost before its guard is returned.
        let missed = hold(2, in_flight);
        registry.register(Arc::clone(&missed), None, Arc::clone(&gone) as _);
        assert_eq!(gone.calls.load(Ordering::SeqCst), 1);
        assert_eq!(missed.lost_reason(), Some(LostReason::RenewalRefused));
        assert_eq!(registry.len(), 1, "the lost hold is no longer renewed");
        // Sent after the pass began: the pass's own connections saw it.
        let after = hold(3, Instant::now());
        registry.register(Arc::clone(&after), None, Arc::clone(&gone) as _);
        assert_eq!(gone.calls.load(Ordering::SeqCst), 1);
        assert!(!after.is_lost());
    }

    #[test]
    fn the_deadline_thread_is_woken_only_by_a_hold_due_before_its_planned_wake() {
        let (kick, kicked) = crossbeam_channel::bounded(1);
        let registry = Registry::new(kick, Duration::from_secs(30));
        let gone = Arc::new(Gone::default());
        let now = Instant::now();
        // Asleep until kicked (no holds): the first hold wakes it.
        registry.register(hold(1, now), None, Arc::clone(&gone) as _);
        assert!(kicked.try_recv().is_ok());
        assert_eq!(registry.plan_wake(), Some(now + Duration::from_secs(30)));
        // Due later than the planned wake: no kick.
        registry.register(hold(2, now + Duration::from_millis(5)), None, Arc::clone(&gone) as _);
        assert!(kicked.try_recv().is_err());
        // Due earlier (a hold acquired before, registered after): kicked.
        registry.register(hold(3, now - Duration::from_millis(5)), None, Arc::clone(&gone) as _);
        assert!(kicked.try_recv().is_ok());
        assert_eq!(registry.plan_wake(), Some(now - Duration::from_millis(5) + Duration::from_secs(30)));
        // Overdue holds are marked lost and dropped; the others stay.
        registry.expire_overdue(now + Duration::from_secs(30));
        assert_eq!(registry.len(), 1);
        assert_eq!(registry.plan_wake(), Some(now + Duration::from_millis(5) + Duration::from_secs(30)));
    }

    #[test]
    fn a_hold_sent_before_the_primary_moved_and_registered_after_is_verified_at_registration() {
        let (kick, _kicked) = crossbeam_channel::bounded(1);
        let registry = Registry::new(kick, Duration::from_secs(30));
        let gone = Arc::new(Gone::default());
        let in_flight = Instant::now() - Duration::from_millis(2);
        // The move is known before any verification pass has begun.
        registry.primary_moved();
        let missed = hold(1, in_flight);
        registry.register(Arc::clone(&missed), None, Arc::clone(&gone) as _);
        assert_eq!(gone.calls.load(Ordering::SeqCst), 1);
        assert_eq!(missed.lost_reason(), Some(LostReason::RenewalRefused));
        let after = hold(2, Instant::now());
        registry.register(Arc::clone(&after), None, Arc::clone(&gone) as _);
        assert_eq!(gone.calls.load(Ordering::SeqCst), 1, "sent to the new primary: nothing to verify");
    }
}
