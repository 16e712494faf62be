//! Run-once jobs (`Client::job`): ShedLock's semantics against a real Redis.
//! Run only if free (skip, never wait), held at most `at_most`, kept at least
//! `at_least`, never re-entered, and the outcome says ran, skipped or lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{
    Listener, RedisServer, ServerExt, channel_of, command_calls, exists, hgetall, pttl, recv_within, spawn,
};
use keyholder::{ErrorKind, JobOutcome, LostReason};

const SECOND: Duration = Duration::from_secs(1);
/// Room for scheduling delays on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);

#[test]
fn a_free_job_runs_and_releases_its_lock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let listener = Listener::start(&server, &[&channel_of("jobs:a")]);
    let job = client.job("jobs:a").unwrap();
    let outcome = job
        .run(|| {
            let mut con = server.conn();
            let fields = hgetall(&mut con, "jobs:a");
            let ttl = pttl(&mut con, "jobs:a");
            (fields, ttl)
        })
        .unwrap();
    let JobOutcome::Ran((fields, ttl)) = outcome else { panic!("not run: {outcome:?}") };
    // Held by one owner of this client, under the default at_most, with no
    // watchdog renewing it.
    assert_eq!(fields.len(), 1);
    let (owner, count) = fields.into_iter().next().unwrap();
    assert!(owner.starts_with(&format!("{}:", client.id())), "{owner}");
    assert_eq!(count, "1");
    assert!(ttl > 29_000 && ttl <= 30_000, "{ttl}");
    assert_eq!(client.watched_locks(), 0);
    // Released at once (no at_least), with an unlock message for waiters.
    assert!(!exists(&mut con, "jobs:a"));
    let (_, message) = listener.next(5 * SECOND).expect("an unlock message");
    assert_eq!(message, "0");
}

#[test]
fn a_held_job_is_skipped_without_waiting() {
    let server = RedisServer::start();
    let other = server.client();
    let guard = other.lock("jobs:b").unwrap().lock().unwrap();
    let job = server.client().job("jobs:b").unwrap();
    let called = AtomicU64::new(0);
    let (outcome, took) = common::timed(|| {
        job.run(|| {
            called.fetch_add(1, Ordering::Relaxed);
        })
    });
    assert!(outcome.unwrap().is_skipped());
    assert_eq!(called.load(Ordering::Relaxed), 0);
    assert!(took < SECOND, "a skip must not wait: {took:?}");
    assert!(!guard.is_lost(), "the holder is unaffected");
    assert_eq!(other.lock("jobs:b").unwrap().hold_count().unwrap(), 1);
}

#[test]
fn at_least_keeps_the_lock_after_a_short_run_and_the_same_thread_does_not_rerun() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let job = client.job("jobs:c").unwrap().at_most(10 * SECOND).at_least(2 * SECOND);
    let started = Instant::now();
    assert!(matches!(job.run(|| 1).unwrap(), JobOutcome::Ran(1)));
    // Kept, its expiry shortened to what is left of at_least.
    assert!(exists(&mut con, "jobs:c"));
    let ttl = pttl(&mut con, "jobs:c");
    assert!(ttl > 0 && ttl <= 2_000, "{ttl}");
    // The next tick on the same thread, and on another thread of the same
    // client, and on another client: all skip while it is kept.
    assert!(job.run(|| 2).unwrap().is_skipped(), "the same thread re-ran the job");
    let again = job.clone();
    assert!(recv_within(&spawn(move || again.run(|| 3).unwrap().is_skipped()), 5 * SECOND, "thread"));
    assert!(server.client().job("jobs:c").unwrap().run(|| 4).unwrap().is_skipped());
    // And a plain Lock of this thread does not re-enter it either.
    assert!(client.lock("jobs:c").unwrap().try_lock().unwrap().is_none());
    // Once at_least has passed since the start, the job runs again.
    assert!(common::eventually(10 * SECOND, || !exists(&mut con, "jobs:c")));
    assert!(
        started.elapsed() >= Duration::from_millis(1950),
        "expired before at_least: {:?}",
        started.elapsed()
    );
    assert!(matches!(job.run(|| 5).unwrap(), JobOutcome::Ran(5)));
}

#[test]
fn a_run_longer_than_at_least_releases_at_once() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let job = server.client().job("jobs:d").unwrap().at_most(5 * SECOND).at_least(Duration::from_millis(50));
    let outcome = job.run(|| std::thread::sleep(Duration::from_millis(150))).unwrap();
    assert!(matches!(outcome, JobOutcome::Ran(())));
    assert!(!exists(&mut con, "jobs:d"));
}

#[test]
fn a_run_past_at_most_is_reported_lost_and_another_node_may_run() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let job = server.client().job("jobs:e").unwrap().at_most(Duration::from_millis(300));
    let other = server.client().job("jobs:e").unwrap().at_most(Duration::from_millis(300));
    let outcome = job
        .run_with(|run| {
            assert!(!run.is_expired() && run.remaining() <= Duration::from_millis(300));
            // The node hangs past at_most: the lock frees itself meanwhile.
            let freed = common::eventually(5 * SECOND, || !exists(&mut con, "jobs:e"));
            std::thread::sleep(Duration::from_millis(50));
            let ran_elsewhere = other.run(|| ()).unwrap();
            (freed, run.is_expired(), ran_elsewhere)
        })
        .unwrap();
    let JobOutcome::Lost { output: (freed, expired, ran_elsewhere), reason } = outcome else {
        panic!("not reported lost: {outcome:?}")
    };
    assert!(freed && expired);
    assert!(matches!(ran_elsewhere, JobOutcome::Ran(())), "{ran_elsewhere:?}");
    assert_eq!(reason, LostReason::LeaseExpired);
}

