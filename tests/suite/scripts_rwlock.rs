//! Lua contract tests of the read-write lock's scripts (`lua/rwlock/`), each
//! called directly on a raw connection and checked against the contract in
//! its header comment, and against Redisson's layout (redisson-wire.md §4.2,
//! §3.3).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Listener, RedisServer, exists, hgetall, pttl};
use redis::Value;

const A: &str = "8c1f0a4e-1111-4000-8000-000000000001:1";
const B: &str = "8c1f0a4e-2222-4000-8000-000000000002:7";
const C: &str = "8c1f0a4e-3333-4000-8000-000000000003:9";

fn script(name: &str) -> redis::Script {
    redis::Script::new(&common::lua(&format!("rwlock/{name}")))
}

/// Redisson's `suffixName(name, "")` base: `{name}`, or the name itself when
/// it has a `{`.
fn key_prefix(name: &str) -> String {
    if name.contains('{') { name.to_owned() } else { format!("{{{name}}}") }
}

fn timeout_prefix(name: &str, owner: &str) -> String {
    format!("{}:{owner}:rwlock_timeout", key_prefix(name))
}

fn channel(name: &str) -> String {
    if name.contains('{') { format!("redisson_rwlock:{name}") } else { format!("redisson_rwlock:{{{name}}}") }
}

fn writers(name: &str) -> String {
    if name.contains('{') {
        format!("keyholder_rwlock_writers:tagged:{name}")
    } else {
        format!("keyholder_rwlock_writers:{{{name}}}")
    }
}

fn token_key(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_lock_token:{name}")
    } else {
        format!("redisson_lock_token:{{{name}}}")
    }
}

fn w(owner: &str) -> String {
    format!("{owner}:write")
}

/// Redisson's own read acquire shape: no waiting-writers key.
fn read_acquire_plain(con: &mut redis::Connection, name: &str, lease: u64, owner: &str) -> Value {
    script("read_acquire.lua")
        .key(name)
        .key(timeout_prefix(name, owner))
        .arg(lease)
        .arg(owner)
        .arg(w(owner))
        .invoke(con)
        .unwrap()
}

fn read_acquire(con: &mut redis::Connection, name: &str, lease: u64, owner: &str) -> Value {
    script("read_acquire.lua")
        .key(name)
        .key(timeout_prefix(name, owner))
        .key(writers(name))
        .arg(lease)
        .arg(owner)
        .arg(w(owner))
        .invoke(con)
        .unwrap()
}

fn read_release(con: &mut redis::Connection, name: &str, owner: &str) -> Value {
    script("read_release.lua")
        .key(name)
        .key(channel(name))
        .key(timeout_prefix(name, owner))
        .key(key_prefix(name))
        .arg("0")
        .arg(owner)
        .invoke(con)
        .unwrap()
}

fn read_release_full(
    con: &mut redis::Connection,
    name: &str,
    owner: &str,
    latch: &str,
    request: u64,
    retry: bool,
) -> Value {
    script("read_release.lua")
        .key(name)
        .key(channel(name))
        .key(timeout_prefix(name, owner))
        .key(key_prefix(name))
        .key(latch)
        .key(writers(name))
        .arg("0")
        .arg(owner)
        .arg("publish")
        .arg(10_000)
        .arg(request)
        .arg(if retry { "1" } else { "0" })
        .invoke(con)
        .unwrap()
}

fn write_acquire_plain(con: &mut redis::Connection, name: &str, lease: u64, owner: &str) -> Value {
    script("write_acquire.lua").key(name).arg(lease).arg(w(owner)).invoke(con).unwrap()
}

/// keyholder's shape: waiting writers, upgrade check, optionally queueing.
fn write_acquire(
    con: &mut redis::Connection,
    name: &str,
    lease: u64,
    owner: &str,
    wait: Option<u64>,
) -> Value {
    let s = script("write_acquire.lua");
    let mut call = s.prepare_invoke();
    call.key(name).key(writers(name)).arg(lease).arg(w(owner)).arg(owner);
    match wait {
        Some(ms) => call.arg("1").arg(ms).arg(100),
        None => call.arg("0").arg(0).arg(0),
    };
    call.invoke(con).unwrap()
}

