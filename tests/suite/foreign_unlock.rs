//! A holder hears of a foreign unlock of its lock within about a round trip
//! (issue 21, item 5): its client listens on the unlock channels of the
//! locks it holds, and checks a hold when a message arrives there. A force
//! unlock by the holder's own client marks its holds at once, for every
//! kind. The holder's own releases mark nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, calls_of, channel_of, eventually, numsub, recv_within, spawn};
use keyholder::{Client, ErrorKind, LostReason};

const SECOND: Duration = Duration::from_secs(1);
/// Far under the default watchdog's renewal period (10 s), which is when
/// the holder would otherwise hear of it.
const TOLD_WITHIN: Duration = Duration::from_secs(2);
/// Holds checked per round trip, at most (`holds/foreign.rs`).
const CHECKS_PER_ROUND_TRIP: usize = 500;

/// Redisson's `RedissonLock.forceUnlockAsync` script, as a Java service
/// sends it.
const REDISSON_FORCE_UNLOCK: &str = "if (redis.call('del', KEYS[1]) == 1) then \
     redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1 else return 0 end";

/// Waits (bounded) until `client`'s holder of `name` listens on its
/// channel, and a little longer for the check that follows the
/// subscription, so that what is measured next is a message's path alone.
fn wait_listening(con: &mut redis::Connection, name: &str) {
    let channel = channel_of(name);
    assert!(eventually(5 * SECOND, || numsub(con, &channel) >= 1), "the holder never listened on {channel}");
    std::thread::sleep(Duration::from_millis(50));
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn a_force_unlock_by_another_client_tells_the_holder_within_a_round_trip() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client(); // the default 30 s watchdog: renewal every 10 s
    let admin = server.client();
    let waiter = server.client();
    let mut told = Vec::new();
    for round in 0..20 {
        let name = format!("foreign:{round}");
        let guard = client.lock(&name).unwrap().lock().unwrap();
        let lost = guard.lost_signal();
        wait_listening(&mut con, &name);
        // A waiter elsewhere gets the lock as soon as it is forced.
        let theirs = waiter.lock(&name).unwrap();
        let taker = spawn(move || theirs.try_lock_for(10 * SECOND).unwrap().map(|g| g.unlock().is_ok()));
        common::wait_subscribed(&waiter, 1);
        let forced = Instant::now();
        assert!(admin.lock(&name).unwrap().force_unlock().unwrap());
        let reason = lost.recv_timeout(10 * SECOND).expect("the holder was never told");
        let after = forced.elapsed();
        assert_eq!(reason, LostReason::Gone);
        assert!(guard.is_lost());
        assert!(after < TOLD_WITHIN, "round {round}: told {after:?} after the force unlock");
        told.push(after);
        assert_eq!(recv_within(&taker, 15 * SECOND, "the waiter"), Some(true));
        assert_eq!(guard.unlock().unwrap_err().kind(), ErrorKind::LockLost);
    }
    let max = told.iter().max().copied().unwrap_or_default();
    println!(
        "force unlock by another client -> holder's lost signal: median {:?}, max {max:?} over {} rounds \
         (bound asserted: {TOLD_WITHIN:?}; the next renewal would have been up to 10 s away)",
        median(told.clone()),
        told.len()
    );
}

#[test]
fn redissons_own_force_unlock_script_tells_the_holder_too() {
    // A Java service's `RLock.forceUnlock()`: DEL and PUBLISH 0, nothing of
    // keyholder's.
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let guard = client.lock("java:forced").unwrap().lock().unwrap();
    let lost = guard.lost_signal();
    wait_listening(&mut con, "java:forced");
    let forced = Instant::now();
    let deleted: i64 = redis::cmd("EVAL")
        .arg(REDISSON_FORCE_UNLOCK)
        .arg(2)
        .arg("java:forced")
        .arg(channel_of("java:forced"))
        .arg("0")
        .arg("publish")
        .query(&mut con)
        .unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(lost.recv_timeout(10 * SECOND).expect("never told"), LostReason::Gone);
    let after = forced.elapsed();
    println!("Redisson's forceUnlock script -> holder's lost signal: {after:?}");
    assert!(after < TOLD_WITHIN, "told {after:?} after the force unlock");
}

