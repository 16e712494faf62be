//! The operators' tool and admin API on every kind keyholder makes: a
//! reentrant lock, a fair lock with a queued waiter, a read-write lock with
//! readers and a waiting writer, a semaphore and a latch with a waiting
//! client, a permit-expirable semaphore with a held permit, and a bare
//! number nobody waits on; `inspect`, `list` (internal keys never listed)
//! and `--json` on one server, on the shared Redis Cluster and through
//! Sentinel; `force-unlock` where it applies; and `watch` following a
//! restart, a Sentinel failover and a cluster slot move. Every wait is
//! bounded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::cli::{RUN_LIMIT, SECOND, bin, cluster_args, expect_exit, finish, json, run, text};
use crate::common::{RedisServer, ServerExt, eventually, recv_within, spawn};
use keyholder::{Client, LockKind, ReadWriteMode, WatchEvent};
use keyholder_testkit::cluster::RedisCluster;

/// How long a waiter of the arranged kinds waits at most.
const WAIT: Duration = Duration::from_secs(20);

/// Every kind under one prefix, held by one client and waited on by
/// another; dropping it ends the waits.
struct Kinds {
    prefix: String,
    holder: Client,
    other: Client,
    guards: Option<Guards>,
    waiters: Vec<mpsc::Receiver<bool>>,
}

/// The holds (not `Send`: kept on the test's thread).
#[allow(dead_code)]
struct Guards {
    lock: keyholder::LockGuard,
    fair: keyholder::FairLockGuard,
    read: (keyholder::ReadGuard, keyholder::ReadGuard),
    permit: keyholder::ExpirablePermits,
}

impl Kinds {
    fn name(&self, kind: &str) -> String {
        format!("{}:{kind}", self.prefix)
    }

    /// Arranges the kinds and waits until every waiter shows.
    fn arrange(holder: Client, other: Client, prefix: &str) -> Kinds {
        let name = |kind: &str| format!("{prefix}:{kind}");
        let lock = holder.lock(&name("lock")).unwrap().lock().unwrap();
        let fair = holder.fair_lock(&name("fair")).unwrap().lock().unwrap();
        let rw = holder.read_write_lock(&name("rw")).unwrap();
        let read = (rw.read().lock().unwrap(), rw.read().lock().unwrap());
        let sem = holder.semaphore(&name("sem")).unwrap();
        assert!(sem.try_set_permits(1).unwrap());
        let permits = holder.permit_expirable_semaphore(&name("permits")).unwrap();
        assert!(permits.try_set_permits(3).unwrap());
        let permit = permits.try_acquire(1).unwrap().expect("a permit");
        let latch = holder.count_down_latch(&name("latch")).unwrap();
        assert!(latch.try_set_count(2).unwrap());
        assert!(holder.semaphore(&name("bare")).unwrap().try_set_permits(5).unwrap());

        let mut waiters = Vec::new();
        let fair_lock = other.fair_lock(&name("fair")).unwrap();
        waiters.push(spawn(move || fair_lock.try_lock_for(WAIT).unwrap().is_some()));
        let writer = other.read_write_lock(&name("rw")).unwrap().write();
        waiters.push(spawn(move || writer.try_lock_for(WAIT).unwrap().is_some()));
        let wanted = other.semaphore(&name("sem")).unwrap();
        waiters.push(spawn(move || wanted.try_acquire_for(2, WAIT).unwrap().is_some()));
        let opened = other.count_down_latch(&name("latch")).unwrap();
        waiters.push(spawn(move || opened.await_for(WAIT).unwrap()));

        let kinds = Kinds {
            prefix: prefix.to_owned(),
            holder,
            other,
            guards: Some(Guards { lock, fair, read, permit }),
            waiters,
        };
        let ready = || {
            let info = |kind: &str| kinds.holder.inspect(&kinds.name(kind)).unwrap();
            info("fair").fair_queue.len() == 1
                && info("rw").waiting_writers.len() == 1
                && info("sem").kind == LockKind::Semaphore
                && info("latch").kind == LockKind::CountDownLatch
        };
        assert!(eventually(10 * SECOND, ready), "the waiters never showed");
        kinds
    }

