//! Lua contract tests for the seams between kinds (issue 21, items 1 and 2):
//! every script that treats a hash as its lock, run against the other
//! layout at the same name (a read-write lock's hash, with its `mode`
//! field, under the plain, spin, fair and RedLock scripts; a plain hash,
//! without `mode`, under the read-write scripts), answers `WRONGTYPE` (or,
//! for a renewal, "not held") and writes nothing; and every script that
//! does arithmetic on a stored count is exact over the 64-bit range or
//! refuses before writing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Listener, RedisServer};
use redis::Value;

/// One owner id for every kind: the same thread of the same client, the
/// case the issue found (a read holder's field is the owner id the plain
/// kinds look for).
const OWNER: &str = "8c1f0a4e-1111-4000-8000-000000000001:1";
const CLIENT: &str = "8c1f0a4e-1111-4000-8000-000000000001";

fn script(path: &str) -> redis::Script {
    redis::Script::new(&common::lua(path))
}

fn braced(prefix: &str, name: &str) -> String {
    format!("{prefix}:{{{name}}}")
}

fn now_ms(con: &mut redis::Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1000 + micros / 1000
}

/// Every key of the database with its type, value and whether it has a TTL:
/// a script that "writes nothing" leaves this unchanged.
fn state(con: &mut redis::Connection) -> BTreeMap<String, (String, String, bool)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.into_iter()
        .map(|key| {
            let kind: String = redis::cmd("TYPE").arg(&key).query(con).unwrap();
            let value = match kind.as_str() {
                "string" => redis::cmd("GET").arg(&key).query::<String>(con).unwrap(),
                "hash" => format!("{:?}", common::hgetall(con, &key)),
                "zset" => format!(
                    "{:?}",
                    redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query::<Vec<String>>(con)
                        .unwrap()
                ),
                "list" => format!(
                    "{:?}",
                    redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).query::<Vec<String>>(con).unwrap()
                ),
                other => other.to_owned(),
            };
            let ttl = common::pttl(con, &key) > 0;
            (key, (kind, value, ttl))
        })
        .collect()
}

/// A read-write lock `name` held for reading by OWNER (Redisson's layout).
fn read_held(con: &mut redis::Connection, name: &str) {
    let _: () = redis::cmd("HSET").arg(name).arg("mode").arg("read").arg(OWNER).arg(1).query(con).unwrap();
    let _: () = redis::cmd("PEXPIRE").arg(name).arg(30_000).query(con).unwrap();
    let timeout = format!("{{{name}}}:{OWNER}:rwlock_timeout:1");
    let _: () = redis::cmd("SET").arg(timeout).arg(1).arg("PX").arg(30_000).query(con).unwrap();
}

/// A plain (RLock, spin or fair) lock `name` held by OWNER.
fn plain_held(con: &mut redis::Connection, name: &str) {
    let _: () = redis::cmd("HSET").arg(name).arg(OWNER).arg(1).query(con).unwrap();
    let _: () = redis::cmd("PEXPIRE").arg(name).arg(30_000).query(con).unwrap();
}

fn is_another_kind(reply: &redis::RedisResult<Value>) -> bool {
    matches!(reply, Err(e) if e.to_string().contains("WRONGTYPE") && e.to_string().contains("another kind's lock"))
}

