//! The seams between kinds, and promises users rely on (issue 21, items 1,
//! 2 and 9), through the client against a real Redis:
//!
//! 1. a lock of one kind never grants, counts or deletes another kind's lock
//!    at the same name: every kind against every other kind, both orders,
//!    in one thread and across clients;
//! 2. stored counts (semaphore permits, latch counts) are exact over the
//!    whole 64-bit range, and a change past it is refused unchanged;
//! 3. no keyholder key of a reentrant lock outlives it: its clients listen
//!    on the unlock channel together with keyholder's listening channel
//!    (so that releases tell them from Redisson waiters without a key),
//!    and unsubscribe both when they stop.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{RedisServer, ServerExt, exists, hgetall};
use keyholder::{Client, ErrorKind};

/// The kinds that take a lock by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    Spin,
    Fair,
    Read,
    Write,
}

const KINDS: [Kind; 5] = [Kind::Lock, Kind::Spin, Kind::Fair, Kind::Read, Kind::Write];

impl Kind {
    /// The read-write lock's two sides share one hash with a `mode` field;
    /// the other three share Redisson's RLock hash.
    fn read_write(self) -> bool {
        matches!(self, Kind::Read | Kind::Write)
    }
}

/// A held guard, to unlock later.
type Held = Box<dyn FnOnce() -> keyholder::Result<()>>;

fn held<G: 'static>(guard: Option<G>, unlock: fn(G) -> keyholder::Result<()>) -> Option<Held> {
    guard.map(|g| Box::new(move || unlock(g)) as Held)
}

/// One `try_lock` of `name` as `kind`.
fn try_take(client: &Client, kind: Kind, name: &str) -> keyholder::Result<Option<Held>> {
    Ok(match kind {
        Kind::Lock => held(client.lock(name)?.try_lock()?, |g| g.unlock()),
        Kind::Spin => held(client.spin_lock(name)?.try_lock()?, |g| g.unlock()),
        Kind::Fair => held(client.fair_lock(name)?.try_lock()?, |g| g.unlock()),
        Kind::Read => held(client.read_write_lock(name)?.read().try_lock()?, |g| g.unlock()),
        Kind::Write => held(client.read_write_lock(name)?.write().try_lock()?, |g| g.unlock()),
    })
}

/// One blocking `lock()` of `name` as `kind` (it must not block on another
/// kind's lock: it is refused at once).
fn take(client: &Client, kind: Kind, name: &str) -> keyholder::Result<Held> {
    Ok(match kind {
        Kind::Lock => held(Some(client.lock(name)?.lock()?), |g| g.unlock()),
        Kind::Spin => held(Some(client.spin_lock(name)?.lock()?), |g| g.unlock()),
        Kind::Fair => held(Some(client.fair_lock(name)?.lock()?), |g| g.unlock()),
        Kind::Read => held(Some(client.read_write_lock(name)?.read().lock()?), |g| g.unlock()),
        Kind::Write => held(Some(client.read_write_lock(name)?.write().lock()?), |g| g.unlock()),
    }
    .unwrap())
}

fn force_unlock(client: &Client, kind: Kind, name: &str) -> keyholder::Result<bool> {
    match kind {
        Kind::Lock => client.lock(name)?.force_unlock(),
        Kind::Spin => client.spin_lock(name)?.force_unlock(),
        Kind::Fair => client.fair_lock(name)?.force_unlock(),
        Kind::Read => client.read_write_lock(name)?.read().force_unlock(),
        Kind::Write => client.read_write_lock(name)?.write().force_unlock(),
    }
}

fn hold_count(client: &Client, kind: Kind, name: &str) -> keyholder::Result<u32> {
    match kind {
        Kind::Lock => client.lock(name)?.hold_count(),
        Kind::Spin => client.spin_lock(name)?.hold_count(),
        Kind::Fair => client.fair_lock(name)?.hold_count(),
        Kind::Read => client.read_write_lock(name)?.read().hold_count(),
        Kind::Write => client.read_write_lock(name)?.write().hold_count(),
    }
}

fn assert_wrong_type<T>(result: keyholder::Result<T>, name: &str, what: &str) {
    match result {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::WrongType, "{what}: {e}");
            assert_eq!(e.key(), Some(name), "{what}: the key is named");
        }
        Ok(_) => panic!("{what}: not refused"),
    }
}

/// Every key of the database and its value, to see that nothing changed.
fn snapshot(con: &mut redis::Connection) -> BTreeMap<String, String> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.into_iter()
        .map(|key| {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(con).unwrap();
            (key, format!("{dump:?}"))
        })
        .collect()
}