#[test]
fn a_hold_forced_before_its_client_listens_is_caught_when_it_starts_listening() {
    // The channel is subscribed only once a hold is 20 ms old;
    // a force unlock before that is found by the check that follows the
    // subscription.
    let server = RedisServer::start();
    let client = server.client();
    let admin = server.client();
    let mut told = Vec::new();
    for round in 0..10 {
        let name = format!("young:{round}");
        let guard = client.lock(&name).unwrap().lock().unwrap();
        let lost = guard.lost_signal();
        let forced = Instant::now();
        assert!(admin.lock(&name).unwrap().force_unlock().unwrap());
        assert_eq!(lost.recv_timeout(10 * SECOND).expect("never told"), LostReason::Gone);
        let after = forced.elapsed();
        assert!(after < TOLD_WITHIN, "round {round}: told {after:?} after the force unlock");
        told.push(after);
    }
    let max = told.iter().max().copied().unwrap_or_default();
    println!(
        "force unlock within a millisecond of the acquisition -> lost signal: median {:?}, max {max:?}",
        median(told)
    );
}

#[test]
fn a_force_unlock_by_the_holders_own_client_marks_the_guard_lost_at_once() {
    let server = RedisServer::start();
    let client = server.client();

    // The same thread, and another thread of the client.
    let lock = client.lock("own:lock").unwrap();
    let guard = lock.lock().unwrap();
    let again = lock.lock().unwrap(); // re-entered: one hold, two guards
    assert!(lock.force_unlock().unwrap());
    assert_eq!(guard.lost_reason(), Some(LostReason::Gone), "not marked when force_unlock returned");
    assert!(again.is_lost());
    assert_eq!(again.unlock().unwrap_err().kind(), ErrorKind::LockLost);
    assert_eq!(guard.unlock().unwrap_err().kind(), ErrorKind::LockLost);

    let guard = lock.lock().unwrap();
    let other = client.lock("own:lock").unwrap();
    assert!(spawn(move || other.force_unlock().unwrap()).recv().unwrap());
    assert!(guard.is_lost(), "a force unlock from another thread of the client was not seen");
    drop(guard);

    // Every kind, whether or not its force unlock publishes anything.
    let fair = client.fair_lock("own:fair").unwrap();
    let guard = fair.lock().unwrap();
    assert!(fair.force_unlock().unwrap());
    assert_eq!(guard.lost_reason(), Some(LostReason::Gone));
    drop(guard);

    let spin = client.spin_lock("own:spin").unwrap();
    let guard = spin.lock().unwrap();
    assert!(spin.force_unlock().unwrap());
    assert_eq!(guard.lost_reason(), Some(LostReason::Gone));
    drop(guard);

    let rw = client.read_write_lock("own:rw").unwrap();
    let read = rw.read().lock().unwrap();
    assert!(!rw.write().force_unlock().unwrap(), "the write side forces only a write hold");
    assert!(!read.is_lost(), "a force unlock that deleted nothing marked a hold");
    assert!(rw.read().force_unlock().unwrap());
    assert_eq!(read.lost_reason(), Some(LostReason::Gone));
    drop(read);
    let write = rw.write().lock().unwrap();
    assert!(rw.write().force_unlock().unwrap());
    assert_eq!(write.lost_reason(), Some(LostReason::Gone));
    drop(write);

    // A hold taken after the force unlock is not touched by it.
    let fresh = lock.lock().unwrap();
    assert!(!fresh.is_lost());
    fresh.unlock().unwrap();
}

#[test]
fn read_and_write_holders_of_another_client_are_told() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (client, admin) = (server.client(), server.client());
    let rw = client.read_write_lock("rw:foreign").unwrap();
    let channel = "redisson_rwlock:{rw:foreign}";

    let read = rw.read().lock().unwrap();
    let lost = read.lost_signal();
    assert!(eventually(5 * SECOND, || numsub(&mut con, channel) >= 1), "the reader never listened");
    let forced = Instant::now();
    assert!(admin.read_write_lock("rw:foreign").unwrap().read().force_unlock().unwrap());
    assert_eq!(lost.recv_timeout(10 * SECOND).expect("the reader was never told"), LostReason::Gone);
    let read_after = forced.elapsed();
    drop(read);

    let write = rw.write().lock().unwrap();
    let lost = write.lost_signal();
    std::thread::sleep(Duration::from_millis(50));
    let forced = Instant::now();
    assert!(admin.read_write_lock("rw:foreign").unwrap().write().force_unlock().unwrap());
    assert_eq!(lost.recv_timeout(10 * SECOND).expect("the writer was never told"), LostReason::Gone);
    let write_after = forced.elapsed();
    drop(write);
    println!("read-write lock force unlocks -> lost signal: reader {read_after:?}, writer {write_after:?}");
    assert!(read_after < TOLD_WITHIN && write_after < TOLD_WITHIN);
}

