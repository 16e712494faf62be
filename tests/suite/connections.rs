//! The command connections under Redis that stays healthy while connections
//! die: every pooled connection dropped at once (a proxy or load balancer
//! restart, `CLIENT KILL TYPE normal`, a server-side idle `timeout`) must
//! not cost a held lock or fail a release, and a flushed script cache must
//! never surface as `NOSCRIPT`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, exists, info_field, recv_within, spawn};
use keyholder::{Client, Lease};

const SECOND: Duration = Duration::from_secs(1);

/// Kills every normal (non-pub/sub) connection but the caller's.
fn kill_command_connections(con: &mut redis::Connection) -> i64 {
    redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal").query(con).unwrap()
}

/// Fills `client`'s pool: `threads` threads query at once for a while, so
/// the pool opens about that many connections.
fn fill_pool(server: &RedisServer, client: &Client, threads: usize) {
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let lock = client.lock(&format!("filler:{i}")).unwrap();
            spawn(move || {
                let until = Instant::now() + Duration::from_millis(300);
                while Instant::now() < until {
                    lock.is_locked().unwrap();
                }
            })
        })
        .collect();
    for worker in &workers {
        recv_within(worker, 10 * SECOND, "pool filler");
    }
    let mut con = server.conn();
    let open = info_field(&mut con, "clients", "connected_clients");
    assert!(open >= threads as i64 / 2, "the pool opened only about {open} connections");
}

/// With every pooled connection killed while a lock is held under a short
/// watchdog, the next renewal must get through on a new connection: the
/// hold survives and nobody else gets in, though Redis never went away.
#[test]
fn a_held_lock_survives_every_pooled_connection_being_killed() {
    let server = RedisServer::start();
    let client =
        server.builder().pool_max_size(16).watchdog_timeout(Duration::from_millis(600)).build().unwrap();
    let other = server.client();
    let mut con = server.conn();
    let lock = client.lock("kept").unwrap();
    let guard = lock.lock().unwrap();

    for _ in 0..3 {
        fill_pool(&server, &client, 16);
        let killed = kill_command_connections(&mut con);
        assert!(killed >= 8, "only {killed} connections were killed");
        // Two watchdog timeouts: without a renewal getting through on the
        // first live connection, the lease (600 ms) would run out.
        std::thread::sleep(Duration::from_millis(1200));
        assert!(!guard.is_lost(), "the hold was reported lost: {:?}", guard.lost_reason());
        assert!(exists(&mut con, "kept"), "the lock expired though Redis stayed up");
        assert!(other.lock("kept").unwrap().try_lock().unwrap().is_none(), "another owner got in");
    }
    guard.unlock().unwrap();
    assert!(!exists(&mut con, "kept"));
}

/// A release right after every pooled connection was killed succeeds and
/// frees the lock at once, however often it happens.
#[test]
fn releases_succeed_right_after_every_pooled_connection_is_killed() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    fill_pool(&server, &client, 16);
    let lock = client.lock_with_lease("released", Lease::Fixed(Duration::from_secs(4))).unwrap();
    for round in 0..14 {
        let outer = lock.lock().unwrap();
        let inner = lock.lock().unwrap();
        kill_command_connections(&mut con);
        // A nested release (latched) and a last one (unlatched).
        inner.unlock().unwrap_or_else(|e| panic!("round {round}: nested release failed: {e:?}"));
        kill_command_connections(&mut con);
        outer.unlock().unwrap_or_else(|e| panic!("round {round}: last release failed: {e:?}"));
        assert!(!exists(&mut con, "released"), "round {round}: the lock stayed held");
    }
}

