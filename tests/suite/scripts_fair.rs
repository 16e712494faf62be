//! Lua contract tests of the fair lock's scripts (`lua/fair/*.lua`), each
//! called directly on a raw connection and checked against its header: the
//! Redis state after every branch, and who is woken on which channel.
//!
//! The scripts take the caller's clock as an argument, so most tests pass a
//! made-up `NOW` and move it by hand instead of sleeping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::redisson_fair;

use common::{Listener, RedisServer, channel_of, exists, hgetall, pttl};
use redis::Value;

const A: &str = "8c1f0a4e-1111-4000-8000-000000000001:1";
const B: &str = "8c1f0a4e-2222-4000-8000-000000000002:7";
const C: &str = "8c1f0a4e-3333-4000-8000-000000000003:9";
const D: &str = "8c1f0a4e-4444-4000-8000-000000000004:2";
const NOW: i64 = 1_700_000_000_000;
const SLOT: i64 = 60_000;
const LEASE: i64 = 30_000;

fn script(text: &str) -> redis::Script {
    redis::Script::new(text)
}

fn queue_of(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn timeouts_of(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

fn grants_of(name: &str) -> String {
    format!("keyholder_fair_grants:{{{name}}}")
}

fn grant_prefix_of(name: &str) -> String {
    format!("keyholder_fair__grant:{{{name}}}")
}

fn token_of(name: &str) -> String {
    format!("redisson_lock_token:{{{name}}}")
}

/// The wake channel of `owner` waiting for `name`.
fn wake_of(name: &str, owner: &str) -> String {
    format!("{}:{owner}", channel_of(name))
}

/// Arguments of one `fair/acquire.lua` call.
#[derive(Clone, Copy)]
struct Try<'a> {
    owner: &'a str,
    now: i64,
    queue: bool,
    mode: Option<&'a str>,
    ticket: Option<u64>,
    lease: i64,
    slot: i64,
    fenced: bool,
}

impl<'a> Try<'a> {
    fn waiting(owner: &'a str, now: i64) -> Try<'a> {
        Try {
            owner,
            now,
            queue: true,
            mode: Some("1"),
            ticket: None,
            lease: LEASE,
            slot: SLOT,
            fenced: false,
        }
    }
    fn once(owner: &'a str, now: i64) -> Try<'a> {
        Try { queue: false, ..Try::waiting(owner, now) }
    }
}

fn acquire(con: &mut redis::Connection, name: &str, t: Try<'_>) -> redis::RedisResult<Value> {
    let s = script(&common::lua("fair/acquire.lua"));
    let mut call = s.prepare_invoke();
    call.key(name).key(queue_of(name)).key(timeouts_of(name)).key(channel_of(name)).key(grants_of(name));
    if t.fenced {
        call.key(token_of(name));
    }
    call.arg(t.lease).arg(t.owner).arg(t.slot).arg(t.now).arg(if t.queue { "1" } else { "0" });
    // An empty mode is neither "0" nor "1": Redisson's rule, as when absent.
    call.arg(t.mode.unwrap_or("")).arg("publish");
    if let Some(ticket) = t.ticket {
        call.arg(ticket);
    }
    call.invoke(con)
}

fn release_with(
    con: &mut redis::Connection,
    name: &str,
    owner: &str,
    now: i64,
    latch: Option<(&str, u64, bool)>,
) -> redis::RedisResult<Value> {
    let s = script(&common::lua("fair/release.lua"));
    let mut call = s.prepare_invoke();
    call.key(name).key(queue_of(name)).key(timeouts_of(name)).key(channel_of(name)).key(grants_of(name));
    if let Some((key, _, _)) = latch {
        call.key(key);
    }
    call.arg("0").arg(LEASE).arg(owner).arg(now).arg("publish");
    let (request, retry) = latch.map_or((0, false), |(_, request, retry)| (request, retry));
    call.arg(20_000).arg(request).arg(if retry { "1" } else { "0" }).arg(grant_prefix_of(name));
    call.invoke(con)
}

fn release(con: &mut redis::Connection, name: &str, owner: &str, now: i64) -> redis::RedisResult<Value> {
    release_with(con, name, owner, now, None)
}

fn dequeue(con: &mut redis::Connection, name: &str, owner: &str, slot: i64) -> redis::RedisResult<Value> {
    script(&common::lua("fair/dequeue.lua"))
        .key(name)
        .key(queue_of(name))
        .key(timeouts_of(name))
        .key(channel_of(name))
        .key(grants_of(name))
        .arg(owner)
        .arg(slot)
        .arg("publish")
        .invoke(con)
}

fn force_unlock(con: &mut redis::Connection, name: &str, now: i64) -> redis::RedisResult<Value> {
    script(&common::lua("fair/force_unlock.lua"))
        .key(name)
        .key(queue_of(name))
        .key(timeouts_of(name))
        .key(channel_of(name))
        .arg("0")
        .arg(now)
        .arg("publish")
        .invoke(con)
}

fn queue(con: &mut redis::Connection, name: &str) -> Vec<String> {
    redis::cmd("LRANGE").arg(queue_of(name)).arg(0).arg(-1).query(con).unwrap()
}

fn deadline(con: &mut redis::Connection, name: &str, owner: &str) -> Option<i64> {
    redis::cmd("ZSCORE").arg(timeouts_of(name)).arg(owner).query(con).unwrap()
}

fn one_field(owner: &str, count: &str) -> std::collections::BTreeMap<String, String> {
    [(owner.to_owned(), count.to_owned())].into_iter().collect()
}

fn int(value: Value) -> i64 {
    match value {
        Value::Int(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// Every channel a test about `name` could see a message on.
fn listen(server: &RedisServer, name: &str) -> Listener {
    let channels = [channel_of(name), wake_of(name, A), wake_of(name, B), wake_of(name, C), wake_of(name, D)];
    let refs: Vec<&str> = channels.iter().map(String::as_str).collect();
    Listener::start(server, &refs)
}

/// The messages published before now on the test's channels.
fn heard(listener: &Listener, con: &mut redis::Connection, name: &str) -> Vec<(String, String)> {
    listener.drain_until_marker(con, &channel_of(name))
}

#[test]
fn every_fair_script_documents_its_contract_in_a_header() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/fair");
    let mut scripts = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        scripts += 1;
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("--")).collect();
        let header = header.join("\n");
        for word in ["KEYS[", "ARGV[", "Returns"] {
            assert!(header.contains(word), "{}'s header does not document {word}", path.display());
        }
    }
    assert_eq!(scripts, 4);
}

#[test]
fn a_free_lock_is_taken_with_count_one_and_the_lease_and_no_queue_keys() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "f", Try::waiting(A, NOW)).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "f"), one_field(A, "1"));
    let ttl = pttl(&mut con, "f");
    assert!(ttl > LEASE - 1_000 && ttl <= LEASE, "PTTL {ttl}");
    assert!(!exists(&mut con, &queue_of("f")));
    assert!(!exists(&mut con, &timeouts_of("f")));
}

