//! Statistics over samples (latencies, waits) and over runs (every figure
//! of a table is the median over runs, or a maximum or sum where it says).

use std::time::Duration;

/// The values without NaNs, in ascending order.
pub(crate) fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.retain(|x| !x.is_nan());
    v.sort_by(f64::total_cmp);
    v
}

/// Nearest-rank percentile of sorted values.
pub(crate) fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median, NaNs left out; NaN when nothing is left.
pub(crate) fn median(values: Vec<f64>) -> f64 {
    let v = sorted(values);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median over runs of one figure.
pub(crate) fn med<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    median(runs.iter().map(f).collect())
}

/// The largest over runs of one figure, NaNs left out.
pub(crate) fn max_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    runs.iter().map(f).filter(|x| !x.is_nan()).fold(f64::NAN, f64::max)
}

/// The sum over runs of one figure.
pub(crate) fn sum_of<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    runs.iter().map(f).sum()
}

/// The longest run of equal consecutive items.
pub(crate) fn longest_streak(items: impl Iterator<Item = usize>) -> f64 {
    let (mut best, mut run, mut last) = (0, 0, None);
    for item in items {
        run = if last == Some(item) { run + 1 } else { 1 };
        last = Some(item);
        best = best.max(run);
    }
    best as f64
}

/// A duration in microseconds.
pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
