//! Wiring a new client: its connections to one server (a URL's, or the
//! primary Sentinel names) or to a Redis Cluster, checked, with the hooks
//! that keep them pointed at the right nodes, and the background threads
//! that read them. `client.rs` assembles the client from what this returns
//! and hands itself back through [`Wired`] once it exists: this module
//! never names the client's state, so the client imports it and not the
//! other way round.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::background::Background;
use super::nodes::{
    FollowPrimary, PROBE_CHANNEL, bad_url, check_subscriptions, check_wait, locate, node_opener, primary_of,
    wait_of,
};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::pubsub::router::{Locate, NodeSubscriberSettings, NodeSubscribers, Primaries, Subscribers};
use crate::pubsub::sentinel_watch::SentinelWatch;
use crate::pubsub::subscriber::Subscriber;
use crate::pubsub::target::Target;
use crate::store::batch::Wait;
use crate::store::cluster::{Cluster, NodeSettings as ClusterNodes, Shard};
use crate::store::connection::{Connector, Generation};
use crate::store::lanes::Lanes;
use crate::store::pool::{NodePool, PoolSettings};
use crate::store::primary::Node;
use crate::store::routes::Routes;
use crate::store::slots::key_slot;

/// The channels a new client's background threads wait on.
pub(crate) struct BackgroundSignals {
    /// Dropped on shutdown.
    pub(crate) stop_tx: Sender<()>,
    pub(crate) stop_rx: Receiver<()>,
    /// A hold with an earlier deadline than the deadline thread waits for
    /// was registered.
    pub(crate) kick_tx: Sender<()>,
    pub(crate) kick_rx: Receiver<()>,
    /// Every hold is worth verifying now.
    pub(crate) verify_tx: Sender<()>,
    pub(crate) verify_rx: Receiver<()>,
}

impl BackgroundSignals {
    pub(crate) fn new() -> BackgroundSignals {
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let (kick_tx, kick_rx) = crossbeam_channel::bounded::<()>(1);
        let (verify_tx, verify_rx) = crossbeam_channel::bounded::<()>(1);
        BackgroundSignals { stop_tx, stop_rx, kick_tx, kick_rx, verify_tx, verify_rx }
    }
}

/// A new client's connections, checked, and what to start once the client
/// exists (hooks that need it, reader threads).
pub(crate) struct Connections {
    pub(crate) routes: Routes,
    pub(crate) subscribers: Subscribers,
    /// Messages go out on shard channels (`SPUBLISH`).
    pub(crate) sharded: bool,
    pub(crate) wait: Option<Wait>,
    pub(crate) on_start: OnStart,
}

/// Run once the client exists, with its stop channel and short id.
pub(crate) type OnStart = Box<dyn FnOnce(&Arc<dyn Wired>, &Receiver<()>, &str) -> Result<()>>;

/// What the wiring needs of the client once it exists: the client
/// implements it (so that this module never names the client's state).
pub(crate) trait Wired: Send + Sync {
    /// The client's pub/sub connections.
    fn subscribers(&self) -> &Subscribers;
    /// The primary moved (a Sentinel failover); `target` is its pub/sub
    /// address.
    fn primary_moved(&self, target: Result<Target>);
    /// Slots of the cluster changed hands.
    fn slots_moved(&self);
    /// Keeps the `+switch-master` subscription, to stop it on shutdown.
    fn keep_sentinel_watch(&self, watch: Arc<SentinelWatch>);
    /// Keeps a background thread, to stop it on shutdown.
    fn keep_thread(&self, thread: Background);
}

