//! The fair lock against a real Redis: strict FIFO across clients, only the
//! head woken, reentrancy, release on drop, lost holds, mutual exclusion,
//! dead waiters skipped, a killed holder, bad input, fencing tokens.
//!
//! Children (for the process tests) are this test binary run again
//! (`common::child`): each `child_*` test is the body of one kind of child
//! and does nothing unless `KEYHOLDER_TEST_CHILD_URL` is set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::redisson_fair;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::{Listener, RedisServer, ServerExt, calls_of, eventually, exists, pttl, recv_within, spawn};
use keyholder::{Client, ErrorKind, FairLock, Lease, LostReason};

const SECOND: Duration = Duration::from_secs(1);
const CHILD_URL: &str = "KEYHOLDER_TEST_CHILD_URL";
const CHILD_LOCK: &str = "KEYHOLDER_TEST_CHILD_LOCK";
const CHILD_SLOT_MS: &str = "KEYHOLDER_TEST_CHILD_SLOT_MS";
/// The watchdog timeout of every child's client: its lease.
const CHILD_LEASE: Duration = Duration::from_millis(500);
/// Room for scheduling delays on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);

fn queue_of(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn timeouts_of(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

fn queued(con: &mut redis::Connection, name: &str) -> Vec<String> {
    redis::cmd("LRANGE").arg(queue_of(name)).arg(0).arg(-1).query(con).unwrap()
}

/// Waits (bounded) until `n` waiters are queued for `name`.
#[track_caller]
fn wait_queued(con: &mut redis::Connection, name: &str, n: usize) {
    assert!(
        eventually(10 * SECOND, || queued(con, name).len() == n),
        "the queue of {name} never reached {n}: {:?}",
        queued(con, name)
    );
}

/// A thread of its own client that queues for `lock`'s name, reports its
/// owner id once queued and the acquisition when it comes, and holds the
/// lock until told to release.
struct Waiter {
    acquired: std::sync::mpsc::Receiver<String>,
    release: std::sync::mpsc::Sender<()>,
    /// Joined before the server stops: the waiter's unlock must reach it.
    thread: std::thread::JoinHandle<()>,
}

fn queue_waiter(server: &RedisServer, name: &str, order: &Arc<Mutex<Vec<usize>>>, index: usize) -> Waiter {
    let client = server.client();
    let lock = client.fair_lock(name).unwrap();
    let order = Arc::clone(order);
    let (acquired_tx, acquired) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let _client = client;
        let guard = lock.try_lock_for(30 * SECOND).unwrap().expect("never got the lock");
        order.lock().unwrap().push(index);
        let _ = acquired_tx.send(guard.owner_id().to_owned());
        let _ = release_rx.recv_timeout(30 * SECOND);
        guard.unlock().unwrap();
    });
    Waiter { acquired, release, thread }
}

#[test]
fn waiters_of_distinct_clients_acquire_in_exactly_their_arrival_order() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let holder = server.client();
    let guard = holder.fair_lock("fifo").unwrap().lock().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        waiters.push(queue_waiter(&server, "fifo", &order, i));
        wait_queued(&mut con, "fifo", i + 1);
    }
    drop(guard);
    for (i, waiter) in waiters.iter().enumerate() {
        recv_within(&waiter.acquired, 10 * SECOND, &format!("waiter {i}"));
        // Nobody else holds it meanwhile: the next waiter is still queued.
        assert_eq!(queued(&mut con, "fifo").len(), 5 - i);
        waiter.release.send(()).unwrap();
    }
    for waiter in waiters {
        waiter.thread.join().unwrap();
    }
    assert!(eventually(10 * SECOND, || !exists(&mut con, "fifo")));
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
    assert!(!exists(&mut con, &queue_of("fifo")));
    assert!(!exists(&mut con, &timeouts_of("fifo")));
}

