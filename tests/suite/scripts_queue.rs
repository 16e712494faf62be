//! Lua contract tests of the reentrant lock's scripts beyond Redisson's
//! layout: unlock latches (Redisson 3.24+), the next-in-line marker, the
//! waiter queue and its grants, fencing tokens, the local hand-off and the
//! barging window; each script called directly on a raw connection,
//! checked against the contract in its header comment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::scripts::{
    OWNER_A, OWNER_B, acquire, acquire_script, is_wrongtype, one_field, release, release_script,
};

use std::time::Duration;

use common::{Listener, RedisServer, channel_of, exists, hgetall, pttl};
use redis::Value;

const OWNER_C: &str = "8c1f0a4e-3333-4000-8000-000000000003:9";
const OWNER_D: &str = "8c1f0a4e-4444-4000-8000-000000000004:2";
const OWNER_E: &str = "8c1f0a4e-5555-4000-8000-000000000005:3";
/// Another thread of OWNER_B's client.
const OWNER_B2: &str = "8c1f0a4e-2222-4000-8000-000000000002:8";

fn marker_of(name: &str) -> String {
    format!("keyholder_lock_next:{{{name}}}")
}

fn queue_of(name: &str) -> String {
    format!("keyholder_lock_queue:{{{name}}}")
}

fn grants_of(name: &str) -> String {
    format!("keyholder_lock_grants:{{{name}}}")
}

/// keyholder's listening channel of lock `name` (see `src/names.rs`):
/// every keyholder client listening on the unlock channel listens on it
/// too; nobody publishes there.
fn listening_of(name: &str) -> String {
    format!("keyholder_lock__listening:{{{name}}}")
}

/// A connection standing for a keyholder client's pub/sub connection:
/// subscribed to lock `name`'s unlock channel together with its listening
/// channel, and to `more` (wake channels).
fn keyholder_listener(server: &RedisServer, name: &str, more: &[&str]) -> Listener {
    let (unlock, listening) = (channel_of(name), listening_of(name));
    let mut channels = vec![unlock.as_str(), listening.as_str()];
    channels.extend_from_slice(more);
    Listener::start(server, &channels)
}

fn wake_prefix_of(name: &str) -> String {
    format!("keyholder_lock__wake:{{{name}}}")
}

/// The client id part of an owner id.
fn client_of(owner: &str) -> &str {
    owner.rsplit_once(':').unwrap().0
}

fn latch_of(name: &str, id: u32) -> String {
    format!("redisson_unlock_latch:{{{name}}}:{id:032x}")
}

/// release.lua with the owner's latch, as request `request` (a retry or not).
fn release_latched(
    con: &mut redis::Connection,
    name: &str,
    owner: &str,
    latch: &str,
    request: u64,
    retry: bool,
) -> redis::RedisResult<Value> {
    let script = release_script();
    let mut invocation = script.key(name);
    invocation.key(channel_of(name)).key(marker_of(name)).key(queue_of(name)).key(grants_of(name));
    invocation.key(listening_of(name)).key(latch);
    invocation.arg(10_000).arg(owner).arg(0).arg(settings(name, owner, None));
    invocation.arg("publish").arg(5_000).arg(request).arg(u8::from(retry));
    invocation.invoke(con)
}

/// release.lua as keyholder sends a last release: unlatched, with the queue;
/// `listening_ms`: how much longer the releasing client listens on the
/// unlock channel (0: it does not).
fn release_queued(
    con: &mut redis::Connection,
    name: &str,
    owner: &str,
    listening_ms: u64,
) -> redis::RedisResult<Value> {
    release_last(con, name, owner, listening_ms, None)
}

/// release.lua's ARGV[4] as keyholder sends it for `owner`'s client: a claim
/// window of 1 s, no foreign turns, and with `barging_ms` the barging window
/// (ms) and a 2 ms head start.
fn settings(name: &str, owner: &str, barging_ms: Option<u64>) -> String {
    let window = barging_ms.unwrap_or(0);
    format!("1000 0 {window} 2 {} {}", client_of(owner), wake_prefix_of(name))
}

/// [`release_queued`], and with `barging_ms` the barging window (ms; see
/// [`settings`]).
fn release_last(
    con: &mut redis::Connection,
    name: &str,
    owner: &str,
    listening_ms: u64,
    barging_ms: Option<u64>,
) -> redis::RedisResult<Value> {
    let script = release_script();
    let mut invocation = script.key(name);
    invocation.key(channel_of(name)).key(marker_of(name)).key(queue_of(name)).key(grants_of(name));
    invocation.key(listening_of(name));
    invocation.arg(10_000).arg(owner).arg(listening_ms).arg(settings(name, owner, barging_ms));
    invocation.invoke(con)
}

/// acquire.lua as a keyholder waiter takes a new hold: with the marker and
/// the queue, queueing its client when refused if it is `listening`, ready to
/// be handed the lock if `grantable`.
fn acquire_queued(
    con: &mut redis::Connection,
    name: &str,
    owner: &str,
    listening: bool,
    grantable: bool,
) -> redis::RedisResult<Value> {
    let script = acquire_script();
    let mut invocation = script.key(name);
    invocation.key(marker_of(name)).key(queue_of(name)).key(grants_of(name));
    invocation.arg(10_000).arg(owner).arg("1");
    invocation.arg(client_of(owner)).arg(u8::from(listening)).arg(1_000).arg(u8::from(grantable));
    invocation.invoke(con)
}

/// The queue's client ids, front first.
fn queue(con: &mut redis::Connection, name: &str) -> Vec<String> {
    redis::cmd("ZRANGE").arg(queue_of(name)).arg(0).arg(-1).query(con).unwrap()
}

