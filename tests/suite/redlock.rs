//! RedLock over five private Redis masters: quorum, validity time, masters
//! killed, release on every master after a failed attempt, fencing.
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
use keyholder::{Client, ErrorKind, Lease, RedLock};

const SECOND: Duration = Duration::from_secs(1);
const CHILD_URLS: &str = "KEYHOLDER_TEST_REDLOCK_URLS";

fn five() -> Vec<RedisServer> {
    (0..5).map(|_| RedisServer::start()).collect()
}

fn clients(servers: &[RedisServer]) -> Vec<Client> {
    servers.iter().map(ServerExt::client).collect()
}

fn short_lease_clients(servers: &[RedisServer]) -> Vec<Client> {
    servers
        .iter()
        .map(|s| s.builder().watchdog_timeout(Duration::from_millis(500)).build().unwrap())
        .collect()
}

/// How many of the servers have `key`, the stopped ones (by index) aside.
fn holding_but(servers: &[RedisServer], stopped: &[usize], key: &str) -> usize {
    servers.iter().enumerate().filter(|(i, s)| !stopped.contains(i) && exists(&mut s.conn(), key)).count()
}

fn holding(servers: &[RedisServer], key: &str) -> usize {
    holding_but(servers, &[], key)
}

#[test]
fn takes_every_master_and_releases_them_all_on_drop() {
    let servers = five();
    let masters = clients(&servers);
    let lock = RedLock::new(&masters, "rl").unwrap();
    assert_eq!(lock.quorum(), 3);
    {
        let guard = lock.try_lock_for(5 * SECOND).unwrap().expect("all masters free");
        assert_eq!(guard.masters_held().len(), 5);
        assert_eq!((guard.quorum(), guard.masters()), (3, 5));
        assert_eq!(holding(&servers, "rl"), 5);
        // Watchdog lease (30 s) less the elapsed time and 302 ms of drift.
        assert!(guard.validity() > Duration::from_secs(25) && guard.validity() < Duration::from_secs(30));
        assert!(!guard.is_lost());
        assert_eq!(guard.fencing_token(), None);
    }
    assert_eq!(holding(&servers, "rl"), 0);
    // A fixed lease: the validity is at most lease − drift.
    let fixed = lock.with_lease(Lease::Fixed(Duration::from_secs(10))).unwrap();
    let guard = fixed.lock().unwrap();
    assert!(guard.validity() <= Duration::from_millis(10_000 - 102));
    guard.unlock().unwrap();
    assert_eq!(holding(&servers, "rl"), 0);
}

#[test]
fn acquires_with_one_or_two_masters_killed_and_refuses_without_a_quorum() {
    let mut servers = five();
    let masters = clients(&servers);
    let lock = RedLock::new(&masters, "rl").unwrap();
    servers[0].stop();
    let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("4 of 5 is a quorum");
    assert_eq!(guard.masters_held().len(), 4);
    drop(guard);
    servers[3].stop();
    let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("3 of 5 is a quorum");
    assert_eq!(guard.masters_held().len(), 3);
    drop(guard);
    assert_eq!(holding_but(&servers, &[0, 3], "rl"), 0);
    // Three of the masters reachable, one of them held by another client:
    // 2 of 5 grant it, which is refused, and released where taken.
    let rival = servers[1].client();
    let held = rival.lock("rl").unwrap().lock().unwrap();
    assert!(lock.try_lock_for(Duration::from_millis(600)).unwrap().is_none());
    assert_eq!(holding_but(&servers, &[0, 3], "rl"), 1, "only the rival's key is left");
    drop(held);
    // Three masters down: fewer than a quorum answer at all, an error.
    servers[4].stop();
    let e = lock.try_lock_for(5 * SECOND).unwrap_err();
    assert!(e.is_redis_error(), "{e}");
    assert_eq!(holding_but(&servers, &[0, 3, 4], "rl"), 0, "a failed attempt left a key behind");
}

