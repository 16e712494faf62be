//! Acknowledgement from the append-only files
//! (`ClientBuilder::replica_acks_aof`, `WAITAOF`): a server without the
//! command, or without the append-only file asked for, fails `build()`
//! with `InvalidConfig`; on a server that has it, an acknowledged write is
//! on disk where it was asked to be, a replica without `appendonly yes` is
//! not counted, and a server that stops acknowledging is never silent.
//!
//! `WAITAOF` came with Redis 7.2; Debian's Redis here is 7.0, Valkey has
//! it. The tests that need it are `#[ignore]`d with the reason, so a run on
//! Redis 7.0 lists them as ignored rather than passed; `.ci/test` runs them
//! in its Valkey pass (`--ignored`), where they check the server first and
//! fail, not pass, on one without `WAITAOF`. The build-time refusal is
//! tested on every server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::{RedisServer, eventually, exists, hgetall};
use keyholder::{Client, ClientBuilder};
use keyholder_testkit::cluster::RedisCluster;
use keyholder_testkit::server_version;

const SECOND: Duration = Duration::from_secs(1);
const ACK_WAIT: Duration = Duration::from_millis(500);
/// A replica fsyncs once a second (`appendfsync everysec`, the default),
/// and acknowledges what it fsynced: up to a second after the write.
const REPLICA_AOF_WAIT: Duration = Duration::from_millis(1500);

fn builder(server: &RedisServer) -> ClientBuilder {
    Client::builder(server.url()).connect_timeout(2 * SECOND).command_timeout(2 * SECOND)
}

/// Fails the test, with a reason, on a server without `WAITAOF`: an
/// ignored test run there by hand must not pass.
fn require_waitaof() {
    let version = server_version();
    assert!(
        version.has_waitaof(),
        "this test needs WAITAOF (Valkey, or Redis 7.2 or newer); the server is {version} \
         (set REDIS_SERVER_BIN, as .ci/test's Valkey pass does)"
    );
}

/// Waits (bounded) until a replica of `primary` fsyncs to its append-only
/// file: a replica started with `appendonly yes` writes its file anew
/// after the first sync, and acknowledges no `WAITAOF` before.
fn wait_for_replica_aof(primary: &RedisServer) {
    let mut con = primary.conn();
    let fsynced = || {
        let _: () = redis::cmd("SET").arg("waitaof:probe").arg(1).query(&mut con).unwrap();
        let acks: (i64, i64) = redis::cmd("WAITAOF").arg(0).arg(1).arg(100).query(&mut con).unwrap();
        acks.1 >= 1
    };
    assert!(eventually(10 * SECOND, fsynced), "the replica's append-only file never acknowledged");
    let _: i64 = redis::cmd("DEL").arg("waitaof:probe").query(&mut primary.conn()).unwrap();
}

#[test]
fn a_server_that_refuses_waitaof_fails_the_build() {
    // The harness's servers run without an append-only file: every server
    // refuses the local fsync, Redis 7.0 because it has no WAITAOF at all.
    let server = RedisServer::start();
    let version = server_version();
    println!("server: {version}");
    let err = builder(&server).replica_acks_aof(true, 0, ACK_WAIT).build().expect_err("built");
    assert!(err.is_invalid(), "{err:?}");
    let text = err.to_string();
    println!("refused: {text}");
    assert!(text.contains("replica_acks_aof") && text.contains("WAITAOF"), "{text}");
    if version.has_waitaof() {
        assert!(text.contains("appendonly"), "{text}");
    } else {
        assert!(text.contains("does not have WAITAOF"), "{text}");
    }

    // Replicas only: Redis 7.0 still does not know the command.
    let replicas_only = builder(&server).replica_acks_aof(false, 1, ACK_WAIT).build();
    match replicas_only {
        Ok(_) => assert!(version.has_waitaof(), "{version} built a client that sends WAITAOF"),
        Err(err) => {
            assert!(!version.has_waitaof(), "{version} refused: {err}");
            assert!(err.is_invalid() && err.to_string().contains("does not have WAITAOF"), "{err:?}");
        }
    }
    // WAIT works everywhere.
    builder(&server).replica_acks(1, ACK_WAIT).build().unwrap();
}

#[test]
fn every_cluster_primary_is_asked_for_waitaof() {
    // The shared cluster's nodes run without an append-only file.
    let cluster = RedisCluster::shared();
    let err = Client::builder_cluster(cluster.seed_urls())
        .replica_acks_aof(true, 0, ACK_WAIT)
        .build()
        .expect_err("built a cluster client whose nodes refuse WAITAOF");
    assert!(err.is_invalid(), "{err:?}");
    assert!(err.to_string().contains("the node 127.0.0.1:"), "the node is not named: {err}");
}

