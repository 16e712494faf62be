//! Sentinel (`Client::builder_sentinel`): the client finds the primary
//! through real sentinels (`redis-server --sentinel`, three of them, with a
//! primary and a replica, all on 127.0.0.1), and follows it when the
//! primary is killed and the sentinels promote the replica. Each test has
//! its own set-up: a failover changes it for good.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{exists, free_port, hgetall};
use keyholder::{Client, ClientBuilder, ErrorKind, LockGuard, LostReason};
use keyholder_testkit::SentinelSet;
use keyholder_testkit::sentinel::MASTER_NAME;

const SECOND: Duration = Duration::from_secs(1);
/// The connect and command timeouts of the test clients.
const TIMEOUT: Duration = SECOND;

fn builder(set: &SentinelSet) -> ClientBuilder {
    Client::builder_sentinel(set.sentinel_urls(), MASTER_NAME)
        .connect_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
}

/// What a waiter reports: when it got the lock, how long after it started
/// waiting, and how many of its calls failed meanwhile.
type Served = Option<(Instant, Duration, u32)>;

/// A thread's attempts to get `name` until `limit` passes, retrying after
/// errors (what a caller does during a failover); `None` if it never got
/// the lock.
/// Releases `guard` while a thread of `other` waits for `name`, and checks
/// that the waiter is woken by the release (not by the lease's end) and
/// met no error.
fn released_to_a_waiter(guard: LockGuard, other: &Client, name: &'static str) {
    let waiting = waiter(other.clone(), name, 10 * SECOND);
    common::wait_subscribed(other, 1);
    let released = Instant::now();
    guard.unlock().unwrap();
    let (served, _, errors) =
        waiting.recv_timeout(15 * SECOND).unwrap().expect("the waiter never got the lock");
    assert_eq!(errors, 0);
    let woken = served - released;
    assert!(woken < 2 * SECOND, "the waiter was not woken ({woken:?})");
}

fn waiter(client: Client, name: &'static str, limit: Duration) -> mpsc::Receiver<Served> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let lock = client.lock(name).unwrap();
        let started = Instant::now();
        let deadline = started + limit;
        let mut errors = 0;
        let outcome = loop {
            match lock.try_lock_until(deadline) {
                Ok(Some(guard)) => {
                    let now = Instant::now();
                    guard.unlock().ok();
                    break Some((now, now - started, errors));
                }
                Ok(None) => break None,
                Err(_) if Instant::now() < deadline => {
                    errors += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(_) => break None,
            }
        };
        let _ = tx.send(outcome);
    });
    rx
}

/// When a lost signal fires (`None` if it does not within 30 s).
fn told_at(signal: crossbeam_channel::Receiver<LostReason>) -> mpsc::Receiver<Option<(LostReason, Instant)>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(signal.recv_timeout(30 * SECOND).ok().map(|reason| (reason, Instant::now())));
    });
    rx
}

#[test]
fn the_client_finds_the_primary_through_the_sentinels() {
    let set = SentinelSet::start();
    // A sentinel that is not there is skipped.
    let mut urls = vec![format!("redis://127.0.0.1:{}", free_port())];
    urls.extend(set.sentinel_urls());
    let client = Client::builder_sentinel(urls, MASTER_NAME).connect_timeout(TIMEOUT).build().unwrap();
    let other = builder(&set).build().unwrap();

    let lock = client.lock("found").unwrap();
    let guard = lock.lock().unwrap();
    let on_primary = hgetall(&mut set.primary().conn(), "found");
    assert_eq!(on_primary.get(guard.owner_id()).map(String::as_str), Some("1"));

    // A waiter of another client is woken by the release.
    released_to_a_waiter(guard, &other, "found");
    assert!(!exists(&mut set.primary().conn(), "found"));

    // Dropping a client does not wait for its quiet sentinel subscription
    // to time out.
    let patient = builder(&set).command_timeout(5 * SECOND).build().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    drop(patient);
    assert!(started.elapsed() < SECOND, "dropping the client took {:?}", started.elapsed());
}

