//! A Redis Cluster: which primary serves each hash slot, and shared command
//! connections (lanes) to each primary in use.
//!
//! Every call names the lock it is about; its slot (the name's hash tag,
//! shared by every key and channel derived from it, see `names.rs`) picks
//! the primary, and the call goes out on that node's lanes, as it would on
//! a single server's. The slot map comes from `CLUSTER SLOTS`, asked of the
//! known primaries and then of the seed nodes, one node at a time:
//!
//! - at build time;
//! - after a `MOVED` (the slot is pointed at its new node at once, and the
//!   whole map is asked for again on the next call: a resharding rarely
//!   moves one slot alone);
//! - after a call failed in transit or could not connect, since the node
//!   may be down and a replica about to be promoted (at most every
//!   [`MIN_REFRESH`], and never by more than one caller at a time: the
//!   others go on with the map they have);
//! - when the pub/sub connection to a node cannot reconnect.
//!
//! When a refresh finds a slot's primary changed (a failover), the client's
//! hook runs: it moves the subscriptions of the slots that changed hands
//! and has every hold verified, so a holder whose lock did not survive the
//! failover is told at once.
//!
//! `ASK` (a slot being migrated, the key already on the importing node) is
//! followed for one command with `ASKING` in front, and `TRYAGAIN` is sent
//! again after a short pause: see `store/lanes.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::error::reaching::NetError;
use crate::error::{Error, Result};
use crate::store::batch::Wait;
use crate::store::connection::{Connector, Generation, access_error};
use crate::store::lanes::{Lanes, Redirects, Session};
use crate::store::pool::{NodePool, PoolSettings};
use crate::store::primary::{OpenNode, Primary, at_address};
use crate::store::slots::{self, Addr, Redirect, SLOTS, SlotRange};

/// The shortest time between two refreshes of the slot map prompted by
/// failures (a node down makes every call to it fail until its replica is
/// promoted; one `CLUSTER SLOTS` per this interval is enough to notice).
pub(crate) const MIN_REFRESH: Duration = Duration::from_millis(100);

/// How every node's lanes are set up.
pub(crate) struct NodeSettings {
    /// Credentials, TLS and socket settings shared by every node (the first
    /// seed's), with each node's own address.
    pub(crate) template: redis::ConnectionInfo,
    pub(crate) open: OpenNode,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    /// Lanes per node.
    pub(crate) lanes: u32,
    /// How each node's connections are pooled.
    pub(crate) pool: PoolSettings,
    pub(crate) wait: Option<Wait>,
    /// `CLIENT SETNAME` of every command connection.
    pub(crate) name: Arc<str>,
}

/// One primary in use: its address, its redis-rs client (for its pub/sub
/// connection's settings) and its lanes.
pub(crate) struct Shard {
    pub(crate) addr: Addr,
    pub(crate) info: redis::ConnectionInfo,
    lanes: Arc<Lanes>,
}

/// The slot map and the shards it points at.
struct Topology {
    /// Indexed by slot; `None` for a slot no node serves.
    slots: Box<[Option<Arc<Shard>>]>,
    shards: HashMap<Addr, Arc<Shard>>,
}

/// A Redis Cluster, as one client uses it.
pub(crate) struct Cluster {
    seeds: Vec<Addr>,
    settings: NodeSettings,
    topology: RwLock<Topology>,
    /// One refresh at a time; the time of the last one.
    refreshing: Mutex<Option<Instant>>,
    /// Counts refreshes, so that a caller that waited for another's refresh
    /// takes its answer.
    refreshes: AtomicU64,
    /// A call failed or was redirected since the last refresh.
    stale: AtomicBool,
    /// Told when a refresh finds that slots changed hands.
    on_change: OnceLock<Hook>,
    /// Told when a node's connection was found dead.
    on_dead: OnceLock<Arc<dyn Fn() + Send + Sync>>,
    closed: AtomicBool,
}

type Hook = Box<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shards: Vec<String> =
            self.topology.read().shards.keys().map(|(host, port)| format!("{host}:{port}")).collect();
        f.debug_struct("Cluster").field("seeds", &self.seeds).field("shards", &shards).finish_non_exhaustive()
    }
}