#[test]
fn threads_of_one_client_queue_in_order_too() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let lock = client.fair_lock("fifo1").unwrap();
    let guard = lock.lock().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut done = Vec::new();
    for i in 0..4 {
        let (lock, order) = (lock.clone(), Arc::clone(&order));
        done.push(spawn(move || {
            let guard = lock.try_lock_for(30 * SECOND).unwrap().unwrap();
            order.lock().unwrap().push(i);
            std::thread::sleep(Duration::from_millis(5));
            drop(guard);
        }));
        wait_queued(&mut con, "fifo1", i + 1);
    }
    drop(guard);
    for (i, rx) in done.iter().enumerate() {
        recv_within(rx, 20 * SECOND, &format!("thread {i}"));
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
}

#[test]
fn a_release_wakes_only_the_head_on_its_own_channel() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let holder = server.client();
    // Warm up: the scripts are cached, so each call below is one EVALSHA.
    drop(holder.fair_lock("head").unwrap().lock().unwrap());
    let guard = holder.fair_lock("head").unwrap().lock().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        waiters.push(queue_waiter(&server, "head", &order, i));
        wait_queued(&mut con, "head", i + 1);
    }
    let owners = queued(&mut con, "head");
    let channels: Vec<String> =
        owners.iter().map(|o| format!("redisson_lock__channel:{{head}}:{o}")).collect();
    let grants: Vec<String> = owners.iter().map(|o| format!("keyholder_fair__grant:{{head}}:{o}")).collect();
    let mut all: Vec<&str> = channels.iter().chain(&grants).map(String::as_str).collect();
    all.push("redisson_lock__channel:{head}");
    let listener = Listener::start(&server, &all);
    // Each waiter subscribed its own channels: its wake-up reaches it alone.
    for channel in channels.iter().chain(&grants) {
        common::wait_numsub(&mut con, channel, 2);
    }
    // Let every waiter finish its retry after subscribing: then they sleep.
    let script_calls = |con: &mut redis::Connection| calls_of(con, "evalsha") + calls_of(con, "eval");
    let mut attempts_before = script_calls(&mut con);
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let now = script_calls(&mut con);
        if now == attempts_before {
            break;
        }
        attempts_before = now;
    }

    drop(guard);
    let first = recv_within(&waiters[0].acquired, 10 * SECOND, "the head");
    assert_eq!(first, owners[0]);
    let heard = listener.drain_until_marker(&mut con, "redisson_lock__channel:{head}");
    // The release handed the lock to the head (a keyholder waiter) on its
    // grant channel; nobody else heard anything.
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0].0, grants[0], "only the head's channel hears the release");
    assert!(heard[0].1.starts_with(&format!("{}/", owners[0])), "{heard:?}");
    // The release alone: the head needed no attempt, the others slept.
    let attempts = script_calls(&mut con) - attempts_before;
    assert_eq!(attempts, 1, "script calls after the release");
    assert_eq!(queued(&mut con, "head"), owners[1..]);
    assert!(waiters[1].acquired.try_recv().is_err());

    for (i, waiter) in waiters.iter().enumerate() {
        if i > 0 {
            recv_within(&waiter.acquired, 10 * SECOND, &format!("waiter {i}"));
        }
        waiter.release.send(()).unwrap();
    }
    for waiter in waiters {
        waiter.thread.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
}

#[test]
fn reentry_counts_in_redis_and_the_last_guard_releases() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let lock = client.fair_lock("re").unwrap().fenced();
    let outer = lock.lock().unwrap();
    let inner = lock.try_lock().unwrap().expect("a re-entry never waits");
    let third = lock.try_lock_for(SECOND).unwrap().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 3);
    assert!(lock.is_held_by_current_thread().unwrap());
    assert_eq!(inner.fencing_token(), outer.fencing_token(), "re-entries share the hold's token");
    assert_eq!(lock.last_fencing_token().unwrap(), outer.fencing_token());
    drop(third);
    inner.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(lock.is_locked().unwrap());
    drop(outer);
    assert!(!lock.is_locked().unwrap());
    assert!(!lock.is_held_by_current_thread().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert_eq!(client.watched_locks(), 0, "renewal stops with the last guard");
    assert!(!exists(&mut con, "re"));
}

