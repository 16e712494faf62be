//! Lua contract tests of the spin lock's scripts (`lua/spin_lock/`): each
//! called on a raw connection and checked against its header comment. The
//! one property the kind adds over RLock's layout is checked on every
//! branch: nothing is ever published.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{RedisServer, calls_of, exists, hgetall, pttl};
use redis::Value;

const OWNER_A: &str = "8c1f0a4e-1111-4000-8000-000000000001:1";
const OWNER_B: &str = "8c1f0a4e-2222-4000-8000-000000000002:7";

fn acquire(
    con: &mut redis::Connection,
    name: &str,
    lease: u64,
    owner: &str,
    mode: Option<&str>,
) -> redis::RedisResult<Value> {
    let script = redis::Script::new(&common::lua("spin_lock/acquire.lua"));
    let mut call = script.key(name);
    call.arg(lease).arg(owner);
    if let Some(mode) = mode {
        call.arg(mode);
    }
    call.invoke(con)
}

fn release(
    con: &mut redis::Connection,
    name: &str,
    lease: u64,
    owner: &str,
    latch: Option<(&str, u64, bool)>,
) -> redis::RedisResult<Value> {
    let script = redis::Script::new(&common::lua("spin_lock/release.lua"));
    let mut call = script.key(name);
    if let Some((latch, _, _)) = latch {
        call.key(latch);
    }
    call.arg(lease).arg(owner);
    if let Some((_, id, retry)) = latch {
        call.arg(20_000).arg(id).arg(if retry { "1" } else { "0" });
    }
    call.invoke(con)
}

fn force_unlock(con: &mut redis::Connection, name: &str) -> redis::RedisResult<Value> {
    redis::Script::new(&common::lua("lock/force_unlock.lua")).key(name).invoke(con)
}

fn one_field(owner: &str, count: &str) -> std::collections::BTreeMap<String, String> {
    [(owner.to_owned(), count.to_owned())].into_iter().collect()
}

fn published(con: &mut redis::Connection) -> i64 {
    calls_of(con, "publish") + calls_of(con, "spublish")
}

fn is_wrongtype(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE")
}

#[test]
fn acquire_takes_a_free_lock_with_the_rlock_layout_and_publishes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "spin", 10_000, OWNER_A, None).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "spin"), one_field(OWNER_A, "1"));
    let ttl = pttl(&mut con, "spin");
    assert!(ttl > 9_000 && ttl <= 10_000, "PTTL {ttl}");
    // Redisson's rule re-enters by incrementing.
    assert_eq!(acquire(&mut con, "spin", 10_000, OWNER_A, None).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "spin"), one_field(OWNER_A, "2"));
    assert_eq!(published(&mut con), 0);
}

#[test]
fn a_new_hold_sets_a_stale_count_to_one() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("HSET").arg("stale").arg(OWNER_A).arg(5).query(&mut con).unwrap();
    assert_eq!(acquire(&mut con, "stale", 10_000, OWNER_A, Some("1")).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "stale"), one_field(OWNER_A, "1"));
}

#[test]
fn another_owner_is_refused_with_the_holders_pttl() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "held", 5_000, OWNER_A, Some("1")).unwrap(), Value::Nil);
    let Value::Int(ms) = acquire(&mut con, "held", 20_000, OWNER_B, Some("1")).unwrap() else { panic!() };
    assert!(ms > 4_000 && ms <= 5_000, "reply {ms}");
    assert_eq!(hgetall(&mut con, "held"), one_field(OWNER_A, "1"));
    // A foreign writer's key without a TTL: -1.
    let _: i64 = redis::cmd("PERSIST").arg("held").query(&mut con).unwrap();
    assert_eq!(acquire(&mut con, "held", 20_000, OWNER_B, None).unwrap(), Value::Int(-1));
    assert_eq!(published(&mut con), 0);
}

#[test]
fn a_reentry_only_lengthens_and_never_takes_a_free_lock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "re", 1_000, OWNER_A, Some("0")).unwrap(), Value::Int(-2));
    assert!(!exists(&mut con, "re"));
    assert_eq!(acquire(&mut con, "re", 10_000, OWNER_A, Some("1")).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "re", 1_000, OWNER_A, Some("0")).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "re"), one_field(OWNER_A, "2"));
    assert!(pttl(&mut con, "re") > 9_000, "a shorter re-entry lease cut the outer hold short");
    // Another owner's re-entry is refused with the PTTL.
    let Value::Int(ms) = acquire(&mut con, "re", 1_000, OWNER_B, Some("0")).unwrap() else { panic!() };
    assert!(ms > 9_000);
}

