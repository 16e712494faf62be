//! Lua contract tests for the semaphores' scripts (`lua/semaphore/` and
//! `lua/permit_semaphore/`): each called directly on a raw connection and
//! checked, branch by branch, against its header, Redis state included.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::{Listener, RedisServer, exists, pttl};
use redis::Value;

const NEVER: &str = "922337203685477";

fn script(path: &str) -> redis::Script {
    redis::Script::new(&common::lua(path))
}

fn channel(name: &str) -> String {
    if name.contains('{') { format!("redisson_sc:{name}") } else { format!("redisson_sc:{{{name}}}") }
}

fn timeouts(name: &str) -> String {
    if name.contains('{') { format!("{name}:timeout") } else { format!("{{{name}}}:timeout") }
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn set(con: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("SET").arg(key).arg(value).query(con).unwrap();
}

/// An integer reply, or a count returned as its decimal string (exact past
/// 2^53, where a Lua number is not).
fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        Value::BulkString(bytes) => std::str::from_utf8(bytes).unwrap().parse().unwrap(),
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn ints(value: &Value) -> Vec<i64> {
    match value {
        Value::Array(items) => items.iter().map(int).collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

fn is_error(result: &redis::RedisResult<Value>, code: &str) -> bool {
    match result {
        Err(e) => e.code() == Some(code) || e.to_string().contains(code),
        Ok(_) => false,
    }
}

// ---- RSemaphore -----------------------------------------------------------

fn try_acquire(con: &mut redis::Connection, name: &str, n: i64) -> redis::RedisResult<Value> {
    script("semaphore/try_acquire.lua").key(name).arg(n).invoke(con)
}

fn release(con: &mut redis::Connection, name: &str, n: i64) -> redis::RedisResult<Value> {
    script("semaphore/release.lua").key(name).key(channel(name)).arg(n).arg("publish").invoke(con)
}

fn try_set(con: &mut redis::Connection, name: &str, n: i64, ttl: Option<u64>) -> redis::RedisResult<Value> {
    let s = script("semaphore/try_set_permits.lua");
    let mut inv = s.prepare_invoke();
    inv.key(name).key(channel(name)).arg(n).arg("publish");
    if let Some(ttl) = ttl {
        inv.arg(ttl);
    }
    inv.invoke(con)
}

#[test]
fn semaphore_try_acquire_takes_permits_only_when_enough_are_available() {
    let server = RedisServer::start();
    let mut con = server.conn();
    // Absent: 0 permits, nothing created.
    assert_eq!(int(&try_acquire(&mut con, "s", 1).unwrap()), 0);
    assert!(!exists(&mut con, "s"));

    set(&mut con, "s", "3");
    let _: i64 = redis::cmd("PEXPIRE").arg("s").arg(50_000).query(&mut con).unwrap();
    assert_eq!(int(&try_acquire(&mut con, "s", 2).unwrap()), 1);
    assert_eq!(get(&mut con, "s").as_deref(), Some("1"));
    assert!(pttl(&mut con, "s") > 40_000, "DECRBY must keep the TTL");
    assert_eq!(int(&try_acquire(&mut con, "s", 2).unwrap()), 0);
    assert_eq!(get(&mut con, "s").as_deref(), Some("1"));
    assert_eq!(int(&try_acquire(&mut con, "s", 1).unwrap()), 1);
    assert_eq!(get(&mut con, "s").as_deref(), Some("0"));
    assert_eq!(int(&try_acquire(&mut con, "s", 1).unwrap()), 0);
}

#[test]
fn semaphore_scripts_refuse_foreign_values_and_change_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    set(&mut con, "text", "abc");
    assert!(is_error(&try_acquire(&mut con, "text", 1), "BADCOUNT"));
    assert!(is_error(&release(&mut con, "text", 1), "BADCOUNT"));
    assert!(is_error(&script("semaphore/drain.lua").key("text").invoke::<Value>(&mut con), "BADCOUNT"));
    assert_eq!(get(&mut con, "text").as_deref(), Some("abc"));

    let _: i64 = redis::cmd("HSET").arg("hash").arg("f").arg("v").query(&mut con).unwrap();
    assert!(is_error(&try_acquire(&mut con, "hash", 1), "WRONGTYPE"));
    assert!(is_error(&release(&mut con, "hash", 1), "WRONGTYPE"));
    assert_eq!(int(&try_set(&mut con, "hash", 3, None).unwrap()), 0);
    let kind: String = redis::cmd("TYPE").arg("hash").query(&mut con).unwrap();
    assert_eq!(kind, "hash");
}

#[test]
fn semaphore_release_increments_publishes_the_new_count_and_says_how_many_heard_it() {
    let server = RedisServer::start();
    let mut con = server.conn();
    // Nobody listens yet: the count, and 0 listeners.
    assert_eq!(ints(&release(&mut con, "r", 2).unwrap()), vec![2, 0]);
    let listener = Listener::start(&server, &[&channel("r"), &channel("{t}:x")]);
    assert_eq!(ints(&release(&mut con, "r", 3).unwrap()), vec![5, 1], "one connection heard it");
    assert_eq!(get(&mut con, "r").as_deref(), Some("5"));
    let got = listener.drain_until_marker(&mut con, &channel("r"));
    assert_eq!(got, vec![(channel("r"), "5".to_owned())]);

    // A braced name keeps its own braces in the channel.
    assert_eq!(ints(&release(&mut con, "{t}:x", 1).unwrap()), vec![1, 1]);
    let got = listener.drain_until_marker(&mut con, "redisson_sc:{t}:x");
    assert_eq!(got, vec![("redisson_sc:{t}:x".to_owned(), "1".to_owned())]);
}

#[test]
fn semaphore_try_set_permits_sets_only_an_absent_key_and_may_give_it_a_ttl() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("p"), &channel("q")]);
    assert_eq!(int(&try_set(&mut con, "p", 4, None).unwrap()), 1);
    assert_eq!(get(&mut con, "p").as_deref(), Some("4"));
    assert_eq!(pttl(&mut con, "p"), -1);
    assert_eq!(int(&try_set(&mut con, "p", 9, None).unwrap()), 0);
    assert_eq!(get(&mut con, "p").as_deref(), Some("4"));
    assert_eq!(int(&try_set(&mut con, "q", 2, Some(30_000)).unwrap()), 1);
    let ttl = pttl(&mut con, "q");
    assert!(ttl > 20_000 && ttl <= 30_000, "PTTL {ttl}");
    let got = listener.drain_until_marker(&mut con, &channel("p"));
    assert_eq!(got, vec![(channel("p"), "4".to_owned()), (channel("q"), "2".to_owned())]);
}