/// The plain-layout scripts (lua/lock, lua/spin_lock, lua/fair,
/// lua/red_lock), each as one call on lock `n`; `renew` calls answer an
/// array of "held" flags instead of an error.
fn plain_calls(con: &mut redis::Connection, n: &str) -> Vec<(&'static str, redis::RedisResult<Value>)> {
    let now = now_ms(con);
    let (marker, queue, grants) = (
        braced("keyholder_lock_next", n),
        braced("keyholder_lock_queue", n),
        braced("keyholder_lock_grants", n),
    );
    // keyholder's listening channel (a channel, no key).
    let listening = braced("keyholder_lock__listening", n);
    let channel = braced("redisson_lock__channel", n);
    let token = braced("redisson_lock_token", n);
    let latch = format!("{}:{:032x}", braced("redisson_unlock_latch", n), 1);
    let (fqueue, ftimeouts, fgrants) = (
        braced("redisson_lock_queue", n),
        braced("redisson_lock_timeout", n),
        braced("keyholder_fair_grants", n),
    );
    let wake = braced("keyholder_lock__wake", n);
    let mut calls = Vec::new();
    calls.push((
        "lock/acquire (Redisson's rule)",
        script("lock/acquire.lua").key(n).arg(30_000).arg(OWNER).invoke(con),
    ));
    for mode in ["1", "0"] {
        calls.push((
            "lock/acquire",
            script("lock/acquire.lua")
                .key(n)
                .key(&marker)
                .arg(30_000)
                .arg(OWNER)
                .arg(mode)
                .arg(CLIENT)
                .invoke(con),
        ));
    }
    calls.push((
        "lock/acquire queued, fenced",
        script("lock/acquire.lua")
            .key(n)
            .key(&marker)
            .key(&queue)
            .key(&grants)
            .key(&token)
            .arg(30_000)
            .arg(OWNER)
            .arg("1")
            .arg(CLIENT)
            .arg("1")
            .arg(1_000)
            .arg("1")
            .invoke(con),
    ));
    calls.push((
        "lock/release",
        script("lock/release.lua")
            .key(n)
            .key(&channel)
            .key(&marker)
            .key(&queue)
            .key(&grants)
            .key(&listening)
            .arg(30_000)
            .arg(OWNER)
            .arg(300)
            .arg(format!("1000 5 0 2 {CLIENT} {wake}"))
            .invoke(con),
    ));
    calls.push((
        "lock/handoff",
        script("lock/handoff.lua")
            .key(n)
            .key(&channel)
            .key(&marker)
            .key(&latch)
            .key(&listening)
            .key(&grants)
            .arg("0")
            .arg(30_000)
            .arg(OWNER)
            .arg(format!("{CLIENT}:2"))
            .arg("publish")
            .arg(10_000)
            .arg(1)
            .arg("0")
            .arg(CLIENT)
            .invoke(con),
    ));
    calls.push((
        "lock/force_unlock",
        script("lock/force_unlock.lua").key(n).key(&channel).arg("0").invoke(con),
    ));
    calls.push((
        "lock/job_finish",
        script("lock/job_finish.lua").key(n).key(&channel).arg(OWNER).arg(0).arg("0").invoke(con),
    ));
    calls.push((
        "lock/dequeue",
        script("lock/dequeue.lua")
            .key(&queue)
            .key(&grants)
            .key(&marker)
            .key(n)
            .key(&channel)
            .arg(CLIENT)
            .arg(OWNER)
            .arg("0")
            .arg("publish")
            .invoke(con),
    ));
    calls.push(("lock/renew", script("lock/renew.lua").key(n).arg(30_000).arg(OWNER).invoke(con)));
    calls.push((
        "lock/renew (cluster form)",
        script("lock/renew.lua").arg(30_000).arg(n).arg(OWNER).invoke(con),
    ));
    for mode in ["1", "0"] {
        calls.push((
            "spin_lock/acquire",
            script("spin_lock/acquire.lua").key(n).arg(30_000).arg(OWNER).arg(mode).invoke(con),
        ));
    }
    calls.push((
        "spin_lock/release",
        script("spin_lock/release.lua").key(n).arg(30_000).arg(OWNER).invoke(con),
    ));
    calls.push(("spin_lock/force_unlock", script("lock/force_unlock.lua").key(n).invoke(con)));
    for mode in ["1", "0"] {
        calls.push((
            "fair/acquire",
            script("fair/acquire.lua")
                .key(n)
                .key(&fqueue)
                .key(&ftimeouts)
                .key(&channel)
                .key(&fgrants)
                .arg(30_000)
                .arg(OWNER)
                .arg(5_000)
                .arg(now)
                .arg("1")
                .arg(mode)
                .arg("publish")
                .arg(7)
                .invoke(con),
        ));
    }
    calls.push((
        "fair/release",
        script("fair/release.lua")
            .key(n)
            .key(&fqueue)
            .key(&ftimeouts)
            .key(&channel)
            .key(&fgrants)
            .arg("0")
            .arg(30_000)
            .arg(OWNER)
            .arg(now)
            .arg("publish")
            .arg(0)
            .arg(0)
            .arg("0")
            .arg(braced("keyholder_fair__grant", n))
            .invoke(con),
    ));
    calls.push((
        "fair/dequeue",
        script("fair/dequeue.lua")
            .key(n)
            .key(&fqueue)
            .key(&ftimeouts)
            .key(&channel)
            .key(&fgrants)
            .arg(OWNER)
            .arg(5_000)
            .arg("publish")
            .invoke(con),
    ));
    calls.push((
        "fair/force_unlock",
        script("fair/force_unlock.lua")
            .key(n)
            .key(&fqueue)
            .key(&ftimeouts)
            .key(&channel)
            .arg("0")
            .arg(now)
            .arg("publish")
            .invoke(con),
    ));
    calls.push((
        "red_lock/raise_token",
        script("red_lock/raise_token.lua").key(n).key(&token).arg(OWNER).arg("5").invoke(con),
    ));
    calls
}

