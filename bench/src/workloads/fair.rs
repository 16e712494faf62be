//! FAIR: the fair lock in W2's multi-process shape: `--w2-threads` (8)
//! clients of one thread each on one fair lock, 1 ms holds with W2's
//! GET-then-SET counter, back to back. Keyholder's reentrant lock runs the
//! same shape in the same run for comparison, and the minimal floor's handoff gives
//! the ideal `1 / (hold + one handoff)`.
//!
//! Besides W2's figures it counts FIFO inversions: pairs of acquisitions
//! served in the opposite order of their arrival (the moment the worker
//! called for the lock), among arrivals more than [`TOLERANCE_MS`] apart
//! (closer arrivals may reach Redis in either order), and the PUBLISH calls
//! per acquisition (each wakes one waiter's own channel for the fair lock).

use std::collections::HashMap;
use std::time::Instant;

use keyholder::{Client, FairLock, FairLockGuard};

use super::contended::{Figures, Shape, Worker, run_workers};
use super::handoff::handoff;
use crate::env::Env;
use crate::error::{Res, err};
use crate::lock_impl::{ACQUIRE_LIMIT, Keyholder, LockImpl, Session};
use crate::measure::{Delta, med};
use crate::report::{fmt, fmt_ratio, print_table};

/// Arrivals closer than this are not ordered by the inversion count.
const TOLERANCE_MS: f64 = 0.2;

/// Commands the fair lock's scripts (and the shared renewal) run inside
/// Redis: not round trips.
const FAIR_SCRIPT_COMMANDS: &[&str] = &[
    "type", "get", "set", "incr", "exists", "hexists", "hset", "hincrby", "hget", "pexpire", "pttl", "del",
    "lindex", "lpop", "rpush", "lrange", "lrem", "zscore", "zadd", "zrem", "zrange", "zincrby", "publish",
    "spublish",
];

/// keyholder fair locks over one client per session.
struct Fair {
    clients: Vec<Client>,
}

impl Fair {
    fn new(env: &Env, clients: usize) -> Res<Fair> {
        let clients = (0..clients)
            .map(|_| match &env.shards {
                Some(shards) => Client::builder_cluster(shards.seeds.clone()).build(),
                None => Client::builder(env.url.clone()).build(),
            })
            .collect::<Result<Vec<Client>, _>>()?;
        Ok(Fair { clients })
    }
}

impl Drop for Fair {
    fn drop(&mut self) {
        for client in &self.clients {
            client.shutdown();
        }
    }
}

impl LockImpl for Fair {
    type Session = FairSession;

    fn session(&self, index: usize) -> Res<FairSession> {
        let client =
            self.clients.get(index % self.clients.len().max(1)).ok_or_else(|| err("fair: no client"))?;
        Ok(FairSession { client: client.clone(), locks: HashMap::new() })
    }

    /// Run once per acquire script call (and once per release).
    fn attempt_command(&self) -> &'static str {
        "exists"
    }

    fn script_commands(&self) -> &'static [&'static str] {
        FAIR_SCRIPT_COMMANDS
    }

    fn warm_up(&self, name: &str) -> Res<()> {
        for client in &self.clients {
            FairSession { client: client.clone(), locks: HashMap::new() }.acquire(name)?.unlock()?;
        }
        Ok(())
    }
}

struct FairSession {
    client: Client,
    locks: HashMap<String, FairLock>,
}

impl Session for FairSession {
    type Held = FairLockGuard;

    fn acquire(&mut self, name: &str) -> Res<FairLockGuard> {
        if !self.locks.contains_key(name) {
            self.locks.insert(name.to_owned(), self.client.fair_lock(name)?);
        }
        let lock = self.locks.get(name).ok_or_else(|| err("fair: lock handle vanished"))?;
        lock.try_lock_for(ACQUIRE_LIMIT)?
            .ok_or_else(|| err(format!("fair: {name} not acquired within {ACQUIRE_LIMIT:?}")))
    }