#[test]
fn waiters_queue_in_arrival_order_with_deadlines_a_slot_per_place() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "q", Try::waiting(A, NOW)).unwrap(), Value::Nil);
    let _: i64 = redis::cmd("PEXPIRE").arg("q").arg(10_000).query(&mut con).unwrap();

    let wait_b = int(acquire(&mut con, "q", Try::waiting(B, NOW)).unwrap());
    assert!(wait_b > 9_000 && wait_b <= 10_000, "B waits for the holder's PTTL, not {wait_b}");
    let wait_c = int(acquire(&mut con, "q", Try::waiting(C, NOW)).unwrap());
    assert!(wait_c > 9_000 && wait_c <= 10_000, "C waits for the holder's PTTL too, not {wait_c}");
    assert_eq!(queue(&mut con, "q"), [B, C]);

    // keyholder's deadlines: now + (position + 1) slots, whatever the
    // holder's PTTL (Redisson's would be now + PTTL + slot for B).
    assert_eq!(deadline(&mut con, "q", B), Some(NOW + SLOT));
    assert_eq!(deadline(&mut con, "q", C), Some(NOW + 2 * SLOT));
    // The holder is untouched.
    assert_eq!(hgetall(&mut con, "q"), one_field(A, "1"));
}

#[test]
fn a_single_attempt_never_queues() {
    let server = RedisServer::start();
    let mut con = server.conn();
    assert_eq!(acquire(&mut con, "t", Try::once(A, NOW)).unwrap(), Value::Nil);
    let reply = int(acquire(&mut con, "t", Try::once(B, NOW)).unwrap());
    assert!(reply > 0 && reply <= LEASE, "reply {reply}");
    assert!(!exists(&mut con, &queue_of("t")));
    assert!(!exists(&mut con, &timeouts_of("t")));
    // Nor does it jump the queue of a free lock.
    assert!(int(acquire(&mut con, "t", Try::waiting(C, NOW)).unwrap()) > 0);
    assert_eq!(release(&mut con, "t", A, NOW).unwrap(), Value::Int(1));
    assert_eq!(acquire(&mut con, "t", Try::once(B, NOW)).unwrap(), Value::Int(1));
    assert_eq!(queue(&mut con, "t"), [C]);
    assert!(!exists(&mut con, "t"));
}