#[test]
fn plain_spin_fair_and_redlock_scripts_refuse_a_read_write_lock_and_write_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let published = common::calls_of(&mut con, "publish");
    read_held(&mut con, "k");
    let before = state(&mut con);
    let calls = plain_calls(&mut con, "k");
    assert!(calls.len() >= 20, "{} calls", calls.len());
    for (what, reply) in calls {
        match what {
            // A renewal reports the hold lost (a batch must not fail).
            "lock/renew" | "lock/renew (cluster form)" => {
                assert_eq!(reply.unwrap(), Value::Array(vec![Value::Int(0)]), "{what}");
            }
            // Never a grant to give back: nothing done, "0".
            "lock/dequeue" => assert_eq!(reply.unwrap(), Value::Int(0), "{what}"),
            // A job's run no longer holds it: "0", nothing done.
            "lock/job_finish" => assert_eq!(reply.unwrap(), Value::Int(0), "{what}"),
            _ => assert!(is_another_kind(&reply), "{what}: {reply:?}"),
        }
        assert_eq!(state(&mut con), before, "{what} wrote something");
    }
    assert_eq!(common::calls_of(&mut con, "publish"), published, "something was published");
}

/// The read-write scripts, each as one call on lock `n` by OWNER.
fn rw_calls(con: &mut redis::Connection, n: &str) -> Vec<(&'static str, redis::RedisResult<Value>)> {
    let writer = format!("{OWNER}:write");
    let (prefix, keyprefix) = (format!("{{{n}}}:{OWNER}:rwlock_timeout"), format!("{{{n}}}"));
    let (channel, writers) = (braced("redisson_rwlock", n), braced("keyholder_rwlock_writers", n));
    let latch = format!("{}:{:032x}", braced("redisson_unlock_latch", n), 1);
    vec![
        (
            "read_acquire",
            script("rwlock/read_acquire.lua")
                .key(n)
                .key(&prefix)
                .key(&writers)
                .arg(30_000)
                .arg(OWNER)
                .arg(&writer)
                .invoke(con),
        ),
        (
            "write_acquire",
            script("rwlock/write_acquire.lua")
                .key(n)
                .key(&writers)
                .key(braced("redisson_lock_token", n))
                .arg(30_000)
                .arg(&writer)
                .arg(OWNER)
                .arg("1")
                .arg(5_000)
                .arg(1_000)
                .invoke(con),
        ),
        (
            "read_release",
            script("rwlock/read_release.lua")
                .key(n)
                .key(&channel)
                .key(&prefix)
                .key(&keyprefix)
                .key(&latch)
                .key(&writers)
                .arg("0")
                .arg(OWNER)
                .arg("publish")
                .arg(10_000)
                .arg(1)
                .arg("0")
                .invoke(con),
        ),
        (
            "write_release",
            script("rwlock/write_release.lua")
                .key(n)
                .key(&channel)
                .key(&latch)
                .arg("1")
                .arg(30_000)
                .arg(&writer)
                .arg("publish")
                .arg(10_000)
                .arg(2)
                .arg("0")
                .invoke(con),
        ),
        (
            "force_unlock read",
            script("rwlock/force_unlock.lua").key(n).key(&channel).arg("read").arg("0").invoke(con),
        ),
        (
            "force_unlock write",
            script("rwlock/force_unlock.lua").key(n).key(&channel).arg("write").arg("1").invoke(con),
        ),
        (
            "read_renew",
            script("rwlock/read_renew.lua").key(n).key(&keyprefix).arg(30_000).arg(1).arg(OWNER).invoke(con),
        ),
    ]
}

