//! Where a call about a lock goes: the lanes of the one primary (a URL's
//! server, or the master Sentinel names), or, on a Redis Cluster, the lanes
//! of the node that serves the lock's slot.

use std::sync::Arc;

use crate::error::Result;
use crate::store::cluster::Cluster;
use crate::store::lanes::{Lanes, Session};
use crate::store::slots::Addr;

/// The client's command connections.
pub(crate) enum Routes {
    Primary(Arc<Lanes>),
    Cluster(Arc<Cluster>),
}

impl Routes {
    /// A session for one call about the lock whose key is `key`.
    ///
    /// # Errors
    ///
    /// As `Lanes::session`, and on a cluster `Cluster::session`.
    pub(crate) fn session(&self, key: &str) -> Result<Session<'_>> {
        match self {
            Routes::Primary(lanes) => lanes.session(),
            Routes::Cluster(cluster) => cluster.session(key),
        }
    }

    /// The node `key`'s calls go to, on a cluster (`None` otherwise): calls
    /// for one node can share a round trip.
    pub(crate) fn node_of(&self, key: &str) -> Option<Addr> {
        match self {
            Routes::Primary(_) => None,
            Routes::Cluster(cluster) => cluster.node_of(key),
        }
    }

    /// The cluster, if the client talks to one.
    pub(crate) fn cluster(&self) -> Option<&Cluster> {
        match self {
            Routes::Primary(_) => None,
            Routes::Cluster(cluster) => Some(cluster),
        }
    }

    /// The primary moved (a Sentinel failover): see `Lanes::primary_moved`.
    pub(crate) fn primary_moved(&self) {
        if let Routes::Primary(lanes) = self {
            lanes.primary_moved();
        }
    }

    /// Closes every connection; later calls open their own.
    pub(crate) fn close(&self) {
        match self {
            Routes::Primary(lanes) => lanes.close(),
            Routes::Cluster(cluster) => cluster.close(),
        }
    }
}
