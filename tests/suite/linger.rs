//! Lingering subscriptions (issue 35, item 1): a channel nobody waits on any
//! more is unsubscribed about [`LINGER`] after its last waiter (or hold)
//! left, whatever the command timeout; and a client whose waiter gave up,
//! lingering on the channel meanwhile, is never taken for a Redisson waiter
//! by the next release (which would take a foreign turn for nobody and
//! leave keyholder's keys behind the lock).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, channel_of, numsub, wait_numsub};

const SECOND: Duration = Duration::from_secs(1);
const MILLI: Duration = Duration::from_millis(1);
/// The documented linger (docs/reference/deployments.md, ADR 10).
const LINGER: Duration = Duration::from_millis(100);
/// What a scheduler on a loaded machine may add to it (the UNSUBSCRIBE's
/// round trip, this test's polling).
const SCHEDULING: Duration = Duration::from_millis(150);

/// keyholder's listening channel of lock `name` (see `src/names.rs`): its
/// clients subscribe and unsubscribe it with the unlock channel.
fn listening_of(name: &str) -> String {
    format!("keyholder_lock__listening:{{{name}}}")
}

/// How long after `since` `PUBSUB NUMSUB channel` fell to `n`, polled every
/// 2 ms for at most 10 s; `None` if it never did.
fn numsub_falls_to(con: &mut redis::Connection, channel: &str, n: i64, since: Instant) -> Option<Duration> {
    while since.elapsed() < Duration::from_secs(10) {
        if numsub(con, channel) <= n {
            return Some(since.elapsed());
        }
        std::thread::sleep(2 * MILLI);
    }
    None
}

/// A Redisson (Java) holder of `name`: its hash and a 30 s lease, written
/// directly, so that no keyholder client listens for it.
fn hold_as_java(con: &mut redis::Connection, name: &str) {
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(name)
        .arg("6f1c3c1e-0000-4000-8000-00000000java:1")
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg(name)
        .arg(30_000)
        .ignore()
        .query(con)
        .unwrap();
}

/// The `try_lock_for(300 ms)` of the issue, which gave up and stayed
/// subscribed for 2.77 s with a 3 s command timeout (1.2 s with 1.5 s):
/// the reader timed the linger with a read timeout shortened while it was
/// already blocked in `recv`, which Linux reads when `recv` starts. And a
/// held lock's channel (listened on for a foreign unlock) after its
/// release, the same linger.
#[test]
fn an_unused_channel_is_unsubscribed_a_linger_later_whatever_the_command_timeout() {
    let server = RedisServer::start();
    let mut con = server.conn();
    for command_timeout in [Duration::from_millis(1500), Duration::from_secs(5)] {
        let client = server.builder().command_timeout(command_timeout).build().unwrap();
        let ms = command_timeout.as_millis();

        let waited_for = format!("linger-wait-{ms}");
        hold_as_java(&mut con, &waited_for);
        let lock = client.lock(&waited_for).unwrap();
        assert!(lock.try_lock_for(300 * MILLI).unwrap().is_none());
        let gave_up = Instant::now();
        let after = numsub_falls_to(&mut con, &channel_of(&waited_for), 0, gave_up);
        eprintln!("command timeout {command_timeout:?}: unsubscribed {after:?} after the waiter gave up");
        let after = after.expect("never unsubscribed");
        assert!(after <= LINGER + SCHEDULING, "unsubscribed {after:?} after the waiter gave up");
        // The listening channel goes in the same UNSUBSCRIBE.
        assert_eq!(numsub(&mut con, &listening_of(&waited_for)), 0, "the listening channel stayed");

        // A hold old enough to be listened on (20 ms), then released.
        let held = format!("linger-held-{ms}");
        let guard = client.lock(&held).unwrap().lock().unwrap();
        wait_numsub(&mut con, &channel_of(&held), 1);
        assert_eq!(numsub(&mut con, &listening_of(&held)), 1, "subscribed without the listening channel");
        guard.unlock().unwrap();
        let released = Instant::now();
        let after = numsub_falls_to(&mut con, &channel_of(&held), 0, released);
        eprintln!("command timeout {command_timeout:?}: unsubscribed {after:?} after the release");
        let after = after.expect("never unsubscribed");
        assert!(after <= LINGER + SCHEDULING, "unsubscribed {after:?} after the release");
        assert_eq!(numsub(&mut con, &listening_of(&held)), 0, "the listening channel stayed");
    }
}

