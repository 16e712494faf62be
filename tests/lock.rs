//! API basics of a lock handle: the acquire forms, inspection, force unlock,
//! the wire format, and refusal of bad input and bad configuration.
//!
//! A test binary of its own, not a module of `tests/suite`: .ci/test runs
//! it again in the default build (without `tls`, `rediss://` is refused).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{
    RedisServer, ServerExt, command_calls, exists, free_port, hgetall, pttl, recv_within, spawn, timed,
    wait_subscribed,
};
use keyholder::{Client, Lease, Lock};

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn try_lock_is_none_while_another_client_holds() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let guard = a.lock("busy").unwrap().lock().unwrap();

    let lock_b = b.lock("busy").unwrap();
    let (outcome, took) = timed(|| lock_b.try_lock().unwrap());
    assert!(outcome.is_none());
    assert!(took < SECOND, "try_lock waited {took:?}");
    assert_eq!(b.subscribed_channels(), 0, "a one-shot try must not subscribe");

    guard.unlock().unwrap();
    assert!(lock_b.try_lock().unwrap().is_some());
}

#[test]
fn try_lock_for_gives_up_after_roughly_the_wait() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let _guard = a.lock("busy").unwrap().lock().unwrap();
    let lock_b = b.lock("busy").unwrap();

    let wait = Duration::from_millis(300);
    let (outcome, took) = timed(|| lock_b.try_lock_for(wait).unwrap());
    assert!(outcome.is_none());
    assert!(took >= wait, "gave up early, after {took:?}");
    assert!(took < wait + 2 * SECOND, "gave up late, after {took:?}");
    assert_eq!(b.subscribed_channels(), 0, "the timed-out waiter left its subscription");

    // A zero wait still makes one attempt.
    let (outcome, took) = timed(|| lock_b.try_lock_for(Duration::ZERO).unwrap());
    assert!(outcome.is_none());
    assert!(took < SECOND);
}

#[test]
fn try_lock_for_gets_the_lock_when_it_is_freed_in_time() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let guard = a.lock("freed").unwrap().lock().unwrap();

    let lock_b = b.lock("freed").unwrap();
    let waiter = spawn(move || {
        let (guard, took) = timed(|| lock_b.try_lock_for(Duration::from_secs(10)).unwrap());
        (guard.map(|g| g.unlock().is_ok()), took)
    });
    wait_subscribed(&b, 1);
    guard.unlock().unwrap();
    let (outcome, took) = recv_within(&waiter, Duration::from_secs(10), "waiter");
    assert_eq!(outcome, Some(true), "the waiter did not get the lock");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn try_lock_until_honours_the_deadline() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let lock_b = b.lock("until").unwrap();

    // A deadline in the past still makes one attempt.
    let past = Instant::now();
    lock_b.try_lock_until(past).unwrap().expect("a free lock with a past deadline").unlock().unwrap();

    let guard = a.lock("until").unwrap().lock().unwrap();
    let (outcome, took) = timed(|| lock_b.try_lock_until(Instant::now()).unwrap());
    assert!(outcome.is_none());
    assert!(took < SECOND);

    let deadline = Instant::now() + Duration::from_millis(300);
    let outcome = lock_b.try_lock_until(deadline).unwrap();
    let now = Instant::now();
    assert!(outcome.is_none());
    assert!(now >= deadline, "gave up before the deadline");
    assert!(now < deadline + 2 * SECOND, "gave up {:?} after the deadline", now - deadline);

    let waiter = spawn(move || {
        lock_b.try_lock_until(Instant::now() + Duration::from_secs(10)).unwrap().map(|g| g.unlock().is_ok())
    });
    wait_subscribed(&b, 1);
    guard.unlock().unwrap();
    assert_eq!(recv_within(&waiter, Duration::from_secs(10), "waiter"), Some(true));
}

