//! Leases: fixed leases expire, the watchdog renews (in batches) while a lock
//! is held and stops after release, a crashed holder's lock frees itself, and
//! a lost hold says so without I/O.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::{
    RedisServer, ServerExt, calls_of, eventually, exists, hgetall, pttl, recv_within, spawn, timed,
};
use keyholder::{Client, ErrorKind, Lease, LostReason};

const SECOND: Duration = Duration::from_secs(1);
const SHORT_WATCHDOG: Duration = Duration::from_millis(300);

/// Script calls the server has run (EVALSHA, and EVAL if anyone used it).
fn script_calls(con: &mut redis::Connection) -> i64 {
    calls_of(con, "evalsha") + calls_of(con, "eval")
}

#[test]
fn a_fixed_lease_expires_and_lets_a_waiter_in() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let mut con = server.conn();
    let lease = Duration::from_millis(300);
    let lock_a = a.lock_with_lease("fixed", Lease::Fixed(lease)).unwrap();
    let lock_b = b.lock("fixed").unwrap();

    let before_acquire = Instant::now();
    let guard = lock_a.lock().unwrap();
    assert_eq!(a.watched_locks(), 0, "a fixed lease is not renewed");

    let (acquired_tx, acquired_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let waiter = spawn(move || {
        let guard = lock_b.try_lock_for(3 * SECOND).unwrap();
        acquired_tx.send((Instant::now(), guard.as_ref().map(|g| g.owner_id().to_owned()))).unwrap();
        release_rx.recv_timeout(10 * SECOND).unwrap();
        guard.map(|g| g.unlock().is_ok())
    });
    let (at, owner_b) = recv_within(&acquired_rx, 5 * SECOND, "waiter");
    let owner_b = owner_b.expect("the waiter did not get the lock after the lease");
    let after = at - before_acquire;
    assert!(after >= Duration::from_millis(250), "the lock was free after only {after:?}");
    assert!(after < 3 * SECOND, "{after:?}");

    // The first holder knows, without I/O, that its hold is gone; its unlock
    // is refused and leaves the new holder alone.
    assert!(guard.is_lost());
    assert_eq!(guard.lost_reason(), Some(LostReason::LeaseExpired));
    let err = guard.unlock().unwrap_err();
    assert!(err.is_lock_lost() || err.is_not_owner(), "{err:?}");
    assert_eq!(hgetall(&mut con, "fixed"), [(owner_b, "1".to_owned())].into_iter().collect());

    release_tx.send(()).unwrap();
    assert_eq!(recv_within(&waiter, 5 * SECOND, "waiter"), Some(true));
    assert!(!exists(&mut con, "fixed"));
}

#[test]
fn an_expired_fixed_lease_lets_another_thread_of_the_same_client_in() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let lock = client.lock_with_lease("fixed-local", Lease::Fixed(Duration::from_millis(300))).unwrap();
    let guard = lock.lock().unwrap();

    let other_thread = lock.clone();
    let (acquired_tx, acquired_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let waiter = spawn(move || {
        let guard = other_thread.try_lock_for(5 * SECOND).unwrap();
        acquired_tx.send(guard.as_ref().map(|g| g.owner_id().to_owned())).unwrap();
        release_rx.recv_timeout(10 * SECOND).unwrap();
        guard.map(|g| g.unlock().is_ok())
    });
    let (owner, took) = timed(|| recv_within(&acquired_rx, 10 * SECOND, "waiter"));
    let owner = owner.expect("the other thread did not get the lock after the lease");
    assert!(took < 3 * SECOND, "took {took:?}");
    assert_ne!(owner, guard.owner_id());

    assert!(guard.is_lost());
    let err = guard.unlock().unwrap_err();
    assert!(err.is_lock_lost() || err.is_not_owner(), "{err:?}");
    assert_eq!(hgetall(&mut con, "fixed-local"), [(owner, "1".to_owned())].into_iter().collect());
    release_tx.send(()).unwrap();
    assert_eq!(recv_within(&waiter, 5 * SECOND, "waiter"), Some(true));
}

