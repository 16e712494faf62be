//! Holds owned by a token, not a thread (issue 26 item 1): taken on one
//! thread and released on another, re-entered with the token, renewed by
//! the watchdog, resumed by another client (another process of the
//! deployment), refused to stale tokens, on Redisson's layout, and
//! exclusive with thread holds of the same lock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, exists, hgetall, pttl, recv_within, spawn};
use keyholder::{ErrorKind, OwnedLockGuard, OwnerToken};

use crate::redisson_lock::RedissonClient;

const SECOND: Duration = Duration::from_secs(1);

/// A private server, a client of it, a raw connection, and a handle to the
/// lock `name`.
fn on_server(name: &str) -> (RedisServer, keyholder::Client, redis::Connection, keyholder::Lock) {
    let server = RedisServer::start();
    let client = server.client();
    let con = server.conn();
    let lock = client.lock(name).unwrap();
    (server, client, con, lock)
}

/// The count of `owner`'s field in the lock hash `name`.
fn count_of(con: &mut redis::Connection, name: &str, owner: &str) -> Option<String> {
    hgetall(con, name).get(owner).cloned()
}

/// The number of a `<uuid>:<number>` owner field.
fn number_of(owner: &str) -> u64 {
    owner.rsplit_once(':').expect("a colon").1.parse().expect("a number")
}

/// The guard may move to, and be shared with, other threads.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<OwnedLockGuard>();
};

#[test]
fn a_hold_taken_on_one_thread_is_released_on_another() {
    let (_server, client, mut con, lock) = on_server("moved");
    let guard = lock.lock_owned().unwrap();
    assert!(lock.is_locked().unwrap());
    let released = spawn(move || guard.unlock());
    recv_within(&released, 5 * SECOND, "the release on the pool thread").unwrap();
    assert!(!exists(&mut con, "moved"), "the release on another thread deleted the key");
    assert_eq!(client.watched_locks(), 0, "no renewal after the release");
    // The lock is free for anyone, a thread of this client too.
    assert!(lock.try_lock().unwrap().is_some());
}

#[test]
fn a_dropped_guard_releases_wherever_it_is_dropped() {
    let (_server, _client, mut con, lock) = on_server("dropped");
    let guard = lock.try_lock_owned().unwrap().expect("a free lock");
    recv_within(&spawn(move || drop(guard)), 5 * SECOND, "the drop on another thread");
    assert!(!exists(&mut con, "dropped"));
}

#[test]
fn whoever_presents_the_token_re_enters_and_each_guard_releases_one_count() {
    let (_server, client, mut con, lock) = on_server("reentered");
    let first = lock.lock_owned().unwrap();
    let token = first.token();
    let owner = token.to_string();
    // Another thread re-enters at once: it never queues behind the hold.
    let again = {
        let (lock, token) = (lock.clone(), token.clone());
        recv_within(&spawn(move || lock.try_lock_with(&token)), 5 * SECOND, "the re-entry")
            .unwrap()
            .expect("a re-entry never waits")
    };
    assert_eq!(again.token(), token);
    assert_eq!(count_of(&mut con, "reentered", &owner).as_deref(), Some("2"));
    assert_eq!(client.watched_locks(), 1, "one hold, however deep");
    first.unlock().unwrap();
    assert_eq!(count_of(&mut con, "reentered", &owner).as_deref(), Some("1"));
    drop(again);
    assert!(!exists(&mut con, "reentered"));
}

#[test]
fn a_token_of_the_user_takes_a_free_lock_and_a_thread_is_not_its_owner() {
    let (_server, _client, mut con, lock) = on_server("chosen");
    let token: OwnerToken = "0b6f5a36-3b1e-4d55-9a4f-6c2d1e0f9a11:5000000000000000000".parse().unwrap();
    let guard = lock.lock_with(&token).unwrap();
    assert_eq!(guard.owner_id(), token.as_str());
    assert_eq!(count_of(&mut con, "chosen", token.as_str()).as_deref(), Some("1"));
    // The thread that took it holds nothing as a thread.
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert!(lock.try_lock().unwrap().is_none(), "a thread hold is another owner");
    drop(guard);
    assert!(!exists(&mut con, "chosen"));
}

#[test]
fn the_watchdog_renews_a_token_hold_past_several_leases() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(300);
    let client = server.builder().watchdog_timeout(watchdog).build().unwrap();
    let mut con = server.conn();
    let lock = client.lock("renewed").unwrap();
    let guard = recv_within(&spawn(move || lock.lock_owned()), 5 * SECOND, "the lock").unwrap();
    // Four leases, on a thread that is not the one that took it.
    let held_until = Instant::now() + watchdog * 4;
    while Instant::now() < held_until {
        assert!(exists(&mut con, "renewed"), "the lock expired while its guard lived");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!guard.is_lost());
    assert!(pttl(&mut con, "renewed") > 0);
    guard.unlock().unwrap();
}

