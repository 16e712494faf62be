//! Lua contract tests of the RedLock's own script
//! (`lua/red_lock/raise_token.lua`), called on a raw connection and checked
//! against its header comment. A RedLock's per-master acquire and release
//! are RLock's (`lua/acquire.lua` with the fencing counter, `lua/release.lua`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{RedisServer, exists};
use redis::Value;

const OWNER_A: &str = "8c1f0a4e-1111-4000-8000-000000000001:1";
const OWNER_B: &str = "8c1f0a4e-2222-4000-8000-000000000002:7";
const COUNTER: &str = "redisson_lock_token:{rl}";

fn raise(con: &mut redis::Connection, owner: &str, floor: &str) -> redis::RedisResult<Value> {
    redis::Script::new(&common::lua("red_lock/raise_token.lua"))
        .key("rl")
        .key(COUNTER)
        .arg(owner)
        .arg(floor)
        .invoke(con)
}

fn hold(con: &mut redis::Connection, owner: &str) {
    let _: () = redis::cmd("HSET").arg("rl").arg(owner).arg(1).query(con).unwrap();
    let _: i64 = redis::cmd("PEXPIRE").arg("rl").arg(10_000).query(con).unwrap();
}

fn counter(con: &mut redis::Connection) -> Option<String> {
    redis::cmd("GET").arg(COUNTER).query(con).unwrap()
}

fn code_of(e: &redis::RedisError) -> String {
    e.to_string()
}

#[test]
fn the_holder_raises_a_lower_or_absent_counter_to_the_combined_token() {
    let server = RedisServer::start();
    let mut con = server.conn();
    hold(&mut con, OWNER_A);
    assert_eq!(raise(&mut con, OWNER_A, "17").unwrap(), Value::Int(1));
    assert_eq!(counter(&mut con).as_deref(), Some("17"));
    let _: () = redis::cmd("SET").arg(COUNTER).arg("9").query(&mut con).unwrap();
    assert_eq!(raise(&mut con, OWNER_A, "10").unwrap(), Value::Int(1));
    assert_eq!(counter(&mut con).as_deref(), Some("10"));
    // No TTL on the counter, as Redisson's.
    let ttl: i64 = redis::cmd("PTTL").arg(COUNTER).query(&mut con).unwrap();
    assert_eq!(ttl, -1);
}

#[test]
fn a_higher_counter_is_never_lowered() {
    let server = RedisServer::start();
    let mut con = server.conn();
    hold(&mut con, OWNER_A);
    let _: () = redis::cmd("SET").arg(COUNTER).arg("100").query(&mut con).unwrap();
    assert_eq!(raise(&mut con, OWNER_A, "99").unwrap(), Value::Int(1));
    assert_eq!(counter(&mut con).as_deref(), Some("100"));
    // Compared exactly over 64 bits, not as doubles.
    let _: () = redis::cmd("SET").arg(COUNTER).arg("9007199254740993").query(&mut con).unwrap();
    assert_eq!(raise(&mut con, OWNER_A, "9007199254740992").unwrap(), Value::Int(1));
    assert_eq!(counter(&mut con).as_deref(), Some("9007199254740993"));
    assert_eq!(raise(&mut con, OWNER_A, "9223372036854775807").unwrap(), Value::Int(1));
    assert_eq!(counter(&mut con).as_deref(), Some("9223372036854775807"));
}

#[test]
fn a_caller_that_no_longer_holds_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(raise(&mut con, OWNER_A, "5").unwrap(), Value::Int(0));
    assert!(!exists(&mut con, COUNTER));
    hold(&mut con, OWNER_B);
    assert_eq!(raise(&mut con, OWNER_A, "5").unwrap(), Value::Int(0));
    assert!(!exists(&mut con, COUNTER));
}

#[test]
fn foreign_keys_and_bad_values_are_refused_and_left_untouched() {
    let server = RedisServer::start();
    let mut con = server.conn();
    hold(&mut con, OWNER_A);
    for bad in ["-1", "01", "x", "9223372036854775808", ""] {
        let e = raise(&mut con, OWNER_A, bad).unwrap_err();
        assert!(code_of(&e).contains("BADCOUNTER"), "{bad}: {e}");
    }
    assert!(!exists(&mut con, COUNTER));
    let _: () = redis::cmd("SET").arg(COUNTER).arg("abc").query(&mut con).unwrap();
    assert!(code_of(&raise(&mut con, OWNER_A, "5").unwrap_err()).contains("BADCOUNTER"));
    assert_eq!(counter(&mut con).as_deref(), Some("abc"));
    let _: () = redis::cmd("DEL").arg(COUNTER).query(&mut con).unwrap();
    let _: () = redis::cmd("LPUSH").arg(COUNTER).arg("x").query(&mut con).unwrap();
    assert!(code_of(&raise(&mut con, OWNER_A, "5").unwrap_err()).contains("WRONGTYPE"));
    let _: () = redis::cmd("DEL").arg(COUNTER).arg("rl").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("rl").arg("v").query(&mut con).unwrap();
    assert!(code_of(&raise(&mut con, OWNER_A, "5").unwrap_err()).contains("WRONGTYPE"));
    assert!(!exists(&mut con, COUNTER));
}