/// Queries, a new hold's acquire and `force_unlock` get through too.
#[test]
fn every_idempotent_call_gets_through_after_a_mass_kill() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    fill_pool(&server, &client, 8);
    let lock = client.lock("calls").unwrap();
    kill_command_connections(&mut con);
    let guard = lock.try_lock().unwrap().expect("a free lock");
    kill_command_connections(&mut con);
    assert!(lock.is_locked().unwrap());
    kill_command_connections(&mut con);
    assert!(lock.is_held_by_current_thread().unwrap());
    kill_command_connections(&mut con);
    assert_eq!(lock.hold_count().unwrap(), 1);
    kill_command_connections(&mut con);
    assert!(lock.remaining_lease().unwrap().is_some());
    drop(guard);
    let held = lock.lock().unwrap();
    std::mem::forget(held);
    kill_command_connections(&mut con);
    assert!(lock.force_unlock().unwrap());
    assert!(!exists(&mut con, "calls"));
}

/// A `redis+unix://` URL serves every connection: the pool, and the pub/sub
/// connection that wakes a waiter.
#[test]
fn a_unix_socket_carries_commands_and_wake_ups() {
    let server = RedisServer::start();
    let unix = Client::builder(server.unix_url()).build().unwrap();
    let tcp = server.client();
    let lock = unix.lock("over-unix").unwrap();
    lock.lock().unwrap().unlock().unwrap();
    let held = tcp.lock("over-unix").unwrap().lock().unwrap();
    let waiting = spawn(move || {
        let started = Instant::now();
        let guard = lock.try_lock_for(10 * SECOND).unwrap();
        (guard.is_some(), started.elapsed())
    });
    common::wait_subscribed(&unix, 1);
    let released = Instant::now();
    held.unlock().unwrap();
    let (got, _) = recv_within(&waiting, 15 * SECOND, "waiter over the unix socket");
    assert!(got, "the waiter over the unix socket never got the lock");
    assert!(released.elapsed() < SECOND, "woken {:?} after the release: no wake-up", released.elapsed());
}

/// A re-entry, which is not safe to repeat blindly, gets through a mass kill
/// too: the owner's count in Redis tells whether the lost call ran.
#[test]
fn a_reentry_gets_through_after_every_pooled_connection_is_killed() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let lock = client.lock("reentered").unwrap();
    let outer = lock.lock().unwrap();
    for depth in 2..=4 {
        fill_pool(&server, &client, 8);
        kill_command_connections(&mut con);
        let _inner = lock.lock().unwrap_or_else(|e| panic!("re-entry {depth} failed: {e:?}"));
        std::mem::forget(_inner);
        assert_eq!(lock.hold_count().unwrap(), depth, "the count went astray");
    }
    assert!(!outer.is_lost());
}

/// After Redis restarts empty, a re-entry of the vanished hold takes a new
/// hold instead of failing on the dead pooled connection.
#[test]
fn a_reentry_after_a_restart_takes_a_new_hold() {
    let mut server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("restarted-reentry").unwrap();
    let old = lock.lock().unwrap();
    server.restart();
    let new = lock.lock().expect("a re-entry after the restart failed");
    assert!(old.is_lost(), "the vanished hold was not reported lost");
    assert!(!new.is_lost());
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(old.unlock().unwrap_err().is_lock_lost());
    new.unlock().unwrap();
    assert!(!exists(&mut server.conn(), "restarted-reentry"));
}

/// `CLIENT LIST` tells keyholder's connections apart, and whose they are:
/// `keyholder:<client id>` for commands, `...:pubsub` for the subscriber,
/// `...:tracking` for the removal alarms (`pubsub/tracking.rs`).
#[test]
fn every_connection_is_named_after_its_client() {
    let server = RedisServer::start();
    let client = server.client();
    client.lock("named").unwrap().lock().unwrap().unlock().unwrap();
    let names = || -> Vec<String> {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut server.conn()).unwrap();
        list.lines()
            .filter_map(|l| l.split(' ').find_map(|kv| kv.strip_prefix("name=")).map(str::to_owned))
            .collect()
    };
    let ours = format!("keyholder:{}", client.id());
    let pubsub = format!("{ours}:pubsub");
    assert!(
        common::eventually(5 * SECOND, || names().contains(&pubsub)),
        "no pub/sub connection named {pubsub}: {:?}",
        names()
    );
    assert!(names().contains(&ours), "no command connection named {ours}: {:?}", names());
    // A hold 20 ms old has its key armed on the tracking connection.
    let _held = client.lock("named").unwrap().lock().unwrap();
    let tracking = format!("{ours}:tracking");
    assert!(
        common::eventually(5 * SECOND, || names().contains(&tracking)),
        "no tracking connection named {tracking}: {:?}",
        names()
    );
}

