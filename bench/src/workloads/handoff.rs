//! "One handoff", the unit of the contended workloads' ideal: the floor's
//! mean acquire+release pair time, measured anew in each run.

use std::time::Instant;

use crate::env::Env;
use crate::error::Res;
use crate::lock_impl::{Floor, LockImpl, Session};

/// The floor's mean acquire+release pair time, in seconds.
pub(crate) fn handoff(env: &Env) -> Res<f64> {
    let mut floor = Floor::new(env).session(1)?;
    let key = env.key("handoff");
    for _ in 0..20 {
        floor.pair(&key)?;
    }
    let start = Instant::now();
    for _ in 0..env.cfg.handoff_pairs {
        floor.pair(&key)?;
    }
    Ok(start.elapsed().as_secs_f64() / env.cfg.handoff_pairs as f64)
}
