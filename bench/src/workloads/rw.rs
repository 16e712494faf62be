//! RW: the read-write lock (issue 9). Eight reader threads of one client,
//! each looping acquire, 1 ms hold, release, for a fixed window:
//!
//! 1. through a plain [`Lock`](keyholder::Lock) (the baseline: one holder
//!    at a time), then through the read side of a
//!    [`ReadWriteLock`](keyholder::ReadWriteLock): reader throughput, and
//!    its ratio to the plain lock's (target at least 6x);
//! 2. the read-write lock again while a writer on another client arrives
//!    every 10 ms (a fixed schedule) and takes the write lock for 1 ms: the
//!    writer's wait from its call to acquisition (target: worst at most
//!    50 ms), and what the readers still get done. How late the writer
//!    thread itself made its calls (the machine's scheduling, not the lock)
//!    is reported apart.
//!
//! Both run on the same server in the same run; every figure is the median
//! over `--runs` runs, the writer's worst wait the worst over all runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use keyholder::Client;
use uuid::Uuid;

use crate::env::Env;
use crate::error::{Res, err};
use crate::measure::{max_of, med, pct, sorted};
use crate::report::{fmt, fmt_ratio, print_table};

/// Reader threads.
const READERS: usize = 8;
/// The critical section of readers and the writer.
const HOLD: Duration = Duration::from_millis(1);
/// The writer's arrival period.
const WRITER_EVERY: Duration = Duration::from_millis(10);

/// One run's figures.
struct Run {
    plain_rate: f64,
    read_rate: f64,
    mixed_read_rate: f64,
    writes: f64,
    wait_p50_ms: f64,
    wait_p99_ms: f64,
    wait_max_ms: f64,
    /// The latest the writer thread called after its scheduled arrival.
    late_max_ms: f64,
    /// Against readers that follow Redisson's rule: their rate, the
    /// writes made, the worst wait of those, and whether the writer was
    /// still waiting when the window closed.
    java_read_rate: f64,
    java_writes: f64,
    java_wait_max_ms: f64,
    java_starved: bool,
}