/// Every key keyholder keeps for `name` (queue, grants, marker). There is
/// no key of the keyholder clients listening on the unlock channel: each
/// listens on keyholder's listening channel `keyholder_lock__listening:{name}`
/// too (a channel, no key), and releases count the Redisson waiters as the
/// unlock channel's listeners less the listening channel's.
fn own_keys(con: &mut redis::Connection, name: &str) -> Vec<String> {
    let mut keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("keyholder_lock_*{{{name}}}*")).query(con).unwrap();
    keys.sort();
    keys
}

/// A waiter that gave up left the queue but still listens on the unlock
/// channel for its linger: the holder's release must not count it as a
/// Redisson waiter (an older count did, took turns with it and left
/// `~turns` in `keyholder_lock_grants:{x}` for a second after the last
/// release: for each of 25 names a waiter gave up on, 25 keys). Its client
/// listens on keyholder's listening channel too, so the count (`PUBSUB
/// NUMSUB` of the unlock channel less that of the listening channel) leaves
/// it out, and nothing is recorded for it. The same with another keyholder
/// client queued behind, which gets the lock and releases last.
#[test]
fn a_waiter_that_gave_up_is_no_redisson_waiter_to_the_next_release() {
    const NAMES: [&str; 3] = ["gave-up-a", "gave-up-b", "gave-up-c"];
    let server = RedisServer::start();
    let mut con = server.conn();
    let (holder, quitter, patient) = (server.client(), server.client(), server.client());
    for (i, name) in NAMES.into_iter().enumerate() {
        let guard = holder.lock(name).unwrap().lock().unwrap();
        // The holder's client listens on the channel too (the hold is 20 ms
        // old), and on the listening channel: no Redisson waiter either.
        wait_numsub(&mut con, &channel_of(name), 1);
        assert!(quitter.lock(name).unwrap().try_lock_for(200 * MILLI).unwrap().is_none());
        let waiter = (i == 2).then(|| {
            let lock = patient.lock(name).unwrap();
            let waiter = common::spawn(move || lock.lock().unwrap().unlock().is_ok());
            let queue = format!("keyholder_lock_queue:{{{name}}}");
            assert!(common::eventually(5 * SECOND, || {
                redis::cmd("ZCARD").arg(&queue).query::<i64>(&mut con).unwrap() == 1
            }));
            waiter
        });
        // Released while the quitter's client still lingers on the channel.
        guard.unlock().unwrap();
        let mut released = Instant::now();
        if let Some(waiter) = waiter {
            assert!(common::recv_within(&waiter, 10 * SECOND, "the patient waiter"));
            released = Instant::now();
        }
        let wait = (released + 150 * MILLI).saturating_duration_since(Instant::now());
        std::thread::sleep(wait);
        assert_eq!(
            own_keys(&mut con, name),
            Vec::<String>::new(),
            "{name}: keyholder keys outlived the lock"
        );
    }
}

/// A release that serves nobody leaves its client listening for its linger
/// (its hold was old enough to be listened on): a queue that forms within
/// that linger (another client takes the lock, a third queues) must not
/// take the lingering client for a Redisson waiter, which took a foreign
/// turn for nobody and left `keyholder_lock_grants:{x}` for a second. The
/// lingering client listens on the listening channel too, so the release
/// does not count it, with nothing recorded for it. (Slower than the
/// linger, the test proves nothing, and says so.)
#[test]
fn a_releaser_still_lingering_is_no_redisson_waiter_to_a_queue_formed_after_it() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (first, second, third) = (server.client(), server.client(), server.client());
    let name = "lingering-releaser";
    let guard = first.lock(name).unwrap().lock().unwrap();
    // The first client listens on the channel (the hold is 20 ms old).
    wait_numsub(&mut con, &channel_of(name), 1);
    guard.unlock().unwrap();
    let released = Instant::now();
    let taken = second.lock(name).unwrap().lock().unwrap();
    let lock = third.lock(name).unwrap();
    let waiter = common::spawn(move || lock.lock().unwrap().unlock().is_ok());
    let queue = format!("keyholder_lock_queue:{{{name}}}");
    assert!(common::eventually(5 * SECOND, || {
        redis::cmd("ZCARD").arg(&queue).query::<i64>(&mut con).unwrap() == 1
    }));
    let queued_after = released.elapsed();
    taken.unlock().unwrap();
    assert!(common::recv_within(&waiter, 10 * SECOND, "the queued waiter"));
    let last = Instant::now();
    eprintln!("queued {queued_after:?} after the first release (its client lingers {LINGER:?})");
    std::thread::sleep((last + 150 * MILLI).saturating_duration_since(Instant::now()));
    assert_eq!(own_keys(&mut con, name), Vec::<String>::new(), "keyholder keys outlived the lock");
}
