//! The workloads of SPEC section 4, one module each (W2 and W6 share the
//! contended runner), each written once over [`LockImpl`](crate::lock_impl::LockImpl)
//! and run as the minimal floor (and, in W1, W5 and W7, the keyholder
//! scripts floor beside it), the baseline and keyholder in turn on the same
//! server, `--runs` times; every table figure is the median over runs.

mod cluster;
mod contended;
mod election;
mod fair;
mod handoff;
mod header;
mod loops;
mod redlock;
mod rw;
mod sem;
mod spin;
mod threads;
mod w1;
mod w2;
mod w3;
mod w4;
mod w5;
mod w6;
mod w7;

pub(crate) use cluster::run_cluster;

use crate::env::{Env, Redis};
use crate::error::Res;

/// A workload: runs it and prints its tables.
type Workload = fn(&Env, &mut redis::Connection) -> Res<()>;

/// Prints the header, then runs the workloads `--only` selects, in order.
pub(crate) fn run_all(env: &Env, redis: &Redis, stats: &mut redis::Connection) -> Res<()> {
    header::header(env, redis, stats)?;
    let workloads: [(&str, Workload); 13] = [
        ("W1", w1::w1),
        ("W2", w2::w2),
        ("W3", w3::w3),
        ("W4", w4::w4),
        ("W5", w5::w5),
        ("W6", w6::w6),
        ("W7", w7::w7),
        ("FAIR", fair::fair),
        ("RW", rw::rw),
        ("SEM", sem::sem),
        ("SPIN", spin::spin),
        ("REDLOCK", redlock::redlock),
        ("ELECTION", election::election),
    ];
    for (name, run) in workloads {
        if env.cfg.wants(name) {
            run(env, stats)?;
        }
    }
    Ok(())
}
