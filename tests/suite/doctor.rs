//! `Client::doctor` (issue 37) against real servers, each
//! configured to pass and to fail a check: eviction (`maxmemory` with
//! `allkeys-lru`, `volatile-lru`, `noeviction`), persistence (AOF off and
//! on), replication (a replica, the acknowledgements asked of it,
//! `min-replicas-to-write`), clocks (no replica; a replica on the same
//! clock; one really 30 s behind; one that cannot be reached), the server (its version; `WAITAOF` asked of a server without
//! it), an ACL user denied `CONFIG` (the `INFO` fallback) and `INFO` too
//! (every check unknown, none ok), every primary of a Redis Cluster, the
//! primary Sentinel names, and a server that cannot be reached (an error,
//! no report). The failover timing (the testkit's short Sentinel
//! `down-after-milliseconds` and a long one; a cluster's node timeout
//! against the command timeout) and pub/sub (a small `pubsub` output
//! buffer limit and the default; an idle drop against the client's idle
//! settings; shard channels on a cluster);
//! latency (a local server, one behind a proxy that delays
//! replies, a command timeout below the figures) and the cluster's slots
//! (full coverage, a migrating slot, a slot given up, names whose keys share a
//! slot or not).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::{RedisServer, ServerExt};
use keyholder::{Check, Client, DoctorOptions, ErrorKind, Figure, Level, Report, Verdict};
use keyholder_testkit::cluster::RedisCluster;
use keyholder_testkit::proxy::{Fault, FaultProxy};

use crate::acl::set_user;

fn doctor(client: &Client, options: &DoctorOptions) -> Report {
    client.doctor(options).unwrap()
}

#[track_caller]
fn the<'r>(report: &'r Report, name: &str) -> &'r Check {
    let mut found = report.checks.iter().filter(|c| c.name == name);
    let check = found.next().unwrap_or_else(|| panic!("no {name} check: {report:#?}"));
    assert!(found.next().is_none(), "one {name} check on one server: {report:#?}");
    check
}

fn is_unknown(check: &Check) -> bool {
    matches!(check.verdict, Verdict::Unknown { .. })
}

#[test]
fn eviction_fails_with_an_evicting_policy_and_passes_without_a_limit_or_with_noeviction() {
    for policy in ["allkeys-lru", "volatile-lru"] {
        let server = RedisServer::start_with_args(&["--maxmemory", "10mb", "--maxmemory-policy", policy]);
        let report = doctor(&server.client(), &DoctorOptions::default());
        let eviction = the(&report, "eviction");
        assert_eq!(eviction.verdict, Verdict::Fail, "{policy}: {eviction:#?}");
        assert_eq!(eviction.figure("maxmemory"), Some(&Figure::Number(10 * 1024 * 1024)));
        assert_eq!(eviction.figure("maxmemory_policy"), Some(&Figure::Text(policy.to_owned())));
        assert!(eviction.fix.as_deref().unwrap().contains("noeviction"), "{eviction:#?}");
        assert_eq!(report.worst(), Level::Fail);
    }
    let unlimited = RedisServer::start();
    let eviction = the(&doctor(&unlimited.client(), &DoctorOptions::default()), "eviction").clone();
    assert_eq!(eviction.verdict, Verdict::Ok, "{eviction:#?}");
    let noeviction =
        RedisServer::start_with_args(&["--maxmemory", "10mb", "--maxmemory-policy", "noeviction"]);
    let eviction = the(&doctor(&noeviction.client(), &DoctorOptions::default()), "eviction").clone();
    assert_eq!(eviction.verdict, Verdict::Ok, "{eviction:#?}");
    assert_eq!(eviction.fix, None);
}

#[test]
fn persistence_warns_without_aof_and_passes_with_it() {
    let volatile = RedisServer::start();
    let report = doctor(&volatile.client(), &DoctorOptions::default());
    let persistence = the(&report, "persistence");
    assert_eq!(persistence.verdict, Verdict::Warn, "{persistence:#?}");
    assert_eq!(persistence.figure("appendonly"), Some(&Figure::Flag(false)));
    assert!(persistence.meaning.contains("every held lock"), "{persistence:#?}");
    assert!(persistence.meaning.contains("fencing tokens are not lost"), "{persistence:#?}");
    // The testkit's default server: no AOF, nothing else wrong.
    assert_eq!(report.worst(), Level::Warn, "{report:#?}");

    let durable = RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let report = doctor(&durable.client(), &DoctorOptions::default());
    let persistence = the(&report, "persistence");
    assert_eq!(persistence.verdict, Verdict::Ok, "{persistence:#?}");
    assert!(persistence.meaning.contains("last second"), "{persistence:#?}");
    assert_eq!(report.worst(), Level::Ok, "{report:#?}");
}

