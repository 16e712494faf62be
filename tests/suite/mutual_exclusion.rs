//! Mutual exclusion under contention: many threads across several clients
//! increment a shared non-atomic counter in Redis (GET, then SET) under the
//! lock; no update may be lost and no two critical sections may overlap.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{RedisServer, ServerExt, recv_within, spawn};
use keyholder::Client;

/// Shared bookkeeping of the critical section, on this side of the wire.
#[derive(Default)]
struct Section {
    inside: AtomicBool,
    overlaps: AtomicUsize,
    entries: AtomicUsize,
}

impl Section {
    fn enter(&self) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.entries.fetch_add(1, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.inside.store(false, Ordering::SeqCst);
    }
}

/// One read-modify-write of the counter, deliberately non-atomic.
fn increment(con: &mut redis::Connection, key: &str) {
    let value: Option<u64> = redis::cmd("GET").arg(key).query(con).unwrap();
    std::thread::yield_now(); // widen the window a lost update would need
    let _: () = redis::cmd("SET").arg(key).arg(value.unwrap_or(0) + 1).query(con).unwrap();
}

/// Runs `clients` x `threads` x `iterations` guarded increments; `reenter`
/// takes the lock a second time inside the section.
fn contend(clients: usize, threads: usize, iterations: usize, reenter: bool) {
    let server = RedisServer::start();
    let clients: Vec<Client> = (0..clients).map(|_| server.client()).collect();
    let section = Arc::new(Section::default());
    let barrier = Arc::new(Barrier::new(clients.len() * threads));
    let mut workers = Vec::new();
    for client in &clients {
        for _ in 0..threads {
            let lock = client.lock("counter-lock").unwrap();
            let mut con = server.conn();
            let section = Arc::clone(&section);
            let barrier = Arc::clone(&barrier);
            workers.push(spawn(move || {
                barrier.wait();
                for i in 0..iterations {
                    let guard = lock
                        .try_lock_for(Duration::from_secs(20))
                        .unwrap()
                        .unwrap_or_else(|| panic!("iteration {i}: no lock within 20 s"));
                    let inner = reenter.then(|| lock.try_lock().unwrap().expect("re-entry never waits"));
                    section.enter();
                    increment(&mut con, "counter");
                    section.leave();
                    drop(inner);
                    guard.unlock().unwrap();
                }
            }));
        }
    }
    for (i, worker) in workers.iter().enumerate() {
        recv_within(worker, Duration::from_secs(60), &format!("worker {i}"));
    }

    let total = clients.len() * threads * iterations;
    let counter: u64 = redis::cmd("GET").arg("counter").query(&mut server.conn()).unwrap();
    assert_eq!(section.overlaps.load(Ordering::SeqCst), 0, "critical sections overlapped");
    assert_eq!(section.entries.load(Ordering::SeqCst), total);
    assert_eq!(counter, u64::try_from(total).unwrap(), "lost updates: {counter} of {total}");
    let still_locked: bool = redis::cmd("EXISTS").arg("counter-lock").query(&mut server.conn()).unwrap();
    assert!(!still_locked, "the lock outlived its last holder");
    for client in &clients {
        assert_eq!(client.watched_locks(), 0);
        assert_eq!(client.subscribed_channels(), 0);
    }
}

#[test]
fn many_threads_across_clients_lose_no_update() {
    contend(4, 4, 50, false);
}

#[test]
fn reentrant_sections_lose_no_update() {
    contend(2, 3, 30, true);
}