#[test]
fn a_queued_waiter_keeps_its_place_and_rearms_its_deadline_at_each_retry() {
    let server = RedisServer::start();
    let mut con = server.conn();
    acquire(&mut con, "k", Try::waiting(A, NOW)).unwrap();
    int(acquire(&mut con, "k", Try::waiting(B, NOW)).unwrap());
    int(acquire(&mut con, "k", Try::waiting(C, NOW)).unwrap());

    // Retrying a little later keeps the places and moves both deadlines.
    int(acquire(&mut con, "k", Try::waiting(C, NOW + 1_000)).unwrap());
    int(acquire(&mut con, "k", Try::waiting(B, NOW + 1_000)).unwrap());
    assert_eq!(queue(&mut con, "k"), [B, C]);
    assert_eq!(deadline(&mut con, "k", B), Some(NOW + 1_000 + SLOT));
    assert_eq!(deadline(&mut con, "k", C), Some(NOW + 1_000 + 2 * SLOT));

    // The holder renews for ten slots; both retry every half slot, and
    // each retry re-arms the deadline at now + (position + 1) slots: nobody
    // is dropped, however long the wait.
    let mut now = NOW;
    for _ in 0..20 {
        now += SLOT / 2;
        let _: i64 = redis::cmd("PEXPIRE").arg("k").arg(LEASE).query(&mut con).unwrap();
        for owner in [C, B] {
            let wait = int(acquire(&mut con, "k", Try::waiting(owner, now)).unwrap());
            assert!((1..=SLOT / 2).contains(&wait), "a queued wait is bounded by half a slot, not {wait}");
        }
    }
    assert_eq!(queue(&mut con, "k"), [B, C]);
    assert_eq!(deadline(&mut con, "k", B), Some(now + SLOT));
    assert_eq!(deadline(&mut con, "k", C), Some(now + 2 * SLOT));
}

/// Issue 21, item 3, at the script level: a queued keyholder waiter's retry
/// lowers its deadline to its place (now + (position + 1) slots), so once
/// it dies it is dropped about a slot after its last retry, long before the
/// holder's lease runs out; Java waiters' deadlines keep Redisson's rule.
#[test]
fn a_keyholder_waiters_retry_lowers_its_deadline_to_its_place_and_java_deadlines_keep_redissons_rule() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen(&server, "low");
    let slot = 1_000;
    let at = |owner, now| Try { slot, ..Try::waiting(owner, now) };
    // A holds with a 30 s lease. B was queued by Redisson's rule (as
    // keyholder queued before this fix): now + the holder's PTTL + a slot.
    acquire(&mut con, "low", at(A, NOW)).unwrap();
    int(redisson_fair::acquire(&mut con, LEASE, slot, "low", B, NOW));
    let old = deadline(&mut con, "low", B).unwrap();
    assert!(old > NOW + LEASE - 1_000 + slot, "Redisson's deadline {old}");
    // C, a Java waiter, chains on it, as Redisson does; D is keyholder's.
    int(redisson_fair::acquire(&mut con, LEASE, slot, "low", C, NOW));
    assert_eq!(deadline(&mut con, "low", C), Some(old + slot));
    int(acquire(&mut con, "low", at(D, NOW)).unwrap());
    assert_eq!(deadline(&mut con, "low", D), Some(NOW + 3 * slot));

    // B's keyholder retry lowers its deadline to its place, the head's.
    int(acquire(&mut con, "low", at(B, NOW + 200)).unwrap());
    assert_eq!(deadline(&mut con, "low", B), Some(NOW + 200 + slot));
    // Its next retry raises it again; D's retry re-arms D's alone.
    int(acquire(&mut con, "low", at(B, NOW + 400)).unwrap());
    int(acquire(&mut con, "low", at(D, NOW + 400)).unwrap());
    let last = NOW + 400;
    assert_eq!(deadline(&mut con, "low", B), Some(last + slot));
    assert_eq!(deadline(&mut con, "low", D), Some(last + 3 * slot));
    // Java's deadline is untouched by keyholder's retries.
    assert_eq!(deadline(&mut con, "low", C), Some(old + slot));
    assert_eq!(queue(&mut con, "low"), [B, C, D]);

    // B dies. A slot after its last retry, D's retry drops it, while the
    // holder's lease still has most of its 30 s to run.
    int(acquire(&mut con, "low", at(D, last + slot - 1)).unwrap());
    assert_eq!(queue(&mut con, "low"), [B, C, D]);
    int(acquire(&mut con, "low", at(D, last + slot)).unwrap());
    assert_eq!(queue(&mut con, "low"), [C, D]);
    assert_eq!(deadline(&mut con, "low", B), None);
    assert!(pttl(&mut con, "low") > LEASE - 5_000, "the holder still holds");
    assert!(heard(&listener, &mut con, "low").is_empty(), "the lock is held: nobody is woken");
    // The release wakes C, the Java head, at once.
    assert_eq!(release(&mut con, "low", A, last + slot).unwrap(), Value::Int(1));
    assert_eq!(heard(&listener, &mut con, "low"), [(wake_of("low", C), "0".to_owned())]);
    assert_eq!(redisson_fair::acquire(&mut con, LEASE, slot, "low", C, last + slot), Value::Nil);
}