#[test]
fn one_thread_never_holds_a_name_as_two_kinds() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let mut pairs = 0;
    for first in KINDS {
        for second in KINDS {
            // The read-write lock's own sides meet by its rules (a read
            // inside a write, no upgrade), tested in rwlock.rs.
            if first == second || (first.read_write() && second.read_write()) {
                continue;
            }
            pairs += 1;
            let name = format!("seam-{first:?}-{second:?}");
            let hold = try_take(&client, first, &name).unwrap().expect("free");
            let before = snapshot(&mut con);
            let what = format!("{second:?} on a held {first:?}");
            assert_wrong_type(try_take(&client, second, &name), &name, &what);
            assert_wrong_type(take(&client, second, &name), &name, &format!("blocking {what}"));
            // A count that would be the other kind's hold is refused. (Lock,
            // SpinLock and FairLock count one hash, as Redis sees it: their
            // hold_count is the same query; the write side's owner id has no
            // field in a plain hash, and its count is truly 0.)
            if second == Kind::Write && !first.read_write() {
                assert_eq!(hold_count(&client, second, &name).unwrap(), 0, "hold_count, {what}");
            } else if first.read_write() != second.read_write() {
                assert_wrong_type(hold_count(&client, second, &name), &name, &format!("hold_count, {what}"));
            }
            assert_eq!(hold_count(&client, first, &name).unwrap(), 1, "{what}: the first hold's count");
            assert_eq!(snapshot(&mut con), before, "{what}: Redis changed");
            hold().unwrap_or_else(|e| panic!("{what}: the first kind's unlock failed: {e}"));
            assert!(!exists(&mut con, &name), "{what}: not released");
            // Free again, the name takes the second kind.
            let hold = try_take(&client, second, &name).unwrap().expect("free after the release");
            hold().unwrap();
        }
    }
    assert_eq!(pairs, 18);
}

#[test]
fn across_clients_the_layouts_refuse_each_other_and_the_plain_kinds_exclude_each_other() {
    let server = RedisServer::start();
    let (holder, other) = (server.client(), server.client());
    let mut con = server.conn();
    for first in KINDS {
        for second in KINDS {
            if first.read_write() && second.read_write() {
                continue;
            }
            let name = format!("across-{first:?}-{second:?}");
            let hold = try_take(&holder, first, &name).unwrap().expect("free");
            let before = snapshot(&mut con);
            let what = format!("another client's {second:?} on a held {first:?}");
            if first.read_write() != second.read_write() {
                assert_wrong_type(try_take(&other, second, &name), &name, &what);
                assert_wrong_type(
                    force_unlock(&other, second, &name),
                    &name,
                    &format!("force unlock, {what}"),
                );
            } else {
                // Lock, SpinLock and FairLock share Redisson's hash, as
                // RLock, RSpinLock and RFairLock do: one lock among owners.
                assert!(try_take(&other, second, &name).unwrap().is_none(), "{what}: granted");
            }
            assert_eq!(snapshot(&mut con), before, "{what}: Redis changed");
            hold().unwrap_or_else(|e| panic!("{what}: the holder's unlock failed: {e}"));
            let hold = try_take(&other, second, &name).unwrap().expect("free after the release");
            hold().unwrap();
        }
    }
}

#[test]
fn a_java_reader_keeps_its_hold_when_a_keyholder_thread_tries_every_plain_kind() {
    // The issue's case: a thread reads `k` next to a Redisson reader; its
    // Lock, SpinLock and FairLock of `k` are refused, nothing is deleted, and
    // its read guard unlocks cleanly.
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let read = client.read_write_lock("k").unwrap().read().lock().unwrap();
    let java_reader = "9f1c2d3e-0000-4000-8000-00000000cafe:42";
    // A Redisson reader's hold: its field and its hold's timeout key.
    let _: () = redis::cmd("HINCRBY").arg("k").arg(java_reader).arg(1).query(&mut con).unwrap();
    let timeout = format!("{{k}}:{java_reader}:rwlock_timeout:1");
    let _: () = redis::cmd("SET").arg(timeout).arg(1).arg("PX").arg(60_000).query(&mut con).unwrap();
    let before = hgetall(&mut con, "k");
    for kind in [Kind::Lock, Kind::Spin, Kind::Fair] {
        assert_wrong_type(take(&client, kind, "k"), "k", &format!("{kind:?}"));
        assert_wrong_type(force_unlock(&client, kind, "k"), "k", &format!("{kind:?} force unlock"));
    }
    assert_eq!(hgetall(&mut con, "k"), before);
    read.unlock().unwrap();
    assert_eq!(
        hgetall(&mut con, "k").get(java_reader).map(String::as_str),
        Some("1"),
        "the Java reader's hold"
    );
    let e = client.lock("k").unwrap().try_lock().map(|g| g.is_some());
    assert_wrong_type(e, "k", "a Lock while the Java reader still reads");
}

// ---- item 2 ----------------------------------------------------------------

