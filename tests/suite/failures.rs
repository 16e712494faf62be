//! Failures: Redis stopped or hung mid-wait, unreachable at build time, gone
//! under every public call, restarted under a live client; and shutdown.
//! Nothing may hang: every outcome arrives within a bound derived from the
//! configured timeouts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{
    RedisServer, ServerExt, eventually, exists, free_port, info_field, recv_within, spawn, timed,
    wait_subscribed,
};
use keyholder::{Client, ClientBuilder, Error, LostReason, Result};

const SECOND: Duration = Duration::from_secs(1);
const CONNECT: Duration = Duration::from_millis(300);
const COMMAND: Duration = Duration::from_millis(300);
/// How long a waiting call rides out an outage before it gives up.
const BUDGET: Duration = Duration::from_secs(1);

/// A client with short timeouts and a short outage budget.
fn short_timeouts(builder: ClientBuilder) -> ClientBuilder {
    builder.connect_timeout(CONNECT).command_timeout(COMMAND).outage_budget(BUDGET)
}

/// The longest one call may take with Redis gone or hung: an acquire whose
/// reply is lost is followed by a release of whatever it may have taken, and
/// that release by one retry on a fresh connection, so up to three command
/// timeouts and a connect timeout, plus generous slack for a loaded machine.
fn call_bound() -> Duration {
    CONNECT + 3 * COMMAND + 2 * SECOND
}

#[track_caller]
fn assert_redis_failure<T: std::fmt::Debug>(what: &str, result: Result<T>) {
    match result {
        Err(e) if e.is_redis_error() => {}
        other => panic!("{what}: expected a Redis/connection error, got {other:?}"),
    }
}

/// Starts threads of `client` waiting for `name`: one `lock()`, one long
/// `try_lock_for`, and one more `lock()` queued behind them locally; returns
/// once they all wait. Each channel yields that thread's outcome (whether it
/// got the lock) and how long it waited.
fn start_three_waiters(client: &Client, name: &str) -> Vec<mpsc::Receiver<(Result<bool>, Duration)>> {
    let (started_tx, started_rx) = mpsc::channel();
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let lock = client.lock(name).unwrap();
            let started = started_tx.clone();
            spawn(move || {
                started.send(()).unwrap();
                timed(|| match i {
                    1 => lock.try_lock_for(Duration::from_secs(60)).map(|g| g.is_some()),
                    _ => lock.lock().map(|_| true),
                })
            })
        })
        .collect();
    for _ in 0..3 {
        recv_within(&started_rx, 5 * SECOND, "waiter start");
    }
    wait_subscribed(client, 1);
    std::thread::sleep(Duration::from_millis(100)); // all parked (not needed for correctness)
    waiters
}

#[test]
fn redis_stopped_mid_wait_makes_waiters_return_an_error_after_the_outage_budget() {
    let mut server = RedisServer::start();
    let holder = server.client();
    let client = short_timeouts(server.builder()).build().unwrap();
    let guard = holder.lock("mid-wait").unwrap().lock().unwrap();
    let waiters = start_three_waiters(&client, "mid-wait");

    let stopped_at = Instant::now();
    server.stop();
    // The waiters ride out the outage for the budget (the two behind the
    // gate share it: one outage, not a budget each); then each needs at
    // most one failed attempt, one after the other.
    let bound = BUDGET + 3 * call_bound();
    for (i, waiter) in waiters.iter().enumerate() {
        let (outcome, _) = recv_within(waiter, bound + 5 * SECOND, &format!("waiter {i}"));
        assert_redis_failure(&format!("waiter {i}"), outcome);
    }
    let took = stopped_at.elapsed();
    assert!(took >= BUDGET, "the waiters gave up {took:?} after Redis stopped, within their budget");
    assert!(took < bound, "the waiters returned {took:?} after Redis stopped");
    eprintln!("waiters returned {took:?} after Redis stopped (outage budget {BUDGET:?})");
    assert_eq!(client.subscribed_channels(), 0);
    drop(guard);
}