/// The connections of a client of one server, or of the primary Sentinel
/// names: the first command connection (with the access check), the
/// subscription check, the pub/sub connection.
pub(crate) fn primary_connections(
    config: &Config,
    connection_name: &Arc<str>,
    uuid: uuid::Uuid,
    signals: &BackgroundSignals,
) -> Result<Connections> {
    let (primary, pubsub_tls, sentinel_watch) = primary_of(config, connection_name)?;
    let pubsub_name = format!("{connection_name}:pubsub");
    let target_of =
        move |node: &Node| Target::from_info(node.info(), pubsub_name.clone(), pubsub_tls.as_ref().cloned());
    // A URL's server is known before any I/O (and a URL keyholder
    // cannot subscribe through is refused before any); through
    // Sentinel, the access check finds the primary.
    let fixed_target = if primary.is_discovered() { None } else { Some(target_of(&*locate(&primary)?)?) };
    let generation = Arc::new(Generation::default());
    let connector = Connector::new(
        Arc::clone(&primary),
        config.connect_timeout,
        config.command_timeout,
        Arc::clone(&generation),
        Arc::clone(connection_name),
    );
    let first = connector.check_access()?;
    let target = match fixed_target {
        Some(target) => target,
        None => target_of(&*locate(&primary)?)?,
    };
    check_subscriptions(&target, &uuid.to_string(), config)?;
    // A command connection found dead (Redis restarted, failed over, or
    // a proxy dropped it) has every hold verified at once, as the pub/sub
    // connection's reconnect does.
    let verify = signals.verify_tx.clone();
    generation.on_dead(move || {
        let _ = verify.try_send(());
    });
    let subscriber = Arc::new(Subscriber::new(
        target,
        config.connect_timeout,
        config.command_timeout,
        config.idle_timeout,
        signals.verify_tx.clone(),
        false,
    ));
    let wait = wait_of(config);
    let pool = NodePool::new(connector, pool_settings(config), "the primary".to_owned());
    let lanes = Arc::new(Lanes::new(
        pool,
        Some(first),
        config.pool_max_size,
        wait,
        config.connect_timeout,
        config.command_timeout,
    ));
    check_wait(&mut lanes.session()?, wait, "the server")?;
    let reader = Arc::clone(&subscriber);
    let first_attempt = config.connect_timeout + config.command_timeout;
    let on_start: OnStart = Box::new(move |client, stop_rx, short_id| {
        if primary.is_discovered() {
            let asked = Arc::clone(&primary);
            reader.on_unreachable(move || asked.recheck());
        }
        let moved = Arc::downgrade(client);
        primary.on_move(move |node| {
            if let Some(client) = moved.upgrade() {
                client.primary_moved(target_of(node));
            }
        });
        if let Some(watch) = sentinel_watch {
            client.keep_sentinel_watch(Arc::clone(&watch));
            let watch_stop = stop_rx.clone();
            let watcher = Background::spawn(format!("keyholder-sentinel-{short_id}"), move || {
                let first = primary.preferred_sentinel();
                watch.run(first, &watch_stop, &FollowPrimary(primary));
            })
            .map_err(|e| Error::spawn("sentinel", e))?;
            client.keep_thread(watcher);
        }
        let subscriber_stop = stop_rx.clone();
        let first = Arc::clone(&reader);
        let thread = Background::spawn(format!("keyholder-pubsub-{short_id}"), move || {
            reader.run(subscriber_stop);
        })
        .map_err(|e| Error::spawn("pub/sub", e))?;
        client.keep_thread(thread);
        first.wait_first_attempt(first_attempt);
        Ok(())
    });
    Ok(Connections {
        routes: Routes::Primary(lanes),
        subscribers: Subscribers::One(subscriber),
        sharded: false,
        wait,
        on_start,
    })
}

/// How each node's command connections are pooled (see `store/pool.rs`).
fn pool_settings(config: &Config) -> PoolSettings {
    PoolSettings {
        max_size: config.pool_max_size,
        min_idle: config.min_idle,
        idle_timeout: config.idle_timeout,
        max_lifetime: config.max_lifetime,
        connect_timeout: config.connect_timeout,
    }
}

