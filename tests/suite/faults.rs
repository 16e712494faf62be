//! Fault injection in one process: Redis restarted without persistence under
//! a held lock, unlock messages lost to a black-holed pub/sub connection,
//! replies lost after the server ran an acquire or a release, Redis paused
//! for less than a lease, Redis unreachable behind a black hole.
//!
//! Network faults go through the in-repo TCP proxy (`common::proxy`) on
//! 127.0.0.1. A client has one URL for its command pool and its pub/sub
//! connection, so a proxy fault hits both; where a test needs a healthy
//! holder, that holder connects to Redis directly.
//!
//! Multi-process faults (SIGKILL, SIGSTOP, the mutual-exclusion run) are in
//! `tests/suite/processes.rs`; `tests/suite/failures.rs` covers Redis stopped or paused
//! under waiters and every call, and `tests/suite/wakeup.rs` pub/sub connections
//! killed with `CLIENT KILL TYPE pubsub`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::proxy::{Fault, FaultProxy};
use common::store::{FencedStore, Outcome};
use common::{
    Listener, RedisServer, ServerExt, channel_of, eventually, exists, hgetall, pttl, recv_within, spawn,
    timed, wait_numsub, wait_subscribed,
};
use keyholder::{Client, ClientBuilder, Lease, Lock, LockGuard, LostReason, Result};

const SECOND: Duration = Duration::from_secs(1);
/// Room for scheduling delays on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);

/// Starts `n` threads of `client` that each acquire `name` (retrying past
/// errors for up to 20 s), release it, and report: released fine or not
/// acquired, when they acquired, and how many errors they met.
fn spawn_waiters(client: &Client, name: &str, n: usize) -> Vec<mpsc::Receiver<(Option<bool>, Instant, u32)>> {
    (0..n)
        .map(|_| {
            let lock = client.lock(name).unwrap();
            spawn(move || {
                let (guard, errors) = acquire_retrying(&lock, 20 * SECOND);
                let acquired_at = Instant::now();
                (guard.map(|g| g.unlock().is_ok()), acquired_at, errors)
            })
        })
        .collect()
}

