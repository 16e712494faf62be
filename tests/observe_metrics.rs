//! The `metrics` feature: the counters, histograms and gauges keyholder
//! emits for real lock operations against a real Redis.
//!
//! The watchdog and the pub/sub reader are threads of their own, which a
//! thread-local recorder would not see, so this binary installs a global
//! `DebuggingRecorder`, and runs its checks as one test, in order: no other
//! test in the process can touch the counters. Hence a test binary of its
//! own, not a module of `tests/suite`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{RedisServer, ServerExt, eventually, pubsub_connections, recv_within, spawn};
use keyholder::{Lease, LostReason, metric_names as m};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// Time for the background threads on a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(10);

/// A metric: its name and its sorted labels.
type Series = (String, Vec<(String, String)>);

/// What the recorder was given: counters as they stand, histogram samples
/// accumulated (a snapshot drains them).
struct Recorded {
    snapshotter: Snapshotter,
    counters: HashMap<Series, u64>,
    histograms: HashMap<Series, Vec<f64>>,
    gauges: HashMap<Series, f64>,
}

impl Recorded {
    fn refresh(&mut self) {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> =
                key.labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
            labels.sort();
            let id = (key.name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => {
                    self.counters.insert(id, n);
                }
                DebugValue::Histogram(values) => {
                    self.histograms.entry(id).or_default().extend(values.into_iter().map(|v| v.into_inner()));
                }
                DebugValue::Gauge(value) => {
                    self.gauges.insert(id, value.into_inner());
                }
            }
        }
    }

    /// The counter `name` with exactly `labels` (0 if never incremented).
    fn counter(&mut self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.refresh();
        let mut labels: Vec<(String, String)> =
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        labels.sort();
        self.counters.get(&(name.to_owned(), labels)).copied().unwrap_or(0)
    }

    /// The gauge `name` with exactly `labels` as it stands (0 if never set).
    fn gauge(&mut self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.refresh();
        let mut labels: Vec<(String, String)> =
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        labels.sort();
        self.gauges.get(&(name.to_owned(), labels)).copied().unwrap_or(0.0)
    }

    /// Every sample of histogram `name` with exactly `labels`.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.refresh();
        let mut labels: Vec<(String, String)> =
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        labels.sort();
        self.histograms.get(&(name.to_owned(), labels)).cloned().unwrap_or_default()
    }

    /// Every label set seen on any metric.
    fn all_lock_labels(&mut self) -> Vec<String> {
        self.refresh();
        let keys = self.counters.keys().chain(self.histograms.keys());
        let mut locks: Vec<String> = keys
            .flat_map(|(_, labels)| labels.iter().filter(|(k, _)| k == "lock").map(|(_, v)| v.clone()))
            .collect();
        locks.sort();
        locks.dedup();
        locks
    }
}