#[test]
fn dropping_the_guard_releases_to_the_next_client() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let (la, lb) = (a.fair_lock("drop").unwrap(), b.fair_lock("drop").unwrap());
    {
        let _guard = la.lock().unwrap();
        assert!(lb.try_lock().unwrap().is_none());
        assert!(lb.try_lock_for(Duration::from_millis(50)).unwrap().is_none());
        // A waiter that gave up left the queue.
        assert_eq!(lb.queue_len().unwrap(), 0);
    }
    let guard = lb.try_lock().unwrap().expect("released on drop");
    assert_eq!(guard.name(), "drop");
    assert_eq!(guard.lease(), Lease::Watchdog);
}

#[test]
fn a_deleted_hold_is_reported_lost() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.builder().watchdog_timeout(Duration::from_millis(300)).build().unwrap();
    let lock = client.fair_lock("lost").unwrap();
    let guard = lock.lock().unwrap();
    let signal = guard.lost_signal();
    assert!(!guard.is_lost());
    let _: i64 = redis::cmd("DEL").arg("lost").query(&mut con).unwrap();
    let reason = signal.recv_timeout(5 * SECOND).expect("no lost signal");
    // Told by its removal alarm once the hold is 20 ms old (issue 35, item
    // 4), else refused at the next renewal (or, on a starved machine, the
    // lease ran out first).
    assert!(
        matches!(reason, LostReason::Gone | LostReason::RenewalRefused | LostReason::LeaseExpired),
        "{reason:?}"
    );
    assert!(guard.is_lost());
    let e = guard.unlock().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LockLost);

    // A fixed lease that runs out is lost too, and says so on time.
    let fixed = lock.with_lease(Lease::Fixed(Duration::from_millis(200))).unwrap();
    let guard = fixed.lock().unwrap();
    let signal = guard.lost_signal();
    assert_eq!(signal.recv_timeout(5 * SECOND).unwrap(), LostReason::LeaseExpired);
    // (The local deadline comes first; the key expires a little later.)
    assert!(eventually(5 * SECOND, || !exists(&mut con, "lost")));
    assert_eq!(guard.unlock().unwrap_err().kind(), ErrorKind::LockLost);
}

#[test]
fn a_force_unlocked_holder_learns_it_and_the_head_is_woken() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (a, b) = (server.client(), server.client());
    let guard = a.fair_lock("force").unwrap().lock().unwrap();
    let lb = b.fair_lock("force").unwrap();
    let waiter = spawn(move || lb.try_lock_for(20 * SECOND).unwrap().map(|g| g.owner_id().to_owned()));
    wait_queued(&mut con, "force", 1);
    let admin = server.client().fair_lock("force").unwrap();
    assert!(admin.force_unlock().unwrap());
    let owner = recv_within(&waiter, 10 * SECOND, "the woken head").unwrap();
    assert!(owner.starts_with(b.id()));
    // The lock is gone, or the head holds it now.
    let kind = guard.unlock().unwrap_err().kind();
    assert!(matches!(kind, ErrorKind::LockLost | ErrorKind::NotOwner), "{kind:?}");
    assert!(!admin.force_unlock().unwrap());
}

#[test]
fn no_lost_updates_under_contention_from_several_clients() {
    const CLIENTS: usize = 4;
    const THREADS: usize = 2;
    const ROUNDS: usize = 15;
    let server = RedisServer::start();
    let mut con = server.conn();
    let mut done = Vec::new();
    for _ in 0..CLIENTS {
        let client = server.client();
        for _ in 0..THREADS {
            let lock = client.fair_lock("counted").unwrap();
            let mut con = server.conn();
            done.push(spawn(move || {
                for _ in 0..ROUNDS {
                    let _guard = lock.lock().unwrap();
                    let n: i64 =
                        redis::cmd("GET").arg("counter").query::<Option<i64>>(&mut con).unwrap().unwrap_or(0);
                    std::thread::sleep(Duration::from_millis(1));
                    let _: () = redis::cmd("SET").arg("counter").arg(n + 1).query(&mut con).unwrap();
                }
            }));
        }
    }
    for rx in &done {
        recv_within(rx, 60 * SECOND, "a worker");
    }
    let n: i64 = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
    assert_eq!(n, (CLIENTS * THREADS * ROUNDS) as i64);
    assert!(!exists(&mut con, "counted"));
    assert!(!exists(&mut con, &queue_of("counted")));
}

