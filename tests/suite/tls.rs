//! `rediss://`: every connection of a client over TLS (the command pool and
//! the pub/sub connection), against redis-servers that listen for TLS only,
//! with certificates made at test time. Certificates either side refuses,
//! and settings wrong by themselves, fail `build()` with a typed error.
//! Needs the `tls` feature (`cargo test --features tls`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{RedisServer, exists, pttl, recv_within, spawn};
use keyholder::{Client, ClientBuilder, ErrorKind};
use keyholder_testkit::ClientAuth;
use keyholder_testkit::tls::TestCa;

const SECOND: Duration = Duration::from_secs(1);

/// A builder for a TLS server that trusts its CA and, when the server asks
/// for one, presents the client certificate its CA signed.
fn trusting(server: &RedisServer) -> ClientBuilder {
    let tls = server.tls();
    let builder = Client::builder(server.url())
        .connect_timeout(2 * SECOND)
        .command_timeout(2 * SECOND)
        .tls_ca_certificate(tls.ca.cert_pem());
    match tls.auth {
        ClientAuth::Required => {
            builder.tls_client_certificate(tls.client.cert.as_str(), tls.client.key.as_str())
        }
        ClientAuth::Off => builder,
    }
}

/// Names of the server's client connections.
fn connection_names(server: &RedisServer) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut server.conn()).unwrap();
    list.lines()
        .filter_map(|l| l.split(' ').find_map(|kv| kv.strip_prefix("name=")).map(str::to_owned))
        .collect()
}

/// Holds `name` with `holder`, has a thread of `waiter` wait for it, and
/// releases: the waiter must be woken by the unlock message (well before
/// the holder's 30 s lease), which reaches it over its pub/sub connection.
fn assert_woken_by_unlock_message(holder: &Client, waiter: &Client, name: &str) {
    let held = holder.lock(name).unwrap().lock().unwrap();
    let lock = waiter.lock(name).unwrap();
    let waiting =
        spawn(move || lock.try_lock_for(10 * SECOND).unwrap().map(|g| g.unlock().unwrap()).is_some());
    common::wait_subscribed(waiter, 1);
    let released = Instant::now();
    held.unlock().unwrap();
    assert!(recv_within(&waiting, 15 * SECOND, "the waiter over TLS"), "the waiter never got the lock");
    assert!(released.elapsed() < SECOND, "woken {:?} after the release: no wake-up", released.elapsed());
}

/// Lock, re-enter, wait and wake, release: the pool and the pub/sub
/// connection both speak TLS (the server has no plain port).
#[test]
fn locks_and_wake_ups_work_over_tls() {
    let server = RedisServer::start_tls(ClientAuth::Off);
    let holder = trusting(&server).build().unwrap();
    let waiter = trusting(&server).build().unwrap();
    let lock = holder.lock("over-tls").unwrap();
    {
        let _outer = lock.lock().unwrap();
        let _inner = lock.lock().unwrap();
        assert_eq!(lock.hold_count().unwrap(), 2);
    }
    assert!(!exists(&mut server.conn(), "over-tls"));
    assert_woken_by_unlock_message(&holder, &waiter, "over-tls");
    let pubsub = format!("keyholder:{}:pubsub", waiter.id());
    assert!(connection_names(&server).contains(&pubsub), "no pub/sub connection {pubsub} over TLS");
}

/// The watchdog renews over TLS: a hold outlives several watchdog timeouts.
#[test]
fn the_watchdog_renews_over_tls() {
    let server = RedisServer::start_tls(ClientAuth::Off);
    let client = trusting(&server).watchdog_timeout(Duration::from_millis(600)).build().unwrap();
    let guard = client.lock("renewed-over-tls").unwrap().lock().unwrap();
    // Time must pass here: three watchdog timeouts, renewed every 200 ms.
    std::thread::sleep(Duration::from_millis(1800));
    assert!(!guard.is_lost(), "the hold was lost: {:?}", guard.lost_reason());
    assert!(pttl(&mut server.conn(), "renewed-over-tls") > 0, "the lock expired: no renewal");
    guard.unlock().unwrap();
    assert!(!exists(&mut server.conn(), "renewed-over-tls"));
}