fn write_acquire_fenced(
    con: &mut redis::Connection,
    name: &str,
    lease: u64,
    owner: &str,
) -> redis::RedisResult<Value> {
    script("write_acquire.lua")
        .key(name)
        .key(writers(name))
        .key(token_key(name))
        .arg(lease)
        .arg(w(owner))
        .arg(owner)
        .invoke(con)
}

fn write_release(con: &mut redis::Connection, name: &str, lease: u64, owner: &str) -> Value {
    script("write_release.lua")
        .key(name)
        .key(channel(name))
        .arg("1")
        .arg(lease)
        .arg(w(owner))
        .invoke(con)
        .unwrap()
}

fn write_release_latched(
    con: &mut redis::Connection,
    name: &str,
    owner: &str,
    latch: &str,
    request: u64,
    retry: bool,
) -> Value {
    script("write_release.lua")
        .key(name)
        .key(channel(name))
        .key(latch)
        .arg("1")
        .arg(30_000)
        .arg(w(owner))
        .arg("publish")
        .arg(10_000)
        .arg(request)
        .arg(if retry { "1" } else { "0" })
        .invoke(con)
        .unwrap()
}

fn withdraw(con: &mut redis::Connection, name: &str, owner: &str) -> Value {
    script("write_withdraw.lua")
        .key(name)
        .key(writers(name))
        .key(channel(name))
        .arg(w(owner))
        .invoke(con)
        .unwrap()
}

fn force_unlock(con: &mut redis::Connection, name: &str, mode: &str) -> redis::RedisResult<Value> {
    let message = if mode == "write" { "1" } else { "0" };
    script("force_unlock.lua").key(name).key(channel(name)).arg(mode).arg(message).invoke(con)
}

fn read_renew(con: &mut redis::Connection, lease: u64, locks: &[(&str, &[&str])]) -> Value {
    let s = script("read_renew.lua");
    let mut call = s.prepare_invoke();
    call.arg(lease);
    for (name, owners) in locks {
        call.key(*name).key(key_prefix(name)).arg(owners.len());
        for owner in *owners {
            call.arg(*owner);
        }
    }
    call.invoke(con).unwrap()
}

fn read_is_locked(con: &mut redis::Connection, name: &str) -> Value {
    script("read_is_locked.lua").key(name).invoke(con).unwrap()
}

fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn pexpire(con: &mut redis::Connection, key: &str, ms: u64) {
    let _: i64 = redis::cmd("PEXPIRE").arg(key).arg(ms).query(con).unwrap();
}

fn is_wrongtype(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE")
}

#[test]
fn every_rwlock_script_documents_its_contract_in_a_header() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/rwlock");
    let mut scripts = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "lua") {
            continue;
        }
        scripts += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.display();
        assert!(text.starts_with("--"), "{file} does not open with a header comment");
        let header: String = text.lines().take_while(|l| l.starts_with("--")).collect::<Vec<_>>().join("\n");
        for word in ["KEYS[", "ARGV[", "Returns"] {
            assert!(header.contains(word), "{file}'s header does not document {word}");
        }
    }
    assert_eq!(scripts, 8, "lua/rwlock holds {scripts} scripts");
}

// ---- read acquire ----

#[test]
fn a_first_reader_creates_redissons_layout() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(read_acquire_plain(&mut con, "rw", 10_000, A), Value::Nil);
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "1")]));
    let ttl = pttl(&mut con, "rw");
    assert!(ttl > 9_000 && ttl <= 10_000, "PTTL {ttl}");
    let timeout = format!("{{rw}}:{A}:rwlock_timeout:1");
    let value: String = redis::cmd("GET").arg(&timeout).query(&mut con).unwrap();
    assert_eq!(value, "1");
    let ttl = pttl(&mut con, &timeout);
    assert!(ttl > 9_000 && ttl <= 10_000, "timeout key PTTL {ttl}");
}

