//! Which pub/sub connection a waiter subscribes on: the client's one
//! subscriber, or, on a Redis Cluster, the subscriber of the node that
//! serves the lock's slot.
//!
//! On a cluster, a lock's unlock and wake channels share its slot (the
//! name's hash tag), and keyholder subscribes to them on that slot's
//! primary, as Redisson does: with `SSUBSCRIBE` where the servers have
//! shard channels (Redis 7 and newer; the scripts then publish with
//! `SPUBLISH`), with `SUBSCRIBE` otherwise (a plain `PUBLISH` reaches every
//! node). There is one subscriber, with its reader thread, per node that
//! serves slots, not one per lock; an idle one is how the client hears at
//! once that its node died. When slots change hands, the channels of the
//! slots that moved are dropped and their waiters woken, and they subscribe
//! again on the new owner (see `wait/entry.rs`); a subscriber whose node
//! serves no slot any more is stopped once its channels are gone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use redis::Value;

use crate::error::{Error, Result};
use crate::pubsub::subscriber::{Holders, Interest, Subscriber, Subscription};
use crate::pubsub::target::Target;
use crate::pubsub::tracking::Armed;

/// The client's subscribers.
pub(crate) enum Subscribers {
    /// One server (or the primary Sentinel names): one subscriber.
    One(Arc<Subscriber>),
    /// A Redis Cluster: one subscriber per node.
    PerNode(Box<NodeSubscribers>),
}

/// Where a channel is served: the node's key (`host:port`) and how to reach
/// it; `None` when no node serves its slot right now.
pub(crate) type Locate = Box<dyn Fn(&str) -> Option<(String, Target)> + Send + Sync>;

/// The primaries serving slots right now, as `locate` names them.
pub(crate) type Primaries = Box<dyn Fn() -> Vec<(String, Target)> + Send + Sync>;

/// A cluster client's subscribers, one per node.
pub(crate) struct NodeSubscribers {
    locate: Locate,
    primaries: Primaries,
    settings: NodeSubscriberSettings,
    nodes: Mutex<HashMap<String, Arc<Subscriber>>>,
    /// Set under `nodes`' lock: no subscriber starts after shutdown.
    shutdown: AtomicBool,
    /// Given to every subscriber (see [`Subscribers::set_holders`]).
    holders: OnceLock<Arc<dyn Holders>>,
}

/// How a cluster client's subscribers are made and started.
pub(crate) struct NodeSubscriberSettings {
    /// `SSUBSCRIBE` rather than `SUBSCRIBE`.
    pub(crate) sharded: bool,
    pub(crate) connect_timeout: Duration,
    pub(crate) command_timeout: Duration,
    /// The command connections' idle timeout (see [`Subscriber::new`]).
    pub(crate) idle_timeout: Option<Duration>,
    /// Told when a subscriber reconnected (holds are worth verifying).
    pub(crate) reconnected: Sender<()>,
    /// Called when a subscriber cannot reach its node (the slot map is
    /// worth reading again).
    pub(crate) unreachable: Arc<dyn Fn() + Send + Sync>,
    /// Disconnects on shutdown: ends the readers' back-off waits.
    pub(crate) stop: Receiver<()>,
    /// The readers' thread names start with this.
    pub(crate) thread_prefix: String,
}

impl NodeSubscribers {
    pub(crate) fn new(
        locate: Locate,
        primaries: Primaries,
        settings: NodeSubscriberSettings,
    ) -> NodeSubscribers {
        NodeSubscribers {
            locate,
            primaries,
            settings,
            nodes: Mutex::new(HashMap::new()),
            shutdown: AtomicBool::new(false),
            holders: OnceLock::new(),
        }
    }

    /// The subscriber of the node that serves `channel`, started (with its
    /// reader thread) on first use.
    fn subscriber_for(&self, channel: &str) -> Result<Arc<Subscriber>> {
        let Some((key, target)) = (self.locate)(channel) else {
            return Err(Error::redis(redis::RedisError::from((
                redis::ErrorKind::Io,
                "no cluster node serves this channel's slot",
                channel.to_owned(),
            ))));
        };
        self.subscriber_at(key, target)
    }

    /// The subscriber of the node `key`, started on first use.
    fn subscriber_at(&self, key: String, target: Target) -> Result<Arc<Subscriber>> {
        let mut nodes = self.nodes.lock();
        if self.shutdown.load(Ordering::Acquire) {
            return Err(Error::shutdown());
        }
        if let Some(subscriber) = nodes.get(&key) {
            return Ok(Arc::clone(subscriber));
        }
        let settings = &self.settings;
        let subscriber = Arc::new(Subscriber::new(
            target,
            settings.connect_timeout,
            settings.command_timeout,
            settings.idle_timeout,
            settings.reconnected.clone(),
            settings.sharded,
        ));
        let unreachable = Arc::clone(&settings.unreachable);
        subscriber.on_unreachable(move || unreachable());
        if let Some(holders) = self.holders.get() {
            subscriber.set_holders(holders);
        }
        let reader = Arc::clone(&subscriber);
        let stop = settings.stop.clone();
        std::thread::Builder::new()
            .name(format!("{}-{key}", settings.thread_prefix))
            .spawn(move || reader.run(stop))
            .map_err(|e| Error::spawn("pub/sub", e))?;
        nodes.insert(key, Arc::clone(&subscriber));
        Ok(subscriber)
    }

