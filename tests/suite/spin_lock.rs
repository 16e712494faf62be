//! SpinLock: the reentrant lock without pub/sub, waiting by back-off.
//!
//! Children are this test binary run again (`common::child`): `child_*`
//! tests are child bodies and do nothing unless their variables are set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::{RedisServer, ServerExt, calls_of, command_calls, exists, hgetall, pttl};
use keyholder::{BackOff, Client, ErrorKind, Lease, LostReason};

const SECOND: Duration = Duration::from_secs(1);
const CHILD_URL: &str = "KEYHOLDER_TEST_SPIN_URL";

fn short_lease(server: &RedisServer) -> Client {
    server.builder().watchdog_timeout(Duration::from_millis(500)).build().unwrap()
}

fn published(con: &mut redis::Connection) -> i64 {
    calls_of(con, "publish") + calls_of(con, "spublish")
}

fn get(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("GET").arg(key).query::<Option<i64>>(con).unwrap().unwrap_or(0)
}

#[test]
fn acquires_with_the_rlock_layout_and_releases_on_drop_without_any_pubsub() {
    let server = RedisServer::start();
    let (client, other) = (server.client(), server.client());
    let mut con = server.conn();
    // Building a client probes pub/sub once; nothing after that may use it.
    let subscribes = |con: &mut redis::Connection| calls_of(con, "subscribe") + calls_of(con, "ssubscribe");
    let probes = subscribes(&mut con);
    let lock = client.spin_lock("spin").unwrap();
    {
        let guard = lock.lock().unwrap();
        let fields = hgetall(&mut con, "spin");
        assert_eq!(fields.get(guard.owner_id()).map(String::as_str), Some("1"));
        assert!(pttl(&mut con, "spin") > 25_000, "the watchdog lease");
        assert!(lock.is_locked().unwrap());
        assert!(lock.is_held_by_current_thread().unwrap());
        assert_eq!(client.watched_locks(), 1);
    }
    assert!(!exists(&mut con, "spin"));
    assert_eq!(client.watched_locks(), 0);
    // A contended round too: still nothing published or subscribed.
    let rival = other.spin_lock("spin").unwrap();
    let held = rival.lock().unwrap();
    assert!(lock.try_lock_for(Duration::from_millis(50)).unwrap().is_none());
    drop(held);
    lock.try_lock_for(5 * SECOND).unwrap().expect("free").unlock().unwrap();
    assert_eq!(published(&mut con), 0);
    assert_eq!(subscribes(&mut con), probes);
    assert_eq!(client.subscribed_channels(), 0);
}

#[test]
fn reentrant_per_thread() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.spin_lock("re").unwrap();
    let outer = lock.lock().unwrap();
    {
        let _inner = lock.try_lock().unwrap().expect("re-entered");
        assert_eq!(lock.hold_count().unwrap(), 2);
        // Another handle of the same client and name shares the hold.
        let _third = client.spin_lock("re").unwrap().try_lock().unwrap().expect("re-entered");
        assert_eq!(lock.hold_count().unwrap(), 3);
    }
    assert_eq!(lock.hold_count().unwrap(), 1);
    let other = lock.clone();
    assert!(thread::spawn(move || other.try_lock().unwrap().is_none()).join().unwrap());
    outer.unlock().unwrap();
    assert!(!exists(&mut server.conn(), "re"));
}

#[test]
fn a_waiter_gets_the_lock_after_the_release_by_retrying() {
    let server = RedisServer::start();
    let (holder, waiter) = (server.client(), server.client());
    let guard = holder.spin_lock("handover").unwrap().lock().unwrap();
    let lock = waiter.spin_lock("handover").unwrap();
    let begun = Instant::now();
    assert!(lock.try_lock_for(Duration::from_millis(200)).unwrap().is_none());
    assert!(begun.elapsed() >= Duration::from_millis(200));
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("taken after the release");
        guard.unlock().unwrap();
    });
    thread::sleep(Duration::from_millis(100));
    drop(guard);
    waiting.join().unwrap();
}