#[test]
fn the_watchdog_keeps_a_lock_beyond_several_timeouts() {
    let server = RedisServer::start();
    let client = server.builder().watchdog_timeout(SHORT_WATCHDOG).build().unwrap();
    let other = server.client();
    let mut con = server.conn();
    let lock = client.lock("kept").unwrap();
    let other_lock = other.lock("kept").unwrap();
    let guard = lock.lock().unwrap();
    assert_eq!(client.watched_locks(), 1);
    let ttl = pttl(&mut con, "kept");
    assert!(ttl > 0 && ttl <= 300, "PTTL {ttl}, expected the 300 ms watchdog timeout");

    // 1.5 s = five timeouts: without renewal the key would be long gone.
    let start = Instant::now();
    let mut checks = 0;
    while start.elapsed() < Duration::from_millis(1_500) && checks < 200 {
        assert!(pttl(&mut con, "kept") > 0, "the key expired after {:?}", start.elapsed());
        assert!(other_lock.try_lock().unwrap().is_none(), "another client took a renewed lock");
        assert!(!guard.is_lost(), "the guard reports a loss after {:?}", start.elapsed());
        checks += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(start.elapsed() >= Duration::from_millis(1_500));
    assert_eq!(hgetall(&mut con, "kept").get(guard.owner_id()).map(String::as_str), Some("1"));
    guard.unlock().unwrap();
    assert!(!exists(&mut con, "kept"));
}

#[test]
fn the_watchdog_stops_renewing_when_the_last_guard_is_released() {
    let server = RedisServer::start();
    let client = server.builder().watchdog_timeout(SHORT_WATCHDOG).build().unwrap();
    let mut con = server.conn();
    let lock = client.lock("stop").unwrap();

    let g1 = lock.lock().unwrap();
    let g2 = lock.lock().unwrap();
    assert_eq!(client.watched_locks(), 1);
    g2.unlock().unwrap();
    assert_eq!(client.watched_locks(), 1, "a partial release must keep renewing");
    std::thread::sleep(Duration::from_millis(500));
    assert!(exists(&mut con, "stop"), "the partially released lock expired");
    assert!(!g1.is_lost());

    g1.unlock().unwrap();
    assert_eq!(client.watched_locks(), 0, "still renewing after the release returned");
    let calls = script_calls(&mut con);
    std::thread::sleep(Duration::from_millis(500)); // five renewal periods
    // A renewal round that took its list before the release may still land
    // (once, and refused); a watchdog that kept renewing would call five times.
    let after = script_calls(&mut con) - calls;
    assert!(after <= 1, "the watchdog kept calling Redis after the release: {after} calls");
    assert!(!exists(&mut con, "stop"));

    // Likewise when the guard is dropped rather than unlocked.
    {
        let _guard = lock.lock().unwrap();
        assert_eq!(client.watched_locks(), 1);
    }
    assert_eq!(client.watched_locks(), 0);
}

#[test]
fn the_watchdog_renews_many_locks_in_batched_calls() {
    const LOCKS: usize = 150;
    let server = RedisServer::start();
    let client = server.builder().watchdog_timeout(SHORT_WATCHDOG).build().unwrap();
    let mut con = server.conn();
    let locks: Vec<_> = (0..LOCKS).map(|i| client.lock(&format!("many:{i}")).unwrap()).collect();
    let guards: Vec<_> = locks.iter().map(|l| l.lock().unwrap()).collect();
    assert_eq!(client.watched_locks(), LOCKS);

    let calls = script_calls(&mut con);
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(1_000));
    let spent = script_calls(&mut con) - calls;
    let periods = i64::try_from(start.elapsed().as_millis() / 100).unwrap() + 1;
    // 150 locks = 2 batches of at most 100 per 100 ms period.
    assert!(spent >= 2, "no renewal in {:?}", start.elapsed());
    assert!(spent <= 2 * periods, "{spent} script calls in {periods} periods for {LOCKS} locks");
    for i in [0, LOCKS / 2, LOCKS - 1] {
        assert!(pttl(&mut con, &format!("many:{i}")) > 0, "many:{i} expired");
    }
    assert!(guards.iter().all(|g| !g.is_lost()));
    drop(guards);
    assert_eq!(client.watched_locks(), 0);
}