#[test]
fn a_sentinel_that_never_answers_costs_one_command_timeout() {
    let set = SentinelSet::start();
    // Accepts connections (the kernel does, into the backlog) and never
    // answers: a black hole.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut urls = vec![format!("redis://127.0.0.1:{}", hole.local_addr().unwrap().port())];
    urls.extend(set.sentinel_urls());
    let started = Instant::now();
    let client = Client::builder_sentinel(urls, MASTER_NAME)
        .connect_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .build()
        .unwrap();
    let took = started.elapsed();
    assert!(took < 3 * TIMEOUT, "build() took {took:?}");
    // Then the sentinel that answered is asked first: calls do not wait on
    // the black hole, nor does dropping the client.
    let started = Instant::now();
    client.lock("past-the-hole").unwrap().lock().unwrap().unlock().unwrap();
    drop(client);
    assert!(
        started.elapsed() < TIMEOUT,
        "a call or the drop waited on the black hole: {:?}",
        started.elapsed()
    );
}

#[test]
fn a_password_protected_primary_is_reached_with_the_node_credentials() {
    let set = SentinelSet::start();
    set.require_password("node-secret");
    let err = builder(&set).build().unwrap_err();
    assert!(err.is_access_denied(), "{err:?}");
    let err = builder(&set).node_password("wrong").build().unwrap_err();
    assert!(err.is_access_denied(), "{err:?}");

    let client = builder(&set).node_password("node-secret").build().unwrap();
    let other = builder(&set).node_password("node-secret").build().unwrap();
    let guard = client.lock("protected").unwrap().lock().unwrap();
    let mut primary = set.primary().conn();
    let _: () = redis::cmd("AUTH").arg("node-secret").query(&mut primary).unwrap();
    assert!(exists(&mut primary, "protected"));
    // The pub/sub connection logs in too: the waiter is woken.
    released_to_a_waiter(guard, &other, "protected");
}

#[test]
fn sentinels_that_require_a_password_get_the_one_in_their_urls() {
    let set = SentinelSet::start_with_sentinel_password("sentinel-secret");
    let client = builder(&set).build().unwrap();
    client.lock("through-protected-sentinels").unwrap().lock().unwrap().unlock().unwrap();

    let without: Vec<String> =
        set.sentinel_urls().iter().map(|url| url.replace(":sentinel-secret@", "")).collect();
    let err = Client::builder_sentinel(without, MASTER_NAME)
        .connect_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .build()
        .unwrap_err();
    assert!(err.is_access_denied(), "{err:?}");
}

#[test]
fn a_master_name_no_sentinel_knows_is_refused_at_build() {
    let set = SentinelSet::start();
    let err = Client::builder_sentinel(set.sentinel_urls(), "no-such-master")
        .connect_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .build()
        .unwrap_err();
    assert!(err.is_invalid(), "{err:?}");

    // No sentinel reachable: a connection error, within the timeouts.
    let dead =
        vec![format!("redis://127.0.0.1:{}", free_port()), format!("redis://127.0.0.1:{}", free_port())];
    let started = Instant::now();
    let err = Client::builder_sentinel(dead, MASTER_NAME)
        .connect_timeout(TIMEOUT)
        .command_timeout(TIMEOUT)
        .build()
        .unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    // Refused connections cost nothing: no timeout is waited out.
    assert!(started.elapsed() < TIMEOUT, "build() took {:?}", started.elapsed());
}