#[test]
fn release_wakes_only_the_head_on_its_own_channel_and_only_the_head_may_take_the_lock() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen(&server, "w");
    acquire(&mut con, "w", Try::waiting(A, NOW)).unwrap();
    int(acquire(&mut con, "w", Try::waiting(B, NOW)).unwrap());
    int(acquire(&mut con, "w", Try::waiting(C, NOW)).unwrap());

    assert_eq!(release(&mut con, "w", A, NOW).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "w"));
    assert_eq!(heard(&listener, &mut con, "w"), [(wake_of("w", B), "0".to_owned())]);

    // C is not the head: the free lock is not its, and it may wait until
    // B's deadline (bounded by half a slot).
    let wait = int(acquire(&mut con, "w", Try::waiting(C, NOW + 10)).unwrap());
    assert_eq!(wait, SLOT / 2);
    assert!(!exists(&mut con, "w"));
    // With a longer slot, the wait is exactly the time until B's deadline.
    let b_deadline = deadline(&mut con, "w", B).unwrap();
    let long = Try { slot: 2 * (b_deadline - NOW), ..Try::waiting(C, NOW) };
    assert_eq!(int(acquire(&mut con, "w", long).unwrap()), b_deadline - NOW);

    // B is: it takes the lock, leaves the queue, and C's deadline drops by
    // a slot (Redisson's drift fix).
    let c = deadline(&mut con, "w", C).unwrap();
    assert_eq!(acquire(&mut con, "w", Try::waiting(B, NOW + 20)).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "w"), one_field(B, "1"));
    assert_eq!(queue(&mut con, "w"), [C]);
    assert_eq!(deadline(&mut con, "w", B), None);
    assert_eq!(deadline(&mut con, "w", C), Some(c - SLOT));
    assert!(heard(&listener, &mut con, "w").is_empty(), "acquiring publishes nothing");
}

#[test]
fn dead_heads_are_dropped_once_their_deadline_passes_and_the_next_is_woken() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen(&server, "d");
    acquire(&mut con, "d", Try::waiting(A, NOW)).unwrap();
    int(acquire(&mut con, "d", Try::waiting(B, NOW)).unwrap());
    int(acquire(&mut con, "d", Try::waiting(C, NOW)).unwrap());
    int(acquire(&mut con, "d", Try::waiting(D, NOW)).unwrap());
    assert_eq!(release(&mut con, "d", A, NOW).unwrap(), Value::Int(1));
    assert_eq!(heard(&listener, &mut con, "d"), [(wake_of("d", B), "0".to_owned())]);

    // B never comes. Before its deadline, D's retry changes nothing.
    let b = deadline(&mut con, "d", B).unwrap();
    int(acquire(&mut con, "d", Try::waiting(D, b - 1)).unwrap());
    assert_eq!(queue(&mut con, "d"), [B, C, D]);
    // At its deadline, D's retry drops B and wakes C, the new head, since
    // the lock is free; D stays queued.
    int(acquire(&mut con, "d", Try::waiting(D, b)).unwrap());
    assert_eq!(queue(&mut con, "d"), [C, D]);
    assert_eq!(deadline(&mut con, "d", B), None);
    assert_eq!(heard(&listener, &mut con, "d"), [(wake_of("d", C), "0".to_owned())]);
    assert_eq!(acquire(&mut con, "d", Try::waiting(C, b)).unwrap(), Value::Nil);
    assert_eq!(queue(&mut con, "d"), [D]);
}

#[test]
fn a_head_without_a_deadline_counts_as_dead() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let _: i64 = redis::cmd("RPUSH").arg(queue_of("n")).arg(B).query(&mut con).unwrap();
    assert_eq!(acquire(&mut con, "n", Try::waiting(C, NOW)).unwrap(), Value::Nil);
    assert!(!exists(&mut con, &queue_of("n")));
}

#[test]
fn reentry_increments_and_never_touches_the_queue() {
    let server = RedisServer::start();
    let mut con = server.conn();
    acquire(&mut con, "r", Try::waiting(A, NOW)).unwrap();
    int(acquire(&mut con, "r", Try::waiting(B, NOW)).unwrap());
    let _: i64 = redis::cmd("PEXPIRE").arg("r").arg(1_000).query(&mut con).unwrap();
    // A re-entry long after B's deadline drops nobody.
    let reentry = Try { mode: Some("0"), ..Try::waiting(A, NOW + 100 * SLOT) };
    assert_eq!(acquire(&mut con, "r", reentry).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "r"), one_field(A, "2"));
    assert!(pttl(&mut con, "r") > LEASE - 1_000, "the re-entry lengthens the lease");
    assert_eq!(queue(&mut con, "r"), [B]);
    // A re-entry of an owner without a field is refused with -2.
    let stranger = Try { mode: Some("0"), ..Try::waiting(C, NOW) };
    assert_eq!(acquire(&mut con, "r", stranger).unwrap(), Value::Int(-2));
    assert_eq!(queue(&mut con, "r"), [B]);
    // Redisson's rule (no mode) increments too.
    let redisson = Try { mode: None, ..Try::waiting(A, NOW) };
    assert_eq!(acquire(&mut con, "r", redisson).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "r"), one_field(A, "3"));
    // A new hold resets a stale count.
    assert_eq!(acquire(&mut con, "r", Try::waiting(A, NOW)).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "r"), one_field(A, "1"));
}