#[test]
fn a_braced_name_keeps_its_braces_in_the_timeout_keys() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(read_acquire(&mut con, "{user}:1", 10_000, A), Value::Nil);
    assert!(exists(&mut con, &format!("{{user}}:1:{A}:rwlock_timeout:1")));
    assert_eq!(hgetall(&mut con, "{user}:1"), fields(&[("mode", "read"), (A, "1")]));
}

#[test]
fn many_readers_share_the_lock_and_reentry_adds_a_timeout_key_per_hold() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    assert_eq!(read_acquire(&mut con, "rw", 10_000, B), Value::Nil);
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "2"), (B, "1")]));
    for (owner, n) in [(A, 1), (A, 2), (B, 1)] {
        assert!(exists(&mut con, &format!("{{rw}}:{owner}:rwlock_timeout:{n}")), "{owner} hold {n}");
    }
}

#[test]
fn a_reader_never_shortens_the_locks_ttl() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(read_acquire(&mut con, "rw", 20_000, A), Value::Nil);
    assert_eq!(read_acquire(&mut con, "rw", 5_000, B), Value::Nil);
    assert!(pttl(&mut con, "rw") > 19_000);
    pexpire(&mut con, "rw", 1_000);
    assert_eq!(read_acquire(&mut con, "rw", 5_000, C), Value::Nil);
    let ttl = pttl(&mut con, "rw");
    assert!(ttl > 4_000 && ttl <= 5_000, "PTTL {ttl}");
}

#[test]
fn a_reader_is_refused_with_the_writers_pttl() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(write_acquire_plain(&mut con, "rw", 8_000, A), Value::Nil);
    let reply = int(&read_acquire(&mut con, "rw", 10_000, B));
    assert!(reply > 7_000 && reply <= 8_000, "reply {reply}");
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "write"), (&w(A), "1")]));
    assert!(!exists(&mut con, &format!("{{rw}}:{B}:rwlock_timeout:1")));
}

#[test]
fn the_writer_may_take_the_read_lock_downgrade() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(write_acquire(&mut con, "rw", 10_000, A, None), Value::Nil);
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "write"), (&w(A), "1"), (A, "1")]));
    assert!(exists(&mut con, &format!("{{rw}}:{A}:rwlock_timeout:1")));
    assert_eq!(read_is_locked(&mut con, "rw"), Value::Int(1));
}

#[test]
fn an_rlock_hash_at_the_name_is_another_kinds_lock_and_left_alone() {
    // Issue 21, item 1: a hash without "mode" (an RLock, spin or fair lock)
    // is WRONGTYPE, not a holder to wait for nor a lock to add "mode" to.
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: i64 = redis::cmd("HSET").arg("rw").arg(C).arg(1).query(&mut con).unwrap();
    pexpire(&mut con, "rw", 6_000);
    for owner in [A, C] {
        let e = script("read_acquire.lua")
            .key("rw")
            .key(timeout_prefix("rw", owner))
            .key(writers("rw"))
            .arg(10_000)
            .arg(owner)
            .arg(w(owner))
            .invoke::<Value>(&mut con)
            .unwrap_err();
        assert!(is_wrongtype(&e) && e.to_string().contains("another kind"), "{e}");
        let e = script("write_acquire.lua").key("rw").arg(10_000).arg(w(owner)).invoke::<Value>(&mut con);
        assert!(e.as_ref().is_err_and(is_wrongtype), "{e:?}");
    }
    assert_eq!(hgetall(&mut con, "rw"), fields(&[(C, "1")]));
    assert!(!exists(&mut con, &format!("{}:1", timeout_prefix("rw", C))));
}