#[test]
fn another_client_resumes_the_token_from_its_string_and_releases_it() {
    let server = RedisServer::start();
    let (here, there) = (server.client(), server.client());
    let mut con = server.conn();
    let guard = here.lock("resumed").unwrap().lock_owned().unwrap();
    let carried = guard.token().to_string();

    // Another process of the deployment, given the string.
    let token: OwnerToken = carried.parse().unwrap();
    let resumed = there.lock("resumed").unwrap().resume(&token).unwrap();
    assert_eq!(resumed.token(), guard.token());
    assert_eq!(there.watched_locks(), 1, "the resuming client renews it too");
    resumed.unlock().unwrap();
    assert!(!exists(&mut con, "resumed"), "the resumed guard released the hold");

    // The first process's guard is stale now: a typed error, nothing else touched.
    let other = there.lock("resumed").unwrap().lock().unwrap();
    let late = guard.unlock().unwrap_err();
    assert!(matches!(late.kind(), ErrorKind::NotOwner | ErrorKind::LockLost), "{late:?}");
    assert!(exists(&mut con, "resumed"), "the stale release left the new holder alone");
    drop(other);
}

#[test]
fn a_stale_or_foreign_token_gets_not_owner_and_the_lock_stays_held() {
    let (server, client, mut con, lock) = on_server("guarded");
    let holder = lock.lock_owned().unwrap();
    let before = hgetall(&mut con, "guarded");

    // A token that never held it, and one whose hold ended.
    let foreign: OwnerToken = "0b6f5a36-3b1e-4d55-9a4f-6c2d1e0f9a11:5000000000000000001".parse().unwrap();
    let stale = {
        let other = client.lock("elsewhere").unwrap().lock_owned().unwrap();
        let token = other.token();
        other.unlock().unwrap();
        token
    };
    for token in [&foreign, &stale] {
        let refused = server.client().lock("guarded").unwrap().resume(token).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::NotOwner, "{token}");
        assert!(lock.try_lock_with(token).unwrap().is_none(), "{token} took a held lock");
    }
    assert_eq!(hgetall(&mut con, "guarded"), before, "the holder's field untouched");
    assert!(!holder.is_lost());
    holder.unlock().unwrap();

    // A malformed string is refused before any I/O.
    for bad in ["", "uuid:1", "0b6f5a36-3b1e-4d55-9a4f-6c2d1e0f9a11:57"] {
        assert_eq!(bad.parse::<OwnerToken>().unwrap_err().kind(), ErrorKind::InvalidArgument, "{bad:?}");
    }
}

#[test]
fn the_field_is_redissons_uuid_colon_number_outside_every_thread_id() {
    let (_server, client, mut con, lock) = on_server("layout");
    let thread_hold = lock.lock().unwrap();
    let thread_number = number_of(thread_hold.owner_id());
    drop(thread_hold);

    let guard = lock.lock_owned().unwrap();
    let fields = hgetall(&mut con, "layout");
    assert_eq!(fields.len(), 1);
    let (field, count) = fields.iter().next().unwrap();
    assert_eq!(field, guard.owner_id());
    assert_eq!(count, "1");
    let (uuid, number) = field.rsplit_once(':').unwrap();
    assert_eq!(uuid, client.id(), "the client's UUID, as a thread hold's");
    let number: u64 = number.parse().unwrap();
    assert!(number >= 1 << 62 && number <= i64::MAX as u64, "{number} outside the token range");
    assert!(number > thread_number, "a thread id ({thread_number}) is far below the token range");
    drop(guard);
}

#[test]
fn a_token_hold_and_a_thread_hold_exclude_each_other() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("exclusive").unwrap();

    // A thread hold first: the token waits, then gets it on the release.
    let thread_hold = lock.lock().unwrap();
    assert!(lock.try_lock_owned().unwrap().is_none(), "a token took a thread's lock");
    let waiting = {
        let lock = lock.clone();
        spawn(move || lock.try_lock_owned_for(10 * SECOND))
    };
    std::thread::sleep(Duration::from_millis(100));
    drop(thread_hold);
    let token_hold =
        recv_within(&waiting, 10 * SECOND, "the token's wait").unwrap().expect("the token got it on release");

    // A token hold: threads of this client and of another wait for it.
    assert!(lock.try_lock().unwrap().is_none(), "a thread took a token's lock");
    let other = server.client().lock("exclusive").unwrap();
    assert!(other.try_lock().unwrap().is_none());
    let waiter = spawn(move || other.try_lock_for(10 * SECOND).map(|g| g.is_some()));
    std::thread::sleep(Duration::from_millis(100));
    // Released on another thread than the one that took it.
    recv_within(&spawn(move || token_hold.unlock()), 5 * SECOND, "the release").unwrap();
    assert!(recv_within(&waiter, 10 * SECOND, "the other client's wait").unwrap());
}

