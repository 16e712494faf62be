//! Checks of the cluster harness itself (`keyholder_testkit::cluster`):
//! that a started cluster routes keys where `CLUSTER KEYSLOT` says, that a
//! migration gives the redirections it documents, that a killed primary's
//! replica is promoted, that the shared cluster is one per binary, and that
//! the ACL and TLS variants refuse what they should.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Mutex;
use std::time::{Duration, Instant};

use keyholder_testkit::cluster::{ClusterOptions, RedisCluster, SLOTS};

/// The shared cluster's node ids as the first test to use it saw them.
static SHARED_SEEN: Mutex<Option<Vec<(u16, String)>>> = Mutex::new(None);

/// The shared cluster; asserts it is the one every other test got.
fn shared() -> &'static RedisCluster {
    let begun = Instant::now();
    let cluster = RedisCluster::shared();
    let mut seen = SHARED_SEEN.lock().unwrap();
    match &*seen {
        None => {
            println!("shared cluster ready in {:?}", begun.elapsed());
            *seen = Some(cluster.node_ids());
        }
        Some(ids) => assert_eq!(*ids, cluster.node_ids(), "a second shared cluster was started"),
    }
    cluster
}

/// The error a command on the node on `port` gets.
fn error_of(cluster: &RedisCluster, port: u16, cmd: &redis::Cmd) -> redis::RedisError {
    let mut con = cluster.conn_to(port);
    match cmd.query::<redis::Value>(&mut con) {
        Ok(value) => panic!("{port} answered {value:?}, not an error"),
        Err(e) => e,
    }
}

fn get(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("GET");
    cmd.arg(key);
    cmd
}

#[test]
fn a_started_cluster_is_ready_and_keys_land_where_keyslot_says() {
    let cluster = shared();
    assert_eq!(cluster.seed_urls().len(), 6);
    assert!(
        cluster.seed_urls().iter().all(|u| u.starts_with("redis://127.0.0.1:")),
        "{:?}",
        cluster.seed_urls()
    );
    let (primaries, replicas) = (cluster.primaries(), cluster.replicas());
    assert_eq!((primaries.len(), replicas.len()), (3, 3), "primaries {primaries:?}, replicas {replicas:?}");
    let map = cluster.slot_map();
    assert_eq!(map.iter().map(|r| u32::from(r.end - r.start) + 1).sum::<u32>(), u32::from(SLOTS));
    assert!(map.iter().all(|r| r.replicas.len() == 1), "{map:?}");
    for (replica, primary) in cluster.replica_links() {
        let mut con = cluster.conn_to(replica);
        let info: String = redis::cmd("INFO").arg("replication").query(&mut con).unwrap();
        assert!(info.contains("master_link_status:up"), "{replica}: {info}");
        assert!(info.contains(&format!("master_port:{primary}")), "{replica}: {info}");
    }

    // Braced keys share their tag's slot; the others hash whole, and so do
    // keys whose braces hold no valid tag.
    let tagged = ["{shared-test}:a", "{shared-test}:b", "x{shared-test}y"];
    let slots: Vec<u16> = tagged.iter().map(|k| cluster.keyslot(k)).collect();
    assert!(slots.iter().all(|s| *s == slots[0]), "{slots:?}");
    assert_eq!(slots[0], cluster.keyslot("shared-test"));
    assert_ne!(cluster.keyslot("shared-test{}x"), cluster.keyslot("shared-test"));

    let keys = ["shared-test:plain", "{shared-test}:a", "shared-test{}x", "shared-test:{other}", "a{b"];
    for key in keys {
        let slot = cluster.keyslot(key);
        let owner = cluster.primary_of_slot(slot);
        let mut con = cluster.conn_to(owner);
        let _: () = redis::cmd("SET").arg(key).arg("v").arg("PX").arg(10_000).query(&mut con).unwrap();
        let value: String = cluster.conn_for_key(key).get_value(key);
        assert_eq!(value, "v");
        for other in primaries.iter().copied().filter(|p| *p != owner) {
            let e = error_of(cluster, other, &get(key));
            assert_eq!(e.code(), Some("MOVED"), "{other} for {key}: {e}");
            assert_eq!(e.redirect_node(), Some((format!("127.0.0.1:{owner}").as_str(), slot)), "{e}");
        }
        let _: i64 = redis::cmd("DEL").arg(key).query(&mut con).unwrap();
    }
}