/// handoff.lua, optionally with the giver's latch as request `(id, retry)`.
fn handoff(
    con: &mut redis::Connection,
    name: &str,
    from: &str,
    to: &str,
    latch: Option<(&str, u64, bool)>,
) -> redis::RedisResult<Value> {
    let script = redis::Script::new(&common::lua("lock/handoff.lua"));
    let mut invocation = script.key(name);
    invocation.key(channel_of(name)).key(marker_of(name));
    if let Some((latch, _, _)) = latch {
        invocation.key(latch);
    }
    invocation.arg("0").arg(10_000).arg(from).arg(to).arg("publish");
    match latch {
        Some((_, request, retry)) => invocation.arg(5_000).arg(request).arg(u8::from(retry)),
        None => invocation.arg(0).arg(0).arg(0),
    };
    invocation.arg(client_of(to)).invoke(con)
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

#[test]
fn a_latched_release_retried_returns_the_first_outcome_and_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let channel = channel_of("latched");
    let listener = Listener::start(&server, &[&channel]);
    let (latch_a, latch_b) = (latch_of("latched", 1), latch_of("latched", 2));
    assert_eq!(acquire(&mut con, "latched", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "latched", 10_000, OWNER_A).unwrap(), Value::Nil);

    assert_eq!(release_latched(&mut con, "latched", OWNER_A, &latch_a, 41, false).unwrap(), Value::Int(0));
    assert_eq!(get(&mut con, &latch_a).as_deref(), Some("41:0"));
    let ttl = pttl(&mut con, &latch_a);
    assert!(ttl > 0 && ttl <= 5_000, "latch PTTL {ttl}");
    // The retry of request 41 (its first reply was lost) does not release a
    // second hold.
    assert_eq!(release_latched(&mut con, "latched", OWNER_A, &latch_a, 41, true).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, "latched"), one_field(OWNER_A, "1"));

    // The next request reuses the owner's latch key; its retry does not
    // publish a second time.
    assert_eq!(release_latched(&mut con, "latched", OWNER_A, &latch_a, 42, false).unwrap(), Value::Int(1));
    assert_eq!(get(&mut con, &latch_a).as_deref(), Some("42:1"));
    assert!(!exists(&mut con, "latched"));
    assert_eq!(listener.next(Duration::from_secs(5)), Some((channel.clone(), "0".to_owned())));
    assert_eq!(release_latched(&mut con, "latched", OWNER_A, &latch_a, 42, true).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "latched"));
    assert_eq!(listener.drain_until_marker(&mut con, &channel), [], "a retried release published again");

    // A retry whose request id is not the stored one runs for real: here the
    // owner holds nothing any more, so it is nil.
    assert_eq!(release_latched(&mut con, "latched", OWNER_A, &latch_a, 40, true).unwrap(), Value::Nil);

    // Without a stored outcome, a latched release by a non-owner is nil and
    // stores nothing.
    assert_eq!(release_latched(&mut con, "latched", OWNER_B, &latch_b, 7, false).unwrap(), Value::Nil);
    assert!(!exists(&mut con, &latch_b));
}

#[test]
fn a_release_wakes_the_first_listening_queued_client_and_pairs_its_unlock_message() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "fair";
    let (client_a, client_c, client_d) = (client_of(OWNER_A), client_of(OWNER_C), client_of(OWNER_D));
    let wake_a = format!("{}:{client_a}", wake_prefix_of(name));
    let wake_c = format!("{}:{client_c}", wake_prefix_of(name));
    // A's and C's clients, keyholder clients, listen on both (so D, never
    // heard, is the only one that does not).
    let listener = keyholder_listener(&server, name, &[&wake_a, &wake_c]);
    assert_eq!(acquire_queued(&mut con, name, OWNER_B, true, false).unwrap(), Value::Nil);

    // A refusal queues a listening waiter's client, in arrival order, once;
    // one that does not listen yet is not queued.
    for (owner, listening) in
        [(OWNER_D, true), (OWNER_A, true), (OWNER_C, true), (OWNER_A, true), (OWNER_E, false)]
    {
        let reply = acquire_queued(&mut con, name, owner, listening, false).unwrap();
        assert!(matches!(reply, Value::Int(ms) if ms > 9_000), "{owner}: {reply:?}");
    }
    assert_eq!(queue(&mut con, name), [client_d, client_a, client_c]);
    // Its TTL: twice the longer of the wait and the lease, plus the slack.
    let ttl = pttl(&mut con, &queue_of(name));
    assert!(ttl > 10_000 && ttl <= 2 * (10_000 + 1_000), "the queue must outlast its waiters' sleep: {ttl}");

    // The release skips D (nobody listens on its wake channel), wakes A
    // alone (A takes no grant: it mints fencing tokens), and marks the lock as
    // A's turn; its "0" comes right after "2".
    assert_eq!(release_queued(&mut con, name, OWNER_B, 0).unwrap(), Value::Int(1));
    let heard = listener.drain_until_marker(&mut con, &channel_of(name));
    let expected = [
        (wake_a.clone(), String::new()),
        (channel_of(name), "2".to_owned()),
        (channel_of(name), "0".to_owned()),
    ];
    assert_eq!(heard, expected);
    assert_eq!(queue(&mut con, name), [client_c]);
    assert_eq!(get(&mut con, &marker_of(name)).as_deref(), Some(client_a));
    let ttl = pttl(&mut con, &marker_of(name));
    assert!(ttl > 0 && ttl <= 1_000, "marker PTTL {ttl}");

    // Until A claims its turn, the free lock is refused to others, for at
    // most the marker's PTTL; A, any thread of its client, takes it.
    let reply = acquire_queued(&mut con, name, OWNER_C, true, false).unwrap();
    assert!(matches!(reply, Value::Int(ms) if ms > 0 && ms <= 1_000), "C took A's turn: {reply:?}");
    let a_other_thread = format!("{client_a}:99");
    assert_eq!(acquire_queued(&mut con, name, &a_other_thread, true, false).unwrap(), Value::Nil);
    assert!(!exists(&mut con, &marker_of(name)), "the marker outlived its claim");
    assert_eq!(queue(&mut con, name), [client_c]);

    // With nobody queued, a release publishes "0" alone.
    let _: () = redis::cmd("DEL").arg(queue_of(name)).query(&mut con).unwrap();
    assert_eq!(release_queued(&mut con, name, &a_other_thread, 0).unwrap(), Value::Int(1));
    assert_eq!(
        listener.drain_until_marker(&mut con, &channel_of(name)),
        [(channel_of(name), "0".to_owned())]
    );
}

