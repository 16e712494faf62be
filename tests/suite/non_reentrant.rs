//! The non-reentrant locks (Redisson 4.4's `RedissonNonReentrantLock` and
//! `RedissonNonReentrantFairLock`) against a real Redis: a holder's second
//! acquire refused with nothing changed, other callers waiting and woken as
//! the reentrant kinds' are, the layout shared with `Lock`, `FairLock` and
//! Java, tokens refused the same way.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::redisson_lock::{self, RedissonClient};

use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, calls_of, exists, hgetall, recv_within, spawn};
use keyholder::{ErrorKind, OwnerToken};

const SECOND: Duration = Duration::from_secs(1);

/// Redisson 4.4's `RedissonNonReentrantLock` acquire (`redisson-wire.md`
/// section 4.6): nil when acquired, an error reply `ARGV[3]` when the owner
/// holds it already, else the PTTL.
const JAVA_NON_REENTRANT_ACQUIRE: &str = r"
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply(ARGV[3])
end
return redis.call('pttl', KEYS[1])
";

fn java_acquire(con: &mut redis::Connection, name: &str, owner: &str) -> redis::RedisResult<Option<i64>> {
    redis::Script::new(JAVA_NON_REENTRANT_ACQUIRE)
        .key(name)
        .arg(redisson_lock::LEASE_MS)
        .arg(owner)
        .arg("NON_REENTRANT_REACQUIRE")
        .invoke(con)
}

#[test]
fn a_holders_second_acquire_is_refused_before_any_io_and_its_hold_stays() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let lock = client.non_reentrant_lock("once").unwrap();
    let guard = lock.lock().unwrap();
    let acquires = |con: &mut redis::Connection| calls_of(con, "evalsha") + calls_of(con, "hexists");
    let before = acquires(&mut con);
    for second in [
        lock.try_lock().map(|g| g.is_some()),
        lock.try_lock_for(SECOND).map(|g| g.is_some()),
        lock.lock().map(|_| true),
    ] {
        let e = second.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AlreadyHeld);
        assert!(e.is_already_held() && e.lock_name() == Some("once"), "{e}");
    }
    // Nothing was sent for the refusals: no script, no lookup.
    assert_eq!(acquires(&mut con), before, "the three refusals sent nothing");
    // Redisson's data: the owner's count is 1, never more.
    assert_eq!(hgetall(&mut con, "once").get(guard.owner_id()).map(String::as_str), Some("1"));
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
    assert!(!exists(&mut con, "once"));
    // Released, the thread takes it again as a new hold.
    lock.try_lock().unwrap().expect("free again").unlock().unwrap();
}

