//! Migration mode: keyholder contending with hand-rolled `SET NX` locks on
//! the same names, as during a node-by-node rollout (`docs/migrating.md`).
//!
//! The contention tests run a real old-style client in another process (this
//! test binary run again as `child_legacy`), one per pattern found in the
//! code keyholder replaces: `SETNX` + `EXPIRE` with a plain `DEL`; `SET NX
//! PX` with a token and a Lua compare-and-delete; and that plus a renewal
//! thread. Both sides do read-modify-write increments of a counter under the
//! lock and count overlaps; the counter must equal the sum of their sections
//! (no lost update) and the overlaps must be 0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::{RedisServer, ServerExt, exists, hgetall, pttl, recv_within, spawn};
use keyholder::{Client, ErrorKind};

const SECOND: Duration = Duration::from_secs(1);
/// Room for scheduling delays on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);

const CHILD_URL: &str = "KEYHOLDER_TEST_CHILD_URL";
const CHILD_LOCK: &str = "KEYHOLDER_TEST_CHILD_LOCK";
const CHILD_PATTERN: &str = "KEYHOLDER_TEST_CHILD_PATTERN";
const CHILD_RUN_MS: &str = "KEYHOLDER_TEST_CHILD_RUN_MS";

fn migrating_client(server: &RedisServer) -> Client {
    server.builder().migration_mode(true).build().unwrap()
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

/// A legacy holder's key: `SET key value NX PX ms`.
fn legacy_set(con: &mut redis::Connection, key: &str, value: &str, ms: u64) {
    let ok: Option<String> =
        redis::cmd("SET").arg(key).arg(value).arg("NX").arg("PX").arg(ms).query(con).unwrap();
    assert_eq!(ok.as_deref(), Some("OK"), "the legacy SET NX must succeed on a free name");
}

// ---------------------------------------------------------------------------
// The critical section both sides run

/// The keys of the shared counter of lock `name`.
fn counter_key(name: &str) -> String {
    format!("migration-test:{{{name}}}:counter")
}
fn inside_key(name: &str) -> String {
    format!("migration-test:{{{name}}}:inside")
}
fn overlaps_key(name: &str) -> String {
    format!("migration-test:{{{name}}}:overlaps")
}

/// One read-modify-write increment of the counter, with the lock held: a
/// second holder at the same time is counted as an overlap, and its
/// increment or this one would be lost.
fn section(con: &mut redis::Connection, name: &str, hold: Duration) {
    let inside: i64 = redis::cmd("INCR").arg(inside_key(name)).query(con).unwrap();
    if inside != 1 {
        let _: i64 = redis::cmd("INCR").arg(overlaps_key(name)).query(con).unwrap();
    }
    let value: u64 = get(con, &counter_key(name)).map_or(0, |v| v.parse().unwrap());
    std::thread::sleep(hold);
    let _: () = redis::cmd("SET").arg(counter_key(name)).arg(value + 1).query(con).unwrap();
    let _: i64 = redis::cmd("DECR").arg(inside_key(name)).query(con).unwrap();
}

// ---------------------------------------------------------------------------
// The legacy client (child process)

/// The compare-and-delete of hand-rolled locks.
const COMPARE_AND_DELETE: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0";

/// The renewal of hand-rolled locks with a keep-alive thread.
const COMPARE_AND_PEXPIRE: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0";

/// Child: an old node. Takes the lock with the hand-rolled pattern
/// `CHILD_PATTERN` (`setnx`, `setpx` or `renewing`), spinning with a 2 ms
/// sleep as such code does, runs the section, releases, rests, for
/// `CHILD_RUN_MS` after the parent's `GO`; then says `DONE sections=<n>`.
#[test]
#[ignore = "a child-process mode, run by its parent test"]
fn child_legacy() {
    let Some(url) = child::child_env(CHILD_URL) else { return };
    let name = child::child_env(CHILD_LOCK).unwrap();
    let pattern = child::child_env(CHILD_PATTERN).unwrap();
    let run = Duration::from_millis(child::child_env(CHILD_RUN_MS).unwrap().parse().unwrap());
    let redis_client = redis::Client::open(url.as_str()).unwrap();
    let mut con = redis_client.get_connection_with_timeout(SECOND).unwrap();
    let lines = child::stdin_lines();
    child::say("READY");
    child::await_line(&lines, "GO", 30 * SECOND);
    let deadline = Instant::now() + run;
    let release = redis::Script::new(COMPARE_AND_DELETE);
    let renew = redis::Script::new(COMPARE_AND_PEXPIRE);
    let mut sections = 0u64;
    for i in 0..100_000u64 {
        if Instant::now() >= deadline {
            break;
        }
        let token = format!("legacy-{}-{i}", std::process::id());
        let acquired = match pattern.as_str() {
            // Two commands, as old code does: a crash between them leaves a
            // key without a TTL.
            "setnx" => {
                let set: i64 = redis::cmd("SETNX").arg(&name).arg(&token).query(&mut con).unwrap();
                if set == 1 {
                    let _: i64 = redis::cmd("EXPIRE").arg(&name).arg(1).query(&mut con).unwrap();
                }
                set == 1
            }
            "setpx" | "renewing" => {
                let set: Option<String> = redis::cmd("SET")
                    .arg(&name)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(300)
                    .query(&mut con)
                    .unwrap();
                set.is_some()
            }
            other => panic!("unknown pattern {other}"),
        };
        if !acquired {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        // The renewing pattern holds some sections past its 300 ms lease,
        // kept alive by a thread that extends it every 100 ms.
        let long = pattern == "renewing" && i % 4 == 0;
        let keep_alive = (pattern == "renewing").then(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let (stopping, name, token, renew) =
                (Arc::clone(&stop), name.clone(), token.clone(), renew.clone());
            let mut renew_con = redis_client.get_connection_with_timeout(SECOND).unwrap();
            let thread = std::thread::spawn(move || {
                for _ in 0..100 {
                    std::thread::sleep(Duration::from_millis(100));
                    if stopping.load(Ordering::Acquire) {
                        return;
                    }
                    let _: i64 = renew.key(&name).arg(&token).arg(300).invoke(&mut renew_con).unwrap();
                }
            });
            (stop, thread)
        });
        section(&mut con, &name, if long { Duration::from_millis(450) } else { Duration::from_millis(2) });
        sections += 1;
        if let Some((stop, thread)) = keep_alive {
            stop.store(true, Ordering::Release);
            thread.join().unwrap();
        }
        match pattern.as_str() {
            "setnx" => {
                let _: i64 = redis::cmd("DEL").arg(&name).query(&mut con).unwrap();
            }
            _ => {
                let deleted: i64 = release.key(&name).arg(&token).invoke(&mut con).unwrap();
                assert_eq!(deleted, 1, "the legacy holder's own key was gone at its release");
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child::say(format!("DONE sections={sections}"));
}

// ---------------------------------------------------------------------------
// Contention across processes

/// Runs an old node with `pattern` in a child process against two keyholder
/// threads on the same lock name for `run`, then checks the counter.
fn contend_with_legacy(pattern: &str) {
    let server = RedisServer::start();
    let name = format!("migration:{pattern}");
    let run = Duration::from_millis(3000);
    let url = server.url();
    let run_ms = run.as_millis().to_string();
    let mut child = ChildProcess::spawn(
        "migration::child_legacy",
        &[(CHILD_URL, &url), (CHILD_LOCK, &name), (CHILD_PATTERN, pattern), (CHILD_RUN_MS, &run_ms)],
    );
    child.expect("READY", 30 * SECOND);

    let client = migrating_client(&server);
    child.send("GO");
    let deadline = Instant::now() + run;
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let lock = client.lock(&name).unwrap();
            let mut con = server.conn();
            let name = name.clone();
            spawn(move || {
                let (mut sections, mut timeouts) = (0u64, 0u64);
                for _ in 0..10_000 {
                    if Instant::now() >= deadline {
                        break;
                    }
                    match lock.try_lock_for(5 * SECOND).unwrap() {
                        Some(guard) => {
                            section(&mut con, &name, Duration::from_millis(2));
                            sections += 1;
                            guard.unlock().unwrap();
                        }
                        None => timeouts += 1,
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                (sections, timeouts)
            })
        })
        .collect();
    let mut keyholder_sections = 0;
    for worker in &workers {
        let (sections, timeouts) = recv_within(worker, run + 10 * SECOND, "keyholder worker");
        assert_eq!(timeouts, 0, "a keyholder wait of 5 s timed out");
        keyholder_sections += sections;
    }
    let done = child.expect("DONE", run + 10 * SECOND);
    let legacy_sections: u64 = done.strip_prefix("sections=").unwrap().parse().unwrap();
    child.wait_exit(10 * SECOND);

    let mut con = server.conn();
    let counter: u64 = get(&mut con, &counter_key(&name)).unwrap().parse().unwrap();
    let overlaps: u64 = get(&mut con, &overlaps_key(&name)).map_or(0, |v| v.parse().unwrap());
    eprintln!("{pattern}: keyholder {keyholder_sections}, legacy {legacy_sections}, counter {counter}");
    assert_eq!(overlaps, 0, "two holders at once");
    assert_eq!(counter, keyholder_sections + legacy_sections, "lost updates");
    assert!(keyholder_sections > 0 && legacy_sections > 0, "both sides must have held the lock");
    assert!(!exists(&mut con, &name), "the lock is free at the end");
}

#[test]
fn keyholder_and_setnx_expire_nodes_never_overlap() {
    contend_with_legacy("setnx");
}

#[test]
fn keyholder_and_set_nx_px_nodes_never_overlap() {
    contend_with_legacy("setpx");
}

#[test]
fn keyholder_and_renewing_set_nx_px_nodes_never_overlap() {
    contend_with_legacy("renewing");
}

// ---------------------------------------------------------------------------
// One legacy key, one keyholder caller

#[test]
fn without_migration_mode_a_legacy_key_is_still_wrong_type() {
    let server = RedisServer::start();
    let mut con = server.conn();
    legacy_set(&mut con, "orders:1", "old-node", 5_000);
    let lock = server.client().lock("orders:1").unwrap();
    assert!(!lock.is_migration_mode());
    assert_eq!(lock.try_lock().unwrap_err().kind(), ErrorKind::WrongType);
    assert_eq!(lock.try_lock_for(Duration::from_millis(50)).unwrap_err().kind(), ErrorKind::WrongType);
    assert_eq!(get(&mut con, "orders:1").as_deref(), Some("old-node"));
}

#[test]
fn try_lock_on_a_legacy_key_is_none_and_leaves_it_untouched() {
    let server = RedisServer::start();
    let mut con = server.conn();
    legacy_set(&mut con, "orders:2", "old-node", 5_000);
    let before = pttl(&mut con, "orders:2");
    let lock = migrating_client(&server).lock("orders:2").unwrap();
    assert!(lock.is_migration_mode());
    assert!(lock.try_lock().unwrap().is_none());
    assert!(lock.is_locked().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(!lock.is_held_by_current_thread().unwrap());
    let remaining = lock.remaining_lease().unwrap().unwrap();
    assert!(remaining > Duration::from_secs(3) && remaining <= Duration::from_secs(5));
    assert_eq!(get(&mut con, "orders:2").as_deref(), Some("old-node"));
    let after = pttl(&mut con, "orders:2");
    assert!(after <= before && after > before - 1_000, "the TTL was changed: {before} -> {after}");
    // Nothing of keyholder's was left at the name.
    let kind: String = redis::cmd("TYPE").arg("orders:2").query(&mut con).unwrap();
    assert_eq!(kind, "string");
}

#[test]
fn migration_mode_can_be_set_per_lock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    legacy_set(&mut con, "orders:3", "old-node", 5_000);
    let plain = server.client().lock("orders:3").unwrap();
    let lock = plain.with_migration_mode(true);
    assert!(lock.try_lock().unwrap().is_none());
    assert!(plain.try_lock().unwrap_err().is_wrong_type());
    // And off again on a migrating client.
    let off = migrating_client(&server).lock("orders:3").unwrap().with_migration_mode(false);
    assert!(off.try_lock().unwrap_err().is_wrong_type());
}

#[test]
fn a_timed_wait_on_a_legacy_key_is_bounded_by_its_deadline() {
    let server = RedisServer::start();
    let mut con = server.conn();
    legacy_set(&mut con, "orders:4", "old-node", 10_000);
    let lock = migrating_client(&server).lock("orders:4").unwrap();
    let started = Instant::now();
    assert!(lock.try_lock_for(Duration::from_millis(300)).unwrap().is_none());
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(300) + SLACK, "{took:?}");
    assert_eq!(get(&mut con, "orders:4").as_deref(), Some("old-node"));
}

#[test]
fn a_waiter_takes_the_lock_when_the_legacy_key_expires() {
    let server = RedisServer::start();
    let mut con = server.conn();
    // The client first: its build is not part of the legacy key's 600 ms.
    let lock = migrating_client(&server).lock("orders:5").unwrap();
    let started = Instant::now();
    legacy_set(&mut con, "orders:5", "old-node", 600);
    let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("acquired once the legacy key expired");
    let took = started.elapsed();
    // Not before the key expired (Redis counts whole milliseconds).
    assert!(took >= Duration::from_millis(599) && took < Duration::from_millis(600) + SLACK, "{took:?}");
    assert_eq!(hgetall(&mut con, "orders:5").len(), 1, "keyholder's hash is at the name now");
    guard.unlock().unwrap();
}

#[test]
fn a_waiter_finds_a_deleted_legacy_key_by_its_pttl_and_follows_renewals() {
    let server = RedisServer::start();
    let mut con = server.conn();
    legacy_set(&mut con, "orders:6", "old-node", 400);
    // The old node renews its key every 100 ms for 1.2 s, then deletes it.
    let renewer = {
        let mut con = server.conn();
        spawn(move || {
            let renew = redis::Script::new(COMPARE_AND_PEXPIRE);
            let release = redis::Script::new(COMPARE_AND_DELETE);
            let until = Instant::now() + Duration::from_millis(1200);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
                let renewed: i64 = renew.key("orders:6").arg("old-node").arg(400).invoke(&mut con).unwrap();
                assert_eq!(renewed, 1);
            }
            let deleted: i64 = release.key("orders:6").arg("old-node").invoke(&mut con).unwrap();
            (deleted, Instant::now())
        })
    };
    let lock = migrating_client(&server).lock("orders:6").unwrap();
    let guard = lock.lock().unwrap();
    let acquired = Instant::now();
    let (deleted, deleted_at) = recv_within(&renewer, 10 * SECOND, "renewer");
    assert_eq!(deleted, 1, "the legacy holder released its own key: no overlap");
    assert!(acquired >= deleted_at, "acquired while the legacy key was still there");
    // Found at the PTTL it last read at the latest (400 ms), plus slack.
    let late = acquired - deleted_at;
    assert!(late < Duration::from_millis(400) + SLACK, "found the deletion {late:?} late");
    guard.unlock().unwrap();
}

#[test]
fn a_legacy_key_without_ttl_is_a_typed_error_naming_it() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("orders:7").arg("forever").query(&mut con).unwrap();
    let lock = migrating_client(&server).lock("orders:7").unwrap();
    let e = lock.try_lock().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LegacyLockWithoutTtl);
    assert!(e.is_legacy_lock_without_ttl());
    assert_eq!(e.key(), Some("orders:7"));
    assert!(e.to_string().contains("no TTL"), "{e}");
    // A blocking acquire gives the key 1 s to get a TTL (SETNX + EXPIRE sets
    // it a round trip later), then fails rather than waiting forever.
    let (outcome, took) = common::timed(|| lock.lock());
    assert!(outcome.unwrap_err().is_legacy_lock_without_ttl());
    assert!(took >= Duration::from_millis(950) && took < SECOND + SLACK, "{took:?}");
    // A timed wait that ends within that grace is just not acquired.
    assert!(lock.try_lock_for(Duration::from_millis(200)).unwrap().is_none());
    // A fenced handle too, with its counter left alone.
    assert!(lock.fenced().try_lock().unwrap_err().is_legacy_lock_without_ttl());
    assert!(!exists(&mut con, "redisson_lock_token:{orders:7}"));
    assert_eq!(get(&mut con, "orders:7").as_deref(), Some("forever"));
    assert_eq!(pttl(&mut con, "orders:7"), -1);
}

