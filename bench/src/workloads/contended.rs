//! One lock, many threads, back to back: the runner of W2 (threads in one
//! or a few clients) and W6 (many single-thread clients). Every thread takes
//! the lock, runs a deliberately non-atomic GET-then-SET of a counter padded
//! to the hold, and releases: a lost update means two holders at once.
//! `--cluster`'s W2 runs its window ([`run_workers`], over a lock per shard)
//! and reports its [`Figures`] in the same cells.

use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use crate::env::Env;
use crate::error::{Res, err};
use crate::lock_impl::{Baseline, Keyholder, LockImpl, MinimalFloor, Redisson, Session};
use crate::measure::{Counters, Delta, longest_streak, max_of, med, median, pct, sorted, sum_of};
use crate::report::{fmt, fmt_ratio, print_table};

use super::handoff::handoff;
use super::threads::join;

/// How many threads contend, and how often each acquires.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) threads: usize,
    pub(crate) per_thread: usize,
}

/// The figures of a contended window over all its locks at once (NaN where
/// they do not apply): those W2 and W6 and `--cluster`'s W2 all report.
#[derive(Clone, Copy)]
pub(crate) struct Figures {
    pub(crate) rate: f64,
    /// Its locks / (mean hold + one handoff).
    pub(crate) ideal: f64,
    pub(crate) vs_ideal: f64,
    pub(crate) hold_ms: f64,
    /// Mean time per acquisition (of each lock) not spent holding it, µs.
    pub(crate) handoff_us: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) lost: f64,
    pub(crate) rt: f64,
    /// Every command Redis ran per acquisition, top-level and inside
    /// scripts, but the counter's GET and SET and the bench's own.
    pub(crate) cmds: f64,
    pub(crate) attempts: f64,
    pub(crate) evalsha: f64,
    pub(crate) subs: f64,
    /// Top-level HEXISTS per acquisition (a queued thread checking a local
    /// holder after an unlock message), from the audit.
    pub(crate) hexists: f64,
    pub(crate) cpu_us: f64,
    pub(crate) server_us: f64,
}

impl Figures {
    /// The figures of `imp`'s window: its `workers` on `locks` locks at
    /// once, `d` its counters, `handoff` the minimal floor's pair time (seconds),
    /// `lost` the updates the counters lost, `subs` the subscription
    /// commands to count.
    pub(crate) fn new<I: LockImpl>(
        imp: &I,
        workers: &[Worker],
        d: &Delta,
        locks: usize,
        handoff: f64,
        lost: f64,
        subs: f64,
    ) -> Figures {
        let acquisitions: usize = workers.iter().map(|w| w.waits_ms.len()).sum();
        let n = acquisitions as f64;
        let held: Duration = workers.iter().map(|w| w.held).sum();
        let hold = held.as_secs_f64() / n;
        let waits = sorted(workers.iter().flat_map(|w| w.waits_ms.iter().copied()).collect());
        let rate = n / d.wall;
        let locks = locks as f64;
        let ideal = locks / (hold + handoff);
        let counter_ops = acquisitions as u64;
        Figures {
            rate,
            ideal,
            vs_ideal: rate / ideal,
            hold_ms: hold * 1e3,
            handoff_us: (locks / rate - hold) * 1e6,
            p50_ms: pct(&waits, 50.0),
            p99_ms: pct(&waits, 99.0),
            max_ms: pct(&waits, 100.0),
            lost,
            rt: d.round_trips(imp.script_commands(), counter_ops) / n,
            cmds: (d.commands_run() - 2.0 * counter_ops as f64).max(0.0) / n,
            attempts: d.attempts(imp.attempt_command(), counter_ops, acquisitions as u64) / n,
            evalsha: d.calls("evalsha") / n,
            subs: subs / n,
            hexists: d.top_calls("hexists") / n,
            cpu_us: d.client_cpu / n * 1e6,
            server_us: d.server_cpu / n * 1e6,
        }
    }

    /// The minimal floor's ideal row of a run: its locks / (hold + handoff) at the
    /// hold keyholder measured (these are keyholder's figures), with the
    /// floor's known costs (two script calls, one attempt) per acquisition.
    pub(crate) fn ideal(&self, handoff_s: f64) -> Figures {
        Figures {
            rate: self.ideal,
            ideal: self.ideal,
            vs_ideal: 1.0,
            hold_ms: self.hold_ms,
            handoff_us: handoff_s * 1e6,
            p50_ms: f64::NAN,
            p99_ms: f64::NAN,
            max_ms: f64::NAN,
            lost: f64::NAN,
            rt: 2.0,
            // Acquire: EVALSHA, EXISTS, HINCRBY, PEXPIRE; release: EVALSHA,
            // HEXISTS, HINCRBY, DEL, PUBLISH.
            cmds: 9.0,
            attempts: 1.0,
            evalsha: 2.0,
            subs: 0.0,
            hexists: 0.0,
            cpu_us: f64::NAN,
            server_us: f64::NAN,
        }
    }
}