#[test]
fn a_thread_holding_the_name_as_a_reentrant_lock_is_refused_and_another_thread_waits() {
    let server = RedisServer::start();
    let client = server.client();
    let reentrant = client.lock("shared").unwrap();
    let held = reentrant.lock().unwrap();
    // The same hash, the same owner: this thread holds it already.
    let once = client.non_reentrant_lock("shared").unwrap();
    assert!(once.try_lock().unwrap_err().is_already_held());
    // Another thread is an ordinary contender: it waits, and the release
    // wakes it long before the 30 s lease would have run out.
    let waiter = {
        let once = once.clone();
        spawn(move || {
            let start = Instant::now();
            let guard = once.lock().unwrap();
            let waited = start.elapsed();
            guard.unlock().unwrap();
            waited
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    drop(held);
    let waited = recv_within(&waiter, 10 * SECOND, "the waiting thread");
    assert!(waited >= Duration::from_millis(250), "it waited for the holder: {waited:?}");
}

#[test]
fn a_java_holder_excludes_keyholder_and_a_keyholder_release_wakes_a_java_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let lock = client.non_reentrant_lock("mixed").unwrap();

    // Java's acquire: its own second acquire is an error reply, nothing changed.
    let java_owner = "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d:1";
    assert_eq!(java_acquire(&mut con, "mixed", java_owner).unwrap(), None);
    let again = java_acquire(&mut con, "mixed", java_owner).unwrap_err();
    assert!(again.to_string().contains("NON_REENTRANT_REACQUIRE"), "{again}");
    assert_eq!(hgetall(&mut con, "mixed").get(java_owner).map(String::as_str), Some("1"));
    // keyholder waits for the Java holder.
    assert!(lock.try_lock_for(Duration::from_millis(100)).unwrap().is_none());
    redis::cmd("DEL").arg("mixed").query::<()>(&mut con).unwrap();

    // keyholder holds: Java's acquire gets the PTTL; a Java waiter (Redisson's
    // lock loop, woken by unlock messages) takes it when keyholder releases.
    let guard = lock.lock().unwrap();
    let pttl = java_acquire(&mut con, "mixed", java_owner).unwrap().expect("held: a PTTL");
    assert!(pttl > 20_000, "the watchdog lease: {pttl}");
    let java = spawn({
        let url = server.url();
        move || {
            let mut java = RedissonClient::connect(&url, "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d");
            let start = Instant::now();
            let acquired = java.lock("mixed", 2, Instant::now() + 10 * SECOND);
            let waited = start.elapsed();
            java.unlock("mixed", 2);
            (acquired, waited)
        }
    });
    std::thread::sleep(Duration::from_millis(400));
    guard.unlock().unwrap();
    let (acquired, waited) = recv_within(&java, 15 * SECOND, "the Java waiter");
    assert!(acquired, "the Java waiter took the lock");
    assert!(waited < 5 * SECOND, "woken by the release, not by the lease: {waited:?}");
}

#[test]
fn a_token_that_holds_the_lock_is_refused_here_and_once_released_takes_it() {
    let server = RedisServer::start();
    let (client, other) = (server.client(), server.client());
    let mut con = server.conn();
    let lock = client.non_reentrant_lock("tok").unwrap();
    let guard = lock.lock_owned().unwrap();
    let token: OwnerToken = guard.token();
    // Presented again, at this client or another one: refused, count 1.
    assert!(lock.try_lock_with(&token).unwrap_err().is_already_held());
    let elsewhere = other.non_reentrant_lock("tok").unwrap();
    assert!(elsewhere.lock_with(&token).unwrap_err().is_already_held());
    assert_eq!(hgetall(&mut con, "tok").get(token.as_str()).map(String::as_str), Some("1"));
    // Released from another thread (a token's guard is Send).
    spawn(move || guard.unlock().unwrap()).recv_timeout(5 * SECOND).unwrap();
    assert!(!exists(&mut con, "tok"));
    elsewhere.try_lock_with(&token).unwrap().expect("free: the token takes it").unlock().unwrap();
}

#[test]
fn the_fair_twin_refuses_its_holder_without_queueing_and_serves_others_in_order() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let lock = client.non_reentrant_fair_lock("fair-once").unwrap();
    let guard = lock.lock().unwrap();
    assert!(lock.try_lock_for(SECOND).unwrap_err().is_already_held());
    assert_eq!(lock.queue_len().unwrap(), 0, "the refused holder never queued");
    assert_eq!(hgetall(&mut con, "fair-once").get(guard.owner_id()).map(String::as_str), Some("1"));

    // Two waiters of another client queue in arrival order and are served so.
    let other = server.client();
    let (first, second) = (other.non_reentrant_fair_lock("fair-once").unwrap(), other.clone());
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let waiter = |lock: keyholder::NonReentrantFairLock, tag: u8| {
        let order = std::sync::Arc::clone(&order);
        spawn(move || {
            let guard = lock.lock().unwrap();
            order.lock().unwrap().push(tag);
            std::thread::sleep(Duration::from_millis(50));
            guard.unlock().unwrap();
        })
    };
    let a = waiter(first, 1);
    assert!(common::eventually(5 * SECOND, || lock.queue_len().unwrap() == 1));
    let b = waiter(second.non_reentrant_fair_lock("fair-once").unwrap(), 2);
    assert!(common::eventually(5 * SECOND, || lock.queue_len().unwrap() == 2));
    guard.unlock().unwrap();
    recv_within(&a, 10 * SECOND, "the first waiter");
    recv_within(&b, 10 * SECOND, "the second waiter");
    assert_eq!(*order.lock().unwrap(), [1, 2]);
    assert!(!exists(&mut con, "fair-once"));
}

#[test]
fn bad_names_are_refused_and_the_handles_say_what_they_are() {
    let server = RedisServer::start();
    let client = server.client();
    assert_eq!(client.non_reentrant_lock("").unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(client.non_reentrant_fair_lock("").unwrap_err().kind(), ErrorKind::InvalidArgument);
    let lock = client.non_reentrant_lock("dbg").unwrap();
    assert!(format!("{lock:?}").starts_with("NonReentrantLock"), "{lock:?}");
    let fair = client.non_reentrant_fair_lock("dbg2").unwrap();
    assert!(format!("{fair:?}").starts_with("NonReentrantFairLock"), "{fair:?}");
    let guard = fair.lock().unwrap();
    assert!(format!("{guard:?}").contains("NonReentrantFairLockGuard"), "{guard:?}");
    assert!(fair.with_wait_timeout(Duration::from_millis(1)).is_err());
    assert_eq!(fair.with_wait_timeout(SECOND).unwrap().wait_timeout(), SECOND);
}
