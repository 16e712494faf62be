//! MultiLock: all of several locks or none, across servers and cluster
//! shards, in one order every process agrees on.
//!
//! Children are this test binary run again (`common::child`): `child_*`
//! tests are child bodies and do nothing unless their variables are set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::{RedisServer, ServerExt, command_calls, exists};
use keyholder::{Client, ErrorKind, MultiLock};
use keyholder_testkit::cluster::RedisCluster;

const SECOND: Duration = Duration::from_secs(1);
const CHILD_URLS: &str = "KEYHOLDER_TEST_MULTI_URLS";

fn short_lease(server: &RedisServer) -> Client {
    server.builder().watchdog_timeout(Duration::from_millis(500)).build().unwrap()
}

fn get(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("GET").arg(key).query::<Option<i64>>(con).unwrap().unwrap_or(0)
}

#[test]
fn acquires_locks_of_two_servers_and_releases_them_all_on_drop() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (s1.client(), s2.client());
    let multi = MultiLock::new(vec![c1.lock("a").unwrap(), c2.lock("b").unwrap()]).unwrap();
    {
        let guard = multi.try_lock_for(SECOND).unwrap().expect("both free");
        assert_eq!(guard.guards().len(), 2);
        assert!(exists(&mut s1.conn(), "a") && exists(&mut s2.conn(), "b"));
        assert!(multi.is_held_by_current_thread().unwrap());
        assert!(!guard.is_lost());
    }
    assert!(!exists(&mut s1.conn(), "a") && !exists(&mut s2.conn(), "b"));
    // unlock() does the same and reports success.
    multi.lock().unwrap().unlock().unwrap();
    assert!(!exists(&mut s1.conn(), "a") && !exists(&mut s2.conn(), "b"));
}

#[test]
fn locks_are_ordered_by_deployment_then_name_whatever_the_order_given() {
    let server = RedisServer::start();
    let client = server.client();
    let names = |multi: &MultiLock| multi.locks().iter().map(|l| l.name().to_owned()).collect::<Vec<_>>();
    let one = MultiLock::new(["c", "a", "b"].map(|n| client.lock(n).unwrap())).unwrap();
    let two = MultiLock::new(["b", "c", "a"].map(|n| client.lock(n).unwrap())).unwrap();
    assert_eq!(names(&one), ["a", "b", "c"]);
    assert_eq!(names(&two), names(&one));
}

#[test]
fn bad_input_is_a_typed_error_and_redis_is_untouched() {
    let server = RedisServer::start();
    let (client, other) = (server.client(), server.client());
    let mut con = server.conn();
    let before = command_calls(&mut con);
    let empty = MultiLock::new(Vec::new()).unwrap_err();
    assert_eq!(empty.kind(), ErrorKind::InvalidArgument);
    // The same lock twice, through one client or two clients of one server.
    let twice = MultiLock::new(vec![client.lock("x").unwrap(), client.lock("x").unwrap()]).unwrap_err();
    assert_eq!(twice.kind(), ErrorKind::InvalidArgument);
    let two_clients = MultiLock::new(vec![client.lock("x").unwrap(), other.lock("x").unwrap()]).unwrap_err();
    assert_eq!(two_clients.kind(), ErrorKind::InvalidArgument);
    // Only this test's INFO calls ran since.
    assert_eq!(command_calls(&mut con), before);
    assert!(!exists(&mut con, "x"));
}

#[test]
fn a_partial_failure_releases_what_it_took() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2, rival) = (s1.client(), s2.client(), s2.client());
    let held = rival.lock("z").unwrap().lock().unwrap();
    let multi = MultiLock::new(vec![c2.lock("z").unwrap(), c1.lock("a").unwrap()]).unwrap();
    let begun = Instant::now();
    assert!(multi.try_lock_for(Duration::from_millis(300)).unwrap().is_none());
    assert!(begun.elapsed() < 300 * Duration::from_millis(1) + 5 * SECOND, "the wait was not bounded");
    assert!(!exists(&mut s1.conn(), "a"), "the lock taken first was kept");
    assert!(multi.try_lock().unwrap().is_none());
    assert!(!exists(&mut s1.conn(), "a"));
    drop(held);
    let _guard = multi.try_lock().unwrap().expect("free now");
}

#[test]
fn a_failing_server_is_an_error_and_releases_what_was_taken() {
    let mut s1 = RedisServer::start();
    let mut s2 = RedisServer::start();
    let (c1, c2) = (s1.client(), s2.client());
    let multi = MultiLock::new(vec![c1.lock("a").unwrap(), c2.lock("b").unwrap()]).unwrap();
    // Stop the server of the lock taken second, so the first is taken.
    let (failing, intact, first) =
        if multi.locks()[1].name() == "b" { (&mut s2, &s1, "a") } else { (&mut s1, &s2, "b") };
    failing.stop();
    let e = multi.try_lock_for(SECOND).unwrap_err();
    assert!(e.is_redis_error(), "{e}");
    assert!(!exists(&mut intact.conn(), first), "a lock was kept after the failure");
}

