//! The counters of every primary of a Redis Cluster (`--cluster`),
//! snapshotted at both ends of a window: each node's own [`Delta`], with the
//! redirections it answered (`MOVED`, `ASK`: `INFO errorstats`) and the
//! `ASKING` it received, and their sum over the nodes. A lock call sent to
//! the node that serves the lock's slot costs none of them; one sent
//! elsewhere costs a redirection and a second hop.

use std::collections::HashMap;

use super::audit::{audit_end, audit_start};
use super::counters::{Counters, Delta, Snap, error_counts, snap};
use crate::env::Env;
use crate::error::Res;

/// A connection to each primary, by port, for the bench's own inspection.
pub(crate) struct ShardStats {
    pub(crate) nodes: Vec<(u16, redis::Connection)>,
}

/// Every primary's counters at one moment.
pub(crate) struct ShardSnap {
    nodes: Vec<(Snap, HashMap<String, u64>)>,
}

/// What one primary did in a window.
pub(crate) struct NodeDelta {
    pub(crate) port: u16,
    pub(crate) delta: Delta,
    /// `-MOVED` and `-ASK` replies it sent.
    pub(crate) moved: u64,
    pub(crate) ask: u64,
}

impl NodeDelta {
    /// Redirections and `ASKING` calls: the traces of a call sent to a node
    /// that does not serve its key.
    pub(crate) fn hops(&self) -> f64 {
        (self.moved + self.ask) as f64 + self.delta.calls("asking")
    }
}

/// Every primary's counters, in port order; a window's parts are each
/// primary's share.
impl Counters for ShardStats {
    type Snap = ShardSnap;
    type Audit = Vec<Option<HashMap<String, u64>>>;
    type Parts = Vec<NodeDelta>;

    fn snap(&mut self) -> Res<ShardSnap> {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (_, con) in &mut self.nodes {
            let errors = error_counts(con)?;
            nodes.push((snap(con)?, errors));
        }
        Ok(ShardSnap { nodes })
    }

    /// Each primary's window from `a` to `b`, with the top-level commands
    /// its audit counted when `audits` has them; and their sum.
    fn between(&self, a: &ShardSnap, b: &ShardSnap, audits: Self::Audit) -> (Vec<NodeDelta>, Delta) {
        let mut audits = audits.into_iter();
        let nodes: Vec<NodeDelta> = self
            .nodes
            .iter()
            .zip(a.nodes.iter().zip(&b.nodes))
            .map(|((port, _), ((sa, ea), (sb, eb)))| {
                let errors = |code: &str| {
                    eb.get(code).copied().unwrap_or(0).saturating_sub(ea.get(code).copied().unwrap_or(0))
                };
                NodeDelta {
                    port: *port,
                    delta: Delta::between(sa, sb).with_audit(audits.next().flatten()),
                    moved: errors("MOVED"),
                    ask: errors("ASK"),
                }
            })
            .collect();
        let total = Delta::merge(&nodes.iter().map(|n| n.delta.clone()).collect::<Vec<_>>());
        (nodes, total)
    }

    /// Starts an audited window on every primary (see `measure::audit`).
    fn audit_start(&mut self, env: &Env) -> Res<bool> {
        let mut on = false;
        for (_, con) in &mut self.nodes {
            on = audit_start(env, con)?;
        }
        Ok(on)
    }

    /// Ends it: each primary's top-level commands, in port order.
    fn audit_end(&mut self, env: &Env, on: bool) -> Res<Self::Audit> {
        self.nodes.iter_mut().map(|(_, con)| audit_end(env, con, on)).collect()
    }
}