#[test]
fn waiters_giving_up_under_contention_never_leave_two_holders() {
    // Short waits that often run out just as a release hands the lock over:
    // the give-back path of fair/dequeue.lua, under a lost-update counter.
    const CLIENTS: usize = 4;
    const THREADS: usize = 2;
    const ROUNDS: usize = 100;
    let server = RedisServer::start();
    let mut con = server.conn();
    let mut done = Vec::new();
    for c in 0..CLIENTS {
        let client = server.client();
        for t in 0..THREADS {
            let lock = client.fair_lock("impatient").unwrap();
            let mut con = server.conn();
            done.push(spawn(move || {
                let mut won = 0i64;
                for round in 0..ROUNDS {
                    let wait = Duration::from_micros(((c * 7 + t * 3 + round) % 5 * 700) as u64);
                    if let Some(guard) = lock.try_lock_for(wait).unwrap() {
                        let n: i64 = redis::cmd("GET")
                            .arg("tally")
                            .query::<Option<i64>>(&mut con)
                            .unwrap()
                            .unwrap_or(0);
                        std::thread::sleep(Duration::from_micros(500));
                        let _: () = redis::cmd("SET").arg("tally").arg(n + 1).query(&mut con).unwrap();
                        drop(guard);
                        won += 1;
                    }
                }
                won
            }));
        }
    }
    let won: i64 = done.iter().map(|rx| recv_within(rx, 60 * SECOND, "a worker")).sum();
    let tally: Option<i64> = redis::cmd("GET").arg("tally").query(&mut con).unwrap();
    assert_eq!(tally.unwrap_or(0), won);
    eprintln!("{won} of {} attempts got the lock", CLIENTS * THREADS * ROUNDS);
    assert!(won > 0 && won < (CLIENTS * THREADS * ROUNDS) as i64, "some waits must run out");
    assert!(eventually(5 * SECOND, || !exists(&mut con, "impatient")));
    assert!(!exists(&mut con, &queue_of("impatient")));
    assert!(!exists(&mut con, &timeouts_of("impatient")));
    assert!(!exists(&mut con, "keyholder_fair_grants:{impatient}"));
}

#[test]
fn a_dead_waiter_is_skipped_once_its_slot_runs_out() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let slot = Duration::from_millis(600);
    // A waiter queued by keyholder's script has its deadline a slot after
    // its last call, so the dead one is skipped within a slot.
    let holder = server.client();
    let guard = holder.fair_lock("dead").unwrap().with_lease(Lease::Fixed(SECOND)).unwrap().lock().unwrap();
    // A waiter whose process is gone: queued by the script, never retrying.
    let dead = "8c1f0a4e-dead-4000-8000-000000000000:1";
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let reply: redis::Value = redis::Script::new(&common::lua("fair/acquire.lua"))
        .key("dead")
        .key(queue_of("dead"))
        .key(timeouts_of("dead"))
        .key("redisson_lock__channel:{dead}")
        .key("keyholder_fair_grants:{dead}")
        .arg(30_000)
        .arg(dead)
        .arg(slot.as_millis() as u64)
        .arg(now_ms)
        .arg("1")
        .arg("1")
        .arg("publish")
        .invoke(&mut con)
        .unwrap();
    assert!(matches!(reply, redis::Value::Int(_)));
    let live = server.client().fair_lock("dead").unwrap().with_wait_timeout(slot).unwrap();
    let waiter = spawn(move || live.try_lock_for(20 * SECOND).unwrap().map(|g| g.owner_id().to_owned()));
    wait_queued(&mut con, "dead", 2);
    assert_eq!(queued(&mut con, "dead")[0], dead);
    drop(guard);
    let released = Instant::now();
    let owner = recv_within(&waiter, 15 * SECOND, "the waiter behind the dead one").expect("never acquired");
    assert_ne!(owner, dead);
    eprintln!("the live waiter got the lock {:?} after the release", released.elapsed());
    assert_eq!(queued(&mut con, "dead"), Vec::<String>::new());
}