    /// Checks what `inspect` says of each kind.
    fn check_inspect(&self) {
        let info = |kind: &str| self.holder.inspect(&self.name(kind)).unwrap();
        let id = self.holder.id();

        let lock = info("lock");
        assert_eq!((lock.kind, lock.holders[0].client_id.as_str()), (LockKind::Reentrant, id));
        assert!(lock.is_locked());

        let fair = info("fair");
        assert_eq!(fair.kind, LockKind::Fair, "{fair:?}");
        assert!(fair.is_locked() && fair.holders[0].client_id == id);
        let queued = &fair.fair_queue[0];
        assert!(queued.owner.starts_with(self.other.id()), "{queued:?}");
        assert!(
            queued.deadline.is_some() && queued.remaining.is_some_and(|r| r > Duration::ZERO),
            "{queued:?}"
        );

        let rw = info("rw");
        assert_eq!((rw.kind, rw.mode), (LockKind::ReadWrite, Some(ReadWriteMode::Read)), "{rw:?}");
        let readers: Vec<_> = rw.readers().collect();
        assert_eq!(readers.len(), 1);
        assert_eq!((readers[0].client_id.as_str(), readers[0].count), (id, 2));
        assert!(rw.writer().is_none());
        assert!(rw.waiting_writers[0].owner.starts_with(self.other.id()));
        assert!(rw.waiting_writers[0].owner.ends_with(":write"));
        assert_eq!(rw.unlock_channel, format!("redisson_rwlock:{{{}}}", self.name("rw")));

        let sem = info("sem");
        assert_eq!((sem.kind, sem.count), (LockKind::Semaphore, Some(1)));
        assert!(sem.subscribers >= 1 && !sem.is_locked());
        assert_eq!(sem.unlock_channel, format!("redisson_sc:{{{}}}", self.name("sem")));

        let permits = info("permits");
        assert_eq!((permits.kind, permits.count), (LockKind::PermitExpirableSemaphore, Some(2)));
        assert_eq!(permits.permits.len(), 1);
        let guards = self.guards.as_ref().unwrap();
        assert_eq!(permits.permits[0].id, guards.permit.ids()[0].to_string());
        assert!(permits.permits[0].remaining.is_some_and(|r| r > Duration::ZERO && r <= 30 * SECOND));

        let latch = info("latch");
        assert_eq!((latch.kind, latch.count), (LockKind::CountDownLatch, Some(2)));
        let bare = info("bare");
        assert_eq!((bare.kind, bare.count), (LockKind::SemaphoreOrLatch, Some(5)));
    }

    /// Checks what `list` finds: every kind Redis can tell, no internal key.
    fn check_list(&self, client: &Client) {
        let listed = client.list_locks(&format!("{}:*", self.prefix), 100).unwrap();
        let kinds: BTreeMap<String, LockKind> =
            listed.iter().map(|l| (l.name.trim_start_matches(&self.prefix).to_owned(), l.kind)).collect();
        let expected: BTreeMap<String, LockKind> = [
            (":fair", LockKind::Fair),
            (":latch", LockKind::CountDownLatch),
            (":lock", LockKind::Reentrant),
            (":permits", LockKind::PermitExpirableSemaphore),
            (":rw", LockKind::ReadWrite),
            (":sem", LockKind::Semaphore),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(kinds, expected, "{listed:?}");
        let rw = listed.iter().find(|l| l.kind == LockKind::ReadWrite).unwrap();
        assert_eq!((rw.mode, rw.holders[0].count), (Some(ReadWriteMode::Read), 2));
    }

    /// Ends every wait: the holds go, the semaphore and latch are fed.
    fn release(mut self) {
        drop(self.guards.take());
        self.holder.semaphore(&self.name("sem")).unwrap().add_permits(1).unwrap();
        let latch = self.holder.count_down_latch(&self.name("latch")).unwrap();
        latch.count_down().unwrap();
        latch.count_down().unwrap();
        for waiter in std::mem::take(&mut self.waiters) {
            assert!(recv_within(&waiter, WAIT + 5 * SECOND, "a waiter"));
        }
    }
}

/// `args` then `more`, as the binary takes them.
fn with(args: &[String], more: &[&str]) -> Vec<String> {
    args.iter().cloned().chain(more.iter().map(|s| (*s).to_owned())).collect()
}

fn run_args(args: &[String]) -> std::process::Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&args)
}

