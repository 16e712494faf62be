//! The keyholder benchmark: the workloads of SPEC section 4 (W1 to W7), each
//! measured in one process against one Redis server as the minimal floor
//! (the minimal Redisson-semantics scripts of SPEC section 2, raw: every
//! "vs floor" ratio and target is against it), the keyholder scripts floor
//! (keyholder's own scripts, raw, where the gap between the two floors is
//! shown), the baseline (hand-rolled `SET NX PX`) and keyholder. See
//! `lock_impl` for them, `workloads` for what each
//! workload measures, and `docs/performance.md` for the figures. `FAIR`
//! (issue 9) runs W2's multi-process shape on a fair lock, against the
//! reentrant lock and the ideal (`workloads/fair.rs`).
//!
//! ```text
//! cargo run --release -p keyholder-bench                     # full run, about 140 s on 2 cores
//! cargo run --release -p keyholder-bench -- --quick          # tiny run, a few seconds
//! cargo run --release -p keyholder-bench -- --runs 5 --only W1,W2
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release -p keyholder-bench
//! cargo run --release -p keyholder-bench -- --cluster        # W1, W2 on a private Redis Cluster
//! ```
//!
//! Without `REDIS_URL` a private `redis-server` (or `$REDIS_SERVER_BIN`) is
//! started on a free loopback port and stopped at exit. Every figure is the
//! median over `--runs` runs; within a run the implementations take turns on
//! the same server.
//!
//! Redis round trips are counted by the server: the delta of `INFO
//! commandstats` over the measured window, less the commands that run
//! inside the scripts, the counter's GET and SET (their number is known
//! exactly) and the bench's own INFO calls. keyholder also sends one of
//! those commands itself: a queued thread asks `HEXISTS` whether a local
//! holder still holds the lock after an unlock message. So in the contended
//! workloads (W2, W3) keyholder's windows are also *audited* with the slow
//! log (`measure::audit`); W2 audits the floor loop and the baseline too, so
//! that all pay the same slow-log cost; `--no-audit` turns it off. Client
//! CPU is the process's utime+stime from `/proc/self/stat` (10 ms ticks);
//! Redis CPU is `INFO cpu` (used_cpu_user + used_cpu_sys).
//!
//! `--cluster` (see `workloads::cluster`) runs W1 and W2 on a private Redis
//! Cluster of three primaries and three replicas instead, over one lock
//! name per shard, and counts every primary's commands and redirections.

mod config;
mod env;
mod error;
mod lock_impl;
mod measure;
mod report;
mod workloads;

use std::process::ExitCode;
use std::time::Instant;

use config::{Cfg, USAGE};
use env::{Env, PRELOADED, Redis, connect, raw_client};
use error::{Res, err};
use measure::loadavg;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match Cfg::from_args(&args) {
        Ok(Some(cfg)) => cfg,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The whole run: the server, the shared environment, the workloads; the
/// server's slow-log length is left as it was found.
fn run(cfg: Cfg) -> Res<()> {
    let started = Instant::now();
    if cfg.cluster {
        workloads::run_cluster(cfg)?;
        println!(
            "\nTotal bench time {:.1} s; load average at the end: {}.",
            started.elapsed().as_secs_f64(),
            loadavg()
        );
        return Ok(());
    }
    let redis = Redis::start()?;
    let url = redis.url();
    let mut stats = connect(&raw_client(&url)?)?;
    let config_get = |name: &str, stats: &mut redis::Connection| -> Res<String> {
        let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(stats)?;
        pair.get(1).cloned().ok_or_else(|| err(format!("CONFIG GET {name} replied {pair:?}")))
    };
    let slowlog_threshold = config_get("slowlog-log-slower-than", &mut stats)?;
    let slowlog_max_len = config_get("slowlog-max-len", &mut stats)?;
    let env = Env::new(cfg, url, slowlog_threshold)?;
    for source in PRELOADED {
        redis::cmd("SCRIPT").arg("LOAD").arg(source).query::<String>(&mut stats)?;
    }
    let outcome = workloads::run_all(&env, &redis, &mut stats);
    // Leave a shared server's slow log as it was.
    let _ =
        redis::cmd("CONFIG").arg("SET").arg("slowlog-max-len").arg(&slowlog_max_len).query::<()>(&mut stats);
    outcome?;
    println!(
        "\nTotal bench time {:.1} s; load average at the end: {}.",
        started.elapsed().as_secs_f64(),
        loadavg()
    );
    Ok(())
}
