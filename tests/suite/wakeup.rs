//! Waiting without polling: woken by the unlock message, no lost wake-ups,
//! one subscription per lock name per client, and recovery when the pub/sub
//! connection is killed.
//!
//! Every holder here has the default 30 s watchdog lease, so a waiter that
//! missed its wake-up would wait for the lease: the bounds below are far
//! shorter than that.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{
    RedisServer, ServerExt, channel_of, numsub, pubsub_connections, recv_within, spawn, timed, wait_numsub,
    wait_subscribed,
};
use keyholder::Client;

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn a_waiter_is_woken_by_unlock_long_before_the_lease_ends() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let guard = a.lock("wake").unwrap().lock().unwrap();
    let lease = a.lock("wake").unwrap().remaining_lease().unwrap().unwrap();
    assert!(lease > Duration::from_secs(25), "the holder's lease is {lease:?}");

    let lock_b = b.lock("wake").unwrap();
    let waiter = spawn(move || {
        let (guard, took) = timed(|| lock_b.lock().unwrap());
        let acquired_at = Instant::now();
        guard.unlock().unwrap();
        (acquired_at, took)
    });
    wait_subscribed(&b, 1);
    std::thread::sleep(Duration::from_millis(200)); // the holder works a little
    let released_at = Instant::now();
    guard.unlock().unwrap();

    let (acquired_at, waited) = recv_within(&waiter, 10 * SECOND, "waiter");
    let latency = acquired_at.saturating_duration_since(released_at);
    assert!(latency < 2 * SECOND, "woken {latency:?} after the release");
    assert!(waited < 3 * SECOND, "waited {waited:?} in all");
}

#[test]
fn a_foreign_unlock_message_wakes_a_waiter() {
    // A Java Redisson service holds the lock: its hash, its TTL. It releases
    // by deleting the key and publishing "0" (or "1" for all waiters).
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    for message in ["0", "1"] {
        let java_owner = "6f1c3c1e-0000-4000-8000-00000000java:1";
        let _: () = redis::pipe()
            .cmd("HSET")
            .arg("shared")
            .arg(java_owner)
            .arg(1)
            .ignore()
            .cmd("PEXPIRE")
            .arg("shared")
            .arg(30_000)
            .ignore()
            .query(&mut con)
            .unwrap();
        let lock = client.lock("shared").unwrap();
        assert!(lock.try_lock().unwrap().is_none());
        let waiter = spawn(move || timed(|| lock.lock().unwrap().unlock().is_ok()));
        wait_subscribed(&client, 1);

        // A message of another kind is not an unlock.
        let _: i64 = redis::cmd("PUBLISH").arg(channel_of("shared")).arg("garbage").query(&mut con).unwrap();
        let _: i64 = redis::cmd("DEL").arg("shared").query(&mut con).unwrap();
        let released_at = Instant::now();
        let _: i64 = redis::cmd("PUBLISH").arg(channel_of("shared")).arg(message).query(&mut con).unwrap();
        let (unlocked, _) = recv_within(&waiter, 10 * SECOND, "waiter");
        assert!(unlocked);
        assert!(released_at.elapsed() < 3 * SECOND, "message {message:?} did not wake the waiter");
    }
}

#[test]
fn no_lost_wakeups_over_many_short_cycles_between_two_clients() {
    const CYCLES: usize = 100;
    const THREADS_PER_CLIENT: usize = 2;
    let server = RedisServer::start();
    let clients = [server.client(), server.client()];
    let mut workers = Vec::new();
    for client in &clients {
        for _ in 0..THREADS_PER_CLIENT {
            let lock = client.lock("cycles").unwrap();
            workers.push(spawn(move || {
                let mut worst = Duration::ZERO;
                for cycle in 0..CYCLES {
                    let (guard, waited) = timed(|| lock.try_lock_for(10 * SECOND).unwrap());
                    let guard = guard.unwrap_or_else(|| panic!("cycle {cycle}: no lock within 10 s"));
                    worst = worst.max(waited);
                    guard.unlock().unwrap();
                }
                worst
            }));
        }
    }
    let mut worst = Duration::ZERO;
    for (i, worker) in workers.iter().enumerate() {
        worst = worst.max(recv_within(worker, 60 * SECOND, &format!("worker {i}")));
    }
    eprintln!("worst single wait: {worst:?}");
    // A lost wake-up costs the holder's 30 s lease; starvation shows too.
    assert!(worst < 3 * SECOND, "the worst single wait was {worst:?}");
    for client in &clients {
        assert_eq!(client.subscribed_channels(), 0);
        assert_eq!(client.watched_locks(), 0);
    }
}

