//! Reentrancy: hold counts, and other threads and other clients blocked until
//! the count is back to zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use common::{RedisServer, ServerExt, exists, hgetall, recv_within, spawn, wait_subscribed};

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn nested_guards_count_up_and_down_and_the_last_deletes_the_key() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let lock = client.lock("nested").unwrap();
    let redis_count = |con: &mut redis::Connection, owner: &str| -> Option<String> {
        hgetall(con, "nested").get(owner).cloned()
    };

    let g1 = lock.lock().unwrap();
    let owner = g1.owner_id().to_owned();
    assert_eq!(lock.hold_count().unwrap(), 1);
    let g2 = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    let g3 = lock.try_lock().unwrap().expect("re-entry never waits");
    assert_eq!(lock.hold_count().unwrap(), 3);
    assert_eq!(redis_count(&mut con, &owner).as_deref(), Some("3"));
    assert_eq!(hgetall(&mut con, "nested").len(), 1, "re-entry must not add owners");
    assert_eq!(g2.owner_id(), owner);
    assert_eq!(g3.owner_id(), owner);
    assert_eq!(client.watched_locks(), 1, "one hold, renewed once, however deep");

    drop(g3);
    assert_eq!(lock.hold_count().unwrap(), 2);
    g2.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(exists(&mut con, "nested"));
    assert_eq!(client.watched_locks(), 1);
    drop(g1);
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(!exists(&mut con, "nested"), "the last release must delete the key");
    assert_eq!(client.watched_locks(), 0);
}

#[test]
fn reentry_through_other_handles_of_the_same_client_but_not_of_another_client() {
    let server = RedisServer::start();
    let client = server.client();
    let other_client = server.client();
    let lock = client.lock("handles").unwrap();
    let g1 = lock.lock().unwrap();

    // A clone and a fresh handle of the same client on
    // the same thread are the same owner.
    let g2 = lock.clone().try_lock().unwrap().expect("clone re-enters");
    let g3 = client.clone().lock("handles").unwrap().try_lock().unwrap().expect("new handle re-enters");
    assert_eq!(lock.hold_count().unwrap(), 3);

    // Another client on the same thread is another owner.
    let foreign = other_client.lock("handles").unwrap();
    assert!(foreign.try_lock().unwrap().is_none());
    assert_eq!(foreign.hold_count().unwrap(), 0);

    drop((g3, g2));
    assert_eq!(lock.hold_count().unwrap(), 1);
    drop(g1);
    assert!(foreign.try_lock().unwrap().is_some());
}

#[test]
fn another_thread_of_the_same_client_waits_for_the_last_guard() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("same-client").unwrap();
    let g1 = lock.lock().unwrap();
    let g2 = lock.lock().unwrap();

    // A one-shot try from another thread fails at once.
    let probe = lock.clone();
    let tried = spawn(move || probe.try_lock().unwrap().is_none());
    assert!(recv_within(&tried, 5 * SECOND, "try_lock"), "another thread took a held lock");

    // A blocking waiter gets it only after the last guard.
    let released = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = mpsc::channel();
    let (acquired_tx, acquired_rx) = mpsc::channel();
    let waiting = lock.clone();
    let seen_released = Arc::clone(&released);
    let waiter = spawn(move || {
        started_tx.send(()).unwrap();
        let guard = waiting.lock().unwrap();
        let after_release = seen_released.load(Ordering::SeqCst);
        let count = waiting.hold_count().unwrap();
        acquired_tx.send(()).unwrap();
        guard.unlock().unwrap();
        (after_release, count)
    });
    recv_within(&started_rx, 5 * SECOND, "waiter start");

    drop(g2);
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(
        acquired_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the waiter got the lock while a guard was still held"
    );

    released.store(true, Ordering::SeqCst);
    g1.unlock().unwrap();
    recv_within(&acquired_rx, 5 * SECOND, "waiter after the last release");
    let (after_release, count) = recv_within(&waiter, 5 * SECOND, "waiter");
    assert!(after_release, "the waiter acquired before the last release");
    assert_eq!(count, 1, "the waiter is a new owner with its own count");
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn another_client_waits_for_the_last_guard() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let lock = a.lock("cross-client").unwrap();
    let g1 = lock.lock().unwrap();
    let g2 = lock.lock().unwrap();
    let g3 = lock.lock().unwrap();

    let lock_b = b.lock("cross-client").unwrap();
    assert!(lock_b.try_lock().unwrap().is_none());

    let released = Arc::new(AtomicBool::new(false));
    let seen_released = Arc::clone(&released);
    let (acquired_tx, acquired_rx) = mpsc::channel();
    let waiter = spawn(move || {
        let guard = lock_b.lock().unwrap();
        acquired_tx.send(()).unwrap();
        let after_release = seen_released.load(Ordering::SeqCst);
        guard.unlock().unwrap();
        after_release
    });
    wait_subscribed(&b, 1);

    drop(g3);
    drop(g2);
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(
        acquired_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the other client got the lock while a guard was still held"
    );
    released.store(true, Ordering::SeqCst);
    drop(g1);
    recv_within(&acquired_rx, 5 * SECOND, "other client after the last release");
    assert!(recv_within(&waiter, 5 * SECOND, "waiter"));
}

