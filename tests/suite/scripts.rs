//! Lua contract tests: each script under `lua/` called directly on a raw
//! connection, checked against the contract in its header comment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::{Listener, RedisServer, ServerExt, channel_of, exists, hgetall, pttl};
use redis::Value;

pub(crate) const OWNER_A: &str = "8c1f0a4e-1111-4000-8000-000000000001:1";
pub(crate) const OWNER_B: &str = "8c1f0a4e-2222-4000-8000-000000000002:7";

pub(crate) fn acquire_script() -> redis::Script {
    redis::Script::new(include_str!("../../lua/lock/acquire.lua"))
}

pub(crate) fn release_script() -> redis::Script {
    redis::Script::new(include_str!("../../lua/lock/release.lua"))
}

pub(crate) fn renew_script() -> redis::Script {
    redis::Script::new(include_str!("../../lua/lock/renew.lua"))
}

pub(crate) fn force_unlock_script() -> redis::Script {
    redis::Script::new(&common::lua("lock/force_unlock.lua"))
}

pub(crate) fn acquire(
    con: &mut redis::Connection,
    name: &str,
    lease_ms: u64,
    owner: &str,
) -> redis::RedisResult<Value> {
    acquire_script().key(name).arg(lease_ms).arg(owner).invoke(con)
}

pub(crate) fn release(
    con: &mut redis::Connection,
    name: &str,
    lease_ms: u64,
    owner: &str,
) -> redis::RedisResult<Value> {
    release_script().key(name).key(channel_of(name)).arg(lease_ms).arg(owner).invoke(con)
}

pub(crate) fn force_unlock(con: &mut redis::Connection, name: &str) -> redis::RedisResult<Value> {
    force_unlock_script().key(name).key(channel_of(name)).arg("0").invoke(con)
}

pub(crate) fn renew(
    con: &mut redis::Connection,
    lease_ms: u64,
    pairs: &[(&str, &str)],
) -> redis::RedisResult<Value> {
    let script = renew_script();
    let mut invocation = script.prepare_invoke();
    invocation.arg(lease_ms);
    for (key, owner) in pairs {
        invocation.key(*key).arg(*owner);
    }
    invocation.invoke(con)
}

pub(crate) fn is_wrongtype(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE")
}

pub(crate) fn one_field(owner: &str, count: &str) -> std::collections::BTreeMap<String, String> {
    [(owner.to_owned(), count.to_owned())].into_iter().collect()
}

#[test]
fn acquire_on_a_fresh_key_creates_the_hash_with_count_one_and_the_lease() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "fresh", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "fresh"), one_field(OWNER_A, "1"));
    let ttl = pttl(&mut con, "fresh");
    assert!(ttl > 9_000 && ttl <= 10_000, "PTTL {ttl}");
    let kind: String = redis::cmd("TYPE").arg("fresh").query(&mut con).unwrap();
    assert_eq!(kind, "hash");
}

#[test]
fn reentry_by_the_same_owner_increments_the_count_and_resets_the_pttl() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "re", 10_000, OWNER_A).unwrap(), Value::Nil);
    let _: i64 = redis::cmd("PEXPIRE").arg("re").arg(1_000).query(&mut con).unwrap();
    assert!(pttl(&mut con, "re") <= 1_000);

    assert_eq!(acquire(&mut con, "re", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "re"), one_field(OWNER_A, "2"));
    let ttl = pttl(&mut con, "re");
    assert!(ttl > 9_000 && ttl <= 10_000, "the re-entry did not reset the lease: PTTL {ttl}");

    assert_eq!(acquire(&mut con, "re", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "re"), one_field(OWNER_A, "3"));
}

