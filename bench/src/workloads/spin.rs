//! SPIN: the spin lock against the pub/sub lock (`Lock`), uncontended and
//! under contention, in the same run on the same server.
//!
//! Uncontended: one thread, acquire+release pairs, against the minimal
//! floor (the minimal Redisson-semantics scripts, raw). Contended:
//! `CLIENTS` clients of one thread each take one lock in turn, holding it
//! `hold` (a sleep, the critical section), for a fixed number of
//! acquisitions in all: throughput, the server's top-level
//! commands per acquisition (EVALSHA/EVAL for every try, SUBSCRIBE and
//! friends for the pub/sub lock's waits) and the worst wait.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use keyholder::{BackOff, Client};

use crate::env::{Env, channel_of};
use crate::error::{Res, err};
use crate::lock_impl::LEASE_MS;
use crate::measure::{Delta, med, snap};
use crate::report::{fmt, fmt_ratio, print_table};

/// Top-level commands of a lock's calls (HEXISTS and HGET also run inside
/// the scripts, so a queued thread's own HEXISTS is not counted: with one
/// thread per client there is none).
const TOP_LEVEL: [&str; 7] =
    ["evalsha", "eval", "subscribe", "unsubscribe", "ping", "ssubscribe", "sunsubscribe"];
const CLIENTS: usize = 4;

/// Which lock a run takes.
#[derive(Clone, Copy)]
enum Kind {
    PubSub,
    Spin(BackOff),
}

struct Row {
    rate: f64,
    round_trips: f64,
    worst_ms: f64,
}

pub(crate) fn spin(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let pairs = if env.cfg.quick { 300 } else { 3_000 };
    let contended = if env.cfg.quick { 80 } else { 400 };
    let hold = Duration::from_millis(1);
    let kinds = [
        ("Lock (pub/sub)", Kind::PubSub),
        ("SpinLock, exponential back-off (default)", Kind::Spin(BackOff::exponential())),
        ("SpinLock, constant 64 ms", Kind::Spin(BackOff::constant())),
    ];
    let mut floor_runs = Vec::new();
    let mut alone: Vec<Vec<Row>> = kinds.iter().map(|_| Vec::new()).collect();
    let mut together: Vec<Vec<Row>> = kinds.iter().map(|_| Vec::new()).collect();
    for run in 1..=env.cfg.runs {
        eprintln!("SPIN run {run}/{}", env.cfg.runs);
        floor_runs.push(floor(env, stats, pairs)?);
        for (i, (_, kind)) in kinds.iter().enumerate() {
            alone[i].push(uncontended(env, stats, *kind, pairs)?);
            together[i].push(contend(env, stats, *kind, contended, hold)?);
        }
    }
    let floor_rate = med(&floor_runs, |r| r.rate);
    let mut rows =
        vec![vec!["minimal floor (raw scripts)".to_owned(), fmt(floor_rate, 0), fmt_ratio(1.0), fmt(2.0, 2)]];
    for (i, (label, _)) in kinds.iter().enumerate() {
        let rate = med(&alone[i], |r| r.rate);
        rows.push(vec![
            (*label).to_owned(),
            fmt(rate, 0),
            fmt_ratio(rate / floor_rate),
            fmt(med(&alone[i], |r| r.round_trips), 2),
        ]);
    }
    print_table(
        &format!("SPIN: uncontended acquire+release, 1 thread, {pairs} pairs"),
        &["implementation", "pairs/s", "vs floor", "round trips/pair"],
        &rows,
        &["Round trips: the server's top-level commands per pair.".to_owned()],
    );
    let ideal = 1.0 / hold.as_secs_f64();
    let rows: Vec<Vec<String>> = kinds
        .iter()
        .enumerate()
        .map(|(i, (label, _))| {
            let rate = med(&together[i], |r| r.rate);
            vec![
                (*label).to_owned(),
                fmt(rate, 0),
                fmt_ratio(rate / ideal),
                fmt(med(&together[i], |r| r.round_trips), 2),
                fmt(med(&together[i], |r| r.worst_ms), 1),
            ]
        })
        .collect();
    print_table(
        &format!(
            "SPIN: contended, {CLIENTS} clients x 1 thread, one lock, hold {} ms, {contended} acquisitions",
            hold.as_millis()
        ),
        &["implementation", "acquisitions/s", "vs 1/hold", "round trips/acquisition", "worst wait ms"],
        &rows,
        &["vs 1/hold: against the rate of back-to-back holds with free hand-offs. Round trips: the \
           server's top-level commands (EVALSHA/EVAL tries, SUBSCRIBE/UNSUBSCRIBE, PING) per \
           acquisition."
            .to_owned()],
    );
    Ok(())
}

fn client(env: &Env) -> Res<Client> {
    Ok(Client::builder(env.url.clone()).build()?)
}