impl Cluster {
    /// A cluster reached through `seeds`; no I/O (see
    /// [`start`](Cluster::start)).
    pub(crate) fn new(seeds: Vec<Addr>, settings: NodeSettings) -> Cluster {
        Cluster {
            seeds,
            settings,
            topology: RwLock::new(Topology { slots: vec![None; SLOTS].into(), shards: HashMap::new() }),
            refreshing: Mutex::new(None),
            refreshes: AtomicU64::new(0),
            stale: AtomicBool::new(false),
            on_change: OnceLock::new(),
            on_dead: OnceLock::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// Sets what to do when slots change hands (set once, before use).
    pub(crate) fn on_change(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_change.set(Box::new(hook));
    }

    /// Sets what to do when a node's connection is found dead (set once,
    /// before use).
    pub(crate) fn on_dead(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_dead.set(Arc::new(hook));
    }

    /// Reads the slot map, then checks access on the node that serves slot
    /// 0 (see `Connector::check_access`), whose checked connection becomes
    /// that node's first.
    ///
    /// # Errors
    ///
    /// As `Connector::check_access`, or `Connection` when no seed answers
    /// `CLUSTER SLOTS`, `InvalidConfig` when the seeds are no cluster.
    pub(crate) fn start(&self) -> Result<()> {
        self.refresh_now()?;
        let shard = self.shard_of_slot(0)?;
        let first = shard.lanes.connector().check_access()?;
        shard.lanes.adopt(first);
        Ok(())
    }

    /// A session for a call about `key`, on the lanes of the primary that
    /// serves its slot.
    ///
    /// # Errors
    ///
    /// `Connection` when no node serves the slot (the cluster is down, or
    /// the slot map could not be read), or as `Lanes::session`.
    pub(crate) fn session(&self, key: &str) -> Result<Session<'_>> {
        if self.stale.load(Ordering::Acquire) {
            self.refresh_soon();
        }
        let shard = self.shard_of_slot(slots::key_slot(key.as_bytes()))?;
        shard.lanes.routed_session(self)
    }

    /// The primary that serves `slot` now, from the map (no I/O).
    pub(crate) fn shard_of_slot(&self, slot: u16) -> Result<Arc<Shard>> {
        let topology = self.topology.read();
        match topology.slots.get(usize::from(slot)).and_then(Option::as_ref) {
            Some(shard) => Ok(Arc::clone(shard)),
            None => Err(Error::redis(redis::RedisError::from((
                redis::ErrorKind::Io,
                "no cluster node serves this slot",
                format!("slot {slot}"),
            )))),
        }
    }

    /// The address of the primary serving `key`'s slot, for grouping calls
    /// per node (the watchdog's renewals).
    pub(crate) fn node_of(&self, key: &str) -> Option<Addr> {
        self.shard_of_slot(slots::key_slot(key.as_bytes())).ok().map(|shard| shard.addr.clone())
    }

    /// The primaries in use.
    pub(crate) fn shards(&self) -> Vec<Arc<Shard>> {
        self.topology.read().shards.values().cloned().collect()
    }

    /// Refreshes the slot map unless one was read less than
    /// [`MIN_REFRESH`] ago or another caller is reading it: the pub/sub
    /// connection to a node could not reconnect, or a call failed.
    pub(crate) fn refresh_soon(&self) {
        let Some(mut last) = self.refreshing.try_lock() else { return };
        if last.is_some_and(|at| at.elapsed() < MIN_REFRESH) {
            return;
        }
        if let Err(e) = self.refresh_locked(&mut last) {
            log::debug!("keyholder: cannot read the cluster's slot map: {e}");
        }
    }

    /// Reads the slot map now (waiting for a refresh under way, and taking
    /// its answer instead).
    fn refresh_now(&self) -> Result<()> {
        let seen = self.refreshes.load(Ordering::Acquire);
        let mut last = self.refreshing.lock();
        if self.refreshes.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        self.refresh_locked(&mut last)
    }

    fn refresh_locked(&self, last: &mut Option<Instant>) -> Result<()> {
        self.stale.store(false, Ordering::Release);
        *last = Some(Instant::now());
        // The primaries known first: the seeds may be long gone.
        let mut candidates: Vec<Addr> = self.topology.read().shards.keys().cloned().collect();
        candidates
            .extend(self.seeds.iter().filter(|seed| !candidates.contains(seed)).cloned().collect::<Vec<_>>());
        let mut failure = None;
        for addr in candidates {
            match self.ask_slots(&addr) {
                Ok(ranges) if !ranges.is_empty() => {
                    self.apply(&ranges)?;
                    self.refreshes.fetch_add(1, Ordering::AcqRel);
                    return Ok(());
                }
                Ok(_) => {
                    failure = Some(Error::invalid_config(format!("{}:{} serves no slot", addr.0, addr.1)))
                }
                Err(e) => failure = Some(e),
            }
        }
        self.stale.store(true, Ordering::Release);
        Err(failure
            .unwrap_or_else(|| Error::invalid_config("no seed node to ask for the slot map".to_owned())))
    }

    /// `CLUSTER SLOTS` of the node at `addr`, on a connection of its own.
    fn ask_slots(&self, addr: &Addr) -> Result<Vec<SlotRange>> {
        let info = at_address(&self.settings.template, addr.0.clone(), addr.1);
        let node = (self.settings.open)(info)?;
        let timeout = self.settings.connect_timeout;
        let mut con = node.client().get_connection_with_timeout(timeout).map_err(|e| {
            let at = format!("{}:{}", addr.0, addr.1);
            access_error(match NetError::of_redis_rs(at, timeout, &e) {
                Some(unreachable) => unreachable.peer("the cluster node").into(),
                None => e,
            })
        })?;
        con.set_read_timeout(Some(self.settings.command_timeout)).map_err(Error::redis)?;
        con.set_write_timeout(Some(self.settings.command_timeout)).map_err(Error::redis)?;
        let reply: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).map_err(|e| {
            if e.to_string().contains("cluster support disabled") {
                Error::invalid_config(format!("{}:{} is not a cluster node: {e}", addr.0, addr.1))
            } else {
                access_error(e)
            }
        })?;
        slots::parse_cluster_slots(&reply, &addr.0)
            .ok_or_else(|| Error::unexpected_reply("CLUSTER SLOTS", format!("{reply:?}")))
    }