#[test]
fn scripts_refuse_a_key_of_another_type_and_leave_it() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("str").arg("foreign").query(&mut con).unwrap();
    let read = script("read_acquire.lua")
        .key("str")
        .key(timeout_prefix("str", A))
        .arg(10_000)
        .arg(A)
        .arg(w(A))
        .invoke::<Value>(&mut con)
        .unwrap_err();
    assert!(is_wrongtype(&read), "{read}");
    let write =
        script("write_acquire.lua").key("str").arg(10_000).arg(w(A)).invoke::<Value>(&mut con).unwrap_err();
    assert!(is_wrongtype(&write), "{write}");
    let release = script("read_release.lua")
        .key("str")
        .key(channel("str"))
        .key(timeout_prefix("str", A))
        .key(key_prefix("str"))
        .arg("0")
        .arg(A)
        .invoke::<Value>(&mut con)
        .unwrap_err();
    assert!(is_wrongtype(&release), "{release}");
    let release = script("write_release.lua")
        .key("str")
        .key(channel("str"))
        .arg("1")
        .arg(10_000)
        .arg(w(A))
        .invoke::<Value>(&mut con)
        .unwrap_err();
    assert!(is_wrongtype(&release), "{release}");
    assert!(is_wrongtype(&force_unlock(&mut con, "str", "read").unwrap_err()));
    let value: String = redis::cmd("GET").arg("str").query(&mut con).unwrap();
    assert_eq!(value, "foreign");
    assert_eq!(read_is_locked(&mut con, "str"), Value::Int(0));
}

// ---- writer preference ----

#[test]
fn a_waiting_writer_holds_back_new_readers_but_not_reentry_or_its_own_downgrade() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    let reply = int(&write_acquire(&mut con, "rw", 10_000, B, Some(5_000)));
    assert!(reply > 9_000, "the writer is refused with the readers' PTTL: {reply}");
    let score: f64 = redis::cmd("ZSCORE").arg(writers("rw")).arg(w(B)).query(&mut con).unwrap();
    assert!(score > 0.0);

    // A new reader waits for the writer, a bounded while.
    let wait = int(&read_acquire(&mut con, "rw", 10_000, C));
    assert!(wait > 4_000 && wait <= 5_100, "wait {wait}");
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "1")]));
    // Redisson's shape (no waiting-writers key) does not know of it.
    assert_eq!(read_acquire_plain(&mut con, "rw", 10_000, C), Value::Nil);
    assert_eq!(read_release(&mut con, "rw", C), Value::Int(0));
    // The reader that holds already may re-enter.
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "2")]));
}

#[test]
fn the_readers_last_release_wakes_everyone_when_a_writer_waits_and_the_writer_gets_in() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    int(&write_acquire(&mut con, "rw", 10_000, B, Some(5_000)));
    assert_eq!(read_release_full(&mut con, "rw", A, "latch-a", 1, false), Value::Int(1));
    assert!(!exists(&mut con, "rw"));
    let messages = listener.drain_until_marker(&mut con, &channel("rw"));
    assert_eq!(messages, vec![(channel("rw"), "1".to_owned())]);

    assert_eq!(write_acquire(&mut con, "rw", 10_000, B, Some(5_000)), Value::Nil);
    let left: i64 = redis::cmd("ZCARD").arg(writers("rw")).query(&mut con).unwrap();
    assert_eq!(left, 0, "the writer left the waiting set on acquiring");
}

#[test]
fn stale_waiting_writers_hold_nobody_back() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: i64 = redis::cmd("ZADD").arg(writers("rw")).arg(1).arg(w(B)).query(&mut con).unwrap();
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    assert!(!exists(&mut con, &writers("rw")), "the stale entry was removed");
}

#[test]
fn a_writer_that_withdraws_last_wakes_the_readers() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    int(&write_acquire(&mut con, "rw", 10_000, B, Some(5_000)));
    int(&write_acquire(&mut con, "rw", 10_000, C, Some(5_000)));
    assert_eq!(withdraw(&mut con, "rw", B), Value::Int(0), "another writer still waits");
    assert_eq!(withdraw(&mut con, "rw", B), Value::Int(0), "no such entry any more");
    assert_eq!(withdraw(&mut con, "rw", C), Value::Int(1));
    let messages = listener.drain_until_marker(&mut con, &channel("rw"));
    assert_eq!(messages, vec![(channel("rw"), "1".to_owned())]);
    assert_eq!(read_acquire(&mut con, "rw", 10_000, C), Value::Nil);
}

