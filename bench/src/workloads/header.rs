//! The report's header: the machine, the server, the two physical units
//! every figure rests on (a loopback round trip and a thread wake-up), the
//! build and the configuration.

use std::thread;
use std::time::{Duration, Instant};

use crate::env::{Env, Redis};
use crate::error::{Res, err};
use crate::measure::{info, info_field, loadavg, pct, sorted, us};
use crate::report::fmt;

/// Prints the header.
pub(crate) fn header(env: &Env, redis: &Redis, stats: &mut redis::Connection) -> Res<()> {
    let cpus = thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_else(|_| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| info_field(&c.replace('\t', ""), "model name"))
        .unwrap_or_else(|| "unknown".into());
    let server = info(stats, "server")?;
    let version = info_field(&server, "redis_version").unwrap_or_else(|| "?".into());
    // Loopback round trip: the physical unit of every figure below.
    let mut rtts = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        redis::cmd("PING").query::<String>(stats)?;
        rtts.push(us(t.elapsed()));
    }
    let rtts = sorted(rtts);
    let wakes = thread_wake_latency()?;
    let c = &env.cfg;
    println!("# keyholder benchmark\n");
    println!("- machine: {cpus} CPUs, {model}; load average at start {}", loadavg());
    println!("- redis: {version}, {}", redis.describe());
    println!(
        "- loopback PING round trip: p50 {} µs, p99 {} µs (1000 pings)",
        fmt(pct(&rtts, 50.0), 0),
        fmt(pct(&rtts, 99.0), 0)
    );
    println!(
        "- waking a blocked thread (channel ping-pong, one way): p50 {} µs, p99 {} µs (1000 round trips)",
        fmt(pct(&wakes, 50.0), 0),
        fmt(pct(&wakes, 99.0), 0)
    );
    println!(
        "- build: {}; keyholder {}",
        if cfg!(debug_assertions) { "DEBUG (figures meaningless; use --release)" } else { "release" },
        keyholder_version()
    );
    println!(
        "- configuration{}: {} run(s) per workload, figures are medians over runs; W1 {} pairs; \
         W2 {} threads x {} acquisitions, hold {:?}, 1 client and {} clients; W3 {} threads over {} \
         and over {} clients (baseline {} threads), idle window {:?}, stacks {} KiB; W4 {} locks from {} \
         threads, watchdog timeout {:?} ({} periods held); W5 {} iterations; W6 {:?} clients of 1 thread, \
         {} acquisitions in all; handoff = floor pair mean over {} pairs",
        if c.quick { " (--quick)" } else { "" },
        c.runs,
        c.w1_pairs,
        c.w2_threads,
        c.w2_per_thread,
        c.hold,
        c.w2_clients,
        c.w3_threads,
        c.w3_clients,
        c.w3_many_clients,
        c.w3_baseline_threads,
        c.w3_idle,
        c.w3_stack / 1024,
        c.w4_locks,
        c.w4_threads,
        c.w4_watchdog,
        c.w4_periods,
        c.w5_iters,
        c.w6_clients,
        c.w6_acquisitions,
        c.handoff_pairs,
    );
    Ok(())
}

/// keyholder's version, from its manifest (this crate's own is not it).
pub(crate) fn keyholder_version() -> &'static str {
    const MANIFEST: &str = include_str!("../../../Cargo.toml");
    MANIFEST
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or("?")
}

/// One-way latency of waking a thread blocked on a channel, in µs: the cost
/// every local handoff between threads pays on top of the Redis round trips.
fn thread_wake_latency() -> Res<Vec<f64>> {
    let (ping_tx, ping_rx) = crossbeam_channel::bounded::<()>(0);
    let (pong_tx, pong_rx) = crossbeam_channel::bounded::<()>(0);
    thread::scope(|scope| -> Res<Vec<f64>> {
        scope.spawn(move || {
            while ping_rx.recv().is_ok() {
                if pong_tx.send(()).is_err() {
                    return;
                }
            }
        });
        let mut wakes = Vec::with_capacity(1000);
        for _ in 0..1000 {
            let t = Instant::now();
            ping_tx.send(()).map_err(|_| err("ping-pong thread gone"))?;
            pong_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("ping-pong thread silent"))?;
            wakes.push(us(t.elapsed()) / 2.0);
        }
        drop(ping_tx);
        Ok(sorted(wakes))
    })
}