#[test]
fn read_write_scripts_refuse_a_plain_lock_hash_and_write_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let published = common::calls_of(&mut con, "publish");
    // OWNER's plain hold (its field is what a read holder's would be), and
    // a plain hold of its write owner id too: neither is a read-write lock.
    for field_owner in [OWNER.to_owned(), format!("{OWNER}:write")] {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let _: () = redis::cmd("HSET").arg("k").arg(&field_owner).arg(1).query(&mut con).unwrap();
        let _: () = redis::cmd("PEXPIRE").arg("k").arg(30_000).query(&mut con).unwrap();
        let before = state(&mut con);
        for (what, reply) in rw_calls(&mut con, "k") {
            if what == "read_renew" {
                assert_eq!(reply.unwrap(), Value::Array(vec![Value::Int(0)]), "{what}");
            } else {
                assert!(is_another_kind(&reply), "{what} ({field_owner}): {reply:?}");
            }
            assert_eq!(state(&mut con), before, "{what} wrote something");
        }
    }
    assert_eq!(common::calls_of(&mut con, "publish"), published, "something was published");
}

#[test]
fn each_layout_keeps_working_on_its_own_hash() {
    // The guards cost the scripts nothing in meaning: on their own layout
    // the same calls succeed (a control for the two tests above).
    let server = RedisServer::start();
    let mut con = server.conn();
    plain_held(&mut con, "p");
    let renew = script("lock/renew.lua").key("p").arg(30_000).arg(OWNER).invoke::<Value>(&mut con).unwrap();
    assert_eq!(renew, Value::Array(vec![Value::Int(1)]));
    let spin =
        script("spin_lock/acquire.lua").key("p").arg(30_000).arg(OWNER).invoke::<Value>(&mut con).unwrap();
    assert_eq!(spin, Value::Nil, "Redisson's rule: RLock and RSpinLock share the hash, and re-enter it");
    let release =
        script("spin_lock/release.lua").key("p").arg(30_000).arg(OWNER).invoke::<Value>(&mut con).unwrap();
    assert_eq!(release, Value::Int(0));
    // A write hold of a read-write lock is renewed by lock/renew.lua too.
    let writer = format!("{OWNER}:write");
    let _: () =
        redis::cmd("HSET").arg("w").arg("mode").arg("write").arg(&writer).arg(1).query(&mut con).unwrap();
    let renew = script("lock/renew.lua").key("w").arg(30_000).arg(&writer).invoke::<Value>(&mut con).unwrap();
    assert_eq!(renew, Value::Array(vec![Value::Int(1)]));
    assert!(common::pttl(&mut con, "w") > 0);
    read_held(&mut con, "r");
    let keyprefix = "{r}".to_owned();
    let renew = script("rwlock/read_renew.lua")
        .key("r")
        .key(&keyprefix)
        .arg(30_000)
        .arg(1)
        .arg(OWNER)
        .invoke::<Value>(&mut con);
    assert_eq!(renew.unwrap(), Value::Array(vec![Value::Int(1)]));
}