#[test]
fn semaphore_counts_are_exact_over_i64_and_past_it_refused_unchanged() {
    let server = RedisServer::start();
    let client = server.client();
    let mut con = server.conn();
    let pool = client.semaphore("pool").unwrap();
    assert_eq!(pool.add_permits(i64::MAX).unwrap(), i64::MAX);
    assert_eq!(pool.available_permits().unwrap(), i64::MAX);
    let stored: String = redis::cmd("GET").arg("pool").query(&mut con).unwrap();
    assert_eq!(stored, i64::MAX.to_string());
    for e in [pool.add_permits(1).unwrap_err(), pool.release(1).unwrap_err()] {
        assert_eq!(e.kind(), ErrorKind::CountOverflow, "{e}");
        assert!(e.is_count_overflow());
    }
    assert_eq!(pool.available_permits().unwrap(), i64::MAX, "a refused change changed the count");
    let permit = pool.try_acquire(2).unwrap().expect("plenty of permits");
    assert_eq!(pool.available_permits().unwrap(), i64::MAX - 2);
    drop(permit);
    assert_eq!(pool.available_permits().unwrap(), i64::MAX);
    assert_eq!(pool.drain_permits().unwrap(), i64::MAX);
    // The issue's other deltas: 10^17 + 1 and 2^53 + 1, and the bottom.
    for delta in [100_000_000_000_000_001, (1 << 53) + 1, i64::MIN] {
        let fresh = client.semaphore(&format!("pool-{delta}")).unwrap();
        assert_eq!(fresh.add_permits(delta).unwrap(), delta);
        assert_eq!(fresh.available_permits().unwrap(), delta);
    }
    let bottom = client.semaphore(&format!("pool-{}", i64::MIN)).unwrap();
    assert_eq!(bottom.add_permits(-1).unwrap_err().kind(), ErrorKind::CountOverflow);
    assert_eq!(bottom.available_permits().unwrap(), i64::MIN);
}

#[test]
fn permit_semaphore_counts_are_exact_and_their_sum_never_wraps() {
    let server = RedisServer::start();
    let client = server.client();
    let slots = client.permit_expirable_semaphore("slots").unwrap();
    assert_eq!(slots.add_permits(2).unwrap(), 2);
    let permit = slots.try_acquire(1).unwrap().expect("a permit");
    assert_eq!(slots.add_permits(i64::MAX - 1).unwrap(), i64::MAX);
    assert_eq!(slots.available_permits().unwrap(), i64::MAX);
    assert_eq!(slots.acquired_permits().unwrap(), 1);
    assert_eq!(slots.add_permits(1).unwrap_err().kind(), ErrorKind::CountOverflow);
    assert_eq!(slots.permits().unwrap_err().kind(), ErrorKind::CountOverflow, "available + held wrapped");
    assert_eq!(slots.add_permits(-1).unwrap(), i64::MAX - 1);
    drop(permit);
    assert_eq!(slots.available_permits().unwrap(), i64::MAX);
    assert_eq!(slots.permits().unwrap(), i64::MAX);
}

#[test]
fn a_latch_set_to_i64_max_counts_down_exactly() {
    let server = RedisServer::start();
    let client = server.client();
    let latch = client.count_down_latch("latch").unwrap();
    let top = i64::MAX.unsigned_abs();
    assert!(latch.try_set_count(top).unwrap());
    assert_eq!(latch.count_down().unwrap(), top - 1);
    assert_eq!(latch.count().unwrap(), top - 1);
    let near = client.count_down_latch("near").unwrap();
    assert!(near.try_set_count((1 << 53) + 3).unwrap());
    assert_eq!(near.count_down().unwrap(), (1 << 53) + 2);
    assert_eq!(near.count_down().unwrap(), (1 << 53) + 1);
    assert_eq!(near.count().unwrap(), (1 << 53) + 1);
    assert_eq!(latch.try_set_count(top + 1).unwrap_err().kind(), ErrorKind::InvalidArgument);
}

// ---- item 9 ----------------------------------------------------------------

fn own_keys(con: &mut redis::Connection, name: &str) -> Vec<String> {
    let mut keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("keyholder_lock_*{{{name}}}*")).query(con).unwrap();
    keys.sort();
    keys
}

/// How long after a lock's last release its clients may still listen on
/// its channels: a client's linger (100 ms) and what a loaded machine adds.
const LINGERED: Duration = Duration::from_secs(2);

/// keyholder's listening channel of lock `name` (see `src/names.rs`).
fn listening_of(name: &str) -> String {
    format!("keyholder_lock__listening:{{{name}}}")
}

