//! Replica acknowledgement (`ClientBuilder::replica_acks`): every write of a
//! lock waits until a real replica (`redis-server --replicaof`) has it, and
//! not reaching it is never silent: a flag on the guard, or, when required,
//! an error that gives the lock back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{RedisServer, eventually, exists, hgetall};
use keyholder::Client;

const SECOND: Duration = Duration::from_secs(1);
const ACK_WAIT: Duration = Duration::from_millis(300);

fn acked_client(primary: &RedisServer, required: bool) -> Client {
    Client::builder(primary.url())
        .connect_timeout(2 * SECOND)
        .command_timeout(2 * SECOND)
        .watchdog_timeout(Duration::from_millis(900))
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
    // The next renewal (every 300 ms) is not acknowledged: the guard says
    // so, and the hold itself is fine.
    assert!(eventually(5 * SECOND, || !guard.is_replicated()), "the missing replica went unnoticed");
    assert!(!guard.is_lost());
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
