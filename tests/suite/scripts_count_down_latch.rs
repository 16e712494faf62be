//! Lua contract tests for the count-down latch's scripts (`lua/count_down_latch/`):
//! each called directly on a raw connection and checked, branch by branch,
//! against its header, Redis state and messages included.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::{Listener, RedisServer, exists};
use redis::Value;

fn script(path: &str) -> redis::Script {
    redis::Script::new(&common::lua(path))
}

fn channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

/// An integer reply, or a count returned as its decimal string (exact past
/// 2^53, where a Lua number is not).
fn int(value: redis::RedisResult<Value>) -> i64 {
    match value.unwrap() {
        Value::Int(n) => n,
        Value::BulkString(bytes) => std::str::from_utf8(&bytes).unwrap().parse().unwrap(),
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn count_down(con: &mut redis::Connection, name: &str) -> redis::RedisResult<Value> {
    script("count_down_latch/count_down.lua").key(name).key(channel(name)).arg("publish").invoke(con)
}

fn try_set(con: &mut redis::Connection, name: &str, n: i64) -> redis::RedisResult<Value> {
    script("count_down_latch/try_set_count.lua")
        .key(name)
        .key(channel(name))
        .arg(n)
        .arg("publish")
        .invoke(con)
}

fn delete(con: &mut redis::Connection, name: &str) -> redis::RedisResult<Value> {
    script("count_down_latch/delete.lua").key(name).key(channel(name)).arg("publish").invoke(con)
}

#[test]
fn try_set_count_sets_an_absent_latch_and_publishes_one() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("l")]);
    assert_eq!(int(try_set(&mut con, "l", 3)), 1);
    assert_eq!(get(&mut con, "l").as_deref(), Some("3"));
    assert_eq!(int(try_set(&mut con, "l", 5)), 0);
    assert_eq!(get(&mut con, "l").as_deref(), Some("3"));
    let got = listener.drain_until_marker(&mut con, &channel("l"));
    assert_eq!(got, vec![(channel("l"), "1".to_owned())]);
}

#[test]
fn count_down_decrements_then_deletes_and_publishes_zero_at_zero() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("c")]);
    assert_eq!(int(try_set(&mut con, "c", 2)), 1);
    assert_eq!(int(count_down(&mut con, "c")), 1);
    assert_eq!(get(&mut con, "c").as_deref(), Some("1"));
    assert_eq!(int(count_down(&mut con, "c")), 0);
    assert!(!exists(&mut con, "c"));
    // Open: nothing changes, nothing is published.
    assert_eq!(int(count_down(&mut con, "c")), -1);
    assert!(!exists(&mut con, "c"));
    let got = listener.drain_until_marker(&mut con, &channel("c"));
    assert_eq!(got, vec![(channel("c"), "1".to_owned()), (channel("c"), "0".to_owned())]);
}

#[test]
fn count_down_on_a_zero_count_left_by_java_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("z").arg("0").query(&mut con).unwrap();
    assert_eq!(int(count_down(&mut con, "z")), -1);
    assert_eq!(get(&mut con, "z").as_deref(), Some("0"));
}

#[test]
fn latch_scripts_refuse_foreign_values_and_change_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("t").arg("many").query(&mut con).unwrap();
    let e = count_down(&mut con, "t").unwrap_err();
    assert!(e.to_string().contains("BADCOUNT"), "{e}");
    assert_eq!(get(&mut con, "t").as_deref(), Some("many"));
    let _: i64 = redis::cmd("HSET").arg("h").arg("f").arg("v").query(&mut con).unwrap();
    let e = count_down(&mut con, "h").unwrap_err();
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    let e = delete(&mut con, "h").unwrap_err();
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    assert_eq!(int(try_set(&mut con, "h", 1)), 0);
    assert!(exists(&mut con, "h"));
}

#[test]
fn delete_removes_the_latch_and_publishes_one() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("d")]);
    assert_eq!(int(delete(&mut con, "d")), 0);
    assert_eq!(int(try_set(&mut con, "d", 4)), 1);
    assert_eq!(int(delete(&mut con, "d")), 1);
    assert!(!exists(&mut con, "d"));
    let got = listener.drain_until_marker(&mut con, &channel("d"));
    assert_eq!(got, vec![(channel("d"), "1".to_owned()), (channel("d"), "1".to_owned())]);
}

#[test]
fn a_braced_name_keeps_redissons_literal_braces_around_it_in_the_channel() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let literal = "redisson_countdownlatch__channel__{{user}:1}";
    let listener = Listener::start(&server, &[literal]);
    assert_eq!(int(try_set(&mut con, "{user}:1", 1)), 1);
    assert_eq!(int(count_down(&mut con, "{user}:1")), 0);
    let got = listener.drain_until_marker(&mut con, literal);
    assert_eq!(got, vec![(literal.to_owned(), "1".to_owned()), (literal.to_owned(), "0".to_owned())]);
}
