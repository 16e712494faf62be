//! Token-owned holds of the spin lock, the fair lock and the write side of
//! a read-write lock (issue 26 item 1; the plain lock's are in
//! `token_holds.rs`): per kind, taken on one thread and released on
//! another while the watchdog renews it, re-entered with the token,
//! resumed by another client, refused to stale tokens, and exclusive with
//! thread holds. Each scenario is written once, generic over the kind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, exists, hgetall, pttl, recv_within, spawn};
use keyholder::kind::{Fair, Read, Spin, Write};
use keyholder::{Client, ErrorKind, Handle, OwnerToken, TokenOwned};

const SECOND: Duration = Duration::from_secs(1);

/// One token-owned kind: its handle to `name` on a client, and the hash
/// field a token's hold writes.
struct Subject<K: TokenOwned> {
    handle: fn(&Client, &str) -> Handle<K>,
    field: fn(&OwnerToken) -> String,
    /// Holds share the lock (the read side): another token gets one too.
    shared: bool,
}

const SPIN: Subject<Spin> =
    Subject { handle: |c, n| c.spin_lock(n).unwrap(), field: |t| t.to_string(), shared: false };
const FAIR: Subject<Fair> =
    Subject { handle: |c, n| c.fair_lock(n).unwrap(), field: |t| t.to_string(), shared: false };
const WRITE: Subject<Write> = Subject {
    handle: |c, n| c.read_write_lock(n).unwrap().write(),
    field: |t| format!("{t}:write"),
    shared: false,
};
const READ: Subject<Read> =
    Subject { handle: |c, n| c.read_write_lock(n).unwrap().read(), field: |t| t.to_string(), shared: true };

/// The guards may move to, and be shared with, other threads.
const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<keyholder::OwnedSpinLockGuard>();
    send_and_sync::<keyholder::OwnedFairLockGuard>();
    send_and_sync::<keyholder::OwnedWriteGuard>();
    send_and_sync::<keyholder::OwnedReadGuard>();
};

/// The count of `field` in the lock hash `name`.
fn count_of(con: &mut redis::Connection, name: &str, field: &str) -> Option<String> {
    hgetall(con, name).get(field).cloned()
}

/// Taken on this thread, held on another past four watchdog leases, and
/// released there.
fn moved<K: TokenOwned>(kind: Subject<K>) {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(300);
    let client = server.builder().watchdog_timeout(watchdog).build().unwrap();
    let mut con = server.conn();
    let guard = (kind.handle)(&client, "moved").lock_owned().unwrap();
    assert_eq!(count_of(&mut con, "moved", &(kind.field)(&guard.token())).as_deref(), Some("1"));
    let mut watching = server.conn();
    let held = spawn(move || {
        let held_until = Instant::now() + watchdog * 4;
        let con = &mut watching;
        while Instant::now() < held_until {
            assert!(exists(con, "moved"), "the lock expired while its guard lived");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!guard.is_lost() && pttl(con, "moved") > 0);
        guard.unlock()
    });
    recv_within(&held, 5 * SECOND, "the hold on the pool thread").unwrap();
    assert!(!exists(&mut con, "moved"), "the release on another thread deleted the key");
    assert_eq!(client.watched_locks(), 0, "no renewal after the release");
    assert!((kind.handle)(&client, "moved").try_lock().unwrap().is_some(), "free for a thread");
}

/// Another thread re-enters with the token at once; each guard releases
/// one count.
fn reentered<K: TokenOwned>(kind: Subject<K>) {
    let server = RedisServer::start();
    let (client, mut con) = (server.client(), server.conn());
    let lock = (kind.handle)(&client, "reentered");
    let first = lock.lock_owned().unwrap();
    let (token, field) = (first.token(), (kind.field)(&first.token()));
    let again = {
        let (lock, token) = (lock.clone(), token.clone());
        recv_within(&spawn(move || lock.try_lock_with(&token)), 5 * SECOND, "the re-entry")
            .unwrap()
            .expect("a re-entry never waits")
    };
    assert_eq!(again.token(), token);
    assert_eq!(count_of(&mut con, "reentered", &field).as_deref(), Some("2"));
    assert_eq!(lock.hold_count().unwrap(), 0, "the thread holds nothing as a thread");
    first.unlock().unwrap();
    assert_eq!(count_of(&mut con, "reentered", &field).as_deref(), Some("1"));
    recv_within(&spawn(move || drop(again)), 5 * SECOND, "the drop on another thread");
    assert!(!exists(&mut con, "reentered"));
}

/// Another client resumes the token from its string and releases it; the
/// first guard's late release is refused, and the next holder stays.
fn resumed<K: TokenOwned>(kind: Subject<K>) {
    let server = RedisServer::start();
    let (here, there, mut con) = (server.client(), server.client(), server.conn());
    let guard = (kind.handle)(&here, "resumed").lock_owned().unwrap();
    let token: OwnerToken = guard.token().to_string().parse().unwrap();
    let resumed = (kind.handle)(&there, "resumed").resume(&token).unwrap();
    assert_eq!(resumed.token(), token);
    assert_eq!(count_of(&mut con, "resumed", &(kind.field)(&token)).as_deref(), Some("1"), "no count added");
    assert_eq!(there.watched_locks(), 1, "the resuming client renews it too");
    recv_within(&spawn(move || resumed.unlock()), 5 * SECOND, "the release there").unwrap();
    assert!(!exists(&mut con, "resumed"), "the resumed guard released the hold");

    let next = (kind.handle)(&there, "resumed").lock().unwrap();
    let late = guard.unlock().unwrap_err();
    assert!(matches!(late.kind(), ErrorKind::NotOwner | ErrorKind::LockLost), "{late:?}");
    assert!(exists(&mut con, "resumed"), "the stale release left the next holder alone");
    drop(next);
}

