//! Fencing tokens and election terms that never go backwards (issue 36,
//! item 4), against real servers: across a restart without persistence, an
//! operator's `DEL` of the counter, a counter left by Redisson or an older
//! keyholder, a Sentinel failover after the primary is killed and one
//! requested with the old primary alive, and a Cluster shard failover, each
//! failover to a replica that lacks the latest increments; and with a Java
//! Redisson `RFencedLock` `INCR`ing the same counter (item 2).
//!
//! Each case guards a resource: testkit's fenced store, on a server of its
//! own that is never faulted, which refuses a token lower than the highest
//! it has seen. Holders use it before the event, each with its token; after
//! the event, the first holders must get tokens above every token handed
//! out before (0 new holders refused by the store), and a late write with
//! any token from before must be refused (0 stale writes accepted).
//!
//! A replica is made to lack increments its primary acknowledged (Redis
//! replicates asynchronously) by freezing it (SIGSTOP) and writing, before
//! the increments, more than the kernel can buffer on the replication link
//! (see [`lag_behind`]): the increments then wait in the primary's own
//! memory, lost when it is killed, and read by the replica only after
//! several event-loop rounds when it is promoted while the primary lives.
//! Each failover test reads the promoted replica's counter and checks it is
//! below the highest token handed out, so it cannot pass without a loss.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::redisson_lock::RedissonClient;

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::store::FencedStore;
use common::{RedisServer, ServerExt};
use keyholder::Client;
use keyholder_testkit::SentinelSet;
use keyholder_testkit::cluster::RedisCluster;
use keyholder_testkit::sentinel::MASTER_NAME;

const SECOND: Duration = Duration::from_secs(1);

/// How long a first acquisition after an event may take, its errors
/// retried (a client riding out a restart or following a failover).
const AFTER_EVENT: Duration = Duration::from_secs(30);

/// How long a failover may take on a loaded two-core machine.
const FAILOVER: Duration = Duration::from_secs(30);

/// The largest token Redis can hold (2^63 - 1): no token follows it.
const LAST_TOKEN: u64 = i64::MAX as u64;

/// The counter of lock `name` (Redisson `RFencedLock`'s).
fn counter(name: &str) -> String {
    format!("redisson_lock_token:{{{name}}}")
}

/// The counter of `name` as `con` holds it (`None`: absent).
fn counter_on(con: &mut redis::Connection, name: &str) -> Option<u64> {
    redis::cmd("GET").arg(counter(name)).query(con).unwrap()
}

/// The resource the locks protect: a fenced store on a server of its own,
/// and the tokens handed out before and after the event.
struct Resource {
    server: RedisServer,
    con: redis::Connection,
    store: FencedStore,
    /// Tokens handed out before the event, in order of acquisition.
    before: Vec<u64>,
    /// Tokens handed out after it, in order, each with whether the store
    /// took its holder's read and write.
    after: Vec<(u64, bool)>,
}

impl Resource {
    fn new() -> Resource {
        let server = RedisServer::start();
        let con = server.conn();
        Resource { server, con, store: FencedStore::new("resource"), before: Vec::new(), after: Vec::new() }
    }

    /// A holder before the event reads and writes with `token`: accepted,
    /// as every token so far is above the ones before it.
    #[track_caller]
    fn before(&mut self, token: u64) {
        if let Some(&last) = self.before.last() {
            assert!(token > last, "token {token} after {last}, before the event");
        }
        assert!(self.store.read(&mut self.con, token).unwrap().is_accepted(), "read with {token} refused");
        let value = format!("before-{}", self.before.len());
        assert!(
            self.store.write(&mut self.con, token, &value).unwrap().is_accepted(),
            "write with {token} refused"
        );
        self.before.push(token);
    }

    fn highest_before(&self) -> u64 {
        *self.before.iter().max().expect("tokens were handed out before the event")
    }