#[test]
fn the_server_check_names_the_version_and_warns_when_waitaof_is_wanted_but_missing() {
    let server = RedisServer::start();
    let client = server.client();
    let check = the(&doctor(&client, &DoctorOptions::default()), "server").clone();
    assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
    let Some(Figure::Text(version)) = check.figure("version") else { panic!("{check:#?}") };
    assert!(version.starts_with(|c: char| c.is_ascii_digit()), "{version}");
    assert!(check.figure("busy_reply_threshold").is_some(), "{check:#?}");
    assert_eq!(check.figure("command_timeout"), Some(&Figure::Duration(Duration::from_secs(2))));

    // Services that wait with WAITAOF: a warning where the server lacks
    // it (Redis before 7.2), ok where it has it (Redis 7.2+, Valkey).
    let check = the(&doctor(&client, &DoctorOptions::new().replica_acks_aof(1)), "server").clone();
    if keyholder_testkit::server_version().has_waitaof() {
        assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
    } else {
        assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
        assert!(check.meaning.contains("WAITAOF"), "{check:#?}");
    }
}

#[test]
fn replication_checks_the_acknowledgements_asked_against_the_replicas_present() {
    let primary = RedisServer::start();
    let client = primary.client();
    // No replica, no acknowledgement asked: nothing a failover can lose.
    let alone = doctor(&client, &DoctorOptions::default());
    assert_eq!(the(&alone, "replication").verdict, Verdict::Ok, "{alone:#?}");
    assert_eq!(the(&alone, "clocks").verdict, Verdict::Ok, "{alone:#?}");
    // One acknowledgement asked of no replica: every acquisition would wait
    // and come back unacknowledged.
    let check = the(&doctor(&client, &DoctorOptions::new().replica_acks(1)), "replication").clone();
    assert_eq!(check.verdict, Verdict::Fail, "{check:#?}");
    assert!(check.meaning.contains("0 are online"), "{check:#?}");

    let replica = RedisServer::start_replica_of(&primary);
    // A replica, no acknowledgement asked: a failover can lose holds.
    let check = the(&doctor(&client, &DoctorOptions::default()), "replication").clone();
    assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
    assert_eq!(check.figure("online_replicas"), Some(&Figure::Number(1)));
    assert!(check.fix.as_deref().unwrap().contains("replica_acks"), "{check:#?}");
    // As many acknowledgements as replicas: ok; more: a failure.
    let check = the(&doctor(&client, &DoctorOptions::new().replica_acks(1)), "replication").clone();
    assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
    let check = the(&doctor(&client, &DoctorOptions::new().replica_acks(2)), "replication").clone();
    assert_eq!(check.verdict, Verdict::Fail, "{check:#?}");

    // The replica's clock is read, on this machine: the same clock.
    let clocks = the(&doctor(&client, &DoctorOptions::default()), "clocks").clone();
    assert_eq!(clocks.verdict, Verdict::Ok, "{clocks:#?}");
    assert_eq!(clocks.figure("clocks_read"), Some(&Figure::Number(1)), "{clocks:#?}");
    assert!(clocks.found.contains(&format!("replica 127.0.0.1:{} ", replica.port())), "{clocks:#?}");
}

#[test]
fn clocks_fail_with_a_replica_behind_by_more_than_a_promotion_and_are_unknown_when_it_cannot_be_reached() {
    let primary = RedisServer::start();
    let client = primary.client();
    // A replica whose wall clock is really 30 s behind (an LD_PRELOAD shim
    // on the real server): promoted after a loss of the counter, it would
    // mint tokens below those handed out.
    let behind = RedisServer::start_replica_of_with_clock_offset(&primary, -30_000);
    let clocks = the(&doctor(&client, &DoctorOptions::default()), "clocks").clone();
    assert_eq!(clocks.verdict, Verdict::Fail, "{clocks:#?}");
    let Some(Figure::Duration(most_behind)) = clocks.figure("most_behind") else { panic!("{clocks:#?}") };
    assert!((29_000..=31_000).contains(&most_behind.as_millis()), "{clocks:#?}");
    assert!(clocks.meaning.contains(&format!("replica 127.0.0.1:{}", behind.port())), "{clocks:#?}");
    assert!(clocks.fix.as_deref().unwrap().contains("chrony"), "{clocks:#?}");
    drop(behind);

    // A replica that announces a port nobody listens on: its clock cannot
    // be read, and the check says so rather than pass.
    let nowhere = common::free_port().to_string();
    let replica_of =
        ["--replicaof", "127.0.0.1", &primary.port().to_string(), "--replica-announce-port", &nowhere];
    let _hidden = RedisServer::start_with_args(&replica_of);
    let mut con = primary.conn();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut con).unwrap();
        if info.contains(&format!("port={nowhere},state=online")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the replica never came online: {info}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = doctor(&client, &DoctorOptions::default());
    let clocks = the(&report, "clocks").clone();
    let Verdict::Unknown { reason, confirm_by_hand } = &clocks.verdict else { panic!("{clocks:#?}") };
    assert!(reason.contains(&format!("replica 127.0.0.1:{nowhere}")), "{reason}");
    assert!(confirm_by_hand.contains("TIME"), "{confirm_by_hand}");
    // Nor can its own settings be read: unknown, not ok.
    let node = format!("replica 127.0.0.1:{nowhere}");
    let unread: Vec<&Check> =
        report.checks.iter().filter(|c| c.node.as_deref() == Some(node.as_str())).collect();
    assert_eq!(unread.len(), 2, "{report:#?}");
    assert!(unread.iter().all(|c| is_unknown(c)), "{unread:#?}");
}