#[test]
fn release_outcomes_nested_final_not_owner_and_gone() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen(&server, "o");
    acquire(&mut con, "o", Try::waiting(A, NOW)).unwrap();
    acquire(&mut con, "o", Try { mode: Some("0"), ..Try::waiting(A, NOW) }).unwrap();
    int(acquire(&mut con, "o", Try::waiting(B, NOW)).unwrap());

    assert_eq!(release(&mut con, "o", C, NOW).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "o"), one_field(A, "2"));
    let _: i64 = redis::cmd("PEXPIRE").arg("o").arg(1_000).query(&mut con).unwrap();
    assert_eq!(release(&mut con, "o", A, NOW).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, "o"), one_field(A, "1"));
    assert!(pttl(&mut con, "o") > LEASE - 1_000, "a nested release re-applies the lease");
    assert!(heard(&listener, &mut con, "o").is_empty());

    assert_eq!(release(&mut con, "o", A, NOW).unwrap(), Value::Int(1));
    assert_eq!(heard(&listener, &mut con, "o"), [(wake_of("o", B), "0".to_owned())]);
    // The lock is gone: Redisson's unlock succeeds and wakes the head again.
    assert_eq!(release(&mut con, "o", A, NOW).unwrap(), Value::Int(2));
    assert_eq!(heard(&listener, &mut con, "o"), [(wake_of("o", B), "0".to_owned())]);
    assert_eq!(queue(&mut con, "o"), [B]);
}

#[test]
fn a_latched_release_retried_returns_the_first_outcome_and_changes_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let latch = "redisson_unlock_latch:{l}:000000000000000000000000000000a1";
    acquire(&mut con, "l", Try::waiting(A, NOW)).unwrap();
    acquire(&mut con, "l", Try { mode: Some("0"), ..Try::waiting(A, NOW) }).unwrap();
    acquire(&mut con, "l", Try { mode: Some("0"), ..Try::waiting(A, NOW) }).unwrap();

    assert_eq!(release_with(&mut con, "l", A, NOW, Some((latch, 7, false))).unwrap(), Value::Int(0));
    let value: String = redis::cmd("GET").arg(latch).query(&mut con).unwrap();
    assert_eq!(value, "7:0");
    assert!(pttl(&mut con, latch) > 19_000);
    // The retry of request 7 returns 0 again and leaves the count at 2.
    assert_eq!(release_with(&mut con, "l", A, NOW, Some((latch, 7, true))).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, "l"), one_field(A, "2"));
    // A new request releases again; not being a retry, it ignores the latch.
    assert_eq!(release_with(&mut con, "l", A, NOW, Some((latch, 8, false))).unwrap(), Value::Int(0));
    assert_eq!(hgetall(&mut con, "l"), one_field(A, "1"));
    // A foreign key at the latch's name is neither read nor overwritten.
    let _: () = redis::cmd("SET").arg(latch).arg("foreign").query(&mut con).unwrap();
    assert_eq!(release_with(&mut con, "l", A, NOW, Some((latch, 9, true))).unwrap(), Value::Int(1));
    let value: String = redis::cmd("GET").arg(latch).query(&mut con).unwrap();
    assert_eq!(value, "foreign");
    assert!(!exists(&mut con, "l"));
}

#[test]
fn fencing_tokens_are_minted_on_each_acquisition_made_with_the_counter() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let fenced = |owner| Try { fenced: true, ..Try::waiting(owner, NOW) };
    let token = |reply: Value| -> u64 {
        let Value::Array(pair) = &reply else { panic!("expected a pair, got {reply:?}") };
        assert_eq!(pair[0], Value::Int(-1), "not acquired: {reply:?}");
        let Value::BulkString(digits) = &pair[1] else { panic!("expected a decimal string, got {reply:?}") };
        std::str::from_utf8(digits).unwrap().parse().unwrap()
    };
    // No counter yet: the token is the server's clock in microseconds.
    let before = common::server_micros(&mut con);
    let first = token(acquire(&mut con, "tok", fenced(A)).unwrap());
    assert!((before..=common::server_micros(&mut con)).contains(&first), "{first} is not the clock");
    let refused = acquire(&mut con, "tok", fenced(B)).unwrap();
    let Value::Array(pair) = refused else { panic!("expected a pair, got {refused:?}") };
    assert_eq!(pair[1], Value::Int(-1));
    assert!(int(pair[0].clone()) > 0);
    assert_eq!(release(&mut con, "tok", A, NOW).unwrap(), Value::Int(1));
    let second = token(acquire(&mut con, "tok", fenced(B)).unwrap());
    assert!(second > first);
    let value: String = redis::cmd("GET").arg(token_of("tok")).query(&mut con).unwrap();
    assert_eq!(value, second.to_string(), "the counter holds the last token");
    assert_eq!(pttl(&mut con, &token_of("tok")), -1, "the counter has no TTL");
    // A counter with no next token is refused before anything changes.
    let _: () = redis::cmd("SET").arg(token_of("tok")).arg("9223372036854775807").query(&mut con).unwrap();
    assert_eq!(release(&mut con, "tok", B, NOW).unwrap(), Value::Int(1));
    let e = acquire(&mut con, "tok", fenced(C)).unwrap_err();
    assert!(e.to_string().contains("BADCOUNTER"), "{e}");
    assert!(!exists(&mut con, "tok"));
}