#[test]
fn a_thread_queued_behind_a_token_hold_gets_the_lock_when_another_thread_releases_it() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("gate").unwrap();
    let token_hold = lock.lock_owned().unwrap();
    // A thread of this client queues at the local gate behind the token hold.
    let queued = {
        let lock = lock.clone();
        spawn(move || lock.try_lock_for(10 * SECOND).map(|g| g.map(|g| g.owner_id().to_owned())))
    };
    std::thread::sleep(Duration::from_millis(100));
    recv_within(&spawn(move || token_hold.unlock()), 5 * SECOND, "the release").unwrap();
    let owner = recv_within(&queued, 10 * SECOND, "the queued thread").unwrap().expect("the lock");
    assert!(number_of(&owner) < 1 << 62, "a thread's hold");
}

#[test]
fn both_clients_renew_one_lease_and_the_resuming_one_keeps_it_once_the_first_is_gone() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(300);
    let first = server.builder().watchdog_timeout(watchdog).build().unwrap();
    let second = server.builder().watchdog_timeout(watchdog).build().unwrap();
    let mut con = server.conn();
    let guard = first.lock("handed").unwrap().lock_owned().unwrap();
    let resumed = second.lock("handed").unwrap().resume(&guard.token()).unwrap();
    let owner = guard.token().to_string();
    let held_through = |con: &mut redis::Connection, leases: u32| {
        let until = Instant::now() + watchdog * leases;
        while Instant::now() < until {
            let fields = hgetall(con, "handed");
            assert_eq!(fields.get(&owner).map(String::as_str), Some("1"), "one owner, one count: {fields:?}");
            assert_eq!(fields.len(), 1);
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Both renew the same field: one lease.
    held_through(&mut con, 3);
    // The first process goes away without releasing; the second keeps it.
    std::mem::forget(guard);
    drop(first);
    held_through(&mut con, 4);
    assert!(!resumed.is_lost());
    resumed.unlock().unwrap();
    assert!(!exists(&mut con, "handed"));
}

#[test]
fn presenting_the_token_to_another_client_re_enters_the_hold_there() {
    let server = RedisServer::start();
    let (here, there) = (server.client(), server.client());
    let mut con = server.conn();
    let guard = here.lock("shared").unwrap().lock_owned().unwrap();
    let owner = guard.token().to_string();
    let joined = there.lock("shared").unwrap().try_lock_with(&guard.token()).unwrap().expect("never waits");
    assert_eq!(count_of(&mut con, "shared", &owner).as_deref(), Some("2"));
    drop(joined);
    assert_eq!(count_of(&mut con, "shared", &owner).as_deref(), Some("1"));
    assert!(!guard.is_lost());
    drop(guard);
    assert!(!exists(&mut con, "shared"));
}

#[test]
fn a_redisson_client_sees_an_ordinary_holder_and_gets_the_lock_after_the_release() {
    let server = RedisServer::start();
    let client = server.client();
    let guard = client.lock("java").unwrap().lock_owned().unwrap();
    let mut java = RedissonClient::connect(&server.url(), "6f1c3c1e-0000-4000-8000-0000000000ab");
    let remaining = java.try_acquire("java", 1).expect("Redisson saw the lock free");
    assert!(remaining > 0, "Redisson reads the holder's PTTL: {remaining}");
    let waiter = spawn(move || java.lock("java", 1, Instant::now() + 10 * SECOND));
    std::thread::sleep(Duration::from_millis(100));
    recv_within(&spawn(move || guard.unlock()), 5 * SECOND, "the release").unwrap();
    assert!(recv_within(&waiter, 10 * SECOND, "Redisson's wait"), "Redisson's waiter never got the lock");
}

#[test]
fn two_threads_acquiring_with_one_token_at_once_the_second_is_refused() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("twice").unwrap();
    let held = lock.lock().unwrap();
    assert!(lock.try_lock_owned().unwrap().is_none(), "held by a thread");
    let token: OwnerToken = "0b6f5a36-3b1e-4d55-9a4f-6c2d1e0f9a11:5000000000000000002".parse().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for _ in 0..2 {
        let (lock, token, tx) = (lock.clone(), token.clone(), tx.clone());
        std::thread::spawn(move || {
            let _ = tx.send(lock.try_lock_with_for(&token, 10 * SECOND).map(|g| g.is_some()));
        });
    }
    // One waits behind the thread hold; the other, arriving while it does, is refused at once.
    let first = recv_within(&rx, 10 * SECOND, "the refused one");
    assert_eq!(first.unwrap_err().kind(), ErrorKind::InvalidArgument);
    drop(held);
    assert!(recv_within(&rx, 10 * SECOND, "the waiting one").unwrap(), "it got the lock");
}