/// `SCRIPT FLUSH` at any moment, even between a script's reload and its
/// retry, never reaches a caller as `NOSCRIPT`.
#[test]
fn a_flushed_script_cache_never_fails_a_call() {
    let server = RedisServer::start();
    let client = server.client();
    let rival = server.client();
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = common::flush_scripts_until(&server, &stop);
    let lock = client.lock("flushed").unwrap();
    let rival_lock = rival.lock("flushed").unwrap();
    let started = Instant::now();
    let mut rounds = 0;
    while rounds < 300 && started.elapsed() < 10 * SECOND {
        let outer = lock.lock().unwrap();
        let inner = lock.lock().unwrap();
        assert!(rival_lock.try_lock().unwrap().is_none());
        inner.unlock().unwrap();
        outer.unlock().unwrap();
        rounds += 1;
    }
    stop.store(true, Ordering::Release);
    let flushes = recv_within(&flusher, 30 * SECOND, "flusher");
    assert!(rounds >= 50, "only {rounds} rounds");
    assert!(flushes >= 100, "only {flushes} flushes: the test did not exercise the race");
}

/// Kills the command connections of `client` (named `keyholder:<id>`), not
/// its pub/sub connection (`keyholder:<id>:pubsub`).
fn kill_command_connections_of(con: &mut redis::Connection, client: &Client) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    let name = format!("name=keyholder:{}", client.id());
    let ids: Vec<String> = list
        .lines()
        .filter(|line| line.split(' ').any(|field| field == name))
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")).map(str::to_owned))
        .collect();
    for id in &ids {
        let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query(con).unwrap();
    }
    ids.len()
}

/// A command that finds its connection dead (Redis restarted or failed
/// over, or a proxy dropped it) has every hold verified at once, as a
/// pub/sub reconnect does: a holder whose lock vanished meanwhile is told
/// then, not at its next renewal (10 s with the default watchdog).
#[test]
fn a_dead_command_connection_has_every_hold_verified_at_once() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let guard = client.lock("verified").unwrap().lock().unwrap();
    let lost = guard.lost_signal();
    // Once its client listens on the lock's channel (and has checked the
    // hold then), only the dead connection can tell it of a silent DEL.
    assert!(common::eventually(5 * SECOND, || common::numsub(&mut con, &common::channel_of("verified")) == 1));
    std::thread::sleep(Duration::from_millis(100));
    // The lock vanishes behind the holder's back, as in a restart without
    // persistence, while its pub/sub connection stays up.
    let _: i64 = redis::cmd("DEL").arg("verified").query(&mut con).unwrap();
    assert!(kill_command_connections_of(&mut con, &client) >= 1);
    let failed_at = Instant::now();
    // Any call meets the dead connection (and runs again on a new one).
    assert!(!client.lock("another").unwrap().is_locked().unwrap());
    let reason = lost.recv_timeout(2 * SECOND).expect("the holder was not told within 2 s");
    // The DEL itself is heard now (the hold's removal alarm, issue 35 item
    // 4): whichever comes first tells the holder.
    assert!(
        matches!(reason, keyholder::LostReason::RenewalRefused | keyholder::LostReason::Gone),
        "{reason:?}"
    );
    assert!(failed_at.elapsed() < SECOND, "told {:?} after the dead connection", failed_at.elapsed());
    assert!(guard.is_lost());
}
