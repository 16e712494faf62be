//! The read-write lock against a real Redis: shared reads, exclusive
//! writes across clients, downgrade, refused upgrade, reentrancy, release on
//! drop, lost holds, read-hold renewal, a killed holder, writer preference,
//! a Java peer's layout and messages, and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::{RedisServer, ServerExt, eventually, exists, hgetall, pttl, wait_numsub};
use keyholder::{Client, ErrorKind, Lease, LostReason};

const SECOND: Duration = Duration::from_secs(1);
/// Room for scheduling delays on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);
/// The watchdog timeout of the short-lease clients.
const SHORT: Duration = Duration::from_millis(500);

const CHILD_URL: &str = "KEYHOLDER_TEST_RW_CHILD_URL";
const CHILD_LOCK: &str = "KEYHOLDER_TEST_RW_CHILD_LOCK";

fn short_client(server: &RedisServer) -> Client {
    server.builder().watchdog_timeout(SHORT).build().unwrap()
}

fn redisson_channel(name: &str) -> String {
    format!("redisson_rwlock:{{{name}}}")
}

// ---------------------------------------------------------------------------
// Child bodies

/// Child: takes the read lock, says `READING <owner>`, and holds it
/// (renewed) until killed.
#[test]
#[ignore = "a child-process mode, run by its parent test"]
fn child_reader() {
    let Some(url) = child::child_env(CHILD_URL) else { return };
    let name = child::child_env(CHILD_LOCK).unwrap();
    let client = Client::builder(url).watchdog_timeout(SHORT).build().unwrap();
    let guard = client.read_write_lock(&name).unwrap().read().lock().unwrap();
    child::say(format!("READING {}", guard.owner_id()));
    let lines = child::stdin_lines();
    let _ = lines.recv_timeout(Duration::from_secs(60));
    std::process::exit(3);
}

// ---------------------------------------------------------------------------
// Sharing and exclusion

#[test]
fn many_readers_hold_the_lock_at_once() {
    let server = RedisServer::start();
    const READERS: usize = 4;
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..READERS)
        .map(|_| {
            let client = server.client();
            let inside = Arc::clone(&inside);
            std::thread::spawn(move || {
                let rw = client.read_write_lock("shared").unwrap();
                let guard = rw.read().try_lock_for(10 * SECOND).unwrap().expect("a reader was kept out");
                inside.fetch_add(1, Ordering::SeqCst);
                // Every reader sees every other one inside: they overlap.
                let all = eventually(10 * SECOND, || inside.load(Ordering::SeqCst) == READERS);
                guard.unlock().unwrap();
                all
            })
        })
        .collect();
    for thread in threads {
        assert!(thread.join().unwrap(), "the readers did not overlap");
    }
    let mut con = server.conn();
    assert!(!exists(&mut con, "shared"));
}

#[test]
fn writers_of_several_clients_exclude_each_other_and_readers_never_see_half_a_write() {
    let server = RedisServer::start();
    const CLIENTS: usize = 3;
    const WRITES: usize = 15;
    let torn = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    for _ in 0..CLIENTS {
        let client = server.client();
        let mut con = server.conn();
        writers.push(std::thread::spawn(move || {
            let write = client.read_write_lock("pair").unwrap().write();
            for _ in 0..WRITES {
                let guard = write.try_lock_for(30 * SECOND).unwrap().expect("a writer timed out");
                // Read-modify-write of a counter, and a pair of keys written
                // one after the other: a reader in between would see them differ.
                let n: u64 =
                    redis::cmd("GET").arg("counter").query::<Option<u64>>(&mut con).unwrap().unwrap_or(0);
                let _: () = redis::cmd("SET").arg("a").arg(n + 1).query(&mut con).unwrap();
                std::thread::sleep(Duration::from_millis(2));
                let _: () = redis::cmd("SET").arg("b").arg(n + 1).query(&mut con).unwrap();
                let _: () = redis::cmd("SET").arg("counter").arg(n + 1).query(&mut con).unwrap();
                guard.unlock().unwrap();
            }
        }));
        let client = server.client();
        let mut con = server.conn();
        let (torn, reads, stop) = (Arc::clone(&torn), Arc::clone(&reads), Arc::clone(&stop));
        readers.push(std::thread::spawn(move || {
            let read = client.read_write_lock("pair").unwrap().read();
            let started = Instant::now();
            while !stop.load(Ordering::Acquire) && started.elapsed() < 60 * SECOND {
                let Some(guard) = read.try_lock_for(10 * SECOND).unwrap() else { continue };
                let (a, b): (Option<u64>, Option<u64>) =
                    redis::pipe().cmd("GET").arg("a").cmd("GET").arg("b").query(&mut con).unwrap();
                if a != b {
                    torn.fetch_add(1, Ordering::Relaxed);
                }
                reads.fetch_add(1, Ordering::Relaxed);
                drop(guard);
            }
        }));
    }
    for writer in writers {
        writer.join().unwrap();
    }
    stop.store(true, Ordering::Release);
    for reader in readers {
        reader.join().unwrap();
    }
    let mut con = server.conn();
    let counter: u64 = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
    assert_eq!(counter, (CLIENTS * WRITES) as u64, "lost updates under writers of several clients");
    assert_eq!(torn.load(Ordering::Relaxed), 0, "a reader saw a half-written pair");
    assert!(reads.load(Ordering::Relaxed) > 0, "no reader ever got in");
}