#[test]
fn another_owner_gets_the_holders_pttl_and_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "held", 10_000, OWNER_A).unwrap(), Value::Nil);
    let _: i64 = redis::cmd("PEXPIRE").arg("held").arg(5_000).query(&mut con).unwrap();

    let reply = acquire(&mut con, "held", 20_000, OWNER_B).unwrap();
    let Value::Int(remaining) = reply else { panic!("expected the PTTL, got {reply:?}") };
    assert!(remaining > 4_000 && remaining <= 5_000, "reply {remaining}");
    assert_eq!(hgetall(&mut con, "held"), one_field(OWNER_A, "1"));
    let ttl = pttl(&mut con, "held");
    assert!(ttl > 4_000 && ttl <= 5_000, "the other owner's attempt changed the lease: PTTL {ttl}");
}

#[test]
fn a_foreign_hash_without_ttl_replies_minus_one() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: i64 = redis::cmd("HSET").arg("nottl").arg("someone").arg(1).query(&mut con).unwrap();
    assert_eq!(acquire(&mut con, "nottl", 10_000, OWNER_A).unwrap(), Value::Int(-1));
    assert_eq!(hgetall(&mut con, "nottl"), one_field("someone", "1"));
    assert_eq!(pttl(&mut con, "nottl"), -1);
}

#[test]
fn acquire_on_a_key_of_another_type_is_wrongtype_and_leaves_it_untouched() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("str").arg("foreign").query(&mut con).unwrap();
    let _: i64 = redis::cmd("RPUSH").arg("list").arg("a").arg("b").query(&mut con).unwrap();

    let err = acquire(&mut con, "str", 10_000, OWNER_A).unwrap_err();
    assert!(is_wrongtype(&err), "{err}");
    let value: String = redis::cmd("GET").arg("str").query(&mut con).unwrap();
    assert_eq!(value, "foreign");
    assert_eq!(pttl(&mut con, "str"), -1);

    let err = acquire(&mut con, "list", 10_000, OWNER_A).unwrap_err();
    assert!(is_wrongtype(&err), "{err}");
    let items: Vec<String> = redis::cmd("LRANGE").arg("list").arg(0).arg(-1).query(&mut con).unwrap();
    assert_eq!(items, ["a", "b"]);
    assert_eq!(pttl(&mut con, "list"), -1);

    // The other scripts refuse it too, and leave it alone.
    let err = release(&mut con, "str", 10_000, OWNER_A).unwrap_err();
    assert!(is_wrongtype(&err), "{err}");
    let value: String = redis::cmd("GET").arg("str").query(&mut con).unwrap();
    assert_eq!(value, "foreign");
}

#[test]
fn release_by_a_non_owner_returns_nil_and_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel_of("nonowner"), &channel_of("absent")]);
    assert_eq!(acquire(&mut con, "nonowner", 10_000, OWNER_A).unwrap(), Value::Nil);
    let _: i64 = redis::cmd("PEXPIRE").arg("nonowner").arg(5_000).query(&mut con).unwrap();

    assert_eq!(release(&mut con, "nonowner", 20_000, OWNER_B).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "nonowner"), one_field(OWNER_A, "1"));
    let ttl = pttl(&mut con, "nonowner");
    assert!(ttl > 4_000 && ttl <= 5_000, "a non-owner's release changed the lease: PTTL {ttl}");
    assert_eq!(listener.drain_until_marker(&mut con, &channel_of("nonowner")), []);

    // Releasing a lock nobody holds creates nothing and publishes nothing.
    assert_eq!(release(&mut con, "absent", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert!(!exists(&mut con, "absent"));
    assert_eq!(listener.drain_until_marker(&mut con, &channel_of("absent")), []);
}

#[test]
fn partial_release_returns_zero_and_reapplies_the_lease_without_publishing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel_of("partial")]);
    assert_eq!(acquire(&mut con, "partial", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "partial", 10_000, OWNER_A).unwrap(), Value::Nil);
    let _: i64 = redis::cmd("PEXPIRE").arg("partial").arg(1_000).query(&mut con).unwrap();

    assert_eq!(release(&mut con, "partial", 10_000, OWNER_A).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, "partial"), one_field(OWNER_A, "1"));
    let ttl = pttl(&mut con, "partial");
    assert!(ttl > 9_000 && ttl <= 10_000, "the partial release did not re-apply the lease: PTTL {ttl}");
    assert_eq!(listener.drain_until_marker(&mut con, &channel_of("partial")), []);
}

