//! Item 8 of issue 37: the deployment's latency against the command
//! timeout the services assume. Three figures per primary: the round
//! trip (`PING`s on the primary's session, p50 and p99), one acquire and
//! release pair of a scratch lock (after one unmeasured pair, which loads
//! the scripts on a server that lacks them), and one unlock-to-wake through pub/sub
//! (a second client waiting on the scratch lock, woken by the release).
//!
//! The scratch lock is named `keyholder:doctor:<client id>` (on a Redis
//! Cluster `keyholder:doctor:{<n>}:<client id>`, the hash tag chosen so the
//! name lands on the primary measured), takes a fixed lease of
//! [`SCRATCH_LEASE`] and is force-unlocked at the end, whatever happened.
//!
//! The waiter is a second client, not a second thread of this one: threads
//! of one client queue locally behind a local holder and are handed the
//! lock without Redis's pub/sub (see `wait/entry.rs`), which is not what
//! a waiter in another process sees.

use std::thread;
use std::time::{Duration, Instant};

use super::options::Settings;
use super::report::{Check, Figure, Verdict, blank};
use crate::admin::send;
use crate::client::Client;
use crate::error::Result;
use crate::lease::Lease;
use crate::names;
use crate::store::cluster::Cluster;
use crate::store::lanes::Session;
use crate::store::routes::Routes;
use crate::store::slots::Addr;

const NAME: &str = "latency";
const GUARANTEE: &str = "Time bounds with Redis unreachable";
const DOCS: &str = "docs/operations.md#latency";

/// Round trips measured per primary.
pub(super) const PINGS: usize = 50;

/// The scratch lock's fixed lease: a crash mid-check leaves it for no
/// longer.
pub(super) const SCRATCH_LEASE: Duration = Duration::from_secs(5);

/// A p99 within this factor of the command timeout warns.
const MARGIN: u32 = 3;

/// What was measured on one primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Measured {
    /// Each `PING`'s round trip.
    pub(super) round_trips: Vec<Duration>,
    /// The acquire and release pair, or why it could not be measured.
    pub(super) pair: std::result::Result<Duration, String>,
    /// Release to the waiter's return, or why it could not be measured.
    pub(super) wake: std::result::Result<Duration, String>,
    /// The scratch lock's name.
    pub(super) scratch: String,
    /// Where the scratch lock landed, when not on the primary measured.
    pub(super) placement: Option<String>,
}

/// The scratch lock's name for this client, with a hash tag when given.
pub(super) fn scratch_name(client_id: &str, tag: Option<u32>) -> String {
    match tag {
        Some(tag) => format!("keyholder:doctor:{{{tag}}}:{client_id}"),
        None => format!("keyholder:doctor:{client_id}"),
    }
}

/// `PINGS` round trips on `session`, each timed.
///
/// # Errors
///
/// A connection failure or a timeout.
pub(super) fn round_trips(session: &mut Session<'_>) -> Result<Vec<Duration>> {
    let ping = [redis::cmd("PING")];
    let mut times = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let start = Instant::now();
        send(session, &ping)?;
        times.push(start.elapsed());
    }
    Ok(times)
}

/// The scratch lock's pair and wake on `client`, the lock removed at the
/// end (`force_unlock`) whatever happened.
pub(super) fn lock_figures(
    client: &Client,
    scratch: &str,
) -> (std::result::Result<Duration, String>, std::result::Result<Duration, String>) {
    let lease = Lease::Fixed(SCRATCH_LEASE);
    let lock = match client.lock_with_lease(scratch, lease) {
        Ok(lock) => lock,
        Err(e) => return (Err(e.to_string()), Err(e.to_string())),
    };
    let pair = (|| {
        // One pair unmeasured first: it loads the scripts (NOSCRIPT, then
        // SCRIPT LOAD) on a server that has not run them yet, which the
        // services pay once.
        if let Some(guard) = lock.try_lock()? {
            guard.unlock()?;
        }
        let start = Instant::now();
        let guard = lock.try_lock()?;
        let Some(guard) = guard else { return Ok(Err("the scratch lock is held by another".to_owned())) };
        guard.unlock()?;
        Ok::<_, crate::Error>(Ok(start.elapsed()))
    })()
    .unwrap_or_else(|e| Err(e.to_string()));
    let wake = match pair {
        Ok(_) => wake(client, scratch, lease).unwrap_or_else(|e| Err(e.to_string())),
        Err(ref e) => Err(format!("not measured: {e}")),
    };
    if let Err(e) = lock.force_unlock() {
        log::warn!("keyholder doctor: could not remove the scratch lock {scratch}: {e}");
    }
    (pair, wake)
}

