//! The report's header: the machine, the server, the two physical units
//! every figure rests on (a loopback round trip and a thread wake-up), the
//! build and the configuration. The `--cluster` header is built from the
//! same lines.

use std::thread;
use std::time::{Duration, Instant};

use crate::config::Cfg;
use crate::env::{Env, Redis};
use crate::error::{Res, err};
use crate::measure::{info, info_field, loadavg, pct, sorted, us};
use crate::report::fmt;

/// Prints the header.
pub(crate) fn header(env: &Env, redis: &Redis, stats: &mut redis::Connection) -> Res<()> {
    let version = redis_version(stats)?;
    // Loopback round trip: the physical unit of every figure below.
    let rtts = ping_rtts(stats)?;
    let wakes = thread_wake_latency()?;
    let c = &env.cfg;
    println!("# keyholder benchmark\n");
    println!("{}", machine_line());
    println!("- redis: {version}, {}", redis.describe());
    println!("- loopback PING round trip: {} (1000 pings)", p50_p99_us(&rtts));
    println!(
        "- waking a blocked thread (channel ping-pong, one way): {} (1000 round trips)",
        p50_p99_us(&wakes)
    );
    println!("{}", build_line());
    let workloads = format!(
        "W1 {} pairs; \
         W2 {} threads x {} acquisitions, hold {:?}, 1 client and {} clients; W3 {} threads over {} \
         and over {} clients (baseline {} threads), idle window {:?}, stacks {} KiB; W4 {} locks from {} \
         threads, watchdog timeout {:?} ({} periods held); W5 {} iterations; W6 {:?} clients of 1 thread, \
         {} acquisitions in all; handoff = minimal floor pair mean over {} pairs",
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
    println!("{}", configuration_line(c, &workloads));
    Ok(())
}

/// The header's machine line: CPUs, their model, the load average now.
pub(crate) fn machine_line() -> String {
    let cpus = thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_else(|_| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| info_field(&c.replace('\t', ""), "model name"))
        .unwrap_or_else(|| "unknown".into());
    format!("- machine: {cpus} CPUs, {model}; load average at start {}", loadavg())
}

/// The server's `redis_version`.
pub(crate) fn redis_version(con: &mut redis::Connection) -> Res<String> {
    let server = info(con, "server")?;
    Ok(info_field(&server, "redis_version").unwrap_or_else(|| "?".into()))
}

/// 1000 PING round trips on `con`, in µs, sorted.
pub(crate) fn ping_rtts(con: &mut redis::Connection) -> Res<Vec<f64>> {
    let mut rtts = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        redis::cmd("PING").query::<String>(con)?;
        rtts.push(us(t.elapsed()));
    }
    Ok(sorted(rtts))
}

/// `p50 … µs, p99 … µs` of sorted samples in µs.
pub(crate) fn p50_p99_us(sorted: &[f64]) -> String {
    format!("p50 {} µs, p99 {} µs", fmt(pct(sorted, 50.0), 0), fmt(pct(sorted, 99.0), 0))
}

/// The header's configuration line: `--quick` or not, the runs, then
/// `workloads`, each workload's settings.
pub(crate) fn configuration_line(c: &Cfg, workloads: &str) -> String {
    format!(
        "- configuration{}: {} run(s) per workload, figures are medians over runs; {workloads}",
        if c.quick { " (--quick)" } else { "" },
        c.runs,
    )
}

/// The header's build line: release or debug, and keyholder's version.
pub(crate) fn build_line() -> String {
    format!(
        "- build: {}; keyholder {}",
        if cfg!(debug_assertions) { "DEBUG (figures meaningless; use --release)" } else { "release" },
        keyholder_version()
    )
}

/// keyholder's version, from its manifest (this crate's own is not it).
fn keyholder_version() -> &'static str {
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