/// The removal alarms work over TLS (issue 35, item 4): the tracking
/// connection arms the key and carries the renewals, and a `DEL` is told
/// within 50 ms, after several silent renewals.
#[test]
fn a_removed_lock_is_told_over_tls() {
    let server = RedisServer::start_tls(ClientAuth::Required);
    let client = trusting(&server).watchdog_timeout(Duration::from_millis(600)).build().unwrap();
    let guard = client.spin_lock("removed-over-tls").unwrap().lock().unwrap();
    let lost = guard.lost_signal();
    let mut con = server.conn();
    assert!(
        common::eventually(5 * SECOND, || common::info_field(&mut con, "stats", "tracking_total_keys") >= 1),
        "never armed"
    );
    // The check that follows the arming read (one HSTRLEN: a spin lock
    // has no channel to confirm), then only renewals.
    assert!(common::eventually(5 * SECOND, || common::calls_of(&mut con, "hstrlen") >= 1), "never checked");
    let checks = common::calls_of(&mut con, "hstrlen");
    std::thread::sleep(Duration::from_millis(700)); // three renewals
    assert_eq!(common::calls_of(&mut con, "hstrlen"), checks, "the renewals were heard as removals");
    assert!(connection_names(&server).contains(&format!("keyholder:{}:tracking", client.id())));
    let _: i64 = redis::cmd("DEL").arg("removed-over-tls").query(&mut con).unwrap();
    let removed = Instant::now();
    assert_eq!(lost.recv_timeout(SECOND).ok(), Some(keyholder::LostReason::Gone), "not told");
    let after = removed.elapsed();
    println!("DEL over TLS: told {after:?} after the removal's reply");
    assert!(after < Duration::from_millis(50), "told {after:?} after the removal's reply");
}

/// Mutual TLS: a server that requires client certificates accepts the one
/// its CA signed, on every connection.
#[test]
fn mutual_tls_with_a_client_certificate() {
    let server = RedisServer::start_tls(ClientAuth::Required);
    let holder = trusting(&server).build().unwrap();
    let waiter = trusting(&server).build().unwrap();
    assert_woken_by_unlock_message(&holder, &waiter, "over-mtls");
}

/// A pub/sub connection killed while a thread waits reconnects over TLS
/// (with its client certificate), resubscribes, and the next unlock message
/// wakes the waiter.
#[test]
fn the_pubsub_connection_reconnects_over_tls() {
    let server = RedisServer::start_tls(ClientAuth::Required);
    let holder = trusting(&server).build().unwrap();
    let waiter = trusting(&server).build().unwrap();
    let held = holder.lock("reconnected").unwrap().lock().unwrap();
    let lock = waiter.lock("reconnected").unwrap();
    let waiting =
        spawn(move || lock.try_lock_for(20 * SECOND).unwrap().map(|g| g.unlock().unwrap()).is_some());
    let mut con = server.conn();
    let channel = common::channel_of("reconnected");
    // The waiter's client, and the holder's (it listens for a foreign unlock).
    common::wait_numsub(&mut con, &channel, 2);
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(&mut con).unwrap();
    assert_eq!(killed, 2, "the pub/sub connections were not killed");
    common::wait_numsub(&mut con, &channel, 2);
    let released = Instant::now();
    held.unlock().unwrap();
    assert!(
        recv_within(&waiting, 25 * SECOND, "the waiter after a reconnect"),
        "the waiter never got the lock"
    );
    assert!(released.elapsed() < SECOND, "woken {:?} after the release: no wake-up", released.elapsed());
}