#[test]
fn redis_hanging_mid_wait_makes_waiters_return_an_error_after_the_outage_budget() {
    let server = RedisServer::start();
    let holder = server.client();
    let client = short_timeouts(server.builder()).build().unwrap();
    let guard = holder.lock("hung").unwrap().lock().unwrap();
    let waiters = start_three_waiters(&client, "hung");

    // The server stops answering anyone (but keeps its sockets open).
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(20_000).arg("ALL").query(&mut server.conn()).unwrap();
    let paused_at = Instant::now();
    // Noticing a silent pub/sub connection takes two command timeouts (read
    // timeout, then an unanswered PING); then the waiters ride out the
    // outage for the budget, and each one's last attempt times out.
    let bound = 2 * COMMAND + CONNECT + BUDGET + 3 * call_bound();
    for (i, waiter) in waiters.iter().enumerate() {
        let (outcome, _) = recv_within(waiter, bound + 5 * SECOND, &format!("waiter {i}"));
        assert_redis_failure(&format!("waiter {i}"), outcome);
    }
    let took = paused_at.elapsed();
    assert!(took < bound, "the waiters returned {took:?} after Redis hung");
    std::mem::forget(guard); // its release would only time out; the server is killed at the end
}

#[test]
fn building_a_client_for_an_unreachable_redis_fails_in_time() {
    let nobody = format!("redis://127.0.0.1:{}/", free_port());
    let (result, took) = timed(|| short_timeouts(Client::builder(nobody)).build());
    let err = result.expect_err("built a client for a port nobody listens on");
    assert!(err.is_connection_error(), "{err:?}");
    assert!(took < CONNECT + 2 * SECOND, "build took {took:?}");

    let mut server = RedisServer::start();
    let url = server.url();
    server.stop();
    let (result, took) = timed(|| short_timeouts(Client::builder(url)).build());
    assert!(result.expect_err("built a client for a stopped server").is_connection_error());
    assert!(took < CONNECT + 2 * SECOND, "build took {took:?}");
}

/// Calls every public operation of `client` on lock `name` (and on two
/// guards it holds) and checks that each fails with a Redis error within
/// `bound` (the waiting ones within the outage budget more).
fn every_call_fails_in_time(
    client: &Client,
    guards: (keyholder::LockGuard, keyholder::LockGuard),
    bound: Duration,
) {
    let lock = client.lock("down").unwrap();
    let mut slowest = Duration::ZERO;
    let mut check = |what: &str, f: &mut dyn FnMut() -> Result<String>| {
        // Waiting calls ride out the outage for the budget first.
        let bound =
            if what.starts_with("lock") || what.starts_with("try_lock_") { BUDGET + bound } else { bound };
        let (result, took) = timed(f);
        assert_redis_failure(what, result);
        assert!(took < bound, "{what} took {took:?}");
        slowest = slowest.max(took);
    };
    check("lock", &mut || lock.lock().map(|g| format!("{g:?}")));
    check("try_lock", &mut || lock.try_lock().map(|g| format!("{g:?}")));
    check("try_lock_for", &mut || lock.try_lock_for(Duration::from_secs(30)).map(|g| format!("{g:?}")));
    check("try_lock_until", &mut || {
        lock.try_lock_until(Instant::now() + Duration::from_secs(30)).map(|g| format!("{g:?}"))
    });
    check("is_locked", &mut || lock.is_locked().map(|v| v.to_string()));
    check("is_held_by_current_thread", &mut || lock.is_held_by_current_thread().map(|v| v.to_string()));
    check("hold_count", &mut || lock.hold_count().map(|v| v.to_string()));
    check("remaining_lease", &mut || lock.remaining_lease().map(|v| format!("{v:?}")));
    check("force_unlock", &mut || lock.force_unlock().map(|v| v.to_string()));
    let (to_unlock, to_drop) = guards;
    let mut to_unlock = Some(to_unlock);
    check("guard.unlock", &mut || to_unlock.take().unwrap().unlock().map(|()| String::new()));
    let ((), took) = timed(|| drop(to_drop));
    assert!(took < bound, "dropping a guard took {took:?}");
    assert_eq!(client.watched_locks(), 0, "released guards are still renewed");
}