#[test]
fn inspection_reports_holder_count_and_lease() {
    let server = RedisServer::start();
    let (a, b) = (server.client(), server.client());
    let lock = a.lock("inspect").unwrap();
    assert!(!lock.is_locked().unwrap());
    assert!(!lock.is_held_by_current_thread().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert_eq!(lock.remaining_lease().unwrap(), None);

    let guard = lock.lock().unwrap();
    assert!(lock.is_locked().unwrap());
    assert!(lock.is_held_by_current_thread().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 1);
    let lease = lock.remaining_lease().unwrap().expect("a held lock has a lease");
    assert!(lease > Duration::from_secs(25) && lease <= Duration::from_secs(30), "{lease:?}");
    assert!(!guard.is_lost());
    assert_eq!(guard.lost_reason(), None);
    assert_eq!(guard.name(), "inspect");
    assert_eq!(guard.lease(), Lease::Watchdog);

    // Another thread of the same client, and another client, see a holder
    // that is not them.
    let same_client = lock.clone();
    let seen = spawn(move || {
        (
            same_client.is_locked().unwrap(),
            same_client.is_held_by_current_thread().unwrap(),
            same_client.hold_count().unwrap(),
        )
    });
    assert_eq!(recv_within(&seen, 5 * SECOND, "other thread"), (true, false, 0));
    let other = b.lock("inspect").unwrap();
    assert!(other.is_locked().unwrap());
    assert!(!other.is_held_by_current_thread().unwrap());
    assert_eq!(other.hold_count().unwrap(), 0);
    assert!(other.remaining_lease().unwrap().is_some());

    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
    assert!(!lock.is_held_by_current_thread().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    assert_eq!(lock.remaining_lease().unwrap(), None);
}

#[test]
fn fixed_leases_per_handle_and_per_call_set_the_ttl_and_skip_the_watchdog() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();

    let per_handle = client.lock_with_lease("fixed", Lease::Fixed(Duration::from_secs(5))).unwrap();
    assert_eq!(per_handle.lease(), Lease::Fixed(Duration::from_secs(5)));
    let guard = per_handle.lock().unwrap();
    assert_eq!(guard.lease(), Lease::Fixed(Duration::from_secs(5)));
    let ttl = pttl(&mut con, "fixed");
    assert!(ttl > 4_000 && ttl <= 5_000, "PTTL {ttl}");
    assert_eq!(client.watched_locks(), 0, "a fixed lease must not be renewed");
    guard.unlock().unwrap();

    let watchdog = client.lock("fixed").unwrap();
    let per_call = watchdog.with_lease(Lease::Fixed(Duration::from_secs(7))).unwrap();
    assert_eq!(watchdog.lease(), Lease::Watchdog, "with_lease changed the original handle");
    let guard = per_call.try_lock().unwrap().unwrap();
    let ttl = pttl(&mut con, "fixed");
    assert!(ttl > 6_000 && ttl <= 7_000, "PTTL {ttl}");
    assert_eq!(client.watched_locks(), 0);
    guard.unlock().unwrap();

    let guard = watchdog.lock().unwrap();
    assert_eq!(client.watched_locks(), 1);
    guard.unlock().unwrap();
    assert_eq!(client.watched_locks(), 0);
}

#[test]
fn force_unlock_frees_the_lock_and_wakes_a_waiter() {
    let server = RedisServer::start();
    let (a, b, admin) = (server.client(), server.client(), server.client());
    let mut con = server.conn();
    let guard = a.lock("stuck").unwrap().lock().unwrap();

    let lock_b = b.lock("stuck").unwrap();
    let (acquired_tx, acquired_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let waiter = spawn(move || {
        let guard = lock_b.lock().unwrap();
        acquired_tx.send(guard.owner_id().to_owned()).unwrap();
        // Hold the lock until the main thread has checked it.
        release_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        guard.unlock().is_ok()
    });
    wait_subscribed(&b, 1);

    // The holder's lease is 30 s: only the unlock message can wake the waiter
    // this soon.
    let forced_at = Instant::now();
    assert!(admin.lock("stuck").unwrap().force_unlock().unwrap());
    let new_owner = recv_within(&acquired_rx, 10 * SECOND, "waiter after the force unlock");
    let woke_after = forced_at.elapsed();
    assert!(woke_after < 3 * SECOND, "the waiter took {woke_after:?} after the force unlock");

    // The former holder's release fails as not-owner, and leaves the new
    // holder's lock alone.
    let holder_before = hgetall(&mut con, "stuck");
    assert_eq!(holder_before.keys().collect::<Vec<_>>(), [&new_owner]);
    let err = guard.unlock().unwrap_err();
    assert!(err.is_not_owner() || err.is_lock_lost(), "{err:?}");
    assert_eq!(hgetall(&mut con, "stuck"), holder_before, "a non-owner's unlock changed the lock");
    assert!(pttl(&mut con, "stuck") > 0);

    release_tx.send(()).unwrap();
    assert!(recv_within(&waiter, 10 * SECOND, "waiter"));
    assert!(!exists(&mut con, "stuck"));
    assert!(!admin.lock("stuck").unwrap().force_unlock().unwrap(), "nothing left to force");
}

#[test]
fn force_unlock_wakes_a_waiting_thread_of_the_holders_own_client() {
    // The holder is a stuck thread of the same client (e.g. a thread that
    // leaked its guard); an administrator force-unlocks the lock. The other
    // thread of that client that waits for the lock must get it promptly,
    // not only when the stuck holder's 30 s lease would have run out.
    let server = RedisServer::start();
    let client = server.client();
    let admin = server.client();
    let lock = client.lock("own").unwrap();
    let guard = lock.lock().unwrap();

    let waiting = lock.clone();
    let (ready_tx, ready_rx) = mpsc::channel();
    let waiter = spawn(move || {
        assert!(waiting.try_lock().unwrap().is_none());
        ready_tx.send(()).unwrap();
        waiting.try_lock_for(Duration::from_secs(8)).unwrap().map(|g| g.unlock().is_ok())
    });
    recv_within(&ready_rx, 5 * SECOND, "waiter start");
    std::thread::sleep(Duration::from_millis(200)); // let it park (not needed for correctness)

    let forced_at = Instant::now();
    assert!(admin.lock("own").unwrap().force_unlock().unwrap());
    let outcome = recv_within(&waiter, 15 * SECOND, "same-client waiter");
    let took = forced_at.elapsed();
    assert_eq!(outcome, Some(true), "the waiter did not get the lock within 8 s of the force unlock");
    assert!(took < 3 * SECOND, "the waiter got the lock {took:?} after the force unlock");
    drop(guard);
}

#[test]
fn explicit_unlock_returns_ok_and_frees_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("explicit").unwrap();
    let guard = lock.lock().unwrap();
    assert!(format!("{guard:?}").contains("explicit"));
    guard.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
    assert_eq!(client.watched_locks(), 0);

    // Dropping releases too.
    {
        let _guard = lock.lock().unwrap();
        assert!(lock.is_locked().unwrap());
    }
    assert!(!lock.is_locked().unwrap());
}

fn is_v4_uuid(id: &str) -> bool {
    let bytes = id.as_bytes();
    id.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| bytes[i] == b'-')
        && id.chars().enumerate().all(|(i, c)| [8, 13, 18, 23].contains(&i) || c.is_ascii_hexdigit())
        && bytes[14] == b'4'
        && matches!(bytes[19], b'8' | b'9' | b'a' | b'b' | b'A' | b'B')
}