#[test]
fn guards_dropped_out_of_order_still_release_exactly_once_each() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let mut con = server.conn();
    let lock = a.lock("order").unwrap();
    let other = b.lock("order").unwrap();

    let g1 = lock.lock().unwrap();
    let g2 = lock.lock().unwrap();
    let g3 = lock.lock().unwrap();
    drop(g1);
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(!g2.is_lost() && !g3.is_lost());
    assert!(other.try_lock().unwrap().is_none());
    g3.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(other.try_lock().unwrap().is_none());
    assert!(!g2.is_lost());
    g2.unlock().unwrap();
    assert!(!exists(&mut con, "order"));
    assert_eq!(a.watched_locks(), 0);

    let taken = other.try_lock().unwrap();
    assert!(taken.is_some(), "the lock was not free after the last guard");
}

#[test]
fn reentry_after_a_full_release_starts_a_new_hold() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("again").unwrap();
    for round in 0..5 {
        let g1 = lock.lock().unwrap();
        let g2 = lock.lock().unwrap();
        assert_eq!(lock.hold_count().unwrap(), 2, "round {round}");
        drop(g2);
        g1.unlock().unwrap();
        assert_eq!(lock.hold_count().unwrap(), 0, "round {round}");
        assert!(!lock.is_locked().unwrap());
    }
    assert_eq!(client.watched_locks(), 0);
}

/// A fenced handle re-entering a hold taken through a plain handle gets a
/// token (minted then, and shared by the hold's guards); a fenced re-entry
/// of a fenced hold keeps the hold's token.
#[test]
fn a_fenced_reentry_always_has_a_token() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let plain = client.lock("fenced-reentry").unwrap();
    let fenced = plain.fenced();

    let outer = plain.lock().unwrap();
    assert_eq!(outer.fencing_token(), None);
    let inner = fenced.lock().unwrap();
    let token = inner.fencing_token().expect("a fenced re-entry has a token");
    assert_eq!(outer.fencing_token(), Some(token), "the hold's guards share its token");
    assert_eq!(fenced.last_fencing_token().unwrap(), Some(token));
    let again = fenced.lock().unwrap();
    assert_eq!(again.fencing_token(), Some(token), "a later re-entry keeps the hold's token");
    assert_eq!(fenced.last_fencing_token().unwrap(), Some(token), "a token was minted twice for one hold");
    drop((again, inner, outer));
    assert!(!exists(&mut con, "fenced-reentry"));

    let next = fenced.lock().unwrap();
    assert!(next.fencing_token().unwrap() > token);
}

/// A re-entry with a short fixed lease never cuts the outer hold's lease
/// short: the key keeps the longer TTL.
#[test]
fn a_reentry_with_a_shorter_lease_keeps_the_longer_one() {
    let server = RedisServer::start();
    let client = server.client();
    let other = server.client();
    let lock = client.lock("long-outer").unwrap();
    let outer = lock.lock().unwrap();
    let inner = lock.with_lease(keyholder::Lease::Fixed(Duration::from_millis(100))).unwrap().lock().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(other.lock("long-outer").unwrap().try_lock().unwrap().is_none(), "another owner got in");
    assert!(!outer.is_lost() && !inner.is_lost());
    let lease = lock.remaining_lease().unwrap().unwrap();
    assert!(lease > Duration::from_secs(20), "the outer lease was shortened to {lease:?}");
    inner.unlock().unwrap();
    outer.unlock().unwrap();
}