#[test]
fn dequeue_removes_the_waiter_lowers_later_deadlines_and_passes_on_a_wake_up() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen(&server, "g");
    acquire(&mut con, "g", Try::waiting(A, NOW)).unwrap();
    for owner in [B, C, D] {
        int(acquire(&mut con, "g", Try::waiting(owner, NOW)).unwrap());
    }
    let (b, d) = (deadline(&mut con, "g", B).unwrap(), deadline(&mut con, "g", D).unwrap());
    // C leaves while the lock is held: D's deadline drops by a slot; B's
    // stays; nobody is woken.
    assert_eq!(dequeue(&mut con, "g", C, SLOT).unwrap(), Value::Int(1));
    assert_eq!(queue(&mut con, "g"), [B, D]);
    assert_eq!(deadline(&mut con, "g", C), None);
    assert_eq!((deadline(&mut con, "g", B), deadline(&mut con, "g", D)), (Some(b), Some(d - SLOT)));
    assert!(heard(&listener, &mut con, "g").is_empty());
    // Leaving again changes nothing.
    assert_eq!(dequeue(&mut con, "g", C, SLOT).unwrap(), Value::Int(0));

    // The lock is released and B woken, but B gives up: D is woken.
    assert_eq!(release(&mut con, "g", A, NOW).unwrap(), Value::Int(1));
    assert_eq!(heard(&listener, &mut con, "g"), [(wake_of("g", B), "0".to_owned())]);
    assert_eq!(dequeue(&mut con, "g", B, SLOT).unwrap(), Value::Int(1));
    assert_eq!(heard(&listener, &mut con, "g"), [(wake_of("g", D), "0".to_owned())]);
    assert_eq!(queue(&mut con, "g"), [D]);
}

#[test]
fn force_unlock_deletes_any_holders_lock_and_wakes_the_head() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen(&server, "x");
    assert_eq!(force_unlock(&mut con, "x", NOW).unwrap(), Value::Int(0));
    acquire(&mut con, "x", Try::waiting(A, NOW)).unwrap();
    int(acquire(&mut con, "x", Try::waiting(B, NOW)).unwrap());
    assert_eq!(force_unlock(&mut con, "x", NOW).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "x"));
    assert_eq!(heard(&listener, &mut con, "x"), [(wake_of("x", B), "0".to_owned())]);
    assert_eq!(queue(&mut con, "x"), [B]);
    assert_eq!(force_unlock(&mut con, "x", NOW).unwrap(), Value::Int(0));
    assert!(heard(&listener, &mut con, "x").is_empty());
}

#[test]
fn keys_of_another_type_are_wrongtype_and_nothing_changes() {
    let server = RedisServer::start();
    let mut con = server.conn();
    for (key, name) in [
        ("bad".to_owned(), "bad"),
        (queue_of("bq"), "bq"),
        (timeouts_of("bt"), "bt"),
        (grants_of("bg"), "bg"),
    ] {
        let _: () = redis::cmd("SET").arg(&key).arg("foreign").query(&mut con).unwrap();
        let mut before: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        before.sort();
        let mut results = vec![
            acquire(&mut con, name, Try::waiting(A, NOW)),
            release(&mut con, name, A, NOW),
            dequeue(&mut con, name, A, SLOT),
        ];
        // Force unlock does not read the grants.
        if name != "bg" {
            results.push(force_unlock(&mut con, name, NOW));
        }
        for result in results {
            let e = result.unwrap_err();
            assert!(e.to_string().contains("WRONGTYPE"), "{key}: {e}");
        }
        let mut after: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        after.sort();
        assert_eq!(before, after, "{key}");
        let value: String = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        assert_eq!(value, "foreign");
    }
    let _: () = redis::cmd("SET").arg(token_of("bc")).arg("x").query(&mut con).unwrap();
    let e = acquire(&mut con, "bc", Try { fenced: true, ..Try::waiting(A, NOW) }).unwrap_err();
    assert!(e.to_string().contains("BADCOUNTER"), "{e}");
    assert!(!exists(&mut con, "bc"));
}