#[test]
fn a_reader_waits_for_the_writer_and_gets_in_on_its_release() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("handover").unwrap();
    let guard = rw.write().lock().unwrap();
    let other = server.client();
    let waiter = std::thread::spawn(move || {
        let read = other.read_write_lock("handover").unwrap().read();
        let started = Instant::now();
        let guard = read.try_lock_for(20 * SECOND).unwrap();
        (guard.is_some(), started.elapsed())
    });
    let mut con = server.conn();
    wait_numsub(&mut con, &redisson_channel("handover"), 2); // and the holder's client
    std::thread::sleep(Duration::from_millis(200));
    guard.unlock().unwrap();
    let (got, waited) = waiter.join().unwrap();
    assert!(got, "the reader never got in");
    assert!(waited < 10 * SECOND, "woken by the release, not the 30 s lease: {waited:?}");
}

// ---------------------------------------------------------------------------
// Downgrade, upgrade, reentrancy, drop

#[test]
fn the_writer_may_downgrade_to_a_read_hold() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("down").unwrap();
    let write = rw.write().lock().unwrap();
    let read = rw.read().lock().unwrap();
    assert!(rw.read().is_locked().unwrap());
    write.unlock().unwrap();

    let mut con = server.conn();
    assert_eq!(hgetall(&mut con, "down").get("mode").map(String::as_str), Some("read"));
    // Other readers may now share it; writers may not.
    let other = server.client();
    let other_rw = other.read_write_lock("down").unwrap();
    let shared = std::thread::spawn(move || {
        let got_read = other_rw.read().try_lock().unwrap().is_some();
        let got_write = other_rw.write().try_lock().unwrap().is_some();
        (got_read, got_write)
    })
    .join()
    .unwrap();
    assert_eq!(shared, (true, false));
    read.unlock().unwrap();
    assert!(!exists(&mut con, "down"));
}

#[test]
fn an_upgrade_is_refused_at_once_with_a_typed_error_and_redis_untouched() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("up").unwrap();
    let read = rw.read().lock().unwrap();
    let mut con = server.conn();
    let before = hgetall(&mut con, "up");

    let started = Instant::now();
    let err = rw.write().lock().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("upgrade"), "{err}");
    assert!(started.elapsed() < 5 * SECOND);
    assert_eq!(rw.write().try_lock().unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(rw.write().try_lock_for(SECOND).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(hgetall(&mut con, "up"), before);
    assert!(!exists(&mut con, "keyholder_rwlock_writers:{up}"));

    // Once the read hold is gone, the write lock is this thread's to take.
    drop(read);
    assert!(!exists(&mut con, "up"));
    let write = rw.write().lock().unwrap();
    write.unlock().unwrap();
}

#[test]
fn both_sides_are_reentrant_and_count_their_holds() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("re").unwrap();
    let w1 = rw.write().lock().unwrap();
    let w2 = rw.write().lock().unwrap();
    assert_eq!(rw.write().hold_count().unwrap(), 2);
    let r1 = rw.read().lock().unwrap();
    let r2 = rw.read().try_lock().unwrap().unwrap();
    assert_eq!(rw.read().hold_count().unwrap(), 2);
    assert!(rw.read().is_held_by_current_thread().unwrap());
    assert!(rw.write().is_held_by_current_thread().unwrap());
    drop(w2);
    assert_eq!(rw.write().hold_count().unwrap(), 1);
    assert!(rw.write().is_locked().unwrap());
    drop(w1);
    assert!(!rw.write().is_locked().unwrap());
    assert!(rw.read().is_locked().unwrap());
    drop(r2);
    assert_eq!(rw.read().hold_count().unwrap(), 1);
    // A read re-entry after the write hold is gone is still a re-entry.
    let r3 = rw.read().lock().unwrap();
    assert_eq!(rw.read().hold_count().unwrap(), 2);
    drop(r3);
    drop(r1);
    let mut con = server.conn();
    assert!(!exists(&mut con, "re"));
}

