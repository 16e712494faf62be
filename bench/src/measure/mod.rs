//! Everything the bench measures with, in one place: the server's counters
//! and their deltas over a window (`counters`), the slow-log audit of
//! top-level commands (`audit`), the process's CPU and context switches
//! (`process`), the same counters on each primary of a Redis Cluster
//! (`shards`) and the statistics over samples and runs (`stats`).

mod audit;
mod counters;
mod process;
mod shards;
mod stats;

pub(crate) use audit::{audit_end, audit_start};
pub(crate) use counters::{Counters, Delta, connected_clients, info, info_field, snap};
pub(crate) use process::{loadavg, thread_switches};
pub(crate) use shards::{NodeDelta, ShardStats};
pub(crate) use stats::{longest_streak, max_of, med, median, pct, sorted, sum_of, us};