#[test]
fn the_wire_format_is_redissons() {
    let server = RedisServer::start();
    let client = server.client();
    let other = server.client();
    let mut con = server.conn();
    assert!(is_v4_uuid(client.id()), "client id {} is not a v4 UUID", client.id());
    assert_ne!(client.id(), other.id(), "two clients share an id");
    assert_eq!(client.clone().id(), client.id(), "clones must share the client id");

    let lock = client.lock("orders:42").unwrap();
    let guard = lock.lock().unwrap();
    let kind: String = redis::cmd("TYPE").arg("orders:42").query(&mut con).unwrap();
    assert_eq!(kind, "hash", "the lock key is the unprefixed name, a hash");
    let fields = hgetall(&mut con, "orders:42");
    assert_eq!(fields.len(), 1, "{fields:?}");
    let (field, value) = fields.iter().next().unwrap();
    assert_eq!(value, "1");
    assert_eq!(field, guard.owner_id());
    let thread = field.strip_prefix(&format!("{}:", client.id())).expect("field is <client-id>:<thread>");
    let thread_id: u64 = thread.parse().expect("the thread id is a decimal number");
    let ttl = pttl(&mut con, "orders:42");
    assert!(ttl > 25_000 && ttl <= 30_000, "PTTL {ttl}, expected about the 30 s watchdog timeout");

    let again = lock.lock().unwrap();
    assert_eq!(hgetall(&mut con, "orders:42").get(guard.owner_id()).map(String::as_str), Some("2"));
    drop(again);
    drop(guard);
    assert!(!exists(&mut con, "orders:42"));

    // Another thread of the same client is another owner with the same
    // client id and its own number.
    let lock2 = lock.clone();
    let owner = spawn(move || lock2.lock().unwrap().owner_id().to_owned());
    let owner = recv_within(&owner, 5 * SECOND, "other thread");
    let other_thread: u64 = owner.strip_prefix(&format!("{}:", client.id())).unwrap().parse().unwrap();
    assert_ne!(other_thread, thread_id);
}