/// A stale and a foreign token: `resume` is `NotOwner`, `try_lock_with`
/// gets nothing (but a read hold of its own, on the shared read side), and
/// the holder's fields are untouched.
fn stale<K: TokenOwned>(kind: Subject<K>) {
    let server = RedisServer::start();
    let (client, mut con) = (server.client(), server.conn());
    let lock = (kind.handle)(&client, "guarded");
    let holder = lock.lock_owned().unwrap();
    let before = hgetall(&mut con, "guarded");
    let foreign: OwnerToken = "0b6f5a36-3b1e-4d55-9a4f-6c2d1e0f9a11:5000000000000000001".parse().unwrap();
    let stale = {
        let other = (kind.handle)(&client, "elsewhere").lock_owned().unwrap();
        let token = other.token();
        other.unlock().unwrap();
        token
    };
    for token in [&foreign, &stale] {
        let refused = (kind.handle)(&server.client(), "guarded").resume(token).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::NotOwner, "{token}");
        if !kind.shared {
            assert!(lock.try_lock_with(token).unwrap().is_none(), "{token} took a held lock");
        }
    }
    assert_eq!(hgetall(&mut con, "guarded"), before, "the holder's fields untouched");
    assert!(!holder.is_lost());
    holder.unlock().unwrap();
    assert!(!exists(&mut con, "guarded"));
}

/// A thread hold keeps a token out and the token gets the lock on its
/// release; a token hold keeps this client's and another's threads out
/// until it is released on another thread.
fn exclusive<K: TokenOwned>(kind: Subject<K>) {
    let server = RedisServer::start();
    let client = server.client();
    let lock = (kind.handle)(&client, "exclusive");
    let thread_hold = lock.lock().unwrap();
    assert!(lock.try_lock_owned().unwrap().is_none(), "a token took a thread's lock");
    let waiting = {
        let lock = lock.clone();
        spawn(move || lock.try_lock_owned_for(10 * SECOND))
    };
    std::thread::sleep(Duration::from_millis(100));
    drop(thread_hold);
    let token_hold = recv_within(&waiting, 10 * SECOND, "the token's wait").unwrap().expect("got it");

    assert!(lock.try_lock().unwrap().is_none(), "a thread took a token's lock");
    let other = (kind.handle)(&server.client(), "exclusive");
    assert!(other.try_lock().unwrap().is_none());
    let waiter = spawn(move || other.try_lock_for(10 * SECOND).map(|g| g.is_some()));
    std::thread::sleep(Duration::from_millis(100));
    recv_within(&spawn(move || token_hold.unlock()), 5 * SECOND, "the release").unwrap();
    assert!(recv_within(&waiter, 10 * SECOND, "the other client's wait").unwrap());
}

macro_rules! per_kind {
    ($($test:ident: $scenario:ident($kind:expr);)*) => {
        $(#[test] fn $test() { $scenario($kind) })*
    };
}

per_kind! {
    a_spin_lock_token_hold_moves_to_another_thread_renewed_and_released_there: moved(SPIN);
    a_fair_lock_token_hold_moves_to_another_thread_renewed_and_released_there: moved(FAIR);
    a_write_token_hold_moves_to_another_thread_renewed_and_released_there: moved(WRITE);
    a_spin_lock_token_is_re_entered_by_whoever_presents_it: reentered(SPIN);
    a_fair_lock_token_is_re_entered_by_whoever_presents_it: reentered(FAIR);
    a_write_token_is_re_entered_by_whoever_presents_it: reentered(WRITE);
    a_spin_lock_token_is_resumed_and_released_by_another_client: resumed(SPIN);
    a_fair_lock_token_is_resumed_and_released_by_another_client: resumed(FAIR);
    a_write_token_is_resumed_and_released_by_another_client: resumed(WRITE);
    a_stale_spin_lock_token_gets_not_owner_and_the_hold_stays: stale(SPIN);
    a_stale_fair_lock_token_gets_not_owner_and_the_hold_stays: stale(FAIR);
    a_stale_write_token_gets_not_owner_and_the_hold_stays: stale(WRITE);
    spin_lock_token_and_thread_holds_exclude_each_other: exclusive(SPIN);
    fair_lock_token_and_thread_holds_exclude_each_other: exclusive(FAIR);
    write_token_and_thread_holds_exclude_each_other: exclusive(WRITE);
    a_read_token_hold_moves_to_another_thread_renewed_and_released_there: moved(READ);
    a_read_token_is_re_entered_by_whoever_presents_it: reentered(READ);
    a_read_token_is_resumed_and_released_by_another_client: resumed(READ);
    a_stale_read_token_gets_not_owner_and_the_hold_stays: stale(READ);
}

#[test]
fn a_read_token_hold_keeps_writers_out_and_shares_with_readers() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("shared").unwrap();
    let token_read = rw.read().lock_owned().unwrap();
    assert!(rw.write().try_lock().unwrap().is_none(), "a writer took a read-held lock");
    let reading = rw.read().try_lock().unwrap().expect("readers share");
    let writer = {
        let write = server.client().read_write_lock("shared").unwrap().write();
        spawn(move || write.try_lock_for(10 * SECOND).map(|g| g.is_some()))
    };
    drop(reading);
    std::thread::sleep(Duration::from_millis(100));
    recv_within(&spawn(move || token_read.unlock()), 5 * SECOND, "the release").unwrap();
    assert!(recv_within(&writer, 10 * SECOND, "the writer's wait").unwrap());
}
