//! A mixed fleet (issue 21, item 6): Redisson-protocol waiters and keyholder
//! threads contend for one lock, as during a rolling migration. Neither side
//! may starve: each side's share of the acquisitions made while both contend
//! stays close to its share of the contenders, and the Redisson side's worst
//! wait stays within a small multiple of keyholder's.
//!
//! The Redisson side is `support/redisson_lock.rs`: Redisson's scripts and
//! `lock()` loop on plain redis connections, one command and one pub/sub
//! connection per stand-in process, no keyholder code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::redisson_lock;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, recv_within, spawn};
use redisson_lock::RedissonClient;

/// Acquisitions per contender, as in the reproduction.
const ROUNDS: usize = 200;
/// How long each holder holds the lock.
const HOLD: Duration = Duration::from_millis(1);
/// What a Redisson process does between its release and its next lock():
/// other work. Without it a Redisson releaser takes the lock straight back
/// (it barges: Redisson has no queue), and the other waiters of both sides
/// starve behind it, whatever keyholder does.
const THINK: Duration = Duration::from_millis(1);
/// Bounds every loop of the test.
const LIMIT: Duration = Duration::from_secs(90);

/// One acquisition: when the lock() call started and when it returned.
#[derive(Debug, Clone, Copy)]
struct Take {
    asked: Instant,
    got: Instant,
}

/// What the run measured.
#[derive(Debug)]
struct Run {
    /// Redisson acquisitions, keyholder acquisitions, while all contended.
    redisson: usize,
    keyholder: usize,
    /// The longest single wait of each side over the whole run.
    redisson_worst: Duration,
    keyholder_worst: Duration,
    /// From the start until the first contender was done.
    window: Duration,
}

/// Two Redisson stand-in processes and four keyholder threads over two
/// clients take `name` `ROUNDS` times each with a 1 ms hold.
fn run(server: &RedisServer, name: &'static str) -> Run {
    let start = Arc::new(Barrier::new(7));
    let deadline = Instant::now() + LIMIT;
    let mut redisson = Vec::new();
    for p in 0..2u64 {
        let url = server.url();
        let start = Arc::clone(&start);
        redisson.push(spawn(move || {
            let id = format!("6f1c3c1e-0000-4000-8000-00000000000{p}");
            let mut java = RedissonClient::connect(&url, &id);
            let thread = 1;
            let mut takes = Vec::with_capacity(ROUNDS);
            start.wait();
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                if !java.lock(name, thread, deadline) {
                    break;
                }
                takes.push(Take { asked, got: Instant::now() });
                std::thread::sleep(HOLD);
                assert_eq!(java.unlock(name, thread), Some(1));
                std::thread::sleep(THINK);
            }
            takes
        }));
    }
    let mut keyholder = Vec::new();
    for _ in 0..2 {
        let client = server.client();
        for _ in 0..2 {
            let lock = client.lock(name).unwrap();
            let start = Arc::clone(&start);
            keyholder.push(spawn(move || {
                let mut takes = Vec::with_capacity(ROUNDS);
                start.wait();
                for _ in 0..ROUNDS {
                    let asked = Instant::now();
                    let Some(guard) = lock.try_lock_until(deadline).unwrap() else {
                        break;
                    };
                    takes.push(Take { asked, got: Instant::now() });
                    std::thread::sleep(HOLD);
                    guard.unlock().unwrap();
                }
                takes
            }));
        }
    }
    start.wait();
    let started = Instant::now();
    let collect = |rxs: Vec<_>, what| -> Vec<Vec<Take>> {
        rxs.iter().map(|rx| recv_within(rx, LIMIT + Duration::from_secs(10), what)).collect()
    };
    let redisson = collect(redisson, "redisson stand-in");
    let keyholder = collect(keyholder, "keyholder thread");
    for takes in redisson.iter().chain(&keyholder) {
        assert_eq!(takes.len(), ROUNDS, "a contender ran out of time");
    }
    // All contend until the first contender is done.
    let window_end = redisson.iter().chain(&keyholder).filter_map(|t| t.last().map(|t| t.got)).min().unwrap();
    let within = |side: &[Vec<Take>]| side.iter().flatten().filter(|t| t.got <= window_end).count();
    let worst = |side: &[Vec<Take>]| side.iter().flatten().map(|t| t.got - t.asked).max().unwrap();
    Run {
        redisson: within(&redisson),
        keyholder: within(&keyholder),
        redisson_worst: worst(&redisson),
        keyholder_worst: worst(&keyholder),
        window: window_end - started,
    }
}

