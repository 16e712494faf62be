//! W1: uncontended acquire+release, one thread, one lock.

use crate::env::Env;
use crate::error::Res;
use crate::lock_impl::{Baseline, Floor, Keyholder, LockImpl, Session};
use crate::report::print_table;

use super::loops::{Loop, loop_row, measure_loop};

pub(crate) fn w1(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let n = env.cfg.w1_pairs;
    let key = env.key("w1");
    let (floor, baseline, keyholder) = (Floor::new(env), Baseline::new(env), Keyholder::new(env, 1, None)?);
    let mut sessions = (floor.session(1)?, baseline.session(1)?, keyholder.session(0)?);
    let (mut floor_runs, mut base_runs, mut kh_runs) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=env.cfg.runs {
        eprintln!("W1 run {run}/{}", env.cfg.runs);
        let mut f = pairs(stats, n, &floor, &mut sessions.0, &key)?;
        let mut b = pairs(stats, n, &baseline, &mut sessions.1, &key)?;
        let mut k = pairs(stats, n, &keyholder, &mut sessions.2, &key)?;
        b.vs_floor = b.rate / f.rate;
        k.vs_floor = k.rate / f.rate;
        f.vs_floor = 1.0;
        floor_runs.push(f);
        base_runs.push(b);
        kh_runs.push(k);
    }
    drop(sessions);
    drop(keyholder);
    print_table(
        &format!("W1: uncontended acquire+release, 1 thread, {n} pairs (target: keyholder >= 0.9x floor)"),
        &[
            "impl",
            "pairs/s",
            "vs floor",
            "p50 µs",
            "p99 µs",
            "round trips/pair",
            "EVALSHA/pair",
            "client CPU µs/pair",
            "Redis CPU µs/pair",
        ],
        &[loop_row("floor", &floor_runs), loop_row("baseline", &base_runs), loop_row("keyholder", &kh_runs)],
        &["vs floor = median over runs of (pairs/s ÷ the same run's floor pairs/s). Round trips counted \
           by the server (INFO commandstats). Client CPU is the whole process's, read with 10 ms tick \
           resolution; Redis CPU is the server's own (INFO cpu)."
            .to_owned()],
    );
    Ok(())
}

/// `n` acquire+release pairs of `key` on one session.
fn pairs<I: LockImpl>(
    stats: &mut redis::Connection,
    n: usize,
    imp: &I,
    session: &mut I::Session,
    key: &str,
) -> Res<Loop> {
    measure_loop(stats, n, imp.script_commands(), || session.pair(key))
}