#[test]
fn a_failed_attempt_releases_on_every_master() {
    let servers = five();
    let masters = clients(&servers);
    let lock = RedLock::new(&masters, "rl").unwrap();
    // A rival holds the name on the last three masters in asking order:
    // the attempt takes the first two, then is refused.
    let rival_clients: Vec<Client> = clients(&servers);
    let rival = RedLock::new(&rival_clients, "rl").unwrap();
    let rival_guards: Vec<_> = rival.locks()[2..].iter().map(|l| l.lock().unwrap()).collect();
    assert!(lock.try_lock().unwrap().is_none());
    assert!(lock.try_lock_for(Duration::from_millis(500)).unwrap().is_none());
    assert_eq!(holding(&servers, "rl"), 3, "keys left on the masters the attempt took");
    drop(rival_guards);
    assert_eq!(holding(&servers, "rl"), 0);
    let _guard = lock.try_lock().unwrap().expect("free now");
}

#[test]
fn bad_input_is_a_typed_error_and_redis_is_untouched() {
    let servers = five();
    let masters = clients(&servers);
    let before: Vec<i64> = servers.iter().map(|s| command_calls(&mut s.conn())).collect();
    assert_eq!(RedLock::new(&[], "rl").unwrap_err().kind(), ErrorKind::InvalidArgument);
    let twice = vec![masters[0].clone(), masters[1].clone(), masters[0].clone()];
    assert_eq!(RedLock::new(&twice, "rl").unwrap_err().kind(), ErrorKind::InvalidArgument);
    let same_server = vec![masters[0].clone(), masters[1].clone(), servers[1].client()];
    assert_eq!(RedLock::new(&same_server, "rl").unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(RedLock::new(&masters, "").unwrap_err().kind(), ErrorKind::InvalidArgument);
    let lock = RedLock::new(&masters, "rl").unwrap();
    assert_eq!(lock.with_lease(Lease::Fixed(Duration::ZERO)).unwrap_err().kind(), ErrorKind::InvalidArgument);
    // A new client probes its server once: count from after it.
    let after: Vec<i64> = servers.iter().map(|s| command_calls(&mut s.conn())).collect();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let probe = if i == 1 { 6 } else { 0 };
        assert!(a - b <= probe, "server {i}: {} commands", a - b);
    }
    assert_eq!(holding(&servers, "rl"), 0);
}

#[test]
fn reentrant_per_thread_on_every_master() {
    let servers = five();
    let masters = clients(&servers);
    let lock = RedLock::new(&masters, "rl").unwrap();
    let outer = lock.lock().unwrap();
    {
        let _inner = lock.try_lock().unwrap().expect("re-entered");
        for l in lock.locks() {
            assert_eq!(l.hold_count().unwrap(), 2);
        }
    }
    for l in lock.locks() {
        assert_eq!(l.hold_count().unwrap(), 1);
    }
    let other = lock.clone();
    assert!(thread::spawn(move || other.try_lock().unwrap().is_none()).join().unwrap());
    drop(outer);
    assert_eq!(holding(&servers, "rl"), 0);
}

#[test]
fn the_loss_of_the_quorum_is_signalled() {
    let servers = five();
    let masters = short_lease_clients(&servers);
    let lock = RedLock::new(&masters, "rl").unwrap();
    let guard = lock.lock().unwrap();
    let mut lost = guard.lost_signal();
    // Two masters lost: a quorum of three remains.
    for server in &servers[..2] {
        let _: i64 = redis::cmd("DEL").arg("rl").query(&mut server.conn()).unwrap();
    }
    assert!(lost.recv_timeout(Duration::from_millis(1_500)).is_none(), "lost with a quorum left");
    assert!(!guard.is_lost());
    let _: i64 = redis::cmd("DEL").arg("rl").query(&mut servers[2].conn()).unwrap();
    let whole = lost.recv_timeout(10 * SECOND).expect("the quorum's loss is signalled");
    assert!(whole.component.is_some());
    assert!(guard.is_lost());
    drop(guard);
    assert_eq!(holding(&servers, "rl"), 0);
    // A fixed lease: the end of the validity time is the loss.
    let fixed = lock.with_lease(Lease::Fixed(Duration::from_millis(400))).unwrap();
    let guard = fixed.lock().unwrap();
    let mut lost = guard.lost_signal();
    let whole = lost.recv_timeout(10 * SECOND).expect("the validity ends");
    assert!(Instant::now() >= guard.valid_until());
    assert!(guard.is_lost(), "{whole:?}");
}