    /// A holder after the event reads and writes with `token`.
    fn after(&mut self, token: u64) {
        let read = self.store.read(&mut self.con, token).unwrap().is_accepted();
        let value = format!("after-{}", self.after.len());
        let write = self.store.write(&mut self.con, token, &value).unwrap().is_accepted();
        self.after.push((token, read && write));
    }

    /// The verdict: every holder before the event writes once more, late
    /// (a paused holder acting after the event), and the store must refuse
    /// each; every token after the event is above every token before it
    /// and above the one before it, and the store refused none of their
    /// holders.
    #[track_caller]
    fn check(&mut self, event: &str) {
        let highest = self.highest_before();
        assert!(!self.after.is_empty(), "{event}: no acquisition after the event");
        let stale: Vec<u64> = self.before.clone();
        let stale_accepted = stale
            .iter()
            .filter(|&&t| self.store.write(&mut self.con, t, "stale").unwrap().is_accepted())
            .count();
        let refused = self.after.iter().filter(|(_, taken)| !taken).count();
        let mut regressions: Vec<String> = self
            .after
            .iter()
            .filter(|&&(t, _)| t <= highest)
            .map(|(t, _)| format!("token {t} after {highest}"))
            .collect();
        regressions.extend(
            self.after
                .windows(2)
                .filter(|w| w[1].0 <= w[0].0)
                .map(|w| format!("token {} after {}", w[1].0, w[0].0)),
        );
        println!(
            "{event}: {} tokens before (highest {highest}), after {:?}: {refused} new holders refused, \
             {stale_accepted} stale writes accepted",
            self.before.len(),
            self.after.iter().map(|(t, _)| t).collect::<Vec<_>>()
        );
        assert!(
            regressions.is_empty() && refused == 0 && stale_accepted == 0,
            "{event}: {} ({refused} new holders refused, {stale_accepted} stale writes accepted); \
             before {:?}, after {:?}",
            regressions.join(", "),
            self.before,
            self.after
        );
    }
}