pub(crate) fn rw(env: &Env, _stats: &mut redis::Connection) -> Res<()> {
    let window = if env.cfg.quick { Duration::from_millis(400) } else { Duration::from_secs(3) };
    let mut runs = Vec::new();
    for run in 1..=env.cfg.runs {
        eprintln!("RW run {run}/{}", env.cfg.runs);
        let readers = Client::builder(env.url.clone()).build()?;
        let plain_name = env.key(&format!("rw-plain-{run}"));
        let plain = readers.lock(&plain_name)?;
        let plain_rate = loop_readers(window, move || {
            let guard = plain.lock()?;
            thread::sleep(HOLD);
            guard.unlock()?;
            Ok(())
        })?;
        let rw_name = env.key(&format!("rw-{run}"));
        let read = readers.read_write_lock(&rw_name)?.read();
        let read_rate = loop_readers(window, {
            let read = read.clone();
            move || {
                let guard = read.lock()?;
                thread::sleep(HOLD);
                guard.unlock()?;
                Ok(())
            }
        })?;
        let mixed = with_writer(env, &rw_name, window, move || {
            let guard = read.lock()?;
            thread::sleep(HOLD);
            guard.unlock()?;
            Ok(())
        })?;
        // The same writer against readers that follow Redisson's rule (a
        // Java service's readers): they ignore waiting writers.
        let java_name = env.key(&format!("rw-java-{run}"));
        let java = with_writer(env, &java_name, window, redisson_reader(env, &java_name)?)?;
        let mixed_read_rate = mixed.read_rate;
        let late_max_ms = mixed.late_max_ms.max(java.late_max_ms);
        let waits = mixed.waits;
        let writes = waits.len() as f64;
        let waits = sorted(waits);
        runs.push(Run {
            plain_rate,
            read_rate,
            mixed_read_rate,
            writes,
            wait_p50_ms: pct(&waits, 50.0),
            wait_p99_ms: pct(&waits, 99.0),
            wait_max_ms: waits.last().copied().unwrap_or(f64::NAN),
            late_max_ms,
            java_read_rate: java.read_rate,
            java_writes: java.waits.len() as f64,
            java_wait_max_ms: java.waits.iter().copied().fold(f64::NAN, f64::max),
            java_starved: java.starved,
        });
    }
    let plain = med(&runs, |r| r.plain_rate);
    let read = med(&runs, |r| r.read_rate);
    let worst = max_of(&runs, |r| r.wait_max_ms);
    print_table(
        &format!(
            "RW: read-write lock, {READERS} reader threads (1 client), {} ms hold, {} s windows",
            HOLD.as_millis(),
            fmt(window.as_secs_f64(), 1)
        ),
        &[
            "configuration",
            "reader acquisitions/s",
            "vs plain lock",
            "writes",
            "writer wait p50 ms",
            "p99 ms",
            "max ms",
        ],
        &[
            vec![
                "plain Lock (baseline)".into(),
                fmt(plain, 0),
                "1.00x".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
            vec![
                "ReadWriteLock, readers only".into(),
                fmt(read, 0),
                fmt_ratio(read / plain),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
            vec![
                format!("ReadWriteLock, + a writer every {} ms", WRITER_EVERY.as_millis()),
                fmt(med(&runs, |r| r.mixed_read_rate), 0),
                fmt_ratio(med(&runs, |r| r.mixed_read_rate) / plain),
                fmt(med(&runs, |r| r.writes), 0),
                fmt(med(&runs, |r| r.wait_p50_ms), 2),
                fmt(med(&runs, |r| r.wait_p99_ms), 2),
                fmt(worst, 2),
            ],
            vec![
                format!("Redisson-rule readers, + the writer every {} ms", WRITER_EVERY.as_millis()),
                fmt(med(&runs, |r| r.java_read_rate), 0),
                fmt_ratio(med(&runs, |r| r.java_read_rate) / plain),
                fmt(med(&runs, |r| r.java_writes), 0),
                "-".into(),
                "-".into(),
                if runs.iter().any(|r| r.java_starved) {
                    format!("> {} (starved)", fmt(window.as_secs_f64() * 1e3, 0))
                } else {
                    fmt(max_of(&runs, |r| r.java_wait_max_ms), 2)
                },
            ],
        ],
        &[
            format!(
                "targets: readers at least 6x the plain lock ({}); the writer's worst wait at most 50 ms ({}).",
                if read / plain >= 6.0 { "met" } else { "NOT met" },
                if worst <= 50.0 { "met" } else { "NOT met" }
            ),
            "Redisson-rule readers: the same 8 threads on raw connections running the read scripts without \
             the waiting-writers key (as a Java service's readers do), retrying every 1 ms when refused; the \
             writer is keyholder's. It shows what writer preference buys: without it the writer waits until \
             the readers stop."
                .to_owned(),
            format!(
                "writer wait: from its lock() call to acquisition; the writer's client is not the readers'. \
                 The writer thread called up to {} ms after its scheduled arrivals (the machine's scheduling; \
                 arrivals missed while it waited or held are skipped).",
                fmt(max_of(&runs, |r| r.late_max_ms), 1)
            ),
        ],
    );
    Ok(())
}

/// Runs `body` in a loop on [`READERS`] threads for `window`; returns
/// iterations per second over all threads.
fn loop_readers(window: Duration, body: impl Fn() -> Res<()> + Send + Sync + 'static) -> Res<f64> {
    let body = Arc::new(body);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + window;
    let threads: Vec<_> = (0..READERS)
        .map(|_| {
            let (body, done) = (Arc::clone(&body), Arc::clone(&done));
            thread::spawn(move || -> Res<()> {
                while Instant::now() < deadline {
                    body()?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread.join().map_err(|_| err("an RW reader panicked"))??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

/// What a writer arriving every [`WRITER_EVERY`] saw while readers ran.
struct Mixed {
    read_rate: f64,
    /// Waits of the writes made, in ms.
    waits: Vec<f64>,
    late_max_ms: f64,
    /// The writer was still waiting when the window closed.
    starved: bool,
}

/// Runs `reader` on [`READERS`] threads for `window` while a writer on a
/// client of its own takes the write lock of `name` every [`WRITER_EVERY`]
/// for [`HOLD`], waiting at most until the window closes.
fn with_writer(
    env: &Env,
    name: &str,
    window: Duration,
    reader: impl Fn() -> Res<()> + Send + Sync + 'static,
) -> Res<Mixed> {
    let writer = Client::builder(env.url.clone()).build()?;
    let write = writer.read_write_lock(name)?.write();
    let stop = Arc::new(AtomicBool::new(false));
    let ends = Instant::now() + window;
    let writer_thread = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || -> Res<(Vec<f64>, f64, bool)> {
            let mut waits = Vec::new();
            let mut late_max: f64 = 0.0;
            let mut next = Instant::now() + WRITER_EVERY;
            while !stop.load(Ordering::Acquire) && next < ends {
                let now = Instant::now();
                if now < next {
                    thread::sleep(next - now);
                }
                let called = Instant::now();
                late_max = late_max.max(called.saturating_duration_since(next).as_secs_f64() * 1e3);
                let Some(guard) = write.try_lock_until(ends)? else {
                    return Ok((waits, late_max, true));
                };
                waits.push(called.elapsed().as_secs_f64() * 1e3);
                thread::sleep(HOLD);
                guard.unlock()?;
                next += WRITER_EVERY;
                while next < Instant::now() {
                    // An arrival missed while the writer waited or held:
                    // skipped, not made up in a burst.
                    next += WRITER_EVERY;
                }
            }
            Ok((waits, late_max, false))
        })
    };
    let read_rate = loop_readers(window, reader);
    stop.store(true, Ordering::Release);
    let (waits, late_max_ms, starved) = writer_thread.join().map_err(|_| err("the RW writer panicked"))??;
    Ok(Mixed { read_rate: read_rate?, waits, late_max_ms, starved })
}

static READ_ACQUIRE: &str = concat!(
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/rwlock/read_acquire.lua")
);
static READ_RELEASE: &str = concat!(
    include_str!("../../../lua/common/latch.lua"),
    include_str!("../../../lua/common/kinds.lua"),
    include_str!("../../../lua/rwlock/read_release.lua")
);

/// A reader body that follows Redisson's rule, as a Java service's reader
/// does: the read scripts with Redisson's keys only (no waiting-writers
/// key), on a raw connection per thread, retrying every 1 ms when refused.
fn redisson_reader(env: &Env, name: &str) -> Res<impl Fn() -> Res<()> + Send + Sync + 'static> {
    let client_id = Uuid::new_v4().to_string();
    let name = name.to_owned();
    let raw = env.raw.clone();
    let (acquire, release) = (redis::Script::new(READ_ACQUIRE), redis::Script::new(READ_RELEASE));
    let next_thread = Arc::new(AtomicU64::new(1));
    Ok(move || -> Res<()> {
        thread_local! {
            static CONN: std::cell::RefCell<Option<(redis::Connection, String)>> = const { std::cell::RefCell::new(None) };
        }
        CONN.with(|cell| -> Res<()> {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                let owner = format!("{client_id}:{}", next_thread.fetch_add(1, Ordering::Relaxed));
                *slot = Some((crate::env::connect(&raw)?, owner));
            }
            let Some((con, owner)) = slot.as_mut() else { return Err(err("no connection")) };
            let timeouts = format!("{{{name}}}:{owner}:rwlock_timeout");
            loop {
                let reply: redis::Value = acquire
                    .key(&name)
                    .key(&timeouts)
                    .arg(30_000)
                    .arg(owner.as_str())
                    .arg(format!("{owner}:write"))
                    .invoke(con)?;
                if reply == redis::Value::Nil {
                    break;
                }
                thread::sleep(Duration::from_millis(1));
            }
            thread::sleep(HOLD);
            let _: redis::Value = release
                .key(&name)
                .key(format!("redisson_rwlock:{{{name}}}"))
                .key(&timeouts)
                .key(format!("{{{name}}}"))
                .arg("0")
                .arg(owner.as_str())
                .invoke(con)?;
            Ok(())
        })
    })
}