#[test]
fn reentrant_per_thread_like_its_components() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (s1.client(), s2.client());
    let multi = MultiLock::new(vec![c1.lock("a").unwrap(), c2.lock("b").unwrap()]).unwrap();
    let outer = multi.lock().unwrap();
    {
        let _inner = multi.try_lock().unwrap().expect("re-entered");
        for lock in multi.locks() {
            assert_eq!(lock.hold_count().unwrap(), 2);
        }
    }
    for lock in multi.locks() {
        assert_eq!(lock.hold_count().unwrap(), 1);
    }
    // Another thread (another owner) cannot take it meanwhile.
    let other = multi.clone();
    assert!(thread::spawn(move || other.try_lock().unwrap().is_none()).join().unwrap());
    drop(outer);
    assert!(!exists(&mut s1.conn(), "a") && !exists(&mut s2.conn(), "b"));
}

#[test]
fn a_lost_component_is_signalled() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (c1, c2) = (short_lease(&s1), short_lease(&s2));
    let multi = MultiLock::new(vec![c1.lock("a").unwrap(), c2.lock("b").unwrap()]).unwrap();
    let guard = multi.lock().unwrap();
    let mut lost = guard.lost_signal();
    assert!(lost.try_recv().is_none());
    // Someone force-unlocks the component on the second server.
    let index = multi.locks().iter().position(|l| l.name() == "b").unwrap();
    let _: i64 = redis::cmd("DEL").arg("b").query(&mut s2.conn()).unwrap();
    let lost = lost.recv_timeout(10 * SECOND).expect("the loss is signalled");
    assert_eq!(lost.component, Some(index));
    assert!(guard.is_lost());
    assert_eq!(guard.lost_reason().map(|(i, _)| i), Some(index));
    let e = guard.unlock().unwrap_err();
    assert!(e.is_lock_lost() || e.is_not_owner(), "{e}");
    assert!(!exists(&mut s1.conn(), "a"), "the intact component was not released");
}

#[test]
fn overlapping_multilocks_from_several_clients_exclude_each_other_without_deadlock() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    const CLIENTS: usize = 3;
    const THREADS: usize = 2;
    const ROUNDS: usize = 15;
    let start = Arc::new(Barrier::new(CLIENTS * THREADS));
    let mut workers = Vec::new();
    for c in 0..CLIENTS {
        let (c1, c2) = (s1.client(), s2.client());
        for t in 0..THREADS {
            // Overlapping sets, given in opposite orders.
            let locks = if (c + t) % 2 == 0 {
                vec![c1.lock("acct:1").unwrap(), c2.lock("acct:2").unwrap(), c1.lock("acct:3").unwrap()]
            } else {
                vec![c1.lock("acct:3").unwrap(), c2.lock("acct:2").unwrap()]
            };
            let multi = MultiLock::new(locks).unwrap();
            let (u1, u2) = (s1.url(), s2.url());
            let start = Arc::clone(&start);
            workers.push(thread::spawn(move || {
                let mut con1 = redis::Client::open(u1).unwrap().get_connection().unwrap();
                let mut con2 = redis::Client::open(u2).unwrap().get_connection().unwrap();
                start.wait();
                let mut done = 0;
                for _ in 0..ROUNDS {
                    let Some(guard) = multi.try_lock_for(20 * SECOND).unwrap() else { continue };
                    // Read-modify-write that loses updates unless exclusive.
                    let v = get(&mut con2, "count:2");
                    let w = get(&mut con1, "count:3");
                    thread::yield_now();
                    let _: () = redis::cmd("SET").arg("count:2").arg(v + 1).query(&mut con2).unwrap();
                    let _: () = redis::cmd("SET").arg("count:3").arg(w + 1).query(&mut con1).unwrap();
                    guard.unlock().unwrap();
                    done += 1;
                }
                done
            }));
        }
    }
    let total: i64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(total, (CLIENTS * THREADS * ROUNDS) as i64, "some attempt timed out: a deadlock?");
    assert_eq!(get(&mut s2.conn(), "count:2"), total, "lost updates on count:2");
    assert_eq!(get(&mut s1.conn(), "count:3"), total, "lost updates on count:3");
}