#[test]
fn a_withdrawal_while_a_writer_holds_publishes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    assert_eq!(write_acquire(&mut con, "rw", 10_000, A, None), Value::Nil);
    int(&write_acquire(&mut con, "rw", 10_000, B, Some(5_000)));
    assert_eq!(withdraw(&mut con, "rw", B), Value::Int(0));
    assert!(listener.drain_until_marker(&mut con, &channel("rw")).is_empty());
}

// ---- write acquire ----

#[test]
fn a_writer_creates_redissons_layout_and_reentry_adds_the_lease() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(write_acquire_plain(&mut con, "rw", 10_000, A), Value::Nil);
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "write"), (&w(A), "1")]));
    assert_eq!(write_acquire_plain(&mut con, "rw", 10_000, A), Value::Nil);
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "write"), (&w(A), "2")]));
    let ttl = pttl(&mut con, "rw");
    assert!(ttl > 19_000 && ttl <= 20_000, "PTTL {ttl}");
}

#[test]
fn writers_exclude_each_other_and_readers() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(write_acquire(&mut con, "rw", 10_000, A, None), Value::Nil);
    let reply = int(&write_acquire(&mut con, "rw", 10_000, B, None));
    assert!(reply > 9_000 && reply <= 10_000);
    assert!(!exists(&mut con, &writers("rw")), "a non-waiting caller is not recorded");
    assert_eq!(write_release(&mut con, "rw", 10_000, A), Value::Int(1));
    assert_eq!(read_acquire(&mut con, "rw", 10_000, B), Value::Nil);
    let reply = int(&write_acquire(&mut con, "rw", 10_000, A, None));
    assert!(reply > 9_000 && reply <= 10_000);
}

#[test]
fn an_upgrade_is_refused_with_minus_three_and_not_queued() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(read_acquire(&mut con, "rw", 10_000, A), Value::Nil);
    assert_eq!(write_acquire(&mut con, "rw", 10_000, A, Some(5_000)), Value::Int(-3));
    assert!(!exists(&mut con, &writers("rw")));
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "1")]));
    // Redisson's shape (no reader id) just reports the PTTL, as Java does.
    let reply = int(&write_acquire_plain(&mut con, "rw", 10_000, A));
    assert!(reply > 9_000);
    assert_eq!(
        write_acquire_fenced(&mut con, "rw", 10_000, A).unwrap(),
        Value::Array(vec![Value::Int(-3), Value::Int(-1)])
    );
}

#[test]
fn a_fenced_writer_mints_a_token_per_acquisition_from_the_shared_counter() {
    let server = RedisServer::start();
    let mut con = server.conn();
    // A counter below the server's clock (Redisson's, counting from 1)
    // gives way to the clock in microseconds; one ahead of it goes on by 1.
    let _: () = redis::cmd("SET").arg(token_key("rw")).arg(41).query(&mut con).unwrap();
    let before = common::server_micros(&mut con);
    let Value::Array(reply) = write_acquire_fenced(&mut con, "rw", 10_000, A).unwrap() else { panic!() };
    let Value::BulkString(digits) = &reply[1] else { panic!("{reply:?}") };
    let token: u64 = std::str::from_utf8(digits).unwrap().parse().unwrap();
    assert_eq!(reply[0], Value::Int(-1));
    assert!((before..=common::server_micros(&mut con)).contains(&token), "{token} is not the clock");
    let _: () = redis::cmd("SET").arg(token_key("rw")).arg("9000000000000000042").query(&mut con).unwrap();
    let reply = write_acquire_fenced(&mut con, "rw", 10_000, A).unwrap();
    assert_eq!(reply, Value::Array(vec![Value::Int(-1), Value::BulkString(b"9000000000000000043".to_vec())]));
    let Value::Array(refused) = write_acquire_fenced(&mut con, "rw", 10_000, B).unwrap() else { panic!() };
    assert!(int(&refused[0]) > 0);
    assert_eq!(refused[1], Value::Int(-1));
    let token: String = redis::cmd("GET").arg(token_key("rw")).query(&mut con).unwrap();
    assert_eq!(token, "9000000000000000043");
    assert_eq!(pttl(&mut con, &token_key("rw")), -1, "the counter has no TTL");
}