#[test]
fn semaphore_add_permits_sets_the_sum_drops_the_ttl_and_publishes_it() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("a")]);
    let add = |con: &mut redis::Connection, delta: i64| -> i64 {
        int(&script("semaphore/add_permits.lua")
            .key("a")
            .key(channel("a"))
            .arg(delta)
            .arg("publish")
            .invoke(con)
            .unwrap())
    };
    assert_eq!(add(&mut con, 3), 3);
    let _: i64 = redis::cmd("PEXPIRE").arg("a").arg(50_000).query(&mut con).unwrap();
    assert_eq!(add(&mut con, -5), -2);
    assert_eq!(get(&mut con, "a").as_deref(), Some("-2"));
    assert_eq!(pttl(&mut con, "a"), -1, "Redisson's SET drops the TTL");
    let got = listener.drain_until_marker(&mut con, &channel("a"));
    assert_eq!(got, vec![(channel("a"), "3".to_owned()), (channel("a"), "-2".to_owned())]);
}

#[test]
fn semaphore_drain_returns_the_count_and_leaves_zero() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let drain =
        |con: &mut redis::Connection| int(&script("semaphore/drain.lua").key("d").invoke(con).unwrap());
    assert_eq!(drain(&mut con), 0);
    assert!(!exists(&mut con, "d"), "draining an absent semaphore creates nothing");
    set(&mut con, "d", "7");
    assert_eq!(drain(&mut con), 7);
    assert_eq!(get(&mut con, "d").as_deref(), Some("0"));
    assert_eq!(drain(&mut con), 0);
}