#[test]
fn lock_operations_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this binary");
    keyholder::describe_metrics();
    // Ids in lock names collapse: one series for every order.
    assert!(keyholder::label_metrics_by_lock(keyholder::collapse_ids));
    assert!(!keyholder::label_metrics_by_lock(|name| name.to_owned()), "only the first call counts");
    let mut rec = Recorded {
        snapshotter,
        counters: HashMap::new(),
        histograms: HashMap::new(),
        gauges: HashMap::new(),
    };
    let lock_label = ("lock", "orders:*");

    let mut server = RedisServer::start();
    let client = server.builder().watchdog_timeout(Duration::from_millis(600)).build().unwrap();
    let lock = client.lock("orders:1").unwrap();

    // A blocking acquire and a re-entry; both released.
    let before = std::time::Instant::now();
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    let acquired_blocking = [("outcome", "acquired"), ("mode", "blocking"), lock_label];
    assert_eq!(rec.counter(m::ACQUISITIONS, &acquired_blocking), 2);

    // Another thread: a try_lock finds it held; a timed wait runs out.
    let other = lock.clone();
    let (busy, timed_out) = recv_within(
        &spawn(move || {
            let busy = other.try_lock().unwrap().is_none();
            let timed_out = other.try_lock_for(Duration::from_millis(200)).unwrap().is_none();
            (busy, timed_out)
        }),
        LIMIT,
        "the other thread",
    );
    assert!(busy && timed_out);
    assert_eq!(rec.counter(m::ACQUISITIONS, &[("outcome", "busy"), ("mode", "try"), lock_label]), 1);
    assert_eq!(rec.counter(m::ACQUISITIONS, &[("outcome", "timed_out"), ("mode", "timed"), lock_label]), 1);
    // Only the timed call waited; the try_lock never does.
    assert_eq!(rec.counter(m::ACQUIRE_WAITS, &[("outcome", "timed_out"), lock_label]), 1);
    assert_eq!(rec.counter(m::ACQUIRE_WAITS, &[("outcome", "busy"), lock_label]), 0);
    let waited = rec.histogram(m::ACQUIRE_WAIT_SECONDS, &[("outcome", "timed_out"), lock_label]);
    assert_eq!(waited.len(), 1);
    assert!(waited[0] >= 0.19, "the timed wait took its 200 ms: {waited:?}");
    assert_eq!(rec.histogram(m::ACQUIRE_WAIT_SECONDS, &[("outcome", "acquired"), lock_label]).len(), 2);

    // Held past a renewal period: the watchdog's rounds are counted, from
    // its own thread.
    assert!(eventually(LIMIT, || rec.counter(m::RENEWAL_ROUNDS, &[]) >= 2), "no renewal rounds counted");
    inner.unlock().unwrap();
    assert!(rec.histogram(m::HOLD_SECONDS, &[lock_label]).is_empty(), "the hold is not over yet");
    outer.unlock().unwrap();
    let at_most = before.elapsed().as_secs_f64();
    assert_eq!(rec.counter(m::RELEASES, &[("outcome", "released"), lock_label]), 2);
    // One hold, re-entered, ended once; held across two renewal periods.
    let held = rec.histogram(m::HOLD_SECONDS, &[lock_label]);
    assert_eq!(held.len(), 1, "{held:?}");
    // Two renewal rounds, a 200 ms period apart, both saw the hold.
    assert!(held[0] >= 0.19 && held[0] <= at_most, "held {held:?}, at most {at_most} s");

    // A waiter of another client gets it when this one releases: a wait
    // that ends acquired. It is waiting once it has queued in Redis.
    let held = lock.lock().unwrap();
    let other = server.client().lock("orders:1").unwrap();
    let waiter = spawn(move || other.try_lock_for(LIMIT).unwrap().map(|g| g.unlock().unwrap()).is_some());
    let queued =
        || redis::cmd("ZCARD").arg("keyholder_lock_queue:{orders:1}").query::<i64>(&mut server.conn());
    assert!(eventually(LIMIT, || queued().unwrap() == 1), "the waiter never queued");
    held.unlock().unwrap();
    assert!(recv_within(&waiter, LIMIT, "the waiter"));
    assert_eq!(rec.counter(m::ACQUIRE_WAITS, &[("outcome", "acquired"), lock_label]), 1);
    assert_eq!(rec.counter(m::ACQUISITIONS, &[("outcome", "acquired"), ("mode", "timed"), lock_label]), 1);

    // The pub/sub connection killed while a thread waits: the reader
    // reconnects.
    let held = lock.lock().unwrap();
    let other = lock.clone();
    let waiter = spawn(move || other.try_lock_for(LIMIT).unwrap().map(|g| g.unlock().unwrap()).is_some());
    assert!(eventually(LIMIT, || pubsub_connections(&mut server.conn()) > 0), "the waiter never subscribed");
    let _: () = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(&mut server.conn()).unwrap();
    assert!(eventually(LIMIT, || rec.counter(m::PUBSUB_RECONNECTS, &[]) >= 1), "no reconnect counted");
    held.unlock().unwrap();
    assert!(recv_within(&waiter, LIMIT, "the waiter"));

    // The gauges (issue 25): two holds (one re-entered) and one waiting
    // call now, per client, lock label and (with the lock label) kind; none
    // once they end.
    let short_id: String = client.id().chars().take(8).collect();
    let now = [("client", short_id.as_str()), lock_label, ("kind", "lock")];
    let gauges = |rec: &mut Recorded| (rec.gauge(m::LOCKS_HELD, &now), rec.gauge(m::THREADS_WAITING, &now));
    assert_eq!(gauges(&mut rec), (0.0, 0.0), "every earlier hold and wait ended");
    let first = lock.lock().unwrap();
    let again = lock.lock().unwrap();
    let second = client.lock("orders:2").unwrap().lock().unwrap();
    let other = lock.clone();
    let waiter = spawn(move || other.try_lock_for(LIMIT).unwrap().map(|g| g.unlock().unwrap()).is_some());
    assert!(eventually(LIMIT, || gauges(&mut rec).1 == 1.0), "the waiting call is not counted");
    assert_eq!(gauges(&mut rec), (2.0, 1.0));
    drop(again);
    first.unlock().unwrap();
    assert!(recv_within(&waiter, LIMIT, "the waiter"));
    second.unlock().unwrap();
    assert_eq!(gauges(&mut rec), (0.0, 0.0), "released, and the waiter's hold released too");
    // Expirable permits are a hold too, counted for their client.
    let pool = client.permit_expirable_semaphore("pool:7").unwrap();
    assert!(pool.try_set_permits(2).unwrap());
    let permits = pool.try_acquire(2).unwrap().unwrap();
    let pool_now = [("client", short_id.as_str()), ("lock", "pool:*"), ("kind", "permit")];
    assert_eq!(rec.gauge(m::LOCKS_HELD, &pool_now), 1.0);
    drop(permits);
    assert_eq!(rec.gauge(m::LOCKS_HELD, &pool_now), 0.0);

    // A hold force-unlocked by its own client: marked lost at once, and no
    // longer counted as held while its guard lives on.
    let guard = lock.lock().unwrap();
    assert_eq!(gauges(&mut rec).0, 1.0);
    let lost = guard.lost_signal();
    assert!(client.lock("orders:1").unwrap().force_unlock().unwrap());
    assert_eq!(recv_within_signal(&lost), LostReason::Gone);
    let gone = [("reason", "gone"), lock_label];
    assert!(eventually(LIMIT, || rec.counter(m::HOLDS_LOST, &gone) == 1));
    assert_eq!(gauges(&mut rec).0, 0.0, "a lost hold is not held");
    drop(guard);
    assert_eq!(rec.counter(m::RELEASES, &[("outcome", "lock_lost"), lock_label]), 1);

    // Run-once jobs: one runs, one is skipped while another holds the lock.
    let job = client.job("reports:daily").unwrap();
    assert!(job.run(|| ()).unwrap().ran());
    let blocker = client.lock_with_lease("reports:daily", Lease::Fixed(Duration::from_secs(30))).unwrap();
    let held = spawn(move || blocker.lock().map(std::mem::forget).is_ok());
    assert!(recv_within(&held, LIMIT, "the blocker"));
    assert!(job.run(|| ()).unwrap().is_skipped());
    assert_eq!(rec.counter(m::JOBS, &[("outcome", "ran"), ("lock", "reports:daily")]), 1);
    assert_eq!(rec.counter(m::JOBS, &[("outcome", "skipped"), ("lock", "reports:daily")]), 1);

    // Redis gone while a lock is held: renewal rounds fail, and the lease
    // runs out on the local clock.
    let guard = lock.lock().unwrap();
    server.stop();
    assert!(eventually(LIMIT, || rec.counter(m::RENEWAL_FAILURES, &[]) >= 1), "no renewal failure counted");
    assert!(eventually(LIMIT, || guard.is_lost()));
    assert!(eventually(LIMIT, || rec.counter(m::HOLDS_LOST, &[("reason", "lease_expired"), lock_label]) == 1));
    drop(guard);
    assert_eq!(gauges(&mut rec), (0.0, 0.0), "the lease ran out: not held");

    // Command connections (issue 23): opened by callers (the access
    // check's, the lanes') and in reserve by the pool; after the stop, the
    // dead ones closed and new ones failing to open.
    assert!(rec.counter(m::CONNECTIONS_OPENED, &[("by", "caller")]) >= 1);
    assert!(rec.counter(m::CONNECTIONS_OPENED, &[("by", "pool")]) >= 1, "no reserve connection counted");
    assert!(eventually(LIMIT, || rec.counter(m::CONNECTIONS_CLOSED, &[]) >= 1), "no close counted");
    let failures = |rec: &mut Recorded| {
        rec.counter(m::CONNECTION_FAILURES, &[("by", "caller")])
            + rec.counter(m::CONNECTION_FAILURES, &[("by", "pool")])
    };
    assert!(eventually(LIMIT, || failures(&mut rec) >= 1), "no failed connect counted");

    // One `lock` label value per name group, never a raw id.
    assert_eq!(rec.all_lock_labels(), ["orders:*", "pool:*", "reports:daily"]);
}

fn recv_within_signal(rx: &crossbeam_channel::Receiver<LostReason>) -> LostReason {
    rx.recv_timeout(LIMIT).expect("the loss was never signalled")
}