#[test]
fn the_back_off_spaces_the_attempts() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _held = server.client().spin_lock("slow").unwrap().lock().unwrap();
    let waiter = server.client();
    let constant = waiter.spin_lock("slow").unwrap().with_back_off(BackOff::constant()).unwrap();
    let before = calls_of(&mut con, "evalsha") + calls_of(&mut con, "eval");
    assert!(constant.try_lock_for(Duration::from_millis(640)).unwrap().is_none());
    let attempts = calls_of(&mut con, "evalsha") + calls_of(&mut con, "eval") - before;
    // One every 64 ms at most: about 11, never a busy loop.
    assert!((2..=13).contains(&attempts), "{attempts} attempts in 640 ms");
    let exponential = waiter.spin_lock("slow").unwrap();
    assert_eq!(exponential.back_off(), BackOff::default());
    let before = calls_of(&mut con, "evalsha") + calls_of(&mut con, "eval");
    assert!(exponential.try_lock_for(Duration::from_millis(640)).unwrap().is_none());
    let attempts = calls_of(&mut con, "evalsha") + calls_of(&mut con, "eval") - before;
    // 1, 2, 4, ... 128 ms: at most about 12 tries in 640 ms.
    assert!((5..=16).contains(&attempts), "{attempts} attempts in 640 ms");
}

#[test]
fn the_watchdog_renews_and_a_lost_hold_is_signalled() {
    let server = RedisServer::start();
    let client = short_lease(&server);
    let lock = client.spin_lock("renewed").unwrap();
    let guard = lock.lock().unwrap();
    let lost = guard.lost_signal();
    thread::sleep(Duration::from_millis(1_200));
    assert!(exists(&mut server.conn(), "renewed"), "not renewed past its 500 ms lease");
    assert!(!guard.is_lost());
    let _: i64 = redis::cmd("DEL").arg("renewed").query(&mut server.conn()).unwrap();
    let reason = lost.recv_timeout(10 * SECOND).expect("the loss is signalled");
    // Its removal alarm tells it (issue 35, item 4), or the renewal.
    assert!(
        matches!(reason, LostReason::Gone | LostReason::RenewalRefused | LostReason::LeaseExpired),
        "{reason:?}"
    );
    assert!(guard.is_lost());
    assert!(guard.unlock().unwrap_err().is_lock_lost());
    // The thread takes a new hold afterwards.
    lock.try_lock().unwrap().expect("free").unlock().unwrap();
}

#[test]
fn a_fixed_lease_expires_and_is_signalled() {
    let server = RedisServer::start();
    let client = server.client();
    let lock =
        client.spin_lock("fixed").unwrap().with_lease(Lease::Fixed(Duration::from_millis(300))).unwrap();
    let guard = lock.lock().unwrap();
    assert!(pttl(&mut server.conn(), "fixed") <= 300);
    let lost = guard.lost_signal();
    assert_eq!(lost.recv_timeout(10 * SECOND).unwrap(), LostReason::LeaseExpired);
    assert_eq!(client.watched_locks(), 0, "a fixed lease is not renewed");
    // The local deadline runs from the send, before the server's: once the
    // key is gone too, the release reports the loss.
    assert!(common::eventually(5 * SECOND, || !exists(&mut server.conn(), "fixed")));
    assert!(guard.unlock().unwrap_err().is_lock_lost());
}

#[test]
fn force_unlock_frees_any_holders_lock_without_publishing() {
    let server = RedisServer::start();
    let (holder, admin) = (server.client(), server.client());
    let guard = holder.spin_lock("forced").unwrap().lock().unwrap();
    let handle = admin.spin_lock("forced").unwrap();
    assert!(handle.force_unlock().unwrap());
    assert!(!handle.force_unlock().unwrap());
    assert!(!exists(&mut server.conn(), "forced"));
    let e = guard.unlock().unwrap_err();
    assert!(e.is_not_owner() || e.is_lock_lost(), "{e}");
    assert_eq!(published(&mut server.conn()), 0);
}