/// Starts `n` threads of `client` waiting (at most `wait`) for `name`; each
/// sends on `started` just before it waits and returns whether it got the
/// lock (and released it cleanly).
fn start_waiters(
    client: &Client,
    name: &str,
    n: usize,
    wait: Duration,
    started: &mpsc::Sender<()>,
) -> Vec<mpsc::Receiver<Option<bool>>> {
    (0..n)
        .map(|_| {
            let lock = client.lock(name).unwrap();
            let started = started.clone();
            spawn(move || {
                started.send(()).unwrap();
                lock.try_lock_for(wait).unwrap().map(|g| g.unlock().is_ok())
            })
        })
        .collect()
}

#[test]
fn one_subscription_per_lock_name_per_client() {
    let server = RedisServer::start();
    let holder = server.client();
    let (b, c) = (server.client(), server.client());
    let mut con = server.conn();
    let guard_x = holder.lock("x").unwrap().lock().unwrap();
    let guard_y = holder.lock("y").unwrap().lock().unwrap();

    let (started_tx, started_rx) = mpsc::channel();
    let mut waiters = start_waiters(&b, "x", 4, 20 * SECOND, &started_tx);
    waiters.extend(start_waiters(&b, "y", 2, 20 * SECOND, &started_tx));
    waiters.extend(start_waiters(&c, "x", 3, 20 * SECOND, &started_tx));
    for _ in 0..9 {
        recv_within(&started_rx, 5 * SECOND, "waiter start");
    }
    // Each client with waiters, and the holder's client (it listens for a
    // foreign unlock; `subscribed_channels` counts waiters' channels only).
    wait_numsub(&mut con, &channel_of("x"), 3);
    wait_numsub(&mut con, &channel_of("y"), 2);
    std::thread::sleep(Duration::from_millis(200)); // every thread is parked by now
    assert_eq!(numsub(&mut con, &channel_of("x")), 3, "one subscription per client with waiters on x");
    assert_eq!(numsub(&mut con, &channel_of("y")), 2);
    assert_eq!(b.subscribed_channels(), 2);
    assert_eq!(c.subscribed_channels(), 1);
    assert_eq!(holder.subscribed_channels(), 0);
    assert_eq!(pubsub_connections(&mut con), 3, "one pub/sub connection per client");

    drop(guard_x);
    drop(guard_y);
    for (i, waiter) in waiters.iter().enumerate() {
        assert_eq!(recv_within(waiter, 20 * SECOND, &format!("waiter {i}")), Some(true), "waiter {i}");
    }
    assert_eq!(b.subscribed_channels(), 0, "subscriptions outlived their waiters");
    assert_eq!(c.subscribed_channels(), 0);
    wait_numsub(&mut con, &channel_of("x"), 0);
    wait_numsub(&mut con, &channel_of("y"), 0);
}

#[test]
fn waiters_that_time_out_leave_no_subscription() {
    let server = RedisServer::start();
    let holder = server.client();
    let (b, c) = (server.client(), server.client());
    let mut con = server.conn();
    let guard = holder.lock("t").unwrap().lock().unwrap();

    // Only short waits: all time out.
    let (started_tx, started_rx) = mpsc::channel();
    let mut waiters = start_waiters(&b, "t", 3, Duration::from_millis(300), &started_tx);
    waiters.extend(start_waiters(&c, "t", 2, Duration::from_millis(300), &started_tx));
    for waiter in &waiters {
        assert_eq!(recv_within(waiter, 10 * SECOND, "short waiter"), None);
    }
    for _ in 0..5 {
        recv_within(&started_rx, SECOND, "waiter start");
    }
    assert_eq!(b.subscribed_channels(), 0);
    assert_eq!(c.subscribed_channels(), 0);
    wait_numsub(&mut con, &channel_of("t"), 1); // the holder's client alone

    // A short waiter leaving does not cancel a long one's subscription.
    let long = start_waiters(&b, "t", 1, 20 * SECOND, &started_tx);
    recv_within(&started_rx, 5 * SECOND, "long waiter start");
    wait_subscribed(&b, 1);
    let short = start_waiters(&b, "t", 2, Duration::from_millis(200), &started_tx);
    for waiter in &short {
        assert_eq!(recv_within(waiter, 10 * SECOND, "short waiter"), None);
    }
    wait_subscribed(&b, 1);
    wait_numsub(&mut con, &channel_of("t"), 2); // and the holder's client
    let released_at = Instant::now();
    drop(guard);
    assert_eq!(recv_within(&long[0], 10 * SECOND, "long waiter"), Some(true));
    assert!(released_at.elapsed() < 3 * SECOND, "the long waiter was not woken");
    assert_eq!(b.subscribed_channels(), 0);
    wait_numsub(&mut con, &channel_of("t"), 0);
}