    fn release(&mut self, guard: FairLockGuard) -> Res<()> {
        Ok(guard.unlock()?)
    }
}

/// One window's figures.
struct Run {
    fig: Figures,
    /// FIFO inversions (pairs), arrivals more than [`TOLERANCE_MS`] apart.
    inversions: f64,
    /// The same with no tolerance.
    inversions_raw: f64,
    publish: f64,
    attempts: f64,
}

/// Pairs served against their arrival order, among arrivals more than
/// `tolerance_ms` apart.
fn inversions(workers: &[Worker], tolerance_ms: f64) -> f64 {
    let mut served: Vec<(Instant, f64)> = Vec::new();
    let origin = workers.iter().flat_map(|w| w.acquired_at.first().copied()).min();
    let Some(origin) = origin else { return 0.0 };
    for w in workers {
        for (at, wait_ms) in w.acquired_at.iter().zip(&w.waits_ms) {
            let arrived_ms = at.saturating_duration_since(origin).as_secs_f64() * 1e3 - wait_ms;
            served.push((*at, arrived_ms));
        }
    }
    served.sort_by_key(|s| s.0);
    let mut count = 0u64;
    for (i, (_, early)) in served.iter().enumerate() {
        // A later-served acquisition that arrived clearly earlier.
        count += served[i + 1..].iter().filter(|(_, late)| *late + tolerance_ms < *early).count() as u64;
    }
    count as f64
}

fn window<I: LockImpl>(env: &Env, stats: &mut redis::Connection, imp: &I, shape: Shape, h: f64) -> Res<Run> {
    let key = env.key("fair");
    let counter = env.key("fair:counter");
    redis::cmd("DEL").arg(&key).arg(&counter).query::<()>(stats)?;
    imp.warm_up(&key)?;
    let (workers, (), d): (Vec<Worker>, (), Delta) =
        run_workers(env, stats, imp, shape, &[(&key, &counter)])?;
    let counted: Option<i64> = redis::cmd("GET").arg(&counter).query(stats)?;
    redis::cmd("DEL").arg(&counter).query::<()>(stats)?;
    let n = workers.iter().map(|w| w.waits_ms.len()).sum::<usize>() as f64;
    let lost = n - counted.unwrap_or(0) as f64;
    let fig = Figures::new(imp, &workers, &d, 1, h, lost, d.subscribes());
    Ok(Run {
        inversions: inversions(&workers, TOLERANCE_MS),
        inversions_raw: inversions(&workers, 0.0),
        publish: (d.calls("publish") + d.calls("spublish")) / n,
        // One EVALSHA per release; the rest are acquire attempts.
        attempts: d.calls("evalsha") / n - 1.0,
        fig,
    })
}

fn row(label: &str, runs: &[Run]) -> Vec<String> {
    vec![
        label.to_owned(),
        fmt(med(runs, |r| r.fig.rate), 0),
        fmt_ratio(med(runs, |r| r.fig.vs_ideal)),
        fmt(med(runs, |r| r.fig.hold_ms), 2),
        fmt(med(runs, |r| r.fig.handoff_us), 0),
        fmt(med(runs, |r| r.fig.p50_ms), 2),
        fmt(med(runs, |r| r.fig.p99_ms), 2),
        fmt(med(runs, |r| r.fig.max_ms), 2),
        format!("{} ({})", fmt(med(runs, |r| r.inversions), 0), fmt(med(runs, |r| r.inversions_raw), 0)),
        fmt(runs.iter().map(|r| r.fig.lost).sum(), 0),
        fmt(med(runs, |r| r.fig.rt), 2),
        fmt(med(runs, |r| r.attempts), 2),
        fmt(med(runs, |r| r.fig.subs), 3),
        fmt(med(runs, |r| r.publish), 2),
        fmt(med(runs, |r| r.fig.cpu_us), 0),
        fmt(med(runs, |r| r.fig.server_us), 0),
    ]
}

