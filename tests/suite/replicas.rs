//! Replica acknowledgement (`ClientBuilder::replica_acks`): every write of a
//! lock waits until a real replica (`redis-server --replicaof`) has it, and
//! not reaching it is never silent: a flag on the guard, or, when required,
//! an error that gives the lock back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, eventually, exists, hgetall, recv_within, wait_subscribed};
use keyholder::Client;
use std::sync::mpsc::{Receiver, sync_channel as bounded};

const SECOND: Duration = Duration::from_secs(1);
const ACK_WAIT: Duration = Duration::from_millis(300);

/// Renewals every 667 ms, each up to `ACK_WAIT` and a server tick longer
/// when the replica is gone: a renewal sent in time is heard before the
/// lease it extends runs out (a renewal heard after it cannot save the
/// hold: the deadline has fired).
fn acked_client(primary: &RedisServer, required: bool) -> Client {
    Client::builder(primary.url())
        .connect_timeout(2 * SECOND)
        .command_timeout(2 * SECOND)
        .watchdog_timeout(2 * SECOND)
        .replica_acks(1, ACK_WAIT)
        .replica_acks_required(required)
        .build()
        .unwrap()
}

#[test]
fn an_acknowledged_lock_is_on_the_replica_when_the_call_returns() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let client = acked_client(&primary, true);
    let lock = client.lock("acked").unwrap();
    let guard = lock.lock().unwrap();
    assert!(guard.is_replicated());
    // WAIT returned: the replica has the hold already, as a failover to it
    // would find it.
    let on_replica = hgetall(&mut replica.conn(), "acked");
    assert_eq!(on_replica.get(guard.owner_id()).map(String::as_str), Some("1"));
    // Renewals are acknowledged too.
    std::thread::sleep(Duration::from_millis(700));
    assert!(guard.is_replicated() && !guard.is_lost());
    guard.unlock().unwrap();
    assert!(!exists(&mut replica.conn(), "acked"), "the release did not reach the replica");
}

#[test]
fn without_the_replica_the_guard_says_so() {
    let primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&primary);
    let client = acked_client(&primary, false);
    let lock = client.lock("unacked").unwrap();
    let guard = lock.lock().unwrap();
    assert!(guard.is_replicated());
    replica.stop();
    // The next renewal (every 667 ms) is not acknowledged: the guard says
    // so, and the hold itself is fine.
    assert!(eventually(5 * SECOND, || !guard.is_replicated()), "the missing replica went unnoticed");
    assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
    guard.unlock().unwrap();
    let (again, took) = {
        let started = Instant::now();
        (lock.lock().unwrap(), started.elapsed())
    };
    assert!(!again.is_replicated(), "an unacknowledged acquisition looked replicated");
    assert!(took >= ACK_WAIT, "the acquisition did not wait for the replica ({took:?})");
    again.unlock().unwrap();
}

#[test]
fn required_acknowledgements_refuse_and_give_the_lock_back() {
    let primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&primary);
    let client = acked_client(&primary, true);
    let lock = client.lock("required").unwrap();
    lock.lock().unwrap().unlock().unwrap();
    replica.stop();
    let err = lock.try_lock().expect_err("acquired without the replica");
    assert!(err.is_replica_acks(), "{err:?}");
    assert!(!exists(&mut primary.conn(), "required"), "the refused hold was not given back");
    let other = Client::open(primary.url()).unwrap();
    assert!(other.lock("required").unwrap().try_lock().unwrap().is_some(), "the lock is not free");
}

