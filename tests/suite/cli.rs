//! The operators' tool: the admin API (`Client::inspect`, `list_locks`,
//! `watch`) and the `keyholder` binary driven as a process, against a
//! private redis-server, the shared Redis Cluster (Redis 7: shard
//! channels) and a Sentinel set, all on 127.0.0.1. Every wait is bounded;
//! a child process that overruns its bound is killed and the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, eventually, exists, recv_within, spawn};
use keyholder::{Client, Lease, LockKind};
use keyholder_testkit::cluster::RedisCluster;
use serde_json::Value;

pub(crate) const SECOND: Duration = Duration::from_secs(1);
/// How long any one run of the binary may take.
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(20);

pub(crate) fn bin() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_keyholder"));
    // The environment must not pick the deployment for the tests.
    for var in ["KEYHOLDER_URL", "KEYHOLDER_SENTINELS", "KEYHOLDER_MASTER", "KEYHOLDER_CLUSTER"] {
        command.env_remove(var);
    }
    command.arg("--redis-timeout").arg("2");
    command
}

/// Runs the binary with `args` and standard input closed (not a
/// terminal), within [`RUN_LIMIT`].
pub(crate) fn run(args: &[&str]) -> Output {
    let child =
        bin().args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    finish(child, RUN_LIMIT)
}

/// Waits for `child` to exit within `limit`, killing it otherwise.
pub(crate) fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!("keyholder did not exit within {limit:?}: {}", text(&output.stderr));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The run's standard output, after checking it exited with `code`.
#[track_caller]
pub(crate) fn expect_exit(output: &Output, code: i32) -> String {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

pub(crate) fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// A name whose slot `cluster` serves on `primary`, made from `prefix`.
pub(crate) fn name_on(cluster: &RedisCluster, primary: u16, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}:{i}"))
        .find(|name| cluster.primary_of_key(name) == primary)
        .expect("some name lands on every primary")
}

pub(crate) fn cluster_client(cluster: &RedisCluster) -> Client {
    Client::builder_cluster(cluster.seed_urls()).build().unwrap()
}

/// `--cluster URL` for each seed.
pub(crate) fn cluster_args(cluster: &RedisCluster) -> Vec<String> {
    cluster.seed_urls().into_iter().flat_map(|url| ["--cluster".to_owned(), url]).collect()
}

/// A thread of `client` that waits (at most 15 s) for `name` and reports
/// whether it got it.
pub(crate) fn waiter(client: &Client, name: &str) -> mpsc::Receiver<bool> {
    let lock = client.lock(name).unwrap();
    spawn(move || lock.try_lock_for(15 * SECOND).unwrap().is_some())
}

// ---- The admin API ---------------------------------------------------------

#[test]
fn inspect_shows_holder_count_lease_token_subscribers_and_queue() {
    let server = RedisServer::start();
    let (holder, other) = (server.client(), server.client());
    let lock = holder.lock("inspect:held").unwrap().fenced();
    let _outer = lock.lock().unwrap();
    let _inner = lock.lock().unwrap();
    let waiting = waiter(&other, "inspect:held");
    assert!(
        eventually(5 * SECOND, || {
            let info = holder.inspect("inspect:held").unwrap();
            // The waiter's client, and the holder's (for a foreign unlock).
            info.subscribers >= 2 && info.queued_clients.iter().any(|id| id == other.id())
        }),
        "the waiter never showed: {:?}",
        holder.inspect("inspect:held").unwrap()
    );
    let info = holder.inspect("inspect:held").unwrap();
    assert_eq!(info.kind, LockKind::Reentrant);
    assert!(info.is_locked());
    assert_eq!(info.redis_type, "hash");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].client_id, holder.id());
    assert_eq!(info.holders[0].count, 2);
    assert_eq!(info.holders[0].owner, format!("{}:{}", holder.id(), info.holders[0].thread_id));
    let lease = info.remaining_lease.expect("a watchdog lease");
    assert!(lease > Duration::ZERO && lease <= holder.watchdog_timeout(), "{lease:?}");
    assert_eq!(info.fencing_token, lock.last_fencing_token().unwrap());
    assert!(info.fencing_token.is_some());
    assert_eq!(info.unlock_channel, "redisson_lock__channel:{inspect:held}");
    assert_eq!(info.node, None);
    drop((_inner, _outer));
    assert!(recv_within(&waiting, 10 * SECOND, "the waiter"));
}