#[test]
fn min_replicas_to_write_above_the_replicas_present_fails() {
    let primary =
        RedisServer::start_with_args(&["--min-replicas-to-write", "2", "--min-replicas-max-lag", "10"]);
    // The client connects before any write; the doctor writes nothing.
    let client = primary.client();
    let check = the(&doctor(&client, &DoctorOptions::default()), "replication").clone();
    assert_eq!(check.verdict, Verdict::Fail, "{check:#?}");
    assert_eq!(check.figure("min_replicas_to_write"), Some(&Figure::Number(2)));
    assert!(check.meaning.contains("NOREPLICAS"), "{check:#?}");
}

#[test]
fn a_user_denied_config_is_checked_from_info_and_one_denied_info_too_gets_unknowns_never_ok() {
    let server = RedisServer::start_with_args(&["--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut con = server.conn();
    let url = format!("redis://doctor:pw@127.0.0.1:{}/", server.port());
    let mut client = |rules: &[&str]| {
        set_user(&mut con, "doctor", rules);
        Client::builder(url.clone()).connect_timeout(Duration::from_secs(2)).build().unwrap()
    };

    // As a managed service: CONFIG refused, INFO given.
    let report = doctor(&client(&["~*", "&*", "+@all", "-config"]), &DoctorOptions::default());
    let eviction = the(&report, "eviction");
    assert_eq!(eviction.verdict, Verdict::Fail, "{eviction:#?}");
    assert_eq!(eviction.figure("source"), Some(&Figure::Text("INFO memory".to_owned())));
    let persistence = the(&report, "persistence");
    assert_eq!(persistence.verdict, Verdict::Warn, "AOF off, read from INFO: {persistence:#?}");
    let server_check = the(&report, "server");
    assert_eq!(server_check.verdict, Verdict::Ok, "{server_check:#?}");
    assert!(server_check.found.contains("busy-reply-threshold not read"), "{server_check:#?}");

    // CONFIG and INFO refused: nothing can be told, and nothing is ok (but
    // the latency and the access, which need neither).
    let report = doctor(&client(&["~*", "&*", "+@all", "-config", "-info"]), &DoctorOptions::default());
    // One server's URL: no automatic failover, whatever the server says.
    assert_eq!(the(&report, "failover").verdict, Verdict::Ok, "{report:#?}");
    assert_eq!(the(&report, "latency").verdict, Verdict::Ok, "{report:#?}");
    for check in report.checks.iter().filter(|c| !["failover", "latency", "access"].contains(&c.name)) {
        let Verdict::Unknown { reason, confirm_by_hand } = &check.verdict else {
            panic!("{} is not unknown: {check:#?}", check.name)
        };
        assert!(reason.contains("NOPERM"), "{}: {reason}", check.name);
        assert!(!confirm_by_hand.is_empty(), "{}", check.name);
    }
    assert_eq!(report.checks.len(), 9, "{report:#?}");
    assert_eq!(report.worst(), Level::Warn);
}

#[test]
fn on_a_cluster_every_primary_is_checked() {
    let cluster = RedisCluster::shared();
    let client = Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    let report = doctor(&client, &DoctorOptions::default());
    let primaries = cluster.primaries();
    for name in [
        "eviction",
        "persistence",
        "replication",
        "clocks",
        "server",
        "failover",
        "pubsub",
        "latency",
        "access",
        "cluster",
    ] {
        let mut nodes: Vec<&str> = report
            .checks
            .iter()
            .filter(|c| c.name == name)
            .filter_map(|c| c.node.as_deref())
            .filter(|node| !node.starts_with("replica "))
            .collect();
        nodes.sort_unstable();
        let mut expected: Vec<String> = primaries.iter().map(|port| format!("127.0.0.1:{port}")).collect();
        expected.sort_unstable();
        assert_eq!(nodes, expected, "{name}: {report:#?}");
    }
    assert!(report.checks.iter().all(|c| !is_unknown(c)), "{report:#?}");
    // Each replica's own settings checked under its own node.
    let mut replicas: Vec<String> = report
        .checks
        .iter()
        .filter(|c| c.name == "eviction")
        .filter_map(|c| c.node.as_deref()?.strip_prefix("replica ").map(str::to_owned))
        .collect();
    replicas.sort_unstable();
    let mut expected: Vec<String> =
        cluster.replicas().iter().map(|port| format!("127.0.0.1:{port}")).collect();
    expected.sort_unstable();
    assert_eq!(replicas, expected, "{report:#?}");
    // Each primary's replica read, and every primary but the first against
    // the first.
    let read: Vec<i64> = report
        .checks
        .iter()
        .filter(|c| c.name == "clocks")
        .map(|c| match c.figure("clocks_read") {
            Some(Figure::Number(n)) => *n,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(read.iter().sum::<i64>(), 5, "{report:#?}");
    assert!(
        report.checks.iter().filter(|c| c.name == "clocks").all(|c| c.verdict == Verdict::Ok),
        "{report:#?}"
    );
}

#[test]
fn through_sentinel_the_primary_it_names_is_checked_with_its_replica() {
    let set = keyholder_testkit::SentinelSet::start();
    let client = Client::builder_sentinel(set.sentinel_urls(), keyholder_testkit::sentinel::MASTER_NAME)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let report = doctor(&client, &DoctorOptions::new().replica_acks(1));
    let replication = the(&report, "replication");
    assert_eq!(replication.node, None);
    assert_eq!(replication.figure("role"), Some(&Figure::Text("master".to_owned())));
    assert_eq!(replication.figure("online_replicas"), Some(&Figure::Number(1)), "{replication:#?}");
    assert_eq!(replication.verdict, Verdict::Ok, "{replication:#?}");
    let clocks = the(&report, "clocks");
    assert!(clocks.found.contains(&format!("replica 127.0.0.1:{}", set.replica().port())), "{clocks:#?}");
    assert_eq!(clocks.verdict, Verdict::Ok, "{clocks:#?}");
    // Sentinel's down-after-milliseconds is the tolerance.
    assert!(clocks.found.contains("tolerance the failover's detection time"), "{clocks:#?}");
}

#[test]
fn a_server_that_cannot_be_reached_is_an_error_not_a_report() {
    let mut server = RedisServer::start();
    let client = server.builder().command_timeout(Duration::from_millis(500)).build().unwrap();
    server.stop();
    let err = client.doctor(&DoctorOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err:?}");
}

#[test]
fn failover_through_sentinel_warns_on_the_testkits_short_detection_and_passes_a_long_one() {
    use keyholder_testkit::sentinel::{DOWN_AFTER, MASTER_NAME};
    let set = keyholder_testkit::SentinelSet::start();
    let client = Client::builder_sentinel(set.sentinel_urls(), MASTER_NAME)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    // The testkit's 1 s detection against the default 3 s command timeout.
    let check = the(&doctor(&client, &DoctorOptions::new().replica_acks(1)), "failover").clone();
    assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
    assert_eq!(check.figure("down_after"), Some(&Figure::Duration(DOWN_AFTER)));
    assert_eq!(check.figure("failover_timeout"), Some(&Figure::Duration(Duration::from_secs(5))));
    assert_eq!(check.figure("quorum"), Some(&Figure::Number(2)));
    assert_eq!(check.figure("sentinels"), Some(&Figure::Number(3)));
    assert_eq!(check.figure("sentinels_answered"), Some(&Figure::Number(3)));
    assert!(check.meaning.contains("shorter than the services' command timeout"), "{check:#?}");

    for url in set.sentinel_urls() {
        let mut con =
            redis::Client::open(url).unwrap().get_connection_with_timeout(Duration::from_secs(2)).unwrap();
        let _: () = redis::cmd("SENTINEL")
            .arg("SET")
            .arg(MASTER_NAME)
            .arg("down-after-milliseconds")
            .arg(30_000)
            .query(&mut con)
            .unwrap();
    }
    // A long detection, the replica acknowledging: ok, with the figures.
    let options = DoctorOptions::new().replica_acks(1).watchdog_timeout(Duration::from_secs(10));
    let check = the(&doctor(&client, &options), "failover").clone();
    assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
    assert_eq!(check.figure("down_after"), Some(&Figure::Duration(Duration::from_secs(30))));
    assert_eq!(check.figure("unavailable"), Some(&Figure::Duration(Duration::from_secs(32))));
    assert_eq!(check.figure("watchdog_timeout"), Some(&Figure::Duration(Duration::from_secs(10))));
    // No acknowledgement with a replica present: lossy, the overlap named.
    let check = the(&doctor(&client, &DoctorOptions::default()), "failover").clone();
    assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
    assert!(check.meaning.contains("overlap for about 32000 ms"), "{check:#?}");
}

#[test]
fn failover_on_a_cluster_holds_the_node_timeout_against_the_command_timeout() {
    let cluster = RedisCluster::shared();
    let client = Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    let node_timeout = keyholder_testkit::cluster::NODE_TIMEOUT;
    // The testkit's 2 s node timeout against the default 3 s command timeout.
    let report = doctor(&client, &DoctorOptions::new().replica_acks(1));
    let checks: Vec<&Check> = report.checks.iter().filter(|c| c.name == "failover").collect();
    assert_eq!(checks.len(), cluster.primaries().len(), "{report:#?}");
    for check in checks {
        assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
        assert_eq!(check.figure("node_timeout"), Some(&Figure::Duration(node_timeout)));
    }
    // Services that ride out 1 s at most: the node timeout is above it.
    let options = DoctorOptions::new().replica_acks(1).command_timeout(Duration::from_secs(1));
    let report = doctor(&client, &options);
    for check in report.checks.iter().filter(|c| c.name == "failover") {
        assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
        assert_eq!(
            check.figure("overlap_cut_off"),
            Some(&Figure::Duration(node_timeout + Duration::from_secs(30))),
            "the node timeout and the default watchdog"
        );
    }
    // A cluster with a 10 s node timeout passes the default 3 s command
    // timeout; without acknowledgements its replicas make failovers lossy.
    let long = RedisCluster::options().node_timeout(Duration::from_secs(10)).start();
    let client = Client::builder_cluster(long.seed_urls()).build().unwrap();
    let acknowledged = doctor(&client, &DoctorOptions::new().replica_acks(1));
    let unacknowledged = doctor(&client, &DoctorOptions::new().replica_acks(0));
    for (check, lossy) in
        acknowledged.checks.iter().zip(unacknowledged.checks.iter()).filter(|(c, _)| c.name == "failover")
    {
        assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
        assert_eq!(check.figure("node_timeout"), Some(&Figure::Duration(Duration::from_secs(10))));
        assert_eq!(check.figure("unavailable"), Some(&Figure::Duration(Duration::from_secs(12))));
        // One replica a primary (the testkit's), unacknowledged.
        assert_eq!(lossy.figure("replicas"), Some(&Figure::Number(1)), "{lossy:#?}");
        assert_eq!(lossy.verdict, Verdict::Warn, "{lossy:#?}");
        assert!(lossy.meaning.contains("overlap for about 12000 ms"), "{lossy:#?}");
    }
    // Shard channels where the servers have them (Redis 7+, Valkey).
    for check in report.checks.iter().filter(|c| c.name == "pubsub") {
        let sharded = check.figure("sharded");
        assert!(sharded.is_some(), "{check:#?}");
        if sharded == Some(&Figure::Flag(true)) {
            assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
        } else {
            assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
        }
    }
}

#[test]
fn pubsub_warns_on_a_small_output_buffer_limit_and_passes_the_default() {
    let small =
        RedisServer::start_with_args(&["--client-output-buffer-limit", "pubsub", "64kb", "32kb", "10"]);
    let check = the(&doctor(&small.client(), &DoctorOptions::default()), "pubsub").clone();
    assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
    assert_eq!(check.figure("pubsub_hard_limit"), Some(&Figure::Number(64 * 1024)));
    assert_eq!(check.figure("pubsub_soft_seconds"), Some(&Figure::Number(10)));
    assert!(check.meaning.contains("lease-end wake"), "{check:#?}");
    assert!(check.fix.as_deref().unwrap().contains("client-output-buffer-limit"), "{check:#?}");

    let default = RedisServer::start();
    let check = the(&doctor(&default.client(), &DoctorOptions::default()), "pubsub").clone();
    assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
    assert_eq!(check.figure("pubsub_hard_limit"), Some(&Figure::Number(32 * 1024 * 1024)));
    assert!(check.found.contains("idle drop not stated"), "{check:#?}");
}

#[test]
fn an_idle_drop_shorter_than_the_clients_idle_settings_fails() {
    let server = RedisServer::start();
    let client = server.client();
    // The default 3 min connection idle timeout: a command connection idle
    // for 2 min is used again on a flow a 2 min NAT has dropped.
    let check =
        the(&doctor(&client, &DoctorOptions::new().idle_drop(Duration::from_secs(120))), "pubsub").clone();
    assert_eq!(check.verdict, Verdict::Fail, "{check:#?}");
    assert_eq!(check.figure("idle_drop"), Some(&Figure::Duration(Duration::from_secs(120))));
    assert!(check.fix.as_deref().unwrap().contains("connection_idle_timeout"), "{check:#?}");
    // AWS's NAT gateway, 350 s: the defaults are below it.
    let check =
        the(&doctor(&client, &DoctorOptions::new().idle_drop(Duration::from_secs(350))), "pubsub").clone();
    assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
    // A client that idles out sooner passes the 2 min drop.
    let quick = server.builder().connection_idle_timeout(Some(Duration::from_secs(60))).build().unwrap();
    let check =
        the(&doctor(&quick, &DoctorOptions::new().idle_drop(Duration::from_secs(120))), "pubsub").clone();
    assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
    assert_eq!(
        check.figure("idle_ping"),
        Some(&Figure::Duration(Duration::from_secs(32))),
        "30 s + a 2 s look"
    );
}

#[test]
fn latency_is_measured_with_a_scratch_lock_that_is_removed_and_held_against_the_command_timeout() {
    let server = RedisServer::start();
    let client = server.client();
    let report = doctor(&client, &DoctorOptions::default());
    let latency = the(&report, "latency");
    assert_eq!(latency.verdict, Verdict::Ok, "{latency:#?}");
    assert_eq!(latency.figure("round_trips"), Some(&Figure::Number(50)));
    for figure in ["rtt_p50", "rtt_p99", "acquire_release", "unlock_to_wake"] {
        let Some(Figure::Duration(d)) = latency.figure(figure) else { panic!("{figure}: {latency:#?}") };
        assert!(*d < Duration::from_secs(1), "{figure}: {latency:#?}");
    }
    let scratch = format!("keyholder:doctor:{}", client.id());
    assert_eq!(latency.figure("scratch_lock"), Some(&Figure::Text(scratch.clone())));
    // The scratch lock is gone, and nothing of it is left without a TTL.
    let mut con = server.conn();
    let exists: i64 = redis::cmd("EXISTS").arg(&scratch).query(&mut con).unwrap();
    assert_eq!(exists, 0, "{scratch}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*keyholder:doctor:*").query(&mut con).unwrap();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }

    // A command timeout below what was measured: a failure.
    let report = doctor(&client, &DoctorOptions::new().command_timeout(Duration::from_micros(1)));
    let latency = the(&report, "latency");
    assert_eq!(latency.verdict, Verdict::Fail, "{latency:#?}");
    assert!(latency.meaning.contains("round trip p99"), "{latency:#?}");
}

#[test]
fn latency_within_a_factor_of_3_of_the_command_timeout_warns() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = Client::builder(proxy.url()).command_timeout(Duration::from_secs(5)).build().unwrap();
    proxy.set(Fault::DelayReplies(Duration::from_millis(120)));
    // p99 at least 120 ms, 3 x 120 above 359 ms; the pair and the wake (at
    // most two delayed replies each, 240 ms) below it.
    let report = doctor(&client, &DoctorOptions::new().command_timeout(Duration::from_millis(359)));
    let latency = the(&report, "latency");
    assert_eq!(latency.verdict, Verdict::Warn, "{latency:#?}");
    let Some(Figure::Duration(p99)) = latency.figure("rtt_p99") else { panic!("{latency:#?}") };
    assert!(*p99 >= Duration::from_millis(120), "{latency:#?}");
    assert!(latency.figure("unlock_to_wake").is_some(), "{latency:#?}");
    proxy.set(Fault::None);
}

#[test]
fn on_a_cluster_each_primary_is_timed_with_a_scratch_lock_of_its_own_and_its_slots_checked() {
    let cluster = RedisCluster::shared();
    let client = Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    let names = ["orders:42", "{user}:1", "a{b"];
    let report = doctor(&client, &DoctorOptions::new().names(names));
    let mut scratches = Vec::new();
    for check in report.checks.iter().filter(|c| c.name == "latency") {
        assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
        let Some(Figure::Text(scratch)) = check.figure("scratch_lock") else { panic!("{check:#?}") };
        // Its hash tag lands it on the primary timed.
        let port = check.node.as_deref().unwrap().rsplit_once(':').unwrap().1.parse::<u16>().unwrap();
        assert_eq!(cluster.primary_of_key(scratch), port, "{check:#?}");
        scratches.push(scratch.clone());
    }
    assert_eq!(scratches.len(), cluster.primaries().len(), "{report:#?}");
    for check in report.checks.iter().filter(|c| c.name == "cluster") {
        assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
        assert_eq!(check.figure("slots_served"), Some(&Figure::Number(16384)), "{check:#?}");
    }
    // `a{b`'s braces make no tag: its lock key and its channel fall apart.
    let names = the(&report, "cluster_names");
    assert_eq!(names.verdict, Verdict::Fail, "{names:#?}");
    assert!(names.found.contains("\"a{b\" (lock key in slot"), "{names:#?}");
    assert!(names.found.contains("\"orders:42\""), "{names:#?}");
    assert_eq!(names.figure("names_split"), Some(&Figure::Number(1)));
    let report = doctor(&client, &DoctorOptions::new().names(["orders:42", "jobs:nightly"]));
    assert_eq!(the(&report, "cluster_names").verdict, Verdict::Ok, "{report:#?}");
    // A name with its own tag: fine for every lock kind, not for a
    // count-down latch (Redisson's latch channel adds braces), which the
    // client refuses as such.
    let report = doctor(&client, &DoctorOptions::new().names(["{user}:1"]));
    let names = the(&report, "cluster_names");
    assert_eq!(names.verdict, Verdict::Warn, "{names:#?}");
    assert!(client.lock("{user}:1").is_ok() && client.count_down_latch("{user}:1").is_err());
}

#[test]
fn a_migrating_slot_warns_on_both_its_primaries_and_an_unserved_slot_fails() {
    let mut cluster = RedisCluster::start();
    let slot = 100;
    let from = cluster.primary_of_slot(slot);
    let to = *cluster.primaries().iter().find(|p| **p != from).unwrap();
    let client = Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    let _migration = cluster.begin_migration(slot, to);
    let report = doctor(&client, &DoctorOptions::default());
    for check in report.checks.iter().filter(|c| c.name == "cluster") {
        let port = check.node.as_deref().unwrap().rsplit_once(':').unwrap().1.parse::<u16>().unwrap();
        if port == from {
            assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
            assert!(check.found.contains(&format!("slot {slot} migrating to 127.0.0.1:{to}")), "{check:#?}");
        } else if port == to {
            assert_eq!(check.verdict, Verdict::Warn, "{check:#?}");
            assert!(
                check.found.contains(&format!("slot {slot} importing from 127.0.0.1:{from}")),
                "{check:#?}"
            );
        } else {
            assert_eq!(check.verdict, Verdict::Ok, "{check:#?}");
        }
        assert_eq!(check.figure("slots_served"), Some(&Figure::Number(16384)), "{check:#?}");
    }
    assert!(report.checks.iter().all(|c| c.name != "cluster_names"), "no names, no check: {report:#?}");

    // A slot its owner gave up (`CLUSTER DELSLOTS`): served by nobody, as
    // that primary sees the map.
    let third = *cluster.primaries().iter().find(|p| **p != from && **p != to).unwrap();
    let dropped = (0..16384u16).rev().find(|s| cluster.primary_of_slot(*s) == third).unwrap();
    let _: () =
        redis::cmd("CLUSTER").arg("DELSLOTS").arg(dropped).query(&mut cluster.conn_to(third)).unwrap();
    let report = doctor(&client, &DoctorOptions::default());
    let node = format!("127.0.0.1:{third}");
    let check =
        report.checks.iter().find(|c| c.name == "cluster" && c.node.as_deref() == Some(&node)).unwrap();
    assert_eq!(check.verdict, Verdict::Fail, "{check:#?}");
    assert_eq!(check.figure("slots_served"), Some(&Figure::Number(16383)), "{check:#?}");
}

/// The access check's dry run: every kind's script paths run for a user
/// with every right, and nothing of the scratch names is left; a user
/// denied a command the reentrant lock's scripts call fails it, one denied
/// a command only the semaphores' call gets a warning naming them; a user whose key patterns leave out the scratch names cannot be
/// dry-run (unknown), and the names given are probed instead: a derived
/// key outside the patterns fails, named.
#[test]
fn access_dry_runs_every_kind_and_names_what_the_acl_user_is_refused() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let report = doctor(&server.client(), &DoctorOptions::default());
    let access = the(&report, "access");
    assert_eq!(access.verdict, Verdict::Ok, "{access:#?}");
    assert_eq!(access.figure("refused"), Some(&Figure::Number(0)), "{access:#?}");
    assert_eq!(access.figure("dry_run_ran"), access.figure("dry_run_steps"), "{access:#?}");
    // What is left of the scratch names is the release's bookkeeping, each
    // key with a TTL of at most the scratch lease.
    let left: Vec<String> = redis::cmd("KEYS").arg("*doctor*").query(&mut con).unwrap();
    for key in &left {
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
        assert!((1..=10_000).contains(&pttl), "{key} left with PTTL {pttl}");
    }

    let url = format!("redis://doctor:pw@127.0.0.1:{}/", server.port());
    let mut client = |rules: &[&str]| {
        set_user(&mut con, "doctor", rules);
        Client::builder(url.clone()).connect_timeout(Duration::from_secs(2)).build().unwrap()
    };
    let report = doctor(&client(&["~*", "&*", "+@all", "-hincrby"]), &DoctorOptions::default());
    let access = the(&report, "access");
    assert_eq!(access.verdict, Verdict::Fail, "{access:#?}");
    // Redis 7.0 does not name the command a script was refused (Valkey
    // does); the step and the script's line are named.
    assert!(access.found.contains("lock re-entry"), "{access:#?}");

    let report = doctor(&client(&["~*", "&*", "+@all", "-decrby"]), &DoctorOptions::default());
    let access = the(&report, "access");
    assert_eq!(access.verdict, Verdict::Warn, "{access:#?}");
    assert!(access.meaning.contains("semaphore"), "{access:#?}");
    assert!(!access.meaning.contains("fair lock"), "{access:#?}");

    let app_only = ["~app:*", "&*", "+@all"];
    let report = doctor(&client(&app_only), &DoctorOptions::default());
    assert!(is_unknown(the(&report, "access")), "{report:#?}");
    // Nor can the latency check's scratch lock be taken: its round trips
    // are measured, the lock's figures unknown, never ok.
    let latency = the(&report, "latency");
    assert!(is_unknown(latency), "{latency:#?}");
    assert!(latency.figure("rtt_p99").is_some(), "{latency:#?}");
    let report = doctor(&client(&app_only), &DoctorOptions::new().names(["app:1".to_owned()]));
    let access = the(&report, "access");
    assert_eq!(access.verdict, Verdict::Fail, "{access:#?}");
    assert!(access.found.contains("redisson_lock_token:{app:1}"), "{access:#?}");
}

/// A user who may not run `EVALSHA` gets no client; the refusal is the
/// access check's failure.
#[test]
fn a_user_denied_evalsha_gets_a_report_of_the_refusal() {
    let server = RedisServer::start();
    let mut con = server.conn();
    set_user(&mut con, "doctor", &["~*", "&*", "+@all", "-evalsha"]);
    let url = format!("redis://doctor:pw@127.0.0.1:{}/", server.port());
    let e = Client::builder(url).connect_timeout(Duration::from_secs(2)).build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AccessDenied);
    let report = Report::refused_access(&e).unwrap();
    let access = the(&report, "access");
    assert_eq!(access.verdict, Verdict::Fail, "{access:#?}");
    assert!(access.found.contains("EVALSHA"), "{access:#?}");
    assert_eq!(report.worst(), Level::Fail);
}