#[test]
fn a_bad_counter_is_an_error_and_nothing_changes() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg(token_key("rw")).arg("nope").query(&mut con).unwrap();
    let err = write_acquire_fenced(&mut con, "rw", 10_000, A).unwrap_err();
    assert!(err.to_string().contains("BADCOUNTER"), "{err}");
    assert!(!exists(&mut con, "rw"));
    let _: () = redis::cmd("DEL").arg(token_key("rw")).query(&mut con).unwrap();
    let _: i64 = redis::cmd("RPUSH").arg(token_key("rw")).arg("x").query(&mut con).unwrap();
    let err = write_acquire_fenced(&mut con, "rw", 10_000, A).unwrap_err();
    assert!(is_wrongtype(&err), "{err}");
    assert!(!exists(&mut con, "rw"));
}

// ---- read release ----

#[test]
fn a_read_release_drops_the_newest_hold_and_its_timeout_key() {
    let server = RedisServer::start();
    let mut con = server.conn();
    read_acquire(&mut con, "rw", 10_000, A);
    read_acquire(&mut con, "rw", 10_000, A);
    assert_eq!(read_release(&mut con, "rw", A), Value::Int(0));
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "1")]));
    assert!(exists(&mut con, &format!("{{rw}}:{A}:rwlock_timeout:1")));
    assert!(!exists(&mut con, &format!("{{rw}}:{A}:rwlock_timeout:2")));
}

#[test]
fn the_last_read_release_deletes_and_publishes_zero() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    read_acquire(&mut con, "rw", 10_000, A);
    read_acquire(&mut con, "rw", 10_000, B);
    assert_eq!(read_release(&mut con, "rw", A), Value::Int(0));
    assert!(listener.drain_until_marker(&mut con, &channel("rw")).is_empty());
    assert_eq!(read_release(&mut con, "rw", B), Value::Int(1));
    assert!(!exists(&mut con, "rw"));
    let messages = listener.drain_until_marker(&mut con, &channel("rw"));
    assert_eq!(messages, vec![(channel("rw"), "0".to_owned())]);
}

#[test]
fn a_release_sets_the_ttl_to_the_longest_live_read_hold() {
    let server = RedisServer::start();
    let mut con = server.conn();
    read_acquire(&mut con, "rw", 30_000, A);
    read_acquire(&mut con, "rw", 4_000, B);
    read_acquire(&mut con, "rw", 4_000, C);
    assert_eq!(read_release(&mut con, "rw", A), Value::Int(0));
    let ttl = pttl(&mut con, "rw");
    assert!(ttl > 3_000 && ttl <= 4_000, "PTTL {ttl}");
}

#[test]
fn a_dead_readers_expired_timeout_keys_do_not_keep_the_lock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    read_acquire(&mut con, "rw", 10_000, A);
    read_acquire(&mut con, "rw", 10_000, B);
    // B dies: its timeout key expires, its field stays.
    let _: i64 = redis::cmd("DEL").arg(format!("{{rw}}:{B}:rwlock_timeout:1")).query(&mut con).unwrap();
    assert_eq!(read_release(&mut con, "rw", A), Value::Int(1));
    assert!(!exists(&mut con, "rw"));
    let messages = listener.drain_until_marker(&mut con, &channel("rw"));
    assert_eq!(messages, vec![(channel("rw"), "0".to_owned())]);
}

#[test]
fn a_read_release_by_a_non_holder_is_nil_and_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    read_acquire(&mut con, "rw", 10_000, A);
    assert_eq!(read_release(&mut con, "rw", B), Value::Nil);
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "1")]));
    assert!(listener.drain_until_marker(&mut con, &channel("rw")).is_empty());
    // As in Redisson: a missing lock publishes the message and replies nil.
    assert_eq!(read_release(&mut con, "gone", A), Value::Nil);
    let messages = listener.drain_until_marker(&mut con, &channel("rw"));
    assert!(messages.is_empty());
}

