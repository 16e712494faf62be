//! W7: thread-per-request. One process's threads each take and release
//! their own lock names, with no contention: the two floors (the minimal
//! scripts and keyholder's own) and the baseline with a connection per
//! thread, keyholder with one client and its defaults (at most 16 command
//! connections, shared by its threads), and Redisson 4 with one client (a
//! connection per thread, and its pub/sub connection). Beside them, what
//! Redis allows when the network costs nothing (issue 38's moonshot):
//! the minimal scripts' pairs in 32-deep pipelines over a few connections,
//! as `redis-benchmark -P 32` would send them.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use crate::env::Env;
use crate::error::Res;
use crate::lock_impl::{Baseline, Keyholder, LockImpl, MinimalFloor, Redisson, ScriptFloor, Session};
use crate::measure::{Delta, connected_clients, median, snap};
use crate::report::{fmt, fmt_ratios, print_table};

use super::threads::join;

/// One W7 window: pairs per second, Redis connections in use, round trips
/// and Redis CPU µs per pair.
struct PerRequest {
    rate: f64,
    connections: f64,
    rt: f64,
    server_us: f64,
    /// Redis's execution time of the pair's commands, µs (no I/O).
    command_us: f64,
}

pub(crate) fn w7(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    let (minimal, scripts, baseline) = (MinimalFloor::new(env), ScriptFloor::new(env), Baseline::new(env));
    // What the server counts with none of W7's connections open: each
    // window waits for the previous one's to close before it counts its own.
    let idle = settle(stats, f64::INFINITY)?;
    let mut rows = Vec::new();
    for &threads in &c.w7_threads {
        // minimal floor, keyholder scripts, baseline, keyholder, Redisson
        // 4; with --aa the minimal floor again.
        let mut runs: [Vec<PerRequest>; 6] = Default::default();
        let mut ceilings = Vec::new();
        let count = if c.aa { 6 } else { 5 };
        for run in 1..=c.runs {
            eprintln!("W7 ({threads} threads) run {run}/{}", c.runs);
            // Each run starts with another of them, so that none is always
            // measured right after the same one.
            for turn in 0..count {
                let which = (run + turn) % count;
                settle(stats, idle)?;
                let window = match which {
                    0 | 5 => per_request(env, stats, &minimal, threads, None)?,
                    1 => per_request(env, stats, &scripts, threads, None)?,
                    2 => per_request(env, stats, &baseline, threads, None)?,
                    4 => {
                        // Its pub/sub connection opens with the client.
                        let before = connected_clients(stats)?;
                        let redisson = Redisson::new(env, 1)?;
                        per_request(env, stats, &redisson, threads, Some(before))?
                    }
                    _ => {
                        // The client opens a connection as it is built:
                        // counted too.
                        let before = connected_clients(stats)?;
                        let keyholder = Keyholder::new(env, 1, None)?;
                        per_request(env, stats, &keyholder, threads, Some(before))?
                    }
                };
                runs[which].push(window);
            }
            settle(stats, idle)?;
            ceilings.push(pipelined_ceiling(env)?);
        }
        let [minimal_runs, script_runs, base_runs, kh_runs, redisson_runs, again_runs] = &runs;
        let rate = |runs: &[PerRequest]| fmt(median(runs.iter().map(|r| r.rate).collect()), 0);
        let each = |f: fn(&PerRequest) -> f64, decimals: usize| {
            runs[..5]
                .iter()
                .map(|r| fmt(median(r.iter().map(f).collect()), decimals))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        // Median of per-run ratios: the runs of one round are index-aligned.
        let ratio = |of: &[PerRequest], over: &[PerRequest]| {
            fmt_ratios(of.iter().zip(over).map(|(a, o)| a.rate / o.rate).collect())
        };
        rows.push(vec![
            threads.to_string(),
            rate(minimal_runs),
            rate(script_runs),
            rate(base_runs),
            rate(kh_runs),
            rate(redisson_runs),
            ratio(kh_runs, minimal_runs),
            ratio(script_runs, minimal_runs),
            ratio(kh_runs, base_runs),
            ratio(kh_runs, redisson_runs),
            ratio(redisson_runs, minimal_runs),
            fmt(median(ceilings.clone()), 0),
            fmt_ratios(kh_runs.iter().zip(&ceilings).map(|(k, p)| k.rate / p).collect()),
            if c.aa { ratio(again_runs, minimal_runs) } else { "-".to_owned() },
            each(|r| r.connections, 0),
            each(|r| r.server_us, 1),
            each(|r| r.command_us, 1),
            fmt(median(kh_runs.iter().map(|r| r.rt).collect()), 2),
            fmt(median(redisson_runs.iter().map(|r| r.rt).collect()), 2),
        ]);
    }
    print_table(
        &format!(
            "W7: thread-per-request, 1 client, each thread on its own lock names, {} acquire+release pairs in \
             all (a quarter at 1 thread) (targets: keyholder >= 0.9x the minimal floor at 1, 8, 32, 128 and \
             512 threads with default settings and at most 16 connections per client, in every run; stretch: \
             >= the baseline from 32 threads)",
            c.w7_pairs
        ),
        &[
            "threads",
            "minimal floor pairs/s",
            "keyholder scripts pairs/s",
            "baseline pairs/s",
            "keyholder pairs/s",
            "Redisson 4 pairs/s",
            "keyholder vs minimal floor",
            "keyholder scripts vs minimal floor",
            "keyholder vs baseline",
            "keyholder vs Redisson 4",
            "Redisson 4 vs minimal floor",
            "pipelined ceiling pairs/s",
            "keyholder vs pipelined ceiling",
            "minimal floor again vs minimal floor (A/A, --aa)",
            "Redis connections minimal / scripts / baseline / keyholder / Redisson 4",
            "Redis CPU µs/pair minimal / scripts / baseline / keyholder / Redisson 4",
            "Redis command µs/pair minimal / scripts / baseline / keyholder / Redisson 4",
            "keyholder round trips/pair",
            "Redisson 4 round trips/pair",
        ],
        &rows,
        &["The minimal floor runs the minimal Redisson-semantics scripts of SPEC section 2 raw, the \
           keyholder scripts floor keyholder's own acquire.lua and release.lua raw (its gap to the minimal \
           floor is the cost of their extra work), and the baseline SET NX PX and its compare-and-delete, \
           each thread on a connection of its own; keyholder is one client with default settings (at most \
           16 command connections, shared by its threads); Redisson 4 is one client running Redisson 4's \
           RLock protocol on the wire (its acquire script, its 3.24+ unlock script with the unlock latch and \
           the latch's DEL it sends after it without waiting), a connection per thread (what its pool \
           effectively gives) and its pub/sub connection, counted. The five take turns, each run starting with \
           another (with --aa, the minimal floor again takes a turn too: identical code, so its ratio to the \
           minimal floor is the noise of one run). Connections: connected_clients added while every thread still holds what it opened, \
           counting keyholder's pub/sub connection; each window starts once the connections before it \
           have closed. Rates are medians over runs, ratios medians of per-run \
           ratios, in brackets the worst run's; round trips from INFO commandstats; Redis CPU is the server's own (INFO cpu) over the \
           window, per pair; Redis command time is the part of it the commands and scripts themselves \
           take (INFO commandstats usec of the top-level commands: no network I/O, no event loop)."
            .to_owned(),
          format!(
              "Pipelined ceiling: what Redis allows when the network costs nothing (issue 38's moonshot: \
               keyholder at 512 threads >= 0.75x it): the minimal scripts' acquire+release pairs, each on a \
               name of its own, sent by EVALSHA in pipelines of {CEILING_DEPTH} pairs over {CEILING_CONNECTIONS} \
               connections (a thread each), as redis-benchmark -P {CEILING_DEPTH} sends them, {} pairs in \
               all, once per run after the rotation; the ratio is per run.",
              c.w7_pairs * CEILING_PAIRS_PER_PAIR
          )],
    );
    Ok(())
}

/// Waits, at most 5 s, until the server's `connected_clients` is at most
/// `idle` and the same in two reads 10 ms apart (the connections a window
/// or an earlier workload dropped are closed on the server too, so that a
/// window does not count their closing against its own); returns the last
/// count. Past the 5 s it goes on with what it has.
fn settle(stats: &mut redis::Connection, idle: f64) -> Res<f64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = connected_clients(stats)?;
    loop {
        thread::sleep(Duration::from_millis(10));
        let now = connected_clients(stats)?;
        if (now == last && now <= idle) || Instant::now() >= deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// W7 once: `threads` threads of `imp`, each taking and releasing its own
/// four lock names (`w7_pairs` pairs in all, a quarter of them with one
/// thread, whose pairs take five times as long), as request threads of a
/// server do. Connections are counted from `before`, or from the start of
/// the window.
fn per_request<I: LockImpl>(
    env: &Env,
    stats: &mut redis::Connection,
    imp: &I,
    threads: usize,
    before: Option<f64>,
) -> Res<PerRequest> {
    let pairs = if threads == 1 { env.cfg.w7_pairs / 4 } else { env.cfg.w7_pairs };
    let per_thread = (pairs / threads).max(5);
    let before = match before {
        Some(before) => before,
        None => connected_clients(stats)?,
    };
    // Four meeting points: all set up; go (the window starts); all done (the
    // window ends, their connections still open and counted); counted (they
    // may close).
    let ready = Barrier::new(threads + 1);
    let go = Barrier::new(threads + 1);
    let finished = Barrier::new(threads + 1);
    let counted = Barrier::new(threads + 1);
    let (d, connections) = thread::scope(|scope| -> Res<(Delta, f64)> {
        let mut handles = Vec::new();
        for t in 0..threads {
            let (ready, go, finished, counted) = (&ready, &go, &finished, &counted);
            let builder = thread::Builder::new().stack_size(env.cfg.w3_stack);
            let handle = builder.spawn_scoped(scope, move || -> Res<()> {
                let keys: Vec<String> = (0..4).map(|i| env.key(&format!("w7:{t}:{i}"))).collect();
                let session = imp.session(t);
                ready.wait();
                go.wait();
                let outcome = session.and_then(|mut session| {
                    for i in 0..per_thread {
                        session.pair(&keys[i % keys.len()])?;
                    }
                    Ok(session)
                });
                finished.wait();
                counted.wait();
                outcome.map(drop)
            })?;
            handles.push(handle);
        }
        ready.wait();
        let a = snap(stats)?;
        go.wait();
        finished.wait();
        let b = snap(stats)?;
        let connections = connected_clients(stats)? - before;
        counted.wait();
        for h in handles {
            join(h)?;
        }
        Ok((Delta::between(&a, &b), connections))
    })?;
    let n = (per_thread * threads) as f64;
    Ok(PerRequest {
        rate: n / d.wall,
        connections,
        rt: d.round_trips(imp.script_commands(), 0) / n,
        server_us: d.server_cpu / n * 1e6,
        command_us: d.command_usec(imp.script_commands()) / n,
    })
}

/// Pairs per pipeline of the pipelined ceiling (issue 38: 32-deep).
const CEILING_DEPTH: usize = 32;
/// Its connections, a thread each: enough to keep Redis's one thread busy.
const CEILING_CONNECTIONS: usize = 8;
/// Its pairs in all, per pair of the other rows' windows (200 000 with
/// the full configuration's 32 000).
const CEILING_PAIRS_PER_PAIR: usize = 6;

/// The pipelined ceiling's pairs per second: [`CEILING_CONNECTIONS`]
/// threads, each sending the minimal acquire and release of
/// [`CEILING_DEPTH`] names in one pipeline, checking every reply (nil, then
/// 1: each pair took and released its lock), until [`CEILING_PAIRS_PER_PAIR`] times
/// the other rows' pairs have run.
fn pipelined_ceiling(env: &Env) -> Res<f64> {
    let pairs = (env.cfg.w7_pairs * CEILING_PAIRS_PER_PAIR).max(CEILING_DEPTH * CEILING_CONNECTIONS);
    let per_connection = pairs / CEILING_CONNECTIONS;
    let go = Barrier::new(CEILING_CONNECTIONS + 1);
    let elapsed = thread::scope(|scope| -> Res<Duration> {
        let mut handles = Vec::new();
        for c in 0..CEILING_CONNECTIONS {
            let go = &go;
            handles.push(scope.spawn(move || -> Res<()> {
                let prepared = prepare_ceiling(env, c);
                go.wait();
                let (mut con, acquire, release, keys) = prepared?;
                let owner = format!("bench-ceiling:{c}");
                let mut pipe = redis::pipe();
                for key in &keys {
                    pipe.cmd("EVALSHA")
                        .arg(&acquire)
                        .arg(1)
                        .arg(key)
                        .arg(crate::lock_impl::LEASE_MS)
                        .arg(&owner);
                    pipe.cmd("EVALSHA").arg(&release).arg(2).arg(key).arg(crate::env::channel_of(key));
                    pipe.arg("0").arg(crate::lock_impl::LEASE_MS).arg(&owner);
                }
                for _ in 0..per_connection / CEILING_DEPTH {
                    let replies: Vec<redis::Value> = pipe.query(&mut con)?;
                    for pair in replies.chunks(2) {
                        if !matches!(pair, [redis::Value::Nil, redis::Value::Int(1)]) {
                            return Err(crate::error::err(format!(
                                "pipelined ceiling: a pair replied {pair:?}"
                            )));
                        }
                    }
                }
                Ok(())
            }));
        }
        go.wait();
        let start = Instant::now();
        for handle in handles {
            join(handle)?;
        }
        Ok(start.elapsed())
    })?;
    let pairs = (per_connection / CEILING_DEPTH * CEILING_DEPTH * CEILING_CONNECTIONS) as f64;
    Ok(pairs / elapsed.as_secs_f64())
}

/// One ceiling connection, the minimal scripts loaded on it (their SHA1s),
/// and its [`CEILING_DEPTH`] names.
fn prepare_ceiling(env: &Env, c: usize) -> Res<(redis::Connection, String, String, Vec<String>)> {
    let mut con = env.connect()?;
    let acquire: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(crate::env::MINIMAL_ACQUIRE_LUA).query(&mut con)?;
    let release: String =
        redis::cmd("SCRIPT").arg("LOAD").arg(crate::env::MINIMAL_RELEASE_LUA).query(&mut con)?;
    let keys = (0..CEILING_DEPTH).map(|i| env.key(&format!("w7p:{c}:{i}"))).collect();
    Ok((con, acquire, release, keys))
}
