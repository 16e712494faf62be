//! The semaphores and the count-down latch on a real Redis Cluster (the
//! shared one of `testkit/src/cluster.rs`): calls routed to the slot's
//! primary, waiters woken through shard channels on every shard, expirable
//! permits renewed there, and latch names whose Redisson channel would
//! leave the key's slot refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use keyholder::{Client, ErrorKind};
use keyholder_testkit::cluster::RedisCluster;

const SECOND: Duration = Duration::from_secs(1);

fn client(cluster: &RedisCluster) -> Client {
    Client::builder_cluster(cluster.seed_urls()).build().expect("cluster client")
}

/// A name whose slot `cluster` serves on `primary`, made from `prefix`.
fn name_on(cluster: &RedisCluster, primary: u16, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}:{i}"))
        .find(|name| cluster.primary_of_key(name) == primary)
        .expect("some name lands on every primary")
}

#[test]
fn a_semaphore_waiter_on_each_shard_is_woken_by_a_release_of_another_client() {
    let cluster = RedisCluster::shared();
    let (holder, waiter) = (client(cluster), client(cluster));
    for primary in cluster.primaries() {
        let name = name_on(cluster, primary, "sem-wake");
        let sem = holder.semaphore(&name).unwrap();
        assert!(sem.try_set_permits(1).unwrap());
        let held = sem.try_acquire(1).unwrap().unwrap();
        let mut con = cluster.conn_for_key(&name);
        let value: String = redis::cmd("GET").arg(&name).query(&mut con).unwrap();
        assert_eq!(value, "0", "the count lives on the slot's primary");

        let waiting = waiter.semaphore(&name).unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(waiting.try_acquire_for(1, 60 * SECOND).unwrap().map(|p| p.forget()));
        });
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "acquired a held permit");
        drop(held);
        // Well within the 30 s re-check: the shard message woke it.
        assert_eq!(rx.recv_timeout(15 * SECOND).unwrap(), Some(1), "on primary {primary}");
    }
}

#[test]
fn expirable_permits_are_renewed_and_given_back_on_every_shard() {
    let cluster = RedisCluster::shared();
    let client = Client::builder_cluster(cluster.seed_urls()).watchdog_timeout(SECOND).build().unwrap();
    let mut guards = Vec::new();
    let mut names = Vec::new();
    for primary in cluster.primaries() {
        let name = name_on(cluster, primary, "pes");
        let pes = client.permit_expirable_semaphore(&name).unwrap();
        assert!(pes.try_set_permits(1).unwrap());
        guards.push(pes.try_acquire(1).unwrap().unwrap());
        names.push(name);
    }
    thread::sleep(3 * SECOND); // three leases
    for (guard, name) in guards.iter().zip(&names) {
        assert!(!guard.is_lost(), "{name}: {:?}", guard.lost_reason());
        let mut con = cluster.conn_for_key(name);
        let held: i64 = redis::cmd("ZCARD").arg(format!("{{{name}}}:timeout")).query(&mut con).unwrap();
        assert_eq!(held, 1);
    }
    for guard in guards {
        guard.release().unwrap();
    }
    for name in &names {
        assert_eq!(client.permit_expirable_semaphore(name).unwrap().available_permits().unwrap(), 1);
    }
}

#[test]
fn latch_waiters_wake_on_every_shard_and_braced_names_are_refused() {
    let cluster = RedisCluster::shared();
    let (setter, waiter) = (client(cluster), client(cluster));
    for primary in cluster.primaries() {
        let name = name_on(cluster, primary, "latch");
        let latch = setter.count_down_latch(&name).unwrap();
        assert!(latch.try_set_count(1).unwrap());
        let waiting = waiter.count_down_latch(&name).unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(waiting.await_for(60 * SECOND).unwrap());
        });
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "opened too early");
        assert_eq!(latch.count_down().unwrap(), 0);
        assert!(rx.recv_timeout(15 * SECOND).unwrap(), "on primary {primary}");
    }
    let err = setter.count_down_latch("{user}:1").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    // The semaphores keep every key in the tag's slot: braced names work.
    let sem = setter.semaphore("{user}:1").unwrap();
    assert!(sem.try_set_permits(1).unwrap());
    assert!(sem.try_acquire(1).unwrap().is_some());
}
