//! Renewal of the hash layout the reentrant lock shares with Redisson's
//! fair, write and spin locks: `<name>` → `{owner: count}`, renewed by
//! resetting the key's TTL while the owner's field exists
//! (`lua/lock/renew.lua`, Redisson's `LockTask`).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use redis::Value;

use crate::client::{Context, Inner};
use crate::error::{Error, Result};
use crate::holds::hold::Hold;
use crate::holds::renew::Renew;
use crate::kinds::family::silent;
use crate::kinds::lock::scripts;
use crate::store::batch::Request;
use crate::store::lanes::Session;
use crate::store::slots::key_slot;

/// Renews holds of the hash layout, up to a batch per call.
#[derive(Debug)]
pub(crate) struct HashRenewal {
    client: Weak<Inner>,
}

impl HashRenewal {
    const BATCH_KEY: &'static str = "hash";

    /// The renewer of `client`'s holds of the hash layout (one per client).
    pub(crate) fn of(ctx: Context<'_>) -> Arc<dyn Renew> {
        ctx.holds().renewer(Self::BATCH_KEY, |client| Arc::new(HashRenewal { client }))
    }
}

impl Renew for HashRenewal {
    fn batch_key(&self) -> &'static str {
        Self::BATCH_KEY
    }

    fn renew(&self, holds: &[&Hold], lease_ms: u64) -> Result<(Vec<bool>, bool)> {
        let inner = self.client.upgrade().ok_or_else(Error::shutdown)?;
        let pairs: Vec<(&str, &str)> = holds.iter().map(|h| (&*h.name, h.owner.as_str())).collect();
        if let Some(renewed) = renew_silently(&inner, &pairs, lease_ms) {
            return Ok((renewed, true));
        }
        renew_pairs(&inner, &pairs, lease_ms)
    }

    fn check(&self, holds: &[&Hold]) -> Result<Vec<bool>> {
        let inner = self.client.upgrade().ok_or_else(Error::shutdown)?;
        let pairs: Vec<(&str, &str)> = holds.iter().map(|h| (&*h.name, h.owner.as_str())).collect();
        check_pairs(&inner, &pairs)
    }
}

/// Whether each `(key, owner)` pair's owner field still exists: one
/// `HSTRLEN` per pair, all in one round trip (on a cluster, to the node of
/// the first key, which the caller groups by). `HSTRLEN` is 0 when the field
/// is absent (a hold count is never empty), like `HEXISTS`, and no lock
/// script uses it, so `INFO commandstats` counts these checks apart. A reply
/// that is neither 0 nor `WRONGTYPE` (a redirection, say) cannot tell: held.
fn check_pairs(inner: &Inner, pairs: &[(&str, &str)]) -> Result<Vec<bool>> {
    let Some(&(first, _)) = pairs.first() else { return Ok(Vec::new()) };
    let cmds: Vec<redis::Cmd> = pairs
        .iter()
        .map(|(key, owner)| {
            let mut cmd = redis::cmd("HSTRLEN");
            cmd.arg(*key).arg(*owner);
            cmd
        })
        .collect();
    let cmds: Vec<&redis::Cmd> = cmds.iter().collect();
    let ask = |session: &mut Session<'_>| -> Result<Vec<bool>> {
        let replies = session.send(Request::commands(&cmds))?;
        Ok((0..pairs.len()).map(|at| still_there(replies.values.get(at))).collect())
    };
    match inner.routes.cluster() {
        // Reading is safe to repeat: a dead connection costs no check.
        None => inner.with_live_conn(first, ask),
        Some(cluster) => ask(&mut cluster.shard_of_slot(key_slot(first.as_bytes()))?.session()?),
    }
}

/// One `HSTRLEN` reply: false only when it says the field (or the hash) is
/// gone; a key of another type at the name is no lock of this owner either.
fn still_there(reply: Option<&Value>) -> bool {
    match reply {
        Some(Value::Int(0)) => false,
        Some(Value::ServerError(e)) => e.code() != "WRONGTYPE",
        _ => true,
    }
}

/// Renews the `(key, owner)` pairs on the tracking connection, silently
/// (see `kinds/family/silent.rs`): one call, on one server or on the one
/// cluster node that serves every key. `None` when they must be renewed on
/// a command connection ([`renew_pairs`]).
fn renew_silently(inner: &Inner, pairs: &[(&str, &str)], lease_ms: u64) -> Option<Vec<bool>> {
    let &(first, _) = pairs.first()?;
    let declared = match inner.routes.cluster() {
        None => true,
        Some(cluster) => {
            let node = cluster.node_of(first);
            if node.is_none() || pairs.iter().any(|(key, _)| cluster.node_of(key) != node) {
                return None;
            }
            false
        }
    };
    let keys: Vec<&str> = pairs.iter().map(|(key, _)| *key).collect();
    let reply = silent::renew_silently(inner, first, &scripts::renew_call(pairs, lease_ms, declared), &keys)?;
    scripts::renewed(reply, pairs.len()).ok()
}

/// Renews the `(key, owner)` pairs: one call on one server; on a cluster,
/// one call per node when no slot moved, else one per slot.
fn renew_pairs(inner: &Inner, pairs: &[(&str, &str)], lease_ms: u64) -> Result<(Vec<bool>, bool)> {
    let Some(&(first, _)) = pairs.first() else { return Ok((Vec::new(), true)) };
    let renew = |pairs: &[(&str, &str)], declared: bool, conn: &mut Session<'_>| {
        let held = scripts::renew(&inner.scripts, conn, pairs, lease_ms, declared)?;
        Ok((held, conn.replicated() != Some(false)))
    };
    let Some(cluster) = inner.routes.cluster() else {
        // Renewing is safe to repeat: a dead connection costs no period.
        return inner.with_live_conn(first, |conn| renew(pairs, true, conn));
    };
    // The watchdog groups holds by node: one call renews up to a batch
    // of one node's locks, whatever their slots.
    let node = cluster.node_of(first);
    if node.is_some() && pairs.iter().all(|(key, _)| cluster.node_of(key) == node) {
        let outcome = cluster
            .shard_of_slot(key_slot(first.as_bytes()))
            .and_then(|shard| renew(pairs, false, &mut shard.session()?));
        match outcome {
            Ok(renewed) => return Ok(renewed),
            Err(e) => log::debug!("keyholder: renewing per slot after a node's batch failed: {e}"),
        }
    }
    // A slot moved or a node failed: one call per slot, keys declared,
    // redirections followed.
    let mut slots: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for (at, (key, _)) in pairs.iter().enumerate() {
        slots.entry(key_slot(key.as_bytes())).or_default().push(at);
    }
    let mut held = vec![false; pairs.len()];
    let mut replicated = true;
    for positions in slots.values() {
        let group: Vec<(&str, &str)> = positions.iter().map(|&at| pairs[at]).collect();
        let (renewed, acked) = inner.with_live_conn(group[0].0, |conn| renew(&group, true, conn))?;
        for (&at, renewed) in positions.iter().zip(renewed) {
            held[at] = renewed;
        }
        replicated &= acked;
    }
    Ok((held, replicated))
}