#[test]
fn a_woken_client_that_loses_the_race_to_redisson_keeps_the_front_of_the_queue() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "raced";
    let (client_a, client_c) = (client_of(OWNER_A), client_of(OWNER_C));
    let _listener = Listener::start(&server, &[&format!("{}:{client_a}", wake_prefix_of(name))]);
    assert_eq!(acquire_queued(&mut con, name, OWNER_B, true, false).unwrap(), Value::Nil);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_A, true, false).unwrap(), Value::Int(_)));
    assert!(matches!(acquire_queued(&mut con, name, OWNER_C, true, false).unwrap(), Value::Int(_)));
    assert_eq!(release_queued(&mut con, name, OWNER_B, 0).unwrap(), Value::Int(1));
    assert_eq!(queue(&mut con, name), [client_c]);
    // A Redisson client ignores the marker and takes the free lock.
    assert_eq!(acquire(&mut con, name, 10_000, OWNER_B).unwrap(), Value::Nil);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_A, true, false).unwrap(), Value::Int(_)));
    assert_eq!(queue(&mut con, name), [client_a, client_c], "the woken client lost its place");
}

#[test]
fn dequeue_leaves_the_queue_and_passes_on_a_turn() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "gave-up";
    let dequeue = redis::Script::new(include_str!("../../lua/lock/dequeue.lua"));
    let run = |con: &mut redis::Connection, owner: &str| -> i64 {
        let mut invocation = dequeue.key(queue_of(name));
        invocation.key(grants_of(name)).key(marker_of(name)).key(name).key(channel_of(name));
        invocation.arg(client_of(owner)).arg(owner).arg("0").arg("publish").invoke(con).unwrap()
    };
    let listener = Listener::start(&server, &[&channel_of(name)]);
    let _: i64 =
        redis::cmd("ZADD").arg(queue_of(name)).arg(1).arg(client_of(OWNER_A)).query(&mut con).unwrap();
    let _: i64 =
        redis::cmd("ZADD").arg(queue_of(name)).arg(2).arg(client_of(OWNER_C)).query(&mut con).unwrap();
    assert_eq!(run(&mut con, OWNER_A), 0);
    assert_eq!(queue(&mut con, name), [client_of(OWNER_C)]);
    // Woken for a turn it no longer wants: the marker goes, and the others
    // hear that the lock is free.
    let _: () = redis::cmd("SET")
        .arg(marker_of(name))
        .arg(client_of(OWNER_C))
        .arg("PX")
        .arg(1_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(run(&mut con, OWNER_A), 0, "another client's turn was taken");
    assert_eq!(run(&mut con, OWNER_C), 1);
    assert!(!exists(&mut con, &marker_of(name)));
    assert!(queue(&mut con, name).is_empty());
    assert_eq!(
        listener.drain_until_marker(&mut con, &channel_of(name)),
        [(channel_of(name), "0".to_owned())]
    );
}

#[test]
fn acquire_with_a_token_counter_mints_increasing_tokens() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let counter = "redisson_lock_token:{fenced}";
    let fenced = |con: &mut redis::Connection, owner: &str| -> redis::RedisResult<Value> {
        acquire_script()
            .key("fenced")
            .key(marker_of("fenced"))
            .key(queue_of("fenced"))
            .key(grants_of("fenced"))
            .key(counter)
            .arg(10_000)
            .arg(owner)
            .invoke(con)
    };
    let minted = |reply: Value| -> String {
        match &reply {
            Value::Array(pair) => match pair.as_slice() {
                [Value::Int(-1), Value::BulkString(digits)] => String::from_utf8(digits.clone()).unwrap(),
                _ => panic!("not a token: {reply:?}"),
            },
            _ => panic!("not a token: {reply:?}"),
        }
    };
    let first = minted(fenced(&mut con, OWNER_A).unwrap());
    let reply = fenced(&mut con, OWNER_B).unwrap();
    assert!(
        matches!(&reply, Value::Array(items) if matches!(items[..], [Value::Int(ms), Value::Int(-1)] if ms > 0)),
        "{reply:?}"
    );
    assert_eq!(get(&mut con, counter), Some(first.clone()), "a refused acquisition minted a token");
    assert_eq!(release(&mut con, "fenced", 10_000, OWNER_A).unwrap(), Value::Int(1));
    let second = minted(fenced(&mut con, OWNER_B).unwrap());
    assert!(second.parse::<u64>().unwrap() > first.parse::<u64>().unwrap(), "{second} after {first}");
    assert_eq!(get(&mut con, counter), Some(second));
    assert_eq!(pttl(&mut con, counter), -1, "the counter must not expire");

    // A counter of the wrong type is refused before anything changes.
    let _: i64 =
        redis::cmd("HSET").arg("redisson_lock_token:{other}").arg("f").arg(1).query(&mut con).unwrap();
    let err = acquire_script()
        .key("other")
        .key(marker_of("other"))
        .key(queue_of("other"))
        .key(grants_of("other"))
        .key("redisson_lock_token:{other}")
        .arg(10_000)
        .arg(OWNER_A)
        .invoke::<Value>(&mut con)
        .unwrap_err();
    assert!(is_wrongtype(&err), "{err}");
    assert!(!exists(&mut con, "other"), "the lock was taken though the token could not be minted");
}

#[test]
fn handoff_gives_the_lock_to_a_local_successor_without_publishing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let channel = channel_of("hand");
    let listener = Listener::start(&server, &[&channel]);
    assert_eq!(acquire(&mut con, "hand", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(acquire(&mut con, "hand", 10_000, OWNER_A).unwrap(), Value::Nil);
    let _: i64 = redis::cmd("PEXPIRE").arg("hand").arg(1_000).query(&mut con).unwrap();

    // Not the last hold: one released, nothing handed over.
    assert_eq!(handoff(&mut con, "hand", OWNER_A, OWNER_B, None).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, "hand"), one_field(OWNER_A, "1"));
    assert!(pttl(&mut con, "hand") > 9_000);

    // The last hold: handed over in place.
    let _: i64 = redis::cmd("PEXPIRE").arg("hand").arg(1_000).query(&mut con).unwrap();
    assert_eq!(handoff(&mut con, "hand", OWNER_A, OWNER_B, None).unwrap(), Value::Int(2));
    assert_eq!(hgetall(&mut con, "hand"), one_field(OWNER_B, "1"));
    assert!(pttl(&mut con, "hand") > 9_000, "the new owner did not get its lease");
    assert_eq!(listener.drain_until_marker(&mut con, &channel), [], "a hand-off published");

    // By a non-owner: nil, nothing changed.
    assert_eq!(handoff(&mut con, "hand", OWNER_A, OWNER_C, None).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "hand"), one_field(OWNER_B, "1"));

    // The successor's client was woken for its turn: handed over, marker removed.
    let _: () = redis::cmd("SET")
        .arg(marker_of("hand"))
        .arg(client_of(OWNER_C))
        .arg("PX")
        .arg(1_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(handoff(&mut con, "hand", OWNER_B, OWNER_C, None).unwrap(), Value::Int(2));
    assert_eq!(hgetall(&mut con, "hand"), one_field(OWNER_C, "1"));
    assert!(!exists(&mut con, &marker_of("hand")));

    // Another client was woken for its turn: released and published instead.
    let _: () = redis::cmd("SET")
        .arg(marker_of("hand"))
        .arg(client_of(OWNER_B))
        .arg("PX")
        .arg(1_000)
        .query(&mut con)
        .unwrap();
    let latch = latch_of("hand", 7);
    assert_eq!(handoff(&mut con, "hand", OWNER_C, OWNER_A, Some((&latch, 7, false))).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "hand"));
    assert_eq!(listener.next(Duration::from_secs(5)), Some((channel.clone(), "0".to_owned())));
    assert_eq!(
        get(&mut con, &marker_of("hand")).as_deref(),
        Some(client_of(OWNER_B)),
        "another's marker was removed"
    );

    // Retried with its latch: the first outcome, nothing changed, no message.
    assert_eq!(handoff(&mut con, "hand", OWNER_C, OWNER_A, Some((&latch, 7, true))).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "hand"));
    assert_eq!(listener.drain_until_marker(&mut con, &channel), []);
}