/// The failover test: the primary is killed (SIGKILL) while two locks are
/// held and two threads wait. One hold reached the replica through replica
/// acknowledgement; the other, as if the primary died before replicating
/// it, is removed from the replica by hand. Measures, from the kill: when a
/// new acquisition first works, when the holder of the lost lock is told,
/// when each waiter gets its lock.
#[test]
fn a_failover_moves_holders_waiters_and_new_calls_to_the_promoted_replica() {
    let mut set = SentinelSet::start();
    let acked = builder(&set).replica_acks(1, Duration::from_millis(300)).build().unwrap();
    let plain = builder(&set).build().unwrap();
    let waiting = builder(&set).build().unwrap();

    let kept = acked.lock("kept").unwrap().lock().unwrap();
    assert!(kept.is_replicated());
    let dropped = plain.lock("dropped").unwrap().lock().unwrap();
    let dropped_signal = told_at(dropped.lost_signal());
    // A client that makes no call during the failover hears of it through
    // its sentinel subscription alone.
    let idle_dropped = acked.lock("idle-dropped").unwrap().lock().unwrap();
    let idle_signal = told_at(idle_dropped.lost_signal());
    // The writes that never reached the replica.
    let mut replica = set.replica().conn();
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("replica-read-only").arg("no").query(&mut replica).unwrap();
    let _: i64 = redis::cmd("DEL").arg("dropped").arg("idle-dropped").query(&mut replica).unwrap();
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("replica-read-only").arg("yes").query(&mut replica).unwrap();

    let kept_waiter = waiter(waiting.clone(), "kept", 30 * SECOND);
    let dropped_waiter = waiter(waiting.clone(), "dropped", 30 * SECOND);
    common::wait_subscribed(&waiting, 2);

    let killed = Instant::now();
    set.kill_primary();

    // New acquisitions, each call bounded by the timeouts.
    let mut slowest_call = Duration::ZERO;
    let first_acquisition = loop {
        assert!(killed.elapsed() < 30 * SECOND, "no acquisition worked in 30 s\n{}", set.logs());
        let started = Instant::now();
        let outcome = plain.lock("fresh").unwrap().try_lock();
        slowest_call = slowest_call.max(started.elapsed());
        if let Ok(Some(guard)) = outcome {
            guard.unlock().unwrap();
            break killed.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(slowest_call < 3 * TIMEOUT, "a call took {slowest_call:?} during the failover");
    assert!(set.wait_for_promotion(10 * SECOND), "{}", set.logs());

    // The lock that did not survive: its holder is told, its waiter gets it.
    let (reason, at) = dropped_signal.recv().unwrap().expect("the holder of the lost lock was not told");
    let told = at - killed;
    // The watchdog's verification, or the check after the resubscription.
    assert!(matches!(reason, LostReason::RenewalRefused | LostReason::Gone), "{reason:?}");
    assert!(dropped.is_lost());
    let (dropped_served, _, dropped_errors) =
        dropped_waiter.recv_timeout(30 * SECOND).unwrap().expect("the waiter of the lost lock was stranded");
    let dropped_wait = dropped_served - killed;
    let (idle_reason, at) = idle_signal.recv().unwrap().expect("the idle client's holder was not told");
    let idle_told = at - killed;
    assert!(matches!(idle_reason, LostReason::RenewalRefused | LostReason::Gone), "{idle_reason:?}");

    // The acknowledged lock survived: the promoted replica has it, its
    // holder keeps it, and its waiter gets it when it is released.
    assert!(!kept.is_lost(), "the acknowledged hold was lost: {:?}", kept.lost_reason());
    let on_new_primary = hgetall(&mut set.replica().conn(), "kept");
    assert_eq!(on_new_primary.get(kept.owner_id()).map(String::as_str), Some("1"));
    assert!(kept_waiter.try_recv().is_err(), "the waiter got a lock that is still held");
    let released = Instant::now();
    kept.unlock().unwrap();
    let (kept_served, _, kept_errors) =
        kept_waiter.recv_timeout(30 * SECOND).unwrap().expect("the waiter of the kept lock was stranded");
    let handed = kept_served - released;
    drop(dropped);
    drop(idle_dropped);

    eprintln!(
        "failover: first acquisition {first_acquisition:?} after the kill, slowest call {slowest_call:?}, \
         holder told {told:?} (idle client: {idle_told:?}), waiter of the lost lock served {dropped_wait:?} ({dropped_errors} failed \
         calls), waiter of the kept lock served {handed:?} after its release ({kept_errors} failed calls)"
    );
    assert!(first_acquisition < 15 * SECOND, "{first_acquisition:?}");
    // Told at the switch, not at the next renewal (10 s after the hold).
    assert!(told < first_acquisition + 2 * SECOND, "told {told:?}, first acquisition {first_acquisition:?}");
    // The idle client's watchdog renews next 10 s after the hold: told
    // well before, by the switch.
    assert!(idle_told < first_acquisition + 2 * SECOND, "idle client told {idle_told:?}");
    assert!(handed < 2 * SECOND, "the waiter of the kept lock was not woken ({handed:?})");
}

/// A failover while the old primary runs on (`SENTINEL FAILOVER`): it is
/// demoted and answers PING, so only `+switch-master`, `ROLE` and
/// `READONLY` tell the client. Calls keep working, new holds go to the new
/// primary, the held lock stays held and its waiter is served.
///
/// Meanwhile threads of another acknowledged client take and release locks
/// without pause (issue 21, item 8): acquisitions in flight on the old
/// primary when the client moves (their replies held back by `WAIT`) are
/// verified on the new primary as they return, so no release meets a lock
/// gone without its holder having been told (`NotOwner`).
#[test]
fn a_failover_with_the_old_primary_alive_moves_the_client_off_it() {
    let set = SentinelSet::start();
    let client = builder(&set).replica_acks(1, Duration::from_millis(300)).build().unwrap();
    let other = builder(&set).build().unwrap();
    let held = client.lock("held").unwrap().lock().unwrap();
    assert!(held.is_replicated());
    let waiting = waiter(other.clone(), "held", 30 * SECOND);
    common::wait_subscribed(&other, 1);
    let churn = Churn::start(&builder(&set).replica_acks(1, Duration::from_millis(300)).build().unwrap(), 8);
    // Every thread has completed a cycle before the failover.
    assert!(common::eventually(10 * SECOND, || churn.cycles() >= 8), "the churn threads never cycled");

    let started = Instant::now();
    set.failover();
    assert!(set.wait_for_promotion(20 * SECOND), "{}", set.logs());
    let promoted_at = Instant::now();
    let promoted = started.elapsed();
    // Every call after the switch lands on the new primary.
    let mut slowest_call = Duration::ZERO;
    let moved = loop {
        assert!(started.elapsed() < 30 * SECOND, "no acquisition reached the new primary in 30 s");
        let call = Instant::now();
        let outcome = other.lock("fresh").unwrap().try_lock();
        slowest_call = slowest_call.max(call.elapsed());
        if let Ok(Some(guard)) = outcome {
            let on_new = exists(&mut set.replica().conn(), "fresh");
            guard.unlock().unwrap();
            if on_new {
                break started.elapsed();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(slowest_call < 3 * TIMEOUT, "a call took {slowest_call:?} during the failover");
    assert!(!held.is_lost(), "the acknowledged hold was lost: {:?}", held.lost_reason());
    assert!(waiting.try_recv().is_err(), "the waiter got a lock that is still held");
    let released = Instant::now();
    held.unlock().unwrap();
    let (served, _, errors) = waiting.recv_timeout(30 * SECOND).unwrap().expect("the waiter was stranded");
    let handed = served - released;
    eprintln!(
        "manual failover: promoted after {promoted:?}, calls on the new primary {moved:?} after the \
         request, slowest call {slowest_call:?}, waiter served {handed:?} after the release ({errors} failed calls)"
    );
    assert!(handed < 2 * SECOND, "the waiter was not woken ({handed:?})");

    // Churn on for a second on the new primary, then count.
    std::thread::sleep(SECOND);
    let cycles = churn.stop();
    // In flight across the failover: started before the promotion, and
    // held back by a `WAIT` that timed out (a normal cycle takes a few ms).
    let spanning: Vec<&Cycle> = cycles
        .iter()
        .filter(|c| {
            c.started < promoted_at
                && c.returned.is_some_and(|r| r > started && r - c.started >= Duration::from_millis(250))
        })
        .collect();
    let lost_at_return = spanning.iter().filter(|c| c.lost_at_return).count();
    let released_lost = cycles.iter().filter(|c| c.release == Some(Err(ErrorKind::LockLost))).count();
    let not_owner: Vec<&Cycle> =
        cycles.iter().filter(|c| c.release == Some(Err(ErrorKind::NotOwner))).collect();
    let timed_out = cycles.iter().filter(|c| c.returned.is_none() && c.error.is_none()).count();
    let failed_calls: Vec<ErrorKind> = cycles.iter().filter_map(|c| c.error).collect();
    // A hold acknowledged by the replica survives its promotion.
    let acked_then_lost: Vec<&Cycle> = cycles
        .iter()
        .filter(|c| c.replicated_at_return && c.release == Some(Err(ErrorKind::LockLost)))
        .collect();
    eprintln!(
        "in-flight acquisitions: {} cycles; {} acquisitions in flight across the failover (started before \
         the promotion, held back by a WAIT that timed out), {lost_at_return} of them returned already lost \
         (verified on the new primary); releases: {released_lost} LockLost (told before), {} NotOwner; \
         {timed_out} acquire calls timed out (2 s), failed: {failed_calls:?}; {} acknowledged holds lost",
        cycles.len(),
        spanning.len(),
        not_owner.len(),
        acked_then_lost.len()
    );
    assert!(not_owner.is_empty(), "releases met locks gone unannounced: {not_owner:?}");
    assert!(acked_then_lost.is_empty(), "acknowledged holds were lost: {acked_then_lost:?}");
    // A hold found gone by its check at registration is never handed out:
    // the call contends again within its deadline.
    let born_lost: Vec<&Cycle> = cycles.iter().filter(|c| c.lost_at_return).collect();
    assert!(born_lost.is_empty(), "guards were returned already lost: {born_lost:?}");
}

/// One acquisition of a [`Churn`] thread.
#[derive(Debug)]
struct Cycle {
    started: Instant,
    /// When the acquire call returned a guard; `None` when it failed.
    returned: Option<Instant>,
    /// The guard was lost when the call returned it.
    lost_at_return: bool,
    /// The guard said its acquisition reached the replica.
    replicated_at_return: bool,
    /// The release's outcome (`None` when nothing was acquired).
    release: Option<Result<(), ErrorKind>>,
    /// The acquire call's error (`None` also when it timed out).
    error: Option<ErrorKind>,
}

/// Threads that take locks and release them again, without pause, until
/// stopped, recording every acquisition: two threads per lock, so that
/// releases also hand locks over between them.
struct Churn {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cycles: std::sync::Arc<std::sync::Mutex<Vec<Cycle>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Churn {
    fn start(client: &Client, threads: usize) -> Churn {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cycles = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let threads = (0..threads)
            .map(|i| {
                let (client, stop, cycles) = (client.clone(), stop.clone(), cycles.clone());
                std::thread::spawn(move || {
                    let lock = client.lock(&format!("churn-{}", i / 2)).unwrap();
                    // Bounded: a cycle takes at most a few timeouts.
                    let deadline = Instant::now() + 60 * SECOND;
                    while !stop.load(std::sync::atomic::Ordering::Acquire) && Instant::now() < deadline {
                        let started = Instant::now();
                        let cycle = match lock.try_lock_for(2 * SECOND) {
                            Ok(Some(guard)) => {
                                let returned = Some(Instant::now());
                                let lost_at_return = guard.is_lost();
                                let replicated_at_return = guard.is_replicated();
                                std::thread::sleep(Duration::from_millis(2));
                                let release = Some(guard.unlock().map_err(|e| e.kind()));
                                Cycle {
                                    started,
                                    returned,
                                    lost_at_return,
                                    replicated_at_return,
                                    release,
                                    error: None,
                                }
                            }
                            outcome => {
                                std::thread::sleep(Duration::from_millis(20));
                                let (lost_at_return, replicated_at_return) = (false, false);
                                let error = outcome.err().map(|e| e.kind());
                                Cycle {
                                    started,
                                    returned: None,
                                    lost_at_return,
                                    replicated_at_return,
                                    release: None,
                                    error,
                                }
                            }
                        };
                        cycles.lock().unwrap().push(cycle);
                    }
                })
            })
            .collect();
        Churn { stop, cycles, threads }
    }

    /// Acquisitions recorded so far.
    fn cycles(&self) -> usize {
        self.cycles.lock().unwrap().len()
    }

    fn stop(self) -> Vec<Cycle> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        for thread in self.threads {
            thread.join().unwrap();
        }
        std::mem::take(&mut *self.cycles.lock().unwrap())
    }
}

/// TLS to the primary through Sentinel (`node_tls`): a primary and a
/// replica that listen for TLS only; the client follows the failover and
/// reaches the promoted replica over TLS, pub/sub included.
#[cfg(feature = "tls")]
#[test]
fn tls_to_the_primary_through_sentinel_survives_a_failover() {
    let mut set = SentinelSet::start_tls();
    let ca = set.primary().tls().ca.cert_pem().to_owned();
    let err = builder(&set).tls_ca_certificate(ca.clone()).build().unwrap_err();
    assert!(err.is_invalid(), "TLS settings without node_tls: {err:?}");

    let tls_builder = || builder(&set).node_tls(true).tls_ca_certificate(ca.clone());
    let client = tls_builder().replica_acks(1, Duration::from_millis(300)).build().unwrap();
    let other = tls_builder().build().unwrap();
    let held = client.lock("tls-held").unwrap().lock().unwrap();
    assert!(held.is_replicated());
    let waiting = waiter(other.clone(), "tls-held", 30 * SECOND);
    common::wait_subscribed(&other, 1);

    let killed = Instant::now();
    set.kill_primary();
    let first_acquisition = loop {
        assert!(killed.elapsed() < 30 * SECOND, "no acquisition worked in 30 s\n{}", set.logs());
        if let Ok(Some(guard)) = other.lock("tls-fresh").unwrap().try_lock() {
            guard.unlock().unwrap();
            break killed.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!held.is_lost(), "the acknowledged hold was lost: {:?}", held.lost_reason());
    let released = Instant::now();
    held.unlock().unwrap();
    let (served, _, _) = waiting.recv_timeout(30 * SECOND).unwrap().expect("the waiter was stranded");
    let handed = served - released;
    eprintln!(
        "TLS failover: first acquisition {first_acquisition:?} after the kill, waiter served {handed:?}"
    );
    assert!(handed < 2 * SECOND, "the waiter was not woken over TLS ({handed:?})");
}
