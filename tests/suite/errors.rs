//! Errors that say what went wrong (issue 25): `build()` against a closed
//! port, a server that accepts and never answers, an HTTP server, TLS on
//! one side only, and URLs that do not parse. Each names the address it
//! tried and says what happened, once, with the right kind, and fast where
//! it can be (a refusal, a mismatch) rather than at the connect timeout.
//! The silent and HTTP servers are listeners inside the test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::error::Error as _;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use common::{RedisServer, free_port, recv_within, spawn};
use keyholder::{Client, Error, ErrorKind};

const SECOND: Duration = Duration::from_secs(1);

/// Builds a client of `url` with a connect timeout of `timeout`: its
/// error, and how long `build()` took.
fn build_error_within(url: &str, timeout: Duration) -> (Error, Duration) {
    let (result, took) =
        common::timed(|| Client::builder(url).connect_timeout(timeout).command_timeout(timeout).build());
    (result.err().unwrap_or_else(|| panic!("{url} built a client")), took)
}

/// Builds a client of `url` with a 5 s connect timeout, which every
/// failure but a silent server's must beat by far: its error, and how long
/// `build()` took.
fn build_error(url: &str) -> (Error, Duration) {
    build_error_within(url, 5 * SECOND)
}

/// The error and every cause under it, as a report that walks the chain
/// prints them.
fn chain(e: &Error) -> Vec<String> {
    let mut texts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(cause) = source {
        texts.push(cause.to_string());
        source = cause.source();
    }
    texts
}

/// Checks what every failure to reach a server shares: its kind, the
/// address in `Display` and in `address()`, and no cause said twice.
fn assert_names(e: &Error, kind: ErrorKind, address: &str, says: &str) {
    assert_eq!(e.kind(), kind, "{e:?}");
    assert_eq!(e.address(), Some(address), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(address) && text.contains(says), "expected {address} and {says:?} in: {text}");
    assert!(format!("{e:?}").contains(address), "Debug hides the address: {e:?}");
    let chain = chain(e);
    for (i, cause) in chain.iter().enumerate().skip(1) {
        assert!(!chain[..i].iter().any(|said| said.contains(cause.as_str())), "said twice: {chain:?}");
    }
}

#[test]
fn a_closed_port_is_refused_at_once_naming_the_address() {
    let address = format!("127.0.0.1:{}", free_port());
    let (e, took) = build_error(&format!("redis://{address}/"));
    assert_names(&e, ErrorKind::Connection, &address, "connection refused");
    assert!(e.is_connection_error());
    assert!(took < 2 * SECOND, "a refusal took {took:?}");
}

#[test]
fn a_server_that_never_answers_times_out_after_the_connect_timeout() {
    // Connections queue in the listener's backlog: accepted, never answered.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap().to_string();
    let (e, took) = build_error_within(&format!("redis://{address}/"), 2 * SECOND);
    assert_names(&e, ErrorKind::Connection, &address, "timed out after 2 s (the connect timeout)");
    assert!(!e.to_string().contains("os error"), "{e}");
    assert!(took >= 2 * SECOND && took < 4 * SECOND, "took {took:?}");
}

#[test]
fn an_http_server_does_not_speak_redis() {
    let http = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = http.local_addr().unwrap().to_string();
    let server = spawn(move || {
        // Answers the one connection `build()` makes as an HTTP server
        // answers a stranger.
        let (mut conn, _) = http.accept().unwrap();
        conn.set_read_timeout(Some(SECOND)).unwrap();
        let _ = conn.read(&mut [0; 512]);
        let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    });
    let (e, took) = build_error(&format!("redis://{address}/"));
    assert_names(&e, ErrorKind::NotRedis, &address, "does not speak Redis");
    assert!(e.is_not_redis() && !e.is_connection_error());
    assert!(e.to_string().contains("HTTP/1.1 400 Bad Request"), "{e}");
    assert!(took < 2 * SECOND, "took {took:?}");
    recv_within(&server, 5 * SECOND, "the HTTP server");
}