/// What an application does when it must have a lock: try until it gets it
/// or `limit` passes, retrying after Redis errors. Returns the guard and the
/// number of errors seen on the way.
fn acquire_retrying(lock: &Lock, limit: Duration) -> (Option<LockGuard>, u32) {
    let deadline = Instant::now() + limit;
    let mut errors = 0;
    for _ in 0..1_000 {
        match lock.try_lock_until(deadline) {
            Ok(Some(guard)) => return (Some(guard), errors),
            Ok(None) => break,
            Err(e) => {
                assert!(e.is_redis_error(), "an error other than Redis failing: {e:?}");
                errors += 1;
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    (None, errors)
}

/// `HGET lock owner`.
fn count_of(con: &mut redis::Connection, name: &str, owner: &str) -> Option<String> {
    redis::cmd("HGET").arg(name).arg(owner).query(con).unwrap()
}

// ---------------------------------------------------------------------------
// Redis killed and restarted (no persistence) while a lock is held

#[test]
fn a_restart_without_persistence_tells_the_holder_and_waiters_recover() {
    const WATCHDOG: Duration = Duration::from_millis(600);
    let mut server = RedisServer::start();
    let short = |b: ClientBuilder| {
        b.connect_timeout(Duration::from_millis(300))
            .command_timeout(Duration::from_millis(300))
            .watchdog_timeout(WATCHDOG)
    };
    let a = short(server.builder()).build().unwrap();
    let b = short(server.builder()).build().unwrap();
    let lock_a = a.lock("amnesia").unwrap();
    let guard = lock_a.lock().unwrap();
    let lost = guard.lost_signal();
    let old_owner = guard.owner_id().to_owned();

    // Two waiters: another thread of the holder's client, and a thread of
    // another client. Each retries after errors, as an application would.
    let (started_tx, started_rx) = mpsc::channel();
    let waiters: Vec<_> = [&a, &b]
        .into_iter()
        .map(|client| {
            let lock = client.lock("amnesia").unwrap();
            let started = started_tx.clone();
            spawn(move || {
                started.send(()).unwrap();
                let (guard, errors) = acquire_retrying(&lock, 15 * SECOND);
                let acquired_at = Instant::now();
                let guard = guard?;
                let owner = guard.owner_id().to_owned();
                let count = lock.hold_count();
                let unlocked = guard.unlock();
                Some((acquired_at, owner, count.ok(), unlocked.is_ok(), errors))
            })
        })
        .collect();
    for _ in 0..2 {
        recv_within(&started_rx, 5 * SECOND, "waiter start");
    }
    wait_subscribed(&a, 1);
    wait_subscribed(&b, 1);
    assert!(lost.try_recv().is_err(), "lost before the restart");

    server.restart(); // SIGKILL, then an empty server on the same port
    let restarted_at = Instant::now();

    // The holder learns of the loss without doing any I/O itself.
    let reason = lost.recv_timeout(WATCHDOG + 3 * SECOND).expect("the lost signal never fired");
    let learned_at = Instant::now();
    assert!(
        matches!(reason, LostReason::RenewalRefused | LostReason::LeaseExpired | LostReason::Gone),
        "{reason:?}"
    );
    assert!(guard.is_lost());
    assert_eq!(guard.lost_reason(), Some(reason));
    let learned_after = learned_at.saturating_duration_since(restarted_at);
    assert!(
        learned_after <= WATCHDOG + SLACK,
        "the holder learned of the loss {learned_after:?} after the restart"
    );

    // Both waiters get the lock, one after the other, from the same clients.
    let mut overlap = Duration::ZERO;
    for (i, waiter) in waiters.iter().enumerate() {
        let (acquired_at, owner, count, unlocked, errors) =
            recv_within(waiter, 20 * SECOND, &format!("waiter {i}"))
                .unwrap_or_else(|| panic!("waiter {i} never got the lock"));
        assert_ne!(owner, old_owner);
        assert_eq!(count, Some(1), "waiter {i}: hold count");
        assert!(unlocked, "waiter {i} could not release");
        assert!(acquired_at.duration_since(restarted_at) < 10 * SECOND);
        overlap = overlap.max(learned_at.saturating_duration_since(acquired_at));
        eprintln!("waiter {i}: {errors} errors, acquired {:?} after the restart", acquired_at - restarted_at);
    }
    // Redis forgot the lock, so a waiter may get it before the old holder's
    // watchdog finds out: the overlap is bounded by the watchdog timeout.
    eprintln!(
        "holder learned {learned_after:?} after the restart ({reason:?}); overlap with a new holder {overlap:?}"
    );
    assert!(overlap <= WATCHDOG + SLACK, "old and new holder overlapped for {overlap:?}");

    // The lost guard's release says so and leaves the lock alone.
    let err = guard.unlock().unwrap_err();
    assert!(err.is_lock_lost() || err.is_redis_error(), "{err:?}");

    // New acquisitions, by the former holder's thread and by the other
    // client, work without rebuilding either client.
    let (again, _) = acquire_retrying(&lock_a, 5 * SECOND);
    let again = again.expect("the former holder's thread could not lock again");
    assert!(!again.is_lost());
    assert_eq!(lock_a.hold_count().unwrap(), 1);
    let lock_b = b.lock("amnesia").unwrap();
    assert!(lock_b.try_lock().unwrap().is_none(), "another client got a held lock");
    again.unlock().unwrap();
    lock_b
        .try_lock_for(5 * SECOND)
        .unwrap()
        .expect("the other client could not lock again")
        .unlock()
        .unwrap();
    assert!(!exists(&mut server.conn(), "amnesia"));
    assert_eq!(a.watched_locks(), 0);
    assert_eq!(b.watched_locks(), 0);
}

/// A restart without persistence empties the counter; the next token comes
/// from the server's clock, above every token before the restart: the
/// resource takes the new holder at once and refuses the old one's late
/// write, whether it keeps its data elsewhere or in the restarted Redis.
#[test]
fn a_restart_without_persistence_keeps_the_fencing_sequence_rising() {
    let mut server = RedisServer::start();
    // The protected resource keeps its own data (another Redis, not
    // restarted); `same_redis` lives in the lock's Redis and is wiped with it.
    let resource = RedisServer::start();
    let mut res = resource.conn();
    let elsewhere = FencedStore::new("elsewhere");
    let same_redis = FencedStore::new("same-redis");
    let client = server
        .builder()
        .connect_timeout(Duration::from_millis(300))
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let lock = client.lock("sequence").unwrap().fenced();

    let mut last = 0;
    for i in 1..=3 {
        let guard = lock.lock().unwrap();
        let token = guard.fencing_token().unwrap();
        assert!(token > last, "token {token} after {last}");
        last = token;
        assert!(elsewhere.write(&mut res, token, &format!("before-{i}")).unwrap().is_accepted());
        assert!(same_redis.write(&mut server.conn(), token, &format!("before-{i}")).unwrap().is_accepted());
        guard.unlock().unwrap();
    }
    assert_eq!(lock.last_fencing_token().unwrap(), Some(last));

    server.restart();
    assert_eq!(lock.last_fencing_token().ok(), Some(None), "the restart kept the counter");
    let (guard, _) = acquire_retrying(&lock, 5 * SECOND);
    let guard = guard.expect("no lock after the restart");
    let token = guard.fencing_token().unwrap();
    assert!(token > last, "token {token} after {last}: the sequence went back with the restart");

    // The new holder is taken at once by a resource that kept its data...
    assert!(elsewhere.write(&mut res, token, "after").unwrap().is_accepted());
    // ... and one in the restarted Redis refuses a late write of a holder
    // from before the restart once the new holder has written.
    let mut con = server.conn();
    assert!(same_redis.write(&mut con, token, "new-holder").unwrap().is_accepted());
    assert_eq!(
        same_redis.write(&mut con, last, "stale-holder").unwrap(),
        Outcome::Refused { highest: token }
    );
    assert_eq!(same_redis.value(&mut con).as_deref(), Some("new-holder"));
    guard.unlock().unwrap();
}

#[test]
fn dropping_a_lost_guard_after_locking_again_keeps_the_new_hold() {
    // An application that notices a lost hold and locks again, in the
    // natural `guard = lock.lock()?` form: the new guard is acquired first,
    // then the old one is dropped. Both have the same owner id (same client,
    // same thread), so Redis cannot tell them apart.
    let server = RedisServer::start();
    let client = server.client();
    let other = server.client().lock("replaced").unwrap();
    let short = client.lock_with_lease("replaced", Lease::Fixed(Duration::from_millis(300))).unwrap();
    let lock = client.lock("replaced").unwrap();

    let mut con = server.conn();
    let mut guard = short.lock().unwrap();
    // Lost, and gone from Redis too (the local deadline passes a little
    // before the key expires).
    assert!(
        eventually(5 * SECOND, || guard.is_lost() && !exists(&mut con, "replaced")),
        "the fixed lease never ran out"
    );
    guard = lock.lock().unwrap(); // the old guard is dropped after the new lock is taken
    assert!(!guard.is_lost());
    assert_eq!(lock.hold_count().unwrap(), 1, "dropping the lost guard released the new hold");
    assert!(other.try_lock().unwrap().is_none(), "another client got the lock while this thread holds it");
    guard.unlock().unwrap();
}

// ---------------------------------------------------------------------------
// The pub/sub connection black-holed while threads wait

#[test]
fn an_unlock_message_lost_in_a_black_hole_costs_at_most_the_holders_lease() {
    const HOLDER_LEASE: Duration = Duration::from_secs(2);
    const WINDOW: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut con = server.conn();
    let holder = server.builder().watchdog_timeout(HOLDER_LEASE).build().unwrap();
    let waiting =
        Client::builder(proxy.url()).connect_timeout(SECOND).command_timeout(SECOND).build().unwrap();
    let guard = holder.lock("lost-message").unwrap().lock().unwrap();

    let waiters = spawn_waiters(&waiting, "lost-message", 3);
    wait_subscribed(&waiting, 1);
    wait_numsub(&mut con, &channel_of("lost-message"), 2); // and the holder's client
    // Past the waiting thread's early retry (at twice the 10 ms fairness
    // window): from here it sleeps for the holder's remaining lease.
    std::thread::sleep(Duration::from_millis(100));

    // The release's unlock message is swallowed on its way to the waiters.
    proxy.set(Fault::BlackholeReplies);
    let released_at = Instant::now();
    guard.unlock().unwrap();
    std::thread::sleep(WINDOW);
    proxy.set(Fault::None);

    let mut first = Duration::MAX;
    let mut last = Duration::ZERO;
    for (i, waiter) in waiters.iter().enumerate() {
        let (unlocked, acquired_at, errors) = recv_within(waiter, 25 * SECOND, &format!("waiter {i}"));
        assert_eq!(unlocked, Some(true), "waiter {i} did not get the lock ({errors} errors)");
        let after = acquired_at.duration_since(released_at);
        first = first.min(after);
        last = last.max(after);
        if errors > 0 {
            eprintln!("waiter {i}: {errors} errors");
        }
    }
    eprintln!("lost unlock message: first waiter in after {first:?}, last after {last:?}");
    assert!(
        first >= WINDOW - Duration::from_millis(20),
        "acquired {first:?} after the release: the message was not lost"
    );
    assert!(last <= HOLDER_LEASE + SLACK, "the last waiter got the lock {last:?} after the release");
}

#[test]
fn waiters_acquire_after_their_pubsub_connection_is_black_holed_and_replaced() {
    // The holder has the default 30 s lease: a waiter that missed its
    // wake-up would sleep that long. Only the pub/sub connection's PING
    // probe noticing the black hole, and the reconnect waking every waiter,
    // get them the lock in time.
    const CONNECT: Duration = Duration::from_millis(300);
    const COMMAND: Duration = Duration::from_millis(300);
    const BLACKOUT: Duration = Duration::from_millis(1500);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut con = server.conn();
    let holder = server.client();
    // The waiting client's own lease is short: an acquire of its made during
    // the black hole may be orphaned (its give-back cannot reach Redis), and
    // the orphan holds the other threads up until its lease ends, unless its
    // own thread locks again first (which resets the stale count).
    let waiting = Client::builder(proxy.url())
        .connect_timeout(CONNECT)
        .command_timeout(COMMAND)
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let guard = holder.lock("replaced-pubsub").unwrap().lock().unwrap();

    let waiters = spawn_waiters(&waiting, "replaced-pubsub", 3);
    wait_subscribed(&waiting, 1);
    wait_numsub(&mut con, &channel_of("replaced-pubsub"), 2); // and the holder's client

    proxy.set(Fault::BlackholeReplies);
    std::thread::sleep(Duration::from_millis(100));
    let released_at = Instant::now();
    guard.unlock().unwrap(); // its message is lost
    std::thread::sleep(BLACKOUT);
    proxy.set(Fault::None);
    let cleared_at = Instant::now();

    // An attempt in flight when the fault clears may still fail (a command
    // timeout, then a connect or command timeout for its give-back); the
    // retry after it succeeds.
    let bound = CONNECT + 2 * COMMAND + SLACK;
    let mut total_errors = 0;
    for (i, waiter) in waiters.iter().enumerate() {
        let (unlocked, acquired_at, errors) = recv_within(waiter, 25 * SECOND, &format!("waiter {i}"));
        assert_eq!(unlocked, Some(true), "waiter {i} did not get the lock ({errors} errors)");
        let after = acquired_at.saturating_duration_since(cleared_at);
        assert!(after <= bound, "waiter {i} got the lock {after:?} after the fault cleared");
        assert!(acquired_at.duration_since(released_at) < 10 * SECOND);
        total_errors += errors;
    }
    eprintln!("black-holed pub/sub: {total_errors} errors among the waiters while Redis was unreachable");
    assert_eq!(waiting.subscribed_channels(), 0);
}

// ---------------------------------------------------------------------------
// Replies lost after the server ran an acquire or a release

#[test]
fn a_lost_acquire_reply_is_given_back_at_once() {
    const COMMAND: Duration = Duration::from_millis(300);
    const CONNECT: Duration = Duration::from_millis(1500);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut con = server.conn();
    let client =
        Client::builder(proxy.url()).connect_timeout(CONNECT).command_timeout(COMMAND).build().unwrap();
    let lock = client.lock("lost-acquire").unwrap();
    warm_up(&lock);
    let listener = Listener::start(&server, &[&channel_of("lost-acquire")]);

    // Replies arrive after the command timeout: the acquire runs, its reply
    // is late, and the client gives back what it may have taken (that
    // release runs too; its reply is late as well).
    proxy.set(Fault::DelayReplies(Duration::from_millis(600)));
    let (result, took) = timed(|| lock.try_lock());
    proxy.set(Fault::None);
    let err = result.expect_err("acquired though every reply was late");
    assert!(err.is_connection_error(), "{err:?}");
    assert!(took < 2 * COMMAND + CONNECT + SLACK, "try_lock took {took:?}");

    // The acquire did run: the give-back deleted its hold and published.
    let message = listener.next(5 * SECOND).expect("no unlock message: the acquire never ran?");
    assert_eq!(message.1, "0");
    assert!(!exists(&mut con, "lost-acquire"), "an orphaned hold: {:?}", hgetall(&mut con, "lost-acquire"));
    let other = server.client();
    other
        .lock("lost-acquire")
        .unwrap()
        .try_lock()
        .unwrap()
        .expect("another client is locked out")
        .unlock()
        .unwrap();

    // The same thread locks again with a count of 1.
    let (guard, _) = acquire_retrying(&lock, 5 * SECOND);
    let guard = guard.unwrap();
    assert_eq!(count_of(&mut con, "lost-acquire", guard.owner_id()).as_deref(), Some("1"));
    guard.unlock().unwrap();
    assert!(!exists(&mut con, "lost-acquire"));
}

/// A client through `proxy` that can open no second connection while the
/// proxy black-holes replies, so an acquire whose reply is lost cannot be
/// given back; its owner, and the moment just before the acquire was sent.
/// It keeps no idle connection in reserve: one opened by the pool's
/// maintenance thread before the fault would carry the give-back.
fn orphan_an_acquire(server: &RedisServer, proxy: &FaultProxy, lease: Duration) -> (Client, Lock, Instant) {
    let client = Client::builder(proxy.url())
        .pool_max_size(1)
        .min_idle_connections(0)
        .connect_timeout(Duration::from_millis(300))
        .command_timeout(Duration::from_millis(300))
        .watchdog_timeout(lease)
        .build()
        .unwrap();
    let lock = client.lock("orphan").unwrap();
    warm_up(&lock);

    proxy.set(Fault::BlackholeReplies);
    let sent = Instant::now();
    let err = lock.try_lock().expect_err("acquired though every reply was lost");
    assert!(err.is_connection_error(), "{err:?}");

    // The acquire ran; the give-back could not reach Redis.
    let mut con = server.conn();
    let fields = hgetall(&mut con, "orphan");
    assert_eq!(fields.len(), 1, "{fields:?}");
    let (owner, count) = fields.into_iter().next().unwrap();
    assert!(owner.starts_with(client.id()), "{owner}");
    assert_eq!(count, "1", "the lost acquire counted twice");
    assert_eq!(client.watched_locks(), 0, "an acquire that returned an error is being renewed");
    let ttl = pttl(&mut con, "orphan");
    assert!(ttl > 0 && u128::try_from(ttl).unwrap() <= lease.as_millis(), "PTTL {ttl}");
    (client, lock, sent)
}

#[test]
fn an_acquire_that_cannot_be_given_back_is_orphaned_no_longer_than_its_lease() {
    const LEASE: Duration = Duration::from_millis(1500);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let (_client, _lock, sent) = orphan_an_acquire(&server, &proxy, LEASE);
    proxy.set(Fault::None);

    let other = server.client();
    let guard = other.lock("orphan").unwrap().try_lock_for(LEASE + 5 * SECOND).unwrap();
    let freed_after = sent.elapsed();
    assert!(guard.is_some(), "the orphaned hold was never freed");
    assert!(freed_after <= LEASE + SLACK, "the orphan held the lock {freed_after:?}; its lease is {LEASE:?}");
    drop(guard);
}

#[test]
fn locking_again_within_an_orphans_lease_does_not_count_twice() {
    const LEASE: Duration = Duration::from_millis(3000);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let mut con = server.conn();
    let (_client, lock, _) = orphan_an_acquire(&server, &proxy, LEASE);
    proxy.set(Fault::None);

    // The application retries at once, as it would after an error.
    let (guard, _) = acquire_retrying(&lock, 5 * SECOND);
    let guard = guard.expect("could not lock again");
    let count = count_of(&mut con, "orphan", guard.owner_id());
    guard.unlock().unwrap();
    let other = server.client();
    let freed = other.lock("orphan").unwrap().try_lock().unwrap();
    let ttl = pttl(&mut con, "orphan");
    assert!(
        count.as_deref() == Some("1") && freed.is_some(),
        "one live guard, but Redis counted {count:?}; after its release the lock was {} (PTTL {ttl} ms)",
        if freed.is_some() { "free" } else { "still held" }
    );
}

/// Runs a nested acquisition and its releases once, so that Redis has the
/// scripts loaded: a lost reply must be a command's, not a `NOSCRIPT`.
fn warm_up(lock: &Lock) {
    let outer = lock.lock().unwrap();
    lock.lock().unwrap().unlock().unwrap();
    outer.unlock().unwrap();
}

/// Leaves `client` with at least `n` idle pooled connections: `n` calls made
/// while Redis is paused each need a connection of their own. A retry after
/// a lost reply then finds one ready, rather than having to open one (which
/// cannot succeed while replies are black-holed).
fn fill_pool(server: &RedisServer, client: &Client, n: usize) {
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(200).arg("ALL").query(&mut server.conn()).unwrap();
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let lock = client.lock("fill-pool").unwrap();
            spawn(move || lock.is_locked().is_ok())
        })
        .collect();
    for call in &calls {
        assert!(recv_within(call, 10 * SECOND, "pool filler"));
    }
}

/// Black-holes replies until `done` holds on a direct connection to
/// `server` (the server ran the command whose reply is to be lost), then
/// gives the reply time to reach the proxy, and clears the fault.
fn lose_replies_until(
    proxy: &Arc<FaultProxy>,
    fault: Fault,
    mut con: redis::Connection,
    done: impl Fn(&mut redis::Connection) -> bool + Send + 'static,
) -> mpsc::Receiver<bool> {
    proxy.set(fault);
    let proxy = Arc::clone(proxy);
    spawn(move || {
        let ran = eventually(10 * SECOND, || done(&mut con));
        std::thread::sleep(Duration::from_millis(100));
        proxy.set(Fault::None);
        ran
    })
}

/// The command timeout of the lost-release tests: long enough that the
/// fault has cleared before the retry, which needs a connection: while
/// replies are black-holed none can be opened.
const COMMAND: Duration = Duration::from_secs(1);

/// A client through a fault proxy in front of `server`, with [`COMMAND`]
/// as its command timeout, its scripts loaded and idle connections ready
/// for a retry; the proxy, and `name`'s lock of that client.
fn lock_behind_a_proxy(server: &RedisServer, name: &str) -> (Arc<FaultProxy>, Client, Lock) {
    let proxy = Arc::new(FaultProxy::start(server.port()));
    let client =
        Client::builder(proxy.url()).connect_timeout(2 * SECOND).command_timeout(COMMAND).build().unwrap();
    let lock = client.lock(name).unwrap();
    warm_up(&lock);
    fill_pool(server, &client, 4);
    (proxy, client, lock)
}

#[test]
fn lost_release_replies_do_not_release_twice() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (proxy, client, lock) = lock_behind_a_proxy(&server, "lost-release");
    let other = server.client().lock("lost-release").unwrap();
    let listener = Listener::start(&server, &[&channel_of("lost-release")]);

    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    let owner = outer.owner_id().to_owned();
    assert_eq!(count_of(&mut con, "lost-release", &owner).as_deref(), Some("2"));

    // The first release runs (2 -> 1); its reply is lost; the owner's count
    // says it ran, so it is not sent again.
    let watched = owner.clone();
    let cleared = lose_replies_until(&proxy, Fault::BlackholeReplies, server.conn(), move |c| {
        count_of(c, "lost-release", &watched).as_deref() == Some("1")
    });
    let (result, took) = timed(|| inner.unlock());
    assert!(recv_within(&cleared, 15 * SECOND, "fault clearer"), "the release never ran");
    result.expect("the retried release failed");
    assert!(took >= COMMAND, "took {took:?}: the first reply was not lost");
    assert_eq!(count_of(&mut con, "lost-release", &owner).as_deref(), Some("1"), "released twice");
    assert!(!outer.is_lost());
    assert!(other.try_lock().unwrap().is_none(), "another client got a held lock");

    // The last release runs (key deleted, one message); its reply is lost;
    // the retry does not publish again.
    let cleared =
        lose_replies_until(&proxy, Fault::BlackholeReplies, server.conn(), |c| !exists(c, "lost-release"));
    let (result, took) = timed(|| outer.unlock());
    assert!(recv_within(&cleared, 15 * SECOND, "fault clearer"), "the release never ran");
    result.expect("the retried final release failed");
    assert!(took >= COMMAND, "took {took:?}: the first reply was not lost");
    assert_eq!(listener.next(5 * SECOND).map(|m| m.1).as_deref(), Some("0"));
    assert_eq!(listener.drain_until_marker(&mut con, &channel_of("lost-release")), [], "published twice");
    other.try_lock().unwrap().expect("another client is locked out").unlock().unwrap();
    assert_eq!(client.watched_locks(), 0);
}