#[test]
fn guards_release_on_drop() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("dropped").unwrap();
    let mut con = server.conn();
    {
        let _read = rw.read().lock().unwrap();
        assert!(exists(&mut con, "dropped"));
    }
    assert!(!exists(&mut con, "dropped"));
    {
        let _write = rw.write().lock().unwrap();
        assert!(exists(&mut con, "dropped"));
    }
    assert!(!exists(&mut con, "dropped"));
    assert_eq!(client.watched_locks(), 0, "renewal stopped with the last guard");
}

// ---------------------------------------------------------------------------
// Renewal and lost holds

#[test]
fn a_read_hold_is_renewed_past_its_watchdog_timeout() {
    let server = RedisServer::start();
    let client = short_client(&server);
    let rw = client.read_write_lock("renewed").unwrap();
    let read = rw.read().lock().unwrap();
    let owner = read.owner_id().to_owned();
    std::thread::sleep(4 * SHORT);
    assert!(!read.is_lost());
    let mut con = server.conn();
    assert!(exists(&mut con, "renewed"));
    let timeout_key = format!("{{renewed}}:{owner}:rwlock_timeout:1");
    assert!(exists(&mut con, &timeout_key), "the hold's timeout key was not renewed");
    assert!(pttl(&mut con, &timeout_key) > 0);
    // A writer elsewhere is still kept out.
    let other = server.client();
    let kept_out = std::thread::spawn(move || {
        other.read_write_lock("renewed").unwrap().write().try_lock().unwrap().is_none()
    })
    .join()
    .unwrap();
    assert!(kept_out);
    read.unlock().unwrap();
}

#[test]
fn a_write_hold_is_renewed_past_its_watchdog_timeout() {
    let server = RedisServer::start();
    let client = short_client(&server);
    let rw = client.read_write_lock("wrenewed").unwrap();
    let write = rw.write().lock().unwrap();
    std::thread::sleep(4 * SHORT);
    assert!(!write.is_lost());
    let mut con = server.conn();
    assert!(exists(&mut con, "wrenewed"));
    write.unlock().unwrap();
}

#[test]
fn force_unlocked_holds_are_reported_lost() {
    let server = RedisServer::start();
    let client = short_client(&server);
    let rw = client.read_write_lock("lost").unwrap();

    let read = rw.read().lock().unwrap();
    let signal = read.lost_signal();
    assert!(!rw.write().force_unlock().unwrap(), "the write side forces only a write hold");
    assert!(rw.read().force_unlock().unwrap());
    let reason = signal.recv_timeout(SHORT + SLACK).expect("the read hold's loss was never signalled");
    // Its own client forced it: marked lost when the force unlock returned.
    assert_eq!(reason, LostReason::Gone);
    assert!(read.is_lost());
    assert_eq!(read.unlock().unwrap_err().kind(), ErrorKind::LockLost);

    let write = rw.write().lock().unwrap();
    let signal = write.lost_signal();
    assert!(rw.write().force_unlock().unwrap());
    assert_eq!(signal.recv_timeout(SHORT + SLACK).unwrap(), LostReason::Gone);
    assert_eq!(write.unlock().unwrap_err().kind(), ErrorKind::LockLost);
}

#[test]
fn a_lost_holds_guard_leaves_the_threads_new_hold_alone() {
    let server = RedisServer::start();
    let client = short_client(&server);
    let rw = client.read_write_lock("again").unwrap();
    let old = rw.read().lock().unwrap();
    let signal = old.lost_signal();
    assert!(rw.read().force_unlock().unwrap());
    signal.recv_timeout(SHORT + SLACK).expect("the loss was never signalled");
    // The thread reads again: a new hold, not a re-entry of the lost one.
    let new = rw.read().lock().unwrap();
    assert!(!new.is_lost());
    assert_eq!(rw.read().hold_count().unwrap(), 1);
    assert_eq!(old.unlock().unwrap_err().kind(), ErrorKind::LockLost);
    assert_eq!(rw.read().hold_count().unwrap(), 1, "the lost guard released the new hold");
    new.unlock().unwrap();
    let mut con = server.conn();
    assert!(!exists(&mut con, "again"));
}