#[test]
fn a_host_name_that_does_not_resolve_says_so() {
    let (e, _) = build_error("redis://no-such-host.invalid:6379/");
    assert_names(&e, ErrorKind::Connection, "no-such-host.invalid:6379", "did not resolve");
}

/// `rediss://` to a plain port: the TLS hello gets no answer, and the
/// port, asked, answers PING in plain RESP: said within about a second,
/// not at the connect timeout.
#[cfg(feature = "tls")]
#[test]
fn rediss_to_a_plain_port_says_the_port_speaks_plain_redis() {
    let server = RedisServer::start();
    let address = format!("127.0.0.1:{}", server.port());
    let (e, took) = build_error(&format!("rediss://{address}/#insecure"));
    assert_names(&e, ErrorKind::Tls, &address, "speaks plain Redis");
    assert!(e.to_string().contains("redis://"), "{e}");
    assert!(took < 2 * SECOND, "took {took:?}");
}

/// `redis://` to a TLS-only port: the server resets the connection
/// without a byte, and the port, asked, answers a TLS hello.
#[cfg(feature = "tls")]
#[test]
fn redis_to_a_tls_port_says_the_port_speaks_tls() {
    let server = RedisServer::start_tls(keyholder_testkit::ClientAuth::Off);
    let address = format!("127.0.0.1:{}", server.port());
    let (e, took) = build_error(&format!("redis://{address}/"));
    assert_names(&e, ErrorKind::Tls, &address, "speaks TLS");
    assert!(e.to_string().contains("rediss://"), "{e}");
    assert!(took < 2 * SECOND, "took {took:?}");
}

/// A URL that does not parse says what is wrong with it, before any I/O.
#[test]
fn bad_urls_say_what_is_wrong() {
    let cases = [
        ("", "empty"),
        ("not a url", "redis://"),
        ("http://127.0.0.1:6379", "scheme"),
        ("redis://127.0.0.1:99999", "port"),
    ];
    for (url, says) in cases {
        let (result, took) = common::timed(|| Client::builder(url).build());
        let e = result.err().unwrap_or_else(|| panic!("{url:?} built a client"));
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url:?}: {e:?}");
        let text = e.to_string();
        assert!(text.contains(says), "{url:?}: expected {says:?} in: {text}");
        assert!(!text.contains("InvalidClientConfig"), "{url:?}: {text}");
        assert!(took < 2 * SECOND, "{url:?}: took {took:?}");
    }
}

/// A call that finds the server gone names it too: the connection it had
/// (reset or closed) or the one it tried to open (refused).
#[test]
fn a_server_gone_later_is_named_by_the_calls_that_find_it_gone() {
    let mut server = RedisServer::start();
    let address = format!("127.0.0.1:{}", server.port());
    let client =
        Client::builder(server.url()).connect_timeout(SECOND).command_timeout(SECOND).build().unwrap();
    let lock = client.lock("named").unwrap();
    drop(lock.lock().unwrap());
    server.stop();
    let e = lock.try_lock().unwrap_err();
    assert_names(&e, ErrorKind::Connection, &address, "redis at");
    assert!(e.is_connection_error());
}

/// Through Sentinel and to a Redis Cluster, the error names the sentinels
/// and the cluster node tried.
#[test]
fn sentinels_and_cluster_nodes_are_named() {
    let sentinel = format!("127.0.0.1:{}", free_port());
    let (result, took) = common::timed(|| {
        Client::builder_sentinel([format!("redis://{sentinel}")], "orders")
            .connect_timeout(5 * SECOND)
            .build()
    });
    let e = result.err().unwrap();
    assert_names(&e, ErrorKind::Connection, &sentinel, "the sentinels at");
    assert!(
        e.to_string().contains("cannot connect to the sentinel at") && e.to_string().contains("refused"),
        "{e}"
    );
    assert!(took < 2 * SECOND, "took {took:?}");

    let node = format!("127.0.0.1:{}", free_port());
    let e = Client::builder_cluster([format!("redis://{node}")])
        .connect_timeout(5 * SECOND)
        .build()
        .err()
        .unwrap();
    assert_names(&e, ErrorKind::Connection, &node, "cannot connect to the cluster node at");
}