/// A nested release whose request is lost on the way (the script never
/// ran) is sent again: the owner's count, read after the timeout, is still
/// the hold's guards.
#[test]
fn a_nested_release_whose_request_is_lost_is_sent_again() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (proxy, _client, lock) = lock_behind_a_proxy(&server, "lost-request");
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    let owner = outer.owner_id().to_owned();

    // Everything sent in the next 300 ms is dropped, the release with it;
    // the fault is gone long before the release's reply times out.
    proxy.set(Fault::BlackholeAll);
    let clearer = {
        let proxy = Arc::clone(&proxy);
        spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            proxy.set(Fault::None);
            true
        })
    };
    let (result, took) = timed(|| inner.unlock());
    assert!(recv_within(&clearer, 5 * SECOND, "fault clearer"));
    result.expect("the release sent again failed");
    eprintln!("the nested release took {took:?} (over {COMMAND:?}: its first request was lost)");
    assert_eq!(count_of(&mut con, "lost-request", &owner).as_deref(), Some("1"), "not released once");
    assert!(!outer.is_lost());
    outer.unlock().unwrap();
    assert!(!exists(&mut con, "lost-request"));
}

#[test]
fn a_release_whose_connection_is_cut_after_it_ran_decrements_once() {
    let server = RedisServer::start();
    let proxy = Arc::new(FaultProxy::start(server.port()));
    let mut con = server.conn();
    let client = Client::builder(proxy.url())
        .connect_timeout(SECOND)
        .command_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let other = server.client().lock("cut").unwrap();
    let lock = client.lock("cut").unwrap();
    warm_up(&lock);
    fill_pool(&server, &client, 4);
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    let owner = outer.owner_id().to_owned();

    // The connection is cut as the reply comes back. Whether the retry gets
    // through depends on when the fault clears; either way Redis counts one
    // release.
    let watched = owner.clone();
    let cleared = lose_replies_until(&proxy, Fault::CutAfter(0), server.conn(), move |c| {
        count_of(c, "cut", &watched).as_deref() == Some("1")
    });
    let result = inner.unlock();
    assert!(recv_within(&cleared, 15 * SECOND, "fault clearer"), "the release never ran");
    if let Err(e) = &result {
        assert!(e.is_redis_error(), "{e:?}");
    }
    eprintln!("release over a cut connection returned {result:?}");
    assert_eq!(count_of(&mut con, "cut", &owner).as_deref(), Some("1"), "released twice (or not at all)");
    assert!(!outer.is_lost());
    assert!(other.try_lock().unwrap().is_none(), "another client got a held lock");
    outer.unlock().unwrap();
    assert!(!exists(&mut con, "cut"));
}

