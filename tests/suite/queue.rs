//! Waiting across clients: keyholder clients queue in Redis, a release wakes
//! (or hands the lock to) exactly the next one, and a Redisson waiter, which
//! knows nothing of the queue, still gets its turns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, calls_of, channel_of, exists, pttl, recv_within, spawn, wait_numsub};
use keyholder::Lease;

const SECOND: Duration = Duration::from_secs(1);

/// Ten clients of one thread each wait for a lock; each unlock must cost at
/// most one acquire call (none when the lock is handed over), not one per
/// waiting client.
#[test]
fn each_unlock_costs_at_most_one_acquire_call_however_many_clients_wait() {
    const WAITERS: usize = 10;
    let server = RedisServer::start();
    let mut con = server.conn();
    let holder = server.client();
    let guard = holder.lock("herd").unwrap().lock().unwrap();
    let clients: Vec<_> = (0..WAITERS).map(|_| server.client()).collect();
    let done: Vec<_> = clients
        .iter()
        .map(|client| {
            let lock = client.lock("herd").unwrap();
            spawn(move || {
                let guard = lock.try_lock_for(20 * SECOND).unwrap().expect("never got the lock");
                std::thread::sleep(Duration::from_millis(2));
                guard.unlock().unwrap();
            })
        })
        .collect();
    // The waiters' clients, and the holder's (for a foreign unlock).
    wait_numsub(&mut con, &channel_of("herd"), WAITERS as i64 + 1);
    // A waiter queues on its second attempt, once subscribed: wait for all.
    let queued = || -> usize {
        redis::cmd("ZCARD").arg("keyholder_lock_queue:{herd}").query(&mut server.conn()).unwrap()
    };
    assert!(common::eventually(5 * SECOND, || queued() == WAITERS), "only {} clients queued", queued());
    // acquire.lua runs EXISTS once per new-hold attempt; nothing else here does.
    let attempts_before = calls_of(&mut con, "exists");
    guard.unlock().unwrap();
    for rx in &done {
        recv_within(rx, 30 * SECOND, "waiter");
    }
    let attempts = calls_of(&mut con, "exists") - attempts_before;
    assert!(attempts <= WAITERS as i64, "{attempts} acquire calls for {WAITERS} unlocks");
    assert!(!exists(&mut con, "herd"));
}

/// A waiter handed the lock keeps a lease no longer than the server's: its
/// guard reports the loss no later than the key expires. The key is watched
/// closely as its end nears (the PTTL says when; then one EXISTS after
/// another, no sleep), so a guard that believes even a millisecond too long
/// is caught; several hand-overs, since the grant's whole-millisecond clock
/// readings overstate by a varying fraction. Load only makes the watcher
/// later, which the bound allows: it checks the guard after the key is gone.
#[test]
fn a_handed_over_hold_is_never_believed_longer_than_the_server_keeps_it() {
    const ROUNDS: usize = 8;
    const LEASE: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let mut con = server.conn();
    let (holder, waiter) = (server.client(), server.client());
    let lock = waiter.lock_with_lease("handed", Lease::Fixed(LEASE)).unwrap();
    let mut watcher = server.conn();
    for round in 0..ROUNDS {
        let guard = holder.lock("handed").unwrap().lock().unwrap();
        let lock = lock.clone();
        let mut watcher_con = std::mem::replace(&mut watcher, server.conn());
        let got = spawn(move || {
            let guard = lock.try_lock_for(10 * SECOND).unwrap().expect("never got the lock");
            // Sleep until a few milliseconds before the key's end, then
            // look as often as a round trip allows (bounded in time).
            let left = u64::try_from(pttl(&mut watcher_con, "handed")).unwrap_or(0);
            std::thread::sleep(Duration::from_millis(left.saturating_sub(15)));
            let started = Instant::now();
            while started.elapsed() < 5 * SECOND && exists(&mut watcher_con, "handed") {}
            let lost = guard.is_lost();
            (lost, started.elapsed(), watcher_con)
        });
        wait_numsub(&mut con, &channel_of("handed"), 2); // and the holder's client
        // The waiter has queued (its second attempt, once subscribed).
        let queued = || -> usize {
            redis::cmd("ZCARD").arg("keyholder_lock_queue:{handed}").query(&mut server.conn()).unwrap()
        };
        assert!(common::eventually(5 * SECOND, || queued() == 1), "the waiter never queued");
        std::thread::sleep(Duration::from_millis(20));
        guard.unlock().unwrap();
        let (lost, watched, back) = recv_within(&got, 20 * SECOND, "waiter");
        watcher = back;
        assert!(watched < 5 * SECOND, "round {round}: the key never expired");
        assert!(lost, "round {round}: the key expired while the guard believed it held");
    }
}