/// The connections of a Redis Cluster client: the slot map and the access
/// check (see `store/cluster.rs`), whether the servers have shard
/// channels, the subscription check, and a pub/sub connection per node,
/// opened when a thread first waits for a lock there.
pub(crate) fn cluster_connections(
    config: &Config,
    connection_name: &Arc<str>,
    uuid: uuid::Uuid,
    signals: &BackgroundSignals,
    short_id: &str,
) -> Result<Connections> {
    let urls = config.cluster.as_ref().map(|seeds| seeds.0.as_slice()).unwrap_or_default();
    let nodelay = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    let mut seeds = Vec::with_capacity(urls.len());
    let mut template = None;
    for url in urls {
        let info =
            redis::Client::open(url.as_str()).map_err(|e| bad_url(url, e))?.get_connection_info().clone();
        match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) | redis::ConnectionAddr::TcpTls { host, port, .. } => {
                seeds.push((host.clone(), *port));
            }
            _ => return Err(Error::invalid_config(format!("a cluster node is reached over TCP, not {url}"))),
        }
        if info.redis_settings().db() != 0 {
            return Err(Error::invalid_config("a Redis Cluster has database 0 only".to_owned()));
        }
        template.get_or_insert(info.set_tcp_settings(nodelay.clone()));
    }
    let Some(template) = template else {
        return Err(Error::invalid_config("a cluster client needs at least one seed node URL".to_owned()));
    };
    let (open, pubsub_tls) = node_opener(config, &template)?;
    let wait = wait_of(config);
    let cluster = Arc::new(Cluster::new(
        seeds,
        ClusterNodes {
            template,
            open,
            connect_timeout: config.connect_timeout,
            command_timeout: config.command_timeout,
            lanes: config.pool_max_size,
            pool: pool_settings(config),
            wait,
            name: Arc::clone(connection_name),
        },
    ));
    let verify = signals.verify_tx.clone();
    cluster.on_dead(move || {
        let _ = verify.try_send(());
    });
    cluster.start()?;
    // Redisson's AUTO mode: shard channels when the servers have them.
    let sharded = match config.sharded_pubsub {
        Some(sharded) => sharded,
        None => {
            let mut session = cluster.session(PROBE_CHANNEL)?;
            session.query::<redis::Value>(redis::cmd("PUBSUB").arg("SHARDNUMSUB"))?.is_ok()
        }
    };
    for shard in cluster.shards() {
        check_wait(&mut shard.session()?, wait, &format!("the node {}:{}", shard.addr.0, shard.addr.1))?;
    }
    let pubsub_name = format!("{connection_name}:pubsub");
    let target_of = Arc::new(move |shard: &Shard| {
        Target::from_info(&shard.info, pubsub_name.clone(), pubsub_tls.as_ref().cloned())
    });
    check_subscriptions(&target_of(&*cluster.shard_of_slot(0)?)?, &uuid.to_string(), config)?;
    let node = |shard: &Shard, target_of: &dyn Fn(&Shard) -> Result<Target>| {
        Some((format!("{}:{}", shard.addr.0, shard.addr.1), target_of(shard).ok()?))
    };
    let (located, targets) = (Arc::clone(&cluster), Arc::clone(&target_of));
    let locate: Locate =
        Box::new(move |channel| node(&*located.shard_of_slot(key_slot(channel.as_bytes())).ok()?, &*targets));
    let listed = Arc::clone(&cluster);
    let primaries: Primaries =
        Box::new(move || listed.shards().iter().filter_map(|shard| node(shard, &*target_of)).collect());
    let refreshed = Arc::clone(&cluster);
    let subscribers = NodeSubscribers::new(
        locate,
        primaries,
        NodeSubscriberSettings {
            sharded,
            connect_timeout: config.connect_timeout,
            command_timeout: config.command_timeout,
            idle_timeout: config.idle_timeout,
            reconnected: signals.verify_tx.clone(),
            unreachable: Arc::new(move || refreshed.refresh_soon()),
            stop: signals.stop_rx.clone(),
            thread_prefix: format!("keyholder-pubsub-{short_id}"),
        },
    );
    let hooked = Arc::clone(&cluster);
    let first_attempt = config.connect_timeout + config.command_timeout;
    let on_start: OnStart = Box::new(move |client, _, _| {
        if let Subscribers::PerNode(nodes) = client.subscribers() {
            nodes.watch();
            nodes.wait_first_attempts(first_attempt);
        }
        let moved = Arc::downgrade(client);
        hooked.on_change(move || {
            if let Some(client) = moved.upgrade() {
                client.slots_moved();
            }
        });
        Ok(())
    });
    Ok(Connections {
        routes: Routes::Cluster(cluster),
        subscribers: Subscribers::PerNode(Box::new(subscribers)),
        sharded,
        wait,
        on_start,
    })
}