/// One contended window of one lock: the shared figures, and who got it
/// when.
struct Contended {
    fig: Figures,
    /// Longest run of consecutive acquisitions by one thread.
    thread_streak: f64,
    /// Longest run of consecutive acquisitions by one client (keyholder's or
    /// Redisson's).
    client_streak: f64,
    /// Acquisitions by other threads during the longest wait.
    worst_others: f64,
    /// The runs of one client (one thread with one client) they formed.
    worst_runs: f64,
    handoffs: f64,
}

impl Contended {
    /// The floor's ideal row of a run (see [`Figures::ideal`]).
    fn ideal(keyholder: &Contended, handoff_s: f64) -> Contended {
        Contended {
            fig: keyholder.fig.ideal(handoff_s),
            thread_streak: f64::NAN,
            client_streak: f64::NAN,
            worst_others: f64::NAN,
            worst_runs: f64::NAN,
            handoffs: 0.0,
        }
    }
}

/// Runs one contended configuration (`shape` spread over `clients`
/// keyholder clients, and as many Redisson clients) as the minimal floor,
/// the baseline, keyholder and Redisson 4, and prints its table.
pub(crate) fn contended(
    env: &Env,
    stats: &mut redis::Connection,
    workload: &str,
    shape: Shape,
    clients: usize,
    title: &str,
) -> Res<()> {
    let c = &env.cfg;
    let (floor, baseline) = (MinimalFloor::new(env), Baseline::new(env));
    // A keyholder row per barging window (`--barging-window-ms`), where
    // clients queue for each other.
    let windows: Vec<Option<u64>> = if clients > 1 && !c.barging_windows_ms.is_empty() {
        c.barging_windows_ms.iter().map(|ms| Some(*ms)).collect()
    } else {
        vec![None]
    };
    let (mut ideal, mut handoffs, mut floor_loop, mut base, mut redisson_runs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut kh: Vec<Vec<Contended>> = windows.iter().map(|_| Vec::new()).collect();
    for run in 1..=c.runs {
        eprintln!("{workload} ({clients} client(s)) run {run}/{}", c.runs);
        let h = handoff(env)?;
        handoffs.push(h * 1e6);
        // The minimal floor never waits: one thread runs its raw scripts around the
        // same critical section. Nobody waits, so wait and streak figures
        // would only restate its pair latency.
        let alone = Shape { threads: 1, per_thread: (shape.per_thread * 2).max(10) };
        let f = run_contended(env, stats, &floor, alone, h, None)?;
        floor_loop.push(Contended {
            fig: Figures { p50_ms: f64::NAN, p99_ms: f64::NAN, max_ms: f64::NAN, ..f.fig },
            thread_streak: f64::NAN,
            worst_others: f64::NAN,
            worst_runs: f64::NAN,
            ..f
        });
        base.push(run_contended(env, stats, &baseline, shape, h, None)?);
        for (window, rows) in windows.iter().zip(kh.iter_mut()) {
            let barging = window.map(Duration::from_millis);
            let keyholder = Keyholder::with_barging_window(env, clients, barging)?;
            let k = run_contended(env, stats, &keyholder, shape, h, (clients > 1).then_some(clients))?;
            drop(keyholder);
            if ideal.len() < run {
                ideal.push(Contended::ideal(&k, h));
            }
            rows.push(k);
        }
        // Redisson 4 over as many clients as keyholder: a client's threads
        // share its pub/sub connection and its subscription to the lock.
        let redisson = Redisson::new(env, clients)?;
        redisson_runs.push(run_contended(env, stats, &redisson, shape, h, (clients > 1).then_some(clients))?);
        drop(redisson);
    }
    let mut rows = vec![
        contended_row("minimal floor (ideal)", &ideal),
        contended_row("minimal floor loop, 1 thread, same hold", &floor_loop),
        contended_row("baseline", &base),
    ];
    for (window, runs) in windows.iter().zip(&kh) {
        let name = window.map_or("keyholder".to_owned(), |ms| format!("keyholder, barging {ms} ms"));
        rows.push(contended_row(&name, runs));
    }
    rows.push(contended_row("Redisson 4", &redisson_runs));
    print_table(
        title,
        &[
            "impl",
            "acq/s",
            "vs ideal",
            "hold ms",
            "handoff µs",
            "p50 wait ms",
            "p99 wait ms",
            "max wait ms (worst run)",
            "during worst wait: others' acqs / runs",
            "longest streak thread / client",
            "lost updates",
            "round trips/acq",
            "cmds/acq",
            "acquire attempts/acq",
            "EVALSHA/acq",
            "(UN)SUBSCRIBE/acq",
            "HEXISTS/acq",
            "hand-offs/acq",
            "client CPU µs/acq",
            "Redis CPU µs/acq",
        ],
        &rows,
        &[
            format!(
                "ideal = 1 / (measured mean hold + one handoff); handoff = minimal floor acquire+release pair, \
                 median {} µs; an implementation's handoff = 1/(acq/s) - mean hold. vs ideal is each \
                 run's own ratio. Longest streak: most consecutive acquisitions by one thread / one \
                 client (keyholder's or Redisson's), worst run (a streak is barging). During worst wait: in the worst run, the \
                 acquisitions other threads made while the longest-waiting thread waited, and the runs \
                 of consecutive acquisitions by one client (by one thread, with one client or the \
                 baseline) they formed. Lost updates: summed over runs. \
                 Round trips are top-level commands{}, excluding the counter's GET/SET; cmds/acq: \
                 every command Redis ran per acquisition, top-level and inside scripts (INFO commandstats \
                 calls), less the counter's GET/SET and the bench's own INFO/SLOWLOG/CONFIG; Redis CPU \
                 µs/acq: the server's used_cpu_user+sys (INFO cpu) over the window per acquisition, the \
                 counter's GET/SET and the slow-log audit included alike in every row. \
                 HEXISTS: keyholder's own top-level HEXISTS (a queued thread checking a local holder \
                 after an unlock message), counted by the audit. Acquire attempts: keyholder's acquire.lua \
                 calls (its EVALSHA count less one release or hand-off script per acquisition), the baseline's SET NX calls; hand-offs: keyholder's HDEL \
                 count: handoff.lua calls that passed the lock straight to a local thread, and grant \
                 entries taken off the queue when clients queue (about one per acquisition then). Client CPU includes the \
                 counter's GET/SET, and has a 10 ms tick resolution. The minimal floor loop is measured: \
                 one thread runs the minimal acquire script, the same critical section and the minimal \
                 release, with no second thread to wake: what a pair costs when its round trips follow a 1 ms pause. \
                 Redisson 4: what Java Redisson 4 RLock users run, on the wire, over as many clients as \
                 keyholder's row: tryLock(wait): the acquire script by EVALSHA (EXISTS/HEXISTS, then \
                 HINCRBY+PEXPIRE, else PTTL; lease 30 s, owner <client uuid>:<thread>); when refused, one \
                 SUBSCRIBE per lock per client shared by its threads (reference-counted; UNSUBSCRIBE when \
                 its last waiting thread is done), then loop (try again; wait on the client's per-lock \
                 semaphore at most the PTTL), a 0 on the channel releasing one permit; release: the 3.24+ \
                 unlock script with its latch (GET latch, HEXISTS, HINCRBY -1, DEL, PUBLISH 0, SET latch \
                 PX 20000) by EVALSHA, then the DEL of the latch that Redisson sends without waiting for \
                 it (counted as a round trip). A connection per thread, a pub/sub connection per client; \
                 no watchdog renewal (its first comes 10 s after an acquisition) and no WAIT (replicas \
                 only).",
                fmt(median(handoffs), 0),
                if c.audit {
                    " counted by the server's slow log (every command logged, script-internal ones \
                     told apart by their peer)"
                } else {
                    " (INFO commandstats less script-internal commands; --no-audit: top-level HEXISTS \
                     uncounted)"
                }
            ),
            if clients == 1 {
                String::new()
            } else {
                "The baseline has no client object: each of its threads has its own connection in both \
                 configurations. Redisson 4's client i % clients holds thread i, as keyholder's: each \
                 client its own uuid, pub/sub connection, subscriptions and semaphores."
                    .to_owned()
            },
        ],
    );
    Ok(())
}

/// A contended worker's start line: it reports ready, then waits for go.
struct StartLine {
    ready: crossbeam_channel::Sender<()>,
    go: crossbeam_channel::Receiver<()>,
}

/// What one worker did.
pub(crate) struct Worker {
    pub(crate) index: usize,
    pub(crate) waits_ms: Vec<f64>,
    pub(crate) acquired_at: Vec<Instant>,
    pub(crate) held: Duration,
}

/// One thread of a contended window: `shape.per_thread` acquisitions of
/// `key`, each holding it for the critical section.
fn worker<I: LockImpl>(
    env: &Env,
    imp: &I,
    shape: Shape,
    index: usize,
    key: &str,
    counter: &str,
    start: StartLine,
) -> Res<Worker> {
    let StartLine { ready, go } = start;
    let setup = env.connect_for(counter).and_then(|counter_con| Ok((counter_con, imp.session(index)?)));
    let _ = ready.send(());
    // The start signal is the sender's drop; a timeout means the bench gave up.
    if let Err(RecvTimeoutError::Timeout) = go.recv_timeout(Duration::from_secs(120)) {
        return Err(err("contended worker was never started"));
    }
    let (mut counter_con, mut session) = setup?;
    let n = shape.per_thread;
    let mut out = Worker {
        index,
        waits_ms: Vec::with_capacity(n),
        acquired_at: Vec::with_capacity(n),
        held: Duration::ZERO,
    };
    for _ in 0..n {
        let t = Instant::now();
        let held = session.acquire(key)?;
        out.acquired_at.push(Instant::now());
        out.waits_ms.push(t.elapsed().as_secs_f64() * 1e3);
        out.held += critical_section(&mut counter_con, counter, env.cfg.hold)?;
        session.release(held)?;
    }
    Ok(out)
}

/// Runs a contended window: `shape.threads` workers on each of `locks`
/// (a name and its counter; thread `i` on lock `i / shape.threads`), all
/// released from one start line, with `stats`' counters (audited when
/// audits are on) from the start until the last worker is joined.
pub(crate) fn run_workers<I: LockImpl, S: Counters>(
    env: &Env,
    stats: &mut S,
    imp: &I,
    shape: Shape,
    locks: &[(&str, &str)],
) -> Res<(Vec<Worker>, S::Parts, Delta)> {
    let threads = shape.threads * locks.len();
    let (ready_tx, ready_rx) = crossbeam_channel::unbounded::<()>();
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
    thread::scope(|scope| -> Res<_> {
        let mut handles = Vec::new();
        for i in 0..threads {
            let (key, counter) = locks[i / shape.threads];
            let start = StartLine { ready: ready_tx.clone(), go: go_rx.clone() };
            handles.push(scope.spawn(move || worker(env, imp, shape, i, key, counter, start)));
        }
        for _ in 0..threads {
            ready_rx
                .recv_timeout(Duration::from_secs(60))
                .map_err(|_| err("contended workers did not start"))?;
        }
        let audited = stats.audit_start(env)?;
        let a = stats.snap()?;
        drop(go_tx);
        let mut workers = Vec::new();
        let mut failure = None;
        for h in handles {
            match join(h) {
                Ok(w) => workers.push(w),
                Err(e) => failure = Some(e),
            }
        }
        let b = stats.snap()?;
        let top = stats.audit_end(env, audited)?;
        match failure {
            Some(e) => Err(e),
            None => {
                let (parts, d) = stats.between(&a, &b, top);
                Ok((workers, parts, d))
            }
        }
    })
}

/// The critical section: a deliberately non-atomic GET-then-SET of the
/// counter, padded to `hold`. Returns how long the lock was held for it.
fn critical_section(con: &mut redis::Connection, counter: &str, hold: Duration) -> Res<Duration> {
    let start = Instant::now();
    let value: Option<i64> = redis::cmd("GET").arg(counter).query(con)?;
    redis::cmd("SET").arg(counter).arg(value.unwrap_or(0) + 1).query::<()>(con)?;
    if let Some(rest) = hold.checked_sub(start.elapsed()) {
        thread::sleep(rest);
    }
    Ok(start.elapsed())
}

/// One contended window of `imp`. `clients`: thread `i` belongs to client
/// `i % clients`, for the per-client streaks (`None`: each thread is its
/// own).
fn run_contended<I: LockImpl>(
    env: &Env,
    stats: &mut redis::Connection,
    imp: &I,
    shape: Shape,
    handoff: f64,
    clients: Option<usize>,
) -> Res<Contended> {
    let key = env.key("w2");
    let counter = env.key("w2:counter");
    redis::cmd("DEL").arg(&counter).query::<()>(stats)?;
    let (workers, (), d) = run_workers(env, stats, imp, shape, &[(&key, &counter)])?;
    let counted: Option<i64> = redis::cmd("GET").arg(&counter).query(stats)?;
    redis::cmd("DEL").arg(&counter).query::<()>(stats)?;
    let acquisitions = workers.iter().map(|w| w.waits_ms.len()).sum::<usize>();
    let lost = acquisitions as f64 - counted.unwrap_or(0) as f64;
    let fig = Figures::new(imp, &workers, &d, 1, handoff, lost, d.subscribes());
    let mut order: Vec<(Instant, usize)> =
        workers.iter().flat_map(|w| w.acquired_at.iter().map(move |at| (*at, w.index))).collect();
    order.sort();
    let thread_streak = longest_streak(order.iter().map(|(_, i)| *i));
    // The longest wait, and what happened during it: acquisitions by other
    // threads, and the runs of consecutive acquisitions by one client (or,
    // with one client or the baseline, by one thread) they formed.
    let worst = workers
        .iter()
        .flat_map(|w| w.acquired_at.iter().zip(&w.waits_ms).map(move |(at, ms)| (*at, *ms, w.index)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let (worst_others, worst_runs) = worst.map_or((f64::NAN, f64::NAN), |(at, ms, me)| {
        let asked = at.checked_sub(Duration::from_secs_f64(ms / 1e3)).unwrap_or(at);
        let during: Vec<usize> =
            order.iter().filter(|(t, i)| *t > asked && *t < at && *i != me).map(|(_, i)| *i).collect();
        let owner = |i: usize| clients.map_or(i, |c| i % c);
        let runs = during.windows(2).filter(|w| owner(w[0]) != owner(w[1])).count()
            + usize::from(!during.is_empty());
        (during.len() as f64, runs as f64)
    });
    let client_streak = clients.map_or(f64::NAN, |c| longest_streak(order.iter().map(|(_, i)| i % c)));
    Ok(Contended {
        fig,
        thread_streak,
        client_streak,
        worst_others,
        worst_runs,
        handoffs: d.calls("hdel") / acquisitions as f64,
    })
}

/// The cells of the [`Figures`] every contended table shows, in its column
/// groups: medians over runs, lost updates summed.
pub(crate) struct Cells {
    /// acq/s, vs ideal, hold, handoff, p50 and p99 waits.
    pub(crate) waits: [String; 6],
    /// The median max wait.
    pub(crate) max: String,
    /// Lost updates, round trips, commands run, attempts, EVALSHA,
    /// subscriptions, HEXISTS.
    pub(crate) costs: [String; 7],
    /// Client and Redis CPU.
    pub(crate) cpu: [String; 2],
}

/// The cells of `runs`' figures.
pub(crate) fn cells(runs: &[Figures]) -> Cells {
    Cells {
        waits: [
            fmt(med(runs, |r| r.rate), 0),
            fmt_ratio(med(runs, |r| r.vs_ideal)),
            fmt(med(runs, |r| r.hold_ms), 3),
            fmt(med(runs, |r| r.handoff_us), 0),
            fmt(med(runs, |r| r.p50_ms), 2),
            fmt(med(runs, |r| r.p99_ms), 2),
        ],
        max: fmt(med(runs, |r| r.max_ms), 1),
        costs: [
            fmt(sum_of(runs, |r| r.lost), 0),
            fmt(med(runs, |r| r.rt), 2),
            fmt(med(runs, |r| r.cmds), 2),
            fmt(med(runs, |r| r.attempts), 2),
            fmt(med(runs, |r| r.evalsha), 2),
            fmt(med(runs, |r| r.subs), 2),
            fmt(med(runs, |r| r.hexists), 2),
        ],
        cpu: [fmt(med(runs, |r| r.cpu_us), 0), fmt(med(runs, |r| r.server_us), 0)],
    }
}

/// A table row: medians over runs, the worst run's extremes, sums of lost
/// updates.
fn contended_row(name: &str, runs: &[Contended]) -> Vec<String> {
    // The run whose wait was the longest.
    let worst =
        runs.iter().filter(|r| !r.fig.max_ms.is_nan()).max_by(|a, b| a.fig.max_ms.total_cmp(&b.fig.max_ms));
    let Cells { waits, max, costs, cpu } = cells(&runs.iter().map(|r| r.fig).collect::<Vec<_>>());
    let mut row = vec![name.to_owned()];
    row.extend(waits);
    row.push(format!("{max} ({})", fmt(max_of(runs, |r| r.fig.max_ms), 1)));
    row.push(
        worst.map_or("n/a".to_owned(), |r| format!("{} / {}", fmt(r.worst_others, 0), fmt(r.worst_runs, 0))),
    );
    row.push(format!(
        "{} / {}",
        fmt(max_of(runs, |r| r.thread_streak), 0),
        fmt(max_of(runs, |r| r.client_streak), 0)
    ));
    row.extend(costs);
    row.push(fmt(med(runs, |r| r.handoffs), 2));
    row.extend(cpu);
    row
}