#[test]
fn a_live_waiter_outlasts_many_slots_behind_a_long_hold() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let slot = Duration::from_millis(300);
    // A short watchdog lease, renewed all along: the first waiter's first
    // deadline (a slot after it queued) passes long before the release.
    let holder = server.builder().watchdog_timeout(Duration::from_millis(300)).build().unwrap();
    let guard = holder.fair_lock("long").unwrap().lock().unwrap();
    let (b, c) = (server.client(), server.client());
    let (lb, lc) =
        (b.fair_lock("long").unwrap().with_wait_timeout(slot).unwrap(), c.fair_lock("long").unwrap());
    let first = spawn(move || lb.try_lock_for(20 * SECOND).unwrap().map(|g| g.owner_id().to_owned()));
    wait_queued(&mut con, "long", 1);
    let second = spawn(move || lc.try_lock_for(20 * SECOND).unwrap().map(|g| g.owner_id().to_owned()));
    wait_queued(&mut con, "long", 2);
    // Held for many of the first waiter's slots: it is not dropped.
    std::thread::sleep(slot * 6);
    assert_eq!(queued(&mut con, "long").len(), 2);
    assert!(queued(&mut con, "long")[0].starts_with(b.id()));
    drop(guard);
    let owner = recv_within(&first, 10 * SECOND, "the first waiter").unwrap();
    assert!(owner.starts_with(b.id()));
    let owner = recv_within(&second, 10 * SECOND, "the second waiter").unwrap();
    assert!(owner.starts_with(c.id()));
}

#[test]
fn fencing_tokens_increase_across_clients_and_kinds() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let (fa, fb) = (a.fair_lock("tok").unwrap().fenced(), b.fair_lock("tok").unwrap().fenced());
    assert!(fa.is_fenced() && !a.fair_lock("tok").unwrap().is_fenced());
    assert_eq!(fa.last_fencing_token().unwrap(), None);
    let mut last = 0;
    for round in 0..6 {
        let lock = if round % 2 == 0 { &fa } else { &fb };
        let guard = lock.lock().unwrap();
        let token = guard.fencing_token().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
    // The plain lock's fenced handle shares the counter.
    let plain = a.lock("tok").unwrap().fenced().lock().unwrap();
    assert!(plain.fencing_token().unwrap() > last);
    last = plain.fencing_token().unwrap();
    drop(plain);
    let guard = fb.lock().unwrap();
    assert!(guard.fencing_token().unwrap() > last);
    // An unfenced fair handle mints nothing.
    drop(guard);
    assert_eq!(a.fair_lock("tok").unwrap().lock().unwrap().fencing_token(), None);
}

#[test]
fn bad_input_is_a_typed_error_and_redis_is_untouched() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let script_calls = |con: &mut redis::Connection| calls_of(con, "evalsha") + calls_of(con, "eval");
    let calls_before = script_calls(&mut con);
    for name in ["", "a\nb", "redisson_lock_token:{x}"] {
        assert_eq!(client.fair_lock(name).unwrap_err().kind(), ErrorKind::InvalidArgument, "{name:?}");
    }
    assert_eq!(
        client.fair_lock(&"x".repeat(keyholder::MAX_NAME_LEN + 1)).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let lock = client.fair_lock("bad").unwrap();
    for slot in [Duration::ZERO, Duration::from_millis(99), keyholder::MAX_FAIR_WAIT_TIMEOUT + SECOND] {
        assert_eq!(lock.with_wait_timeout(slot).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
    assert_eq!(lock.with_lease(Lease::Fixed(Duration::ZERO)).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let size: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, 0);
    assert_eq!(script_calls(&mut con), calls_before);

    // Keys of another type at the lock's name or its queue: WrongType,
    // and nothing changed.
    let _: () = redis::cmd("SET").arg("bad").arg("x").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg(queue_of("q")).arg("x").query(&mut con).unwrap();
    for (lock, key) in [(lock, "bad".to_owned()), (client.fair_lock("q").unwrap(), queue_of("q"))] {
        let e = lock.try_lock().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WrongType, "{e}");
        assert_eq!(e.key(), Some(key.as_str()));
        assert_eq!(lock.try_lock_for(Duration::from_millis(50)).unwrap_err().kind(), ErrorKind::WrongType);
        assert_eq!(lock.force_unlock().unwrap_err().kind(), ErrorKind::WrongType);
        let value: String = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        assert_eq!(value, "x");
    }
    let size: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(size, 2);
    let _: () = redis::cmd("SET").arg("redisson_lock_token:{c}").arg("nope").query(&mut con).unwrap();
    let e = client.fair_lock("c").unwrap().fenced().try_lock().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadFencingCounter);
    assert!(!exists(&mut con, "c"));
}