// ---- RPermitExpirableSemaphore ---------------------------------------------

fn id(n: u8) -> Vec<u8> {
    let mut bytes = vec![0xAB; 16];
    bytes[15] = n;
    bytes
}

fn p_acquire(
    con: &mut redis::Connection,
    name: &str,
    lease: i64,
    ids: &[Vec<u8>],
) -> redis::RedisResult<Value> {
    let s = script("permit_semaphore/acquire.lua");
    let mut inv = s.prepare_invoke();
    inv.key(name).key(timeouts(name)).key(channel(name)).arg(ids.len()).arg(lease).arg(NEVER).arg("publish");
    for id in ids {
        inv.arg(id.as_slice());
    }
    inv.invoke(con)
}

fn p_release(con: &mut redis::Connection, name: &str, ids: &[Vec<u8>]) -> redis::RedisResult<Value> {
    let s = script("permit_semaphore/release.lua");
    let mut inv = s.prepare_invoke();
    inv.key(name).key(timeouts(name)).key(channel(name)).arg("publish");
    for id in ids {
        inv.arg(id.as_slice());
    }
    inv.invoke(con)
}

fn p_renew(
    con: &mut redis::Connection,
    name: &str,
    lease: i64,
    ids: &[Vec<u8>],
) -> redis::RedisResult<Value> {
    let s = script("permit_semaphore/renew.lua");
    let mut inv = s.prepare_invoke();
    inv.key(name).key(timeouts(name)).key(channel(name)).arg(lease).arg("publish");
    for id in ids {
        inv.arg(id.as_slice());
    }
    inv.invoke(con)
}

fn p_status(con: &mut redis::Connection, name: &str) -> Vec<i64> {
    ints(
        &script("permit_semaphore/status.lua")
            .key(name)
            .key(timeouts(name))
            .key(channel(name))
            .arg("publish")
            .invoke(con)
            .unwrap(),
    )
}

fn server_ms(con: &mut redis::Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * 1000 + us / 1000
}

fn score(con: &mut redis::Connection, name: &str, id: &[u8]) -> Option<f64> {
    redis::cmd("ZSCORE").arg(timeouts(name)).arg(id).query(con).unwrap()
}

#[test]
fn permit_acquire_adds_ids_scored_by_expiry_and_decrements_the_count() {
    let server = RedisServer::start();
    let mut con = server.conn();
    set(&mut con, "e", "3");
    let before = server_ms(&mut con);
    assert_eq!(ints(&p_acquire(&mut con, "e", 10_000, &[id(1), id(2)]).unwrap()), vec![1, 0]);
    assert_eq!(get(&mut con, "e").as_deref(), Some("1"));
    let s = score(&mut con, "e", &id(1)).unwrap() as i64;
    assert!(s >= before + 10_000 && s <= server_ms(&mut con) + 10_000, "score {s}");
    assert!(score(&mut con, "e", &id(2)).is_some());

    // Never-expiring permit: Redisson's sentinel score.
    assert_eq!(ints(&p_acquire(&mut con, "e", -1, &[id(3)]).unwrap()), vec![1, 0]);
    assert_eq!(score(&mut con, "e", &id(3)).unwrap() as i64, NEVER.parse::<i64>().unwrap());
    assert_eq!(get(&mut con, "e").as_deref(), Some("0"));

    // Refused: the nearest expiry bounds the wait.
    let reply = ints(&p_acquire(&mut con, "e", 10_000, &[id(4)]).unwrap());
    assert_eq!(reply[0], 0);
    assert!(reply[1] > 9_000 && reply[1] <= 10_000, "wait {}", reply[1]);
    assert!(score(&mut con, "e", &id(4)).is_none());
    assert_eq!(get(&mut con, "e").as_deref(), Some("0"));

    // A retry of an acquire that happened does not take permits twice.
    assert_eq!(ints(&p_acquire(&mut con, "e", 10_000, &[id(1), id(2)]).unwrap()), vec![1, 0]);
    assert_eq!(get(&mut con, "e").as_deref(), Some("0"));
    assert!(is_error(&p_acquire(&mut con, "e", 10_000, &[id(1), id(9)]), "BADIDS"));
}