/// `GET` with a typed answer, on a connection.
trait GetValue {
    fn get_value(&mut self, key: &str) -> String;
}

impl GetValue for redis::Connection {
    fn get_value(&mut self, key: &str) -> String {
        redis::cmd("GET").arg(key).query(self).unwrap()
    }
}

#[test]
fn the_shared_cluster_is_started_once() {
    let cluster = shared();
    let begun = Instant::now();
    let again = RedisCluster::shared();
    assert!(begun.elapsed() < Duration::from_millis(100), "the second call took {:?}", begun.elapsed());
    assert!(std::ptr::eq(cluster, again));
    // It still answers: the other test left it alone.
    let mut con = cluster.conn_for_key("shared-reuse");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn a_migration_redirects_with_ask_then_moved() {
    let begun = Instant::now();
    let mut cluster = RedisCluster::start();
    println!("cluster ready in {:?}", begun.elapsed());
    let (moved, stays) = ("{migrating}:moved", "{migrating}:stays");
    let slot = cluster.keyslot(moved);
    let source = cluster.primary_of_slot(slot);
    let target = *cluster.primaries().iter().find(|p| **p != source).unwrap();
    let mut con = cluster.conn_to(source);
    for key in [moved, stays] {
        let _: () = redis::cmd("SET").arg(key).arg(key).query(&mut con).unwrap();
    }

    let begun = Instant::now();
    let migration = cluster.begin_migration(slot, target);
    migration.move_key(moved);
    // The source serves what it still has and sends the rest to the target.
    let e = error_of(&cluster, source, &get(moved));
    assert_eq!(e.code(), Some("ASK"), "{e}");
    assert_eq!(e.redirect_node(), Some((format!("127.0.0.1:{target}").as_str(), slot)), "{e}");
    assert_eq!(cluster.conn_to(source).get_value(stays), stays);
    // The target serves the slot only after ASKING.
    let e = error_of(&cluster, target, &get(moved));
    assert_eq!(e.code(), Some("MOVED"), "{e}");
    assert_eq!(e.redirect_node(), Some((format!("127.0.0.1:{source}").as_str(), slot)), "{e}");
    let mut asking = cluster.conn_to(target);
    let _: () = redis::cmd("ASKING").query(&mut asking).unwrap();
    assert_eq!(asking.get_value(moved), moved);
    // Keys split between the two: TRYAGAIN.
    let mut mget = redis::cmd("MGET");
    mget.arg(moved).arg(stays);
    assert_eq!(error_of(&cluster, source, &mget).code(), Some("TRYAGAIN"));
    assert_eq!(cluster.primary_of_slot(slot), source, "the slot map changed before finish()");

    migration.move_keys();
    migration.finish();
    println!("slot {slot} migrated {source} -> {target} in {:?}", begun.elapsed());
    assert_eq!(cluster.primary_of_slot(slot), target);
    for key in [moved, stays] {
        let e = error_of(&cluster, source, &get(key));
        assert_eq!(e.code(), Some("MOVED"), "{e}");
        assert_eq!(e.redirect_node(), Some((format!("127.0.0.1:{target}").as_str(), slot)), "{e}");
        assert_eq!(cluster.conn_to(target).get_value(key), key);
    }

    // And back in one call.
    let begun = Instant::now();
    cluster.migrate_slot(slot, source);
    println!("migrate_slot back in {:?}", begun.elapsed());
    assert_eq!(cluster.conn_for_key(moved).get_value(moved), moved);
    assert_eq!(cluster.primary_of_key(stays), source);
}

#[test]
fn a_killed_primary_is_replaced_by_its_replica() {
    let mut cluster = RedisCluster::start();
    let key = "{failover}:k";
    let slot = cluster.keyslot(key);
    let primary = cluster.primary_of_slot(slot);
    let replica = cluster.slot_map().into_iter().find(|r| r.primary == primary).unwrap().replicas[0];
    let mut con = cluster.conn_to(primary);
    let _: () = redis::cmd("SET").arg(key).arg("before").query(&mut con).unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(1000).query(&mut con).unwrap();
    assert_eq!(acked, 1);

    let begun = Instant::now();
    assert_eq!(cluster.kill_primary_of_slot(slot), primary);
    assert!(cluster.try_conn_to(primary).is_err(), "the killed primary still answers");
    let promoted = cluster.wait_for_failover(slot, Duration::from_secs(20));
    let took = begun.elapsed();
    println!("failover of slot {slot} from {primary} to {promoted:?} in {took:?}");
    assert_eq!(promoted, Some(replica), "logs:\n{}", cluster.logs());
    assert_eq!(cluster.conn_for_key(key).get_value(key), "before");
    assert_eq!(cluster.primaries().len(), 3);

    let begun = Instant::now();
    cluster.restart_killed();
    println!("the killed node rejoined in {:?}", begun.elapsed());
    assert!(cluster.replica_links().contains(&(primary, replica)), "{:?}", cluster.replica_links());
}

#[test]
fn an_acl_cluster_refuses_a_wrong_password() {
    let begun = Instant::now();
    let mut cluster = ClusterOptions::new().acl_user("keyholder", "s3cret:pw").start();
    println!("ACL cluster ready in {:?}", begun.elapsed());
    let urls = cluster.seed_urls();
    assert!(urls.iter().all(|u| u.starts_with("redis://keyholder:s3cret%3Apw@127.0.0.1:")), "{urls:?}");
    let mut con = redis::Client::open(urls[0].as_str()).unwrap().get_connection().unwrap();
    let whoami: String = redis::cmd("ACL").arg("WHOAMI").query(&mut con).unwrap();
    assert_eq!(whoami, "keyholder");

    let port = cluster.ports()[0];
    let wrong = format!("redis://keyholder:wrong@127.0.0.1:{port}/");
    let e = redis::Client::open(wrong.as_str()).unwrap().get_connection().map(drop).unwrap_err();
    assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e}");
    // Without credentials: the default user is off.
    let anonymous = format!("redis://127.0.0.1:{port}/");
    let mut con = redis::Client::open(anonymous.as_str()).unwrap().get_connection().unwrap();
    let e = redis::cmd("GET").arg("k").query::<redis::Value>(&mut con).unwrap_err();
    assert_eq!(e.code(), Some("NOAUTH"), "{e}");

    // MIGRATE logs in to the target with the user (AUTH2).
    let key = "acl-key";
    let _: () = redis::cmd("SET").arg(key).arg("v").query(&mut cluster.conn_for_key(key)).unwrap();
    let (slot, from) = (cluster.keyslot(key), cluster.primary_of_key(key));
    let to = *cluster.primaries().iter().find(|p| **p != from).unwrap();
    cluster.migrate_slot(slot, to);
    assert_eq!(cluster.conn_to(to).get_value(key), "v");
}

