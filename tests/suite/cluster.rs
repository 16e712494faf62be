//! The cluster client against a real Redis Cluster on 127.0.0.1 (three
//! primaries, three replicas; see `testkit/src/cluster.rs`): routing by
//! slot, waiting and wake-ups on every shard, a slot moved under a held and
//! waited-on lock, a primary killed mid-hold, and mutual exclusion
//! throughout. Tests that do not disrupt the cluster share one; the others
//! start their own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use keyholder::{Client, LockGuard};
use keyholder_testkit::cluster::RedisCluster;

fn client(cluster: &RedisCluster) -> Client {
    Client::builder_cluster(cluster.seed_urls()).build().expect("cluster client")
}

fn client_with_watchdog(cluster: &RedisCluster, watchdog: Duration) -> Client {
    Client::builder_cluster(cluster.seed_urls()).watchdog_timeout(watchdog).build().expect("cluster client")
}

/// A name whose slot `cluster` serves on `primary`, made from `prefix`.
fn name_on(cluster: &RedisCluster, primary: u16, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}:{i}"))
        .find(|name| cluster.primary_of_key(name) == primary)
        .expect("some name lands on every primary")
}

fn held_by(cluster: &RedisCluster, name: &str, client: &Client) -> bool {
    let mut con = cluster.conn_for_key(name);
    let fields: Vec<String> = redis::cmd("HKEYS").arg(name).query(&mut con).unwrap();
    fields.iter().any(|field| field.starts_with(client.id()))
}

#[test]
fn locks_spread_over_every_shard_live_on_the_primary_of_their_slot() {
    let cluster = RedisCluster::shared();
    let client = client(cluster);
    let mut shards = HashSet::new();
    for i in 0..60 {
        let name = format!("orders:{i}");
        let lock = client.lock(&name).unwrap();
        let guard = lock.try_lock().unwrap().expect("a free lock");
        assert!(held_by(cluster, &name, &client), "{name} is on the primary of its slot");
        assert_eq!(lock.hold_count().unwrap(), 1);
        assert!(lock.remaining_lease().unwrap().is_some());
        shards.insert(cluster.primary_of_key(&name));
        guard.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
    }
    assert_eq!(shards.len(), 3, "60 names reach all three primaries");
}

#[test]
fn names_with_and_without_braces_keep_every_key_in_the_lock_slot() {
    // A waiter queues in Redis (queue, grants, claim marker, wake channel),
    // a fenced lock mints from its counter: every script touches several
    // keys, which Redis refuses (CROSSSLOT) unless they share a slot.
    let cluster = RedisCluster::shared();
    let (holder, waiter) = (client(cluster), client(cluster));
    for name in ["braces:plain", "{braces}:tagged", "{braces:whole}", "pre{fix}post"] {
        let fenced = holder.lock(name).unwrap().fenced();
        let guard = fenced.lock().unwrap();
        let first_token = guard.fencing_token().expect("a fenced hold has a token");
        let other = waiter.lock(name).unwrap().fenced();
        let waiting = thread::spawn(move || {
            let guard = other.try_lock_for(Duration::from_secs(10)).unwrap().expect("woken by the release");
            let token = guard.fencing_token().unwrap();
            guard.unlock().unwrap();
            token
        });
        thread::sleep(Duration::from_millis(100));
        guard.unlock().unwrap();
        let second_token = waiting.join().unwrap();
        assert!(second_token > first_token, "{name}: tokens grow");
    }
    // Braces that make no hash tag would split a lock's keys over slots.
    for name in ["a{b", "x{}y", "a}b"] {
        assert!(holder.lock(name).unwrap_err().is_invalid(), "{name}");
    }
}

