//! Renewal of expirable permits: the watchdog's side of
//! `lua/permit_semaphore/renew.lua` (Redisson's `updateLeaseTime`, for all
//! of a semaphore's permits held by this client at once).
//!
//! A permit hold's owner string is its permit ids in hex, comma-separated;
//! holds are grouped by semaphore, one script call per semaphore.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use super::layout::{Keys, PermitId};
use super::scripts;
use crate::client::{Holds, Inner};
use crate::error::{Error, Result};
use crate::holds::hold::Hold;
use crate::holds::renew::Renew;
use crate::names;

/// Renews permit holds.
#[derive(Debug)]
pub(crate) struct PermitRenewal {
    client: Weak<Inner>,
}

impl PermitRenewal {
    const BATCH_KEY: &'static str = "permit_semaphore";

    /// The renewer of `client`'s permit holds (one per client).
    pub(crate) fn of(holds: Holds<'_>) -> Arc<dyn Renew> {
        holds.renewer(Self::BATCH_KEY, |client| Arc::new(PermitRenewal { client }))
    }
}

/// The ids a permit hold's owner string lists.
fn ids_of(hold: &Hold) -> Result<Vec<PermitId>> {
    hold.owner.split(',').map(str::parse).collect()
}

impl Renew for PermitRenewal {
    fn batch_key(&self) -> &'static str {
        Self::BATCH_KEY
    }

    fn renew(&self, holds: &[&Hold], lease_ms: u64) -> Result<(Vec<bool>, bool)> {
        let inner = self.client.upgrade().ok_or_else(Error::shutdown)?;
        let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (at, hold) in holds.iter().enumerate() {
            by_name.entry(&hold.name).or_default().push(at);
        }
        let mut held = vec![false; holds.len()];
        let mut replicated = true;
        for (name, positions) in by_name {
            let name_arc: Arc<str> = Arc::from(name);
            let keys = Keys {
                timeouts: Arc::from(names::permit_timeouts(name)),
                channel: Arc::from(names::semaphore_channel(name)),
                name: name_arc,
            };
            let mut ids = Vec::new();
            let mut spans = Vec::new();
            for &at in &positions {
                let own = ids_of(holds[at])?;
                spans.push((at, ids.len(), own.len()));
                ids.extend(own);
            }
            let calls = inner.context().calls();
            let (renewed, acked) = calls.with_live_conn(name, |session| {
                let renewed = scripts::renew(calls, session, &keys, &ids, lease_ms)?;
                Ok((renewed, session.replicated() != Some(false)))
            })?;
            for (at, from, len) in spans {
                held[at] = renewed.get(from..from + len).is_some_and(|r| r.iter().all(|&ok| ok));
            }
            replicated &= acked;
        }
        Ok((held, replicated))
    }
}