/// A Redisson `RLock` waiter, as Redisson runs it: try the acquire script,
/// and while refused wait for a `0` on the unlock channel or the holder's
/// PTTL, then try again. Returns the longest single wait for the lock.
fn redisson_waiter(url: &str, name: &str, rounds: usize, stop: &AtomicBool) -> Duration {
    let owner = "9b2e7c1a-0000-4000-8000-00000000beef:1";
    let acquire = redis::Script::new(include_str!("../../lua/lock/acquire.lua"));
    let release = redis::Script::new(include_str!("../../lua/lock/release.lua"));
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut sub = client.get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe(channel_of(name)).unwrap();
    let mut worst = Duration::ZERO;
    for _ in 0..rounds {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let asked = Instant::now();
        loop {
            let ttl: Option<i64> = acquire.key(name).arg(30_000).arg(owner).invoke(&mut con).unwrap();
            let Some(ttl) = ttl else { break };
            assert!(asked.elapsed() < 10 * SECOND, "the Redisson waiter starved");
            let wait = Duration::from_millis(u64::try_from(ttl).unwrap_or(100).clamp(1, 1000));
            pubsub.set_read_timeout(Some(wait)).unwrap();
            // Any message or the timeout: try again (a "2" is ignored by
            // Redisson, but trying again is harmless here).
            let _ = pubsub.get_message();
        }
        worst = worst.max(asked.elapsed());
        std::thread::sleep(Duration::from_millis(1));
        let released: Option<i64> =
            release.key(name).key(channel_of(name)).arg(30_000).arg(owner).invoke(&mut con).unwrap();
        assert_eq!(released, Some(1));
        // Other work before asking again, so the keyholder clients run too.
        std::thread::sleep(Duration::from_millis(20));
    }
    worst
}

/// Keyholder clients hammering a lock do not lock a Redisson waiter out:
/// with a Redisson waiter listening, a release wakes the next keyholder
/// client and publishes `0`, and the Redisson waiter races for each release.
#[test]
fn a_redisson_waiter_gets_its_turns_among_busy_keyholder_clients() {
    let server = RedisServer::start();
    let stop = Arc::new(AtomicBool::new(false));
    let acquired = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let lock = server.client().lock("shared").unwrap();
            let (stop, acquired) = (Arc::clone(&stop), Arc::clone(&acquired));
            spawn(move || {
                let started = Instant::now();
                while !stop.load(Ordering::Acquire) && started.elapsed() < 20 * SECOND {
                    if let Some(guard) = lock.try_lock_for(SECOND).unwrap() {
                        std::thread::sleep(Duration::from_millis(1));
                        drop(guard);
                        acquired.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let url = server.url();
    let java = {
        let stop = Arc::clone(&stop);
        spawn(move || redisson_waiter(&url, "shared", 40, &stop))
    };
    let worst = recv_within(&java, 60 * SECOND, "Redisson waiter");
    stop.store(true, Ordering::Release);
    for worker in &workers {
        recv_within(worker, 30 * SECOND, "keyholder worker");
    }
    let acquired = acquired.load(Ordering::Relaxed);
    assert!(acquired > 100, "the keyholder clients hardly ran: {acquired} acquisitions");
    assert!(worst < 2 * SECOND, "a Redisson waiter waited {worst:?} for one acquisition");
}

/// A thread's own attempt can take the lock that a release granted it while
/// it was woken for another reason; the grant's message, still on its way,
/// then concerns a hold already taken and released. Arriving during that
/// thread's next wait, it must not hand the thread a lock that another
/// client holds: the waiter is given the lock only when the holder lets it
/// go, and then really holds it.
#[test]
fn a_grant_from_an_earlier_wait_does_not_give_the_lock_in_a_later_one() {
    let server = RedisServer::start();
    let mut con = server.conn();
    let (holder, waiter) = (server.client(), server.client());
    let name = "late-grant";
    let grants = format!("keyholder_lock_grants:{{{name}}}");
    let wake = format!("keyholder_lock__wake:{{{name}}}:{}", waiter.id());
    let entry = |con: &mut redis::Connection| -> Option<String> {
        redis::cmd("HGET").arg(&grants).arg(waiter.id()).query(con).unwrap()
    };
    let holder_lock = holder.lock(name).unwrap();
    let guard = holder_lock.lock().unwrap();
    let lock = waiter.lock(name).unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let rounds = spawn(move || {
        let mut outcomes = Vec::new();
        for _ in 0..2 {
            let guard = lock.try_lock_for(20 * SECOND).unwrap().expect("never got the lock");
            outcomes.push((lock.is_held_by_current_thread().unwrap(), guard.unlock().map_err(|e| e.kind())));
            let _ = go_rx.recv_timeout(20 * SECOND);
        }
        outcomes
    });
    // First wait: queued, ready for a grant. Its grant's message is the one
    // a late delivery would replay.
    assert!(common::eventually(5 * SECOND, || entry(&mut con).is_some()), "the waiter never queued");
    let first = entry(&mut con).unwrap();
    guard.unlock().unwrap();
    assert!(common::eventually(5 * SECOND, || !exists(&mut con, name)), "the first wait never ended");
    // Second wait, behind a new holder.
    let guard = holder_lock.lock().unwrap();
    go_tx.send(()).unwrap();
    assert!(common::eventually(5 * SECOND, || entry(&mut con).is_some()), "the waiter never queued again");
    // The first wait's grant message, delivered late.
    let mut fields = first.split(' ');
    let owner = fields.next().unwrap();
    let stale = match fields.nth(2) {
        Some(ticket) => format!("{owner}/{ticket} 0"),
        None => format!("{owner} 0"),
    };
    let _: i64 = redis::cmd("PUBLISH").arg(&wake).arg(&stale).query(&mut con).unwrap();
    // Give a wrongly trusted grant time to show (the outcome does not depend on it).
    std::thread::sleep(Duration::from_millis(300));
    assert!(holder_lock.is_held_by_current_thread().unwrap());
    guard.unlock().unwrap();
    go_tx.send(()).unwrap();
    let outcomes = recv_within(&rounds, 30 * SECOND, "waiter");
    assert_eq!(outcomes, vec![(true, Ok(())), (true, Ok(()))], "(held in Redis, unlock) per wait");
}
