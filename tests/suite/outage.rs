//! A waiter rides out an outage (issue 21, item 4): a thread blocked in
//! `lock()` (or `acquire`, or a latch's `await_for`) when Redis restarts
//! keeps waiting and acquires once Redis is back, as Redisson's waiter does;
//! one whose outage outlasts the client's outage budget, or whose own
//! deadline passes during it, returns the connection error in bounded time;
//! calls that do not wait still fail at once.
//!
//! Each test runs its own redis-server, stopped (SIGKILL) and started again
//! empty on the same port (`RedisServer::restart`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, eventually, recv_within, spawn, timed};
use keyholder::{ClientBuilder, Result};

const SECOND: Duration = Duration::from_secs(1);
const CONNECT: Duration = Duration::from_millis(300);
const COMMAND: Duration = Duration::from_millis(300);

fn short_timeouts(builder: ClientBuilder) -> ClientBuilder {
    builder.connect_timeout(CONNECT).command_timeout(COMMAND)
}

/// The longest one attempt may take with Redis gone, and what follows it
/// (a give-back, a release retried), with slack for a loaded machine.
fn call_bound() -> Duration {
    CONNECT + 3 * COMMAND + 2 * SECOND
}

#[track_caller]
fn assert_connection_error<T: std::fmt::Debug>(what: &str, result: &Result<T>) {
    match result {
        Err(e) if e.is_connection_error() => {}
        other => panic!("{what}: expected a connection error, got {other:?}"),
    }
}

/// A call run on a thread of its own.
type Call = Box<dyn FnOnce() -> Result<bool> + Send>;

/// A call made on the test's thread.
type Check<'a> = Box<dyn Fn() -> Result<bool> + 'a>;

/// What a waiting thread reports: whether it got what it waited for (and
/// gave it back), and when it returned.
type Report = (Result<bool>, Instant);

/// Runs `wait` on a thread once `started` hears from it; reports its outcome
/// and when it came.
fn waiter(
    started: &mpsc::Sender<()>,
    wait: impl FnOnce() -> Result<bool> + Send + 'static,
) -> mpsc::Receiver<Report> {
    let started = started.clone();
    spawn(move || {
        started.send(()).unwrap();
        let outcome = wait();
        (outcome, Instant::now())
    })
}

#[test]
fn waiters_of_every_kind_ride_out_a_restart_and_acquire_once_redis_is_back() {
    let mut server = RedisServer::start();
    let holder = server.client();
    // The default outage budget (4.5 s) covers a restart.
    let client = short_timeouts(server.builder()).build().unwrap();
    let other = short_timeouts(server.builder()).build().unwrap();

    // Everything the waiters want is held or missing.
    let held_lock = holder.lock("ride").unwrap().lock().unwrap();
    let held_fair = holder.fair_lock("ride-fair").unwrap().lock().unwrap();
    let held_spin = holder.spin_lock("ride-spin").unwrap().lock().unwrap();
    let held_write = holder.read_write_lock("ride-rw").unwrap().write().lock().unwrap();
    let latch = holder.count_down_latch("ride-latch").unwrap();
    assert!(latch.try_set_count(1).unwrap());

    let (started_tx, started_rx) = mpsc::channel();
    let mut waiters: Vec<(&str, mpsc::Receiver<Report>)> = Vec::new();
    let hold = || std::thread::sleep(Duration::from_millis(5));
    for (name, client) in [("lock 1", &client), ("lock 2", &client), ("lock, other client", &other)] {
        let lock = client.lock("ride").unwrap();
        waiters.push((name, waiter(&started_tx, move || lock.lock().map(|_g| hold()).map(|()| true))));
    }
    let lock = client.lock("ride").unwrap();
    waiters.push((
        "try_lock_for",
        waiter(&started_tx, move || {
            lock.try_lock_for(60 * SECOND).map(|g| g.map(|g| drop((hold(), g))).is_some())
        }),
    ));
    let fair = client.fair_lock("ride-fair").unwrap();
    waiters.push(("fair lock", waiter(&started_tx, move || fair.lock().map(|_| true))));
    let spin = client.spin_lock("ride-spin").unwrap();
    waiters.push(("spin lock", waiter(&started_tx, move || spin.lock().map(|_| true))));
    let rw = client.read_write_lock("ride-rw").unwrap();
    let write = rw.write();
    waiters.push(("write lock", waiter(&started_tx, move || write.lock().map(|_| true))));
    let read = rw.read();
    waiters.push(("read lock", waiter(&started_tx, move || read.lock().map(|_| true))));
    let semaphore = client.semaphore("ride-sem").unwrap();
    waiters.push(("semaphore", waiter(&started_tx, move || semaphore.acquire(1).map(|_| true))));
    let permits = client.permit_expirable_semaphore("ride-permits").unwrap();
    waiters.push(("permit semaphore", waiter(&started_tx, move || permits.acquire(1).map(|_| true))));
    let awaiting = client.count_down_latch("ride-latch").unwrap();
    waiters.push(("latch", waiter(&started_tx, move || awaiting.await_for(60 * SECOND))));
    for _ in 0..waiters.len() {
        recv_within(&started_rx, 5 * SECOND, "waiter start");
    }
    // All waiting (not needed for correctness: a waiter that starts during
    // the outage rides it out as well).
    assert!(eventually(5 * SECOND, || client.subscribed_channels() >= 4));
    std::thread::sleep(Duration::from_millis(300));
    for (name, rx) in &waiters {
        assert!(rx.try_recv().is_err(), "{name} returned before the outage");
    }

    server.stop();
    let stopped_at = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    server.restart(); // an empty server on the same port: the holds are gone
    let back_at = Instant::now();
    eprintln!("outage: {:?} (stopped to answering again)", back_at - stopped_at);
    // The semaphores start empty: give them permits, from a fresh client.
    let giver = server.client();
    giver.semaphore("ride-sem").unwrap().release(1).unwrap();
    assert!(giver.permit_expirable_semaphore("ride-permits").unwrap().try_set_permits(1).unwrap());

    let mut slowest = Duration::ZERO;
    for (name, rx) in &waiters {
        let (outcome, at) = recv_within(rx, 30 * SECOND, name);
        match outcome {
            Ok(true) => {}
            other => panic!("{name}: did not ride out the restart: {other:?}"),
        }
        let after = at.saturating_duration_since(back_at);
        eprintln!("{name}: acquired {after:?} after Redis was back");
        slowest = slowest.max(after);
    }
    eprintln!("slowest acquisition after Redis was back: {slowest:?}");
    assert!(slowest < 15 * SECOND, "waiters acquired {slowest:?} after Redis was back");
    drop((held_lock, held_fair, held_spin, held_write));
}