#[test]
fn a_lock_taken_away_mid_run_is_reported_lost() {
    let server = RedisServer::start();
    let client = server.client();
    let job = client.job("jobs:f").unwrap().at_most(10 * SECOND).at_least(5 * SECOND);
    let outcome = job.run(|| client.lock("jobs:f").unwrap().force_unlock().unwrap()).unwrap();
    assert_eq!(outcome, JobOutcome::Lost { output: true, reason: LostReason::ReleaseFoundGone });
    // Nothing of the lost run was written back.
    assert!(!exists(&mut server.conn(), "jobs:f"));
}

#[test]
fn bad_settings_are_refused_before_any_io() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let before = command_calls(&mut con);
    let job = client.job("jobs:g").unwrap();
    for bad in [
        job.clone().at_most(Duration::ZERO),
        job.clone().at_most(Duration::from_micros(999)),
        job.clone().at_most(keyholder::MAX_LEASE + SECOND),
        job.clone().at_most(SECOND).at_least(2 * SECOND),
        job.clone().at_least(keyholder::DEFAULT_JOB_AT_MOST + SECOND),
    ] {
        let called = AtomicU64::new(0);
        let e = bad.run(|| called.fetch_add(1, Ordering::Relaxed)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}: {e}");
        assert_eq!(called.load(Ordering::Relaxed), 0);
    }
    assert_eq!(client.job("").unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(command_calls(&mut con), before, "a refused job sent commands");
    // at_least = at_most is allowed: held exactly at_most.
    assert!(job.at_most(SECOND).at_least(SECOND).run(|| ()).unwrap().ran());
}

#[test]
fn a_panicking_job_still_ends_its_hold_and_the_panic_goes_on() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    // at_least far below at_most (30 s) and far above a loaded machine's
    // stalls, so the PTTL read after the job tells which one was kept.
    let job = client.job("jobs:h").unwrap().at_least(Duration::from_secs(5));
    let panicked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(|| panic!("job failed"))));
    assert!(panicked.is_err());
    let ttl = pttl(&mut con, "jobs:h");
    assert!(ttl > 0 && ttl <= 5000, "kept for at_least, not at_most: {ttl}");
    let job = client.job("jobs:h2").unwrap();
    let panicked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(|| panic!("job failed"))));
    assert!(panicked.is_err());
    assert!(!exists(&mut con, "jobs:h2"), "released after the panic");
}

#[test]
fn concurrent_runs_across_threads_and_clients_run_once() {
    let server = RedisServer::start();
    let ran = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(8));
    let clients = [server.client(), server.client()];
    let runs: Vec<_> = (0..8)
        .map(|i| {
            // Two clients, four threads each.
            let client = clients[i % 2].clone();
            let (ran, start) = (Arc::clone(&ran), Arc::clone(&start));
            spawn(move || {
                let job = client.job("jobs:i").unwrap().at_least(2 * SECOND);
                start.wait();
                job.run(|| {
                    ran.fetch_add(1, Ordering::Relaxed);
                    i
                })
                .unwrap()
            })
        })
        .collect();
    let outcomes: Vec<_> = runs.iter().map(|rx| recv_within(rx, 10 * SECOND, "job thread")).collect();
    assert_eq!(outcomes.iter().filter(|o| o.ran()).count(), 1, "{outcomes:?}");
    assert_eq!(ran.load(Ordering::Relaxed), 1);
}

#[test]
fn a_lock_waiter_is_woken_when_a_job_releases() {
    let server = RedisServer::start();
    let job = server.client().job("jobs:j").unwrap();
    let waiter_client = server.client();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let outcome = job
        .run(|| {
            let lock = waiter_client.lock("jobs:j").unwrap();
            let rx = spawn(move || {
                let started = Instant::now();
                let guard = lock.try_lock_for(60 * SECOND).unwrap();
                (guard.is_some(), started.elapsed())
            });
            common::wait_subscribed(&waiter_client, 1);
            ready_tx.send(rx).unwrap();
        })
        .unwrap();
    assert!(outcome.ran());
    let rx = ready_rx.recv().unwrap();
    let (acquired, waited) = recv_within(&rx, 10 * SECOND, "waiter");
    // Woken by the job's unlock message, not by the 30 s lease.
    assert!(acquired && waited < SLACK, "{waited:?}");
}

#[test]
fn in_migration_mode_a_legacy_holder_means_skip() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("jobs:k").arg("old").arg("PX").arg(5_000).query(&mut con).unwrap();
    let plain = server.client().job("jobs:k").unwrap();
    assert!(plain.run(|| ()).unwrap_err().is_wrong_type(), "default mode is unchanged");
    let job = plain.clone().migration_mode(true);
    assert!(job.run(|| ()).unwrap().is_skipped());
    let migrating = server.builder().migration_mode(true).build().unwrap();
    assert!(migrating.job("jobs:k").unwrap().run(|| ()).unwrap().is_skipped());
    let _: i64 = redis::cmd("PERSIST").arg("jobs:k").query(&mut con).unwrap();
    assert!(job.run(|| ()).unwrap_err().is_legacy_lock_without_ttl());
    let value: String = redis::cmd("GET").arg("jobs:k").query(&mut con).unwrap();
    assert_eq!((value.as_str(), pttl(&mut con, "jobs:k")), ("old", -1), "the legacy key was modified");
}