#[test]
fn try_lock_never_queues_and_never_jumps_the_queue() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (a, b, c) = (server.client(), server.client(), server.client());
    let guard = a.fair_lock("jump").unwrap().lock().unwrap();
    let lb = b.fair_lock("jump").unwrap();
    let waiter = spawn(move || lb.try_lock_for(20 * SECOND).unwrap().is_some());
    wait_queued(&mut con, "jump", 1);
    let lc = c.fair_lock("jump").unwrap();
    assert!(lc.try_lock().unwrap().is_none());
    assert_eq!(lc.queue_len().unwrap(), 1);
    drop(guard);
    assert!(recv_within(&waiter, 10 * SECOND, "the queued waiter"));
    // Once the queue is empty and the lock free, try_lock takes it.
    assert!(eventually(5 * SECOND, || lc.try_lock().unwrap().is_some()));
}

#[test]
fn debug_output_names_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let lock: FairLock = client.fair_lock("dbg").unwrap();
    assert!(format!("{lock:?}").contains("dbg"));
    assert_eq!(lock.wait_timeout(), keyholder::DEFAULT_FAIR_WAIT_TIMEOUT);
    let guard = lock.lock().unwrap();
    assert!(format!("{guard:?}").contains("dbg"));
    assert!(guard.owner_id().starts_with(client.id()));
    assert!(guard.is_replicated());
    assert_eq!(guard.lost_reason(), None);
}

fn epoch_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[test]
fn a_java_release_wakes_the_rust_head_and_a_rust_release_wakes_the_java_head() {
    const JAVA: &str = "6f1e0a4e-9999-4000-8000-00000000000a:57";
    let server = RedisServer::start();
    let mut con = server.conn();
    // Java holds; a Rust waiter queues behind it.
    assert_eq!(
        redisson_fair::acquire(&mut con, 30_000, 300_000, "mixed", JAVA, epoch_ms()),
        redis::Value::Nil
    );
    let client = server.client();
    let lock = client.fair_lock("mixed").unwrap();
    let rust = spawn(move || {
        let guard = lock.try_lock_for(20 * SECOND).unwrap().expect("never woken by Java's release");
        let owner = guard.owner_id().to_owned();
        // Hold until a Java waiter has queued behind, then release.
        assert!(eventually(10 * SECOND, || lock.queue_len().unwrap() == 1));
        drop(guard);
        owner
    });
    wait_queued(&mut con, "mixed", 1);
    let rust_owner = queued(&mut con, "mixed")[0].clone();
    common::wait_numsub(&mut con, &format!("redisson_lock__channel:{{mixed}}:{rust_owner}"), 1);
    assert_eq!(redisson_fair::release(&mut con, 30_000, "mixed", JAVA, epoch_ms()), redis::Value::Int(1));

    // Java queues behind the Rust holder; its channel hears the release.
    let java_channel = format!("redisson_lock__channel:{{mixed}}:{JAVA}");
    let listener = Listener::start(&server, &[&java_channel]);
    assert!(eventually(10 * SECOND, || common::hgetall(&mut con, "mixed").contains_key(&rust_owner)));
    assert!(matches!(
        redisson_fair::acquire(&mut con, 30_000, 300_000, "mixed", JAVA, epoch_ms()),
        redis::Value::Int(_)
    ));
    assert_eq!(recv_within(&rust, 15 * SECOND, "the Rust waiter"), rust_owner);
    assert_eq!(listener.next(10 * SECOND), Some((java_channel, "0".to_owned())));
    // Not handed over (Java takes its own turn): the lock is free for it.
    assert!(!exists(&mut con, "mixed"));
    assert_eq!(
        redisson_fair::acquire(&mut con, 30_000, 300_000, "mixed", JAVA, epoch_ms()),
        redis::Value::Nil
    );
    assert!(!exists(&mut con, &queue_of("mixed")));
}