    /// `channels` grouped by the subscriber of the node that serves each,
    /// and those no node serves right now.
    #[allow(clippy::type_complexity)]
    fn by_node(&self, channels: &[Arc<str>]) -> (Vec<(Arc<Subscriber>, Vec<Arc<str>>)>, Vec<Arc<str>>) {
        let mut groups: HashMap<String, (Arc<Subscriber>, Vec<Arc<str>>)> = HashMap::new();
        let mut unserved = Vec::new();
        for channel in channels {
            let Some((key, target)) = (self.locate)(channel) else {
                unserved.push(Arc::clone(channel));
                continue;
            };
            if let Some((_, group)) = groups.get_mut(&key) {
                group.push(Arc::clone(channel));
                continue;
            }
            match self.subscriber_at(key.clone(), target) {
                Ok(subscriber) => {
                    groups.insert(key, (subscriber, vec![Arc::clone(channel)]));
                }
                Err(_) => unserved.push(Arc::clone(channel)),
            }
        }
        (groups.into_values().collect(), unserved)
    }

    /// Keeps a subscriber on each primary (and stops those of
    /// nodes no longer among them, once their channels are gone): an idle
    /// pub/sub connection is how the client hears at once that a primary
    /// died (its connection drops, reconnecting fails, and the slot map is
    /// read again), as the one subscriber does for a single server.
    pub(crate) fn watch(&self) {
        let primaries = (self.primaries)();
        let keys: Vec<String> = primaries.iter().map(|(key, _)| key.clone()).collect();
        for (key, target) in primaries {
            if let Err(e) = self.subscriber_at(key, target) {
                log::debug!("keyholder: no pub/sub connection to a cluster node: {e}");
            }
        }
        let retired: Vec<Arc<Subscriber>> = {
            let mut nodes = self.nodes.lock();
            let gone: Vec<String> = nodes
                .iter()
                .filter(|(key, s)| !keys.contains(key) && s.is_unused())
                .map(|(k, _)| k.clone())
                .collect();
            gone.iter().filter_map(|key| nodes.remove(key)).collect()
        };
        for subscriber in retired {
            subscriber.shut_down();
        }
    }

    /// Waits (at most `bound` in all) until every subscriber has tried to
    /// connect once (see [`Subscriber::wait_first_attempt`]).
    pub(crate) fn wait_first_attempts(&self, bound: Duration) {
        let until = Instant::now() + bound;
        let subscribers: Vec<Arc<Subscriber>> = self.nodes.lock().values().cloned().collect();
        for subscriber in subscribers {
            subscriber.wait_first_attempt(until.saturating_duration_since(Instant::now()));
        }
    }

    /// Slots changed hands: drops every channel its subscriber's node no
    /// longer serves (waking its waiters, who subscribe again where it
    /// went), then keeps a subscriber on each primary (see
    /// [`watch`](NodeSubscribers::watch)).
    pub(crate) fn slots_moved(&self) {
        let nodes: Vec<(String, Arc<Subscriber>)> =
            self.nodes.lock().iter().map(|(key, s)| (key.clone(), Arc::clone(s))).collect();
        for (key, subscriber) in nodes {
            subscriber.evict(|channel| (self.locate)(channel).is_none_or(|(owner, _)| owner != key));
        }
        self.watch();
    }
}

impl Subscribers {
    /// Subscribes the lock's channels for a waiter (see
    /// [`Subscriber::subscribe`]), on the node that serves them.
    pub(crate) fn subscribe(
        &self,
        interest: Interest<'_>,
        deadline: Option<Instant>,
    ) -> Result<Subscription> {
        match self {
            Subscribers::One(subscriber) => subscriber.subscribe(interest, deadline),
            Subscribers::PerNode(nodes) => {
                nodes.subscriber_for(interest.channel)?.subscribe(interest, deadline)
            }
        }
    }

    /// Takes the lock's lingering channels back without a round trip (see
    /// [`Subscriber::resume`]).
    pub(crate) fn resume(&self, interest: Interest<'_>) -> Option<Subscription> {
        match self {
            Subscribers::One(subscriber) => subscriber.resume(interest),
            Subscribers::PerNode(nodes) => nodes.subscriber_for(interest.channel).ok()?.resume(interest),
        }
    }

    /// For how much longer `channel` stays subscribed if nobody else waits
    /// on it (see [`Subscriber::listening_for`]).
    pub(crate) fn listening_for(&self, channel: &str) -> Duration {
        match self {
            Subscribers::One(subscriber) => subscriber.listening_for(channel),
            Subscribers::PerNode(nodes) => {
                let nodes = nodes.nodes.lock();
                nodes.values().map(|s| s.listening_for(channel)).max().unwrap_or(Duration::ZERO)
            }
        }
    }

