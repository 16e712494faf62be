//! Traps found by adversarial testing (issue 13): each test reproduces one
//! and checks what must happen instead. See `docs/guarantees.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, exists, hgetall, recv_within, spawn, timed, wait_numsub};
use keyholder::{Client, ErrorKind, Lease, LostReason};

const SECOND: Duration = Duration::from_secs(1);

fn hset(con: &mut redis::Connection, key: &str) {
    let _: i64 = redis::cmd("HSET").arg(key).arg("f").arg("v").query(con).unwrap();
}

fn untouched(con: &mut redis::Connection, key: &str) {
    let expected: std::collections::BTreeMap<String, String> = [("f".to_owned(), "v".to_owned())].into();
    assert_eq!(hgetall(con, key), expected, "{key} was changed");
}

/// A hold removed behind its owner's back (force-unlocked, Redis restarted
/// empty) must not be re-entered: the next `lock()` takes a new hold, the
/// old guard is lost at once, and dropping it leaves the new hold alone.
#[test]
fn a_reentry_after_the_hold_vanished_takes_a_new_hold() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (client, other) = (server.client(), server.client());
    let lock = client.lock("vanished").unwrap();
    for remove in ["DEL", "force_unlock"] {
        let old = lock.lock().unwrap();
        match remove {
            "DEL" => {
                let _: i64 = redis::cmd("DEL").arg("vanished").query(&mut con).unwrap();
            }
            _ => assert!(other.lock("vanished").unwrap().force_unlock().unwrap()),
        }
        let new = lock.lock().unwrap();
        assert_eq!(old.lost_reason(), Some(LostReason::Gone), "{remove}: the old hold was not marked lost");
        assert!(!new.is_lost());
        let owner = new.owner_id().to_owned();
        assert_eq!(hgetall(&mut con, "vanished"), [(owner, "1".to_owned())].into());
        assert!(old.unlock().unwrap_err().is_lock_lost());
        assert!(exists(&mut con, "vanished"), "{remove}: releasing the lost guard deleted the new hold");
        assert!(
            other.lock("vanished").unwrap().try_lock().unwrap().is_none(),
            "{remove}: another owner got in"
        );
        new.unlock().unwrap();
        assert!(!exists(&mut con, "vanished"));
    }
}

/// `x` and `{x}` share Redisson's unlock channel: an unlock of either must
/// reach the waiters of each, in any order.
#[test]
fn names_sharing_an_unlock_channel_each_hear_their_unlock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    for order in [["x", "{x}"], ["{x}", "x"]] {
        let (holder, waiter) = (server.client(), server.client());
        let lease = Lease::Fixed(Duration::from_secs(10));
        let held: Vec<_> =
            ["x", "{x}"].iter().map(|n| holder.lock_with_lease(n, lease).unwrap().lock().unwrap()).collect();
        let waiting: Vec<_> = ["x", "{x}"]
            .iter()
            .map(|name| {
                let lock = waiter.lock(name).unwrap();
                spawn(move || lock.try_lock_for(8 * SECOND).unwrap().map(|g| g.unlock().unwrap()).is_some())
            })
            .collect();
        // The waiter's client, and the holder's (for a foreign unlock).
        wait_numsub(&mut con, "redisson_lock__channel:{x}", 2);
        common::wait_subscribed(&waiter, 1);
        std::thread::sleep(Duration::from_millis(100)); // both waiters asleep in Redis
        let mut held = held;
        for name in order {
            let at = if name == "x" { 0 } else { 1 };
            let released = Instant::now();
            held.remove(held.iter().position(|g| g.name() == name).unwrap()).unlock().unwrap();
            assert!(recv_within(&waiting[at], 9 * SECOND, name), "{name} never acquired");
            assert!(released.elapsed() < SECOND, "the {name} waiter took {:?}: unwoken", released.elapsed());
        }
    }
}

/// Names under the derived-key prefixes are refused, and a foreign key at a
/// latch's name is neither overwritten by a nested release (which takes no
/// latch) nor by a hand-off (which does).
#[test]
fn unlock_latches_never_overwrite_a_key() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    for name in [
        "keyholder_lock_next:{m}",
        "keyholder_lock_queue:{m}",
        "keyholder_lock_grants:{m}",
        "keyholder_lock_recent:{m}",
        "redisson_lock_token:{m}",
        "redisson_unlock_latch:{n}:00000000000000000000000000000001",
    ] {
        assert!(client.lock(name).unwrap_err().is_invalid(), "{name} was accepted");
    }
    let lock = client.lock("n").unwrap();
    let probe = lock.lock().unwrap();
    let (uuid, thread) = probe.owner_id().rsplit_once(':').unwrap();
    let mixed = u128::from_str_radix(&uuid.replace('-', ""), 16).unwrap() ^ thread.parse::<u128>().unwrap();
    let latch = format!("redisson_unlock_latch:{{n}}:{mixed:032x}");
    drop(probe);
    hset(&mut con, &latch);
    // A nested release takes no latch.
    let outer = lock.lock().unwrap();
    lock.lock().unwrap().unlock().unwrap();
    outer.unlock().unwrap();
    assert!(!exists(&mut con, "n"));
    untouched(&mut con, &latch);
    // A hand-off to a queued thread of the same client writes it too.
    let outer = lock.lock().unwrap();
    let queued = {
        let lock = lock.clone();
        spawn(move || lock.try_lock_for(5 * SECOND).unwrap().map(|g| g.unlock().unwrap()).is_some())
    };
    std::thread::sleep(Duration::from_millis(100));
    outer.unlock().unwrap();
    assert!(recv_within(&queued, 10 * SECOND, "queued thread"));
    untouched(&mut con, &latch);
}