/// A failover promotes a replica with its own settings: one that evicts
/// fails the eviction check under its own node, while its primary passes;
/// one that cannot be reached is unknown, never ok.
#[test]
fn a_replicas_own_eviction_and_persistence_settings_are_checked() {
    let primary = RedisServer::start_with_args(&["--appendonly", "yes"]);
    let client = primary.client();
    let replica = RedisServer::start_replica_of_with_args(
        &primary,
        &["--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru"],
    );
    let report = doctor(&client, &DoctorOptions::default());
    let node = format!("replica 127.0.0.1:{}", replica.port());
    let of = |name: &str, node: Option<&str>| {
        report.checks.iter().find(|c| c.name == name && c.node.as_deref() == node).cloned().unwrap()
    };
    assert_eq!(of("eviction", None).verdict, Verdict::Ok, "{report:#?}");
    let evicting = of("eviction", Some(&node));
    assert_eq!(evicting.verdict, Verdict::Fail, "{evicting:#?}");
    assert!(evicting.meaning.starts_with("once this replica is promoted"), "{evicting:#?}");
    // The replica keeps no AOF (the testkit's default), its primary does.
    assert_eq!(of("persistence", None).verdict, Verdict::Ok, "{report:#?}");
    assert_eq!(of("persistence", Some(&node)).verdict, Verdict::Warn, "{report:#?}");
}