#[test]
fn inspect_tells_free_legacy_and_foreign_keys_apart() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let free = client.inspect("inspect:free").unwrap();
    assert_eq!((free.kind, free.redis_type.as_str(), free.is_locked()), (LockKind::Free, "none", false));
    assert!(free.holders.is_empty() && free.remaining_lease.is_none() && free.fencing_token.is_none());

    let _: () =
        redis::cmd("SET").arg("inspect:legacy").arg("token-1").arg("PX").arg(60_000).query(&mut con).unwrap();
    let legacy = client.inspect("inspect:legacy").unwrap();
    assert_eq!(legacy.kind, LockKind::Legacy);
    assert_eq!(legacy.legacy_token.as_deref(), Some("token-1"));
    assert!(legacy.remaining_lease.is_some_and(|l| l > 50 * SECOND));

    // A hash with a `mode` field is a read-write lock (here with no holder);
    // a set is no lock.
    let _: () = redis::cmd("HSET").arg("inspect:rw").arg("mode").arg("read").query(&mut con).unwrap();
    let rw = client.inspect("inspect:rw").unwrap();
    assert_eq!((rw.kind, rw.is_locked()), (LockKind::ReadWrite, false));
    let _: () = redis::cmd("SADD").arg("inspect:set").arg("x").query(&mut con).unwrap();
    let other = client.inspect("inspect:set").unwrap();
    assert_eq!(other.kind, LockKind::Other);
    assert!(other.holders.is_empty());

    // A run-once job's run is a reentrant lock too, with a fixed lease.
    let job = client.job("inspect:job").unwrap().at_most(60 * SECOND);
    let outcome = job.run(|| client.inspect("inspect:job").unwrap()).unwrap();
    let seen = outcome.output().expect("the job ran");
    assert_eq!(seen.kind, LockKind::Reentrant);
    assert_eq!(seen.holders[0].client_id, client.id());
    assert!(seen.remaining_lease.is_some_and(|l| l > 50 * SECOND));
    assert!(client.inspect("bad\nname").unwrap_err().is_invalid());
}

#[test]
fn list_finds_locks_by_pattern_and_skips_derived_keys_and_other_keys() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let guards: Vec<_> =
        (0..5).map(|i| client.lock(&format!("list:{i}")).unwrap().fenced().lock().unwrap()).collect();
    let fixed = client.lock_with_lease("list:fixed", Lease::Fixed(60 * SECOND)).unwrap().lock().unwrap();
    let _: () = redis::cmd("SET").arg("list:legacy").arg("t").arg("PX").arg(60_000).query(&mut con).unwrap();
    let _: () = redis::cmd("HSET").arg("list:plain").arg("a").arg("b").query(&mut con).unwrap();
    let _: () = redis::cmd("SET").arg("other:0").arg("t").query(&mut con).unwrap();

    let all = client.list_locks("*", 100).unwrap();
    let names: Vec<&str> = all.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["list:0", "list:1", "list:2", "list:3", "list:4", "list:fixed"], "{all:?}");
    assert!(all.iter().all(|l| l.kind == LockKind::Reentrant && l.holders[0].client_id == client.id()));
    assert!(all.iter().all(|l| l.remaining_lease.is_some() && l.node.is_none()));
    assert_eq!(client.list_locks("list:[0-2]", 100).unwrap().len(), 3);
    assert_eq!(client.list_locks("*", 2).unwrap().len(), 2);
    assert!(client.list_locks("nothing:*", 10).unwrap().is_empty());
    assert!(client.list_locks("*", 0).unwrap_err().is_invalid());

    // In migration mode, a string with a TTL is a hand-rolled lock.
    let migrating = server.builder().migration_mode(true).build().unwrap();
    let listed = migrating.list_locks("list:*", 100).unwrap();
    let legacy: Vec<&str> =
        listed.iter().filter(|l| l.kind == LockKind::Legacy).map(|l| l.name.as_str()).collect();
    assert_eq!(legacy, ["list:legacy"]);
    drop((guards, fixed));
    assert!(client.list_locks("list:*", 100).unwrap().is_empty());
}

#[test]
fn on_a_cluster_inspect_names_the_node_and_list_scans_every_primary() {
    let cluster = RedisCluster::shared();
    let client = cluster_client(cluster);
    let names: Vec<String> =
        cluster.primaries().iter().map(|&port| name_on(cluster, port, "clist")).collect();
    let guards: Vec<_> = names.iter().map(|name| client.lock(name).unwrap().lock().unwrap()).collect();
    let listed = client.list_locks("clist:*", 100).unwrap();
    let found: Vec<&String> = listed.iter().map(|l| &l.name).collect();
    let mut expected: Vec<&String> = names.iter().collect();
    expected.sort();
    assert_eq!(found, expected);
    for lock in &listed {
        let port = cluster.primary_of_key(&lock.name);
        assert_eq!(lock.node.as_deref(), Some(format!("127.0.0.1:{port}").as_str()));
        let info = client.inspect(&lock.name).unwrap();
        assert_eq!(info.node, lock.node);
        assert_eq!(info.holders[0].client_id, client.id());
        assert_eq!(client.node_of(&lock.name), lock.node);
    }
    drop(guards);
}