    /// The number of unlock channels subscribed for waiters, over every
    /// node.
    pub(crate) fn channel_count(&self) -> usize {
        match self {
            Subscribers::One(subscriber) => subscriber.channel_count(),
            Subscribers::PerNode(nodes) => nodes.nodes.lock().values().map(|s| s.channel_count()).sum(),
        }
    }

    /// Sets whom every subscriber tells what happens on held locks'
    /// channels (see [`Subscriber::set_holders`]). Set once.
    pub(crate) fn set_holders(&self, holders: Arc<dyn Holders>) {
        match self {
            Subscribers::One(subscriber) => subscriber.set_holders(&holders),
            Subscribers::PerNode(nodes) => {
                let subscribers = nodes.nodes.lock();
                if nodes.holders.set(Arc::clone(&holders)).is_ok() {
                    for subscriber in subscribers.values() {
                        subscriber.set_holders(&holders);
                    }
                }
            }
        }
    }

    /// Listens on held locks' `channels`, each on the node that serves it
    /// (see [`Subscriber::hold_channels`]). Returns the channels subscribed
    /// and confirmed already, and those no node could be found for (to be
    /// asked again later).
    pub(crate) fn hold_channels(&self, channels: &[Arc<str>]) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
        match self {
            Subscribers::One(subscriber) => (subscriber.hold_channels(channels), Vec::new()),
            Subscribers::PerNode(nodes) => {
                let (by_node, unserved) = nodes.by_node(channels);
                let confirmed =
                    by_node.into_iter().flat_map(|(s, channels)| s.hold_channels(&channels)).collect();
                (confirmed, unserved)
            }
        }
    }

    /// Arms removal alarms for `keys`, each on the tracking connection of
    /// the node that serves it (see
    /// [`Tracking::arm`](crate::pubsub::tracking::Tracking::arm)): [`Armed::Fresh`]
    /// when any node's tracking began anew (every key is worth arming
    /// again). Err when a node's tracking connection failed (its keys are
    /// not armed); the other nodes' keys are.
    pub(crate) fn arm(&self, keys: &[Arc<str>]) -> Result<(Armed, Vec<i64>)> {
        match self {
            Subscribers::One(subscriber) => subscriber.tracking().arm(keys),
            Subscribers::PerNode(nodes) => {
                let (by_node, _unserved) = nodes.by_node(keys);
                let mut failed = None;
                let mut armed = Armed::Same;
                let mut ttls: HashMap<Arc<str>, i64> = HashMap::new();
                for (subscriber, keys) in by_node {
                    match subscriber.tracking().arm(&keys) {
                        Ok((outcome, node_ttls)) => {
                            if outcome == Armed::Fresh {
                                armed = Armed::Fresh;
                            }
                            ttls.extend(keys.into_iter().zip(node_ttls));
                        }
                        Err(e) => failed = Some(e),
                    }
                }
                let ttls = keys.iter().map(|k| ttls.get(k).copied().unwrap_or(-3)).collect();
                failed.map_or(Ok((armed, ttls)), Err)
            }
        }
    }

    /// Sends `packed` on the tracking connection of the node that serves
    /// `key` (see
    /// [`Tracking::call`](crate::pubsub::tracking::Tracking::call)).
    pub(crate) fn call_tracked(
        &self,
        key: &str,
        packed: &[u8],
        replies: usize,
    ) -> Result<(Armed, Vec<Value>)> {
        match self {
            Subscribers::One(subscriber) => subscriber.tracking().call(packed, replies),
            Subscribers::PerNode(nodes) => nodes.subscriber_for(key)?.tracking().call(packed, replies),
        }
    }

    /// Stops listening on held locks' `channels` (see
    /// [`Subscriber::unhold_channels`]).
    pub(crate) fn unhold_channels(&self, channels: &[Arc<str>]) {
        match self {
            Subscribers::One(subscriber) => subscriber.unhold_channels(channels),
            Subscribers::PerNode(nodes) => {
                // Wherever they were subscribed: a slot may have moved since.
                let subscribers: Vec<Arc<Subscriber>> = nodes.nodes.lock().values().cloned().collect();
                for subscriber in subscribers {
                    subscriber.unhold_channels(channels);
                }
            }
        }
    }

    /// The number of pub/sub connections (subscribers) the client has.
    pub(crate) fn connection_count(&self) -> usize {
        match self {
            Subscribers::One(_) => 1,
            Subscribers::PerNode(nodes) => nodes.nodes.lock().len(),
        }
    }

    /// Stops every subscriber.
    pub(crate) fn shut_down(&self) {
        match self {
            Subscribers::One(subscriber) => subscriber.shut_down(),
            Subscribers::PerNode(nodes) => {
                let subscribers = nodes.nodes.lock();
                nodes.shutdown.store(true, Ordering::Release);
                for subscriber in subscribers.values() {
                    subscriber.shut_down();
                }
            }
        }
    }
}
