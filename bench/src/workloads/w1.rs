//! W1: uncontended acquire+release, one thread, one lock. Its runs serve
//! `--cluster`'s W1 too, over a lock per shard.

use crate::env::Env;
use crate::error::Res;
use crate::lock_impl::{Baseline, Floor, Keyholder, LockImpl, Session};
use crate::measure::Counters;
use crate::report::print_table;

use super::loops::{Loop, loop_header, loop_row, measure_loop};

pub(crate) fn w1(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let n = env.cfg.w1_pairs;
    let key = env.key("w1");
    let all = w1_runs(env, stats, "W1", 0, |_| key.as_str())?;
    print_table(
        &format!("W1: uncontended acquire+release, 1 thread, {n} pairs (target: keyholder >= 0.9x floor)"),
        &loop_header("pair", "pairs/s", None),
        &all.iter().map(|r| loop_row(r.label, &r.runs, None)).collect::<Vec<_>>(),
        &["vs floor = median over runs of (pairs/s ÷ the same run's floor pairs/s). Round trips counted \
           by the server (INFO commandstats). Client CPU is the whole process's, read with 10 ms tick \
           resolution; Redis CPU is the server's own (INFO cpu)."
            .to_owned()],
    );
    Ok(())
}

/// One implementation's W1 runs.
pub(crate) struct Runs<P> {
    pub(crate) label: &'static str,
    /// The commands its scripts run.
    pub(crate) nested: &'static [&'static str],
    pub(crate) runs: Vec<Loop<P>>,
}

/// W1's runs: in each, `w1_pairs` acquire+release pairs (pair `i` on
/// `name(i)`, after a warm-up of at least `at_least`) by the floor, the
/// baseline and keyholder in turn, each on one session, and each rate ÷ the
/// run's floor rate. `progress` names the runs on stderr.
pub(crate) fn w1_runs<'a, S: Counters>(
    env: &Env,
    stats: &mut S,
    progress: &str,
    at_least: usize,
    name: impl Fn(usize) -> &'a str,
) -> Res<[Runs<S::Parts>; 3]> {
    let n = env.cfg.w1_pairs;
    let (floor, baseline, keyholder) = (Floor::new(env), Baseline::new(env), Keyholder::new(env, 1, None)?);
    let mut sessions = (floor.session(1)?, baseline.session(1)?, keyholder.session(0)?);
    let (mut floor_runs, mut base_runs, mut kh_runs) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=env.cfg.runs {
        eprintln!("{progress} run {run}/{}", env.cfg.runs);
        let mut f = measure_loop(stats, n, at_least, floor.script_commands(), |i| sessions.0.pair(name(i)))?;
        let mut b =
            measure_loop(stats, n, at_least, baseline.script_commands(), |i| sessions.1.pair(name(i)))?;
        let mut k =
            measure_loop(stats, n, at_least, keyholder.script_commands(), |i| sessions.2.pair(name(i)))?;
        b.vs_floor = b.rate / f.rate;
        k.vs_floor = k.rate / f.rate;
        f.vs_floor = 1.0;
        floor_runs.push(f);
        base_runs.push(b);
        kh_runs.push(k);
    }
    drop(sessions);
    let nested = (floor.script_commands(), baseline.script_commands(), keyholder.script_commands());
    drop(keyholder);
    Ok([
        Runs { label: "floor", nested: nested.0, runs: floor_runs },
        Runs { label: "baseline", nested: nested.1, runs: base_runs },
        Runs { label: "keyholder", nested: nested.2, runs: kh_runs },
    ])
}