#[test]
fn on_a_cluster_a_waiter_shows_on_the_shard_channel_and_watch_hears_the_release() {
    let cluster = RedisCluster::shared();
    let (holder, other) = (cluster_client(cluster), cluster_client(cluster));
    let name = name_on(cluster, cluster.primaries()[1], "cwatch");
    let guard = holder.lock(&name).unwrap().lock().unwrap();
    let waiting = waiter(&other, &name);
    assert!(
        // The waiter's client, and the holder's (for a foreign unlock).
        eventually(5 * SECOND, || holder.inspect(&name).unwrap().subscribers >= 2),
        "PUBSUB SHARDNUMSUB never counted the waiter"
    );
    let mut watch = holder.watch(&name).unwrap();
    assert_eq!(watch.node(), format!("127.0.0.1:{}", cluster.primaries()[1]));
    assert!(watch.next_message(Duration::from_millis(50)).unwrap().is_none());
    drop(guard);
    let message = watch.next_message(5 * SECOND).unwrap().expect("an unlock message");
    assert_eq!(message.channel, format!("redisson_lock__channel:{{{name}}}"));
    assert!(["0", "2"].contains(&message.payload.as_str()), "{message:?}");
    assert!(recv_within(&waiting, 10 * SECOND, "the waiter"));
}

// ---- The binary --------------------------------------------------------------

