//! The single-thread loops of W1 and W5 (and of `--cluster`'s W1): one
//! operation repeated, timed one by one, with the server's counters (or
//! every primary's) over the whole loop; and the note on the gap between
//! the two floors that their tables print.

use std::time::Instant;

use crate::error::Res;
use crate::measure::{Counters, med, median, pct, sorted, us};
use crate::report::{fmt, fmt_ratio, fmt_ratios};

/// One measured single-thread loop; `parts`: what the counters show beyond
/// their sum (each primary's share on a cluster).
pub(crate) struct Loop<P = ()> {
    pub(crate) rate: f64,
    p50: f64,
    p99: f64,
    rt: f64,
    evalsha: f64,
    cpu_us: f64,
    /// Redis CPU per operation, µs.
    pub(crate) server_us: f64,
    /// Redis's execution time of the operation's commands, µs (no I/O).
    pub(crate) command_us: f64,
    /// Commands Redis ran per operation, top-level and inside scripts.
    pub(crate) commands: f64,
    /// Rate ÷ the same run's minimal-floor rate.
    pub(crate) vs_floor: f64,
    pub(crate) parts: P,
}

/// Runs `op(i)` for `i` in `0..n` after a warm-up (scripts loaded,
/// connections open) of `n.clamp(10, 100)` operations, or `at_least` if
/// more; `nested` are the commands the implementation's scripts run.
pub(crate) fn measure_loop<S: Counters>(
    stats: &mut S,
    n: usize,
    at_least: usize,
    nested: &[&str],
    mut op: impl FnMut(usize) -> Res<()>,
) -> Res<Loop<S::Parts>> {
    for i in 0..n.clamp(10, 100).max(at_least) {
        op(i)?;
    }
    let mut lat = Vec::with_capacity(n);
    let a = stats.snap()?;
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        op(i)?;
        lat.push(us(t.elapsed()));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let b = stats.snap()?;
    let (parts, d) = stats.between(&a, &b, S::Audit::default());
    let lat = sorted(lat);
    let n = n as f64;
    Ok(Loop {
        rate: n / elapsed,
        p50: pct(&lat, 50.0),
        p99: pct(&lat, 99.0),
        rt: d.round_trips(nested, 0) / n,
        evalsha: d.calls("evalsha") / n,
        cpu_us: d.client_cpu / n * 1e6,
        server_us: d.server_cpu / n * 1e6,
        command_us: d.command_usec(nested) / n,
        commands: d.commands_run() / n,
        vs_floor: f64::NAN,
        parts,
    })
}

/// The columns of W1's and W5's tables, after the label.
pub(crate) const LOOP_COLUMNS: usize = 8;

/// The header of a table of [`loop_row`]s: `per`, what one operation is
/// (`pair`), `rate` its rate (`pairs/s`), `extra` the extra column's.
pub(crate) fn loop_header(per: &str, rate: &str, extra: Option<&str>) -> Vec<String> {
    let mut header = vec![
        "impl".to_owned(),
        rate.to_owned(),
        "vs floor".to_owned(),
        "p50 µs".to_owned(),
        "p99 µs".to_owned(),
        format!("round trips/{per}"),
        format!("EVALSHA/{per}"),
    ];
    header.extend(extra.map(str::to_owned));
    header.extend([format!("client CPU µs/{per}"), format!("Redis CPU µs/{per}")]);
    header
}

/// A table row: medians over runs; `extra`, a column after EVALSHA (the
/// cluster's redirections).
pub(crate) fn loop_row<P>(name: &str, runs: &[Loop<P>], extra: Option<String>) -> Vec<String> {
    let mut row = vec![
        name.to_owned(),
        fmt(med(runs, |r| r.rate), 0),
        fmt_ratios(runs.iter().map(|r| r.vs_floor).collect()),
        fmt(med(runs, |r| r.p50), 0),
        fmt(med(runs, |r| r.p99), 0),
        fmt(med(runs, |r| r.rt), 2),
        fmt(med(runs, |r| r.evalsha), 2),
    ];
    row.extend(extra);
    row.extend([fmt(med(runs, |r| r.cpu_us), 1), fmt(med(runs, |r| r.server_us), 1)]);
    row
}

/// The note under a loop table on the gap between its two floors (the cost
/// of keyholder's scripts' extra work) and on Redis's own time per `per`
/// (`pair`, `iteration`): medians over runs; `keyholder`'s Redis time set
/// against the minimal floor's too.
pub(crate) fn floor_gap<P>(
    per: &str,
    minimal: &[Loop<P>],
    scripts: &[Loop<P>],
    keyholder: &[Loop<P>],
) -> String {
    let us_per = |runs: &[Loop<P>]| 1e6 / med(runs, |r| r.rate);
    let redis = |runs: &[Loop<P>]| med(runs, |r| r.server_us);
    let gap_redis = median(scripts.iter().zip(minimal).map(|(s, m)| s.server_us - m.server_us).collect());
    let kh_redis = median(keyholder.iter().zip(minimal).map(|(k, m)| k.server_us - m.server_us).collect());
    let command = |runs: &[Loop<P>]| med(runs, |r| r.command_us);
    let gap_command = median(scripts.iter().zip(minimal).map(|(s, m)| s.command_us - m.command_us).collect());
    let kh_command =
        median(keyholder.iter().zip(minimal).map(|(k, m)| k.command_us - m.command_us).collect());
    format!(
        "Floor gap (the cost of the extra work in keyholder's scripts): the keyholder scripts floor runs \
         at {} of the minimal floor ({} µs per {per} against the minimal floor's {} µs). Redis CPU per \
         {per}: minimal floor {} µs, keyholder scripts {} µs ({} µs), keyholder {} µs ({} µs against the \
         minimal floor); differences are medians of per-run differences. Of that, Redis's execution \
         time of the commands and scripts themselves (INFO commandstats usec: no network I/O, no event \
         loop) per {per}: minimal floor {} µs, keyholder scripts {} µs ({} µs), keyholder {} µs ({} µs). \
         Commands Redis ran per {per}, top-level and inside scripts: minimal floor {}, keyholder scripts {}, \
         keyholder {}.",
        fmt_ratio(med(scripts, |r| r.vs_floor)),
        fmt(us_per(scripts), 0),
        fmt(us_per(minimal), 0),
        fmt(redis(minimal), 1),
        fmt(redis(scripts), 1),
        signed(gap_redis),
        fmt(redis(keyholder), 1),
        signed(kh_redis),
        fmt(command(minimal), 1),
        fmt(command(scripts), 1),
        signed(gap_command),
        fmt(command(keyholder), 1),
        signed(kh_command),
        fmt(med(minimal, |r| r.commands), 2),
        fmt(med(scripts, |r| r.commands), 2),
        fmt(med(keyholder, |r| r.commands), 2),
    )
}

/// Medians over `runs` of the commands Redis ran, its CPU and its
/// commands' own time, per operation.
pub(crate) fn commands_and_cpu<P>(runs: &[Loop<P>]) -> (f64, f64, f64) {
    (med(runs, |r| r.commands), med(runs, |r| r.server_us), med(runs, |r| r.command_us))
}

/// A difference with its sign, one decimal: `+3.2`, `-0.4`, `n/a`.
fn signed(v: f64) -> String {
    if v.is_nan() { "n/a".to_owned() } else { format!("{v:+.1}") }
}
