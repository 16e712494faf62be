//! Barging between clients (issue 24, item 3; ADR 48): within the barging
//! window a release leaves the lock for the releasing client to take back,
//! and once the first queued client has waited the window it is handed the
//! lock; with a zero window every release hands the lock over, as before.
//! The script-level contract (the front client woken and left in place,
//! nothing on the unlock channel, no barging with a Redisson waiter
//! listening) is `scripts::a_release_within_the_barging_window_...`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, eventually, recv_within, spawn};

const SECOND: Duration = Duration::from_secs(1);

/// The number of clients queued in Redis for `name`.
fn queued(server: &RedisServer, name: &str) -> usize {
    redis::cmd("ZCARD").arg(format!("keyholder_lock_queue:{{{name}}}")).query(&mut server.conn()).unwrap()
}

/// A thread re-locks in a tight loop for 2 s while another client waits: the
/// waiter is handed the lock about one window after it queued, however
/// often the holder takes the lock back meanwhile (no starvation).
#[test]
fn a_waiter_gets_the_lock_about_a_window_after_it_queued_however_often_the_holder_relocks() {
    const WINDOW: Duration = Duration::from_millis(50);
    let server = RedisServer::start();
    let builder = || server.builder().barging_window(WINDOW);
    let (looper, waiter) = (builder().build().unwrap(), builder().build().unwrap());
    let (lock, stop) = (looper.lock("busy").unwrap(), Arc::new(AtomicBool::new(false)));
    let relocks = Arc::new(AtomicU64::new(0));
    let looping = {
        let (stop, relocks) = (Arc::clone(&stop), Arc::clone(&relocks));
        spawn(move || {
            let started = Instant::now();
            while !stop.load(Ordering::Acquire) && started.elapsed() < 2 * SECOND {
                let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("the looper never got the lock");
                relocks.fetch_add(1, Ordering::Relaxed);
                guard.unlock().unwrap();
            }
        })
    };
    assert!(eventually(5 * SECOND, || relocks.load(Ordering::Relaxed) >= 20), "the looper never ran");
    let lock = waiter.lock("busy").unwrap();
    let waited = spawn(move || {
        let asked = Instant::now();
        let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("the waiter starved");
        let waited = asked.elapsed();
        guard.unlock().unwrap();
        waited
    });
    let waited = recv_within(&waited, 15 * SECOND, "waiter");
    stop.store(true, Ordering::Release);
    recv_within(&looping, 15 * SECOND, "looper");
    // About a window and a round trip; generous for a loaded machine.
    let bound = 10 * WINDOW + Duration::from_millis(200);
    assert!(waited < bound, "the waiter waited {waited:?} (bound {bound:?})");
}

/// With a zero window every release hands the lock to the queued client:
/// the releasing thread, locking again at once, gets it only after the
/// waiter released it.
#[test]
fn with_a_zero_window_a_release_always_hands_the_lock_to_the_queued_client() {
    let server = RedisServer::start();
    let builder = || server.builder().barging_window(Duration::ZERO);
    let (holder, waiter) = (builder().build().unwrap(), builder().build().unwrap());
    let lock = holder.lock("fair-turn").unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for round in 0..5 {
        let guard = lock.lock().unwrap();
        let waiting = {
            let (lock, order) = (waiter.lock("fair-turn").unwrap(), Arc::clone(&order));
            spawn(move || {
                let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("never got the lock");
                order.lock().unwrap().push("waiter");
                guard.unlock().unwrap();
            })
        };
        assert!(eventually(5 * SECOND, || queued(&server, "fair-turn") == 1), "round {round}: never queued");
        guard.unlock().unwrap();
        let again = lock.try_lock_for(10 * SECOND).unwrap().expect("the holder never got it back");
        order.lock().unwrap().push("holder");
        again.unlock().unwrap();
        recv_within(&waiting, 15 * SECOND, "waiter");
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order, ["waiter", "holder"].repeat(5), "a release did not hand the lock over");
}