#[test]
fn final_release_returns_one_deletes_the_key_and_publishes_zero() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let channel = channel_of("final");
    assert_eq!(channel, "redisson_lock__channel:{final}");
    let listener = Listener::start(&server, &[&channel]);
    assert_eq!(acquire(&mut con, "final", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "final", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(release(&mut con, "final", 10_000, OWNER_A).unwrap(), Value::Int(0));

    assert_eq!(release(&mut con, "final", 10_000, OWNER_A).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "final"));
    let msg = listener.next(Duration::from_secs(5)).expect("no unlock message");
    assert_eq!(msg, (channel.clone(), "0".to_owned()));
    // Exactly one message: the partial release published nothing.
    assert_eq!(listener.drain_until_marker(&mut con, &channel), []);

    // Once released, a second release is a non-owner's.
    assert_eq!(release(&mut con, "final", 10_000, OWNER_A).unwrap(), Value::Nil);
}

/// A count of 1 is deleted without being counted down first (the common
/// case's short cut); the counts a foreign writer may leave behave as
/// Redisson's count-down would have them: 0 or less is a last hold, and a
/// count that is no integer is an error, the hash untouched.
#[test]
fn a_last_hold_of_any_count_is_deleted_and_a_count_that_is_no_integer_is_refused() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel_of("counts")]);
    for count in ["1", "0", "-3"] {
        let _: i64 = redis::cmd("HSET").arg("counts").arg(OWNER_A).arg(count).query(&mut con).unwrap();
        assert_eq!(release(&mut con, "counts", 10_000, OWNER_A).unwrap(), Value::Int(1), "count {count}");
        assert!(!exists(&mut con, "counts"), "count {count}");
        let message = listener.next(Duration::from_secs(5));
        assert_eq!(message, Some((channel_of("counts"), "0".to_owned())), "count {count}");
    }
    let _: i64 = redis::cmd("HSET").arg("counts").arg(OWNER_A).arg("many").query(&mut con).unwrap();
    assert!(release(&mut con, "counts", 10_000, OWNER_A).is_err());
    assert_eq!(hgetall(&mut con, "counts"), one_field(OWNER_A, "many"));
    assert_eq!(listener.drain_until_marker(&mut con, &channel_of("counts")), []);
}

#[test]
fn renew_reports_per_key_and_extends_only_owned_keys() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "mine", 1_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "theirs", 1_000, OWNER_B).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "mine2", 1_000, OWNER_A).unwrap(), Value::Nil);
    let _: () = redis::cmd("SET").arg("str").arg("foreign").query(&mut con).unwrap();

    let reply = renew(
        &mut con,
        30_000,
        &[("mine", OWNER_A), ("theirs", OWNER_A), ("gone", OWNER_A), ("str", OWNER_A), ("mine2", OWNER_A)],
    )
    .unwrap();
    assert_eq!(
        reply,
        Value::Array(vec![Value::Int(1), Value::Int(0), Value::Int(0), Value::Int(0), Value::Int(1)])
    );

    for owned in ["mine", "mine2"] {
        let ttl = pttl(&mut con, owned);
        assert!(ttl > 29_000 && ttl <= 30_000, "{owned} not renewed: PTTL {ttl}");
        assert_eq!(hgetall(&mut con, owned), one_field(OWNER_A, "1"), "renewal changed the count");
    }
    let ttl = pttl(&mut con, "theirs");
    assert!(ttl > 0 && ttl <= 1_000, "another owner's key was renewed: PTTL {ttl}");
    assert_eq!(hgetall(&mut con, "theirs"), one_field(OWNER_B, "1"));
    assert!(!exists(&mut con, "gone"), "renew created a key");
    let value: String = redis::cmd("GET").arg("str").query(&mut con).unwrap();
    assert_eq!(value, "foreign");
    assert_eq!(pttl(&mut con, "str"), -1);

    // A single key works too.
    assert_eq!(renew(&mut con, 30_000, &[("theirs", OWNER_B)]).unwrap(), Value::Array(vec![Value::Int(1)]));
}