fn uncontended(env: &Env, stats: &mut redis::Connection, kind: Kind, pairs: usize) -> Res<Row> {
    let client = client(env)?;
    let name = env.key("spin-alone");
    let (lock, spin) = (client.lock(&name)?, client.spin_lock(&name)?);
    let one = || -> Res<()> {
        match kind {
            Kind::PubSub => lock.try_lock()?.ok_or_else(|| err("SPIN: held"))?.unlock()?,
            Kind::Spin(_) => spin.try_lock()?.ok_or_else(|| err("SPIN: held"))?.unlock()?,
        }
        Ok(())
    };
    for _ in 0..pairs / 10 {
        one()?;
    }
    let before = snap(stats)?;
    let started = Instant::now();
    for _ in 0..pairs {
        one()?;
    }
    let wall = started.elapsed().as_secs_f64();
    let delta = Delta::between(&before, &snap(stats)?);
    let top: f64 = TOP_LEVEL.iter().map(|c| delta.calls(c)).sum();
    Ok(Row { rate: pairs as f64 / wall, round_trips: top / pairs as f64, worst_ms: f64::NAN })
}

fn contend(env: &Env, stats: &mut redis::Connection, kind: Kind, total: usize, hold: Duration) -> Res<Row> {
    let name = env.key("spin-contended");
    let clients: Vec<Client> = (0..CLIENTS).map(|_| client(env)).collect::<Res<_>>()?;
    let per = total / CLIENTS;
    let start = Arc::new(Barrier::new(CLIENTS + 1));
    let before = snap(stats)?;
    let workers: Vec<_> = clients
        .iter()
        .map(|c| -> Res<_> {
            let (lock, spin) = (c.lock(&name)?, c.spin_lock(&name)?);
            let spin = match kind {
                Kind::Spin(back_off) => spin.with_back_off(back_off)?,
                Kind::PubSub => spin,
            };
            let start = Arc::clone(&start);
            Ok(thread::spawn(move || -> Result<f64, String> {
                start.wait();
                let mut worst = Duration::ZERO;
                for _ in 0..per {
                    let asked = Instant::now();
                    let guard_hold = |waited: Duration| {
                        thread::sleep(hold);
                        waited
                    };
                    let waited = match kind {
                        Kind::PubSub => {
                            let g = lock.lock().map_err(|e| e.to_string())?;
                            let w = guard_hold(asked.elapsed());
                            g.unlock().map_err(|e| e.to_string())?;
                            w
                        }
                        Kind::Spin(_) => {
                            let g = spin.lock().map_err(|e| e.to_string())?;
                            let w = guard_hold(asked.elapsed());
                            g.unlock().map_err(|e| e.to_string())?;
                            w
                        }
                    };
                    worst = worst.max(waited);
                }
                Ok(worst.as_secs_f64() * 1e3)
            }))
        })
        .collect::<Res<_>>()?;
    start.wait();
    let started = Instant::now();
    let mut worst: f64 = 0.0;
    for w in workers {
        let which = match kind {
            Kind::PubSub => "Lock",
            Kind::Spin(_) => "SpinLock",
        };
        let ms = w
            .join()
            .map_err(|_| err("SPIN: a worker panicked"))?
            .map_err(|e| err(format!("SPIN, contended {which}: {e}")))?;
        worst = worst.max(ms);
    }
    let wall = started.elapsed().as_secs_f64();
    let delta = Delta::between(&before, &snap(stats)?);
    let top: f64 = TOP_LEVEL.iter().map(|c| delta.calls(c)).sum();
    let done = (per * CLIENTS) as f64;
    Ok(Row { rate: done / wall, round_trips: top / done, worst_ms: worst })
}

/// The minimal floor: the minimal acquire + release scripts, raw, on one
/// plain connection.
fn floor(env: &Env, stats: &mut redis::Connection, pairs: usize) -> Res<Row> {
    let _ = stats;
    let mut con = env.connect()?;
    let (name, owner) = (env.key("spin-floor"), "bench-floor:spin");
    let channel = channel_of(&name);
    let started = Instant::now();
    for _ in 0..pairs {
        let acquired: redis::Value =
            env.scripts.minimal_acquire.key(&name).arg(LEASE_MS).arg(owner).invoke(&mut con)?;
        if acquired != redis::Value::Nil {
            return Err(err(format!("SPIN floor: acquire replied {acquired:?}")));
        }
        let _: i64 = env
            .scripts
            .minimal_release
            .key(&name)
            .key(&channel)
            .arg("0")
            .arg(LEASE_MS)
            .arg(owner)
            .invoke(&mut con)?;
    }
    Ok(Row { rate: pairs as f64 / started.elapsed().as_secs_f64(), round_trips: 2.0, worst_ms: f64::NAN })
}