#[test]
fn a_setnx_holder_between_its_setnx_and_expire_is_waited_on_not_an_error() {
    let server = RedisServer::start();
    let mut con = server.conn();
    // The client first: its build is not part of the old node's 700 ms.
    let lock = migrating_client(&server).lock("orders:11").unwrap();
    let started = Instant::now();
    let _: i64 = redis::cmd("SETNX").arg("orders:11").arg("old").query(&mut con).unwrap();
    let expire = {
        let mut con = server.conn();
        spawn(move || {
            // The old node's EXPIRE comes late (a slow round trip).
            std::thread::sleep(Duration::from_millis(300));
            let _: i64 = redis::cmd("PEXPIRE").arg("orders:11").arg(400).query(&mut con).unwrap();
        })
    };
    let guard = lock.try_lock_for(10 * SECOND).unwrap();
    let took = started.elapsed();
    recv_within(&expire, 5 * SECOND, "expire");
    assert!(guard.is_some(), "acquired once the key got its TTL and expired");
    // Not before the EXPIRE, 300 ms in, plus its 400 ms.
    assert!(took >= Duration::from_millis(699) && took < SECOND + SLACK, "{took:?}");
}

#[test]
fn old_nodes_are_kept_out_while_keyholder_holds_the_lock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let lock = migrating_client(&server).lock("orders:8").unwrap();
    let guard = lock.lock().unwrap();
    let before = hgetall(&mut con, "orders:8");
    let set: Option<String> =
        redis::cmd("SET").arg("orders:8").arg("old").arg("NX").arg("PX").arg(500).query(&mut con).unwrap();
    assert_eq!(set, None, "SET NX PX must fail on keyholder's hash");
    let setnx: i64 = redis::cmd("SETNX").arg("orders:8").arg("old").query(&mut con).unwrap();
    assert_eq!(setnx, 0, "SETNX must fail on keyholder's hash");
    assert_eq!(hgetall(&mut con, "orders:8"), before);
    guard.unlock().unwrap();
    // Free again: the old node's SET NX succeeds, and keyholder sees it.
    legacy_set(&mut con, "orders:8", "old", 5_000);
    assert!(lock.try_lock().unwrap().is_none());
}