#[test]
fn a_spin_lock_and_a_pubsub_lock_on_one_name_exclude_each_other() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let spin = a.spin_lock("shared").unwrap().lock().unwrap();
    assert!(b.lock("shared").unwrap().try_lock().unwrap().is_none());
    drop(spin);
    let plain = b.lock("shared").unwrap().lock().unwrap();
    assert!(a.spin_lock("shared").unwrap().try_lock().unwrap().is_none());
    drop(plain);
}

#[test]
fn bad_input_is_a_typed_error_and_redis_is_untouched() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let before = command_calls(&mut con);
    assert_eq!(client.spin_lock("").unwrap_err().kind(), ErrorKind::InvalidArgument);
    let lock = client.spin_lock("bad").unwrap();
    for bad in [
        BackOff::Constant { delay: Duration::ZERO },
        BackOff::Exponential {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(1),
            multiplier: 2,
        },
        BackOff::Exponential {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(5),
            multiplier: 0,
        },
    ] {
        assert_eq!(lock.with_back_off(bad).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
    assert_eq!(lock.with_lease(Lease::Fixed(Duration::ZERO)).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(command_calls(&mut con), before);
    // A key of another type at the name is refused and left alone.
    let _: () = redis::cmd("SET").arg("bad").arg("v").query(&mut con).unwrap();
    assert!(lock.try_lock().unwrap_err().is_wrong_type());
    assert!(lock.force_unlock().unwrap_err().is_wrong_type());
    assert_eq!(redis::cmd("GET").arg("bad").query::<String>(&mut con).unwrap(), "v");
}

#[test]
fn several_clients_exclude_each_other_without_lost_updates() {
    let server = RedisServer::start();
    const CLIENTS: usize = 3;
    const THREADS: usize = 2;
    const ROUNDS: usize = 20;
    let start = Arc::new(Barrier::new(CLIENTS * THREADS));
    let mut workers = Vec::new();
    for _ in 0..CLIENTS {
        let client = server.client();
        for _ in 0..THREADS {
            let lock = client.spin_lock("counted").unwrap();
            let url = server.url();
            let start = Arc::clone(&start);
            workers.push(thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                start.wait();
                let mut done = 0;
                for _ in 0..ROUNDS {
                    let Some(guard) = lock.try_lock_for(20 * SECOND).unwrap() else { continue };
                    let v = get(&mut con, "counter");
                    thread::yield_now();
                    let _: () = redis::cmd("SET").arg("counter").arg(v + 1).query(&mut con).unwrap();
                    guard.unlock().unwrap();
                    done += 1;
                }
                done
            }));
        }
    }
    let total: i64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(total, (CLIENTS * THREADS * ROUNDS) as i64);
    assert_eq!(get(&mut server.conn(), "counter"), total, "lost updates");
}

/// Child: takes the spin lock `spin` (watchdog 500 ms), says `LOCKED`, and
/// holds it until killed.
#[test]
#[ignore = "a child-process mode, run by its parent test"]
fn child_spin_holder() {
    let Some(url) = child::child_env(CHILD_URL) else { return };
    let client = Client::builder(url).watchdog_timeout(Duration::from_millis(500)).build().unwrap();
    let _guard = client.spin_lock("spin").unwrap().lock().unwrap();
    child::say("LOCKED");
    let lines = child::stdin_lines();
    let _ = lines.recv_timeout(30 * SECOND);
    std::process::exit(3);
}

#[test]
fn a_killed_holders_spin_lock_frees_itself_within_its_lease() {
    let server = RedisServer::start();
    let mut holder = ChildProcess::spawn("spin_lock::child_spin_holder", &[(CHILD_URL, &server.url())]);
    holder.expect("LOCKED", 20 * SECOND);
    let client = server.client();
    let lock = client.spin_lock("spin").unwrap();
    thread::sleep(Duration::from_millis(1_200));
    assert!(lock.try_lock().unwrap().is_none(), "the live child's lock expired");
    holder.kill();
    let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("freed by the lease");
    drop(guard);
}