/// The binary's `--json inspect` and `--json list` of every kind.
fn check_binary(kinds: &Kinds, connection: &[String]) {
    for (kind, expected) in [
        ("lock", "reentrant"),
        ("fair", "fair"),
        ("rw", "read-write"),
        ("sem", "semaphore"),
        ("permits", "permit-expirable-semaphore"),
        ("latch", "count-down-latch"),
        ("bare", "semaphore-or-latch"),
    ] {
        let parsed =
            json(&expect_exit(&run_args(&with(connection, &["--json", "inspect", &kinds.name(kind)])), 0));
        assert_eq!(parsed["kind"], expected, "{parsed}");
        match kind {
            "fair" => {
                assert!(parsed["fair_queue"][0]["remaining_ms"].as_u64().is_some_and(|ms| ms > 0), "{parsed}")
            }
            "rw" => {
                assert_eq!(
                    (parsed["mode"].as_str(), parsed["holders"][0]["count"].as_u64()),
                    (Some("read"), Some(2))
                );
                assert_eq!(parsed["holders"][0]["write"], false);
                assert_eq!(parsed["waiting_writers"].as_array().map(Vec::len), Some(1), "{parsed}");
            }
            "sem" => assert_eq!(parsed["count"], 1),
            "permits" => assert_eq!(parsed["permits"][0]["id"].as_str().map(str::len), Some(32), "{parsed}"),
            "latch" => assert_eq!(parsed["count"], 2),
            _ => {}
        }
        let table = expect_exit(&run_args(&with(connection, &["inspect", &kinds.name(kind)])), 0);
        assert!(table.contains(&kinds.name(kind)), "{table}");
    }
    let pattern = format!("{}:*", kinds.prefix);
    for migration in [false, true] {
        let mut args = connection.to_vec();
        if migration {
            args.push("--migration-mode".to_owned());
        }
        let parsed = json(&expect_exit(&run_args(&with(&args, &["--json", "list", &pattern])), 0));
        let names: Vec<&str> =
            parsed["locks"].as_array().unwrap().iter().map(|l| l["name"].as_str().unwrap()).collect();
        assert_eq!(names.len(), 6, "migration mode {migration}: {parsed}");
        assert!(names.iter().all(|n| !n.contains("rwlock_timeout") && !n.ends_with(":timeout")), "{names:?}");
    }
    let table = expect_exit(&run_args(&with(connection, &["list", &pattern])), 0);
    assert!(
        table.contains("read-write") && table.contains("1 permits") && table.contains("count 2"),
        "{table}"
    );
}

#[test]
fn every_kind_is_inspected_listed_and_printed_on_one_server() {
    let server = RedisServer::start();
    let kinds = Kinds::arrange(server.client(), server.client(), "kinds");
    kinds.check_inspect();
    kinds.check_list(&kinds.holder);
    let url = vec!["--url".to_owned(), server.url()];
    check_binary(&kinds, &url);

    // Internal keys are there, and never listed even in migration mode.
    let mut con = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*rwlock_timeout*").query(&mut con).unwrap();
    assert!(!keys.is_empty(), "a read hold's timeout key");
    let migrating = server.builder().migration_mode(true).build().unwrap();
    assert!(migrating.list_locks("*", 100).unwrap().iter().all(|l| !l.name.contains("rwlock_timeout")));

    // force-unlock where it applies; refused clearly where it does not.
    for kind in ["sem", "permits", "latch", "bare"] {
        let refused = run(&["--url", &server.url(), "force-unlock", "--yes", &kinds.name(kind)]);
        assert_eq!(refused.status.code(), Some(1), "{kind}");
        assert!(text(&refused.stderr).contains("does not apply"), "{}", text(&refused.stderr));
    }
    let fair = json(&expect_exit(
        &run(&["--url", &server.url(), "--json", "force-unlock", "--yes", &kinds.name("fair")]),
        0,
    ));
    assert_eq!((fair["unlocked"].as_bool(), fair["kind"].as_str()), (Some(true), Some("fair")));
    let rw = json(&expect_exit(
        &run(&["--url", &server.url(), "--json", "force-unlock", "--yes", &kinds.name("rw")]),
        0,
    ));
    assert_eq!((rw["unlocked"].as_bool(), rw["kind"].as_str()), (Some(true), Some("read-write")));
    // The waiters got the fair lock and the write lock.
    let Kinds { waiters, .. } = &kinds;
    assert!(recv_within(&waiters[0], 10 * SECOND, "the fair waiter"));
    assert!(recv_within(&waiters[1], 10 * SECOND, "the writer"));
    let mut kinds = kinds;
    kinds.waiters.drain(..2);
    let guards = kinds.guards.take().unwrap();
    assert!(guards.fair.is_lost() || guards.fair.unlock().is_err(), "the fair holder's lock is gone");
    drop((guards.lock, guards.read, guards.permit));
    kinds.release();
}