    /// Points every slot at the primary `ranges` names, making lanes for
    /// primaries not seen before; runs the change hook when a slot changed
    /// hands.
    fn apply(&self, ranges: &[SlotRange]) -> Result<()> {
        let mut fresh: Vec<Option<Arc<Shard>>> = vec![None; SLOTS];
        let mut shards = HashMap::new();
        let known = self.topology.read().shards.clone();
        for range in ranges {
            let shard = match shards.get(&range.primary).or_else(|| known.get(&range.primary)) {
                Some(shard) => Arc::clone(shard),
                None => self.new_shard(range.primary.clone())?,
            };
            shards.insert(range.primary.clone(), Arc::clone(&shard));
            for slot in range.first..=range.last {
                fresh[usize::from(slot)] = Some(Arc::clone(&shard));
            }
        }
        let mut topology = self.topology.write();
        let first = topology.shards.is_empty();
        let changed = topology.slots.iter().zip(&fresh).any(|(old, new)| match (old, new) {
            (Some(old), Some(new)) => old.addr != new.addr,
            (None, None) => false,
            _ => true,
        });
        *topology = Topology { slots: fresh.into(), shards };
        drop(topology);
        if changed && !first {
            log::info!("keyholder: the cluster's slot map changed");
            if let Some(hook) = self.on_change.get() {
                hook();
            }
        }
        Ok(())
    }

    fn new_shard(&self, addr: Addr) -> Result<Arc<Shard>> {
        let s = &self.settings;
        let info = at_address(&s.template, addr.0.clone(), addr.1);
        let node = (s.open)(info.clone())?;
        let generation = Arc::new(Generation::default());
        if let Some(hook) = self.on_dead.get() {
            let hook = Arc::clone(hook);
            generation.on_dead(move || hook());
        }
        let connector = Connector::new(
            Arc::new(Primary::fixed(node)),
            s.connect_timeout,
            s.command_timeout,
            generation,
            Arc::clone(&s.name),
        );
        let pool = NodePool::new(connector, s.pool, format!("{}:{}", addr.0, addr.1));
        let lanes = Lanes::new(pool, None, s.lanes, s.wait, s.connect_timeout, s.command_timeout);
        if self.closed.load(Ordering::Acquire) {
            lanes.close();
        }
        Ok(Arc::new(Shard { addr, info, lanes: Arc::new(lanes) }))
    }

    /// Closes every node's connections; later calls open their own.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for shard in self.shards() {
            shard.lanes.close();
        }
    }
}

impl Shard {
    /// A session on this node's lanes, without redirections: a call that
    /// must reach this node (the watchdog's renewals of its locks).
    pub(crate) fn session(&self) -> Result<Session<'static>> {
        self.lanes.session()
    }

    /// What opens this node's connections (and one-off connections to its
    /// replicas: the doctor's).
    pub(crate) fn connector(&self) -> &Connector {
        self.lanes.connector()
    }
}

impl Redirects for Cluster {
    fn follow(&self, redirect: &Redirect) -> Result<Arc<Lanes>> {
        let (slot, to) = match redirect {
            Redirect::Moved { slot, to } => (Some(*slot), to),
            Redirect::Ask { to } => (None, to),
            Redirect::TryAgain => return Err(Error::unexpected_reply("cluster", "TRYAGAIN".to_owned())),
        };
        let known = self.topology.read().shards.get(to).cloned();
        let shard = match known {
            Some(shard) => shard,
            None => {
                let shard = self.new_shard(to.clone())?;
                let mut topology = self.topology.write();
                Arc::clone(topology.shards.entry(to.clone()).or_insert(shard))
            }
        };
        if let Some(slot) = slot {
            if let Some(entry) = self.topology.write().slots.get_mut(usize::from(slot)) {
                *entry = Some(Arc::clone(&shard));
            }
            self.stale.store(true, Ordering::Release);
        }
        Ok(Arc::clone(&shard.lanes))
    }

    fn failed(&self, _lanes: &Lanes) {
        self.stale.store(true, Ordering::Release);
    }
}