#[test]
fn fenced_combined_tokens_strictly_increase_across_holders() {
    let servers = five();
    let (a, b) = (clients(&servers), clients(&servers));
    let (la, lb) = (RedLock::new(&a, "rl").unwrap().fenced(), RedLock::new(&b, "rl").unwrap().fenced());
    let mut last = 0;
    for round in 0..6 {
        // The counters drift apart: one master's jumps ahead.
        if round == 3 {
            let _: () = redis::cmd("SET")
                .arg("redisson_lock_token:{rl}")
                .arg(1_000)
                .query(&mut servers[2].conn())
                .unwrap();
        }
        let lock = if round % 2 == 0 { &la } else { &lb };
        let guard = lock.try_lock_for(5 * SECOND).unwrap().expect("free");
        let token = guard.fencing_token().expect("fenced");
        assert!(token > last, "round {round}: {token} after {last}");
        assert_eq!(guard.master_tokens().len(), 5);
        assert_eq!(token, guard.master_tokens().iter().map(|(_, t)| *t).max().unwrap());
        // A quorum of counters is at least the combined token.
        let raised = servers
            .iter()
            .filter(|s| {
                let v: Option<u64> =
                    redis::cmd("GET").arg("redisson_lock_token:{rl}").query(&mut s.conn()).unwrap();
                v.unwrap_or(0) >= token
            })
            .count();
        assert!(raised >= 3, "only {raised} counters raised");
        last = token;
        guard.unlock().unwrap();
    }
    assert!(last > 1_000);
}

#[test]
fn several_clients_exclude_each_other_without_lost_updates() {
    let servers = five();
    const HOLDERS: usize = 3;
    const ROUNDS: usize = 10;
    let start = Arc::new(Barrier::new(HOLDERS));
    let counter_url = servers[0].url();
    let workers: Vec<_> = (0..HOLDERS)
        .map(|_| {
            let lock = RedLock::new(&clients(&servers), "rl").unwrap();
            let (start, url) = (Arc::clone(&start), counter_url.clone());
            thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                start.wait();
                let mut done = 0;
                for _ in 0..ROUNDS {
                    let Some(guard) = lock.try_lock_for(30 * SECOND).unwrap() else { continue };
                    let v: Option<i64> = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
                    thread::yield_now();
                    let _: () =
                        redis::cmd("SET").arg("counter").arg(v.unwrap_or(0) + 1).query(&mut con).unwrap();
                    guard.unlock().unwrap();
                    done += 1;
                }
                done
            })
        })
        .collect();
    let total: i64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(total, (HOLDERS * ROUNDS) as i64);
    let v: i64 = redis::cmd("GET").arg("counter").query(&mut servers[0].conn()).unwrap();
    assert_eq!(v, total, "lost updates");
}

/// Child: takes the RedLock `rl` over the masters (watchdog 500 ms), says
/// `LOCKED`, and holds it until killed.
#[test]
#[ignore = "a child-process mode, run by its parent test"]
fn child_redlock_holder() {
    let Some(urls) = child::child_env(CHILD_URLS) else { return };
    let masters: Vec<Client> = urls
        .split(' ')
        .map(|url| Client::builder(url).watchdog_timeout(Duration::from_millis(500)).build().unwrap())
        .collect();
    let _guard = RedLock::new(&masters, "rl").unwrap().lock().unwrap();
    child::say("LOCKED");
    let lines = child::stdin_lines();
    let _ = lines.recv_timeout(30 * SECOND);
    std::process::exit(3);
}

#[test]
fn a_killed_holders_redlock_frees_itself_within_its_lease() {
    let servers = five();
    let urls = servers.iter().map(RedisServer::url).collect::<Vec<_>>().join(" ");
    let mut holder = ChildProcess::spawn("redlock::child_redlock_holder", &[(CHILD_URLS, &urls)]);
    holder.expect("LOCKED", 20 * SECOND);
    let lock = RedLock::new(&clients(&servers), "rl").unwrap();
    thread::sleep(Duration::from_millis(1_200));
    assert!(lock.try_lock().unwrap().is_none(), "the live child's lock expired");
    holder.kill();
    let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("freed by the lease");
    drop(guard);
}