#[test]
fn the_binary_inspects_as_a_table_and_as_json() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("bin:inspect").unwrap().fenced();
    let _guard = lock.lock().unwrap();
    let _again = lock.lock().unwrap();
    let url = server.url();
    // Once its client listens on the channel (for a foreign unlock).
    let channel = "redisson_lock__channel:{bin:inspect}";
    assert!(eventually(5 * SECOND, || common::numsub(&mut server.conn(), channel) == 1));

    let table = expect_exit(&run(&["--url", &url, "inspect", "bin:inspect"]), 0);
    assert!(table.contains("reentrant lock"), "{table}");
    assert!(table.contains(client.id()), "{table}");
    assert!(table.contains("redisson_lock__channel:{bin:inspect}"), "{table}");
    let holder_row = table.lines().find(|line| line.starts_with(client.id())).expect("a holder row");
    assert_eq!(holder_row.split_whitespace().last(), Some("2"), "{table}");

    let parsed = json(&expect_exit(&run(&["--url", &url, "--json", "inspect", "bin:inspect"]), 0));
    assert_eq!(parsed["name"], "bin:inspect");
    assert_eq!(parsed["kind"], "reentrant");
    assert_eq!(parsed["holders"][0]["client_id"], client.id());
    assert_eq!(parsed["holders"][0]["count"], 2);
    assert_eq!(parsed["fencing_token"].as_u64(), lock.last_fencing_token().unwrap());
    assert!(parsed["remaining_lease_ms"].as_u64().is_some_and(|ms| ms > 0));
    // No waiter: the holder's client alone listens (for a foreign unlock).
    assert_eq!(parsed["subscribers"], 1);
    assert_eq!(parsed["node"], Value::Null);

    // Options after the command, the URL from the environment.
    let child = bin()
        .env("KEYHOLDER_URL", &url)
        .args(["inspect", "bin:free", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(json(&expect_exit(&finish(child, RUN_LIMIT), 0))["kind"], "free");
}

#[test]
fn the_binary_reports_errors_with_a_non_zero_exit() {
    let server = RedisServer::start();
    let url = server.url();
    let refused = run(&["--url", "redis://127.0.0.1:1/", "inspect", "x"]);
    assert_eq!(refused.status.code(), Some(1));
    let said = text(&refused.stderr);
    assert!(said.starts_with("keyholder: ") && said.contains("refused"), "{said}");
    // Usage errors (see cli_kinds.rs for more).
    assert_eq!(run(&["--url", &url, "inspect", ""]).status.code(), Some(2));
    assert_eq!(run(&["--url", &url, "--cluster", &url, "inspect", "x"]).status.code(), Some(2));
    assert_eq!(run(&["--url", &url, "no-such-command"]).status.code(), Some(2));
}

#[test]
fn the_binary_lists_locks_on_every_shard_of_a_cluster() {
    let cluster = RedisCluster::shared();
    let client = cluster_client(cluster);
    let names: Vec<String> =
        cluster.primaries().iter().map(|&port| name_on(cluster, port, "blist")).collect();
    let _guards: Vec<_> = names.iter().map(|name| client.lock(name).unwrap().lock().unwrap()).collect();
    let mut args = cluster_args(cluster);
    args.extend(["--json".to_owned(), "list".to_owned(), "blist:*".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let parsed = json(&expect_exit(&run(&args), 0));
    let locks = parsed["locks"].as_array().unwrap();
    let mut expected = names.clone();
    expected.sort();
    let found: Vec<&str> = locks.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(found, expected);
    let nodes: std::collections::HashSet<&str> = locks.iter().map(|l| l["node"].as_str().unwrap()).collect();
    assert_eq!(nodes.len(), 3, "one lock on each primary: {parsed}");
    assert_eq!(parsed["limit_reached"], false);

    let mut args = cluster_args(cluster);
    args.extend(["list".to_owned(), "blist:*".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let table = expect_exit(&run(&args), 0);
    assert!(names.iter().all(|name| table.contains(name.as_str())), "{table}");
    assert!(table.contains("3 lock(s)"), "{table}");
}

#[test]
fn force_unlock_refuses_without_yes_when_no_one_can_answer() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("bin:refuse").unwrap();
    let _guard = lock.lock().unwrap();
    let refused = run(&["--url", &server.url(), "force-unlock", "bin:refuse"]);
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("--yes"));
    assert!(lock.is_locked().unwrap());
    // A free lock needs no confirmation: there is nothing to do.
    let free = run(&["--url", &server.url(), "--json", "force-unlock", "bin:nothing"]);
    assert_eq!(json(&expect_exit(&free, 0))["unlocked"], false);
}

#[test]
fn force_unlock_asks_on_a_terminal_and_takes_no_for_an_answer() {
    // `script` gives the binary a terminal and types the answers.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    }
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("bin:ask").unwrap();
    let _guard = lock.lock().unwrap();
    let command = format!(
        "{} --redis-timeout 2 --url {} force-unlock bin:ask",
        env!("CARGO_BIN_EXE_keyholder"),
        server.url()
    );
    for (answer, code, locked) in [("n", 3, true), ("", 3, true), ("y", 0, false)] {
        let mut child = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut prompt = Vec::new();
        // The prompt ends with "[y/N] " and no newline: read up to "]".
        stdout.read_until(b']', &mut prompt).unwrap();
        assert!(text(&prompt).contains("Force-unlock 'bin:ask'"), "{}", text(&prompt));
        writeln!(child.stdin.as_mut().unwrap(), "{answer}").unwrap();
        let output = finish(child, RUN_LIMIT);
        assert_eq!(output.status.code(), Some(code), "answer {answer:?}");
        assert_eq!(lock.is_locked().unwrap(), locked, "answer {answer:?}");
    }
}

#[test]
fn force_unlock_with_yes_hands_the_lock_to_a_waiting_thread() {
    let server = RedisServer::start();
    let (holder, other) = (server.client(), server.client());
    let guard = holder.lock("bin:force").unwrap().lock().unwrap();
    let waiting = waiter(&other, "bin:force");
    // The waiter's client, and the holder's (for a foreign unlock).
    assert!(eventually(5 * SECOND, || holder.inspect("bin:force").unwrap().subscribers >= 2));
    let started = Instant::now();
    let output = run(&["--url", &server.url(), "--json", "force-unlock", "bin:force", "--yes"]);
    let parsed = json(&expect_exit(&output, 0));
    assert_eq!(parsed["unlocked"], true);
    assert_eq!(parsed["holders"][0]["client_id"], holder.id());
    assert!(recv_within(&waiting, 10 * SECOND, "the waiter"), "the waiter got the lock");
    // Woken by the unlock message, long before the 30 s lease would end.
    assert!(started.elapsed() < 10 * SECOND);
    assert!(guard.unlock().is_err(), "the old holder's release finds the lock gone");
}

/// Starts `keyholder watch` with `args` and returns once it is subscribed.
fn start_watch(args: &[&str]) -> Child {
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
    match rx.recv_timeout(RUN_LIMIT) {
        Ok(line) if line.contains("watching") => child,
        other => {
            let _ = child.kill();
            panic!("watch did not start: {other:?}");
        }
    }
}

#[test]
fn watch_prints_unlock_messages_and_exits_after_count() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("bin:watch").unwrap();
    let watch = start_watch(&[
        "--url",
        &server.url(),
        "--json",
        "watch",
        "bin:watch",
        "--count",
        "1",
        "--timeout",
        "15",
    ]);
    lock.lock().unwrap().unlock().unwrap();
    let output = finish(watch, RUN_LIMIT);
    let parsed = json(&expect_exit(&output, 0));
    assert_eq!(parsed["channel"], "redisson_lock__channel:{bin:watch}");
    assert_eq!(parsed["payload"], "0");
    assert!(parsed["at"].as_str().is_some_and(|at| at.ends_with('Z')));

    // As a table, and a timeout before the count is exit status 4.
    let watch =
        start_watch(&["--url", &server.url(), "watch", "bin:watch", "--count", "2", "--timeout", "1"]);
    lock.lock().unwrap().unlock().unwrap();
    let output = finish(watch, RUN_LIMIT);
    let table = expect_exit(&output, 4);
    assert!(table.contains("redisson_lock__channel:{bin:watch}  0  unlocked"), "{table}");
}

#[test]
fn watch_on_a_cluster_subscribes_to_the_shard_channel_on_the_right_node() {
    let cluster = RedisCluster::shared();
    let client = cluster_client(cluster);
    let name = name_on(cluster, cluster.primaries()[2], "bwatch");
    let mut args = cluster_args(cluster);
    args.extend(["watch", &name, "--count", "1", "--timeout", "15"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let watch = start_watch(&args);
    client.lock(&name).unwrap().lock().unwrap().unlock().unwrap();
    let table = expect_exit(&finish(watch, RUN_LIMIT), 0);
    assert!(table.contains(&format!("redisson_lock__channel:{{{name}}}  0")), "{table}");
}

#[test]
fn the_binary_finds_the_primary_through_sentinel() {
    let set = keyholder_testkit::SentinelSet::start();
    let client = Client::builder_sentinel(set.sentinel_urls(), keyholder_testkit::sentinel::MASTER_NAME)
        .build()
        .unwrap();
    let _guard = client.lock("bin:sentinel").unwrap().lock().unwrap();
    let mut args: Vec<String> =
        set.sentinel_urls().into_iter().flat_map(|url| ["--sentinel".to_owned(), url]).collect();
    args.extend(
        ["--master", keyholder_testkit::sentinel::MASTER_NAME, "--json", "inspect", "bin:sentinel"]
            .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let parsed = json(&expect_exit(&run(&args), 0));
    assert_eq!(parsed["holders"][0]["client_id"], client.id());
    let mut con = set.primary().conn();
    assert!(exists(&mut con, "bin:sentinel"));
}

#[test]
fn the_binary_reaches_a_server_over_a_unix_socket() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("bin:unix").unwrap();
    let _guard = lock.lock().unwrap();
    let parsed = json(&expect_exit(&run(&["--url", &server.unix_url(), "--json", "inspect", "bin:unix"]), 0));
    assert_eq!(parsed["holders"][0]["client_id"], client.id());
    let watch =
        start_watch(&["--url", &server.unix_url(), "watch", "bin:unix", "--count", "1", "--timeout", "15"]);
    drop(_guard);
    let table = expect_exit(&finish(watch, RUN_LIMIT), 0);
    assert!(table.contains("redisson_lock__channel:{bin:unix}  0"), "{table}");
}

/// Mutual TLS: the CA, the client certificate and its key from files.
#[cfg(feature = "tls")]
#[test]
fn the_binary_speaks_mutual_tls_with_certificates_from_files() {
    use keyholder_testkit::ClientAuth;

    let server = RedisServer::start_tls(ClientAuth::Required);
    let tls = server.tls();
    let dir = std::env::temp_dir().join(format!("keyholder-cli-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = [
        ("ca.pem", tls.ca.cert_pem()),
        ("client.pem", tls.client.cert.as_str()),
        ("client.key", tls.client.key.as_str()),
    ];
    for (file, pem) in files {
        std::fs::write(dir.join(file), pem).unwrap();
    }
    let path = |file: &str| dir.join(file).display().to_string();
    let client = Client::builder(server.url())
        .tls_ca_certificate(tls.ca.cert_pem())
        .tls_client_certificate(tls.client.cert.as_str(), tls.client.key.as_str())
        .build()
        .unwrap();
    let guard = client.lock("bin:tls").unwrap().lock().unwrap();
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));
    let url = server.url();
    let tls_args = [
        "--url",
        url.as_str(),
        "--tls-ca",
        ca.as_str(),
        "--tls-cert",
        cert.as_str(),
        "--tls-key",
        key.as_str(),
    ];
    let mut args = tls_args.to_vec();
    args.extend(["--json", "inspect", "bin:tls"]);
    let parsed = json(&expect_exit(&run(&args), 0));
    assert_eq!(parsed["holders"][0]["client_id"], client.id());
    let mut args = tls_args.to_vec();
    args.extend(["watch", "bin:tls", "--count", "1", "--timeout", "15"]);
    let watch = start_watch(&args);
    drop(guard);
    let table = expect_exit(&finish(watch, RUN_LIMIT), 0);
    assert!(table.contains("redisson_lock__channel:{bin:tls}  0"), "{table}");
    // Without the client certificate the server refuses the handshake.
    let refused = run(&["--url", url.as_str(), "--tls-ca", ca.as_str(), "inspect", "bin:tls"]);
    assert_eq!(refused.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Redisson's plain-channel mode on a cluster (`shardedSubscriptionMode`
/// off): unlock messages go out with PUBLISH, and watch uses SUBSCRIBE.
#[test]
fn watch_on_a_cluster_without_shard_channels_uses_plain_subscribe() {
    let cluster = RedisCluster::shared();
    let client = Client::builder_cluster(cluster.seed_urls()).sharded_pubsub(false).build().unwrap();
    let name = name_on(cluster, cluster.primaries()[0], "pwatch");
    let mut args = cluster_args(cluster);
    args.extend(
        ["--sharded-pubsub", "false", "--json", "watch", &name, "--count", "1", "--timeout", "15"]
            .map(str::to_owned),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let watch = start_watch(&args);
    let guard = client.lock(&name).unwrap().lock().unwrap();
    let waiting = waiter(&client, &name);
    assert!(
        eventually(5 * SECOND, || client.inspect(&name).unwrap().subscribers >= 1),
        "NUMSUB counts the waiter"
    );
    drop(guard);
    let parsed = json(&expect_exit(&finish(watch, RUN_LIMIT), 0));
    assert_eq!(parsed["channel"], format!("redisson_lock__channel:{{{name}}}"));
    assert!(recv_within(&waiting, 10 * SECOND, "the waiter"));
}

#[test]
fn force_unlock_on_a_cluster_frees_the_lock_on_its_node_and_wakes_the_waiter() {
    let cluster = RedisCluster::shared();
    let (holder, other) = (cluster_client(cluster), cluster_client(cluster));
    let name = name_on(cluster, cluster.primaries()[2], "cforce");
    let guard = holder.lock(&name).unwrap().lock().unwrap();
    let waiting = waiter(&other, &name);
    // The waiter's client, and the holder's (for a foreign unlock).
    assert!(eventually(5 * SECOND, || holder.inspect(&name).unwrap().subscribers >= 2));
    let mut args = cluster_args(cluster);
    args.extend(["--json", "force-unlock", &name, "--yes"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let parsed = json(&expect_exit(&run(&args), 0));
    assert_eq!(parsed["unlocked"], true);
    assert!(recv_within(&waiting, 10 * SECOND, "the waiter"), "the waiter got the lock");
    assert!(guard.unlock().is_err(), "the old holder's release finds the lock gone");
}

/// `keyholder doctor`'s exit statuses tell the verdicts apart from a
/// failure to check: 0 every check ok (AOF on, no limit), 5 warnings only
/// (the testkit's server keeps no AOF), 6 a failure (`allkeys-lru` under a
/// limit), 1 Redis unreachable, 2 a usage error; `--json` gives the same
/// report as one object.
#[test]
fn doctor_exits_0_5_or_6_by_its_worst_verdict_and_1_or_2_when_it_cannot_check() {
    let durable = RedisServer::start_with_args(&["--appendonly", "yes"]);
    let table = expect_exit(&run(&["--url", &durable.url(), "doctor"]), 0);
    for block in [
        "eviction: OK",
        "persistence: OK",
        "replication: OK",
        "clocks: OK",
        "server: OK",
        "failover: OK",
        "pubsub: OK",
        "latency: OK",
        "access: OK",
    ] {
        assert!(table.contains(block), "{block}: {table}");
    }
    assert!(table.contains("guarantee    Mutual exclusion while the lease holds"), "{table}");
    assert!(table.trim_end().ends_with("verdict: ok (9 ok, 0 warn or unknown, 0 fail)"), "{table}");

    let volatile = RedisServer::start();
    let table = expect_exit(&run(&["--url", &volatile.url(), "doctor"]), 5);
    assert!(table.contains("persistence: WARN"), "{table}");
    assert!(table.contains("fix          appendonly yes"), "{table}");

    let evicting =
        RedisServer::start_with_args(&["--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru"]);
    let parsed = json(&expect_exit(&run(&["--url", &evicting.url(), "--json", "doctor"]), 6));
    assert_eq!(parsed["worst"], "fail");
    let checks = parsed["checks"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "eviction",
            "persistence",
            "replication",
            "clocks",
            "server",
            "failover",
            "pubsub",
            "latency",
            "access"
        ]
    );
    let eviction = &checks[0];
    assert_eq!(eviction["verdict"], "fail");
    assert_eq!(eviction["figures"]["maxmemory"], 10 * 1024 * 1024);
    assert_eq!(eviction["figures"]["maxmemory_policy"], "allkeys-lru");
    assert_eq!(eviction["docs"], "docs/operations.md#eviction");
    assert!(eviction["fix"].as_str().unwrap().contains("noeviction"), "{eviction}");
    assert_eq!(checks[4]["figures"]["command_timeout_ms"], 3000, "the library's default");

    // The services' settings: one replica acknowledgement asked of none.
    let parsed = json(&expect_exit(
        &run(&[
            "--url",
            &durable.url(),
            "--json",
            "doctor",
            "--replica-acks",
            "1",
            "--command-timeout",
            "1.5",
        ]),
        6,
    ));
    let replication = &parsed["checks"][2];
    assert_eq!((&replication["name"], &replication["verdict"]), (&"replication".into(), &"fail".into()));
    assert_eq!(replication["figures"]["replica_acks"], 1);
    assert_eq!(parsed["checks"][4]["figures"]["command_timeout_ms"], 1500);

    // Could not check: Redis unreachable (1), a usage error (2).
    let nowhere = format!("redis://127.0.0.1:{}/", common::free_port());
    let output = run(&["--url", &nowhere, "doctor"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(output.stdout.is_empty(), "no report: {}", text(&output.stdout));
    for args in [
        &["--url", durable.url().as_str(), "doctor", "--replica-acks", "1", "--replica-acks-aof", "1"][..],
        &["--url", durable.url().as_str(), "doctor", "--command-timeout", "0"],
    ] {
        let output = run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output.stderr));
    }
    let help = text(&run(&["doctor", "--help"]).stdout);
    for status in ["0 every check ok", "5 warnings", "6 at least one failure"] {
        assert!(help.contains(status), "{status}: {help}");
    }
}

/// `--idle-drop` and `--watchdog-timeout`: a NAT's idle timeout below the
/// connections' 3 min idle timeout fails the pubsub check (exit 6), one
/// above it passes (exit 0); the watchdog timeout shows in the failover
/// check's figures; a duration that is none is a usage error (exit 2).
#[test]
fn doctor_holds_a_stated_idle_drop_against_the_clients_idle_settings() {
    let durable = RedisServer::start_with_args(&["--appendonly", "yes"]);
    let url = durable.url();
    let parsed = json(&expect_exit(&run(&["--url", &url, "--json", "doctor", "--idle-drop", "2m"]), 6));
    let pubsub = &parsed["checks"][6];
    assert_eq!((&pubsub["name"], &pubsub["verdict"]), (&"pubsub".into(), &"fail".into()), "{parsed}");
    assert_eq!(pubsub["figures"]["idle_drop_ms"], 120_000);
    assert!(pubsub["fix"].as_str().unwrap().contains("connection_idle_timeout"), "{pubsub}");
    let args = ["--url", &url, "--json", "doctor", "--idle-drop", "350s", "--watchdog-timeout", "10"];
    let parsed = json(&expect_exit(&run(&args), 0));
    assert_eq!(parsed["checks"][6]["figures"]["idle_drop_ms"], 350_000, "{parsed}");
    assert_eq!(parsed["checks"][5]["figures"]["watchdog_timeout_ms"], 10_000, "{parsed}");
    for bad in [&["--idle-drop", "5 parsecs"][..], &["--idle-drop", "0s"], &["--watchdog-timeout", "0"]] {
        let mut args = vec!["--url", url.as_str(), "doctor"];
        args.extend_from_slice(bad);
        let output = run(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output.stderr));
    }
}

/// An ACL user denied `CONFIG` and `INFO`: every check says what to
/// confirm by hand, and the tool exits 5, never 0.
#[test]
fn doctor_as_a_user_denied_config_and_info_reports_unknowns_and_exits_5() {
    let server = RedisServer::start_with_args(&["--appendonly", "yes"]);
    let mut con = server.conn();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "doctor", "reset", "on", ">pw", "~*", "&*", "+@all", "-config", "-info"])
        .query(&mut con)
        .unwrap();
    let url = format!("redis://doctor:pw@127.0.0.1:{}/", server.port());
    let table = expect_exit(&run(&["--url", &url, "doctor"]), 5);
    // Every check but failover (one server's URL: no automatic failover),
    // latency and access (which need neither).
    assert_eq!(table.matches(": UNKNOWN").count(), 6, "{table}");
    assert_eq!(table.matches("  confirm      ").count(), 6, "{table}");
    assert!(table.contains("failover: OK"), "{table}");
    assert!(table.contains("access: OK"), "{table}");
    assert!(table.contains("NOPERM"), "{table}");
}

/// A user who may not run `EVALSHA` gets no client: the tool reports that
/// as the access check's failure, naming the command, and exits 6; a
/// user who may not run a command the reentrant lock's scripts call
/// inside Redis fails the dry run, named too.
#[test]
fn doctor_as_a_user_denied_evalsha_or_a_scripts_command_fails_the_access_check() {
    let server = RedisServer::start_with_args(&["--appendonly", "yes"]);
    let mut con = server.conn();
    let url = format!("redis://doctor:pw@127.0.0.1:{}/", server.port());
    for (denied, named) in [("-evalsha", "EVALSHA"), ("-hincrby", "lock re-entry")] {
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "doctor", "reset", "on", ">pw", "~*", "&*", "+@all", denied])
            .query(&mut con)
            .unwrap();
        let table = expect_exit(&run(&["--url", &url, "doctor"]), 6);
        assert!(table.contains("access: FAIL"), "{denied}: {table}");
        assert!(table.contains(named), "{denied}: {table}");
    }
    let parsed = json(&expect_exit(&run(&["--url", &url, "--json", "doctor"]), 6));
    let access: Vec<&serde_json::Value> =
        parsed["checks"].as_array().unwrap().iter().filter(|c| c["name"] == "access").collect();
    assert_eq!(access.len(), 1, "{parsed}");
    assert_eq!(access[0]["verdict"], "fail", "{parsed}");
}

/// On a cluster the tool checks every primary, each block naming its node.
#[test]
fn doctor_on_a_cluster_checks_every_primary() {
    let cluster = RedisCluster::shared();
    let mut args = cluster_args(cluster);
    args.extend(["--json".to_owned(), "doctor".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = run(&args);
    assert!(matches!(output.status.code(), Some(0 | 5 | 6)), "{}", text(&output.stderr));
    let parsed = json(&text(&output.stdout));
    let checks = parsed["checks"].as_array().unwrap();
    // Seven checks of the facts, latency, access, cluster; and each
    // replica's eviction and persistence.
    assert_eq!(checks.len(), 10 * cluster.primaries().len() + 2 * cluster.replicas().len(), "{parsed}");
    for port in cluster.primaries() {
        let node = format!("127.0.0.1:{port}");
        assert_eq!(checks.iter().filter(|c| c["node"] == node.as_str()).count(), 10, "{node}: {parsed}");
    }
}

/// `--name` (repeatable) on a cluster: one `cluster_names` block, failing
/// for a name whose braces make no tag; latency figures in the JSON.
#[test]
fn doctor_name_checks_each_names_slots_on_a_cluster() {
    let cluster = RedisCluster::shared();
    let mut args = cluster_args(cluster);
    args.extend(["doctor", "--name", "orders:42", "--name", "a{b"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let table = expect_exit(&run(&args), 6);
    assert!(table.contains("cluster_names: FAIL"), "{table}");
    assert!(table.contains("split: \"a{b\" (lock key in slot"), "{table}");
    assert!(table.contains("\"orders:42\" (slot"), "{table}");
    assert!(table.contains("latency on 127.0.0.1:"), "{table}");

    let mut args = cluster_args(cluster);
    args.extend(["--json", "doctor", "--name", "orders:42"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = run(&args);
    let parsed = json(&text(&output.stdout));
    let checks = parsed["checks"].as_array().unwrap();
    let names = checks.iter().find(|c| c["name"] == "cluster_names").unwrap();
    assert_eq!((&names["verdict"], &names["figures"]["names"]), (&"ok".into(), &1.into()), "{names}");
    let latency = checks.iter().find(|c| c["name"] == "latency").unwrap();
    assert!(latency["figures"]["rtt_p99_ms"].is_u64(), "{latency}");
    assert!(latency["figures"]["unlock_to_wake_ms"].is_u64(), "{latency}");
}