#[test]
fn permit_acquire_with_only_never_expiring_holders_has_no_wait_bound() {
    let server = RedisServer::start();
    let mut con = server.conn();
    set(&mut con, "n", "1");
    assert_eq!(ints(&p_acquire(&mut con, "n", -1, &[id(1)]).unwrap()), vec![1, 0]);
    assert_eq!(ints(&p_acquire(&mut con, "n", 1_000, &[id(2)]).unwrap()), vec![0, -1]);
    // Absent semaphore, no holders.
    assert_eq!(ints(&p_acquire(&mut con, "absent", 1_000, &[id(2)]).unwrap()), vec![0, -1]);
    assert!(!exists(&mut con, "absent"));
}

#[test]
fn permit_acquire_copies_the_keys_ttl_to_the_permit_set() {
    let server = RedisServer::start();
    let mut con = server.conn();
    set(&mut con, "t", "2");
    let _: i64 = redis::cmd("PEXPIRE").arg("t").arg(40_000).query(&mut con).unwrap();
    assert_eq!(ints(&p_acquire(&mut con, "t", 5_000, &[id(1)]).unwrap()), vec![1, 0]);
    let ttl = pttl(&mut con, &timeouts("t"));
    assert!(ttl > 30_000 && ttl <= 40_000, "PTTL {ttl}");
}

#[test]
fn every_permit_script_reclaims_expired_permits_first_and_publishes() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("x")]);
    set(&mut con, "x", "2");
    assert_eq!(ints(&p_acquire(&mut con, "x", 1, &[id(1), id(2)]).unwrap()), vec![1, 0]);
    std::thread::sleep(Duration::from_millis(20)); // let the 1 ms lease run out
    // The acquire reclaims both, then takes one.
    assert_eq!(ints(&p_acquire(&mut con, "x", 10_000, &[id(3)]).unwrap()), vec![1, 0]);
    assert_eq!(get(&mut con, "x").as_deref(), Some("1"));
    assert!(score(&mut con, "x", &id(1)).is_none() && score(&mut con, "x", &id(2)).is_none());
    let got = listener.drain_until_marker(&mut con, &channel("x"));
    assert_eq!(got, vec![(channel("x"), "2".to_owned())]);

    // status reclaims too.
    assert_eq!(ints(&p_acquire(&mut con, "x", 1, &[id(4)]).unwrap()), vec![1, 0]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(p_status(&mut con, "x"), vec![1, 1]);
    let got = listener.drain_until_marker(&mut con, &channel("x"));
    assert_eq!(got, vec![(channel("x"), "1".to_owned())]);

    // renew reclaims, and reports the expired id as not renewed.
    assert_eq!(ints(&p_acquire(&mut con, "x", 1, &[id(5)]).unwrap()), vec![1, 0]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(ints(&p_renew(&mut con, "x", 10_000, &[id(3), id(5)]).unwrap()), vec![1, 0]);
    assert_eq!(get(&mut con, "x").as_deref(), Some("1"));
    assert!(score(&mut con, "x", &id(5)).is_none());
}

#[test]
fn permit_renew_moves_the_expiry_of_held_ids_only() {
    let server = RedisServer::start();
    let mut con = server.conn();
    set(&mut con, "w", "2");
    assert_eq!(ints(&p_acquire(&mut con, "w", 2_000, &[id(1)]).unwrap()), vec![1, 0]);
    let before = server_ms(&mut con);
    assert_eq!(ints(&p_renew(&mut con, "w", 60_000, &[id(1), id(7)]).unwrap()), vec![1, 0]);
    let s = score(&mut con, "w", &id(1)).unwrap() as i64;
    assert!(s >= before + 60_000, "score {s}");
    assert!(score(&mut con, "w", &id(7)).is_none(), "renew must not add ids");
    assert_eq!(get(&mut con, "w").as_deref(), Some("1"));
}

#[test]
fn permit_release_is_all_or_nothing_and_publishes_the_new_count() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("r")]);
    set(&mut con, "r", "3");
    assert_eq!(ints(&p_acquire(&mut con, "r", 10_000, &[id(1), id(2)]).unwrap()), vec![1, 0]);

    // One id not held: nothing changes.
    assert_eq!(int(&p_release(&mut con, "r", &[id(1), id(8)]).unwrap()), -1);
    assert_eq!(get(&mut con, "r").as_deref(), Some("1"));
    assert!(score(&mut con, "r", &id(1)).is_some());

    assert_eq!(int(&p_release(&mut con, "r", &[id(1), id(2)]).unwrap()), 2);
    assert_eq!(get(&mut con, "r").as_deref(), Some("3"));
    assert!(!exists(&mut con, &timeouts("r")));
    // Twice: not held any more.
    assert_eq!(int(&p_release(&mut con, "r", &[id(1)]).unwrap()), -1);
    assert_eq!(get(&mut con, "r").as_deref(), Some("3"));
    let got = listener.drain_until_marker(&mut con, &channel("r"));
    assert_eq!(got, vec![(channel("r"), "3".to_owned())]);
}