#[test]
fn the_holders_own_releases_mark_nothing_lost() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (client, other) = (server.client(), server.client());
    let lock = client.lock("own:release").unwrap();

    // Re-entrant holds, listened on: the nested release publishes nothing,
    // the last one publishes its own unlock message.
    let outer = lock.lock().unwrap();
    let lost = outer.lost_signal();
    let inner = lock.lock().unwrap();
    wait_listening(&mut con, "own:release");
    inner.unlock().unwrap();
    assert!(!outer.is_lost());
    // Messages on the channel from elsewhere (a waiter's client, an
    // unrelated publisher) are checked and found harmless.
    let _: i64 = redis::cmd("PUBLISH").arg(channel_of("own:release")).arg("0").query(&mut con).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!outer.is_lost(), "a message on the channel marked a live hold lost");
    outer.unlock().unwrap();
    assert!(lost.recv_timeout(Duration::from_millis(200)).is_err(), "a normal release signalled a loss");

    // Hand-overs between clients and threads, each hold old enough to be
    // listened on: no hold is ever reported lost.
    let mut threads = Vec::new();
    for c in [&client, &other] {
        for _ in 0..2 {
            let lock = c.lock("own:busy").unwrap();
            threads.push(spawn(move || {
                let mut lost = 0;
                for _ in 0..15 {
                    let guard = lock.lock().unwrap();
                    std::thread::sleep(Duration::from_millis(12));
                    lost += usize::from(guard.is_lost());
                    if guard.unlock().is_err() {
                        lost += 1;
                    }
                }
                lost
            }));
        }
    }
    for t in threads {
        assert_eq!(recv_within(&t, 60 * SECOND, "a contending thread"), 0, "a live hold was reported lost");
    }
    // The channels go once nothing is held.
    assert!(
        eventually(5 * SECOND, || numsub(&mut con, &channel_of("own:busy")) == 0
            && numsub(&mut con, &channel_of("own:release")) == 0),
        "channels of released locks stay subscribed"
    );
}

#[test]
fn uncontended_short_holds_subscribe_nothing() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let client = server.client();
    let before = calls_of(&mut con, "subscribe");
    let lock = client.lock("short").unwrap();
    let started = Instant::now();
    let mut pairs = 0;
    while pairs < 2_000 && started.elapsed() < 10 * SECOND {
        lock.lock().unwrap().unlock().unwrap();
        pairs += 1;
    }
    let subscribes = calls_of(&mut con, "subscribe") - before;
    println!("{pairs} uncontended acquire+release pairs: {subscribes} SUBSCRIBE commands");
    // A hold the scheduler keeps past the listening age (20 ms) on a loaded
    // machine is listened on, rightly: only a few may be.
    assert!(subscribes * 100 <= pairs, "{subscribes} SUBSCRIBE commands for {pairs} short holds");
}