// ---------------------------------------------------------------------------
// Redis paused for less than the lease

#[test]
fn pauses_shorter_than_the_lease_lose_no_hold() {
    const WATCHDOG: Duration = Duration::from_millis(1500);
    const PAUSE_MS: u64 = 400;
    let server = RedisServer::start();
    let mut admin = server.conn();
    let mut con = server.conn();
    let client = server.builder().watchdog_timeout(WATCHDOG).command_timeout(SECOND).build().unwrap();
    let other = server.client().lock("paused").unwrap();
    let lock = client.lock("paused").unwrap();
    let guard = lock.lock().unwrap();
    let lost = guard.lost_signal();
    let owner = guard.owner_id().to_owned();

    // Three pauses of 400 ms, 300 ms apart: 2.1 s in all, longer than the
    // 1.5 s lease, but each one shorter.
    let started = Instant::now();
    for _ in 0..3 {
        let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(PAUSE_MS).arg("ALL").query(&mut admin).unwrap();
        let paused_at = Instant::now();
        while paused_at.elapsed() < Duration::from_millis(PAUSE_MS + 300) {
            assert!(!guard.is_lost(), "lost {:?} into the pauses", started.elapsed());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(other.try_lock().unwrap().is_none(), "another client got the lock after a pause");
    }
    // Two more lease periods without pauses: renewal goes on.
    std::thread::sleep(2 * WATCHDOG);
    assert!(lost.try_recv().is_err(), "the lost signal fired");
    assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
    assert_eq!(count_of(&mut con, "paused", &owner).as_deref(), Some("1"));
    assert!(pttl(&mut con, "paused") > 0);
    assert!(other.try_lock().unwrap().is_none());
    guard.unlock().unwrap();
    assert!(!exists(&mut con, "paused"));
}

// ---------------------------------------------------------------------------
// Redis unreachable behind a black hole

const DARK_CONNECT: Duration = Duration::from_millis(300);
const DARK_COMMAND: Duration = Duration::from_millis(300);
/// How long a waiting call rides out the black hole before it gives up.
const DARK_BUDGET: Duration = Duration::from_secs(1);

/// The longest any one call may take with Redis unreachable: an attempt
/// (a command timeout, or a connect timeout when no connection is pooled)
/// and its give-back or retry (the same again), with slack.
fn dark_call_bound() -> Duration {
    2 * (DARK_CONNECT + DARK_COMMAND) + SLACK
}

#[test]
fn every_public_call_errors_in_time_behind_a_black_hole() {
    const WATCHDOG: Duration = Duration::from_millis(600);
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = server.client();
    let client = Client::builder(proxy.url())
        .connect_timeout(DARK_CONNECT)
        .command_timeout(DARK_COMMAND)
        .watchdog_timeout(WATCHDOG)
        .outage_budget(DARK_BUDGET)
        .pool_max_size(4)
        .build()
        .unwrap();
    let to_unlock = client.lock("a").unwrap().lock().unwrap();
    let to_drop = client.lock("b").unwrap().lock().unwrap();
    let lost = to_unlock.lost_signal();

    // A thread already waiting when Redis goes dark.
    let held = holder.lock("held").unwrap().lock().unwrap();
    let waiting = client.lock("held").unwrap();
    let waiter = spawn(move || timed(|| waiting.lock().map(drop)));
    wait_subscribed(&client, 1);

    // Requests vanish, replies never come, new connections are accepted and
    // never answered.
    proxy.set(Fault::BlackholeAll);
    let dark_at = Instant::now();
    let bound = dark_call_bound();

    let reason = lost.recv_timeout(WATCHDOG + SLACK).expect("the held lock was never reported lost");
    assert_eq!(reason, LostReason::LeaseExpired);

    // The waiter: its pub/sub probe fails (two command timeouts), the
    // reconnect wakes it, its attempt fails, it rides out the black hole
    // for its outage budget, and its last attempt fails.
    let (outcome, _) = recv_within(&waiter, 10 * SECOND, "waiter");
    assert!(outcome.as_ref().is_err_and(keyholder::Error::is_redis_error), "{outcome:?}");
    let waiter_took = dark_at.elapsed();
    assert!(
        waiter_took <= 2 * DARK_COMMAND + DARK_BUDGET + bound,
        "the waiter returned {waiter_took:?} into the black hole"
    );

    let lock = client.lock("dark").unwrap();
    let fenced = lock.fenced();
    let mut slowest = Duration::ZERO;
    let mut check = |what: &str, f: &mut dyn FnMut() -> Result<String>| {
        // Waiting calls ride out the black hole for the budget first.
        let waits = ["lock", "try_lock_for", "try_lock_until", "fenced lock"].contains(&what);
        let bound = if waits { DARK_BUDGET + bound } else { bound };
        let (result, took) = timed(f);
        match result {
            Err(e) if e.is_redis_error() => {}
            other => panic!("{what}: expected a Redis error, got {other:?}"),
        }
        assert!(took <= bound, "{what} took {took:?}; the bound is {bound:?}");
        slowest = slowest.max(took);
    };
    check("lock", &mut || lock.lock().map(|g| format!("{g:?}")));
    check("try_lock", &mut || lock.try_lock().map(|g| format!("{g:?}")));
    check("try_lock_for", &mut || lock.try_lock_for(30 * SECOND).map(|g| format!("{g:?}")));
    check("try_lock_until", &mut || {
        lock.try_lock_until(Instant::now() + 30 * SECOND).map(|g| format!("{g:?}"))
    });
    check("fenced lock", &mut || fenced.lock().map(|g| format!("{g:?}")));
    check("last_fencing_token", &mut || fenced.last_fencing_token().map(|t| format!("{t:?}")));
    check("is_locked", &mut || lock.is_locked().map(|v| v.to_string()));
    check("is_held_by_current_thread", &mut || lock.is_held_by_current_thread().map(|v| v.to_string()));
    check("hold_count", &mut || lock.hold_count().map(|v| v.to_string()));
    check("remaining_lease", &mut || lock.remaining_lease().map(|v| format!("{v:?}")));
    check("force_unlock", &mut || lock.force_unlock().map(|v| v.to_string()));
    let mut to_unlock = Some(to_unlock);
    check("guard.unlock", &mut || to_unlock.take().unwrap().unlock().map(|()| String::new()));
    let ((), took) = timed(|| drop(to_drop));
    assert!(took <= bound, "dropping a guard took {took:?}");
    slowest = slowest.max(took);
    assert_eq!(client.watched_locks(), 0);

    let ((), took) = timed(|| drop((lock, fenced, client)));
    assert!(took <= bound, "dropping the client took {took:?}");
    eprintln!(
        "black hole: slowest call {slowest:?}, bound {bound:?}; the waiter returned after {waiter_took:?}"
    );
    proxy.set(Fault::None);
    drop(held);
}

#[test]
fn lost_signals_fire_on_time_while_renewals_of_many_locks_hang() {
    // 1000 locks: ten renewal batches, each of which hangs for a timeout
    // while Redis is unreachable. `lost_signal` promises the loss "the
    // moment this client learns" it, noticed on time at the lease deadline.
    const WATCHDOG: Duration = Duration::from_millis(600);
    const LOCKS: usize = 1000;
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = Client::builder(proxy.url())
        .connect_timeout(Duration::from_millis(400))
        .command_timeout(Duration::from_millis(400))
        .watchdog_timeout(WATCHDOG)
        .build()
        .unwrap();
    let locks: Vec<Lock> = (0..LOCKS).map(|i| client.lock(&format!("many:{i}")).unwrap()).collect();
    let guards: Vec<LockGuard> = locks.iter().map(|l| l.lock().unwrap()).collect();
    let signals: Vec<_> = [0, LOCKS - 1].iter().map(|&i| guards[i].lost_signal()).collect();

    proxy.set(Fault::BlackholeAll);
    let dark_at = Instant::now();
    let mut late = Vec::new();
    for signal in &signals {
        let reason = signal.recv_timeout(30 * SECOND).expect("no lost signal");
        assert_eq!(reason, LostReason::LeaseExpired);
        late.push(dark_at.elapsed());
    }
    // Every deadline passes within one watchdog timeout of the black hole.
    let deadlines_passed = guards.iter().all(LockGuard::is_lost);
    proxy.set(Fault::None); // so that the guards' releases do not each time out
    let latest = late.into_iter().max().unwrap();
    assert!(deadlines_passed);
    assert!(
        latest <= WATCHDOG + SLACK,
        "lost signals fired {latest:?} into the black hole; the lease is {WATCHDOG:?}"
    );
}

#[test]
fn building_a_client_behind_a_black_hole_fails_in_time() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    proxy.set(Fault::BlackholeAll);
    let (result, took) = timed(|| {
        Client::builder(proxy.url()).connect_timeout(DARK_CONNECT).command_timeout(DARK_COMMAND).build()
    });
    let err = result.expect_err("built a client for a black hole");
    assert!(err.is_connection_error(), "{err:?}");
    assert!(took <= DARK_CONNECT + SLACK, "build took {took:?}");
}