#[test]
fn a_new_hold_resets_a_stale_count_and_a_reentry_increments() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let new_hold = |con: &mut redis::Connection, fresh: &str| -> Value {
        acquire_script()
            .key("stale")
            .key(marker_of("stale"))
            .arg(10_000)
            .arg(OWNER_A)
            .arg(fresh)
            .invoke(con)
            .unwrap()
    };
    // A count left by an acquire whose reply was lost.
    let _: i64 = redis::cmd("HSET").arg("stale").arg(OWNER_A).arg(3).query(&mut con).unwrap();
    assert_eq!(new_hold(&mut con, "1"), Value::Nil);
    assert_eq!(hgetall(&mut con, "stale"), one_field(OWNER_A, "1"), "a new hold counted the stale holds");
    assert!(pttl(&mut con, "stale") > 9_000);
    assert_eq!(new_hold(&mut con, "0"), Value::Nil);
    assert_eq!(hgetall(&mut con, "stale"), one_field(OWNER_A, "2"), "a re-entry did not increment");
}

#[test]
fn a_reentry_takes_only_the_owners_own_field_and_never_shortens_the_lease() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let reenter = |con: &mut redis::Connection, lease_ms: u64| -> redis::RedisResult<Value> {
        acquire_script().key("r").key(marker_of("r")).arg(lease_ms).arg(OWNER_A).arg("0").invoke(con)
    };
    // A free lock is not taken by a re-entry: the caller's hold is gone.
    assert_eq!(reenter(&mut con, 10_000).unwrap(), Value::Int(-2));
    assert!(!exists(&mut con, "r"));
    // Another owner's lock is not re-entered.
    assert_eq!(acquire(&mut con, "r", 10_000, OWNER_B).unwrap(), Value::Nil);
    assert!(matches!(reenter(&mut con, 10_000).unwrap(), Value::Int(ms) if ms > 0));
    assert_eq!(hgetall(&mut con, "r"), one_field(OWNER_B, "1"));
    assert_eq!(release(&mut con, "r", 10_000, OWNER_B).unwrap(), Value::Int(1));
    // The owner's own field is; a shorter lease leaves the longer TTL.
    assert_eq!(acquire(&mut con, "r", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(reenter(&mut con, 100).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "r"), one_field(OWNER_A, "2"));
    assert!(pttl(&mut con, "r") > 5_000, "a re-entry shortened the lease");
    assert_eq!(reenter(&mut con, 60_000).unwrap(), Value::Nil);
    assert!(pttl(&mut con, "r") > 50_000, "a re-entry did not lengthen the lease");
}

#[test]
fn fencing_tokens_follow_the_servers_clock_are_exact_and_a_counter_without_a_next_token_is_refused() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let counter = "redisson_lock_token:{t}";
    let fenced = |con: &mut redis::Connection| -> redis::RedisResult<Value> {
        acquire_script()
            .key("t")
            .key(marker_of("t"))
            .key(queue_of("t"))
            .key(grants_of("t"))
            .key(counter)
            .arg(10_000)
            .arg(OWNER_A)
            .arg("1")
            .arg(client_of(OWNER_A))
            .invoke(con)
    };
    let minted = |con: &mut redis::Connection| -> u64 {
        let reply = fenced(con).unwrap();
        assert_eq!(release(con, "t", 10_000, OWNER_A).unwrap(), Value::Int(1));
        match &reply {
            Value::Array(pair) => match pair.as_slice() {
                [Value::Int(-1), Value::BulkString(digits)] => {
                    std::str::from_utf8(digits).unwrap().parse().unwrap()
                }
                _ => panic!("not a token: {reply:?}"),
            },
            _ => panic!("not a token: {reply:?}"),
        }
    };
    // A counter below the server's clock (none, one restarted at 0, one an
    // older keyholder or Redisson left counting from 1) gives way to the
    // clock in microseconds; the counter keeps the token.
    for left in [None, Some("0"), Some("1810")] {
        match left {
            Some(value) => redis::cmd("SET").arg(counter).arg(value).query::<()>(&mut con).unwrap(),
            None => redis::cmd("DEL").arg(counter).query::<()>(&mut con).unwrap(),
        }
        let before = common::server_micros(&mut con);
        let token = minted(&mut con);
        assert!(
            (before..=common::server_micros(&mut con)).contains(&token),
            "{left:?}: {token} is not the clock"
        );
        assert_eq!(get(&mut con, counter), Some(token.to_string()));
    }
    // A counter ahead of the clock (a clock stepped back since it was last
    // minted into, or a Redisson counter raised by hand) goes on by one.
    let ahead = common::server_micros(&mut con) + 3_600_000_000;
    redis::cmd("SET").arg(counter).arg(ahead).query::<()>(&mut con).unwrap();
    assert_eq!([minted(&mut con), minted(&mut con)], [ahead + 1, ahead + 2]);
    // Past 2^53 Lua's numbers round; the token comes back as the exact string.
    let _: () = redis::cmd("SET").arg(counter).arg("9007199254740992").query(&mut con).unwrap();
    for expected in ["9007199254740993", "9007199254740994", "9007199254740995"] {
        let reply = fenced(&mut con).unwrap();
        assert_eq!(
            reply,
            Value::Array(vec![Value::Int(-1), Value::BulkString(expected.as_bytes().to_vec())])
        );
        assert_eq!(release(&mut con, "t", 10_000, OWNER_A).unwrap(), Value::Int(1));
    }
    for bad in ["-5", "abc", "007", "1.5", "9223372036854775807", "99999999999999999999"] {
        let _: () = redis::cmd("SET").arg(counter).arg(bad).query(&mut con).unwrap();
        let err = fenced(&mut con).unwrap_err();
        assert!(err.to_string().contains("BADCOUNTER"), "{bad}: {err}");
        assert!(!exists(&mut con, "t"), "{bad}: the lock was taken without a token");
        assert_eq!(get(&mut con, counter).as_deref(), Some(bad), "the counter was changed");
    }
}