#[test]
fn a_reentrant_hold_taken_over_by_a_legacy_key_is_lost_not_wrong_type() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let lock = migrating_client(&server).lock("orders:9").unwrap();
    let guard = lock.lock().unwrap();
    // The hold vanishes (say it expired) and an old node takes the name.
    let _: i64 = redis::cmd("DEL").arg("orders:9").query(&mut con).unwrap();
    legacy_set(&mut con, "orders:9", "old", 5_000);
    // A re-entry finds it gone and contends like anyone: held elsewhere.
    assert!(lock.try_lock().unwrap().is_none());
    assert!(guard.is_lost());
    drop(guard);
    assert_eq!(get(&mut con, "orders:9").as_deref(), Some("old"));
}

#[test]
fn a_hold_whose_name_an_old_node_took_after_its_lease_fails_its_release_untouched() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let lock = migrating_client(&server)
        .lock_with_lease("orders:10", keyholder::Lease::Fixed(Duration::from_millis(200)))
        .unwrap();
    let guard = lock.lock().unwrap();
    assert!(common::eventually(5 * SECOND, || !exists(&mut con, "orders:10")));
    legacy_set(&mut con, "orders:10", "old", 5_000);
    let e = guard.unlock().unwrap_err();
    // As docs/migrating.md says: WrongType, the old node's key left alone.
    assert!(e.is_wrong_type(), "{e:?}");
    assert_eq!(get(&mut con, "orders:10").as_deref(), Some("old"));
}