/// Holds the scratch lock, has a second client wait for it, releases it
/// once that client is queued in Redis, and times the release to the
/// waiter's return.
fn wake(client: &Client, scratch: &str, lease: Lease) -> Result<std::result::Result<Duration, String>> {
    let lock = client.lock_with_lease(scratch, lease)?;
    let Some(guard) = lock.try_lock()? else {
        return Ok(Err("the scratch lock is held by another".to_owned()));
    };
    let waiter = match Client::start(client.inner().config.clone()) {
        Ok(waiter) => waiter,
        Err(e) => {
            guard.unlock()?;
            return Err(e);
        }
    };
    let waiting = match waiter.lock_with_lease(scratch, lease) {
        Ok(waiting) => waiting,
        Err(e) => {
            waiter.shutdown();
            guard.unlock()?;
            return Err(e);
        }
    };
    let thread = thread::spawn(move || -> Result<Option<Instant>> {
        let guard = waiting.try_lock_for(SCRATCH_LEASE)?;
        let woken = Instant::now();
        match guard {
            Some(guard) => {
                guard.unlock()?;
                Ok(Some(woken))
            }
            None => Ok(None),
        }
    });
    // Released once the waiter is queued (acquire.lua queues a keyholder
    // client that finds the lock held): one ZSCORE a round trip, bounded.
    let queue = names::queue_key(scratch);
    let asked = [redis::cmd("ZSCORE").arg(&queue).arg(waiter.id()).clone()];
    let deadline = Instant::now() + SCRATCH_LEASE;
    let mut queued = Ok(false);
    while matches!(queued, Ok(false)) && Instant::now() < deadline && !thread.is_finished() {
        queued = client
            .inner()
            .with_conn(scratch, |session| send(session, &asked))
            .map(|reply| !matches!(reply.first(), None | Some(redis::Value::Nil)))
            .map_err(|e| e.to_string());
    }
    let released = Instant::now();
    let unlocked = guard.unlock();
    let woken = thread.join();
    waiter.shutdown();
    unlocked?;
    Ok(match woken {
        _ if queued.is_err() => Err(format!("the waiter's place in the queue could not be read: {queued:?}")),
        _ if queued != Ok(true) => Err("the waiting client never queued for the scratch lock".to_owned()),
        Ok(Ok(Some(at))) => Ok(at.saturating_duration_since(released)),
        Ok(Ok(None)) => Err(format!("the waiter was not woken within {} ms", SCRATCH_LEASE.as_millis())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the waiting thread panicked".to_owned()),
    })
}

/// The latency check of every primary: on a single server or through
/// Sentinel, one; on a Redis Cluster, one per primary (sorted by address),
/// each with a scratch lock whose hash tag lands on it.
///
/// # Errors
///
/// A connection failure or a timeout of a round trip; the scratch lock's
/// failures are the check's "unknown", not errors.
pub(super) fn checks(client: &Client, settings: &Settings) -> Result<Vec<Check>> {
    let inner = client.inner();
    let id = client.id();
    let mut checks = Vec::new();
    match inner.routes() {
        Routes::Primary(_) => {
            let round_trips = round_trips(&mut inner.routes().session("")?)?;
            let scratch = scratch_name(id, None);
            let (pair, wake) = lock_figures(client, &scratch);
            let measured = Measured { round_trips, pair, wake, scratch, placement: None };
            checks.push(run(&measured, settings));
        }
        Routes::Cluster(cluster) => {
            let mut shards = cluster.shards();
            shards.sort_by(|a, b| a.addr.cmp(&b.addr));
            for shard in shards {
                let round_trips = round_trips(&mut shard.session()?)?;
                let node = format!("{}:{}", shard.addr.0, shard.addr.1);
                let (scratch, placement) = scratch_on(cluster, &shard.addr, id);
                let (pair, wake) = lock_figures(client, &scratch);
                let measured = Measured { round_trips, pair, wake, scratch, placement };
                checks.push(Check { node: Some(node), ..run(&measured, settings) });
            }
        }
    }
    Ok(checks)
}

/// A scratch name for this client whose hash tag lands on the primary at
/// `addr`, and, when no tag tried does, the untagged name with a note of
/// where it landed instead.
pub(super) fn scratch_on(cluster: &Cluster, addr: &Addr, id: &str) -> (String, Option<String>) {
    let tagged = (0..TAGS_TRIED)
        .map(|tag| scratch_name(id, Some(tag)))
        .find(|name| cluster.node_of(name).as_ref() == Some(addr));
    match tagged {
        Some(name) => (name, None),
        None => {
            let name = scratch_name(id, None);
            let lands = cluster
                .node_of(&name)
                .map_or_else(|| "no node".to_owned(), |(host, port)| format!("{host}:{port}"));
            (
                name,
                Some(format!(
                    "no hash tag tried lands on this primary: the scratch lock used on {lands} only"
                )),
            )
        }
    }
}

/// Hash tags tried for a scratch name that lands on a given primary (a
/// primary serving a third of the slots is hit within a few).
const TAGS_TRIED: u32 = 100_000;

/// The `q`th percentile (0 to 100) of `sorted`, nearest rank.
fn percentile(sorted: &[Duration], q: usize) -> Option<Duration> {
    let last = sorted.len().checked_sub(1)?;
    sorted.get((last * q).div_ceil(100)).copied()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// The latency check of one primary.
pub(super) fn run(measured: &Measured, settings: &Settings) -> Check {
    let timeout = settings.command_timeout;
    let mut sorted = measured.round_trips.clone();
    sorted.sort_unstable();
    let (Some(p50), Some(p99)) = (percentile(&sorted, 50), percentile(&sorted, 99)) else {
        return Check {
            found: "no round trip measured".to_owned(),
            verdict: Verdict::Unknown {
                reason: "no round trip measured".to_owned(),
                confirm_by_hand:
                    "`redis-cli --latency` from the services' hosts, against the command timeout".to_owned(),
            },
            ..blank(NAME, GUARANTEE, DOCS)
        };
    };
    let mut figures = vec![
        ("round_trips", Figure::Number(sorted.len() as i64)),
        ("rtt_p50", Figure::Duration(p50)),
        ("rtt_p99", Figure::Duration(p99)),
    ];
    if let Ok(pair) = measured.pair {
        figures.push(("acquire_release", Figure::Duration(pair)));
    }
    if let Ok(wake) = measured.wake {
        figures.push(("unlock_to_wake", Figure::Duration(wake)));
    }
    figures.push(("command_timeout", Figure::Duration(timeout)));
    figures.push(("scratch_lock", Figure::Text(measured.scratch.clone())));
    let describe = |what: &std::result::Result<Duration, String>| match what {
        Ok(d) => ms(*d),
        Err(e) => format!("not measured ({e})"),
    };
    let mut found = format!(
        "round trip p50 {}, p99 {} ({} PINGs); acquire+release {}; unlock to wake {}; command timeout {} ms; \
         scratch lock {}",
        ms(p50),
        ms(p99),
        sorted.len(),
        describe(&measured.pair),
        describe(&measured.wake),
        timeout.as_millis(),
        measured.scratch
    );
    if let Some(placement) = &measured.placement {
        found.push_str(&format!(" ({placement})"));
    }
    let over: Vec<String> = [
        ("round trip p99", Some(p99)),
        ("acquire+release", measured.pair.as_ref().ok().copied()),
        ("unlock to wake", measured.wake.as_ref().ok().copied()),
    ]
    .into_iter()
    .filter_map(|(what, d)| d.filter(|d| *d > timeout).map(|d| format!("{what} {}", ms(d))))
    .collect();
    let fix_slow = "find what slows the round trips (the network path, a loaded server: SLOWLOG, \
                    `redis-cli --latency`), or raise the services' command_timeout above the figures";
    let (verdict, meaning, fix) = if !over.is_empty() {
        (
            Verdict::Fail,
            format!(
                "{} over the command timeout: the services' calls time out (ErrorKind::Timeout) and a hold \
                 whose release or renewal times out may be lost or linger until its lease ends",
                over.join(", ")
            ),
            Some(fix_slow.to_owned()),
        )
    } else if p99 * MARGIN >= timeout {
        (
            Verdict::Warn,
            format!(
                "the round trip's p99 is within a factor of {MARGIN} of the command timeout: a little more \
                 load or a slower path, and calls time out"
            ),
            Some(fix_slow.to_owned()),
        )
    } else if let Err(e) = measured.pair.as_ref().and(measured.wake.as_ref()) {
        return Check {
            found,
            figures,
            verdict: Verdict::Unknown {
                reason: format!("the scratch lock could not be measured: {e}"),
                confirm_by_hand: "that the services' user may run the lock scripts (EVALSHA) and subscribe, \
                                  and time an acquire and release by hand"
                    .to_owned(),
            },
            meaning: "the round trips are well inside the command timeout".to_owned(),
            ..blank(NAME, GUARANTEE, DOCS)
        };
    } else {
        (
            Verdict::Ok,
            format!(
                "every figure is well inside the command timeout (p99 below a {MARGIN}rd of it): calls do not \
                 time out under this load"
            ),
            None,
        )
    };
    Check { found, figures, verdict, meaning, fix, ..blank(NAME, GUARANTEE, DOCS) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(rtt_ms: u64, pair: u64, wake: u64) -> Measured {
        Measured {
            round_trips: (0..PINGS as u64).map(|i| Duration::from_micros(rtt_ms * 1000 - i)).collect(),
            pair: Ok(Duration::from_millis(pair)),
            wake: Ok(Duration::from_millis(wake)),
            scratch: scratch_name("id", None),
            placement: None,
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let times: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&times, 50), Some(Duration::from_millis(51)));
        assert_eq!(percentile(&times, 99), Some(Duration::from_millis(100)));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn figures_against_the_command_timeout() {
        let settings = Settings::default_for_tests(); // 3 s
        let c = run(&measured(1, 2, 3), &settings);
        assert_eq!(c.verdict, Verdict::Ok, "{c:?}");
        assert_eq!(c.figure("acquire_release"), Some(&Figure::Duration(Duration::from_millis(2))));
        assert_eq!(run(&measured(1_000, 2, 3), &settings).verdict, Verdict::Warn);
        let slow_wake = run(&measured(1, 2, 3_500), &settings);
        assert_eq!(slow_wake.verdict, Verdict::Fail);
        assert!(slow_wake.meaning.contains("unlock to wake"), "{}", slow_wake.meaning);
        let no_lock = Measured { pair: Err("NOPERM".into()), ..measured(1, 2, 3) };
        assert!(matches!(run(&no_lock, &settings).verdict, Verdict::Unknown { .. }));
        assert_eq!(scratch_name("id", Some(7)), "keyholder:doctor:{7}:id");
    }
}
