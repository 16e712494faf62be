//! W1: uncontended acquire+release, one thread, one lock. Its runs serve
//! `--cluster`'s W1 too, over a lock per shard.

use crate::env::Env;
use crate::error::{Res, err};
use crate::lock_impl::{Baseline, Keyholder, LockImpl, MinimalFloor, Redisson, ScriptFloor, Session};
use crate::measure::Counters;
use crate::report::{fmt, print_table};

use super::loops::{Loop, commands_and_cpu, floor_gap, loop_header, loop_row, measure_loop};

pub(crate) fn w1(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let n = env.cfg.w1_pairs;
    let key = env.key("w1");
    let all = w1_runs(env, stats, "W1", 0, |_| key.as_str())?;
    let (minimal, scripts, keyholder, redisson) = (&all[0], &all[1], &all[3], &all[4]);
    print_table(
        &format!(
            "W1: uncontended acquire+release, 1 thread, {n} pairs (target: keyholder >= 0.95x the minimal \
             floor)"
        ),
        &loop_header("pair", "pairs/s", None),
        &all.iter().map(|r| loop_row(r.label, &r.runs, None)).collect::<Vec<_>>(),
        &[
            W1_NOTE.to_owned(),
            floor_gap("pair", &minimal.runs, &scripts.runs, &keyholder.runs),
            redisson_note(&redisson.runs),
        ],
    );
    Ok(())
}

/// The note on the Redisson 4 row: what it runs, and its work per pair.
pub(crate) fn redisson_note<P>(runs: &[Loop<P>]) -> String {
    let (commands, redis_cpu, command_us) = commands_and_cpu(runs);
    format!(
        "Redisson 4: what Java Redisson 4 RLock users run, on the wire: the acquire script (EXISTS, \
         HINCRBY, PEXPIRE) by EVALSHA, then the 3.24+ unlock script with its latch (GET latch, HEXISTS, \
         HINCRBY -1, DEL, PUBLISH, SET latch PX) by EVALSHA and the DEL of the latch Redisson sends after \
         it without waiting for the reply (a round trip in the counts, not in the latency); owner <client \
         uuid>:<thread>, lease 30 s, its own connection. Commands Redis ran per pair: {}; Redis CPU {} µs \
         per pair, of which commands and scripts {} µs.",
        fmt(commands, 2),
        fmt(redis_cpu, 1),
        fmt(command_us, 1),
    )
}

/// What W1's columns are.
const W1_NOTE: &str = "vs floor = median over runs of (pairs/s ÷ the same run's minimal floor \
     pairs/s), in brackets the worst run's. minimal floor: the minimal Redisson-semantics scripts of SPEC section 2, raw; keyholder \
     scripts: keyholder's own acquire.lua and release.lua, raw, the same way; the five (with Redisson 4) take turns, each run \
     starting with another (with --aa, the minimal floor again takes a turn too: its ratio is one run's \
     noise). Round trips counted by the server (INFO commandstats). Client CPU is the whole \
     process's, read with 10 ms tick resolution; Redis CPU is the server's own (INFO cpu).";

/// One implementation's W1 runs.
pub(crate) struct Runs<P> {
    pub(crate) label: &'static str,
    /// The commands its scripts run.
    pub(crate) nested: &'static [&'static str],
    pub(crate) runs: Vec<Loop<P>>,
}

/// W1's runs: in each, `w1_pairs` acquire+release pairs (pair `i` on
/// `name(i)`, after a warm-up of at least `at_least`) by the minimal floor,
/// the keyholder scripts floor, the baseline, keyholder and Redisson 4, and with `--aa`
/// the minimal floor again, each on one session, in turn (each run starting
/// with the next of them, so that none is always measured right after the
/// same one), and each rate ÷ the run's minimal-floor rate. `progress`
/// names the runs on stderr. In that order.
pub(crate) fn w1_runs<'a, S: Counters>(
    env: &Env,
    stats: &mut S,
    progress: &str,
    at_least: usize,
    name: impl Fn(usize) -> &'a str,
) -> Res<Vec<Runs<S::Parts>>> {
    let n = env.cfg.w1_pairs;
    let (minimal, scripts, baseline, keyholder) =
        (MinimalFloor::new(env), ScriptFloor::new(env), Baseline::new(env), Keyholder::new(env, 1, None)?);
    let redisson = Redisson::new(env, 1)?;
    let mut sessions = (
        minimal.session(1)?,
        scripts.session(1)?,
        baseline.session(1)?,
        keyholder.session(0)?,
        redisson.session(1)?,
    );
    let mut again = if env.cfg.aa { Some(minimal.session(2)?) } else { None };
    let nested = [
        minimal.script_commands(),
        scripts.script_commands(),
        baseline.script_commands(),
        keyholder.script_commands(),
        redisson.script_commands(),
        minimal.script_commands(),
    ];
    let count = if again.is_some() { 6 } else { 5 };
    let mut runs: [Vec<Loop<S::Parts>>; 6] = Default::default();
    for run in 1..=env.cfg.runs {
        eprintln!("{progress} run {run}/{}", env.cfg.runs);
        let mut this: [Option<Loop<S::Parts>>; 6] = Default::default();
        for turn in 0..count {
            let which = (run + turn) % count;
            let nested = nested[which];
            this[which] = Some(match (which, again.as_mut()) {
                (0, _) => measure_loop(stats, n, at_least, nested, |i| sessions.0.pair(name(i)))?,
                (1, _) => measure_loop(stats, n, at_least, nested, |i| sessions.1.pair(name(i)))?,
                (2, _) => measure_loop(stats, n, at_least, nested, |i| sessions.2.pair(name(i)))?,
                (3, _) => measure_loop(stats, n, at_least, nested, |i| sessions.3.pair(name(i)))?,
                (4, _) => measure_loop(stats, n, at_least, nested, |i| sessions.4.pair(name(i)))?,
                (_, Some(again)) => measure_loop(stats, n, at_least, nested, |i| again.pair(name(i)))?,
                (_, None) => return Err(err("W1: a sixth turn without --aa")),
            });
        }
        let Some(floor) = this[0].as_ref().map(|m| m.rate) else {
            return Err(err("W1: the minimal floor's turn was skipped"));
        };
        for (all, one) in runs.iter_mut().zip(this).take(count) {
            let Some(mut one) = one else {
                return Err(err("W1: an implementation's turn was skipped"));
            };
            one.vs_floor = one.rate / floor;
            all.push(one);
        }
    }
    drop(sessions);
    drop(again);
    drop(keyholder);
    drop(redisson);
    let labels = [
        "minimal floor",
        "keyholder scripts",
        "baseline",
        "keyholder",
        "Redisson 4",
        "minimal floor again (A/A)",
    ];
    Ok(runs
        .into_iter()
        .zip(labels.into_iter().zip(nested))
        .take(count)
        .map(|(runs, (label, nested))| Runs { label, nested, runs })
        .collect())
}