#[test]
fn a_fixed_lease_read_hold_expires_and_says_so() {
    let server = RedisServer::start();
    let client = server.client();
    let read = client
        .read_write_lock("fixed")
        .unwrap()
        .read()
        .with_lease(Lease::Fixed(Duration::from_millis(300)))
        .unwrap();
    let guard = read.lock().unwrap();
    let signal = guard.lost_signal();
    assert_eq!(
        signal.recv_timeout(300 * Duration::from_millis(1) + SLACK).unwrap(),
        LostReason::LeaseExpired
    );
    let mut con = server.conn();
    assert!(eventually(SLACK, || !exists(&mut con, "fixed")));
    assert_eq!(guard.unlock().unwrap_err().kind(), ErrorKind::LockLost);
}

#[test]
fn a_killed_readers_hold_expires_and_a_writer_gets_in() {
    let server = RedisServer::start();
    let url = server.url();
    let env = [(CHILD_URL, url.as_str()), (CHILD_LOCK, "killed")];
    let mut reader = ChildProcess::spawn("rwlock::child_reader", &env);
    reader.expect("READING ", 20 * SECOND);
    let client = server.client();
    let write = client.read_write_lock("killed").unwrap().write();
    // Renewed across several leases while alive.
    std::thread::sleep(3 * SHORT);
    assert!(write.try_lock().unwrap().is_none(), "the writer got in past a live reader");
    assert!(!reader.kill().success());
    let killed_at = Instant::now();
    let guard =
        write.try_lock_for(SHORT + 10 * SECOND).unwrap().expect("the dead reader's hold never expired");
    assert!(killed_at.elapsed() < SHORT + 5 * SECOND, "took {:?}", killed_at.elapsed());
    guard.unlock().unwrap();
}

// ---------------------------------------------------------------------------
// Writer preference

#[test]
fn a_writer_is_not_starved_by_a_stream_of_readers() {
    let server = RedisServer::start();
    const READERS: usize = 4;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Barrier::new(READERS + 1));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let client = server.client();
            let (stop, started, overlaps) = (Arc::clone(&stop), Arc::clone(&started), Arc::clone(&overlaps));
            std::thread::spawn(move || {
                let read = client.read_write_lock("starve").unwrap().read();
                // Staggered, overlapping holds: the lock is never free.
                std::thread::sleep(Duration::from_millis(10 * i as u64));
                let mut first = Some(started);
                let begun = Instant::now();
                while !stop.load(Ordering::Acquire) && begun.elapsed() < 60 * SECOND {
                    if let Some(guard) = read.try_lock_for(20 * SECOND).unwrap() {
                        if let Some(started) = first.take() {
                            started.wait();
                        }
                        if read.is_locked().unwrap() {
                            overlaps.fetch_add(1, Ordering::Relaxed);
                        }
                        std::thread::sleep(Duration::from_millis(40));
                        drop(guard);
                    }
                }
                if let Some(started) = first.take() {
                    started.wait();
                }
            })
        })
        .collect();
    started.wait();
    let client = server.client();
    let write = client.read_write_lock("starve").unwrap().write();
    let got = write.try_lock_for(20 * SECOND).unwrap();
    let writer_got_in = got.is_some();
    drop(got);
    stop.store(true, Ordering::Release);
    for reader in readers {
        reader.join().unwrap();
    }
    assert!(overlaps.load(Ordering::Relaxed) > 0);
    assert!(writer_got_in, "the writer was starved by the readers");
}

#[test]
fn a_writer_that_gives_up_lets_the_held_back_readers_in() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("giveup").unwrap();
    let read = rw.read().lock().unwrap();
    let other = server.client();
    let other_rw = other.read_write_lock("giveup").unwrap();
    let writer = {
        let other_rw = other_rw.clone();
        std::thread::spawn(move || other_rw.write().try_lock_for(2 * SECOND).unwrap().is_none())
    };
    let mut con = server.conn();
    assert!(eventually(10 * SECOND, || exists(&mut con, "keyholder_rwlock_writers:{giveup}")));
    // A new reader is held back while the writer waits, and let in once it
    // gives up.
    let third = server.client();
    let reader = std::thread::spawn(move || {
        let started = Instant::now();
        let got =
            third.read_write_lock("giveup").unwrap().read().try_lock_for(20 * SECOND).unwrap().is_some();
        (got, started.elapsed())
    });
    assert!(writer.join().unwrap(), "the writer got in past a reader");
    let (got, waited) = reader.join().unwrap();
    assert!(got);
    assert!(waited < 10 * SECOND, "{waited:?}");
    drop(read);
}

