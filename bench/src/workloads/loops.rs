//! The single-thread loops of W1 and W5: one operation repeated, timed one
//! by one, with the server's counters over the whole loop.

use std::time::Instant;

use crate::error::Res;
use crate::measure::{Delta, med, pct, snap, sorted, us};
use crate::report::{fmt, fmt_ratio};

/// One measured single-thread loop.
pub(crate) struct Loop {
    pub(crate) rate: f64,
    p50: f64,
    p99: f64,
    rt: f64,
    evalsha: f64,
    cpu_us: f64,
    server_us: f64,
    /// Rate ÷ the same run's floor rate.
    pub(crate) vs_floor: f64,
}

/// Runs `op` `n` times after a warm-up (scripts loaded, connections open);
/// `nested` are the commands the implementation's scripts run.
pub(crate) fn measure_loop(
    stats: &mut redis::Connection,
    n: usize,
    nested: &[&str],
    mut op: impl FnMut() -> Res<()>,
) -> Res<Loop> {
    for _ in 0..n.clamp(10, 100) {
        op()?;
    }
    let mut lat = Vec::with_capacity(n);
    let a = snap(stats)?;
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        op()?;
        lat.push(us(t.elapsed()));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let b = snap(stats)?;
    let d = Delta::between(&a, &b);
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
        vs_floor: f64::NAN,
    })
}

/// The columns of W1's and W5's tables, after the label.
pub(crate) const LOOP_COLUMNS: usize = 8;

/// A table row: medians over runs.
pub(crate) fn loop_row(name: &str, runs: &[Loop]) -> Vec<String> {
    vec![
        name.to_owned(),
        fmt(med(runs, |r| r.rate), 0),
        fmt_ratio(med(runs, |r| r.vs_floor)),
        fmt(med(runs, |r| r.p50), 0),
        fmt(med(runs, |r| r.p99), 0),
        fmt(med(runs, |r| r.rt), 2),
        fmt(med(runs, |r| r.evalsha), 2),
        fmt(med(runs, |r| r.cpu_us), 1),
        fmt(med(runs, |r| r.server_us), 1),
    ]
}