#[test]
fn a_waiter_on_each_shard_is_woken_by_the_release_of_another_client() {
    let cluster = RedisCluster::shared();
    let (holder, waiter) = (client(cluster), client(cluster));
    for (n, primary) in cluster.primaries().into_iter().enumerate() {
        let name = name_on(cluster, primary, &format!("wake{n}"));
        let guard = holder.lock(&name).unwrap().lock().unwrap();
        let lock = waiter.lock(&name).unwrap();
        let waiting = thread::spawn(move || {
            // The holder's lease is the 30 s watchdog timeout: only the
            // unlock message can end this wait in time.
            let begun = Instant::now();
            let guard = lock.try_lock_for(Duration::from_secs(10)).unwrap();
            (guard.map(LockGuard::unlock).is_some(), begun.elapsed())
        });
        thread::sleep(Duration::from_millis(150));
        let mut con = cluster.conn_to(primary);
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let shard_subscribers: Vec<(String, i64)> =
            redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channel).query(&mut con).unwrap();
        // The holder's client listens there too, for a foreign unlock
        // (tests/suite/foreign_unlock.rs).
        assert_eq!(
            shard_subscribers[0].1, 2,
            "the waiter and the holder listen on the shard channel, on its primary"
        );
        guard.unlock().unwrap();
        let (acquired, waited) = waiting.join().unwrap();
        assert!(acquired, "the waiter on {primary} was woken (waited {waited:?})");
    }
    assert_eq!(waiter.pubsub_connections(), 3, "one pub/sub connection per primary");
}

#[test]
fn plain_channels_wake_waiters_too_as_on_servers_without_shard_channels() {
    // Redis 6 clusters have no shard channels, and Redisson can be told not
    // to use them: PUBLISH reaches every node, SUBSCRIBE on the slot's
    // primary hears it.
    let cluster = RedisCluster::shared();
    let plain = || Client::builder_cluster(cluster.seed_urls()).sharded_pubsub(false).build().unwrap();
    let (holder, waiter) = (plain(), plain());
    for (n, primary) in cluster.primaries().into_iter().enumerate() {
        let name = name_on(cluster, primary, &format!("plain{n}"));
        let guard = holder.lock(&name).unwrap().lock().unwrap();
        let lock = waiter.lock(&name).unwrap();
        let waiting = thread::spawn(move || lock.try_lock_for(Duration::from_secs(10)).unwrap().is_some());
        thread::sleep(Duration::from_millis(150));
        let mut con = cluster.conn_to(primary);
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let plain_subscribers: Vec<(String, i64)> =
            redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query(&mut con).unwrap();
        let shard_subscribers: Vec<(String, i64)> =
            redis::cmd("PUBSUB").arg("SHARDNUMSUB").arg(&channel).query(&mut con).unwrap();
        // The waiter's, and the holder's (for a foreign unlock).
        assert_eq!((plain_subscribers[0].1, shard_subscribers[0].1), (2, 0), "plain subscriptions");
        guard.unlock().unwrap();
        assert!(waiting.join().unwrap(), "woken by a plain PUBLISH on {primary}");
    }
}

#[test]
fn threads_of_two_clients_exclude_each_other_on_every_shard() {
    let cluster = RedisCluster::shared();
    let names: Vec<String> = cluster
        .primaries()
        .into_iter()
        .enumerate()
        .map(|(n, p)| name_on(cluster, p, &format!("mx{n}")))
        .collect();
    let clients = [client(cluster), client(cluster)];
    let inside: Arc<Vec<AtomicBool>> = Arc::new(names.iter().map(|_| AtomicBool::new(false)).collect());
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for c in &clients {
        for t in 0..3 {
            let (client, names, inside, overlaps) =
                (c.clone(), names.clone(), Arc::clone(&inside), Arc::clone(&overlaps));
            threads.push(thread::spawn(move || {
                for round in 0..20 {
                    let at = (t + round) % names.len();
                    let lock = client.lock(&names[at]).unwrap();
                    let guard =
                        lock.try_lock_for(Duration::from_secs(20)).unwrap().expect("acquired in time");
                    if inside[at].swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_micros(300));
                    inside[at].store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            }));
        }
    }
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

#[test]
fn a_held_and_waited_lock_survives_its_slot_moving_to_another_primary() {
    let mut cluster = RedisCluster::start();
    let name = "reshard:orders";
    let slot = cluster.keyslot(name);
    let from = cluster.primary_of_slot(slot);
    let to = cluster.primaries().into_iter().find(|&p| p != from).unwrap();
    // A short watchdog timeout (a renewal every 500 ms): renewals go on while
    // the slot moves.
    let (holder, waiter) = (client_with_watchdog(&cluster, Duration::from_millis(1500)), client(&cluster));
    let guard = holder.lock(name).unwrap().lock().unwrap();
    let lock = waiter.lock(name).unwrap();
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock_for(Duration::from_secs(20)).unwrap();
        guard.map(|g| g.unlock().is_ok())
    });
    thread::sleep(Duration::from_millis(300));

    // Keys moved, slot not yet handed over: the old owner answers ASK.
    let migration = cluster.begin_migration(slot, to);
    migration.move_keys();
    thread::sleep(Duration::from_millis(1200));
    assert!(!guard.is_lost(), "renewed across ASK");
    assert_eq!(holder.lock(name).unwrap().hold_count().unwrap(), 1, "read through ASK");
    migration.finish();
    assert_eq!(cluster.primary_of_slot(slot), to);
    thread::sleep(Duration::from_millis(1200));
    assert!(!guard.is_lost(), "renewed on the new owner after MOVED");
    let mut con = cluster.conn_to(to);
    let ttl: i64 = redis::cmd("PTTL").arg(name).query(&mut con).unwrap();
    assert!(ttl > 0, "the lock lives on the new owner, renewed ({ttl} ms left)");

    guard.unlock().unwrap();
    assert_eq!(waiting.join().unwrap(), Some(true), "the waiter was woken on the new owner");
}