#[cfg(feature = "tls")]
#[test]
fn a_tls_cluster_listens_for_tls_only() {
    use keyholder_testkit::ClientAuth;

    let begun = Instant::now();
    let mut cluster = ClusterOptions::new().tls(ClientAuth::Required).acl_user("default", "tls-pw").start();
    println!("TLS cluster ready in {:?}", begun.elapsed());
    let urls = cluster.seed_urls();
    assert!(urls.iter().all(|u| u.starts_with("rediss://default:tls-pw@127.0.0.1:")), "{urls:?}");
    let port = cluster.primary_of_key("tls-key");
    let mut con = cluster.conn_for_key("tls-key");
    let _: () = redis::cmd("SET").arg("tls-key").arg("v").query(&mut con).unwrap();

    // A TLS client with the CA and the client certificate is served.
    let file = |name: &str| cluster.tls_file(name).display().to_string();
    let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
    let cli = |extra: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "--user", "default", "-a", "tls-pw", "--no-auth-warning"])
            .args(extra)
            .args(["GET", "tls-key"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    assert_eq!(cli(&["--tls", "--cacert", &ca, "--cert", &cert, "--key", &key]), "v");
    // Without a client certificate, or without TLS, it is not.
    assert_ne!(cli(&["--tls", "--cacert", &ca]), "v");
    assert_ne!(cli(&[]), "v");

    // MIGRATE between TLS nodes (`tls-cluster`) moves the key.
    let slot = cluster.keyslot("tls-key");
    let to = *cluster.primaries().iter().find(|p| **p != port).unwrap();
    cluster.migrate_slot(slot, to);
    assert_eq!(cluster.conn_for_key("tls-key").get_value("tls-key"), "v");
    assert_eq!(cluster.primary_of_slot(slot), to);
}