/// A server certificate that the given CA did not sign is refused at
/// `build()`, saying so.
#[test]
fn a_server_certificate_of_another_ca_is_refused_at_build() {
    let server = RedisServer::start_tls(ClientAuth::Off);
    let stranger = TestCa::new("another CA");
    let err = Client::builder(server.url())
        .connect_timeout(2 * SECOND)
        .tls_ca_certificate(stranger.cert_pem())
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err:?}");
    assert!(err.is_tls());
    assert!(err.to_string().contains("does not trust redis's certificate"), "{err}");
}

/// A server that requires a client certificate refuses a client without
/// one, and `build()` says so.
#[test]
fn a_missing_client_certificate_is_refused_at_build() {
    let server = RedisServer::start_tls(ClientAuth::Required);
    let err = Client::builder(server.url())
        .connect_timeout(2 * SECOND)
        .tls_ca_certificate(server.tls().ca.cert_pem())
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err:?}");
    assert!(err.to_string().contains("client certificate"), "{err}");
}

/// A client certificate that the server's CA did not sign is refused too.
#[test]
fn a_client_certificate_of_another_ca_is_refused_at_build() {
    let server = RedisServer::start_tls(ClientAuth::Required);
    let stranger = TestCa::new("another CA").client();
    let err = Client::builder(server.url())
        .connect_timeout(2 * SECOND)
        .tls_ca_certificate(server.tls().ca.cert_pem())
        .tls_client_certificate(stranger.cert, stranger.key)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tls, "{err:?}");
}

/// TLS settings wrong by themselves are refused before any I/O (nothing
/// listens at the URL's port).
#[test]
fn tls_settings_wrong_by_themselves_are_invalid_config() {
    let nowhere = format!("rediss://127.0.0.1:{}/", common::free_port());
    let ca = TestCa::new("a CA");
    let client = ca.client();
    let other = ca.client();
    let trusting = || Client::builder(&nowhere).tls_ca_certificate(ca.cert_pem());
    let cases = [
        ("holds no certificate", Client::builder(&nowhere).tls_ca_certificate("not a certificate")),
        (
            "no usable private key",
            trusting().tls_client_certificate(client.cert.as_str(), "-----BEGIN PRIVATE KEY-----"),
        ),
        (
            "cannot be used together",
            trusting().tls_client_certificate(client.cert.as_str(), other.key.as_str()),
        ),
        (
            "without TLS",
            Client::builder(nowhere.replace("rediss", "redis")).tls_ca_certificate(ca.cert_pem()),
        ),
    ];
    for (what, builder) in cases {
        let (result, took) = common::timed(|| builder.build());
        let err = result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{what}: {err:?}");
        assert!(err.to_string().contains(what), "expected {what:?} in: {err}");
        assert!(took < SECOND, "{what}: took {took:?}");
    }
}

/// The tests-only opt-out: any certificate is accepted.
#[test]
fn danger_accept_invalid_certs_skips_the_checks() {
    let server = RedisServer::start_tls(ClientAuth::Off);
    let stranger = TestCa::new("another CA");
    let client = Client::builder(server.url())
        .tls_ca_certificate(stranger.cert_pem())
        .danger_accept_invalid_certs(true)
        .build()
        .unwrap();
    let waiter = Client::builder(format!("{}#insecure", server.url())).build().unwrap();
    assert_woken_by_unlock_message(&client, &waiter, "unchecked");
}

/// A server that accepts TCP and never answers the handshake costs at most
/// the connect timeout.
#[test]
fn a_silent_handshake_is_bounded_by_the_connect_timeout() {
    // Connections queue in the listener's backlog: accepted, never answered.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("rediss://127.0.0.1:{}/", silent.local_addr().unwrap().port());
    let ca = TestCa::new("a CA");
    let builder =
        Client::builder(url).connect_timeout(Duration::from_millis(300)).tls_ca_certificate(ca.cert_pem());
    let (result, took) = common::timed(|| builder.build());
    let err = result.unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    assert!(took < 2 * SECOND, "build() took {took:?} with a 300 ms connect timeout");
}