#[test]
#[ignore = "needs WAITAOF (Valkey, or Redis 7.2 or newer): .ci/test's Valkey pass runs it"]
fn a_lock_fsynced_on_the_primary_survives_its_crash() {
    require_waitaof();
    let mut primary = RedisServer::start_with_args(&["--appendonly", "yes"]);
    let client =
        builder(&primary).replica_acks_aof(true, 0, ACK_WAIT).replica_acks_required(true).build().unwrap();
    let lock = client.lock("fsynced").unwrap();
    let guard = lock.lock().unwrap();
    assert!(guard.is_replicated(), "the primary's fsync was not acknowledged");
    // SIGKILL right after lock() returned: the server's everysec fsync
    // may not have run yet, but WAITAOF said this write is on disk.
    primary.restart();
    let fields = hgetall(&mut primary.conn(), "fsynced");
    assert_eq!(fields.get(guard.owner_id()).map(String::as_str), Some("1"), "the hold was lost: {fields:?}");
    guard.unlock().unwrap();
    assert!(!exists(&mut primary.conn(), "fsynced"));
}

#[test]
#[ignore = "needs WAITAOF (Valkey, or Redis 7.2 or newer): .ci/test's Valkey pass runs it"]
fn an_acknowledged_lock_is_in_the_replicas_append_only_file() {
    require_waitaof();
    let primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of_with_args(&primary, &["--appendonly", "yes"]);
    wait_for_replica_aof(&primary);
    let client = builder(&primary)
        .replica_acks_aof(false, 1, REPLICA_AOF_WAIT)
        .replica_acks_required(true)
        .build()
        .unwrap();
    let lock = client.lock("on-disk").unwrap();
    let guard = lock.lock().unwrap();
    assert!(guard.is_replicated());
    let on_replica = hgetall(&mut replica.conn(), "on-disk");
    assert_eq!(on_replica.get(guard.owner_id()).map(String::as_str), Some("1"));
    // The replica fsynced it: a restart of the replica keeps it.
    replica.restart();
    let on_replica = hgetall(&mut replica.conn(), "on-disk");
    assert_eq!(
        on_replica.get(guard.owner_id()).map(String::as_str),
        Some("1"),
        "lost by the replica's restart"
    );
    // Back in sync, it acknowledges the release.
    let online = format!("port={},state=online", replica.port());
    let info = || redis::cmd("INFO").arg("replication").query::<String>(&mut primary.conn()).unwrap();
    assert!(eventually(10 * SECOND, || info().contains(&online)), "the replica never came back");
    guard.unlock().unwrap();
    assert!(!exists(&mut replica.conn(), "on-disk"), "the release did not reach the replica");
}

#[test]
#[ignore = "needs WAITAOF (Valkey, or Redis 7.2 or newer): .ci/test's Valkey pass runs it"]
fn a_replica_without_an_append_only_file_is_not_counted() {
    require_waitaof();
    let primary = RedisServer::start();
    // Connected and acknowledging WAIT, but nothing to fsync.
    let _replica = RedisServer::start_replica_of(&primary);
    let flagging = builder(&primary).replica_acks_aof(false, 1, Duration::from_millis(200)).build().unwrap();
    let guard = flagging.lock("no-aof").unwrap().lock().unwrap();
    assert!(!guard.is_replicated(), "a replica without appendonly counted");
    guard.unlock().unwrap();

    let required = builder(&primary)
        .replica_acks_aof(false, 1, Duration::from_millis(200))
        .replica_acks_required(true)
        .build();
    let err = required.unwrap().lock("no-aof").unwrap().try_lock().expect_err("acquired unacknowledged");
    assert!(err.is_replica_acks(), "{err:?}");
    assert!(!exists(&mut primary.conn(), "no-aof"), "the refused hold was not given back");
}

#[test]
#[ignore = "needs WAITAOF (Valkey, or Redis 7.2 or newer): .ci/test's Valkey pass runs it"]
fn appendonly_turned_off_after_the_build_acknowledges_nothing() {
    require_waitaof();
    let primary = RedisServer::start_with_args(&["--appendonly", "yes"]);
    let client =
        builder(&primary).replica_acks_aof(true, 0, ACK_WAIT).replica_acks_required(true).build().unwrap();
    let lock = client.lock("turned-off").unwrap();
    lock.lock().unwrap().unlock().unwrap();
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("no").query(&mut primary.conn()).unwrap();
    // The server now refuses WAITAOF 1: no acknowledgement, an error,
    // and the hold given back.
    let err = lock.try_lock().expect_err("acquired though the server refused WAITAOF");
    assert!(err.is_replica_acks(), "{err:?}");
    assert!(!exists(&mut primary.conn(), "turned-off"), "the refused hold was not given back");
}