// ---------------------------------------------------------------------------
// Acquisitions whose reply crosses a verification pass

/// The server's pub/sub connections, as `CLIENT LIST` lists them.
fn pubsub_connections(con: &mut redis::Connection) -> String {
    redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub").query(con).unwrap()
}

/// Holds a lock of `client` until its channel is listened on, so that the
/// client's pub/sub connection counts as one (`CLIENT LIST TYPE pubsub`).
fn anchor(client: &Client, con: &mut redis::Connection) -> LockGuard {
    let guard = client.lock("anchor").unwrap().lock().unwrap();
    assert!(eventually(5 * SECOND, || !pubsub_connections(con).is_empty()), "never subscribed");
    guard
}

/// Kills the client's pub/sub connection, which reconnects at once and has
/// every hold verified (a verification pass); returns once the pass has
/// begun: a new pub/sub connection is up and the pass has renewed the
/// [`anchor`] (whose lease is shortened first, so that the renewal shows).
fn start_verification_pass(con: &mut redis::Connection) {
    let pubsub_ids = pubsub_connections;
    let before = pubsub_ids(con);
    let _: i64 = redis::cmd("PEXPIRE").arg("anchor").arg(20_000).query(con).unwrap();
    let killed: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(con).unwrap();
    assert_eq!(killed, 1, "one pub/sub connection to kill");
    assert!(
        eventually(5 * SECOND, || {
            let now = pubsub_ids(con);
            !now.is_empty() && now != before
        }),
        "the pub/sub connection never came back"
    );
    assert!(
        eventually(5 * SECOND, || pttl(con, "anchor") > 25_000),
        "no verification pass renewed the anchor"
    );
}