#[test]
fn every_public_call_returns_in_bounded_time_while_redis_is_down() {
    let mut server = RedisServer::start();
    let client = short_timeouts(server.builder()).build().unwrap();
    let guards = (client.lock("a").unwrap().lock().unwrap(), client.lock("b").unwrap().lock().unwrap());
    server.stop();
    every_call_fails_in_time(&client, guards, call_bound());
}

#[test]
fn every_public_call_returns_in_bounded_time_while_redis_hangs() {
    let server = RedisServer::start();
    let client = short_timeouts(server.builder()).pool_max_size(4).build().unwrap();
    let guards = (client.lock("a").unwrap().lock().unwrap(), client.lock("b").unwrap().lock().unwrap());
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(30_000).arg("ALL").query(&mut server.conn()).unwrap();
    every_call_fails_in_time(&client, guards, call_bound());
}

#[test]
fn the_same_client_works_again_after_a_restart() {
    let mut server = RedisServer::start();
    let client =
        short_timeouts(server.builder()).watchdog_timeout(Duration::from_millis(300)).build().unwrap();
    let lock = client.lock("restart").unwrap();
    lock.lock().unwrap().unlock().unwrap();

    server.restart();
    // Connections from before the restart may fail once each; then the
    // client must work again, without being rebuilt.
    let start = Instant::now();
    let mut failures = 0;
    let mut working = false;
    for _ in 0..50 {
        match lock.try_lock() {
            Ok(Some(guard)) => {
                guard.unlock().unwrap();
                working = true;
                break;
            }
            Ok(None) => panic!("nobody holds the lock on the fresh server"),
            Err(e) => {
                assert!(e.is_redis_error(), "{e:?}");
                failures += 1;
            }
        }
        if start.elapsed() > 10 * SECOND {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(working, "the client did not recover after the restart ({failures} failures)");
    assert!(failures <= 16, "{failures} failed calls after the restart");
    eprintln!("calls failed after the restart: {failures}");

    for _ in 0..10 {
        lock.lock().unwrap().unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
    }

    // The watchdog renews again.
    let guard = lock.lock().unwrap();
    std::thread::sleep(Duration::from_millis(1_000));
    assert!(exists(&mut server.conn(), "restart"), "not renewed after the restart");
    assert!(!guard.is_lost());
    guard.unlock().unwrap();

    // The pub/sub connection was re-established: a waiter is woken promptly.
    let other = server.client();
    let held = other.lock("restart").unwrap().lock().unwrap();
    let waiting = lock.clone();
    let waiter =
        spawn(move || waiting.try_lock_for(Duration::from_secs(25)).unwrap().map(|g| g.unlock().is_ok()));
    wait_subscribed(&client, 1);
    assert!(
        eventually(5 * SECOND, || common::numsub(&mut server.conn(), "redisson_lock__channel:{restart}")
            == 1),
        "the client never resubscribed after the restart"
    );
    let released_at = Instant::now();
    held.unlock().unwrap();
    assert_eq!(recv_within(&waiter, 30 * SECOND, "waiter"), Some(true));
    assert!(released_at.elapsed() < 3 * SECOND, "the waiter was not woken after the restart");
}

#[test]
fn a_hold_across_a_restart_is_reported_lost() {
    let mut server = RedisServer::start();
    let client =
        short_timeouts(server.builder()).watchdog_timeout(Duration::from_millis(300)).build().unwrap();
    let guard = client.lock("amnesia").unwrap().lock().unwrap();
    server.restart(); // empty: the lock is gone
    assert!(eventually(5 * SECOND, || guard.is_lost()), "the hold never reported itself lost");
    let err = guard.unlock().unwrap_err();
    assert!(err.is_lock_lost() || err.is_redis_error(), "{err:?}");
}

/// SPEC: a holder is told of a restart within a round trip of Redis being
/// back, not at its lease deadline. With the default 30 s watchdog the next
/// renewal would be up to 10 s away and the lease deadline 30 s: the
/// replaced pub/sub connection makes the watchdog verify every hold at once.
#[test]
fn a_restart_tells_a_default_watchdog_holder_as_soon_as_redis_is_back() {
    let mut server = RedisServer::start();
    let client = server.client(); // the default 30 s watchdog
    let other = server.client();
    let guard = client.lock("restarted").unwrap().lock().unwrap();
    let lost = guard.lost_signal();
    server.restart(); // empty: the lock is gone
    let back = Instant::now();
    // Another owner gets in at once; the holder must not believe it still
    // holds the lock for long.
    let theirs = other.lock("restarted").unwrap().try_lock_for(5 * SECOND).unwrap();
    assert!(theirs.is_some(), "the lock was not free after the restart");
    let reason = lost.recv_timeout(5 * SECOND).expect("the holder was never told");
    let told = back.elapsed();
    // The watchdog's verification or the check after the resubscription of
    // the lock's channel, whichever comes first.
    assert!(matches!(reason, LostReason::RenewalRefused | LostReason::Gone), "{reason:?}");
    assert!(told < 2 * SECOND, "the holder was told {told:?} after Redis was back");
    assert!(guard.is_lost());
}

#[test]
fn shutdown_makes_waiters_return_shutdown_and_refuses_new_acquisitions() {
    let server = RedisServer::start();
    let holder = server.client();
    let client = server.client();
    let guard = holder.lock("busy").unwrap().lock().unwrap();
    let mine = client.lock("mine").unwrap().lock().unwrap();
    let waiters = start_three_waiters(&client, "busy");

    let shutdown_at = Instant::now();
    client.shutdown();
    assert!(client.is_shutdown());
    for (i, waiter) in waiters.iter().enumerate() {
        let (outcome, _) = recv_within(waiter, 10 * SECOND, &format!("waiter {i}"));
        match outcome {
            Err(e) if e.is_shutdown() => {}
            other => panic!("waiter {i}: expected Shutdown, got {other:?}"),
        }
    }
    assert!(shutdown_at.elapsed() < 2 * SECOND, "waiters took {:?} to return", shutdown_at.elapsed());

    let lock = client.lock("busy").unwrap();
    let free = client.lock("free").unwrap();
    for (what, result) in [
        ("lock", lock.lock().map(drop)),
        ("try_lock", lock.try_lock().map(drop)),
        ("try_lock_for", lock.try_lock_for(SECOND).map(drop)),
        ("try_lock_until", lock.try_lock_until(Instant::now() + SECOND).map(drop)),
        ("lock a free lock", free.lock().map(drop)),
        ("try_lock a free lock", free.try_lock().map(drop)),
    ] {
        assert!(result.as_ref().is_err_and(Error::is_shutdown), "{what}: {result:?}");
    }
    assert!(!exists(&mut server.conn(), "free"));

    // Idempotent, from any clone.
    client.clone().shutdown();
    assert!(client.clone().is_shutdown());

    // A guard alive across the shutdown still releases its lock.
    assert!(exists(&mut server.conn(), "mine"));
    mine.unlock().unwrap();
    assert!(!exists(&mut server.conn(), "mine"));
    guard.unlock().unwrap();
}

/// A guard does not keep its client running: once the user drops every
/// `Client` and `Lock`, renewal stops and the client's threads and
/// connections close, while the guard can still release.
#[test]
fn dropping_the_last_client_and_lock_stops_the_client_even_with_a_live_guard() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let baseline = info_field(&mut con, "clients", "connected_clients");

    // A lease far longer than the test, however loaded the machine: the
    // guard must still be live when checked (with 3 s, the waits for the
    // connection counts under load outlasted it once, and the guard read
    // as lost by expiry).
    let client = server.builder().watchdog_timeout(Duration::from_secs(60)).build().unwrap();
    let lock = client.lock("kept").unwrap();
    let guard = lock.lock().unwrap();
    assert!(
        eventually(5 * SECOND, || info_field(&mut con, "clients", "connected_clients") >= baseline + 2),
        "expected a command connection and a pub/sub connection"
    );

    drop(lock);
    drop(client);
    // The pool and the pub/sub connection close at once; the lock is held
    // for the rest of its lease, no longer renewed.
    assert!(
        eventually(5 * SECOND, || info_field(&mut con, "clients", "connected_clients") == baseline),
        "the client's connections outlived its last handle: {} connected, {baseline} before",
        info_field(&mut con, "clients", "connected_clients")
    );
    assert!(exists(&mut con, "kept"));
    assert!(!guard.is_lost());
    // The guard still releases, on a connection of its own.
    guard.unlock().unwrap();
    assert!(!exists(&mut con, "kept"));
    assert!(
        eventually(5 * SECOND, || info_field(&mut con, "clients", "connected_clients") == baseline),
        "the release's own connection stayed open"
    );
}

/// A leaked guard (`mem::forget`) is unreachable: it must not renew its lock
/// and keep the client's threads and connections alive forever once every
/// handle the user can reach is gone.
#[test]
fn a_leaked_guard_stops_being_renewed_when_its_client_is_dropped() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let baseline = info_field(&mut con, "clients", "connected_clients");
    let client = server.builder().watchdog_timeout(Duration::from_millis(300)).build().unwrap();
    let lock = client.lock("leaked").unwrap();
    std::mem::forget(lock.lock().unwrap());
    // While the client lives, the leaked hold is renewed, like Redisson's.
    std::thread::sleep(Duration::from_millis(700));
    assert!(exists(&mut con, "leaked"), "renewal stopped while the client was alive");
    drop(lock);
    drop(client);
    assert!(
        eventually(5 * SECOND, || !exists(&mut con, "leaked")),
        "the leaked lock was still renewed after its client was dropped"
    );
    assert!(
        eventually(5 * SECOND, || info_field(&mut con, "clients", "connected_clients") == baseline),
        "a leaked guard kept the client's connections open"
    );
}