// ---------------------------------------------------------------------------
// Processes

fn child_client(url: &str) -> Client {
    Client::builder(url)
        .watchdog_timeout(CHILD_LEASE)
        .connect_timeout(SECOND)
        .command_timeout(SECOND)
        .build()
        .unwrap()
}

/// Child: takes the fair lock, says `LOCKED <owner>`, holds it (renewed)
/// until killed.
#[test]
#[ignore = "a child-process mode, run by its parent test"]
fn child_fair_holder() {
    let Some(url) = child::child_env(CHILD_URL) else { return };
    let name = child::child_env(CHILD_LOCK).unwrap();
    let client = child_client(&url);
    let guard = client.fair_lock(&name).unwrap().lock().unwrap();
    child::say(format!("LOCKED {}", guard.owner_id()));
    let lines = child::stdin_lines();
    let _ = lines.recv_timeout(30 * SECOND);
    std::process::exit(3);
}

/// Child: says `WAITING`, queues with the slot given, says `ACQUIRED
/// <owner>`, and releases on `RELEASE`.
#[test]
#[ignore = "a child-process mode, run by its parent test"]
fn child_fair_waiter() {
    let Some(url) = child::child_env(CHILD_URL) else { return };
    let name = child::child_env(CHILD_LOCK).unwrap();
    let slot: u64 = child::child_env(CHILD_SLOT_MS).unwrap().parse().unwrap();
    let client = child_client(&url);
    let lines = child::stdin_lines();
    let lock = client.fair_lock(&name).unwrap().with_wait_timeout(Duration::from_millis(slot)).unwrap();
    child::say("WAITING");
    let guard = lock.lock().unwrap();
    child::say(format!("ACQUIRED {}", guard.owner_id()));
    child::await_line(&lines, "RELEASE", 30 * SECOND);
    guard.unlock().unwrap();
    child::say("RELEASED");
}

#[test]
fn a_killed_holders_lock_goes_to_the_head_waiter_in_another_process() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let url = server.url();
    let env = [(CHILD_URL, url.as_str()), (CHILD_LOCK, "killed"), (CHILD_SLOT_MS, "60000")];
    let mut holder = ChildProcess::spawn("fair_lock::child_fair_holder", &env);
    let holder_owner = holder.expect("LOCKED ", 20 * SECOND);
    let mut waiter = ChildProcess::spawn("fair_lock::child_fair_waiter", &env);
    waiter.expect("WAITING", 20 * SECOND);
    wait_queued(&mut con, "killed", 1);
    // The watchdog keeps the lock across several leases.
    std::thread::sleep(3 * CHILD_LEASE);
    assert_eq!(waiter.try_line(), None, "the waiter got a lock that is still held");
    let killed_at = Instant::now();
    assert!(!holder.kill().success());
    let owner = waiter.expect("ACQUIRED ", 10 * SECOND);
    assert_ne!(owner, holder_owner);
    let after = killed_at.elapsed();
    eprintln!("the waiter got the lock {after:?} after the kill");
    assert!(after <= CHILD_LEASE + SLACK, "acquired {after:?} after the kill");
    waiter.send("RELEASE");
    waiter.expect("RELEASED", 10 * SECOND);
}