#[test]
fn redisson_waiters_get_their_share_beside_keyholder_threads() {
    let server = RedisServer::start();
    let run = run(&server, "mixed-fleet");
    let total = run.redisson + run.keyholder;
    let share = run.redisson as f64 / total as f64;
    // The Redisson side is 2 of the 6 contending threads, and 2 of the 4
    // contending clients (keyholder's turns go by client, as Redisson's
    // wake-ups go by process: see ADR 41 in docs/reference/decisions.md).
    let (by_thread, by_client) = (2.0 / 6.0, 2.0 / 4.0);
    println!(
        "mixed fleet: while all 6 contended ({} ms, {:.0} acquisitions/s), Redisson {} and \
         keyholder {} acquisitions (Redisson share {:.2}; its share of threads {by_thread:.2}, \
         of clients {by_client:.2}); worst wait Redisson {:.1} ms, keyholder {:.1} ms ({:.1}x)",
        run.window.as_millis(),
        total as f64 / run.window.as_secs_f64(),
        run.redisson,
        run.keyholder,
        share,
        run.redisson_worst.as_secs_f64() * 1e3,
        run.keyholder_worst.as_secs_f64() * 1e3,
        run.redisson_worst.as_secs_f64() / run.keyholder_worst.as_secs_f64()
    );
    assert!(
        share > 0.9 * by_thread && share < 1.0 - (1.0 - by_client) / 2.0,
        "Redisson share {share:.2} of {total} acquisitions, against {by_thread:.2} of the threads \
         and {by_client:.2} of the clients"
    );
    // A small multiple of keyholder's worst wait (with a floor for a run in
    // which keyholder's own waits are tiny). Measured 0.1x to 1.9x; 2.3x to
    // 8.6x before Redisson waiters took turns.
    let bound = 3 * run.keyholder_worst.max(Duration::from_millis(30));
    assert!(
        run.redisson_worst <= bound,
        "Redisson's worst wait {:?} against keyholder's {:?}",
        run.redisson_worst,
        run.keyholder_worst
    );
}

/// The keys and channels of lock `name` (see `src/names.rs`).
struct Keys {
    name: &'static str,
    channel: String,
    marker: String,
    queue: String,
    grants: String,
    /// keyholder's listening channel: every keyholder client listening on
    /// `channel` listens on it too (nobody publishes there).
    listening: String,
    wake: String,
}

fn keys(name: &'static str) -> Keys {
    Keys {
        name,
        channel: format!("redisson_lock__channel:{{{name}}}"),
        marker: format!("keyholder_lock_next:{{{name}}}"),
        queue: format!("keyholder_lock_queue:{{{name}}}"),
        grants: format!("keyholder_lock_grants:{{{name}}}"),
        listening: format!("keyholder_lock__listening:{{{name}}}"),
        wake: format!("keyholder_lock__wake:{{{name}}}"),
    }
}

/// A keyholder client's fresh acquire of `owner`, queueing `client` with a
/// grant when refused.
fn kh_acquire(con: &mut redis::Connection, k: &Keys, client: &str, owner: &str) -> Option<i64> {
    redis::Script::new(include_str!("../../lua/lock/acquire.lua"))
        .key(k.name)
        .key(&k.marker)
        .key(&k.queue)
        .key(&k.grants)
        .arg(30_000)
        .arg(owner)
        .arg(1)
        .arg(client)
        .arg(1)
        .arg(1000)
        .arg(1)
        .invoke(con)
        .unwrap()
}

/// A keyholder client's release of `owner`'s last hold, with foreign turns
/// of 5 ms; the releasing client does not listen.
fn kh_release(con: &mut redis::Connection, k: &Keys, client: &str, owner: &str) -> Option<i64> {
    redis::Script::new(include_str!("../../lua/lock/release.lua"))
        .key(k.name)
        .key(&k.channel)
        .key(&k.marker)
        .key(&k.queue)
        .key(&k.grants)
        .key(&k.listening)
        .arg(30_000)
        .arg(owner)
        .arg(0)
        .arg(format!("1000 5 0 2 {client} {}", k.wake))
        .invoke(con)
        .unwrap()
}

/// A connection subscribed to `channels`, as a client's pub/sub connection.
fn listener(server: &RedisServer, channels: &[String]) -> redis::Connection {
    let mut con = server.conn();
    for channel in channels {
        redis::cmd("SUBSCRIBE").arg(channel).exec(&mut con).unwrap();
    }
    con
}