#[test]
fn foreign_keys_at_keyholders_derived_names_are_neither_honoured_nor_overwritten() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (marker, queue_key, grants, latch) =
        (marker_of("m"), queue_of("m"), grants_of("m"), latch_of("m", 1));
    // The listening channel is no key: a key at its name is nobody's, and
    // no script reads or writes it.
    let listening = listening_of("m");
    for key in [&marker, &queue_key, &grants, &listening, &latch] {
        let _: i64 = redis::cmd("HSET").arg(key).arg("f").arg("v").query(&mut con).unwrap();
    }
    // The hashes at the marker's and the queue's names are neither: the lock
    // is free to take, and a refused waiter does not queue into them.
    assert_eq!(acquire_queued(&mut con, "m", OWNER_A, true, true).unwrap(), Value::Nil);
    assert!(matches!(acquire_queued(&mut con, "m", OWNER_B, true, true).unwrap(), Value::Int(ms) if ms > 0));
    // A nested release with the hash at its latch's name runs unlatched; the
    // last release wakes nobody through them and marks nothing.
    assert_eq!(acquire(&mut con, "m", 10_000, OWNER_A).unwrap(), Value::Nil);
    assert_eq!(release_latched(&mut con, "m", OWNER_A, &latch, 5, false).unwrap(), Value::Int(0));
    assert_eq!(release_latched(&mut con, "m", OWNER_A, &latch, 6, false).unwrap(), Value::Int(1));
    // dequeue.lua leaves them alone too.
    let dequeue = redis::Script::new(include_str!("../../lua/lock/dequeue.lua"));
    let mut invocation = dequeue.key(&queue_key);
    invocation.key(&grants).key(&marker).key("m").key(channel_of("m"));
    invocation.arg(client_of(OWNER_B)).arg(OWNER_B).arg("0").arg("publish");
    assert_eq!(invocation.invoke::<i64>(&mut con).unwrap(), 0);
    for key in [&marker, &queue_key, &grants, &listening, &latch] {
        assert_eq!(hgetall(&mut con, key), one_field("f", "v"), "{key} was changed");
        assert_eq!(pttl(&mut con, key), -1, "{key} was given a TTL");
    }
}

/// Every key of the database, sorted.
fn all_keys(con: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys
}

/// Issue 38: release.lua counts the Redisson waiters as the listeners of
/// the unlock channel less those of keyholder's listening channel, which
/// every keyholder client's pub/sub connection subscribes along with the
/// unlock channel. So keyholder clients listening (queued, lingering after
/// their own release, or out of the queue), whatever the releasing client's
/// ARGV[3] says and however long they listen, are never taken for Redisson
/// waiters: the queued client is handed the lock. A connection on the
/// unlock channel alone is a Redisson waiter: the queued client is woken
/// (the marker names it, "2" then "0" are published), not handed the lock.
/// Nothing is recorded for either: no key but the lock's own is left, and
/// once the Redisson waiter leaves, the next release hands over again.
#[test]
fn listening_keyholder_clients_are_no_redisson_waiters_but_a_bare_unlock_listener_is() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "listening";
    let wake = |owner: &str| format!("{}:{}", wake_prefix_of(name), client_of(owner));
    // Each listener stands for one keyholder client's pub/sub connection.
    let _a = keyholder_listener(&server, name, &[&wake(OWNER_A)]);
    let _b = keyholder_listener(&server, name, &[&wake(OWNER_B)]);
    assert_eq!(acquire_queued(&mut con, name, OWNER_A, true, true).unwrap(), Value::Nil);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_B, true, true).unwrap(), Value::Int(_)));
    // A releases and still listens for 300 ms: B is handed the lock.
    assert_eq!(release_queued(&mut con, name, OWNER_A, 300).unwrap(), Value::Int(1));
    assert_eq!(hgetall(&mut con, name), one_field(OWNER_B, "1"));
    // C queues; B releases (saying it does not listen) while A, out of the
    // queue, still listens: A is no Redisson waiter, so C is handed the lock
    // too.
    let _c = keyholder_listener(&server, name, &[&wake(OWNER_C)]);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_C, true, true).unwrap(), Value::Int(_)));
    assert_eq!(release_queued(&mut con, name, OWNER_B, 0).unwrap(), Value::Int(1));
    assert_eq!(
        hgetall(&mut con, name),
        one_field(OWNER_C, "1"),
        "a lingering keyholder client blocked the hand-over"
    );
    // Nothing recorded for the releasers: the queue and the grants emptied,
    // only the lock is left.
    assert_eq!(all_keys(&mut con), [name]);

    // A connection on the unlock channel alone may be a Redisson waiter: A,
    // queued with a grant, is woken, not handed the lock, though C's client
    // listens (for 300 ms more) and all the others are keyholder clients.
    let redisson = Listener::start(&server, &[&channel_of(name)]);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_A, true, true).unwrap(), Value::Int(_)));
    assert_eq!(release_queued(&mut con, name, OWNER_C, 300).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, name), "handed over past a listener that may be a Redisson waiter");
    assert_eq!(get(&mut con, &marker_of(name)).as_deref(), Some(client_of(OWNER_A)));
    assert_eq!(
        redisson.drain_until_marker(&mut con, &channel_of(name)),
        [(channel_of(name), "2".to_owned()), (channel_of(name), "0".to_owned())]
    );
    assert_eq!(acquire_queued(&mut con, name, OWNER_A, true, true).unwrap(), Value::Nil);
    assert!(!exists(&mut con, &marker_of(name)));

    // The Redisson waiter leaves: the next release hands over again (nothing
    // of the foreign listener was recorded either).
    drop(redisson);
    assert!(common::eventually(Duration::from_secs(5), || common::numsub(&mut con, &channel_of(name)) == 3));
    assert_eq!(common::numsub(&mut con, &listening_of(name)), 3);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_B, true, true).unwrap(), Value::Int(_)));
    assert_eq!(release_queued(&mut con, name, OWNER_A, 0).unwrap(), Value::Int(1));
    assert_eq!(hgetall(&mut con, name), one_field(OWNER_B, "1"), "a Redisson waiter that left still counted");
    assert_eq!(all_keys(&mut con), [name]);
}