#[test]
fn a_killed_head_waiter_is_skipped_after_its_slot() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let url = server.url();
    // The first waiter's deadline is a slot after its last retry (with the
    // default 30 s lease too: see the next test).
    let holder = server.builder().watchdog_timeout(SECOND).build().unwrap();
    let guard = holder.fair_lock("skip").unwrap().lock().unwrap();
    let env = [(CHILD_URL, url.as_str()), (CHILD_LOCK, "skip"), (CHILD_SLOT_MS, "800")];
    let mut first = ChildProcess::spawn("fair_lock::child_fair_waiter", &env);
    first.expect("WAITING", 20 * SECOND);
    wait_queued(&mut con, "skip", 1);
    let mut second = ChildProcess::spawn("fair_lock::child_fair_waiter", &env);
    second.expect("WAITING", 20 * SECOND);
    wait_queued(&mut con, "skip", 2);
    let dead = queued(&mut con, "skip")[0].clone();
    assert!(!first.kill().success());
    drop(guard);
    let owner = second.expect("ACQUIRED ", 15 * SECOND);
    assert_ne!(owner, dead);
    second.send("RELEASE");
    second.expect("RELEASED", 10 * SECOND);
    assert!(eventually(5 * SECOND, || queued(&mut con, "skip").is_empty()));
}

/// Issue 21, item 3: a keyholder waiter killed (SIGKILL) while queued
/// behind a holder with the default 30 s watchdog lease costs the waiter
/// behind it about one wait slot after the release, not the holder's lease.
/// Each retry of a live keyholder waiter re-arms its own deadline at its
/// place in the queue, lowering it as well as raising it, so a dead one's
/// deadline lapses about a slot after its last retry, however long the
/// holder's lease.
#[test]
fn a_killed_queued_waiter_costs_about_one_slot_after_the_release_not_the_holders_lease() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let url = server.url();
    let slot = SECOND;
    // The default watchdog: a 30 s lease, renewed every 10 s.
    let holder = server.client();
    let guard = holder.fair_lock("stall").unwrap().lock().unwrap();
    let env = [(CHILD_URL, url.as_str()), (CHILD_LOCK, "stall"), (CHILD_SLOT_MS, "1000")];
    let mut doomed = ChildProcess::spawn("fair_lock::child_fair_waiter", &env);
    doomed.expect("WAITING", 20 * SECOND);
    wait_queued(&mut con, "stall", 1);
    let dead = queued(&mut con, "stall")[0].clone();
    let live_client = server.client();
    let live = live_client.fair_lock("stall").unwrap().with_wait_timeout(slot).unwrap();
    let waiter = spawn(move || {
        let guard = live.try_lock_for(60 * SECOND).unwrap()?;
        Some((Instant::now(), guard.owner_id().to_owned()))
    });
    wait_queued(&mut con, "stall", 2);
    // Both waiters retry (every half slot) while the lock is held. Two
    // retry periods after the live one queued, the kill tends to come just
    // after the doomed waiter's retry: close to the worst case, a full slot.
    std::thread::sleep(slot);
    assert_eq!(queued(&mut con, "stall")[0], dead);
    let lease = pttl(&mut con, "stall");
    assert!(lease > 15_000, "the holder's lease is the 30 s watchdog's, PTTL {lease}");

    assert!(!doomed.kill().success());
    let killed_at = Instant::now();
    guard.unlock().unwrap();
    let released = Instant::now();
    let (acquired_at, owner) = recv_within(&waiter, 45 * SECOND, "the waiter behind the dead one")
        .expect("the live waiter never got the lock");
    let after_release = acquired_at.saturating_duration_since(released);
    let after_kill = acquired_at.saturating_duration_since(killed_at);
    eprintln!(
        "item 3: the live waiter got the lock {after_release:?} after the release, {after_kill:?} after \
         the kill (slot {slot:?}, holder's PTTL {lease} ms)"
    );
    assert_ne!(owner, dead);
    // About one slot; generous for a loaded machine, far below the lease.
    assert!(after_release < 4 * slot, "acquired {after_release:?} after the release");
    assert!(eventually(5 * SECOND, || queued(&mut con, "stall").is_empty()));
}