// ---- item 2: exact counts --------------------------------------------------

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn set(con: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("SET").arg(key).arg(value).query(con).unwrap();
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        Value::Int(n) => n.to_string(),
        other => panic!("expected a count, got {other:?}"),
    }
}

fn is_overflow(reply: &redis::RedisResult<Value>) -> bool {
    matches!(reply, Err(e) if e.to_string().contains("OVERFLOW"))
}

const MAX: &str = "9223372036854775807";
const MIN: &str = "-9223372036854775808";

#[test]
fn semaphore_counts_are_exact_over_the_64_bit_range_or_refused_unchanged() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let channel = "redisson_sc:{s}";
    let add = |con: &mut redis::Connection, delta: &str| {
        script("semaphore/add_permits.lua")
            .key("s")
            .key(channel)
            .arg(delta)
            .arg("publish")
            .invoke::<Value>(con)
    };
    let release = |con: &mut redis::Connection, n: u32| {
        script("semaphore/release.lua").key("s").key(channel).arg(n).arg("publish").invoke::<Value>(con)
    };
    let listener = Listener::start(&server, &[channel]);
    // The issue's cases: i64::MAX, 10^17 + 1, 2^53 + 1.
    for delta in [MAX, "100000000000000001", "9007199254740993", MIN] {
        let _: () = redis::cmd("DEL").arg("s").query(&mut con).unwrap();
        assert_eq!(text(&add(&mut con, delta).unwrap()), delta);
        assert_eq!(get(&mut con, "s").as_deref(), Some(delta));
        assert_eq!(listener.next(Duration::from_secs(2)), Some((channel.to_owned(), delta.to_owned())));
    }
    // Past the range: refused, nothing written, nothing published.
    set(&mut con, "s", MAX);
    let _: () = redis::cmd("PEXPIRE").arg("s").arg(60_000).query(&mut con).unwrap();
    assert!(is_overflow(&add(&mut con, "1")));
    assert!(is_overflow(&release(&mut con, 1)));
    assert_eq!(get(&mut con, "s").as_deref(), Some(MAX));
    assert!(common::pttl(&mut con, "s") > 0, "the refused call dropped the TTL");
    set(&mut con, "s", MIN);
    assert!(is_overflow(&add(&mut con, "-1")));
    assert_eq!(get(&mut con, "s").as_deref(), Some(MIN));
    assert_eq!(listener.next(Duration::from_millis(200)), None);
    // Near the top, exact: release and drain return the stored digits.
    set(&mut con, "s", "9223372036854775800");
    match release(&mut con, 7).unwrap() {
        Value::Array(reply) => assert_eq!(text(&reply[0]), MAX, "the count, then who heard it"),
        other => panic!("release answers {{count, listeners}}, got {other:?}"),
    }
    let try_acquire = script("semaphore/try_acquire.lua").key("s").arg(3).invoke::<Value>(&mut con).unwrap();
    assert_eq!(try_acquire, Value::Int(1));
    assert_eq!(get(&mut con, "s").as_deref(), Some("9223372036854775804"));
    let drained = script("semaphore/drain.lua").key("s").arg("").invoke::<Value>(&mut con).unwrap();
    assert_eq!(text(&drained), "9223372036854775804");
    // Values INCRBY would refuse are no count (leading zeros, past the range).
    for bad in ["007", "-0", "9223372036854775808", "-9223372036854775809"] {
        set(&mut con, "s", bad);
        let reply = add(&mut con, "1");
        assert!(matches!(&reply, Err(e) if e.to_string().contains("BADCOUNT")), "{bad}: {reply:?}");
        assert_eq!(get(&mut con, "s").as_deref(), Some(bad));
    }
}

