//! Renewal of read holds (Redisson's `ReadLockTask`): each read hold has
//! timeout keys of its own besides the lock's hash, and a renewal must
//! reset both, or the next release would see the hold as dead
//! (`lua/rwlock/read_renew.lua`). Write holds keep the hash layout and are
//! renewed with the reentrant lock's renewer.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use crate::client::{Context, Inner};
use crate::error::{Error, Result};
use crate::holds::hold::Hold;
use crate::holds::renew::Renew;
use crate::kinds::family::silent;
use crate::kinds::rwlock::scripts::{self, RwKeys};
use crate::store::slots::key_slot;

/// Renews read holds, up to a batch per call.
#[derive(Debug)]
pub(crate) struct ReadRenewal {
    client: Weak<Inner>,
}

impl ReadRenewal {
    const BATCH_KEY: &'static str = "rwlock-read";

    /// The renewer of `client`'s read holds (one per client).
    pub(crate) fn of(ctx: Context<'_>) -> Arc<dyn Renew> {
        ctx.holds().renewer(Self::BATCH_KEY, |client| Arc::new(ReadRenewal { client }))
    }
}

impl Renew for ReadRenewal {
    fn batch_key(&self) -> &'static str {
        Self::BATCH_KEY
    }

    fn renew(&self, holds: &[&Hold], lease_ms: u64) -> Result<(Vec<bool>, bool)> {
        let inner = self.client.upgrade().ok_or_else(Error::shutdown)?;
        let prefixes: Vec<String> = holds.iter().map(|h| RwKeys::new(&h.name).key_prefix).collect();
        let triples: Vec<(&str, &str, &str)> =
            holds.iter().zip(&prefixes).map(|(h, p)| (&*h.name, p.as_str(), h.owner.as_str())).collect();
        let Some(&(first, _, _)) = triples.first() else { return Ok((Vec::new(), true)) };
        let renew = |group: &[(&str, &str, &str)], conn: &mut crate::store::lanes::Session<'_>| {
            let held = scripts::read_renew(&inner.scripts, conn, group, lease_ms)?;
            Ok((held, conn.replicated() != Some(false)))
        };
        if inner.routes.cluster().is_none() {
            // Silently on the tracking connection (`kinds/family/silent.rs`).
            let keys: Vec<&str> = triples.iter().map(|(key, _, _)| *key).collect();
            let call = scripts::read_renew_call(&triples, lease_ms);
            if let Some(reply) = silent::renew_silently(&inner, first, &call, &keys)
                && let Ok(held) = scripts::read_renewed(&reply, triples.len())
            {
                return Ok((held, true));
            }
            // Renewing is safe to repeat: a dead connection costs no period.
            return inner.with_live_conn(first, |conn| renew(&triples, conn));
        }
        // A script's declared keys share one slot: one call per slot.
        let mut slots: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (at, (key, _, _)) in triples.iter().enumerate() {
            slots.entry(key_slot(key.as_bytes())).or_default().push(at);
        }
        let mut held = vec![false; triples.len()];
        let mut replicated = true;
        for positions in slots.values() {
            let group: Vec<(&str, &str, &str)> = positions.iter().map(|&at| triples[at]).collect();
            let (renewed, acked) = inner.with_live_conn(group[0].0, |conn| renew(&group, conn))?;
            for (&at, renewed) in positions.iter().zip(renewed) {
                held[at] = renewed;
            }
            replicated &= acked;
        }
        Ok((held, replicated))
    }
}