#[test]
fn dropping_many_guards_with_redis_down_does_not_wait_a_timeout_each() {
    // Without the client noticing that Redis is unreachable, each of these
    // releases would wait out a connect timeout: 60 x 300 ms = 18 s.
    const GUARDS: usize = 60;
    let mut server = RedisServer::start();
    let client = server.builder().connect_timeout(CONNECT).command_timeout(COMMAND).build().unwrap();
    let locks: Vec<_> = (0..GUARDS).map(|i| client.lock(&format!("many-down:{i}")).unwrap()).collect();
    let guards: Vec<_> = locks.iter().map(|l| l.lock().unwrap()).collect();
    server.stop();
    let started = Instant::now();
    let failed = guards.into_iter().map(|g| g.unlock()).filter(|r| r.is_err()).count();
    let took = started.elapsed();
    assert_eq!(failed, GUARDS, "a release succeeded with Redis down");
    assert!(took <= 4 * (CONNECT + COMMAND) + 2 * SECOND, "{GUARDS} releases took {took:?}");
    // Calls fail fast only for a connect timeout after a failed connect: a
    // restarted Redis is used again.
    server.restart();
    assert!(
        common::eventually(10 * SECOND, || locks[0].try_lock().is_ok_and(|g| g.is_some())),
        "the client did not recover after the restart"
    );
}
