//! "One handoff", the unit of the contended workloads' ideal: the minimal
//! floor's mean acquire+release pair time, measured anew in each run.

use std::time::Instant;

use crate::env::Env;
use crate::error::Res;
use crate::lock_impl::{LockImpl, MinimalFloor, Session};

/// The minimal floor's mean acquire+release pair time, in seconds.
pub(crate) fn handoff(env: &Env) -> Res<f64> {
    handoff_over(env, &[&env.key("handoff")])
}

/// The minimal floor's mean acquire+release pair time over `names` in turn
/// (`--cluster`: one per shard), in seconds: `--handoff-pairs` pairs per
/// name, after 20 per name.
pub(crate) fn handoff_over(env: &Env, names: &[&str]) -> Res<f64> {
    let mut floor = MinimalFloor::new(env).session(1)?;
    let name = |i: usize| names[i % names.len()];
    for i in 0..20 * names.len() {
        floor.pair(name(i))?;
    }
    let pairs = env.cfg.handoff_pairs * names.len();
    let start = Instant::now();
    for i in 0..pairs {
        floor.pair(name(i))?;
    }
    Ok(start.elapsed().as_secs_f64() / pairs as f64)
}