#[test]
fn a_name_with_braces_keeps_them_in_every_derived_key() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let name = "{user}:1";
    let s = script(&common::lua("fair/acquire.lua"));
    let call = |con: &mut redis::Connection, owner: &str| -> Value {
        s.key(name)
            .key("redisson_lock_queue:{user}:1")
            .key("redisson_lock_timeout:{user}:1")
            .key("redisson_lock__channel:{user}:1")
            .key("keyholder_fair_grants:tagged:{user}:1")
            .arg(LEASE)
            .arg(owner)
            .arg(SLOT)
            .arg(NOW)
            .arg("1")
            .arg("1")
            .arg("publish")
            .invoke(con)
            .unwrap()
    };
    assert_eq!(call(&mut con, A), Value::Nil);
    int(call(&mut con, B));
    let queued: Vec<String> =
        redis::cmd("LRANGE").arg("redisson_lock_queue:{user}:1").arg(0).arg(-1).query(&mut con).unwrap();
    assert_eq!(queued, [B]);
}

#[test]
fn java_and_keyholder_waiters_share_one_fifo_queue() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen(&server, "mix");
    // A (Java) holds; B (keyholder), C (Java), D (keyholder) queue.
    assert_eq!(redisson_fair::acquire(&mut con, LEASE, SLOT, "mix", A, NOW), Value::Nil);
    int(acquire(&mut con, "mix", Try::waiting(B, NOW)).unwrap());
    int(redisson_fair::acquire(&mut con, LEASE, SLOT, "mix", C, NOW));
    int(acquire(&mut con, "mix", Try::waiting(D, NOW)).unwrap());
    assert_eq!(queue(&mut con, "mix"), [B, C, D]);
    // Java's deadline for C chains on B's, as between two Java waiters.
    let b = deadline(&mut con, "mix", B).unwrap();
    assert_eq!(deadline(&mut con, "mix", C), Some(b + SLOT));

    // Java's release wakes the keyholder head; nobody else may take it.
    assert_eq!(redisson_fair::release(&mut con, LEASE, "mix", A, NOW), Value::Int(1));
    assert_eq!(heard(&listener, &mut con, "mix"), [(wake_of("mix", B), "0".to_owned())]);
    assert_eq!(redisson_fair::acquire(&mut con, LEASE, SLOT, "mix", C, NOW), Value::Int(0));
    assert!(int(acquire(&mut con, "mix", Try::waiting(D, NOW)).unwrap()) > 0);
    assert_eq!(acquire(&mut con, "mix", Try::waiting(B, NOW)).unwrap(), Value::Nil);

    // keyholder's release wakes the Java head, C, which takes it.
    assert_eq!(release(&mut con, "mix", B, NOW).unwrap(), Value::Int(1));
    assert_eq!(heard(&listener, &mut con, "mix"), [(wake_of("mix", C), "0".to_owned())]);
    assert!(int(acquire(&mut con, "mix", Try::waiting(D, NOW)).unwrap()) > 0);
    assert_eq!(redisson_fair::acquire(&mut con, LEASE, SLOT, "mix", C, NOW), Value::Nil);
    assert_eq!(redisson_fair::release(&mut con, LEASE, "mix", C, NOW), Value::Int(1));
    assert_eq!(heard(&listener, &mut con, "mix"), [(wake_of("mix", D), "0".to_owned())]);
    assert_eq!(acquire(&mut con, "mix", Try::waiting(D, NOW)).unwrap(), Value::Nil);
    assert!(!exists(&mut con, &queue_of("mix")));
    assert!(!exists(&mut con, &timeouts_of("mix")));
}

#[test]
fn a_keyholder_waiter_refreshing_its_slot_outlives_a_long_hold_that_drops_a_java_waiter() {
    let server = RedisServer::start();
    let mut con = server.conn();
    // A holds for ten slots, renewing; B (keyholder) retries every half
    // slot, C (Java) waits without refreshing, as Redisson does (#3004).
    assert_eq!(redisson_fair::acquire(&mut con, LEASE, SLOT, "long", A, NOW), Value::Nil);
    int(redisson_fair::acquire(&mut con, LEASE, SLOT, "long", C, NOW));
    int(acquire(&mut con, "long", Try::waiting(B, NOW)).unwrap());
    assert_eq!(queue(&mut con, "long"), [C, B]);
    let mut now = NOW;
    for _ in 0..20 {
        now += SLOT / 2;
        let _: i64 = redis::cmd("PEXPIRE").arg("long").arg(LEASE).query(&mut con).unwrap();
        int(acquire(&mut con, "long", Try::waiting(B, now)).unwrap());
    }
    // C was dropped as soon as its deadline passed; B, alive, is the head.
    assert_eq!(queue(&mut con, "long"), [B]);
    assert_eq!(redisson_fair::release(&mut con, LEASE, "long", A, now), Value::Int(1));
    assert_eq!(acquire(&mut con, "long", Try::waiting(B, now)).unwrap(), Value::Nil);
}