/// Within the window, the releasing client takes the lock back while the
/// queued client stays queued. Counted, not timed: a holder re-locking at
/// once after each release (with its 2 ms head start, see
/// `lua/lock/release.lua`, "Barging") gets the lock back, again and again,
/// while a client queued for it (a window far longer than the test) waits;
/// with a zero window the first release hands it to the waiter (above).
/// The waiter, woken by each release, may still win a race for the free
/// lock when the holder is slow to come back (a loaded machine): it is then
/// the waiter's, early, which is allowed.
#[test]
fn within_the_window_the_releasing_client_takes_the_lock_back() {
    let server = RedisServer::start();
    let builder = || server.builder().barging_window(Duration::from_secs(60));
    let (holder, waiter) = (builder().build().unwrap(), builder().build().unwrap());
    let lock = holder.lock("barged").unwrap();
    let mut guard = lock.lock().unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let waiting = {
        let (lock, got) = (waiter.lock("barged").unwrap(), Arc::clone(&got));
        spawn(move || {
            let guard = lock.try_lock_for(30 * SECOND).unwrap().expect("never got the lock");
            got.fetch_add(1, Ordering::Relaxed);
            guard.unlock().unwrap();
        })
    };
    assert!(eventually(5 * SECOND, || queued(&server, "barged") == 1), "never queued");
    // Re-locks that found the waiter still waiting: each was a barge.
    let mut barged = 0;
    for _ in 0..50 {
        guard.unlock().unwrap();
        guard = lock.try_lock_for(30 * SECOND).unwrap().expect("the holder never got it back");
        if got.load(Ordering::Relaxed) > 0 {
            break;
        }
        barged += 1;
    }
    assert!(barged >= 2, "the waiter got the lock after {barged} barging releases");
    guard.unlock().unwrap();
    recv_within(&waiting, 30 * SECOND, "waiter");
}

/// A thread that takes `lock` (waiting up to 30 s), releases it, and
/// answers when it got it.
fn taker(lock: keyholder::Lock) -> std::sync::mpsc::Receiver<Instant> {
    spawn(move || {
        let guard = lock.try_lock_for(30 * SECOND).unwrap().expect("never got the lock");
        let got = Instant::now();
        guard.unlock().unwrap();
        got
    })
}

/// A barging release wakes nobody: the releasing client owes the queue's
/// front client a wake once its head start ends (`wait/owed.rs`). A
/// releasing client that does not take the lock back pays it, so the queued
/// client gets the lock within about the head start, not at the end of the
/// released hold's lease (30 s here, past the bound).
#[test]
fn a_releasing_client_that_does_not_take_the_lock_back_wakes_the_queued_client() {
    let server = RedisServer::start();
    let builder = || server.builder().barging_window(Duration::from_secs(60));
    let (holder, waiter) = (builder().build().unwrap(), builder().build().unwrap());
    for round in 0..3 {
        let guard = holder.lock("owed").unwrap().lock().unwrap();
        let waiting = taker(waiter.lock("owed").unwrap());
        assert!(eventually(5 * SECOND, || queued(&server, "owed") == 1), "round {round}: never queued");
        let released = Instant::now();
        guard.unlock().unwrap();
        let got = recv_within(&waiting, 30 * SECOND, "waiter");
        let waited = got.saturating_duration_since(released);
        assert!(
            waited < 5 * SECOND,
            "round {round}: the queued client got the lock {waited:?} after the release"
        );
    }
}

/// A client shut down right after a barging release pays the wake it owes
/// before its connections close: the queued client is not left to the
/// released hold's lease.
#[test]
fn a_client_shut_down_after_a_barging_release_wakes_the_queued_client() {
    let server = RedisServer::start();
    let builder = || server.builder().barging_window(Duration::from_secs(60));
    let (holder, waiter) = (builder().build().unwrap(), builder().build().unwrap());
    let guard = holder.lock("owed-shutdown").unwrap().lock().unwrap();
    let waiting = taker(waiter.lock("owed-shutdown").unwrap());
    assert!(eventually(5 * SECOND, || queued(&server, "owed-shutdown") == 1), "never queued");
    let released = Instant::now();
    guard.unlock().unwrap();
    holder.shutdown();
    let got = recv_within(&waiting, 30 * SECOND, "waiter");
    let waited = got.saturating_duration_since(released);
    assert!(waited < 5 * SECOND, "the queued client got the lock {waited:?} after the release");
}