#[test]
fn invalid_names_and_leases_are_refused_before_any_io() {
    let mut server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let too_long = "x".repeat(keyholder::MAX_NAME_LEN + 1);
    let bad_names = ["", too_long.as_str(), "a\nb", "nul\0", "tab\there", "del\x7f", "\x1b[31m"];
    let bad_leases = [
        Lease::Fixed(Duration::ZERO),
        Lease::Fixed(Duration::from_micros(999)),
        Lease::Fixed(keyholder::MAX_LEASE + SECOND),
        Lease::Fixed(Duration::from_secs(31 * 24 * 3600)),
    ];
    let valid = client.lock("valid").unwrap();

    let check_all = |client: &Client, valid: &Lock| {
        for name in bad_names {
            let (result, took) = timed(|| client.lock(name));
            assert!(result.unwrap_err().is_invalid(), "name {name:?} was accepted");
            assert!(took < SECOND);
            assert!(client.lock_with_lease(name, Lease::Watchdog).unwrap_err().is_invalid());
        }
        for lease in bad_leases {
            assert!(client.lock_with_lease("valid", lease).unwrap_err().is_invalid(), "{lease:?}");
            assert!(valid.with_lease(lease).unwrap_err().is_invalid(), "{lease:?}");
        }
    };

    let before = command_calls(&mut con);
    check_all(&client, &valid);
    assert_eq!(command_calls(&mut con), before, "refusing bad input sent commands to Redis");

    // Boundaries are accepted (still no I/O: handles are free).
    client.lock(&"x".repeat(keyholder::MAX_NAME_LEN)).unwrap();
    client.lock("ключ {unicode} ✓").unwrap();
    client.lock_with_lease("valid", Lease::Fixed(keyholder::MIN_LEASE)).unwrap();
    client.lock_with_lease("valid", Lease::Fixed(keyholder::MAX_LEASE)).unwrap();
    assert_eq!(command_calls(&mut con), before);

    // With Redis gone, the refusals are the same typed errors, at once: no
    // connection was attempted.
    server.stop();
    check_all(&client, &valid);
}