/// A counter in the lock's slot: the name as its hash tag.
fn counter_of(name: &str) -> String {
    format!("{{{name}}}:counter")
}

/// Outcome of one read-modify-write of a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bump {
    /// Written and acknowledged by a replica: survives a failover.
    Acked,
    /// Written, maybe: the primary failed before it answered or acked.
    Unsure,
    /// Not written.
    Failed,
}

/// Read-modify-write of `counter` (GET, pause, SET, `WAIT 1`) on the node
/// that serves it, found from `seeds` by following one `MOVED`: two holders
/// at once would lose an update.
fn bump(seeds: &[String], counter: &str) -> Bump {
    let connect = |url: &str| {
        redis::Client::open(url).ok()?.get_connection_with_timeout(Duration::from_millis(500)).ok()
    };
    for seed in seeds {
        let Some(mut con) = connect(seed) else { continue };
        let value = match redis::cmd("GET").arg(counter).query::<Option<i64>>(&mut con) {
            Ok(value) => value,
            Err(e) => match e.redirect_node() {
                Some((addr, _)) => {
                    let Some(owner) = connect(&format!("redis://{addr}/")) else { return Bump::Failed };
                    con = owner;
                    match redis::cmd("GET").arg(counter).query::<Option<i64>>(&mut con) {
                        Ok(value) => value,
                        Err(_) => return Bump::Failed,
                    }
                }
                None => continue,
            },
        };
        thread::sleep(Duration::from_micros(200));
        if redis::cmd("SET").arg(counter).arg(value.unwrap_or(0) + 1).query::<()>(&mut con).is_err() {
            return Bump::Unsure;
        }
        return match redis::cmd("WAIT").arg(1).arg(1000).query::<i64>(&mut con) {
            Ok(n) if n >= 1 => Bump::Acked,
            _ => Bump::Unsure,
        };
    }
    Bump::Failed
}