/// dequeue.lua (issue 35, item 1; issue 38): a client whose waiter gives up
/// leaves the queue and its grant, but still listens (on the unlock and the
/// listening channel) for its linger. dequeue.lua records nothing for it
/// (no key is written), and the next release still hands the lock to the
/// queued client behind it: the lingering client is no Redisson waiter.
/// Once it stops listening on both channels, the two counts fall together
/// and nothing of it is left behind.
#[test]
fn a_client_leaving_the_queue_still_listening_is_no_redisson_waiter() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "left";
    let wake = |owner: &str| format!("{}:{}", wake_prefix_of(name), client_of(owner));
    let dequeue = redis::Script::new(include_str!("../../lua/lock/dequeue.lua"));
    let run = |con: &mut redis::Connection, owner: &str| -> i64 {
        let mut invocation = dequeue.key(queue_of(name));
        invocation.key(grants_of(name)).key(marker_of(name)).key(name).key(channel_of(name));
        invocation.arg(client_of(owner)).arg(owner).arg("0").arg("publish").invoke(con).unwrap()
    };
    // Each listener stands for one keyholder client's pub/sub connection.
    let _a = keyholder_listener(&server, name, &[&wake(OWNER_A)]);
    let b = keyholder_listener(&server, name, &[&wake(OWNER_B)]);
    let _c = keyholder_listener(&server, name, &[&wake(OWNER_C)]);
    assert_eq!(acquire_queued(&mut con, name, OWNER_A, true, true).unwrap(), Value::Nil);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_B, true, true).unwrap(), Value::Int(_)));
    assert!(matches!(acquire_queued(&mut con, name, OWNER_C, true, true).unwrap(), Value::Int(_)));
    let keys = all_keys(&mut con);
    assert_eq!(keys, [grants_of(name), queue_of(name), name.to_owned()]);
    // B gives up and still listens: out of the queue and the grants, and
    // nothing else written.
    assert_eq!(run(&mut con, OWNER_B), 0);
    assert_eq!(queue(&mut con, name), [client_of(OWNER_C)]);
    let granted: Vec<String> = redis::cmd("HKEYS").arg(grants_of(name)).query(&mut con).unwrap();
    assert_eq!(granted, [client_of(OWNER_C)]);
    assert_eq!(all_keys(&mut con), keys, "dequeue.lua wrote a key");
    // A releases (and listens): B listens unqueued, but is no Redisson
    // waiter: C is handed the lock (with B counted as one, C would only be
    // woken).
    assert_eq!(release_queued(&mut con, name, OWNER_A, 300).unwrap(), Value::Int(1));
    assert_eq!(
        hgetall(&mut con, name),
        one_field(OWNER_C, "1"),
        "the lingering client blocked the hand-over"
    );
    // B stops listening (its connection closes): both counts fall by one.
    drop(b);
    assert!(common::eventually(Duration::from_secs(5), || common::numsub(&mut con, &channel_of(name)) == 2));
    assert_eq!(common::numsub(&mut con, &listening_of(name)), 2);
    // C's last release, nobody queued: "0" alone, and no key is left.
    assert_eq!(release_queued(&mut con, name, OWNER_C, 300).unwrap(), Value::Int(1));
    assert_eq!(all_keys(&mut con), Vec::<String>::new(), "keys outlived the lock");
}

/// acquire.lua and release.lua end early in the common case (a free lock
/// no marker reserves; a last release with nobody queued by a client that
/// does not listen). Each boundary of those short paths, checked: a last
/// release with nobody queued publishes "0" alone and writes no key,
/// whether its client does not listen (the short path: no listener is
/// counted) or still listens (ARGV[3] above 0: the long path, which counts
/// them, and records nothing for the releasing client); a marker reserves
/// the free lock for the client it names; an inner release publishes
/// nothing.
#[test]
fn the_short_paths_keep_the_queue_and_marker_rules_and_write_no_key() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "short";
    let unlocks = Listener::start(&server, &[&channel_of(name)]);
    let _keyholder = keyholder_listener(&server, name, &[]);
    for listens in [0, 300] {
        let counted = common::calls_of(&mut con, "pubsub|numsub");
        assert_eq!(acquire_queued(&mut con, name, OWNER_A, false, false).unwrap(), Value::Nil);
        assert_eq!(release_queued(&mut con, name, OWNER_A, listens).unwrap(), Value::Int(1));
        assert_eq!(
            unlocks.drain_until_marker(&mut con, &channel_of(name)),
            [(channel_of(name), "0".to_owned())],
            "listening {listens} ms"
        );
        assert_eq!(all_keys(&mut con), Vec::<String>::new(), "listening {listens} ms: a key was written");
        assert_eq!(
            common::calls_of(&mut con, "pubsub|numsub") - counted,
            i64::from(listens > 0),
            "listening {listens} ms: the listeners were counted or not"
        );
    }
    // A free lock that a marker reserves for another client is refused.
    let _: () = redis::cmd("SET")
        .arg(marker_of(name))
        .arg(client_of(OWNER_B))
        .arg("PX")
        .arg(5_000)
        .query(&mut con)
        .unwrap();
    assert!(
        matches!(acquire_queued(&mut con, name, OWNER_A, false, false).unwrap(), Value::Int(ms) if ms > 0)
    );
    assert!(!exists(&mut con, name));
    // The client it names takes it and clears the marker.
    assert_eq!(acquire_queued(&mut con, name, OWNER_B, false, false).unwrap(), Value::Nil);
    assert!(!exists(&mut con, &marker_of(name)));
    // An inner release keeps the lock and publishes nothing.
    assert_eq!(acquire_queued(&mut con, name, OWNER_B, false, false).unwrap(), Value::Nil);
    let _: i64 = redis::cmd("HINCRBY").arg(name).arg(OWNER_B).arg(1).query(&mut con).unwrap();
    assert_eq!(release_queued(&mut con, name, OWNER_B, 0).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, name), one_field(OWNER_B, "1"));
    assert_eq!(unlocks.next(Duration::from_millis(200)), None);
}