#[test]
fn builder_settings_are_validated_before_any_io() {
    // Nobody listens on this port: any I/O would fail with a connection
    // error, not an invalid-configuration one.
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let base = || Client::builder(url.clone()).connect_timeout(Duration::from_secs(2));
    let mut bad = vec![
        ("pool size 0", base().pool_max_size(0)),
        ("watchdog 29 ms", base().watchdog_timeout(Duration::from_millis(29))),
        ("watchdog 0", base().watchdog_timeout(Duration::ZERO)),
        ("watchdog > 30 days", base().watchdog_timeout(keyholder::MAX_LEASE + SECOND)),
        ("connect timeout 0", base().connect_timeout(Duration::ZERO)),
        ("command timeout 0", base().command_timeout(Duration::ZERO)),
        ("outage budget > 1 h", base().outage_budget(Duration::from_secs(3601))),
        ("bad url", Client::builder("not a url")),
    ];
    if !cfg!(feature = "tls") {
        bad.push(("TLS without the feature", Client::builder("rediss://127.0.0.1:6380/")));
    }
    for (what, builder) in bad {
        let (result, took) = timed(|| builder.build());
        let err = result.expect_err(what);
        assert!(err.is_invalid(), "{what}: {err:?}");
        assert!(took < SECOND, "{what}: took {took:?}");
    }

    // The boundary values build against a live server.
    let server = RedisServer::start();
    let client = server.builder().pool_max_size(1).watchdog_timeout(keyholder::MIN_WATCHDOG_TIMEOUT).build();
    let client = client.unwrap();
    assert_eq!(client.watchdog_timeout(), Duration::from_millis(30));
    let lock = client.lock("boundary").unwrap();
    // A 30 ms lease is renewed every 10 ms; a loaded machine may stall the
    // watchdog past it, and then the release finds the lock lost, as it
    // must. Either way the lock was taken and is free afterwards.
    match lock.lock().unwrap().unlock() {
        Ok(()) => {}
        Err(e) => assert!(e.is_lock_lost(), "{e:?}"),
    }
    assert!(lock.try_lock().unwrap().is_some(), "the boundary lock is free again");
}

#[test]
fn the_default_watchdog_timeout_is_30_seconds() {
    let server = RedisServer::start();
    let client = Client::open(server.url()).unwrap();
    assert_eq!(client.watchdog_timeout(), Duration::from_secs(30));
}

#[test]
fn a_key_of_another_type_at_the_lock_name_is_refused_and_left_untouched() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let _: () = redis::cmd("SET").arg("taken").arg("foreign").query(&mut con).unwrap();
    let lock = client.lock("taken").unwrap();

    assert!(lock.lock().unwrap_err().is_wrong_type());
    assert!(lock.try_lock().unwrap_err().is_wrong_type());
    assert!(lock.try_lock_for(Duration::from_millis(200)).unwrap_err().is_wrong_type());
    assert!(lock.try_lock_until(Instant::now() + SECOND).unwrap_err().is_wrong_type());
    assert!(lock.is_locked().unwrap_err().is_wrong_type());
    assert!(lock.is_held_by_current_thread().unwrap_err().is_wrong_type());
    assert!(lock.hold_count().unwrap_err().is_wrong_type());
    assert!(lock.remaining_lease().unwrap_err().is_wrong_type());
    assert!(lock.force_unlock().unwrap_err().is_wrong_type());
    let fixed = lock.with_lease(Lease::Fixed(SECOND)).unwrap();
    assert!(fixed.try_lock().unwrap_err().is_wrong_type());

    let value: String = redis::cmd("GET").arg("taken").query(&mut con).unwrap();
    assert_eq!(value, "foreign");
    assert_eq!(pttl(&mut con, "taken"), -1, "the foreign key got a TTL");
    assert_eq!(client.subscribed_channels(), 0);
    assert_eq!(client.watched_locks(), 0);

    // Nothing local was left behind: once the key is gone the lock works.
    let _: i64 = redis::cmd("DEL").arg("taken").query(&mut con).unwrap();
    lock.lock().unwrap().unlock().unwrap();

    // Other types too.
    let _: i64 = redis::cmd("SADD").arg("set").arg("m").query(&mut con).unwrap();
    assert!(client.lock("set").unwrap().try_lock().unwrap_err().is_wrong_type());
    let members: Vec<String> = redis::cmd("SMEMBERS").arg("set").query(&mut con).unwrap();
    assert_eq!(members, ["m"]);
}

#[test]
fn client_and_lock_are_clone_send_sync() {
    fn assert_shareable<T: Clone + Send + Sync + 'static>() {}
    assert_shareable::<Client>();
    assert_shareable::<Lock>();
    fn assert_error<T: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<keyholder::Error>();
}