/// Sums the CPU time (user + system) of this process's threads whose name
/// starts with `prefix` (Linux; zero elsewhere).
fn thread_cpu(prefix: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Duration::ZERO };
    let ticks: u64 = tasks
        .filter_map(|task| {
            let path = task.ok()?.path();
            let comm = std::fs::read_to_string(path.join("comm")).ok()?;
            if !comm.starts_with(prefix) {
                return None;
            }
            let stat = std::fs::read_to_string(path.join("stat")).ok()?;
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // After the name: state is field 3; utime and stime are 14 and 15.
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum();
    Duration::from_millis(ticks * 10) // USER_HZ = 100
}

fn info_i64(con: &mut redis::Connection, section: &str, field: &str) -> i64 {
    common::info_field(con, section, field)
}

/// What `channels` subscriptions cost Redis in memory (`used_memory`),
/// measured on a plain connection that subscribes them all and reads every
/// confirmation.
fn subscription_memory(server: &RedisServer, con: &mut redis::Connection, channels: &[String]) -> i64 {
    use std::io::{Read, Write};
    let before = info_i64(con, "memory", "used_memory");
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    socket.set_read_timeout(Some(30 * SECOND)).unwrap();
    let mut command = format!("*{}\r\n$9\r\nSUBSCRIBE\r\n", channels.len() + 1);
    for channel in channels {
        command.push_str(&format!("${}\r\n{channel}\r\n", channel.len()));
    }
    socket.write_all(command.as_bytes()).unwrap();
    let last = format!(":{}\r\n", channels.len());
    let mut read = Vec::new();
    let mut buf = [0u8; 65536];
    while !read.ends_with(last.as_bytes()) {
        let n = socket.read(&mut buf).unwrap();
        assert!(n > 0, "the connection closed");
        read.extend_from_slice(&buf[..n]);
    }
    let cost = info_i64(con, "memory", "used_memory") - before;
    drop(socket);
    assert!(eventually(5 * SECOND, || numsub(con, &channels[0]) == 0));
    cost
}

/// What tracking `keys` costs Redis in memory (`used_memory`), measured as
/// keyholder arms them: a connection subscribed to invalidations, another
/// with tracking redirected there, which reads (`PTTL`) every key.
fn tracking_memory(server: &RedisServer, con: &mut redis::Connection, keys: &[String]) -> i64 {
    let mut pubsub = server.conn();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut pubsub).unwrap();
    let mut pubsub = pubsub.as_pubsub();
    pubsub.subscribe("__redis__:invalidate").unwrap();
    let mut tracking = server.conn();
    redis::cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .arg("REDIRECT")
        .arg(id)
        .query::<()>(&mut tracking)
        .unwrap();
    let before = info_i64(con, "memory", "used_memory");
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("PTTL").arg(key);
    }
    let _: Vec<i64> = pipe.query(&mut tracking).unwrap();
    info_i64(con, "memory", "used_memory") - before
}

/// `INFO commandstats`: microseconds spent per command since the server
/// started.
fn command_usec(con: &mut redis::Connection) -> std::collections::BTreeMap<String, i64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let usec = stats.split(',').find_map(|kv| kv.strip_prefix("usec="))?.parse().ok()?;
            Some((name.to_owned(), usec))
        })
        .collect()
}

/// The server's CPU time so far (`used_cpu_user` + `used_cpu_sys`), in
/// seconds.
fn redis_cpu(con: &mut redis::Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(con).unwrap();
    ["used_cpu_user:", "used_cpu_sys:"]
        .iter()
        .filter_map(|field| info.lines().find_map(|l| l.strip_prefix(field))?.trim().parse::<f64>().ok())
        .sum()
}

/// `INFO commandstats`: calls per command since the server started.
fn commandstats(con: &mut redis::Connection) -> std::collections::BTreeMap<String, i64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(con).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

fn pubsub_channel_count(con: &mut redis::Connection) -> usize {
    let channels: Vec<String> =
        redis::cmd("PUBSUB").arg("CHANNELS").arg("redisson_lock__channel:*").query(con).unwrap();
    channels.len()
}