#[test]
fn permit_release_of_an_expired_unreclaimed_id_returns_it_once_and_counts_it_lost() {
    let server = RedisServer::start();
    let mut con = server.conn();
    set(&mut con, "l", "2");
    // One call: a second acquire could itself reclaim the first id.
    assert_eq!(ints(&p_acquire(&mut con, "l", 1, &[id(1), id(2)]).unwrap()), vec![1, 0]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(int(&p_release(&mut con, "l", &[id(1)]).unwrap()), 0, "expired: not live");
    // id(2) was reclaimed by the same call: both permits are back, once each.
    assert_eq!(get(&mut con, "l").as_deref(), Some("2"));
    assert_eq!(int(&p_release(&mut con, "l", &[id(2)]).unwrap()), -1);
    assert_eq!(get(&mut con, "l").as_deref(), Some("2"));
}

#[test]
fn permit_scripts_refuse_foreign_types_and_change_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: i64 = redis::cmd("HSET").arg("h").arg("f").arg("v").query(&mut con).unwrap();
    assert!(is_error(&p_acquire(&mut con, "h", 1_000, &[id(1)]), "WRONGTYPE"));
    set(&mut con, "z", "5");
    set(&mut con, &timeouts("z"), "oops");
    assert!(is_error(&p_acquire(&mut con, "z", 1_000, &[id(1)]), "WRONGTYPE"));
    assert!(is_error(&p_release(&mut con, "z", &[id(1)]), "WRONGTYPE"));
    assert!(is_error(&p_renew(&mut con, "z", 1_000, &[id(1)]), "WRONGTYPE"));
    assert_eq!(get(&mut con, "z").as_deref(), Some("5"));
    set(&mut con, "b", "five");
    assert!(is_error(&p_acquire(&mut con, "b", 1_000, &[id(1)]), "BADCOUNT"));
    assert_eq!(get(&mut con, "b").as_deref(), Some("five"));
}

#[test]
fn permit_add_permits_publishes_the_delta_only_when_positive() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("ap")]);
    let add = |con: &mut redis::Connection, delta: i64| -> i64 {
        int(&script("permit_semaphore/add_permits.lua")
            .key("ap")
            .key(channel("ap"))
            .arg(delta)
            .arg("publish")
            .invoke(con)
            .unwrap())
    };
    set(&mut con, "ap", "4");
    assert_eq!(add(&mut con, 2), 6);
    assert_eq!(add(&mut con, -1), 5);
    assert_eq!(get(&mut con, "ap").as_deref(), Some("5"));
    let got = listener.drain_until_marker(&mut con, &channel("ap"));
    assert_eq!(got, vec![(channel("ap"), "2".to_owned())]);
}

#[test]
fn permit_try_set_is_the_semaphore_script_without_ttl() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(int(&try_set(&mut con, "ts", 3, None).unwrap()), 1);
    assert_eq!(p_status(&mut con, "ts"), vec![3, 0]);
    assert_eq!(ints(&p_acquire(&mut con, "ts", -1, &[id(1)]).unwrap()), vec![1, 0]);
    assert_eq!(p_status(&mut con, "ts"), vec![2, 1]);
}