// ---------------------------------------------------------------------------
// A Java peer (its layout and messages written raw)

#[test]
fn a_java_writers_release_message_wakes_a_keyholder_reader() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let java = "8c1f0a4e-9999-4000-8000-000000000009:57";
    let _: () = redis::cmd("HSET")
        .arg("java")
        .arg("mode")
        .arg("write")
        .arg(format!("{java}:write"))
        .arg(1)
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE").arg("java").arg(30_000).query(&mut con).unwrap();
    let client = server.client();
    let reader = std::thread::spawn(move || {
        let started = Instant::now();
        let guard = client.read_write_lock("java").unwrap().read().try_lock_for(20 * SECOND).unwrap();
        let owner = guard.as_ref().map(|g| g.owner_id().to_owned());
        (owner, started.elapsed())
    });
    wait_numsub(&mut con, &redisson_channel("java"), 1);
    // Java's write unlock: DEL, then PUBLISH "1" on redisson_rwlock:{java}.
    let _: i64 = redis::cmd("DEL").arg("java").query(&mut con).unwrap();
    let _: i64 = redis::cmd("PUBLISH").arg(redisson_channel("java")).arg("1").query(&mut con).unwrap();
    let (owner, waited) = reader.join().unwrap();
    let owner = owner.expect("the reader never got in");
    assert!(waited < 10 * SECOND, "woken by Java's message, not the lease: {waited:?}");
    // The guard was dropped in the thread: the reader released in Redisson's way.
    assert!(owner.contains(':'));
    assert!(!common::exists(&mut con, "java"));
}

#[test]
fn a_read_hold_has_redissons_layout_for_a_java_peer() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("layout").unwrap();
    let guard = rw.read().lock().unwrap();
    let owner = guard.owner_id().to_owned();
    let mut con = server.conn();
    let hash = hgetall(&mut con, "layout");
    assert_eq!(hash.get("mode").map(String::as_str), Some("read"));
    assert_eq!(hash.get(&owner).map(String::as_str), Some("1"));
    assert!(exists(&mut con, &format!("{{layout}}:{owner}:rwlock_timeout:1")));
    drop(guard);
    let write = rw.write().fenced().lock().unwrap();
    let hash = hgetall(&mut con, "layout");
    assert_eq!(hash.get("mode").map(String::as_str), Some("write"));
    assert_eq!(hash.get(write.owner_id()).map(String::as_str), Some("1"));
    assert!(write.owner_id().ends_with(":write"));
    let token: u64 = redis::cmd("GET").arg("redisson_lock_token:{layout}").query(&mut con).unwrap();
    assert_eq!(write.fencing_token(), Some(token));
}

#[test]
fn a_braced_name_keeps_its_braces_as_in_redisson() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("{user}:1").unwrap();
    assert_eq!(rw.channel(), "redisson_rwlock:{user}:1");
    let guard = rw.read().lock().unwrap();
    let mut con = server.conn();
    assert!(exists(&mut con, &format!("{{user}}:1:{}:rwlock_timeout:1", guard.owner_id())));
    // A waiting writer elsewhere is woken on the braced channel.
    let other = server.client();
    let writer = std::thread::spawn(move || {
        let started = Instant::now();
        let got =
            other.read_write_lock("{user}:1").unwrap().write().try_lock_for(20 * SECOND).unwrap().is_some();
        (got, started.elapsed())
    });
    wait_numsub(&mut con, "redisson_rwlock:{user}:1", 2); // and the holder's client
    assert!(eventually(10 * SECOND, || exists(&mut con, "keyholder_rwlock_writers:tagged:{user}:1")));
    drop(guard);
    let (got, waited) = writer.join().unwrap();
    assert!(got);
    assert!(waited < 10 * SECOND, "{waited:?}");
}

// ---------------------------------------------------------------------------
// Fencing

#[test]
fn fenced_write_holds_mint_increasing_tokens_shared_with_the_fenced_lock_counter() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("fenced").unwrap();
    let write = rw.write().fenced();
    assert!(write.is_fenced());
    assert_eq!(write.last_fencing_token().unwrap(), None);
    let first = write.lock().unwrap();
    let t1 = first.fencing_token().unwrap();
    let again = write.lock().unwrap();
    assert_eq!(again.fencing_token(), Some(t1), "a re-entry keeps its hold's token");
    drop(again);
    drop(first);
    let second = write.lock().unwrap();
    let t2 = second.fencing_token().unwrap();
    assert!(t2 > t1);
    assert_eq!(client.lock("fenced").unwrap().last_fencing_token().unwrap(), Some(t2));
    drop(second);
    let plain = rw.write().lock().unwrap();
    assert_eq!(plain.fencing_token(), None);
}