#[test]
fn releases_alternate_with_redisson_waiters_and_hand_offs_step_aside() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let k = keys("turns");
    // Two Redisson processes wait (subscribed to the unlock channel alone),
    // and keyholder client B listens on the unlock channel with keyholder's
    // listening channel, and on its wake channel.
    let java_side = std::slice::from_ref(&k.channel);
    let java_listeners = [listener(&server, java_side), listener(&server, java_side)];
    let _b = listener(&server, &[k.channel.clone(), k.listening.clone(), format!("{}:B", k.wake)]);
    let _a = listener(&server, &[format!("{}:A", k.wake)]);

    // A holds; B queues with a grant. With 2 foreign listeners and 1 queued
    // client, a foreign turn comes after every queue turn.
    assert_eq!(kh_acquire(&mut con, &k, "A", "A:1"), None);
    assert!(kh_acquire(&mut con, &k, "B", "B:1").is_some());
    // Queue turn: granted to B, as with no Redisson waiter.
    assert_eq!(kh_release(&mut con, &k, "A", "A:1"), Some(1));
    assert_eq!(common::hgetall(&mut con, k.name), [("B:1".to_owned(), "1".to_owned())].into());

    // A queues again; B's release is the Redisson waiters' turn.
    assert!(kh_acquire(&mut con, &k, "A", "A:1").is_some());
    assert_eq!(kh_release(&mut con, &k, "B", "B:1"), Some(1));
    assert!(!common::exists(&mut con, k.name), "the lock is left free");
    let marker: String = redis::cmd("GET").arg(&k.marker).query(&mut con).unwrap();
    let (ends, named) = marker.strip_prefix('~').and_then(|m| m.split_once(':')).unwrap();
    assert_eq!(named, "A", "after the turn, the lock is A's");
    // No other keyholder client takes the free lock, during the turn or after.
    let refused = kh_acquire(&mut con, &k, "C", "C:1");
    assert!(refused.is_some_and(|ms| ms >= 1), "C was not refused: {refused:?}");
    // A Redisson waiter, which never reads the marker, does.
    let mut java = RedissonClient::connect(&server.url(), "6f1c3c1e-0000-4000-8000-0000000000aa");
    assert_eq!(java.try_acquire(k.name, 1), None);

    // Once the turn is over, A's refused try counts the Redisson waiter's
    // hold of A's reserved lock as one more foreign turn.
    let ends: u64 = ends.parse().unwrap();
    assert!(common::eventually(Duration::from_secs(2), || server_ms(&mut con) > ends));
    assert!(kh_acquire(&mut con, &k, "A", "A:1").is_some());
    let turns: String = redis::cmd("HGET").arg(&k.grants).arg("~turns").query(&mut con).unwrap();
    assert_eq!(turns, "-1");
    let seen: String = redis::cmd("HGET").arg(&k.grants).arg("~seen").query(&mut con).unwrap();
    assert_eq!(seen, "2", "A saw the turn used");
    assert_eq!(java.unlock(k.name, 1), Some(1));

    // A hand-off between two threads of A steps aside while Redisson
    // waiters listen: reply 3, nothing changed.
    assert_eq!(kh_acquire(&mut con, &k, "A", "A:1"), None);
    // A used turn keeps the turns coming (no back-off).
    let idle: String = redis::cmd("HGET").arg(&k.grants).arg("~idle").query(&mut con).unwrap();
    assert_eq!(idle, "0");
    let handoff = |con: &mut redis::Connection| -> Option<i64> {
        redis::Script::new(&common::lua("lock/handoff.lua"))
            .key(k.name)
            .key(&k.channel)
            .key(&k.marker)
            .key(format!("redisson_unlock_latch:{{{}}}:A:1", k.name))
            .key(&k.listening)
            .key(&k.grants)
            .arg("0")
            .arg(30_000)
            .arg("A:1")
            .arg("A:2")
            .arg("publish")
            .arg(5000)
            .arg(1)
            .arg(0)
            .arg("A")
            .invoke(con)
            .unwrap()
    };
    assert_eq!(handoff(&mut con), Some(3));
    assert_eq!(common::hgetall(&mut con, k.name), [("A:1".to_owned(), "1".to_owned())].into());
    // With the Redisson waiters gone, it hands over.
    drop(java_listeners);
    assert!(common::eventually(Duration::from_secs(5), || common::numsub(&mut con, &k.channel) == 1));
    assert_eq!(common::numsub(&mut con, &k.listening), 1, "B listens on both");
    assert_eq!(handoff(&mut con), Some(2));
    assert_eq!(common::hgetall(&mut con, k.name), [("A:2".to_owned(), "1".to_owned())].into());
}

/// The server's clock in milliseconds.
fn server_ms(con: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    s * 1000 + us / 1000
}