/// A grant's wake message carries back the ticket the grantee's wait queued
/// with (its client tells it from a grant of an earlier wait whose message
/// arrives late); an entry without one, as older keyholders write, gets
/// the message without it.
#[test]
fn a_grant_message_names_the_grantee_with_the_ticket_of_its_wait() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let wake = format!("{}:{}", wake_prefix_of("tk"), client_of(OWNER_B));
    let listener = Listener::start(&server, &[&wake]);
    for (ticket, expected) in [(Some(7), format!("{OWNER_B}/7")), (None, OWNER_B.to_owned())] {
        assert_eq!(acquire(&mut con, "tk", 10_000, OWNER_A).unwrap(), Value::Nil);
        let script = acquire_script();
        let mut invocation = script.key("tk");
        invocation.key(marker_of("tk")).key(queue_of("tk")).key(grants_of("tk"));
        invocation.arg(10_000).arg(OWNER_B).arg("1").arg(client_of(OWNER_B)).arg(1).arg(1_000);
        invocation.arg(ticket.unwrap_or(1));
        assert!(matches!(invocation.invoke::<Value>(&mut con).unwrap(), Value::Int(ms) if ms > 0));
        let entry: String =
            redis::cmd("HGET").arg(grants_of("tk")).arg(client_of(OWNER_B)).query(&mut con).unwrap();
        let fields: Vec<&str> = entry.split(' ').collect();
        assert_eq!((fields.len(), fields[0]), (4, OWNER_B), "entry {entry}");
        if ticket.is_none() {
            // An older keyholder's entry: no ticket.
            let old = fields[..3].join(" ");
            let _: () = redis::cmd("HSET")
                .arg(grants_of("tk"))
                .arg(client_of(OWNER_B))
                .arg(old)
                .query(&mut con)
                .unwrap();
        }
        assert_eq!(release_queued(&mut con, "tk", OWNER_A, 0).unwrap(), Value::Int(1));
        let (channel, message) = listener.next(Duration::from_secs(5)).expect("no grant message");
        assert_eq!(channel, wake);
        let (to, elapsed) = message.split_once(' ').unwrap();
        assert_eq!(to, expected);
        assert!(elapsed.parse::<u64>().is_ok(), "message {message}");
        assert_eq!(hgetall(&mut con, "tk"), one_field(OWNER_B, "1"));
        let _: () = redis::cmd("DEL").arg("tk").query(&mut con).unwrap();
    }
}

/// release.lua as keyholder sends a last release with a barging window
/// (ms), no foreign turns.
fn release_barging(
    con: &mut redis::Connection,
    name: &str,
    owner: &str,
    window_ms: u64,
) -> redis::RedisResult<Value> {
    release_last(con, name, owner, 0, Some(window_ms))
}

/// The queue's client ids and scores (when each joined, server ms), front first.
fn queue_scores(con: &mut redis::Connection, name: &str) -> Vec<(String, f64)> {
    redis::cmd("ZRANGE").arg(queue_of(name)).arg(0).arg(-1).arg("WITHSCORES").query(con).unwrap()
}