#[test]
fn a_downgraded_writer_releasing_its_read_keeps_the_write_lock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    write_acquire(&mut con, "rw", 30_000, A, None);
    read_acquire(&mut con, "rw", 5_000, A);
    assert_eq!(read_release(&mut con, "rw", A), Value::Int(0));
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "write"), (&w(A), "1")]));
    let ttl = pttl(&mut con, "rw");
    assert!(ttl > 29_000, "the writer's lease was cut short: PTTL {ttl}");
}

#[test]
fn a_latched_read_release_retried_returns_the_first_outcome() {
    let server = RedisServer::start();
    let mut con = server.conn();
    read_acquire(&mut con, "rw", 10_000, A);
    read_acquire(&mut con, "rw", 10_000, A);
    read_acquire(&mut con, "rw", 10_000, B);
    assert_eq!(read_release_full(&mut con, "rw", A, "latch-a", 7, false), Value::Int(0));
    assert_eq!(read_release_full(&mut con, "rw", A, "latch-a", 7, true), Value::Int(0));
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "1"), (B, "1")]));
    let latch: String = redis::cmd("GET").arg("latch-a").query(&mut con).unwrap();
    assert_eq!(latch, "7:0");
    // A new request id is a new release.
    assert_eq!(read_release_full(&mut con, "rw", A, "latch-a", 8, true), Value::Int(0));
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (B, "1")]));
}

// ---- write release ----

#[test]
fn the_last_write_release_deletes_and_wakes_all() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    write_acquire(&mut con, "rw", 10_000, A, None);
    write_acquire(&mut con, "rw", 10_000, A, None);
    assert_eq!(write_release(&mut con, "rw", 7_000, A), Value::Int(0));
    let ttl = pttl(&mut con, "rw");
    assert!(ttl > 6_000 && ttl <= 7_000, "PTTL {ttl}");
    assert_eq!(write_release(&mut con, "rw", 7_000, A), Value::Int(1));
    assert!(!exists(&mut con, "rw"));
    let messages = listener.drain_until_marker(&mut con, &channel("rw"));
    assert_eq!(messages, vec![(channel("rw"), "1".to_owned())]);
}

#[test]
fn a_write_release_with_read_holds_left_switches_to_read_silently() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    write_acquire(&mut con, "rw", 10_000, A, None);
    read_acquire(&mut con, "rw", 10_000, A);
    assert_eq!(write_release(&mut con, "rw", 10_000, A), Value::Int(1));
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "read"), (A, "1")]));
    assert!(listener.drain_until_marker(&mut con, &channel("rw")).is_empty());
    assert_eq!(read_acquire(&mut con, "rw", 10_000, B), Value::Nil, "other readers may now enter");
}

#[test]
fn a_write_release_by_a_non_holder_or_in_read_mode_is_nil() {
    let server = RedisServer::start();
    let mut con = server.conn();
    write_acquire(&mut con, "rw", 10_000, A, None);
    assert_eq!(write_release(&mut con, "rw", 10_000, B), Value::Nil);
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "write"), (&w(A), "1")]));
    read_acquire(&mut con, "other", 10_000, A);
    assert_eq!(write_release(&mut con, "other", 10_000, A), Value::Nil);
    assert_eq!(hgetall(&mut con, "other"), fields(&[("mode", "read"), (A, "1")]));
}

#[test]
fn a_latched_write_release_retried_returns_the_first_outcome() {
    let server = RedisServer::start();
    let mut con = server.conn();
    write_acquire(&mut con, "rw", 10_000, A, None);
    write_acquire(&mut con, "rw", 10_000, A, None);
    assert_eq!(write_release_latched(&mut con, "rw", A, "latch-w", 3, false), Value::Int(0));
    assert_eq!(write_release_latched(&mut con, "rw", A, "latch-w", 3, true), Value::Int(0));
    assert_eq!(hgetall(&mut con, "rw"), fields(&[("mode", "write"), (&w(A), "1")]));
    assert_eq!(write_release_latched(&mut con, "rw", A, "latch-w", 4, false), Value::Int(1));
    assert_eq!(write_release_latched(&mut con, "rw", A, "latch-w", 4, true), Value::Int(1));
    let latch: String = redis::cmd("GET").arg("latch-w").query(&mut con).unwrap();
    assert_eq!(latch, "4:1");
    let ttl = pttl(&mut con, "latch-w");
    assert!(ttl > 9_000 && ttl <= 10_000);
}