/// The first `Ok(Some(_))` of `attempt` within `limit`; errors and
/// `Ok(None)` are tried again after 100 ms.
#[track_caller]
fn first_success<T>(
    limit: Duration,
    what: &str,
    mut attempt: impl FnMut() -> keyholder::Result<Option<T>>,
) -> T {
    let deadline = Instant::now() + limit;
    let mut failures = Vec::new();
    loop {
        match attempt() {
            Ok(Some(value)) => return value,
            outcome => {
                failures.push(outcome.err().map_or_else(|| "not acquired".to_owned(), |e| e.to_string()))
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: nothing within {limit:?}; {} failures, the last: {:?}",
            failures.len(),
            failures.last()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A fenced kind sharing the lock name's counter.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Lock,
    Fair,
    Write,
}

use Kind::{Fair, Lock, Write};

/// One fenced acquisition of `name` as `kind` (each attempt waits at most
/// 5 s; failures tried again until `limit`): `use_it` gets the token while
/// the lock is held, then it is released. Returns the token.
#[track_caller]
fn fenced_turn(client: &Client, name: &str, kind: Kind, limit: Duration, use_it: impl FnOnce(u64)) -> u64 {
    let what = format!("{kind:?} {name}");
    let wait = 5 * SECOND;
    match kind {
        Lock => {
            let lock = client.lock(name).unwrap().fenced();
            let guard = first_success(limit, &what, || lock.try_lock_for(wait));
            let token = guard.fencing_token().expect("a fenced hold has a token");
            use_it(token);
            guard.unlock().unwrap();
            token
        }
        Fair => {
            let lock = client.fair_lock(name).unwrap().fenced();
            let guard = first_success(limit, &what, || lock.try_lock_for(wait));
            let token = guard.fencing_token().expect("a fenced hold has a token");
            use_it(token);
            guard.unlock().unwrap();
            token
        }
        Write => {
            let lock = client.read_write_lock(name).unwrap().write().fenced();
            let guard = first_success(limit, &what, || lock.try_lock_for(wait));
            let token = guard.fencing_token().expect("a fenced hold has a token");
            use_it(token);
            guard.unlock().unwrap();
            token
        }
    }
}

/// Holders of every kind before the event.
fn turns_before(client: &Client, name: &str, res: &mut Resource, kinds: &[Kind]) {
    for &kind in kinds {
        fenced_turn(client, name, kind, 10 * SECOND, |t| res.before(t));
    }
}

/// The first holders of every kind after the event.
fn turns_after(client: &Client, name: &str, res: &mut Resource) {
    for kind in [Lock, Fair, Write] {
        fenced_turn(client, name, kind, AFTER_EVENT, |t| res.after(t));
    }
}

// ---------------------------------------------------------------------------
// Single server: restart, DEL, counters left by others, the 2^63 - 1 limit.

#[test]
fn after_a_restart_without_persistence_tokens_stay_above_those_handed_out_before() {
    let name = "restart";
    let mut server = RedisServer::start(); // the harness's servers: no AOF, no RDB
    let client = server.client();
    let mut res = Resource::new();
    turns_before(&client, name, &mut res, &[Lock, Fair, Write, Lock, Fair]);
    server.restart();
    assert_eq!(counter_on(&mut server.conn(), name), None, "the restart kept the counter");
    turns_after(&client, name, &mut res);
    res.check("restart without persistence");
}

#[test]
fn after_an_operator_deletes_the_counter_tokens_stay_above_those_handed_out_before() {
    let name = "deleted";
    let server = RedisServer::start();
    let client = server.client();
    let mut res = Resource::new();
    turns_before(&client, name, &mut res, &[Lock, Fair, Write, Lock, Fair]);
    let deleted: i64 = redis::cmd("DEL").arg(counter(name)).query(&mut server.conn()).unwrap();
    assert_eq!(deleted, 1);
    turns_after(&client, name, &mut res);
    res.check("DEL of the counter");
}

#[test]
fn after_a_restart_without_persistence_an_election_term_is_above_the_terms_before() {
    let name = "restart-terms";
    let mut server = RedisServer::start();
    let client = server.client();
    let election = client.election(name).unwrap();
    let mut res = Resource::new();
    for _ in 0..3 {
        let leadership = election.try_campaign().unwrap().expect("no one else leads");
        res.before(leadership.term());
        leadership.resign().unwrap();
    }
    server.restart();
    let leadership = first_success(AFTER_EVENT, "campaign", || election.try_campaign());
    res.after(leadership.term());
    res.check("election term across a restart without persistence");
}

#[test]
fn a_counter_left_by_redisson_or_an_older_keyholder_is_carried_on() {
    let name = "inherited";
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    // Java RFencedLock holders (or an older keyholder) handed out tokens up
    // to 1810, and the resource saw them.
    let mut res = Resource::new();
    for token in [1800, 1805, 1810] {
        res.before(token);
    }
    let _: () = redis::cmd("SET").arg(counter(name)).arg("1810").query(&mut con).unwrap();
    turns_after(&client, name, &mut res);
    res.check("a counter left at 1810");
    // Still Redisson's counter: a decimal string, the last token, no TTL.
    let last = res.after.last().unwrap().0;
    let text: String = redis::cmd("GET").arg(counter(name)).query(&mut con).unwrap();
    assert_eq!(text, last.to_string());
    assert_eq!(common::pttl(&mut con, &counter(name)), -1, "the counter has no TTL");
}

/// Extends `traps.rs`' check of the plain lock at the 2^63 - 1 limit to the
/// other fenced kinds and to a counter above the clock.
#[test]
fn a_counter_above_the_clock_goes_on_by_one_and_at_the_limit_every_kind_refuses_before_writing() {
    let name = "high";
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let set = |con: &mut redis::Connection, value: &str| {
        let _: () = redis::cmd("SET").arg(counter(name)).arg(value).query(con).unwrap();
    };
    // Far above any clock reading: each token is the one after it, exact
    // (above 2^53, where Lua's numbers are not).
    let high = 9_000_000_000_000_000_000_u64;
    set(&mut con, &high.to_string());
    let mut tokens: Vec<u64> = [Lock, Fair, Write]
        .into_iter()
        .map(|kind| fenced_turn(&client, name, kind, 10 * SECOND, drop))
        .collect();
    let leadership = client.election(name).unwrap().try_campaign().unwrap().expect("no one leads");
    tokens.push(leadership.term());
    leadership.resign().unwrap();
    assert_eq!(tokens, [high + 1, high + 2, high + 3, high + 4]);
    assert_eq!(counter_on(&mut con, name), Some(high + 4));

    // At 2^63 - 1 no token follows: every kind refuses, typed, and writes
    // nothing (no hold, no queue entry, the counter unchanged).
    set(&mut con, &LAST_TOKEN.to_string());
    let keys =
        |con: &mut redis::Connection| -> BTreeSet<String> { redis::cmd("KEYS").arg("*").query(con).unwrap() };
    let existing = keys(&mut con);
    let errors = [
        ("lock", client.lock(name).unwrap().fenced().try_lock().err()),
        ("fair lock", client.fair_lock(name).unwrap().fenced().try_lock().err()),
        ("write lock", client.read_write_lock(name).unwrap().write().fenced().try_lock().err()),
        ("election", client.election(name).unwrap().try_campaign().err()),
    ];
    for (kind, err) in errors {
        let err = err.unwrap_or_else(|| panic!("{kind}: acquired at 2^63 - 1"));
        assert!(err.is_bad_fencing_counter(), "{kind}: {err:?}");
    }
    // (The releases above left unlock latches, which may expire meanwhile.)
    let written: Vec<String> = keys(&mut con).difference(&existing).cloned().collect();
    assert!(written.is_empty(), "written: {written:?}");
    assert!(!common::exists(&mut con, name), "the lock was taken without a token");
    assert_eq!(counter_on(&mut con, name), Some(LAST_TOKEN), "the counter was changed");
}

// ---------------------------------------------------------------------------
// Failovers to a replica that lacks the latest increments.

/// Makes a frozen replica of the primary behind `primary` miss what the
/// primary is told next: writes, to a key in `name`'s slot, more bytes
/// than the kernel can buffer on the replication link (the replica's
/// largest receive buffer, `tcp_rmem`, plus the primary's largest send
/// buffer, `tcp_wmem`, per `/proc`; three times that, at least 64 MiB).
/// The primary keeps the rest in its replica output buffer (unlimited
/// here, so that it does not drop the replica), so increments that follow
/// are lost if the primary dies, and a replica promoted while it lives
/// would read them only after three event-loop rounds or more (each reads
/// at most a receive buffer from the link), while the sentinel's
/// `REPLICAOF NO ONE`, already waiting in its socket, is read in the first.
fn lag_behind(primary: &mut redis::Connection, name: &str) {
    let limit = |path: &str| -> Option<usize> {
        std::fs::read_to_string(path).ok()?.split_whitespace().nth(2)?.parse().ok()
    };
    let buffers = limit("/proc/sys/net/ipv4/tcp_rmem").unwrap_or(32 << 20)
        + limit("/proc/sys/net/ipv4/tcp_wmem").unwrap_or(4 << 20);
    let junk = vec![b'x'; (3 * buffers).max(64 << 20)];
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("replica 0 0 0")
        .query(primary)
        .unwrap();
    let _: () = redis::cmd("SET").arg(format!("{{{name}}}:junk")).arg(junk).query(primary).unwrap();
}

/// Waits (5 s at most) until a replica has every write `primary` has
/// taken.
#[track_caller]
fn replicated(primary: &mut redis::Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(primary).unwrap();
    assert_eq!(acked, 1, "the replica did not catch up");
}

fn sentinel_client(set: &SentinelSet) -> Client {
    Client::builder_sentinel(set.sentinel_urls(), MASTER_NAME)
        .connect_timeout(SECOND)
        .command_timeout(SECOND)
        .build()
        .unwrap()
}

/// Waits until a replica's counter of `name` is `token` (bounded).
#[track_caller]
fn replica_has(replica: &RedisServer, name: &str, token: u64) {
    let mut con = replica.conn();
    assert!(
        common::eventually(10 * SECOND, || counter_on(&mut con, name) == Some(token)),
        "the replica never got token {token}: {:?}",
        counter_on(&mut con, name)
    );
}

#[test]
fn after_a_sentinel_failover_from_a_killed_primary_to_a_lagging_replica_tokens_stay_above() {
    let name = "sentinel-killed";
    let mut set = SentinelSet::start();
    let client = sentinel_client(&set);
    let mut res = Resource::new();
    let mut primary = set.primary().conn();
    turns_before(&client, name, &mut res, &[Lock, Fair, Write]);
    replicated(&mut primary);
    replica_has(set.replica(), name, res.highest_before());
    let kept = res.highest_before();

    set.replica().freeze();
    lag_behind(&mut primary, name);
    turns_before(&client, name, &mut res, &[Lock, Fair, Write, Lock]);
    set.kill_primary();
    set.replica().thaw();
    assert!(set.wait_for_promotion(FAILOVER), "no promotion:\n{}", set.logs());

    // The promoted replica lacks the increments the primary took last.
    let left = counter_on(&mut set.replica().conn(), name);
    assert_eq!(left, Some(kept), "the replica should have kept {kept} of {:?}", res.before);
    turns_after(&client, name, &mut res);
    res.check("Sentinel failover after the primary was killed");
}

#[test]
fn after_a_requested_sentinel_failover_to_a_lagging_replica_tokens_stay_above() {
    let name = "sentinel-requested";
    let set = SentinelSet::start();
    // The replica is frozen for a while below: the sentinels must not call
    // it down meanwhile (they would not promote it).
    for url in set.sentinel_urls() {
        let mut con = redis::Client::open(url).unwrap().get_connection_with_timeout(SECOND).unwrap();
        let _: () = redis::cmd("SENTINEL")
            .arg("SET")
            .arg(MASTER_NAME)
            .arg("down-after-milliseconds")
            .arg(10_000)
            .query(&mut con)
            .unwrap();
    }
    // Once promoted, it syncs the demoted old primary at once (not 5 s later).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("repl-diskless-sync-delay")
        .arg(0)
        .query(&mut set.replica().conn())
        .unwrap();
    let client = sentinel_client(&set);
    let mut res = Resource::new();
    let mut primary = set.primary().conn();
    turns_before(&client, name, &mut res, &[Lock, Fair, Write]);
    replicated(&mut primary);
    replica_has(set.replica(), name, res.highest_before());
    let kept = res.highest_before();

    // The sentinel that fails over says when it has sent the replica its
    // REPLICAOF NO ONE (then waits for the promotion).
    let mut sentinel =
        redis::Client::open(set.sentinel_urls()[0].as_str()).unwrap().get_connection().unwrap();
    let mut events = sentinel.as_pubsub();
    events.subscribe("+failover-state-wait-promotion").unwrap();
    events.set_read_timeout(Some(15 * SECOND)).unwrap();

    set.replica().freeze();
    lag_behind(&mut primary, name);
    turns_before(&client, name, &mut res, &[Lock, Fair, Write, Lock]);
    set.failover();
    let sent = events.get_message();
    assert!(sent.is_ok(), "the failover did not reach the replica ({sent:?}):\n{}", set.logs());
    std::thread::sleep(Duration::from_millis(300)); // the command reaches the replica's socket
    set.replica().thaw();
    assert!(set.wait_for_promotion(FAILOVER), "no promotion:\n{}", set.logs());

    // The old primary, alive, is demoted and its data replaced by the
    // promoted replica's, which lacks the increments it took last. (The
    // sentinels' demotion kills its normal clients: a connection a poll.)
    let replication = || -> String {
        let Ok(client) = redis::Client::open(set.primary().url()) else { return String::new() };
        let Ok(mut con) = client.get_connection_with_timeout(SECOND) else { return String::new() };
        redis::cmd("INFO").arg("replication").query(&mut con).unwrap_or_default()
    };
    let demoted = common::eventually(FAILOVER, || {
        let info = replication();
        info.contains("role:slave") && info.contains("master_link_status:up")
    });
    assert!(
        demoted,
        "the old primary was not demoted: {}\n{}\n--- old primary\n{}\n--- new primary\n{}",
        replication(),
        set.logs(),
        set.primary().log(),
        set.replica().log()
    );
    let left = counter_on(&mut set.replica().conn(), name);
    assert_eq!(left, Some(kept), "the replica should have kept {kept} of {:?}", res.before);
    assert_eq!(
        counter_on(&mut set.primary().conn(), name),
        Some(kept),
        "the old primary kept its increments"
    );
    turns_after(&client, name, &mut res);
    res.check("requested Sentinel failover with the old primary alive");
}

#[test]
fn after_a_cluster_shard_fails_over_to_a_lagging_replica_tokens_stay_above() {
    let mut cluster = RedisCluster::start();
    let (replica, primary) = cluster.replica_links()[0];
    let name = (0..10_000)
        .map(|i| format!("fence:{i}"))
        .find(|name| cluster.primary_of_key(name) == primary)
        .expect("some name lands on every primary");
    let client = Client::builder_cluster(cluster.seed_urls()).build().unwrap();
    let mut res = Resource::new();
    let mut primary_con = cluster.conn_to(primary);
    turns_before(&client, &name, &mut res, &[Lock, Fair, Write]);
    replicated(&mut primary_con);
    let kept = res.highest_before();

    cluster.freeze_node(replica);
    lag_behind(&mut primary_con, &name);
    turns_before(&client, &name, &mut res, &[Lock, Fair, Write, Lock]);
    let slot = cluster.keyslot(&name);
    cluster.kill_primary_of_slot(slot);
    cluster.thaw_node(replica);
    let promoted = cluster.wait_for_failover(slot, FAILOVER);
    assert_eq!(promoted, Some(replica), "{}", cluster.logs());

    let left = counter_on(&mut cluster.conn_to(replica), &name);
    assert_eq!(left, Some(kept), "the replica should have kept {kept} of {:?}", res.before);
    turns_after(&client, &name, &mut res);
    res.check("Cluster shard failover after the primary was killed");
}

// ---------------------------------------------------------------------------
// A Java Redisson RFencedLock on the same counter.

/// A Redisson client id (a UUID).
const JAVA_ID: &str = "5c0d1a2b-3e4f-4a5b-8c6d-7e8f9a0b1c2d";

#[test]
fn a_java_fenced_lock_interleaved_with_every_fenced_kind_sees_one_increasing_sequence() {
    let name = "java";
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let mut java = RedissonClient::connect(&server.url(), JAVA_ID);
    let mut res = Resource::new();
    // A few leftover Redisson tokens, then rounds in which each acquires in
    // turn; a Java re-entry mints a token too (Redisson's script does).
    let mut java_turn = |res: &mut Resource, reenter: bool| {
        let token = java.try_acquire_fenced(name, 1).expect("the lock is free");
        res.before(token);
        if reenter {
            res.before(java.try_acquire_fenced(name, 1).expect("a re-entry"));
            // Held by Java: keyholder is refused and mints nothing.
            let last = counter_on(&mut con, name);
            assert!(client.lock(name).unwrap().fenced().try_lock().unwrap().is_none());
            assert!(client.fair_lock(name).unwrap().fenced().try_lock().unwrap().is_none());
            assert_eq!(counter_on(&mut con, name), last, "a refused acquisition minted a token");
            assert_eq!(java.unlock(name, 1), Some(0));
        }
        assert_eq!(java.unlock(name, 1), Some(1));
    };
    for round in 0..6 {
        java_turn(&mut res, round % 2 == 0);
        fenced_turn(&client, name, Lock, 10 * SECOND, |t| res.before(t));
        java_turn(&mut res, false);
        fenced_turn(&client, name, Fair, 10 * SECOND, |t| res.before(t));
        java_turn(&mut res, round % 2 == 1);
        fenced_turn(&client, name, Write, 10 * SECOND, |t| res.before(t));
    }
    // Held by keyholder: Java is refused and mints nothing.
    let guard = client.lock(name).unwrap().fenced().lock().unwrap();
    let last = counter_on(&mut con, name);
    assert!(java.try_acquire_fenced(name, 1).is_err());
    assert_eq!(counter_on(&mut con, name), last);
    guard.unlock().unwrap();
    assert_eq!(res.store.refused(&mut res.con), 0);
    assert_eq!(res.before.len(), 6 * 7);
}

#[test]
fn java_and_keyholder_holders_contending_hand_the_resource_increasing_tokens() {
    const TURNS: usize = 15;
    let name = "java-contended";
    let server = RedisServer::start();
    let res = Resource::new();
    let deadline = Instant::now() + 60 * SECOND;
    let (done_tx, done_rx) = mpsc::channel::<Result<usize, String>>();
    // Two keyholder clients and a Java one; each holder reads and writes
    // the resource with its token while it holds the lock.
    for i in 0..2 {
        let (client, mut store_con, store, done) =
            (server.client(), res.server.conn(), res.store.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let lock = client.lock(name).unwrap().fenced();
            let mut turns = 0;
            while turns < TURNS && Instant::now() < deadline {
                let Some(guard) = lock.try_lock_for(10 * SECOND).unwrap() else { continue };
                let token = guard.fencing_token().unwrap();
                let read = store.read(&mut store_con, token).unwrap().is_accepted();
                let write = store.write(&mut store_con, token, &format!("rust-{i}")).unwrap().is_accepted();
                guard.unlock().unwrap();
                if !(read && write) {
                    let _ = done.send(Err(format!("rust-{i}: token {token} refused")));
                    return;
                }
                turns += 1;
            }
            let _ = done.send(Ok(turns));
        });
    }
    {
        let (url, mut store_con, store, done) =
            (server.url(), res.server.conn(), res.store.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let mut java = RedissonClient::connect(&url, JAVA_ID);
            let mut turns = 0;
            while turns < TURNS && Instant::now() < deadline {
                // Polls (Redisson waits for the unlock message; the tokens
                // are what matters here).
                let Ok(token) = java.try_acquire_fenced(name, 7) else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                let read = store.read(&mut store_con, token).unwrap().is_accepted();
                let write = store.write(&mut store_con, token, "java").unwrap().is_accepted();
                assert_eq!(java.unlock(name, 7), Some(1));
                if !(read && write) {
                    let _ = done.send(Err(format!("java: token {token} refused")));
                    return;
                }
                turns += 1;
            }
            let _ = done.send(Ok(turns));
        });
    }
    drop(done_tx);
    for _ in 0..3 {
        let turns = common::recv_within(&done_rx, 90 * SECOND, "a holder").unwrap();
        assert_eq!(turns, TURNS, "a holder ran out of time");
    }
    let mut con = res.server.conn();
    let log = res.store.log(&mut con);
    assert_eq!(log.len(), 3 * TURNS);
    let tokens: Vec<u64> = log.iter().map(|(t, _)| *t).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens out of order: {tokens:?}");
    assert!(log.iter().any(|(_, v)| v == "java") && log.iter().any(|(_, v)| v.starts_with("rust")));
    assert_eq!(res.store.refused(&mut con), 0);
}