#[test]
fn permit_semaphore_counts_are_exact_and_an_overflowing_reclaim_writes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (channel, timeouts) = ("redisson_sc:{p}", "{p}:timeout");
    let add = |con: &mut redis::Connection, delta: &str| {
        script("permit_semaphore/add_permits.lua")
            .key("p")
            .key(channel)
            .arg(delta)
            .arg("publish")
            .invoke::<Value>(con)
    };
    assert_eq!(text(&add(&mut con, MAX).unwrap()), MAX);
    assert_eq!(get(&mut con, "p").as_deref(), Some(MAX));
    assert!(is_overflow(&add(&mut con, "1")));
    assert_eq!(get(&mut con, "p").as_deref(), Some(MAX));
    let status = |con: &mut redis::Connection| {
        script("permit_semaphore/status.lua")
            .key("p")
            .key(timeouts)
            .key(channel)
            .arg("publish")
            .invoke::<Value>(con)
    };
    match status(&mut con).unwrap() {
        Value::Array(items) => {
            assert_eq!((text(&items[0]), text(&items[1])), (MAX.to_owned(), "0".to_owned()))
        }
        other => panic!("{other:?}"),
    }
    // An expired permit to reclaim, with the count at the top: every script
    // that reclaims refuses, and the permit set and the count stay as they were.
    let _: () = redis::cmd("ZADD").arg(timeouts).arg(1).arg("expired-permit-id").query(&mut con).unwrap();
    let before = state(&mut con);
    assert!(is_overflow(&status(&mut con)));
    let renew = script("permit_semaphore/renew.lua")
        .key("p")
        .key(timeouts)
        .key(channel)
        .arg(1_000)
        .arg("publish")
        .arg("expired-permit-id")
        .invoke::<Value>(&mut con);
    assert!(is_overflow(&renew));
    let acquire = script("permit_semaphore/acquire.lua")
        .key("p")
        .key(timeouts)
        .key(channel)
        .arg(1)
        .arg(1_000)
        .arg("922337203685477")
        .arg("publish")
        .arg("new-permit-id-01")
        .invoke::<Value>(&mut con);
    assert!(is_overflow(&acquire));
    let release = script("permit_semaphore/release.lua")
        .key("p")
        .key(timeouts)
        .key(channel)
        .arg("publish")
        .arg("expired-permit-id")
        .invoke::<Value>(&mut con);
    assert!(is_overflow(&release));
    assert_eq!(state(&mut con), before);
    // One below the top: the reclaim is exact.
    set(&mut con, "p", "9223372036854775806");
    match status(&mut con).unwrap() {
        Value::Array(items) => {
            assert_eq!((text(&items[0]), text(&items[1])), (MAX.to_owned(), "0".to_owned()))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_latch_counts_down_exactly_from_the_top_of_the_range() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let count_down = |con: &mut redis::Connection| {
        script("count_down_latch/count_down.lua")
            .key("l")
            .key("redisson_countdownlatch__channel__{l}")
            .arg("publish")
            .invoke::<Value>(con)
    };
    set(&mut con, "l", MAX);
    assert_eq!(text(&count_down(&mut con).unwrap()), "9223372036854775806");
    set(&mut con, "l", "9007199254740995");
    assert_eq!(text(&count_down(&mut con).unwrap()), "9007199254740994");
    assert_eq!(get(&mut con, "l").as_deref(), Some("9007199254740994"));
    set(&mut con, "l", "2");
    assert_eq!(text(&count_down(&mut con).unwrap()), "1");
    assert_eq!(count_down(&mut con).unwrap(), Value::Int(0));
    set(&mut con, "l", "9223372036854775808");
    assert!(matches!(count_down(&mut con), Err(e) if e.to_string().contains("BADCOUNT")));
    assert_eq!(get(&mut con, "l").as_deref(), Some("9223372036854775808"));
}
