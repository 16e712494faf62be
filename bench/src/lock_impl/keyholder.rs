//! keyholder with its defaults, over one or more clients: session `i` uses
//! client `i % clients`, as separate processes (pods) would each use their
//! own. The clients shut down when this is dropped. On a Redis Cluster they
//! are cluster clients (`Client::builder_cluster`) of its nodes.

use std::collections::HashMap;
use std::time::Duration;

use keyholder::{Client, Lock, LockGuard};

use super::{ACQUIRE_LIMIT, LIBRARY_SCRIPT_COMMANDS, LockImpl, Session};
use crate::env::Env;
use crate::error::{Res, err};

/// keyholder clients.
pub(crate) struct Keyholder {
    clients: Vec<Client>,
}

impl Keyholder {
    /// `clients` clients with default settings but the watchdog timeout,
    /// when given.
    pub(crate) fn new(env: &Env, clients: usize, watchdog: Option<Duration>) -> Res<Keyholder> {
        let clients = (0..clients)
            .map(|_| {
                let mut builder = match &env.shards {
                    Some(shards) => Client::builder_cluster(shards.seeds.clone()),
                    None => Client::builder(env.url.clone()),
                };
                if let Some(timeout) = watchdog {
                    builder = builder.watchdog_timeout(timeout);
                }
                builder.build()
            })
            .collect::<Result<Vec<Client>, _>>()?;
        Ok(Keyholder { clients })
    }
}

impl Keyholder {
    /// `clients` clients with default settings but the barging window, when
    /// given (`ClientBuilder::barging_window`).
    pub(crate) fn with_barging_window(env: &Env, clients: usize, window: Option<Duration>) -> Res<Keyholder> {
        let clients = (0..clients)
            .map(|_| {
                let builder = match &env.shards {
                    Some(shards) => Client::builder_cluster(shards.seeds.clone()),
                    None => Client::builder(env.url.clone()),
                };
                match window {
                    Some(window) => builder.barging_window(window),
                    None => builder,
                }
                .build()
            })
            .collect::<Result<Vec<Client>, _>>()?;
        Ok(Keyholder { clients })
    }

    /// The pub/sub connections of all clients (on a cluster, one per node
    /// that has had a waiting thread, per client).
    pub(crate) fn pubsub_connections(&self) -> usize {
        self.clients.iter().map(Client::pubsub_connections).sum()
    }
}

impl Drop for Keyholder {
    fn drop(&mut self) {
        for client in &self.clients {
            client.shutdown();
        }
    }
}

impl LockImpl for Keyholder {
    type Session = KeyholderSession;

    fn session(&self, index: usize) -> Res<KeyholderSession> {
        let client =
            self.clients.get(index % self.clients.len().max(1)).ok_or_else(|| err("keyholder: no client"))?;
        Ok(KeyholderSession { client: client.clone(), locks: HashMap::new() })
    }

    /// EVALSHA less one per acquisition (its release or hand-off script):
    /// acquire.lua's refusals read the lock with PTTL, not EXISTS, so no
    /// command inside it runs exactly once per call.
    fn attempt_command(&self) -> &'static str {
        "evalsha"
    }

    fn script_commands(&self) -> &'static [&'static str] {
        LIBRARY_SCRIPT_COMMANDS
    }

    fn warm_up(&self, name: &str) -> Res<()> {
        for client in &self.clients {
            KeyholderSession { client: client.clone(), locks: HashMap::new() }.acquire(name)?.unlock()?;
        }
        Ok(())
    }

    fn waiters_settled(&self) -> bool {
        self.clients.iter().all(|k| k.subscribed_channels() == 1)
    }
}

/// A client and the lock handles this thread made with it, one per name.
pub(crate) struct KeyholderSession {
    client: Client,
    locks: HashMap<String, Lock>,
}

impl Session for KeyholderSession {
    type Held = LockGuard;

    fn acquire(&mut self, name: &str) -> Res<LockGuard> {
        if !self.locks.contains_key(name) {
            self.locks.insert(name.to_owned(), self.client.lock(name)?);
        }
        let lock = self.locks.get(name).ok_or_else(|| err("keyholder: lock handle vanished"))?;
        lock.try_lock_for(ACQUIRE_LIMIT)?
            .ok_or_else(|| err(format!("keyholder: {name} not acquired within {ACQUIRE_LIMIT:?}")))
    }

    fn release(&mut self, guard: LockGuard) -> Res<()> {
        Ok(guard.unlock()?)
    }

    fn is_lost(&self, guard: &LockGuard) -> Option<bool> {
        Some(guard.is_lost())
    }
}