/// The FAIR workload: runs and prints its table.
pub(crate) fn fair(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    let clients = c.w2_threads;
    let shape = Shape { threads: clients, per_thread: c.w2_per_thread };
    let (mut fair_runs, mut lock_runs, mut ideal_runs) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=c.runs {
        eprintln!("FAIR run {run}/{}", c.runs);
        let h = handoff(env)?;
        let fair = Fair::new(env, clients)?;
        let f = window(env, stats, &fair, shape, h)?;
        drop(fair);
        let keyholder = Keyholder::new(env, clients, None)?;
        let k = window(env, stats, &keyholder, shape, h)?;
        drop(keyholder);
        ideal_runs.push(Run {
            fig: f.fig.ideal(h),
            inversions: f64::NAN,
            inversions_raw: f64::NAN,
            publish: f64::NAN,
            attempts: 1.0,
        });
        fair_runs.push(f);
        lock_runs.push(k);
    }
    print_table(
        &format!(
            "FAIR: {clients} clients of 1 thread each, 1 fair lock, {} acquisitions each, hold {:?} with a \
             GET-then-SET counter (targets: <= 3 round trips/acq, >= 0.9x ideal, 0 FIFO inversions)",
            c.w2_per_thread, c.hold
        ),
        &[
            "impl",
            "acq/s",
            "vs ideal",
            "hold ms",
            "handoff µs",
            "p50 wait ms",
            "p99 wait ms",
            "max wait ms",
            "FIFO inversions (raw)",
            "lost updates",
            "round trips/acq",
            "acquire attempts/acq",
            "(UN)SUBSCRIBE/acq",
            "PUBLISH/acq",
            "client CPU µs/acq",
            "Redis CPU µs/acq",
        ],
        &[
            row("minimal floor (ideal)", &ideal_runs),
            row("keyholder FairLock", &fair_runs),
            row("keyholder Lock (RLock), same shape", &lock_runs),
        ],
        &[format!(
            "ideal = 1 / (the fair lock's measured mean hold + one handoff), handoff = the minimal \
             floor's acquire+release pair; vs ideal is each run's own ratio. FIFO inversions: pairs of \
             acquisitions served in the opposite order of their arrival (when the worker called for the \
             lock), counting arrivals more than {TOLERANCE_MS} ms apart; in parentheses, with no \
             tolerance (arrivals microseconds apart may reach Redis in either order). Round trips: \
             top-level commands, excluding the counter's GET/SET (and {}). Acquire attempts: EVALSHA \
             per acquisition less the release's one. PUBLISH: messages sent by the scripts; the fair \
             lock's go to the head waiter's own channel only. Lost updates summed over runs; other \
             figures are medians over runs.",
            if c.audit { "counted by the slow log's audit" } else { "script-internal commands" }
        )],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn worker(index: usize, served: &[(u64, f64)], base: Instant) -> Worker {
        Worker {
            index,
            waits_ms: served.iter().map(|(_, wait)| *wait).collect(),
            acquired_at: served.iter().map(|(at, _)| base + Duration::from_millis(*at)).collect(),
            held: Duration::ZERO,
        }
    }

    #[test]
    fn inversions_count_pairs_served_against_their_arrival() {
        let base = Instant::now();
        // Worker 0 arrives at 10, served at 30; worker 1 arrives at 5,
        // served at 40: one inversion. Worker 2 arrives at 29.9, served at
        // 50: in order.
        let workers =
            [worker(0, &[(30, 20.0)], base), worker(1, &[(40, 35.0)], base), worker(2, &[(50, 20.1)], base)];
        assert_eq!(inversions(&workers, 0.2), 1.0);
        let fifo = [worker(0, &[(30, 25.0)], base), worker(1, &[(40, 30.0)], base)];
        assert_eq!(inversions(&fifo, 0.2), 0.0);
        // Arrivals 0.1 ms apart are not ordered with a 0.2 ms tolerance.
        let close = [worker(0, &[(30, 20.0)], base), worker(1, &[(40, 30.1)], base)];
        assert_eq!(inversions(&close, 0.2), 0.0);
        assert_eq!(inversions(&close, 0.0), 1.0);
    }
}
