//! SEM: a semaphore of N permits against N independent plain locks, same
//! run, same server. 8 threads over 4 clients; each thread takes one
//! permit (or its lock) `sem_per_thread` times, holds it for the critical
//! section, and gives it back. With the semaphore any thread may take any
//! free permit; with N locks thread `t` always takes lock `t / 2`, so two
//! threads of two different clients share each lock, and a free lock cannot
//! serve a thread waiting on another. Thread `t` uses client `t % 4`. Measured: throughput (acquisitions per second of wall time),
//! the acquire wait (median, p99, worst), script calls per acquisition,
//! and the most holders seen at once (must be at most N). The ideal is N
//! holders all the time: N / hold per second.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use keyholder::Client;

use crate::env::Env;
use crate::error::{Res, err};
use crate::measure::{Delta, max_of, med, pct, snap, sorted, us};
use crate::report::{fmt, fmt_ratio, print_table};

use super::threads::join;

/// Permits, and plain locks in the comparison.
const N: usize = 4;
const THREADS: usize = 8;
const CLIENTS: usize = 4;

/// One variant's figures in one run.
struct Run {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    worst_ms: f64,
    calls_per_acq: f64,
    most_holders: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Semaphore,
    Locks,
}

pub(crate) fn sem(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let per_thread = env.cfg.sem_per_thread;
    let hold = env.cfg.hold;
    let clients: Vec<Client> =
        (0..CLIENTS).map(|_| Client::builder(env.url.clone()).build()).collect::<Result<_, _>>()?;
    let sem_name = env.key("sem");
    let lock_names: Vec<String> = (0..N).map(|i| env.key(&format!("sem-lock-{i}"))).collect();
    let permits = u32::try_from(N).map_err(|e| err(e.to_string()))?;
    if !clients[0].semaphore(&sem_name)?.try_set_permits(permits)? {
        return Err(err(format!("semaphore {sem_name} already set")));
    }
    let (mut sem_runs, mut lock_runs) = (Vec::new(), Vec::new());
    for run in 1..=env.cfg.runs {
        eprintln!("SEM run {run}/{}", env.cfg.runs);
        sem_runs.push(measure(
            stats,
            &clients,
            Variant::Semaphore,
            &sem_name,
            &lock_names,
            per_thread,
            hold,
        )?);
        lock_runs.push(measure(stats, &clients, Variant::Locks, &sem_name, &lock_names, per_thread, hold)?);
    }
    let ideal = N as f64 / hold.as_secs_f64();
    let row = |label: &str, runs: &[Run]| {
        let rate = med(runs, |r| r.rate);
        vec![
            label.to_owned(),
            fmt(rate, 0),
            fmt_ratio(rate / ideal),
            fmt(med(runs, |r| r.p50_ms), 2),
            fmt(med(runs, |r| r.p99_ms), 2),
            fmt(max_of(runs, |r| r.worst_ms), 2),
            fmt(med(runs, |r| r.calls_per_acq), 2),
            fmt(max_of(runs, |r| r.most_holders), 0),
        ]
    };
    let sem_rate = med(&sem_runs, |r| r.rate);
    let lock_rate = med(&lock_runs, |r| r.rate);
    print_table(
        &format!(
            "SEM: a semaphore of {N} permits vs {N} plain locks, {THREADS} threads over {CLIENTS} clients, \
             {per_thread} acquisitions each, hold {hold:?} (ideal {ideal:.0}/s: {N} holders all the time)"
        ),
        &[
            "",
            "acq/s",
            "vs ideal",
            "wait p50 ms",
            "wait p99 ms",
            "worst wait ms",
            "scripts/acq",
            "most holders",
        ],
        &[
            row("semaphore (N permits)", &sem_runs),
            row(&format!("{N} locks, 2 threads (2 clients) on each"), &lock_runs),
        ],
        &[format!(
            "semaphore vs locks: {} throughput. scripts/acq counts EVALSHA and EVAL calls per acquisition \
             (acquire attempts and releases; the locks' queue scripts included). Worst wait is the maximum \
             over runs; the rest are medians.",
            fmt_ratio(sem_rate / lock_rate)
        )],
    );
    Ok(())
}

fn measure(
    stats: &mut redis::Connection,
    clients: &[Client],
    variant: Variant,
    sem_name: &str,
    lock_names: &[String],
    per_thread: usize,
    hold: Duration,
) -> Res<Run> {
    let start = Arc::new(Barrier::new(THREADS + 1));
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (before, waits, started) = thread::scope(|scope| -> Res<_> {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let client = clients[t % clients.len()].clone();
                let (start, holders, most) = (Arc::clone(&start), Arc::clone(&holders), Arc::clone(&most));
                let lock_name =
                    lock_names[(t * lock_names.len() / THREADS).min(lock_names.len() - 1)].clone();
                scope.spawn(move || -> Res<Vec<Duration>> {
                    let semaphore = client.semaphore(sem_name)?;
                    let lock = client.lock(&lock_name)?;
                    let mut waits = Vec::with_capacity(per_thread);
                    start.wait();
                    for _ in 0..per_thread {
                        let asked = Instant::now();
                        let held = match variant {
                            Variant::Semaphore => Held::Permit(
                                semaphore
                                    .try_acquire_for(1, Duration::from_secs(60))?
                                    .ok_or_else(|| err("SEM: no permit in 60 s"))?,
                            ),
                            Variant::Locks => Held::Lock(
                                lock.try_lock_for(Duration::from_secs(60))?
                                    .ok_or_else(|| err("SEM: no lock in 60 s"))?,
                            ),
                        };
                        waits.push(asked.elapsed());
                        let now = holders.fetch_add(1, Ordering::AcqRel) + 1;
                        most.fetch_max(now, Ordering::AcqRel);
                        thread::sleep(hold);
                        holders.fetch_sub(1, Ordering::AcqRel);
                        match held {
                            Held::Permit(permit) => drop(permit.release()?),
                            Held::Lock(guard) => guard.unlock()?,
                        }
                    }
                    Ok(waits)
                })
            })
            .collect();
        let before = snap(stats)?;
        let started = Instant::now();
        start.wait();
        let mut waits = Vec::new();
        for handle in handles {
            waits.extend(join(handle)?);
        }
        Ok((before, waits, started))
    })?;
    let wall = started.elapsed();
    let delta = Delta::between(&before, &snap(stats)?);
    let acquisitions = waits.len() as f64;
    let waits = sorted(waits.iter().map(|w| us(*w) / 1000.0).collect());
    Ok(Run {
        rate: acquisitions / wall.as_secs_f64(),
        p50_ms: pct(&waits, 50.0),
        p99_ms: pct(&waits, 99.0),
        worst_ms: waits.last().copied().unwrap_or(f64::NAN),
        calls_per_acq: (delta.calls("evalsha") + delta.calls("eval")) / acquisitions,
        most_holders: most.load(Ordering::Acquire) as f64,
    })
}

/// What a thread holds during its critical section.
enum Held {
    Permit(keyholder::SemaphorePermits),
    Lock(keyholder::LockGuard),
}