#[test]
fn works_across_the_shards_of_a_cluster_and_a_separate_server() {
    let cluster = RedisCluster::shared();
    let server = RedisServer::start();
    let cc = Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    let single = server.client();
    // One name on each primary.
    let names: Vec<String> = cluster
        .primaries()
        .into_iter()
        .map(|p| {
            (0..10_000)
                .map(|i| format!("multi-shard:{i}"))
                .find(|name| cluster.primary_of_key(name) == p)
                .unwrap()
        })
        .collect();
    let mut locks: Vec<_> = names.iter().map(|n| cc.lock(n).unwrap()).collect();
    locks.push(single.lock("multi-shard:single").unwrap());
    let multi = MultiLock::new(locks).unwrap();
    let rival = MultiLock::new(names.iter().map(|n| cc.lock(n).unwrap()).collect::<Vec<_>>()).unwrap();
    {
        let _guard = multi.lock().unwrap();
        for name in &names {
            assert!(exists(&mut cluster.conn_for_key(name), name));
        }
        let other = rival.clone();
        assert!(thread::spawn(move || other.try_lock().unwrap().is_none()).join().unwrap());
    }
    for name in &names {
        assert!(!exists(&mut cluster.conn_for_key(name), name));
    }
    assert!(!exists(&mut server.conn(), "multi-shard:single"));
}

/// Child: takes a MultiLock over `a` on each server (watchdog 500 ms), says
/// `LOCKED`, and holds it until killed.
#[test]
#[ignore = "a child-process mode, run by its parent test"]
fn child_multi_holder() {
    let Some(urls) = child::child_env(CHILD_URLS) else { return };
    let clients: Vec<Client> = urls
        .split(' ')
        .map(|url| Client::builder(url).watchdog_timeout(Duration::from_millis(500)).build().unwrap())
        .collect();
    let multi = MultiLock::new(clients.iter().map(|c| c.lock("a").unwrap()).collect::<Vec<_>>()).unwrap();
    let _guard = multi.lock().unwrap();
    child::say("LOCKED");
    let lines = child::stdin_lines();
    let _ = lines.recv_timeout(30 * SECOND);
    std::process::exit(3);
}

#[test]
fn a_killed_holders_multilock_frees_itself_within_its_lease() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let urls = format!("{} {}", s1.url(), s2.url());
    let mut holder = ChildProcess::spawn("multi_lock::child_multi_holder", &[(CHILD_URLS, &urls)]);
    holder.expect("LOCKED", 20 * SECOND);
    let (c1, c2) = (s1.client(), s2.client());
    let multi = MultiLock::new(vec![c1.lock("a").unwrap(), c2.lock("a").unwrap()]).unwrap();
    assert!(multi.try_lock().unwrap().is_none(), "the child holds it");
    // Held well past the child's lease while it lives: the watchdog renews.
    thread::sleep(Duration::from_millis(1_200));
    assert!(multi.try_lock().unwrap().is_none(), "the live child's lock expired");
    holder.kill();
    let begun = Instant::now();
    let guard = multi.try_lock_for(10 * SECOND).unwrap().expect("freed by the lease");
    assert!(begun.elapsed() < 10 * SECOND);
    drop(guard);
}

#[test]
fn a_multilock_takes_handles_of_any_kind() {
    let server = RedisServer::start();
    let (client, other) = (server.client(), server.client());

    // Fair locks, all or none.
    let fair =
        MultiLock::of([client.fair_lock("any:f1").unwrap(), client.fair_lock("any:f2").unwrap()]).unwrap();
    let guard = fair.try_lock().unwrap().expect("both fair locks are free");
    assert_eq!(guard.guards().len(), 2);
    assert!(other.fair_lock("any:f2").unwrap().try_lock().unwrap().is_none());
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
    assert!(other.fair_lock("any:f2").unwrap().try_lock().unwrap().is_some());

    // Read sides share with other readers and keep writers out.
    let (a, b) = (client.read_write_lock("any:r1").unwrap(), client.read_write_lock("any:r2").unwrap());
    let readers = MultiLock::of([a.read(), b.read()]).unwrap();
    let reading = readers.lock().unwrap();
    let other_side = other.read_write_lock("any:r2").unwrap();
    assert!(MultiLock::of([other_side.read()]).unwrap().try_lock().unwrap().is_some());
    assert!(MultiLock::of([other_side.write()]).unwrap().try_lock().unwrap().is_none());
    drop(reading);
    let writing = MultiLock::of([other_side.write()]).unwrap().try_lock_for(2 * SECOND).unwrap();
    assert!(writing.is_some(), "the readers' release let the writer in");

    // Spin locks too; the same lock twice is refused as for `Lock`s.
    let spin = client.spin_lock("any:s").unwrap();
    let twice = MultiLock::of([spin.clone(), spin]).unwrap_err();
    assert_eq!(twice.kind(), ErrorKind::InvalidArgument);
}