/// Issue 38 (and issue 21, item 9): keyholder keeps no key to tell its
/// clients listening on the unlock channel from Redisson waiters (the
/// recent releasers' ZSET is gone): each client subscribes keyholder's
/// listening channel in the same command as the unlock channel, so both
/// counts are always equal with keyholder clients alone, and fall to 0
/// together once the clients stop listening. Once the last release is done
/// none of keyholder's keys of the lock is left, while the releasing client
/// still lingers on the channels or after.
#[test]
fn no_keyholder_key_outlives_the_last_release() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (a, b) = (server.client(), server.client());
    let (unlock, listening) = (common::channel_of("r"), listening_of("r"));
    // One client: a thread waits, is handed the lock, and releases while
    // its client still listens on the unlock channel (its linger).
    let guard = a.lock("r").unwrap().lock().unwrap();
    let waiter = {
        let a = a.clone();
        std::thread::spawn(move || a.lock("r").unwrap().lock().unwrap().unlock())
    };
    assert!(common::eventually(Duration::from_secs(5), || common::numsub(&mut con, &unlock) > 0));
    assert_eq!(common::numsub(&mut con, &listening), common::numsub(&mut con, &unlock));
    guard.unlock().unwrap();
    waiter.join().unwrap().unwrap();
    assert!(!exists(&mut con, "r"));
    assert_eq!(own_keys(&mut con, "r"), Vec::<String>::new(), "keyholder keys outlived the lock");
    // The client stops listening on both channels, and nothing is left.
    assert!(common::eventually(LINGERED, || common::numsub(&mut con, &unlock) == 0));
    assert_eq!(common::numsub(&mut con, &listening), 0, "the listening channel outlived the unlock channel");
    assert_eq!(own_keys(&mut con, "r"), Vec::<String>::new(), "keyholder keys outlived the lock");
    // Two clients taking turns through the queue: after the last release,
    // none of keyholder's keys of the lock is left.
    for round in 0..3 {
        let guard = a.lock("r").unwrap().lock().unwrap();
        let waiter = {
            let b = b.clone();
            std::thread::spawn(move || b.lock("r").unwrap().lock().unwrap().unlock())
        };
        assert!(common::eventually(Duration::from_secs(5), || {
            let queued: i64 = redis::cmd("ZCARD").arg("keyholder_lock_queue:{r}").query(&mut con).unwrap();
            queued > 0
        }));
        // B's client listens (A's too, once its hold is old enough), each
        // on both channels at once.
        let listeners = common::numsub(&mut con, &unlock);
        assert!(listeners >= 1, "round {round}");
        assert_eq!(common::numsub(&mut con, &listening), listeners, "round {round}");
        guard.unlock().unwrap();
        waiter.join().unwrap().unwrap();
        assert!(!exists(&mut con, "r"));
        assert_eq!(
            own_keys(&mut con, "r"),
            Vec::<String>::new(),
            "round {round}: keyholder keys outlived the lock"
        );
        assert!(common::eventually(LINGERED, || common::numsub(&mut con, &unlock) == 0), "round {round}");
        assert_eq!(common::numsub(&mut con, &listening), 0, "round {round}");
        assert_eq!(
            own_keys(&mut con, "r"),
            Vec::<String>::new(),
            "round {round}: keyholder keys outlived the lock"
        );
    }
}

/// Every lock-like kind answers the same accessors (issue 22, item 3): the
/// guard's, and the handle's remaining lease.
#[test]
fn every_kind_has_the_same_accessors() {
    let server = RedisServer::start();
    let client = server.client();
    let rw = client.read_write_lock("acc:rw").unwrap();
    let spin = client.spin_lock("acc:s").unwrap().lock().unwrap();
    assert!(spin.is_replicated() && !spin.is_lost() && spin.fencing_token().is_none());
    assert!(spin.owner_id().starts_with(client.id()));
    let fair = client.fair_lock("acc:f").unwrap().fenced().lock().unwrap();
    assert!(fair.is_replicated() && fair.fencing_token().is_some());
    let read = rw.read().lock().unwrap();
    assert!(read.is_replicated() && read.fencing_token().is_none() && read.lost_reason().is_none());
    drop(read);
    let write = rw.write().fenced().lock().unwrap();
    assert!(write.owner_id().ends_with(":write") && write.fencing_token().is_some());

    let watchdog = client.watchdog_timeout();
    let leases = [
        client.spin_lock("acc:s").unwrap().remaining_lease().unwrap(),
        client.fair_lock("acc:f").unwrap().remaining_lease().unwrap(),
        rw.read().remaining_lease().unwrap(),
        rw.write().remaining_lease().unwrap(),
    ];
    for lease in leases {
        assert!(lease.is_some_and(|l| l <= watchdog && !l.is_zero()), "{lease:?}");
    }
    assert_eq!(client.fair_lock("acc:none").unwrap().remaining_lease().unwrap(), None);
    drop((spin, fair, write));
}