/// Threads of two clients wait; their pub/sub connections are killed; if
/// `resubscribed_first`, the release waits for the resubscriptions, else it
/// follows the kill at once. Every waiter must still get the lock promptly.
fn pubsub_killed_while_waiting(resubscribed_first: bool) {
    let server = RedisServer::start();
    let holder = server.client();
    let (b, c) = (server.client(), server.client());
    let mut con = server.conn();
    let channel = channel_of("killed");
    let guard = holder.lock("killed").unwrap().lock().unwrap();

    let (started_tx, started_rx) = mpsc::channel();
    let mut waiters = start_waiters(&b, "killed", 3, 25 * SECOND, &started_tx);
    waiters.extend(start_waiters(&c, "killed", 3, 25 * SECOND, &started_tx));
    for _ in 0..6 {
        recv_within(&started_rx, 5 * SECOND, "waiter start");
    }
    // The two waiting clients, and the holder's client: it listens on the
    // channel of a lock it has held a while, for a foreign unlock.
    wait_numsub(&mut con, &channel, 3);

    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(&mut con).unwrap();
    assert_eq!(killed, 3, "expected the two waiting clients' and the holder's pub/sub connections");
    if resubscribed_first {
        wait_numsub(&mut con, &channel, 3);
    }
    let released_at = Instant::now();
    guard.unlock().unwrap();

    for (i, waiter) in waiters.iter().enumerate() {
        assert_eq!(recv_within(waiter, 25 * SECOND, &format!("waiter {i}")), Some(true), "waiter {i}");
    }
    let all_done = released_at.elapsed();
    assert!(all_done < 5 * SECOND, "six waiters took {all_done:?} after the release; the lease is 30 s");
    wait_numsub(&mut con, &channel, 0);

    // The recovered connections keep working.
    let guard = holder.lock("killed").unwrap().lock().unwrap();
    let lock_b = b.lock("killed").unwrap();
    let waiter = spawn(move || timed(|| lock_b.lock().unwrap().unlock().is_ok()));
    wait_subscribed(&b, 1);
    wait_numsub(&mut con, &channel, 2); // b's waiter and the holder's client
    let released_at = Instant::now();
    guard.unlock().unwrap();
    let (unlocked, _) = recv_within(&waiter, 10 * SECOND, "waiter after recovery");
    assert!(unlocked);
    assert!(released_at.elapsed() < 3 * SECOND);
}

#[test]
fn killing_the_pubsub_connection_while_threads_wait_costs_no_wakeup() {
    pubsub_killed_while_waiting(true);
}

#[test]
fn a_release_right_after_the_pubsub_connection_is_killed_still_wakes_waiters() {
    pubsub_killed_while_waiting(false);
}

#[test]
fn waiters_are_woken_whatever_the_name_looks_like() {
    // The channel a release publishes on and the one a waiter subscribes to
    // are derived separately (script argument, subscriber): they must agree
    // for names with braces, spaces, non-ASCII and the longest names.
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let long = "n".repeat(keyholder::MAX_NAME_LEN);
    for name in ["{user}:1", "a{b}c", "{", "}", "with space", "ключ:✓", long.as_str()] {
        let guard = a.lock(name).unwrap().lock().unwrap();
        let lock_b = b.lock(name).unwrap();
        assert!(lock_b.try_lock().unwrap().is_none(), "{name:?}");
        let waiter = spawn(move || lock_b.try_lock_for(20 * SECOND).unwrap().map(|g| g.unlock().is_ok()));
        wait_subscribed(&b, 1);
        let released_at = Instant::now();
        guard.unlock().unwrap();
        assert_eq!(recv_within(&waiter, 25 * SECOND, name), Some(true), "{name:?}");
        let latency = released_at.elapsed();
        assert!(latency < 3 * SECOND, "{name:?}: woken {latency:?} after the release (lease 30 s)");
        assert!(!a.lock(name).unwrap().is_locked().unwrap());
    }
}

/// `x` and `{x}` share Redisson's unlock channel, but not keyholder's
/// next-in-line marker: an overdue waiter on `x` does not hold up `{x}`.
#[test]
fn an_overdue_waiter_on_one_name_does_not_block_a_name_sharing_its_channel() {
    let server = RedisServer::start();
    let (holder, waiter, other) = (server.client(), server.client(), server.client());
    let _held = holder.lock("x").unwrap().lock().unwrap();
    let waiting = {
        let lock = waiter.lock("x").unwrap();
        spawn(move || lock.try_lock_for(3 * SECOND).unwrap().is_some())
    };
    wait_subscribed(&waiter, 1);
    std::thread::sleep(Duration::from_millis(100)); // well past twice the 10 ms window
    let tagged = other.lock("{x}").unwrap();
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let (guard, took) = timed(|| tagged.try_lock_for(2 * SECOND).unwrap());
        assert!(guard.is_some(), "a free {{x}} was not acquired");
        worst = worst.max(took);
    }
    assert!(worst < Duration::from_millis(500), "taking a free {{x}} took up to {worst:?}");
    assert!(!recv_within(&waiting, 5 * SECOND, "waiter on x"), "x was never free");
}