// ---------------------------------------------------------------------------
// Bad input

#[test]
fn bad_input_is_a_typed_error_and_redis_is_untouched() {
    let server = RedisServer::start();
    let client = server.client();
    for name in ["", "a\nb", "keyholder_rwlock_writers:{x}", "redisson_lock_token:{x}"] {
        assert_eq!(client.read_write_lock(name).unwrap_err().kind(), ErrorKind::InvalidArgument, "{name:?}");
    }
    let long = "x".repeat(keyholder::MAX_NAME_LEN + 1);
    assert_eq!(client.read_write_lock(&long).unwrap_err().kind(), ErrorKind::InvalidArgument);
    let rw = client.read_write_lock("bad").unwrap();
    assert_eq!(
        rw.read().with_lease(Lease::Fixed(Duration::ZERO)).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        rw.write().with_lease(Lease::Fixed(Duration::ZERO)).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let mut con = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");

    // A foreign key at the name: WrongType, left as it was.
    let _: () = redis::cmd("SET").arg("bad").arg("foreign").query(&mut con).unwrap();
    assert_eq!(rw.read().try_lock().unwrap_err().kind(), ErrorKind::WrongType);
    assert_eq!(rw.write().try_lock().unwrap_err().kind(), ErrorKind::WrongType);
    assert_eq!(rw.read().hold_count().unwrap_err().kind(), ErrorKind::WrongType);
    let value: String = redis::cmd("GET").arg("bad").query(&mut con).unwrap();
    assert_eq!(value, "foreign");

    // A bad fencing counter.
    let _: () = redis::cmd("SET").arg("redisson_lock_token:{ctr}").arg("nope").query(&mut con).unwrap();
    let write = client.read_write_lock("ctr").unwrap().write().fenced();
    assert_eq!(write.try_lock().unwrap_err().kind(), ErrorKind::BadFencingCounter);
    assert!(!exists(&mut con, "ctr"));
}

// ---------------------------------------------------------------------------
// Redis Cluster

#[test]
fn on_a_cluster_every_shard_shares_reads_renews_them_and_wakes_writers_by_shard_channel() {
    use keyholder_testkit::cluster::RedisCluster;
    let cluster = RedisCluster::shared();
    let client = Client::builder_cluster(cluster.seed_urls()).watchdog_timeout(SHORT).build().unwrap();
    let other = Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    // Names on every primary, with and without a hash tag.
    let mut names = Vec::new();
    for primary in cluster.primaries() {
        for prefix in ["rwc", "{rwt}"] {
            if let Some(name) =
                (0..10_000).map(|i| format!("{prefix}:{i}")).find(|n| cluster.primary_of_key(n) == primary)
            {
                names.push(name);
            }
        }
    }
    assert!(names.len() >= 4, "{names:?}");
    let guards: Vec<_> =
        names.iter().map(|n| client.read_write_lock(n).unwrap().read().lock().unwrap()).collect();
    // Renewed (hash and timeout keys, one call per slot) across several leases.
    std::thread::sleep(4 * SHORT);
    for (name, guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name}");
        let mut con = cluster.conn_for_key(name);
        assert!(exists(&mut con, name), "{name}");
    }
    drop(guards);
    // A writer on another client waits on each shard's channel and is woken
    // by the release (the readers' fixed 20 s lease would keep it out
    // otherwise).
    let guards: Vec<_> = names
        .iter()
        .map(|n| {
            let read = client.read_write_lock(n).unwrap().read();
            read.with_lease(Lease::Fixed(20 * SECOND)).unwrap().lock().unwrap()
        })
        .collect();
    let waiters: Vec<_> = names
        .iter()
        .map(|name| {
            let write = other.read_write_lock(name).unwrap().write();
            std::thread::spawn(move || {
                let started = Instant::now();
                let got = write.try_lock_for(20 * SECOND).unwrap().is_some();
                (got, started.elapsed())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    drop(guards);
    for waiter in waiters {
        let (got, waited) = waiter.join().unwrap();
        assert!(got);
        assert!(waited < 10 * SECOND, "woken by the release, not the lease: {waited:?}");
    }
}