#[test]
fn a_counter_under_locks_loses_no_update_while_a_slot_moves_and_a_primary_dies() {
    let mut cluster = RedisCluster::start();
    let names: Vec<String> = cluster
        .primaries()
        .into_iter()
        .enumerate()
        .map(|(n, p)| name_on(&cluster, p, &format!("churn{n}")))
        .collect();
    let seeds = cluster.seed_urls();
    let stop = Arc::new(AtomicBool::new(false));
    let inside: Arc<Vec<AtomicBool>> = Arc::new(names.iter().map(|_| AtomicBool::new(false)).collect());
    let overlaps = Arc::new(AtomicU64::new(0));
    let (acked, unsure) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut threads = Vec::new();
    for c in 0..2 {
        // Acquisitions acknowledged by a replica survive the failover: the
        // promoted replica knows every hold.
        let client = Client::builder_cluster(cluster.seed_urls())
            .watchdog_timeout(Duration::from_secs(3))
            .replica_acks(1, Duration::from_millis(1000))
            .build()
            .unwrap();
        for t in 0..3 {
            let (client, names, stop, inside, overlaps) = (
                client.clone(),
                names.clone(),
                Arc::clone(&stop),
                Arc::clone(&inside),
                Arc::clone(&overlaps),
            );
            let (seeds, acked, unsure) = (seeds.clone(), Arc::clone(&acked), Arc::clone(&unsure));
            threads.push(thread::spawn(move || {
                let mut round = c + t;
                let deadline = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    round += 1;
                    let at = round % names.len();
                    let lock = client.lock(&names[at]).unwrap();
                    match lock.try_lock_for(Duration::from_secs(2)) {
                        Ok(Some(guard)) => {
                            if inside[at].swap(true, Ordering::SeqCst) {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            // The counter shares the lock's hash tag: its slot.
                            match bump(&seeds, &counter_of(&names[at])) {
                                Bump::Acked => acked.fetch_add(1, Ordering::SeqCst),
                                Bump::Unsure => unsure.fetch_add(1, Ordering::SeqCst),
                                Bump::Failed => 0,
                            };
                            inside[at].store(false, Ordering::SeqCst);
                            let _ = guard.unlock();
                        }
                        Ok(None) => {}
                        // The failed shard, until its replica is promoted.
                        Err(_) => thread::sleep(Duration::from_millis(20)),
                    }
                }
            }));
        }
    }
    thread::sleep(Duration::from_millis(500));
    // Move the first name's slot, then kill the primary of the second.
    let slot = cluster.keyslot(&names[0]);
    let to = cluster.primaries().into_iter().find(|&p| p != cluster.primary_of_slot(slot)).unwrap();
    cluster.migrate_slot(slot, to);
    thread::sleep(Duration::from_millis(500));
    let victim_slot = cluster.keyslot(&names[1]);
    let killed_at = Instant::now();
    cluster.kill_primary_of_slot(victim_slot);
    let promoted = cluster.wait_for_failover(victim_slot, Duration::from_secs(20));
    assert!(promoted.is_some(), "a replica was promoted:\n{}", cluster.logs());
    let promoted_after = killed_at.elapsed();
    // A new client takes a lock on the failed shard within a bounded time.
    let client = client(&cluster);
    let lock = client.lock(&names[1]).unwrap();
    let recovered = (0..100).find_map(|_| match lock.try_lock_for(Duration::from_secs(1)) {
        Ok(Some(guard)) => {
            guard.unlock().unwrap();
            Some(killed_at.elapsed())
        }
        _ => None,
    });
    println!("replica promoted {promoted_after:?} after the kill; first lock there {recovered:?} after it");
    assert!(recovered.is_some(), "the failed shard takes locks again");
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    for thread in threads {
        thread.join().unwrap();
    }
    let total: u64 = names
        .iter()
        .map(|name| {
            let counter = counter_of(name);
            let mut con = cluster.conn_for_key(&counter);
            redis::cmd("GET").arg(&counter).query::<Option<u64>>(&mut con).unwrap().unwrap_or(0)
        })
        .sum();
    let (acked, unsure) = (acked.load(Ordering::SeqCst), unsure.load(Ordering::SeqCst));
    println!("{acked} acknowledged updates, {unsure} unsure, counters total {total}");
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "no two holders at once");
    assert!(acked > 100, "the clients kept working");
    // Every acknowledged update is there; an overlap would have lost some.
    assert!((acked..=acked + unsure).contains(&total), "{acked} acked + {unsure} unsure vs {total}");
}

#[test]
fn a_hold_that_did_not_survive_a_failover_is_reported_lost_at_once() {
    let mut cluster = RedisCluster::start();
    let (replica, primary) = cluster.replica_links()[0];
    let name = name_on(&cluster, primary, "failover");
    // The default 30 s watchdog timeout: only the verification that follows
    // the failover can report the loss within the test's bound.
    let client = client(&cluster);
    let guard = client.lock(&name).unwrap().lock().unwrap();
    // The replica forgets the lock, as an asynchronous replica misses a
    // write that had no time to replicate: made writable, it is flushed
    // (FLUSHALL names no key, so the cluster runs it where it is sent).
    let mut con = cluster.conn_to(replica);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("replica-read-only").arg("no").query(&mut con).unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    let exists: i64 = redis::cmd("EXISTS").arg(&name).query(&mut cluster.conn_to(primary)).unwrap();
    assert_eq!(exists, 1, "the primary still has it");
    let slot = cluster.keyslot(&name);
    let killed_at = Instant::now();
    cluster.kill_primary_of_slot(slot);
    let promoted = cluster.wait_for_failover(slot, Duration::from_secs(20));
    assert_eq!(promoted, Some(replica), "{}", cluster.logs());
    let promoted_after = killed_at.elapsed();
    let lost = guard.lost_signal().recv_timeout(Duration::from_secs(10));
    println!(
        "promoted {promoted_after:?} after the kill; the holder was told {:?} after it",
        killed_at.elapsed()
    );
    assert!(lost.is_ok() && guard.is_lost(), "the holder is told, long before its 30 s lease");
    // And the lock is free on the new primary for others.
    let other = client_with_watchdog(&cluster, Duration::from_secs(5));
    assert!(other.lock(&name).unwrap().try_lock_for(Duration::from_secs(5)).unwrap().is_some());
}