#[test]
fn release_decrements_then_deletes_without_publishing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "rel", 10_000, OWNER_A, None).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "rel", 10_000, OWNER_A, None).unwrap(), Value::Nil);
    let _: i64 = redis::cmd("PEXPIRE").arg("rel").arg(1_000).query(&mut con).unwrap();
    assert_eq!(release(&mut con, "rel", 10_000, OWNER_A, None).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, "rel"), one_field(OWNER_A, "1"));
    assert!(pttl(&mut con, "rel") > 9_000, "the lease was not re-applied");
    assert_eq!(release(&mut con, "rel", 10_000, OWNER_A, None).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "rel"));
    assert_eq!(published(&mut con), 0);
}

#[test]
fn release_by_a_non_owner_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(release(&mut con, "none", 10_000, OWNER_A, None).unwrap(), Value::Nil);
    assert!(!exists(&mut con, "none"));
    assert_eq!(acquire(&mut con, "other", 10_000, OWNER_A, None).unwrap(), Value::Nil);
    assert_eq!(release(&mut con, "other", 10_000, OWNER_B, None).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "other"), one_field(OWNER_A, "1"));
}

#[test]
fn a_latched_release_retried_returns_the_first_outcome_without_decrementing_again() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let latch = "keyholder_unlock_latch:{lat}:0000000000000000000000000000abcd";
    for _ in 0..3 {
        assert_eq!(acquire(&mut con, "lat", 10_000, OWNER_A, None).unwrap(), Value::Nil);
    }
    assert_eq!(release(&mut con, "lat", 10_000, OWNER_A, Some((latch, 7, false))).unwrap(), Value::Int(0));
    let stored: String = redis::cmd("GET").arg(latch).query(&mut con).unwrap();
    assert_eq!(stored, "7:0");
    assert!(pttl(&mut con, latch) > 19_000);
    // The retry of request 7 replays its outcome.
    assert_eq!(release(&mut con, "lat", 10_000, OWNER_A, Some((latch, 7, true))).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, "lat"), one_field(OWNER_A, "2"));
    // A new request (not a retry) decrements.
    assert_eq!(release(&mut con, "lat", 10_000, OWNER_A, Some((latch, 8, false))).unwrap(), Value::Int(0));
    assert_eq!(release(&mut con, "lat", 10_000, OWNER_A, Some((latch, 9, false))).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "lat"));
    assert_eq!(release(&mut con, "lat", 10_000, OWNER_A, Some((latch, 9, true))).unwrap(), Value::Int(1));
    assert_eq!(published(&mut con), 0);
}

#[test]
fn a_foreign_key_at_the_latch_is_neither_read_nor_overwritten() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("not-a-latch").arg("hello").query(&mut con).unwrap();
    assert_eq!(acquire(&mut con, "fl", 10_000, OWNER_A, None).unwrap(), Value::Nil);
    assert_eq!(
        release(&mut con, "fl", 10_000, OWNER_A, Some(("not-a-latch", 1, true))).unwrap(),
        Value::Int(1)
    );
    let kept: String = redis::cmd("GET").arg("not-a-latch").query(&mut con).unwrap();
    assert_eq!(kept, "hello");
}

#[test]
fn force_unlock_deletes_any_holders_lock_and_publishes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(force_unlock(&mut con, "fu").unwrap(), Value::Int(0));
    assert_eq!(acquire(&mut con, "fu", 10_000, OWNER_B, None).unwrap(), Value::Nil);
    assert_eq!(force_unlock(&mut con, "fu").unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "fu"));
    assert_eq!(published(&mut con), 0);
}

#[test]
fn a_key_of_another_type_is_refused_by_every_script_and_left_untouched() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("str").arg("v").query(&mut con).unwrap();
    assert!(is_wrongtype(&acquire(&mut con, "str", 10_000, OWNER_A, None).unwrap_err()));
    assert!(is_wrongtype(&acquire(&mut con, "str", 10_000, OWNER_A, Some("0")).unwrap_err()));
    assert!(is_wrongtype(&release(&mut con, "str", 10_000, OWNER_A, None).unwrap_err()));
    assert!(is_wrongtype(&force_unlock(&mut con, "str").unwrap_err()));
    let kept: String = redis::cmd("GET").arg("str").query(&mut con).unwrap();
    assert_eq!(kept, "v");
}