/// The client of `acked_client`, with local hand-offs for as long as a
/// test needs (a release hands the lock to a queued thread of its client).
fn handing_client(primary: &RedisServer, required: bool) -> Client {
    Client::builder(primary.url())
        .connect_timeout(2 * SECOND)
        .command_timeout(2 * SECOND)
        .watchdog_timeout(2 * SECOND)
        .replica_acks(1, ACK_WAIT)
        .replica_acks_required(required)
        .fairness_window(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// What a waiting thread's acquisition came to: `Ok(replicated)` for a
/// guard (`is_replicated`), or the error's kind. The thread keeps its guard
/// until `done` is dropped, then releases it.
type Outcome = Result<bool, keyholder::ErrorKind>;

fn wait_in_thread(
    acquire: impl FnOnce() -> Result<Option<Box<dyn IsReplicated>>, keyholder::Error> + Send + 'static,
) -> (Receiver<Outcome>, std::sync::mpsc::SyncSender<()>) {
    let (done_tx, done_rx) = bounded::<()>(1);
    let (tx, rx) = bounded(1);
    std::thread::spawn(move || match acquire() {
        Ok(Some(guard)) => {
            tx.send(Ok(guard.replicated())).unwrap();
            let _ = done_rx.recv();
        }
        Ok(None) => panic!("the waiter gave up"),
        Err(e) => tx.send(Err(e.kind())).unwrap(),
    });
    (rx, done_tx)
}

/// The guards' `is_replicated`, for `wait_in_thread`.
trait IsReplicated {
    fn replicated(&self) -> bool;
}

impl IsReplicated for keyholder::LockGuard {
    fn replicated(&self) -> bool {
        self.is_replicated()
    }
}

impl IsReplicated for keyholder::FairLockGuard {
    fn replicated(&self) -> bool {
        self.is_replicated()
    }
}

fn hlen(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("HLEN").arg(key).query(con).unwrap()
}

/// Issue 21 item 7: a lock that another client's release grants to a queued
/// client, or that a release hands to another thread of its own client,
/// carries the acknowledgement of the write that made it; when it is
/// required, an unacknowledged one is refused and given back, as a fresh
/// acquisition is.
#[test]
fn a_granted_or_handed_over_lock_carries_its_acknowledgement() {
    let primary = RedisServer::start();
    for required in [false, true] {
        for how in ["granted", "handed", "fair"] {
            let mut replica = RedisServer::start_replica_of(&primary);
            let name = format!("{how}-{required}");
            let holder = handing_client(&primary, required);
            let waiter = if how == "handed" { holder.clone() } else { handing_client(&primary, required) };
            let started = Instant::now();
            let (outcome, done, released) = if how == "fair" {
                let guard = holder.fair_lock(&name).unwrap().lock().unwrap();
                assert!(guard.is_replicated());
                let lock = waiter.fair_lock(&name).unwrap();
                let (outcome, done) =
                    wait_in_thread(move || Ok(Some(Box::new(lock.lock()?) as Box<dyn IsReplicated>)));
                // Queued with a grant entry: the release hands it over.
                let grants = format!("keyholder_fair_grants:{{{name}}}");
                assert!(eventually(5 * SECOND, || hlen(&mut primary.conn(), &grants) == 1), "never queued");
                replica.stop();
                (outcome, done, guard.unlock())
            } else {
                let guard = holder.lock(&name).unwrap().lock().unwrap();
                assert!(guard.is_replicated());
                let lock = waiter.lock(&name).unwrap();
                let (outcome, done) =
                    wait_in_thread(move || Ok(Some(Box::new(lock.lock()?) as Box<dyn IsReplicated>)));
                if how == "handed" {
                    // Queued behind the holder in its own client.
                    wait_subscribed(&holder, 1);
                } else {
                    let grants = format!("keyholder_lock_grants:{{{name}}}");
                    assert!(
                        eventually(5 * SECOND, || hlen(&mut primary.conn(), &grants) == 1),
                        "never queued"
                    );
                }
                replica.stop();
                (outcome, done, guard.unlock())
            };
            let outcome = recv_within(&outcome, 10 * SECOND, "the waiter's acquisition");
            println!(
                "{how}, required {required}: release {released:?}, waiter {outcome:?} ({:?})",
                started.elapsed()
            );
            if required {
                // The release happened, unacknowledged; the new holder
                // refuses the lock and gives it back.
                assert!(released.as_ref().is_err_and(keyholder::Error::is_replica_acks), "{released:?}");
                assert_eq!(outcome, Err(keyholder::ErrorKind::ReplicaAcks), "{how}: refused hold");
                assert!(!exists(&mut primary.conn(), &name), "{how}: the refused hold was not given back");
            } else {
                released.unwrap();
                assert_eq!(outcome, Ok(false), "{how}: an unacknowledged lock looked replicated");
                assert!(exists(&mut primary.conn(), &name));
            }
            drop(done);
            assert!(eventually(5 * SECOND, || !exists(&mut primary.conn(), &name)), "{how}: never released");
        }
    }
}

/// The ids of the server's pub/sub connections.
/// The ids of `client`'s pub/sub connections (every client's subscribes to
/// invalidations, `pubsub/tracking.rs`).
fn pubsub_ids(con: &mut redis::Connection, client: &Client) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub").query(con).unwrap();
    let name = format!(" name=keyholder:{}:pubsub ", client.id());
    list.lines()
        .filter(|l| l.contains(&name))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")).map(str::to_owned))
        .collect()
}

/// Issue 21 item 8, without the sentinels' timing: an acquisition whose
/// reply is held back by `WAIT` while the client verifies every hold (as it
/// does when it moves to a new primary) registers its hold after that pass
/// looked. Its lock is then gone (deleted here, as a failover to a replica
/// that lacked it loses it): the hold is verified when the reply arrives,
/// found gone, and never handed out: the call contends again and returns a
/// hold taken afresh (issue 35 item 3), whose release succeeds; never a
/// guard already lost, never an unannounced `NotOwner`.
#[test]
fn an_acquisition_in_flight_across_a_verification_pass_is_verified_when_it_returns() {
    let primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&primary);
    let wait = SECOND;
    let client = Client::builder(primary.url())
        .connect_timeout(2 * SECOND)
        .command_timeout(3 * wait)
        .replica_acks(1, wait)
        .build()
        .unwrap();
    // The client's pub/sub connection (opened for a waiting thread), whose
    // reconnection has every hold verified.
    let other = Client::open(primary.url()).unwrap();
    let busy = other.lock("busy").unwrap().lock().unwrap();
    let waiting = client.lock("busy").unwrap();
    let waited = std::thread::spawn(move || waiting.lock().map(drop));
    let mut con = primary.conn();
    assert!(eventually(5 * SECOND, || pubsub_ids(&mut con, &client).len() == 1), "no pub/sub connection");
    let before = pubsub_ids(&mut con, &client);
    replica.stop();

    let lock = client.lock("in-flight").unwrap();
    let (tx, rx) = bounded(1);
    let started = Instant::now();
    std::thread::spawn(move || {
        let guard = lock.lock().unwrap();
        let returned = started.elapsed();
        let lost = guard.lost_reason();
        tx.send((returned, lost, guard.unlock().map_err(|e| e.kind()))).unwrap();
    });
    // The acquire script ran; its reply waits for the replica that is gone.
    assert!(eventually(wait / 2, || exists(&mut con, "in-flight")), "the acquire did not run");
    // The lock is lost meanwhile, and a verification pass runs (the pub/sub
    // connection is replaced) before the reply arrives.
    let _: i64 = redis::cmd("DEL").arg("in-flight").query(&mut con).unwrap();
    let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query(&mut con).unwrap();
    assert!(
        eventually(wait / 2, || pubsub_ids(&mut con, &client).iter().any(|id| !before.contains(id))),
        "the pub/sub connection did not come back"
    );
    let reconnected = started.elapsed();
    let (returned, lost, released) = recv_within(&rx, 30 * wait, "the in-flight acquisition");
    println!(
        "in flight: reconnected {reconnected:?}, returned {returned:?}, lost {lost:?}, release {released:?}"
    );
    assert!(reconnected < returned, "the pass did not run while the reply was held back");
    // Verified, found gone, taken again: the second acquisition waited for
    // the missing replica too.
    assert!(returned >= 2 * wait, "the in-flight hold came back unverified ({returned:?})");
    assert_eq!(lost, None, "a guard came back already lost");
    assert_eq!(released, Ok(()));
    drop(busy);
    let _ = waited.join().unwrap();
}