/// The cost with 10 000 held locks: SUBSCRIBE commands and channels,
/// checks, renewal traffic per period, memory and CPU, and the notification
/// latency among them.
#[test]
fn ten_thousand_held_locks_cost_a_few_subscribes_and_no_periodic_traffic() {
    const LOCKS: usize = 10_000;
    const THREADS: usize = 4;
    let server = RedisServer::start();
    let mut con = server.conn();
    let watchdog = Duration::from_secs(3); // a renewal period of 1 s
    // What 10 000 subscriptions cost Redis, whoever makes them.
    let names: Vec<String> =
        (0..LOCKS).map(|i| channel_of(&format!("many:{}:{}", i % THREADS, i / THREADS))).collect();
    let memory = subscription_memory(&server, &mut con, &names);
    let client = server.builder().watchdog_timeout(watchdog).build().unwrap();
    let admin = server.client();
    let cpu_before = thread_cpu("keyholder-held") + thread_cpu("keyholder-pubs");
    let (subscribe0, hstrlen0) = (calls_of(&mut con, "subscribe"), calls_of(&mut con, "hstrlen"));
    let started = Instant::now();

    // Guards stay on their threads: each holds its share until told.
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Arc::new(std::sync::Mutex::new(release_rx));
    let (held_tx, held_rx) = mpsc::channel();
    let mut holders = Vec::new();
    for t in 0..THREADS {
        let client = client.clone();
        let (held_tx, release_rx) = (held_tx.clone(), std::sync::Arc::clone(&release_rx));
        holders.push(spawn(move || {
            let guards: Vec<_> = (0..LOCKS / THREADS)
                .map(|i| client.lock(&format!("many:{t}:{i}")).unwrap().lock().unwrap())
                .collect();
            held_tx.send((t, guards[0].lost_signal())).unwrap();
            let _ = release_rx.lock().unwrap().recv_timeout(120 * SECOND);
            let lost = guards.iter().filter(|g| g.is_lost()).count();
            let errors = guards.into_iter().filter_map(|g| g.unlock().err()).count();
            (lost, errors)
        }));
    }
    let signals: Vec<_> =
        (0..THREADS).map(|_| recv_within(&held_rx, 120 * SECOND, "a holder thread")).collect();
    let first = signals.into_iter().find(|(t, _)| *t == 0).map(|(_, signal)| signal).unwrap();
    let all_held = Instant::now();
    assert!(
        eventually(30 * SECOND, || pubsub_channel_count(&mut con) >= LOCKS),
        "not every held lock's channel was subscribed ({} of {LOCKS})",
        pubsub_channel_count(&mut con)
    );
    let listening_after = all_held.elapsed();
    // Let the checks that follow the arming and the confirmations finish.
    assert!(eventually(30 * SECOND, || info_i64(&mut con, "stats", "tracking_total_keys") >= LOCKS as i64));
    assert!(eventually(30 * SECOND, || calls_of(&mut con, "hstrlen") - hstrlen0 >= LOCKS as i64));
    let mut last = -1;
    assert!(eventually(30 * SECOND, || {
        std::thread::sleep(Duration::from_millis(100));
        let now = calls_of(&mut con, "hstrlen");
        std::mem::replace(&mut last, now) == now
    }));
    let tracked = info_i64(&mut con, "stats", "tracking_total_keys");
    let subscribes = calls_of(&mut con, "subscribe") - subscribe0;
    let checks = calls_of(&mut con, "hstrlen") - hstrlen0;
    let acquiring = started.elapsed();
    // Saturating: threads of other tests' clients in this process end.
    let cpu_listen = (thread_cpu("keyholder-held") + thread_cpu("keyholder-pubs")).saturating_sub(cpu_before);

    // Steady state: three renewal periods, every command counted.
    let (stats0, cpu0) = (commandstats(&mut con), thread_cpu("keyholder-held"));
    let (usec0, redis_cpu0) = (command_usec(&mut con), redis_cpu(&mut con));
    let window = Instant::now();
    std::thread::sleep(3 * SECOND);
    let periods = window.elapsed().as_secs_f64() / (watchdog.as_secs_f64() / 3.0);
    let mut delta = commandstats(&mut con);
    for (name, calls) in &stats0 {
        *delta.entry(name.clone()).or_default() -= calls;
    }
    delta.retain(|name, calls| *calls > 0 && name != "info");
    let mut usec = command_usec(&mut con);
    for (name, spent) in &usec0 {
        *usec.entry(name.clone()).or_default() -= spent;
    }
    let redis_cpu_per_period = (redis_cpu(&mut con) - redis_cpu0) / periods;
    let usec_per_period = |name: &str| usec.get(name).copied().unwrap_or_default() as f64 / periods;
    // A window of wall time cuts renewal rounds: count calls per round,
    // a round being every held key renewed once (the script's HMGET).
    let renewal_calls = delta.get("evalsha").copied().unwrap_or_default() as f64;
    let rounds = delta.get("hmget").copied().unwrap_or_default() as f64 / LOCKS as f64;
    let calls_per_100_per_round = renewal_calls / rounds / (LOCKS / 100) as f64;
    // The renewal script's own commands aside, and the PTTL after each
    // renewed key in the same round trip (it arms the key again).
    let rearms_per_round = delta.get("pttl").copied().unwrap_or_default() as f64 / rounds;
    let renewal_commands = ["evalsha", "type", "hmget", "pexpire", "pttl", "client|caching"];
    let others: Vec<String> = delta
        .iter()
        .filter(|(name, _)| !renewal_commands.contains(&name.as_str()))
        .map(|(name, calls)| format!("{name} {calls}"))
        .collect();
    let others_per_period = delta
        .iter()
        .filter(|(name, _)| !renewal_commands.contains(&name.as_str()))
        .map(|(_, calls)| *calls)
        .sum::<i64>() as f64
        / periods;
    println!("commands in the steady window: {delta:?}");
    let held_cpu_steady = thread_cpu("keyholder-held").saturating_sub(cpu0);

    // One of them forced from elsewhere, among 10 000 listened on.
    let forced = Instant::now();
    assert!(admin.lock("many:0:0").unwrap().force_unlock().unwrap());
    let reason = first.recv_timeout(10 * SECOND).ok();
    let told_after = forced.elapsed();
    assert_eq!(reason, Some(LostReason::Gone));

    drop(release_tx);
    let (mut lost, mut errors) = (0, 0);
    for h in holders {
        let (l, e) = recv_within(&h, 120 * SECOND, "a holder thread's release");
        lost += l;
        errors += e;
    }
    assert_eq!(lost, 1, "exactly the forced hold is lost");
    assert_eq!(errors, 1, "exactly the forced hold's release fails");
    let unsubscribe0 = calls_of(&mut con, "unsubscribe");
    assert!(
        eventually(30 * SECOND, || pubsub_channel_count(&mut con) == 0),
        "channels stay subscribed after every release"
    );
    let unsubscribes = calls_of(&mut con, "unsubscribe") - unsubscribe0;
    let keys: Vec<String> = (0..LOCKS).map(|i| format!("many:{}:{}", i % THREADS, i / THREADS)).collect();
    let table = tracking_memory(&server, &mut con, &keys);
    println!(
        "10 000 held locks (watchdog 3 s, period 1 s), acquired by 4 threads in {acquiring:?}: all listened on \
         {listening_after:?} after the last acquisition; {subscribes} SUBSCRIBE commands for {LOCKS} channels \
         ({:.1} per command; at most one per gathering window while holds come of age); {checks} HSTRLEN \
         checks (when armed, and when subscribed, at most twice per hold; {CHECKS_PER_ROUND_TRIP} per round trip at most); \
         {tracked} keys tracked; listener + pub/sub reader CPU {cpu_listen:?} for it all; 10 000 subscriptions \
         cost Redis {} KiB of used_memory, 10 000 tracked keys {} KiB",
        LOCKS as f64 / subscribes as f64,
        memory / 1024,
        table / 1024
    );
    println!(
        "steady state: {:.0} renewal script calls per round over {rounds:.2} rounds, {calls_per_100_per_round:.2} per \
         100 locks (W4's bound: 1), {rearms_per_round:.0} PTTL re-armings per round (in the renewals' round \
         trips), {others_per_period:.1} other commands per period ({}); listener thread CPU {held_cpu_steady:?} \
         over {periods:.1} periods; Redis CPU {:.1} ms per period (INFO cpu), of which in commands: renewal \
         scripts {:.1} ms, PTTL re-armings {:.1} ms",
        renewal_calls / rounds,
        others.join(", "),
        redis_cpu_per_period * 1000.0,
        usec_per_period("evalsha") / 1000.0,
        usec_per_period("pttl") / 1000.0
    );
    println!(
        "a force unlock among them: the holder told {told_after:?} later; after release: {unsubscribes} \
         UNSUBSCRIBE commands"
    );
    // One SUBSCRIBE per gathering window (10 ms after the first 20 ms) at
    // most, while holds come of age, and one per 500 channels.
    let windows = (acquiring + listening_after).as_millis() as i64 / 10 + 1;
    assert!(
        subscribes <= windows + (LOCKS / 500) as i64,
        "{subscribes} SUBSCRIBE commands in {windows} windows"
    );
    assert!(
        (LOCKS as i64..=2 * LOCKS as i64).contains(&checks),
        "{checks} checks: each hold is checked when its key is armed and when its channel's subscription is \
         confirmed (once when the two come together)"
    );
    assert_eq!(tracked, LOCKS as i64, "every held key is armed");
    assert!(
        rearms_per_round <= LOCKS as f64 * 1.01,
        "{rearms_per_round} PTTL per round: the renewals re-arm each key once"
    );
    assert!(
        calls_per_100_per_round <= 1.01,
        "{calls_per_100_per_round} renewal calls per 100 locks per round"
    );
    assert!(others_per_period < 5.0, "{others_per_period} commands per period besides the renewals");
    assert!(told_after < TOLD_WITHIN, "told {told_after:?} after the force unlock");
}

#[test]
fn a_client_without_holds_keeps_its_subscriptions_to_waiters() {
    // Nothing held, nothing listened on: a waiter's subscription is the
    // only one.
    let server = RedisServer::start();
    let mut con = server.conn();
    let client: Client = server.client();
    let lock = client.lock("idle").unwrap();
    lock.lock().unwrap().unlock().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(numsub(&mut con, &channel_of("idle")), 0);
}