/// Every channel a test about `name` could see a message on, grant channels
/// included.
fn listen_with_grants(server: &RedisServer, name: &str) -> Listener {
    let mut channels = vec![channel_of(name)];
    for owner in [A, B, C, D] {
        channels.push(wake_of(name, owner));
        channels.push(format!("{}:{owner}", grant_prefix_of(name)));
    }
    let refs: Vec<&str> = channels.iter().map(String::as_str).collect();
    Listener::start(server, &refs)
}

#[test]
fn a_release_hands_the_lock_to_a_listening_keyholder_head_in_one_call() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen_with_grants(&server, "h");
    acquire(&mut con, "h", Try::waiting(A, NOW)).unwrap();
    let b_try = Try { ticket: Some(41), lease: 7_000, ..Try::waiting(B, NOW) };
    int(acquire(&mut con, "h", b_try).unwrap());
    int(acquire(&mut con, "h", Try::waiting(C, NOW)).unwrap());
    let entry: String = redis::cmd("HGET").arg(grants_of("h")).arg(B).query(&mut con).unwrap();
    assert!(entry.starts_with(&format!("7000 {SLOT} ")) && entry.ends_with(" 41"), "{entry}");
    let c = deadline(&mut con, "h", C).unwrap();

    assert_eq!(release(&mut con, "h", A, NOW).unwrap(), Value::Int(1));
    // B holds it now, as its own acquire would have left it.
    assert_eq!(hgetall(&mut con, "h"), one_field(B, "1"));
    let ttl = pttl(&mut con, "h");
    assert!(ttl > 6_000 && ttl <= 7_000, "the grantee's lease: PTTL {ttl}");
    assert_eq!(queue(&mut con, "h"), [C]);
    assert_eq!(deadline(&mut con, "h", C), Some(c - SLOT));
    assert!(!exists(&mut con, &grants_of("h")));
    let heard = heard(&listener, &mut con, "h");
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0].0, format!("{}:{B}", grant_prefix_of("h")));
    let (owner, ms) = heard[0].1.split_once(' ').unwrap();
    assert_eq!(owner, format!("{B}/41"));
    assert!(ms.parse::<u64>().is_ok());
    // Its retry, if it makes one, finds the lock its own.
    assert_eq!(acquire(&mut con, "h", Try::waiting(B, NOW)).unwrap(), Value::Nil);
    assert_eq!(hgetall(&mut con, "h"), one_field(B, "1"));
}

#[test]
fn a_head_that_does_not_listen_for_grants_is_only_woken() {
    let server = RedisServer::start();
    let mut con = server.conn();
    // Nobody listens on B's grant channel: the release falls back to "0".
    let listener = listen(&server, "nl");
    acquire(&mut con, "nl", Try::waiting(A, NOW)).unwrap();
    int(acquire(&mut con, "nl", Try { ticket: Some(1), ..Try::waiting(B, NOW) }).unwrap());
    assert_eq!(release(&mut con, "nl", A, NOW).unwrap(), Value::Int(1));
    assert!(!exists(&mut con, "nl"));
    assert_eq!(heard(&listener, &mut con, "nl"), [(wake_of("nl", B), "0".to_owned())]);
    assert_eq!(queue(&mut con, "nl"), [B]);
    // A retry without a ticket withdraws the entry.
    assert_eq!(acquire(&mut con, "nl", Try::waiting(B, NOW)).unwrap(), Value::Nil);
    assert!(!exists(&mut con, &grants_of("nl")));
}

#[test]
fn a_waiter_that_gives_up_after_a_grant_gives_the_lock_back_and_wakes_the_next() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let listener = listen_with_grants(&server, "gb");
    acquire(&mut con, "gb", Try::waiting(A, NOW)).unwrap();
    int(acquire(&mut con, "gb", Try { ticket: Some(5), ..Try::waiting(B, NOW) }).unwrap());
    int(acquire(&mut con, "gb", Try::waiting(C, NOW)).unwrap());
    assert_eq!(release(&mut con, "gb", A, NOW).unwrap(), Value::Int(1));
    assert_eq!(hgetall(&mut con, "gb"), one_field(B, "1"));
    let _ = heard(&listener, &mut con, "gb");
    // B's call timed out before it heard the grant.
    assert_eq!(dequeue(&mut con, "gb", B, SLOT).unwrap(), Value::Int(2));
    assert!(!exists(&mut con, "gb"));
    assert_eq!(heard(&listener, &mut con, "gb"), [(wake_of("gb", C), "0".to_owned())]);
    assert_eq!(acquire(&mut con, "gb", Try::waiting(C, NOW)).unwrap(), Value::Nil);
}
