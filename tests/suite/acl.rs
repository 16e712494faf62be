//! ACL users: a client logs in as the user its URL names, over TCP and over
//! a Unix socket, for its command connections and its pub/sub connection
//! alike; and a user that may not do what keyholder needs (run its scripts,
//! subscribe to its channels) is refused at `build()` with
//! `ErrorKind::AccessDenied` that says what is missing, not at the first
//! lock call or the first wait.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, recv_within, spawn};
use keyholder::{Client, ErrorKind};

const SECOND: Duration = Duration::from_secs(1);

/// Creates (or resets) the ACL user `name` with password `pw` and `rules`
/// (also the doctor's tests').
pub(crate) fn set_user(con: &mut redis::Connection, name: &str, rules: &[&str]) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(name).arg("reset").arg("on").arg(">pw");
    for rule in rules {
        cmd.arg(*rule);
    }
    let _: () = cmd.query(con).unwrap();
}

fn builder(url: String) -> keyholder::ClientBuilder {
    Client::builder(url).connect_timeout(2 * SECOND).command_timeout(2 * SECOND)
}

/// The users of the connections named after `client` in `CLIENT LIST`.
fn users_of(con: &mut redis::Connection, client: &Client) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(con).unwrap();
    let name = format!("name=keyholder:{}", client.id());
    list.lines()
        .filter(|line| line.split(' ').any(|field| field.starts_with(&name)))
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("user=")).map(str::to_owned))
        .collect()
}

/// Locks, waits for a lock held by another client and is woken by its
/// release: every path a lock takes through its connections.
fn lock_wait_and_wake(waiter: &Client, holder: &Client, name: &str) {
    let held = holder.lock(name).unwrap().lock().unwrap();
    let lock = waiter.lock(name).unwrap();
    let waiting = spawn(move || lock.try_lock_for(10 * SECOND).map(|guard| guard.is_some()));
    common::wait_subscribed(waiter, 1);
    let released = Instant::now();
    held.unlock().unwrap();
    let got = recv_within(&waiting, 15 * SECOND, "waiter logged in as an ACL user");
    assert!(got.unwrap(), "the waiter never got the lock");
    assert!(released.elapsed() < SECOND, "woken {:?} after the release: no wake-up", released.elapsed());
}

#[test]
fn an_acl_user_locks_waits_and_is_woken_over_tcp_and_a_unix_socket() {
    let server = RedisServer::start();
    let mut con = server.conn();
    // A typical application user: every key and channel, nothing
    // dangerous or administrative.
    set_user(&mut con, "locks", &["~*", "&*", "+@all", "-@dangerous", "-@admin"]);
    let tcp = builder(format!("redis://locks:pw@127.0.0.1:{}/", server.port())).build().unwrap();
    let unix_url = format!("redis+unix://{}?user=locks&pass=pw", server.socket().display());
    let unix = builder(unix_url).build().unwrap();
    lock_wait_and_wake(&tcp, &unix, "acl:tcp-waits");
    lock_wait_and_wake(&unix, &tcp, "acl:unix-waits");
    for client in [&tcp, &unix] {
        let users = users_of(&mut con, client);
        assert!(users.len() >= 2, "expected command and pub/sub connections, saw {users:?}");
        assert!(users.iter().all(|user| user == "locks"), "connections logged in as {users:?}");
    }
}

#[test]
fn a_user_who_may_not_run_scripts_is_refused_at_build() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let url = format!("redis://noscripts:pw@127.0.0.1:{}/", server.port());
    for denied in ["evalsha", "eval"] {
        set_user(&mut con, "noscripts", &["~*", "&*", "+@all", &format!("-{denied}")]);
        let err = builder(url.clone()).build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AccessDenied, "{err:?}");
        assert!(err.to_string().contains(&denied.to_uppercase()), "does not name {denied}: {err}");
    }
}

#[test]
fn a_user_who_may_not_subscribe_to_keyholders_channels_is_refused_at_build() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let url = format!("redis://nochannels:pw@127.0.0.1:{}/", server.port());
    // Channels elsewhere only, then no SUBSCRIBE at all.
    for rules in [&["~*", "resetchannels", "&elsewhere:*", "+@all"][..], &["~*", "&*", "+@all", "-subscribe"]]
    {
        set_user(&mut con, "nochannels", rules);
        let err = builder(url.clone()).build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AccessDenied, "{rules:?}: {err:?}");
        assert!(err.to_string().contains("subscribe"), "{rules:?}: {err}");
    }
    // Allowed the channels keyholder uses, the same user builds.
    set_user(
        &mut con,
        "nochannels",
        &["~*", "resetchannels", "&redisson_lock__channel:*", "&keyholder_lock__wake:*", "+@all"],
    );
    let client = builder(url).build().unwrap();
    client.lock("acl:channels").unwrap().lock().unwrap().unlock().unwrap();
}