#[test]
fn every_kind_is_inspected_and_listed_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let client = || Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    let kinds = Kinds::arrange(client(), client(), "ckinds");
    kinds.check_inspect();
    kinds.check_list(&kinds.holder);
    check_binary(&kinds, &cluster_args(cluster));
    kinds.release();
}

#[test]
fn every_kind_is_inspected_through_sentinel_and_watch_follows_a_failover() {
    let set = keyholder_testkit::SentinelSet::start();
    let master = keyholder_testkit::sentinel::MASTER_NAME;
    let client = || Client::builder_sentinel(set.sentinel_urls(), master).build().unwrap();
    let kinds = Kinds::arrange(client(), client(), "skinds");
    kinds.check_inspect();
    let mut args: Vec<String> =
        set.sentinel_urls().into_iter().flat_map(|url| ["--sentinel".to_owned(), url]).collect();
    args.extend(["--master".to_owned(), master.to_owned()]);
    check_binary(&kinds, &args);
    kinds.release();

    let (watch, lines) =
        start_watch(&with(&args, &["--json", "watch", "s:watched", "--count", "1", "--timeout", "40"]));
    set.failover();
    assert!(set.wait_for_promotion(20 * SECOND), "the replica was promoted:\n{}", set.logs());
    let port = set.replica().port();
    assert!(
        wait_line(&lines, 20 * SECOND, |line| line.contains("again") && line.contains(&port.to_string())),
        "watch never resubscribed on the new primary"
    );
    let writer = client();
    writer.lock("s:watched").unwrap().lock().unwrap().unlock().unwrap();
    let parsed = json(&expect_exit(&finish(watch, RUN_LIMIT), 0));
    assert_eq!(parsed["payload"], "0");
}

/// Starts `keyholder` with `args` (a watch) and returns once it is
/// subscribed, with its later standard error lines.
fn start_watch(args: &[String]) -> (Child, mpsc::Receiver<String>) {
    let mut child =
        bin().args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    if !wait_line(&rx, RUN_LIMIT, |line| line.contains("watching")) {
        let _ = child.kill();
        panic!("watch did not start");
    }
    (child, rx)
}

/// Waits (at most `limit`) for a line that `matches`.
fn wait_line(lines: &mpsc::Receiver<String>, limit: Duration, matches: impl Fn(&str) -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if matches(&line) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn watch_follows_a_restart_and_says_when_its_timeout_passes() {
    let mut server = RedisServer::start();
    let url = server.url();
    let args = vec!["--url".to_owned(), url.clone()];
    let (watch, lines) =
        start_watch(&with(&args, &["watch", "r:watched", "--count", "1", "--timeout", "40"]));
    server.restart();
    assert!(wait_line(&lines, 15 * SECOND, |line| line.contains("lost")), "the loss was not told");
    assert!(wait_line(&lines, 15 * SECOND, |line| line.contains("again")), "watch never resubscribed");
    let client = server.client();
    client.lock("r:watched").unwrap().lock().unwrap().unlock().unwrap();
    let table = expect_exit(&finish(watch, RUN_LIMIT), 0);
    assert!(table.contains("redisson_lock__channel:{r:watched}  0"), "{table}");

    // A timeout before the count: a line on standard error, status 4.
    let timed_out = run(&["--url", &url, "watch", "r:watched", "--count", "1", "--timeout", "0.5"]);
    assert_eq!(timed_out.status.code(), Some(4));
    assert!(
        text(&timed_out.stderr).contains("--timeout 0.5 s passed with 0 of 1"),
        "{}",
        text(&timed_out.stderr)
    );
}

#[test]
fn usage_errors_exit_2_and_the_help_groups_its_options() {
    let server = RedisServer::start();
    let url = server.url();
    for args in [
        &["--url", url.as_str(), "--cluster", url.as_str(), "inspect", "x"][..],
        &["--url", url.as_str(), "inspect", ""],
        &["--url", url.as_str(), "watch", "x", "--timeout", "-1"],
        &["--url", url.as_str(), "watch", "x", "--kind", "no-such-kind"],
        &["--redis-timeout", "0", "inspect", "x"],
        &["--master", "m", "inspect", "x"],
        &["--url", "not a url", "inspect", "x"],
        &["--url", "http://127.0.0.1:6379", "inspect", "x"],
        &["--url", "redis://127.0.0.1:99999", "inspect", "x"],
    ] {
        let output = run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output.stderr));
    }
    let help = text(&run(&["watch", "--help"]).stdout);
    let stop = help.find("When to stop:").expect("a group of its own");
    let connection = help.find("Connection:").expect("the connection options");
    let (count, url_at) = (help.find("--count <N>").unwrap(), help.find("--url <URL>").unwrap());
    assert!(stop < count && count < connection && connection < url_at, "{help}");
    assert!(help.contains("[default: 3]"), "the library's timeout: {help}");
}