#[test]
fn a_foreign_key_at_the_latch_is_never_overwritten() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("latch-x").arg("not a latch").query(&mut con).unwrap();
    write_acquire(&mut con, "rw", 10_000, A, None);
    assert_eq!(write_release_latched(&mut con, "rw", A, "latch-x", 1, false), Value::Int(1));
    let value: String = redis::cmd("GET").arg("latch-x").query(&mut con).unwrap();
    assert_eq!(value, "not a latch");
}

// ---- force unlock, is_locked, renewal ----

#[test]
fn force_unlock_acts_only_on_its_own_mode() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = Listener::start(&server, &[&channel("rw")]);
    read_acquire(&mut con, "rw", 10_000, A);
    assert_eq!(force_unlock(&mut con, "rw", "write").unwrap(), Value::Int(0));
    assert!(exists(&mut con, "rw"));
    assert_eq!(force_unlock(&mut con, "rw", "read").unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "rw"));
    write_acquire(&mut con, "rw", 10_000, A, None);
    assert_eq!(force_unlock(&mut con, "rw", "read").unwrap(), Value::Int(0));
    assert_eq!(force_unlock(&mut con, "rw", "write").unwrap(), Value::Int(1));
    assert_eq!(force_unlock(&mut con, "rw", "write").unwrap(), Value::Int(0));
    let messages = listener.drain_until_marker(&mut con, &channel("rw"));
    assert_eq!(messages, vec![(channel("rw"), "0".to_owned()), (channel("rw"), "1".to_owned())]);
}

#[test]
fn read_is_locked_follows_redisson() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(read_is_locked(&mut con, "rw"), Value::Int(0));
    write_acquire(&mut con, "rw", 10_000, A, None);
    assert_eq!(read_is_locked(&mut con, "rw"), Value::Int(0));
    read_acquire(&mut con, "rw", 10_000, A);
    assert_eq!(read_is_locked(&mut con, "rw"), Value::Int(1));
    read_acquire(&mut con, "r2", 10_000, B);
    assert_eq!(read_is_locked(&mut con, "r2"), Value::Int(1));
}

#[test]
fn read_renewal_renews_live_owners_hash_and_timeout_keys_only() {
    let server = RedisServer::start();
    let mut con = server.conn();
    read_acquire(&mut con, "rw", 2_000, A);
    read_acquire(&mut con, "rw", 2_000, A);
    read_acquire(&mut con, "rw", 2_000, C);
    read_acquire(&mut con, "{t}:2", 2_000, B);
    let reply = read_renew(&mut con, 20_000, &[("rw", &[A, B]), ("{t}:2", &[A]), ("none", &[B])]);
    assert_eq!(reply, Value::Array(vec![Value::Int(1), Value::Int(0), Value::Int(0)]));
    assert!(pttl(&mut con, "rw") > 19_000);
    for n in [1, 2] {
        assert!(pttl(&mut con, &format!("{{rw}}:{A}:rwlock_timeout:{n}")) > 19_000);
    }
    // Another client's reader (C) is not kept alive: the zombie fix.
    assert!(pttl(&mut con, &format!("{{rw}}:{C}:rwlock_timeout:1")) <= 2_000);
    assert!(pttl(&mut con, "{t}:2") <= 2_000);
    assert!(!exists(&mut con, "none"));
}

#[test]
fn a_read_hold_renewed_outlives_its_first_lease() {
    let server = RedisServer::start();
    let mut con = server.conn();
    read_acquire(&mut con, "rw", 1_000, A);
    read_acquire(&mut con, "rw", 1_000, B);
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(read_renew(&mut con, 1_000, &[("rw", &[A])]), Value::Array(vec![Value::Int(1)]));
    }
    // B was not renewed: its timeout key is gone, A's is alive.
    assert!(!exists(&mut con, &format!("{{rw}}:{B}:rwlock_timeout:1")));
    assert_eq!(read_release(&mut con, "rw", A), Value::Int(1), "B's dead hold does not keep the lock");
}