#[test]
fn a_waiter_whose_outage_outlasts_its_budget_returns_the_connection_error_in_bounded_time() {
    const BUDGET: Duration = Duration::from_secs(1);
    let mut server = RedisServer::start();
    let holder = server.client();
    let client = short_timeouts(server.builder()).outage_budget(BUDGET).build().unwrap();
    let held = holder.lock("budget").unwrap().lock().unwrap();
    let held_fair = holder.fair_lock("budget-fair").unwrap().lock().unwrap();

    let (started_tx, started_rx) = mpsc::channel();
    let lock = client.lock("budget").unwrap();
    let blocking = waiter(&started_tx, move || lock.lock().map(|_| true));
    let lock = client.lock("budget").unwrap();
    let timed_wait = waiter(&started_tx, move || lock.try_lock_for(60 * SECOND).map(|g| g.is_some()));
    let fair = client.fair_lock("budget-fair").unwrap();
    let fair_wait = waiter(&started_tx, move || fair.lock().map(|_| true));
    for _ in 0..3 {
        recv_within(&started_rx, 5 * SECOND, "waiter start");
    }
    assert!(eventually(5 * SECOND, || client.subscribed_channels() >= 2));
    std::thread::sleep(Duration::from_millis(200));

    // Taken before the kill: the waiters may hear of it before `stop`
    // returns.
    let stopped_at = Instant::now();
    server.stop();
    // Each rides out the outage for its budget, then gives up; the local
    // waiters behind the gate share the outage, not a budget each.
    let bound = BUDGET + 2 * call_bound();
    for (name, rx) in [("lock", &blocking), ("try_lock_for", &timed_wait), ("fair lock", &fair_wait)] {
        let (outcome, at) = recv_within(rx, bound + 10 * SECOND, name);
        assert_connection_error(name, &outcome);
        let took = at - stopped_at;
        eprintln!("{name}: returned {took:?} after Redis stopped (budget {BUDGET:?})");
        assert!(took >= BUDGET, "{name} gave up after {took:?}, before its budget");
        assert!(took < bound, "{name} returned {took:?} after Redis stopped; the bound is {bound:?}");
    }

    // Calls made during the outage: waiting ones ride out the budget,
    // the others fail at once.
    let lock = client.lock("budget").unwrap();
    let rides: Vec<(&str, Call)> = vec![
        (
            "lock",
            Box::new({
                let lock = lock.clone();
                move || lock.lock().map(|_| true)
            }),
        ),
        (
            "spin lock",
            Box::new({
                let spin = client.spin_lock("budget-spin").unwrap();
                move || spin.lock().map(|_| true)
            }),
        ),
        (
            "write lock",
            Box::new({
                let write = client.read_write_lock("budget-rw").unwrap().write();
                move || write.lock().map(|_| true)
            }),
        ),
        (
            "semaphore",
            Box::new({
                let semaphore = client.semaphore("budget-sem").unwrap();
                move || semaphore.acquire(1).map(|_| true)
            }),
        ),
        (
            "latch",
            Box::new({
                let latch = client.count_down_latch("budget-latch").unwrap();
                move || latch.await_for(60 * SECOND)
            }),
        ),
    ];
    let running: Vec<_> = rides.into_iter().map(|(name, call)| (name, spawn(move || timed(call)))).collect();
    for (name, rx) in &running {
        let (outcome, took) = recv_within(rx, bound + 10 * SECOND, name);
        assert_connection_error(name, &outcome);
        eprintln!("{name}, called during the outage: returned after {took:?}");
        assert!(took < bound, "{name} took {took:?}; the bound is {bound:?}");
    }
    let fail_fast: [(&str, Check<'_>); 3] = [
        ("try_lock", Box::new(|| lock.try_lock().map(|g| g.is_some()))),
        ("is_locked", Box::new(|| lock.is_locked())),
        ("hold_count", Box::new(|| lock.hold_count().map(|n| n > 0))),
    ];
    for (name, call) in &fail_fast {
        let (outcome, took) = timed(call);
        assert_connection_error(name, &outcome);
        assert!(took < call_bound(), "{name} took {took:?}: it does not wait, and must fail fast");
    }
    drop((held, held_fair));
}

#[test]
fn a_timed_wait_whose_deadline_passes_during_the_outage_returns_at_its_deadline() {
    const WAIT: Duration = Duration::from_millis(1_500);
    let mut server = RedisServer::start();
    let holder = server.client();
    // A budget far beyond the deadlines: the deadline is what ends the wait.
    let client = short_timeouts(server.builder()).outage_budget(60 * SECOND).build().unwrap();
    let held = holder.lock("deadline").unwrap().lock().unwrap();
    let held_fair = holder.fair_lock("deadline-fair").unwrap().lock().unwrap();

    let lock = client.lock("deadline").unwrap();
    let fair = client.fair_lock("deadline-fair").unwrap();
    let semaphore = client.semaphore("deadline-sem").unwrap();
    let called_at = Instant::now();
    let waits = [
        ("try_lock_for", spawn(move || lock.try_lock_for(WAIT).map(|g| g.is_some()))),
        ("fair try_lock_for", spawn(move || fair.try_lock_for(WAIT).map(|g| g.is_some()))),
        ("semaphore try_acquire_for", spawn(move || semaphore.try_acquire_for(1, WAIT).map(|p| p.is_some()))),
    ];
    assert!(eventually(5 * SECOND, || client.subscribed_channels() >= 3));
    server.stop();
    let stopped_at = Instant::now();
    assert!(
        stopped_at < called_at + WAIT,
        "the machine is too slow for this test: stopped after the deadline"
    );

    let bound = WAIT + call_bound();
    for (name, rx) in &waits {
        let outcome = recv_within(rx, bound + 10 * SECOND, name);
        let took = called_at.elapsed();
        assert_connection_error(name, &outcome);
        eprintln!("{name}({WAIT:?}) with Redis stopped mid-wait: returned after {took:?}");
        assert!(took < bound, "{name} returned after {took:?}; the bound is {bound:?}");
    }
    // And with Redis already down: the deadline bounds the ride.
    let lock = client.lock("deadline").unwrap();
    let (outcome, took) = timed(|| lock.try_lock_for(WAIT));
    assert_connection_error("try_lock_for during the outage", &outcome);
    assert!(took >= WAIT && took < bound, "try_lock_for({WAIT:?}) during the outage took {took:?}");
    std::mem::drop((held, held_fair));
}

#[test]
fn a_multilock_rides_out_a_restart_of_one_of_its_servers_and_gives_up_after_the_budget() {
    const BUDGET: Duration = Duration::from_secs(1);
    let mut s1 = RedisServer::start();
    let mut s2 = RedisServer::start();
    let (c1, c2) = (
        short_timeouts(s1.builder()).outage_budget(BUDGET).build().unwrap(),
        short_timeouts(s2.builder()).outage_budget(BUDGET).build().unwrap(),
    );
    let multi = keyholder::MultiLock::new(vec![c1.lock("a").unwrap(), c2.lock("b").unwrap()]).unwrap();
    let held = s2.client().lock("b").unwrap().lock().unwrap();

    // Waiting for "b" when its server restarts (empty): it gets both.
    let waiting = multi.clone();
    let waiter = spawn(move || waiting.lock().map(drop).map(|()| Instant::now()));
    assert!(eventually(5 * SECOND, || c2.subscribed_channels() >= 1));
    s2.stop();
    std::thread::sleep(Duration::from_millis(300));
    s2.restart();
    let back_at = Instant::now();
    let acquired_at =
        recv_within(&waiter, 20 * SECOND, "multilock waiter").expect("did not ride out the restart");
    eprintln!(
        "multilock: acquired {:?} after Redis was back",
        acquired_at.saturating_duration_since(back_at)
    );

    // Redis gone for longer than the budget: the error, in bounded time.
    s1.stop();
    let (outcome, took) = timed(|| multi.lock().map(drop));
    assert_connection_error("multilock lock", &outcome);
    eprintln!("multilock lock() with a server down: returned after {took:?} (budget {BUDGET:?})");
    assert!(took < BUDGET + 2 * call_bound(), "multilock lock() took {took:?}");
    drop(held);
}