const CHILD_ENV: &str = "KEYHOLDER_TEST_CRASH_CHILD_URL";
const CHILD_WATCHDOG: Duration = Duration::from_millis(500);

/// Not a test of its own: the body of the child process of
/// `a_crashed_holders_lock_is_freed_within_the_lease`, which re-runs this
/// test binary with `CHILD_ENV` set and kills it (SIGKILL) while it holds the
/// lock. Without the variable it does nothing.
#[test]
fn crash_child_process() {
    let Some(url) = child::child_env(CHILD_ENV) else { return };
    let client = Client::builder(url)
        .watchdog_timeout(CHILD_WATCHDOG)
        .connect_timeout(2 * SECOND)
        .command_timeout(2 * SECOND)
        .build()
        .unwrap();
    let guard = client.lock("crash").unwrap().lock().unwrap();
    child::say(format!("LOCKED {}", guard.owner_id()));
    // Hold (renewed by the watchdog) until killed; never outlive the parent's
    // test, and never release: exit runs no destructor.
    std::thread::sleep(Duration::from_secs(20));
    std::process::exit(3);
}

#[test]
fn a_crashed_holders_lock_is_freed_within_the_lease() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let lock = client.lock("crash").unwrap();

    let url = server.url();
    let mut child = ChildProcess::spawn("lease::crash_child_process", &[(CHILD_ENV, url.as_str())]);
    let owner = child.expect("LOCKED ", 20 * SECOND);

    // The child's watchdog keeps its lock across several timeouts.
    std::thread::sleep(3 * CHILD_WATCHDOG);
    assert_eq!(hgetall(&mut con, "crash"), [(owner, "1".to_owned())].into_iter().collect());
    assert!(lock.try_lock().unwrap().is_none());

    // Crash it (kill -9: no unlock, no destructor, no shutdown), and reap it.
    let status = child.kill();
    let died = Instant::now();
    assert!(!status.success(), "the child exited normally instead of crashing");

    let guard = lock.try_lock_for(5 * SECOND).unwrap();
    let freed_after = died.elapsed();
    assert!(guard.is_some(), "the crashed holder's lock was not freed");
    assert!(
        freed_after < CHILD_WATCHDOG + 2 * SECOND,
        "freed {freed_after:?} after the crash; the lease is {CHILD_WATCHDOG:?}"
    );
}

#[test]
fn a_force_unlock_elsewhere_marks_the_guard_lost() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(900); // renewal every 300 ms
    let client = server.builder().watchdog_timeout(timeout).build().unwrap();
    let admin = server.client();
    let guard = client.lock("forced").unwrap().lock().unwrap();
    assert!(!guard.is_lost());

    assert!(admin.lock("forced").unwrap().force_unlock().unwrap());
    let forced_at = Instant::now();
    assert!(eventually(5 * SECOND, || guard.is_lost()), "the guard never learned of the force unlock");
    let noticed_after = forced_at.elapsed();
    assert!(noticed_after < 2 * SECOND, "noticed after {noticed_after:?}; the renewal period is 300 ms");
    // Told by the check its client makes when the subscription of the
    // lock's channel (or the unlock message there) arrives, before the
    // renewal would have been refused (tests/suite/foreign_unlock.rs).
    assert_eq!(guard.lost_reason(), Some(LostReason::Gone));
    assert!(eventually(2 * SECOND, || client.watched_locks() == 0), "a lost hold is still renewed");

    let err = guard.unlock().expect_err("released a lost hold");
    assert_eq!(err.kind(), ErrorKind::LockLost, "{err:?}");
    assert_eq!(err.lock_name(), Some("forced"));
    assert_eq!(err.lost_reason(), Some(LostReason::Gone));
}