/// Foreign keys at keyholder's own derived names (the marker, the queue, the
/// grants) neither block the lock nor get written over, contended or not.
#[test]
fn foreign_keys_at_derived_names_neither_block_the_lock_nor_change() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let derived = [
        "keyholder_lock_next:{m}",
        "keyholder_lock_queue:{m}",
        "keyholder_lock_grants:{m}",
        "keyholder_lock_recent:{m}",
    ];
    for key in derived {
        hset(&mut con, key);
    }
    let (holder, waiter) =
        (server.client(), server.builder().fairness_window(Duration::ZERO).build().unwrap());
    holder.lock("m").unwrap().try_lock().unwrap().expect("a free lock").unlock().unwrap();
    let guard = holder.lock("m").unwrap().lock().unwrap();
    let waiting = {
        let lock = waiter.lock("m").unwrap();
        spawn(move || {
            let (guard, took) = timed(|| lock.try_lock_for(5 * SECOND).unwrap());
            guard.map(|g| g.unlock().unwrap()).map(|()| took)
        })
    };
    common::wait_subscribed(&waiter, 1);
    std::thread::sleep(Duration::from_millis(100));
    let released = Instant::now();
    guard.unlock().unwrap();
    assert!(recv_within(&waiting, 10 * SECOND, "waiter").is_some(), "the waiter never got the lock");
    assert!(released.elapsed() < SECOND, "the waiter took {:?} after the release", released.elapsed());
    for key in derived {
        untouched(&mut con, key);
    }
}

/// A foreign key at the fencing counter is reported with the counter's name,
/// and nothing is acquired.
#[test]
fn a_foreign_key_at_the_fencing_counter_names_that_key() {
    let server = RedisServer::start();
    let mut con = server.conn();
    hset(&mut con, "redisson_lock_token:{f}");
    let client = server.client();
    let err = client.lock("f").unwrap().fenced().try_lock().expect_err("acquired without a token");
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err:?}");
    assert_eq!(err.lock_name(), Some("f"));
    assert_eq!(err.key(), Some("redisson_lock_token:{f}"));
    assert!(!exists(&mut con, "f"), "the lock was taken without a token");
    assert!(client.lock("f").unwrap().try_lock().unwrap().is_some(), "the plain lock must still work");
}

/// Tokens are exact past 2^53 (Lua's doubles repeated them), and a counter
/// that holds no next token is a typed error that acquires nothing.
#[test]
fn fencing_tokens_are_exact_and_an_unusable_counter_is_refused() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let lock = client.lock("t").unwrap().fenced();
    let counter = "redisson_lock_token:{t}";
    let set = |con: &mut redis::Connection, value: &str| {
        let _: () = redis::cmd("SET").arg(counter).arg(value).query(con).unwrap();
    };
    set(&mut con, "9007199254740992");
    for expected in 9_007_199_254_740_993_u64..9_007_199_254_740_998 {
        let guard = lock.lock().unwrap();
        assert_eq!(guard.fencing_token(), Some(expected));
    }
    assert_eq!(lock.last_fencing_token().unwrap(), Some(9_007_199_254_740_997));
    set(&mut con, "9223372036854775806");
    assert_eq!(lock.lock().unwrap().fencing_token(), Some(i64::MAX as u64));
    for bad in ["9223372036854775807", "-5", "abc"] {
        set(&mut con, bad);
        let err = lock.try_lock().unwrap_err();
        assert!(err.is_bad_fencing_counter(), "{bad}: {err:?}");
        assert!(!exists(&mut con, "t"), "{bad}: the lock was taken without a token");
        let value: String = redis::cmd("GET").arg(counter).query(&mut con).unwrap();
        assert_eq!(value, bad, "the counter was changed");
    }
}

/// A server that refuses the client's credentials fails `build()` at once
/// with `AccessDenied`; a database index out of range is `InvalidConfig`.
#[test]
fn refused_credentials_fail_build_with_a_typed_error() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let port = server.port();
    let build = |url: String| {
        timed(|| Client::builder(url).connect_timeout(2 * SECOND).command_timeout(2 * SECOND).build())
    };
    let (result, took) = build(format!("redis://127.0.0.1:{port}/99"));
    assert!(result.unwrap_err().is_invalid());
    assert!(took < 2 * SECOND, "took {took:?}");
    let _: () = redis::cmd("CONFIG").arg("SET").arg("requirepass").arg("s3cret").query(&mut con).unwrap();
    for url in [format!("redis://127.0.0.1:{port}/"), format!("redis://:wrong@127.0.0.1:{port}/")] {
        let (result, took) = build(url.clone());
        let err = result.unwrap_err();
        assert!(err.is_access_denied(), "{url}: {err:?}");
        assert!(took < 2 * SECOND, "{url}: took {took:?}");
    }
    let (client, _) = build(format!("redis://:s3cret@127.0.0.1:{port}/"));
    let client = client.unwrap();
    client.lock("authed").unwrap().lock().unwrap().unlock().unwrap();
}