#[test]
fn force_unlock_deletes_and_publishes_only_when_there_was_a_lock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let channel = channel_of("admin");
    let listener = Listener::start(&server, &[&channel]);
    assert_eq!(acquire(&mut con, "admin", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "admin", 10_000, OWNER_A).unwrap(), Value::Nil);

    assert_eq!(force_unlock(&mut con, "admin").unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "admin"));
    assert_eq!(listener.next(Duration::from_secs(5)), Some((channel.clone(), "0".to_owned())));

    assert_eq!(force_unlock(&mut con, "admin").unwrap(), Value::Int(0));
    assert_eq!(listener.drain_until_marker(&mut con, &channel), [], "published without a lock");
}

#[test]
fn force_unlock_refuses_a_key_of_another_type_without_deleting_it() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let channel = channel_of("str");
    let listener = Listener::start(&server, &[&channel]);
    let _: () = redis::cmd("SET").arg("str").arg("foreign").query(&mut con).unwrap();

    let err = force_unlock(&mut con, "str").unwrap_err();
    assert!(is_wrongtype(&err), "{err}");
    let value: String = redis::cmd("GET").arg("str").query(&mut con).unwrap();
    assert_eq!(value, "foreign");
    assert_eq!(listener.drain_until_marker(&mut con, &channel), [], "published for a foreign key");
}

#[test]
fn scripts_still_run_after_script_flush() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "flush", 10_000, OWNER_A).unwrap(), Value::Nil);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    let loaded: Vec<bool> =
        redis::cmd("SCRIPT").arg("EXISTS").arg(acquire_script().get_hash()).query(&mut con).unwrap();
    assert_eq!(loaded, [false]);

    assert_eq!(acquire(&mut con, "flush", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "flush"), one_field(OWNER_A, "2"));
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    assert_eq!(release(&mut con, "flush", 10_000, OWNER_A).unwrap(), Value::Int(0));
}

#[test]
fn the_library_reloads_its_scripts_after_script_flush() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let lock = client.lock("flushed").unwrap();
    lock.lock().unwrap().unlock().unwrap();

    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    let guard = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    guard.unlock().unwrap();
    assert!(!exists(&mut con, "flushed"));
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    assert!(!lock.force_unlock().unwrap());
}

#[test]
fn the_channel_of_a_name_with_braces_keeps_the_names_own_braces() {
    let server = RedisServer::start();
    let client = server.client();
    let braced = client.lock("{user}:1").unwrap();
    let plain = client.lock("orders:42").unwrap();
    assert_eq!(braced.channel(), "redisson_lock__channel:{user}:1");
    assert_eq!(plain.channel(), "redisson_lock__channel:{orders:42}");

    // And the library publishes on exactly those channels.
    let mut con = server.conn();
    let listener =
        Listener::start(&server, &["redisson_lock__channel:{user}:1", "redisson_lock__channel:{orders:42}"]);
    braced.lock().unwrap().unlock().unwrap();
    assert_eq!(
        listener.next(Duration::from_secs(5)),
        Some(("redisson_lock__channel:{user}:1".to_owned(), "0".to_owned()))
    );
    plain.lock().unwrap().unlock().unwrap();
    assert_eq!(
        listener.next(Duration::from_secs(5)),
        Some(("redisson_lock__channel:{orders:42}".to_owned(), "0".to_owned()))
    );
    assert_eq!(listener.drain_until_marker(&mut con, "redisson_lock__channel:{user}:1"), []);
}