/// An acquisition sent before a verification pass began whose reply comes
/// back after it, its lock gone meanwhile (the failover case: taken on the
/// old primary, which the new one never heard of), is found gone at its
/// registration. The call then contends again within its deadline and
/// returns a live guard, never one already lost (a watchdog lease) or one
/// whose key is gone unnoticed (a fixed lease, which no renewal checks).
#[test]
fn an_acquisition_found_gone_as_it_returns_contends_again() {
    for lease in [Lease::Watchdog, Lease::Fixed(10 * SECOND)] {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let mut con = server.conn();
        let client = Client::open(proxy.url()).unwrap();
        let lock = client.lock_with_lease("born", lease).unwrap();
        // The pool and the pub/sub connection are up.
        lock.lock().unwrap().unlock().unwrap();
        let _anchor = anchor(&client, &mut con);
        // The acquire runs; its reply is held back for 4 s, long enough for
        // the pass below to begin first even on a loaded machine (a pass
        // that began after the hold registered would check it too, but
        // after the guard was returned; CI's Valkey pass once saw 2 s
        // fall short). The test checks that the pass began in time.
        proxy.set(Fault::DelayReplies(4 * SECOND));
        let sent = Instant::now();
        let mut check = server.conn();
        let acquiring = spawn(move || {
            let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("never acquired");
            let returned = (guard.is_lost(), guard.lost_reason());
            let count: Option<String> =
                redis::cmd("HGET").arg("born").arg(guard.owner_id()).query(&mut check).unwrap();
            (returned, count, guard.unlock().map_err(|e| e.kind()))
        });
        assert!(eventually(5 * SECOND, || exists(&mut con, "born")), "the acquire never ran");
        proxy.set(Fault::None);
        // The lock vanishes, and a verification pass begins, before the
        // acquire's reply is back.
        let _: i64 = redis::cmd("DEL").arg("born").query(&mut con).unwrap();
        start_verification_pass(&mut con);
        assert!(
            sent.elapsed() < 4 * SECOND,
            "{lease:?}: the pass began after the reply was due: retry on a quieter machine"
        );
        let ((lost, reason), count, unlocked) = recv_within(&acquiring, 20 * SECOND, "acquiring thread");
        assert!(!lost, "{lease:?}: the guard was returned already lost ({reason:?})");
        assert_eq!(count.as_deref(), Some("1"), "{lease:?}: the guard's key is gone");
        assert_eq!(unlocked, Ok(()), "{lease:?}");
    }
}

/// A fixed-lease hold is checked by a verification pass (no renewal looks
/// at it): a lock gone across a reconnect is reported at once, not when the
/// lease runs out.
#[test]
fn a_verification_pass_tells_a_fixed_lease_holder_its_lock_is_gone() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    // A fair lock: no unlock channel of its own is listened on for it.
    let guard =
        client.fair_lock("fixed").unwrap().with_lease(Lease::Fixed(30 * SECOND)).unwrap().lock().unwrap();
    let lost = guard.lost_signal();
    let _anchor = anchor(&client, &mut con);
    // Gone without a message (as a failover to a replica that lacked it).
    let _: i64 = redis::cmd("DEL").arg("fixed").query(&mut con).unwrap();
    start_verification_pass(&mut con);
    let reason = lost.recv_timeout(5 * SECOND);
    assert_eq!(reason, Ok(LostReason::Gone), "a fixed-lease hold was not verified");
}