#[test]
fn the_watchdog_renews_a_nodes_locks_in_one_call_per_hundred() {
    let cluster = RedisCluster::start();
    let client = client_with_watchdog(&cluster, Duration::from_millis(1500));
    let names: Vec<String> = (0..1500).map(|i| format!("batch:{i}")).collect();
    let guards: Vec<LockGuard> =
        names.iter().map(|name| client.lock(name).unwrap().try_lock().unwrap().expect("free")).collect();
    let per_node: Vec<(u16, usize)> = cluster
        .primaries()
        .into_iter()
        .map(|p| (p, names.iter().filter(|name| cluster.primary_of_key(name) == p).count()))
        .collect();
    let script_calls = |port: u16| {
        let mut con = cluster.conn_to(port);
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut con).unwrap();
        ["cmdstat_evalsha:calls=", "cmdstat_eval:calls="]
            .iter()
            .filter_map(|stat| info.split(stat).nth(1)?.split(',').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    let before: Vec<u64> = per_node.iter().map(|&(p, _)| script_calls(p)).collect();
    // Two seconds: four renewal rounds (every 500 ms) at most, five with
    // one on the edge.
    thread::sleep(Duration::from_secs(2));
    for (&(port, locks), before) in per_node.iter().zip(before) {
        let calls = script_calls(port) - before;
        let per_round = locks.div_ceil(100) as u64;
        println!("node {port}: {locks} locks, {calls} script calls in 2 s ({per_round} per round)");
        assert!(calls >= per_round, "renewed");
        assert!(calls <= 5 * per_round, "{calls} calls for {locks} locks: one per 100 per round");
    }
    assert!(guards.iter().all(|guard| !guard.is_lost()));
}

#[test]
fn an_acl_cluster_is_reached_with_the_seeds_credentials() {
    let cluster = RedisCluster::options().acl_user("app", "s3cret").start();
    let client = client(&cluster);
    let name = "acl:orders";
    let guard = client.lock(name).unwrap().lock().unwrap();
    assert!(held_by(&cluster, name, &client));
    guard.unlock().unwrap();
    let wrong: Vec<String> = cluster.seed_urls().iter().map(|url| url.replace("s3cret", "wrong")).collect();
    let refused = Client::builder_cluster(wrong).build().unwrap_err();
    assert_eq!(refused.kind(), keyholder::ErrorKind::AccessDenied, "{refused}");
}

#[cfg(feature = "tls")]
#[test]
fn a_tls_cluster_carries_every_connection_over_tls() {
    use keyholder_testkit::server::ClientAuth;
    let cluster = RedisCluster::options().tls(ClientAuth::Required).start();
    let tls = cluster.tls();
    let client = Client::builder_cluster(cluster.seed_urls())
        .tls_ca_certificate(tls.ca.cert_pem())
        .tls_client_certificate(tls.client.cert.as_str(), tls.client.key.as_str())
        .build()
        .unwrap();
    let other = Client::builder_cluster(cluster.seed_urls())
        .tls_ca_certificate(tls.ca.cert_pem())
        .tls_client_certificate(tls.client.cert.as_str(), tls.client.key.as_str())
        .build()
        .unwrap();
    for primary in cluster.primaries() {
        let name = name_on(&cluster, primary, "tls");
        let guard = client.lock(&name).unwrap().lock().unwrap();
        let lock = other.lock(&name).unwrap();
        let waiting = thread::spawn(move || lock.try_lock_for(Duration::from_secs(10)).unwrap().is_some());
        thread::sleep(Duration::from_millis(100));
        guard.unlock().unwrap();
        assert!(waiting.join().unwrap(), "woken over a TLS pub/sub connection on {primary}");
    }
}
