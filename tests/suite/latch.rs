//! CountDownLatch against a real Redis: awaiting across clients, bounded
//! waits, deletion waking waiters, and bad input (counting down an open
//! latch, a zero count) refused with Redis untouched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, command_calls, exists, recv_within, spawn, wait_numsub};
use keyholder::ErrorKind;

const SECOND: Duration = Duration::from_secs(1);

fn channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

#[test]
fn waiters_in_other_clients_wake_when_the_count_reaches_zero() {
    let server = RedisServer::start();
    let setter = server.client();
    let latch = setter.count_down_latch("batch").unwrap();
    assert!(latch.try_set_count(3).unwrap());
    assert!(!latch.try_set_count(5).unwrap());
    assert_eq!(latch.count().unwrap(), 3);

    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let latch = server.client().count_down_latch("batch").unwrap();
            spawn(move || latch.await_for(60 * SECOND).unwrap())
        })
        .collect();
    let mut con = server.conn();
    wait_numsub(&mut con, &channel("batch"), 3);

    let workers: Vec<_> = (0..3)
        .map(|_| {
            let latch = server.client().count_down_latch("batch").unwrap();
            spawn(move || latch.count_down().unwrap())
        })
        .collect();
    let mut left: Vec<u64> = workers.iter().map(|rx| recv_within(rx, 20 * SECOND, "a worker")).collect();
    left.sort_unstable();
    assert_eq!(left, vec![0, 1, 2]);
    let counted = Instant::now();
    for rx in &waiters {
        assert!(recv_within(rx, 20 * SECOND, "a waiter"));
    }
    // Well within the 30 s re-check bound: the message woke them.
    assert!(counted.elapsed() < 15 * SECOND);
    assert!(!exists(&mut con, "batch"));
    assert_eq!(latch.count().unwrap(), 0);
}

#[test]
fn await_is_bounded_and_true_at_once_on_an_open_latch() {
    let server = RedisServer::start();
    let client = server.client();
    let latch = client.count_down_latch("bounded").unwrap();
    assert!(latch.await_for(Duration::ZERO).unwrap(), "an open latch");
    assert!(latch.try_set_count(1).unwrap());
    let started = Instant::now();
    assert!(!latch.await_for(Duration::from_millis(200)).unwrap());
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(!latch.await_until(Instant::now()).unwrap());
}

#[test]
fn deleting_the_latch_opens_it_and_wakes_waiters() {
    let server = RedisServer::start();
    let client = server.client();
    let latch = client.count_down_latch("deleted").unwrap();
    assert!(latch.try_set_count(10).unwrap());
    let waiting = server.client().count_down_latch("deleted").unwrap();
    let rx = spawn(move || waiting.await_for(60 * SECOND).unwrap());
    let mut con = server.conn();
    wait_numsub(&mut con, &channel("deleted"), 1);
    assert!(latch.delete().unwrap());
    assert!(recv_within(&rx, 20 * SECOND, "the waiter"));
    assert!(!latch.delete().unwrap());
}

#[test]
fn counting_down_an_open_latch_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let latch = client.count_down_latch("open").unwrap();
    let err = latch.count_down().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(!exists(&mut con, "open"));
    assert!(latch.try_set_count(1).unwrap());
    assert_eq!(latch.count_down().unwrap(), 0);
    assert_eq!(latch.count_down().unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert!(!exists(&mut con, "open"));
    // A zero left by Java's trySetCount(0) stays.
    let _: () = redis::cmd("SET").arg("zero").arg("0").query(&mut con).unwrap();
    let zero = client.count_down_latch("zero").unwrap();
    assert_eq!(zero.count_down().unwrap_err().kind(), ErrorKind::InvalidArgument);
    let value: String = redis::cmd("GET").arg("zero").query(&mut con).unwrap();
    assert_eq!(value, "0");
}

#[test]
fn bad_counts_and_names_are_refused_before_any_io() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let latch = client.count_down_latch("bad").unwrap();
    let before = command_calls(&mut con);
    assert_eq!(latch.try_set_count(0).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(latch.try_set_count(u64::MAX).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(client.count_down_latch("").unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(command_calls(&mut con), before, "bad input reached Redis");
}

#[test]
fn a_foreign_key_at_the_name_is_a_typed_error_and_left_alone() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let _: i64 = redis::cmd("HSET").arg("h").arg("f").arg("v").query(&mut con).unwrap();
    let latch = client.count_down_latch("h").unwrap();
    assert_eq!(latch.count_down().unwrap_err().kind(), ErrorKind::WrongType);
    assert_eq!(latch.delete().unwrap_err().kind(), ErrorKind::WrongType);
    assert_eq!(latch.count().unwrap_err().kind(), ErrorKind::WrongType);
    assert!(!latch.try_set_count(2).unwrap());
    assert!(exists(&mut con, "h"));
}

/// Redisson's `RCountDownLatch.countDown` script, as a Java service sends it.
const JAVA_COUNT_DOWN: &str = "local v = redis.call('decr', KEYS[1]);\
     if v <= 0 then redis.call('del', KEYS[1]) end;\
     if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;";

#[test]
fn a_java_count_down_opens_the_latch_for_a_keyholder_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let latch = client.count_down_latch("java").unwrap();
    assert!(latch.try_set_count(1).unwrap());
    let waiting = server.client().count_down_latch("java").unwrap();
    let rx = spawn(move || waiting.await_for(60 * SECOND).unwrap());
    let mut con = server.conn();
    wait_numsub(&mut con, &channel("java"), 1);
    let _: () = redis::Script::new(JAVA_COUNT_DOWN)
        .key("java")
        .key(channel("java"))
        .arg(0)
        .arg("publish")
        .invoke(&mut con)
        .unwrap();
    assert!(recv_within(&rx, 15 * SECOND, "the waiter"));
    assert!(!exists(&mut con, "java"));
}