/// A slot that moves drops a sharded subscription; the watch subscribes
/// again on the slot's new owner and hears the next release there.
#[test]
fn a_watch_follows_its_slot_to_another_primary() {
    let mut cluster = RedisCluster::start();
    let client = Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    let name = "moving:lock";
    let slot = cluster.keyslot(name);
    let to = cluster.primaries().into_iter().find(|&p| p != cluster.primary_of_slot(slot)).unwrap();
    let mut watch = client.watch_as(name, LockKind::Reentrant).unwrap();
    cluster.migrate_slot(slot, to);
    let mut events = Vec::new();
    let resubscribed = eventually(20 * SECOND, || match watch.next_event(SECOND).unwrap() {
        Some(WatchEvent::Resubscribed { node }) => {
            events.push(node.clone());
            node.ends_with(&format!(":{to}"))
        }
        Some(other) => {
            events.push(format!("{other:?}"));
            false
        }
        None => false,
    });
    assert!(resubscribed, "no resubscription on {to}: {events:?}");
    client.lock(name).unwrap().lock().unwrap().unlock().unwrap();
    let message = watch.next_message(10 * SECOND).unwrap().expect("the release, heard on the new owner");
    assert_eq!(message.payload, "0");
}

/// A watch shares its client's pub/sub connection with the client's own
/// waiters on the same channel: it hears every message (the `2` of a
/// keyholder hand-over too), and the waiter is still woken.
#[test]
fn a_watch_and_a_waiter_of_one_client_share_the_channel_without_harm() {
    let server = RedisServer::start();
    let (holder, watcher) = (server.client(), server.client());
    let guard = holder.lock("shared:lock").unwrap().lock().unwrap();
    let mut watch = watcher.watch("shared:lock").unwrap();
    assert_eq!(watch.kind(), LockKind::Reentrant);
    let lock = watcher.lock("shared:lock").unwrap();
    let waiting = spawn(move || lock.try_lock_for(15 * SECOND).unwrap().is_some());
    assert!(eventually(5 * SECOND, || holder.inspect("shared:lock").unwrap().queued_clients.len() == 1));
    // A second watch of the same name in the same client is independent.
    let mut second = watcher.watch_as("shared:lock", LockKind::Reentrant).unwrap();
    // A force unlock always publishes `0` (a release may hand the lock over
    // without a message).
    assert!(holder.lock("shared:lock").unwrap().force_unlock().unwrap());
    assert!(recv_within(&waiting, 10 * SECOND, "the waiter of the watching client"));
    let heard = watch.next_message(5 * SECOND).unwrap().expect("the force unlock");
    assert_eq!(heard.payload, "0");
    assert!(guard.is_lost() || guard.unlock().is_err());
    assert_eq!(second.next_message(5 * SECOND).unwrap().map(|m| m.payload), Some(heard.payload));
    assert_eq!(watch.missed(), 0);
}