#[test]
fn a_hold_whose_renewals_fail_reports_itself_lost_by_its_deadline() {
    let mut server = RedisServer::start();
    let client = server
        .builder()
        .watchdog_timeout(SHORT_WATCHDOG)
        .connect_timeout(Duration::from_millis(200))
        .command_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = client.lock("unrenewed").unwrap().lock().unwrap();
    server.stop();
    let stopped_at = Instant::now();

    assert!(eventually(5 * SECOND, || guard.is_lost()), "the hold never reported itself lost");
    let lost_after = stopped_at.elapsed();
    assert!(lost_after <= SHORT_WATCHDOG + SECOND, "lost only after {lost_after:?}");
    assert_eq!(guard.lost_reason(), Some(LostReason::LeaseExpired));
    assert!(eventually(3 * SECOND, || client.watched_locks() == 0), "a lost hold is still renewed");
    let (result, took) = timed(|| guard.unlock());
    assert!(result.is_err());
    assert!(took < 2 * SECOND, "unlock took {took:?} with Redis down");
}

/// A hung server (SIGSTOP: connections open, nothing answered) holds the
/// watchdog's renewal call for the command timeout or longer (a reconnect,
/// the outage budget); the hold's lost signal must still fire at its local
/// deadline, which is no later than the lease the server last granted ran
/// out (its PTTL read just before the hang), not when the renewal gives up.
#[test]
fn a_hung_server_does_not_delay_the_lost_signal_past_the_lease() {
    const WATCHDOG: Duration = Duration::from_secs(2);
    /// The deadline thread's wake-up on a loaded machine.
    const SCHEDULING: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let mut con = server.conn();
    // The defaults: 3 s command timeout, 4.5 s outage budget.
    let client = server.builder().watchdog_timeout(WATCHDOG).build().unwrap();
    let guard = client.lock("hung").unwrap().lock().unwrap();
    let lost = guard.lost_signal();
    // A renewal or two go by first.
    std::thread::sleep(Duration::from_millis(1500));
    let left = Duration::from_millis(u64::try_from(pttl(&mut con, "hung")).unwrap());
    let frozen_at = Instant::now();
    server.freeze();
    let reason = lost.recv_timeout(15 * SECOND);
    let after = frozen_at.elapsed();
    server.thaw();
    assert_eq!(reason, Ok(LostReason::LeaseExpired), "after {after:?}");
    assert!(
        after <= left + SCHEDULING,
        "told {after:?} after the hang began, the server's lease had {left:?} left"
    );
    assert!(guard.is_lost());
}

#[test]
fn the_watchdog_keeps_renewing_after_a_transient_failure() {
    let server = RedisServer::start();
    let timeout = Duration::from_secs(3); // renewal every second
    let client = server
        .builder()
        .watchdog_timeout(timeout)
        .command_timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let mut con = server.conn();
    let guard = client.lock("transient").unwrap().lock().unwrap();

    // Right after a renewal, make Redis unresponsive across the next one, so
    // that it times out; the one after must succeed. (Wait for a second
    // script call: a client's first renewal is an EVALSHA refused with
    // NOSCRIPT, then SCRIPT LOAD and the EVALSHA again.)
    for _ in 0..2 {
        let before = script_calls(&mut con);
        assert!(eventually(5 * SECOND, || script_calls(&mut con) > before), "no renewal");
    }
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(1_300).arg("ALL").query(&mut con).unwrap();
    let paused_at = Instant::now();
    std::thread::sleep(Duration::from_millis(1_300));
    let after_pause = script_calls(&mut con);

    // Two more periods, to a whole timeout after the pause began (a hold
    // not renewed since would be gone): renewals resumed, the hold is
    // intact.
    std::thread::sleep((timeout + Duration::from_millis(500)).saturating_sub(paused_at.elapsed()));
    assert!(!guard.is_lost(), "a transient failure lost the hold: {:?}", guard.lost_reason());
    assert!(script_calls(&mut con) > after_pause, "the watchdog stopped renewing after a failure");
    let ttl = pttl(&mut con, "transient");
    assert!(ttl > 0, "the lock expired");
    assert_eq!(client.watched_locks(), 1);
    guard.unlock().unwrap();
}