/// Issue 24, item 3: within the barging window, a release leaves the lock
/// free, wakes nobody and returns the front client, which keeps its place
/// (the releasing client owes it a wake should it not take the lock back,
/// see `wait/owed.rs`), so the releasing client takes the lock back; once
/// the front client has waited the window, the release hands it the lock as
/// without a window; the releasing client at the front is handed the lock,
/// not barged for; and a Redisson waiter listening turns barging off.
#[test]
fn a_release_within_the_barging_window_leaves_the_lock_free_and_the_front_client_queued() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "barged";
    let client_a = client_of(OWNER_A);
    let wake_a = format!("{}:{client_a}", wake_prefix_of(name));
    // A's client listens on its wake channel, the unlock channel and the
    // listening channel, as a keyholder waiter does.
    let listener = keyholder_listener(&server, name, &[&wake_a]);
    let before: (String, String) = redis::cmd("TIME").query(&mut con).unwrap();
    let before_ms = before.0.parse::<f64>().unwrap() * 1e3;
    assert_eq!(acquire_queued(&mut con, name, OWNER_B, true, true).unwrap(), Value::Nil);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_A, true, true).unwrap(), Value::Int(_)));
    // A's score is when it joined, by the server's clock.
    let joined = queue_scores(&mut con, name);
    assert_eq!(joined.len(), 1);
    assert!(joined[0].1 >= before_ms && joined[0].1 < before_ms + 60_000.0, "{joined:?}");
    let grant = hgetall(&mut con, &grants_of(name));

    // B releases and takes the lock back, 20 times: each release names A,
    // publishes nothing (neither to A nor on the unlock channel), and
    // leaves A queued where it was, with its grant.
    for round in 0..20 {
        assert_eq!(
            release_barging(&mut con, name, OWNER_B, 60_000).unwrap(),
            Value::BulkString(client_a.as_bytes().to_vec()),
            "round {round}"
        );
        assert!(!exists(&mut con, name), "round {round}: the lock was handed over");
        // B's head start: the marker names B's client for 2 ms.
        let ttl = pttl(&mut con, &marker_of(name));
        assert!(
            get(&mut con, &marker_of(name)).is_none_or(|m| m == client_of(OWNER_B)) && ttl <= 2,
            "round {round}: marker PTTL {ttl}"
        );
        assert_eq!(queue_scores(&mut con, name), joined, "round {round}");
        assert_eq!(hgetall(&mut con, &grants_of(name)), grant, "round {round}");
        assert_eq!(listener.drain_until_marker(&mut con, &channel_of(name)), [], "round {round}");
        assert_eq!(acquire_queued(&mut con, name, OWNER_B, true, true).unwrap(), Value::Nil, "round {round}");
    }
    // B takes its lock back (the marker names B); A, should it try (woken
    // by B's client, late), finds it taken and keeps its place.
    assert!(matches!(acquire_queued(&mut con, name, OWNER_A, true, true).unwrap(), Value::Int(_)));
    assert_eq!(queue_scores(&mut con, name), joined);

    // B's client queued at the front itself (a thread of B's waits there):
    // B's release does not barge but hands the lock to that thread.
    let _: () = redis::cmd("ZADD")
        .arg(queue_of(name))
        .arg(joined[0].1 - 1.0)
        .arg(client_of(OWNER_B))
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(grants_of(name))
        .arg(client_of(OWNER_B))
        .arg(format!("{OWNER_B2} 10000 0 7"))
        .query(&mut con)
        .unwrap();
    let wake_b = format!("{}:{}", wake_prefix_of(name), client_of(OWNER_B));
    let _b = Listener::start(&server, &[&wake_b]);
    assert_eq!(release_barging(&mut con, name, OWNER_B, 60_000).unwrap(), Value::Int(1));
    assert_eq!(hgetall(&mut con, name), one_field(OWNER_B2, "1"));
    assert_eq!(queue_scores(&mut con, name), joined);
    let _: () = redis::cmd("DEL").arg(name).query(&mut con).unwrap();
    assert!(matches!(acquire_queued(&mut con, name, OWNER_B, true, true).unwrap(), Value::Nil));

    // Once A has waited the window (here: a score from long ago, as an older
    // keyholder's 0 reads), the next release hands A the lock.
    let _: () =
        redis::cmd("ZADD").arg(queue_of(name)).arg("XX").arg(0).arg(client_a).query(&mut con).unwrap();
    assert_eq!(release_barging(&mut con, name, OWNER_B, 60_000).unwrap(), Value::Int(1));
    assert_eq!(hgetall(&mut con, name), one_field(OWNER_A, "1"));
    let heard = listener.drain_until_marker(&mut con, &channel_of(name));
    assert!(
        matches!(heard.as_slice(), [(channel, grant)] if *channel == wake_a && grant.starts_with(OWNER_A)),
        "{heard:?}"
    );
    assert!(queue(&mut con, name).is_empty());

    // A Redisson waiter listening on the unlock channel (alone): no barging
    // (its turns are release.lua's foreign turns); C is woken with a marker.
    // (C's client listens on its wake, unlock and listening channels, as a
    // keyholder waiter does.)
    let wake_c = format!("{}:{}", wake_prefix_of(name), client_of(OWNER_C));
    let _c = keyholder_listener(&server, name, &[&wake_c]);
    let _redisson = Listener::start(&server, &[&channel_of(name)]);
    assert!(matches!(acquire_queued(&mut con, name, OWNER_C, true, true).unwrap(), Value::Int(_)));
    assert_eq!(release_barging(&mut con, name, OWNER_A, 60_000).unwrap(), Value::Int(1));
    assert_eq!(get(&mut con, &marker_of(name)).as_deref(), Some(client_of(OWNER_C)));
    assert!(queue(&mut con, name).is_empty());
}

/// Issue 24: the common calls send as little as they can. acquire.lua takes
/// the client id from the owner id when none is sent (and an explicit one
/// when the owner id was made by another client); release.lua's common
/// case never reads ARGV[4], the queue's settings; and a key of another
/// type at the grants' name, read by the call that writes it, is left
/// untouched, the refused client queued without a grant (the queue is
/// written first; a key of another type at the queue's name leaves both
/// untouched, see the foreign keys' test).
#[test]
fn the_common_calls_derive_the_client_id_and_leave_the_queues_settings_unread() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "lean";
    let plain = |con: &mut redis::Connection, owner: &str, client: Option<&str>| -> Value {
        let script = acquire_script();
        let mut invocation = script.key(name);
        invocation.key(marker_of(name)).arg(10_000).arg(owner).arg("1");
        if let Some(client) = client {
            invocation.arg(client);
        }
        invocation.invoke(con).unwrap()
    };
    let mark = |con: &mut redis::Connection, client: &str| {
        let _: () =
            redis::cmd("SET").arg(marker_of(name)).arg(client).arg("PX").arg(5_000).query(con).unwrap();
    };
    // The marker names B's client: A (no client id sent) is refused, B
    // (none sent either) takes the lock and clears the marker.
    mark(&mut con, client_of(OWNER_B));
    assert!(matches!(plain(&mut con, OWNER_A, None), Value::Int(ms) if ms > 0));
    assert_eq!(plain(&mut con, OWNER_B, None), Value::Nil);
    assert!(!exists(&mut con, &marker_of(name)));
    // A common release (nobody queued, not listening) with no queue
    // settings to read.
    let unlocks = Listener::start(&server, &[&channel_of(name)]);
    let script = release_script();
    let mut invocation = script.key(name);
    invocation.key(channel_of(name)).key(marker_of(name)).key(queue_of(name)).key(grants_of(name));
    invocation.key(listening_of(name)).arg(10_000).arg(OWNER_B).arg(0).arg("-");
    assert_eq!(invocation.invoke::<Value>(&mut con).unwrap(), Value::Int(1));
    assert_eq!(unlocks.next(Duration::from_secs(2)), Some((channel_of(name), "0".to_owned())));
    // An owner id made by another client (a token's): the client id sent
    // is the one the marker is compared with.
    mark(&mut con, "C");
    assert!(matches!(plain(&mut con, OWNER_A, None), Value::Int(ms) if ms > 0));
    assert_eq!(plain(&mut con, OWNER_A, Some("C")), Value::Nil);
    assert!(!exists(&mut con, &marker_of(name)));
    // A string at the grants' name: B, refused, is queued (the queue is
    // written first) without a grant, and the string stays as it was, TTL
    // included.
    let _: () = redis::cmd("SET").arg(grants_of(name)).arg("x").query(&mut con).unwrap();
    assert!(matches!(acquire_queued(&mut con, name, OWNER_B, true, true).unwrap(), Value::Int(ms) if ms > 0));
    assert_eq!(queue(&mut con, name), [client_of(OWNER_B)]);
    assert!(pttl(&mut con, &queue_of(name)) > 10_000, "the queue must outlast its waiter's sleep");
    assert_eq!(get(&mut con, &grants_of(name)).as_deref(), Some("x"));
    assert_eq!(pttl(&mut con, &grants_of(name)), -1, "the string at the grants' name was given a TTL");
}
