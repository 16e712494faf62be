//! From the builder's settings to the nodes a client connects to: a URL's
//! server, the primary the sentinels name (followed across failovers), or a
//! cluster's node template with the builder's TLS settings; and the checks
//! `build()` makes before it hands out locks (a URL refused with an error
//! that says why, the subscription check every waiter's channels need). `wiring.rs` makes the connections from these.

use std::sync::Arc;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::net::stream::TlsConfig;
use crate::pubsub::sentinel_watch::{SentinelWatch, Switches};
use crate::pubsub::target::Target;
use crate::store::batch::{Aof, Wait};
use crate::store::lanes::Session;
use crate::store::primary::{Node, OpenNode, Primary};
use crate::store::sentinel::Sentinels;

/// Where the client's primary is, and the pub/sub connection's TLS
/// configuration: a URL's server, or the master the sentinels name.
pub(super) fn primary_of(config: &Config, connection_name: &str) -> Result<PrimaryParts> {
    let nodelay = redis::io::tcp::TcpSettings::default().set_nodelay(true);
    if let Some(sentinel) = &config.sentinel {
        let watched = sentinel
            .urls
            .iter()
            .map(|url| {
                let client = redis::Client::open(url.as_str()).map_err(|e| bad_url(url, e))?;
                Target::from_info(client.get_connection_info(), format!("{connection_name}:sentinel"), None)
            })
            .collect::<Result<Vec<_>>>()?;
        let watch = SentinelWatch::new(
            watched,
            sentinel.master.clone(),
            config.connect_timeout,
            config.command_timeout,
        );
        let sentinels =
            Sentinels::new(&sentinel.urls, &sentinel.master, config.connect_timeout, config.command_timeout)?;
        let node = &config.node;
        let mut settings = redis::RedisConnectionInfo::default().set_db(node.database);
        if let Some(username) = &node.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &node.password {
            settings = settings.set_password(password);
        }
        // The address is the sentinels' to give; this one is never used.
        let (host, port) = ("127.0.0.1".to_owned(), 6379);
        let addr = if node.tls {
            redis::ConnectionAddr::TcpTls { host, port, insecure: false, tls_params: None }
        } else {
            redis::ConnectionAddr::Tcp(host, port)
        };
        let template = redis::IntoConnectionInfo::into_connection_info(addr)
            .map_err(|e| Error::invalid_config(e.to_string()))?
            .set_redis_settings(settings)
            .set_tcp_settings(nodelay);
        let (open, pubsub_tls) = node_opener(config, &template)?;
        let primary = Primary::sentinel(sentinels, template, open);
        return Ok((Arc::new(primary), pubsub_tls, Some(Arc::new(watch))));
    }
    let redis_client = redis::Client::open(config.url.as_str()).map_err(|e| bad_url(&config.url, e))?;
    let info = redis_client.get_connection_info().clone().set_tcp_settings(nodelay);
    #[cfg(feature = "tls")]
    let (redis_client, pubsub_tls) = crate::tls::apply(info, &config.tls)?;
    #[cfg(not(feature = "tls"))]
    let (redis_client, pubsub_tls) = (redis::Client::open(info).map_err(|e| bad_url(&config.url, e))?, None);
    let node = Node::new(redis_client, pubsub_tls.as_ref().cloned())?;
    Ok((Arc::new(Primary::fixed(node)), pubsub_tls, None))
}

/// Makes each node's redis-rs client from its connection description (with
/// the builder's TLS certificates, when there are some), and the pub/sub
/// connections' TLS configuration, for nodes found through Sentinel or a
/// cluster's slot map.
pub(super) fn node_opener(
    config: &Config,
    template: &redis::ConnectionInfo,
) -> Result<(OpenNode, Option<TlsConfig>)> {
    #[cfg(feature = "tls")]
    {
        let options = config.tls.clone();
        let pubsub_tls = crate::tls::apply(template.clone(), &options)?.1;
        let open: OpenNode = Box::new(move |info| {
            let (client, tls) = crate::tls::apply(info, &options)?;
            Node::new(client, tls)
        });
        Ok((open, pubsub_tls))
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = (config, template);
        let open: OpenNode = Box::new(|info| {
            Node::new(redis::Client::open(info).map_err(|e| Error::invalid_config(e.to_string()))?, None)
        });
        Ok((open, None))
    }
}

/// The replica acknowledgement every write asks for, if any.
pub(super) fn wait_of(config: &Config) -> Option<Wait> {
    config.replica_acks.map(|acks| Wait {
        replicas: acks.replicas,
        timeout_ms: crate::lease::millis_ceil(acks.timeout),
        aof: acks.aof_local.map(|local| Aof { local }),
    })
}

/// Fails `build()` when the server (`node`, named in the error) refuses
/// the `WAITAOF` the client was built to send after every write:
/// `InvalidConfig` for a server without the command (older than Redis
/// 7.2) or, with the local fsync, without `appendonly yes`;
/// `AccessDenied` for an ACL that denies it. Asking later, at the first
/// lock, would fail or flag every write of a client that cannot work.
/// Nothing to check for `WAIT`.
pub(super) fn check_wait(session: &mut Session<'_>, wait: Option<Wait>, node: &str) -> Result<()> {
    let Some(probe) = wait.and_then(|wait| wait.probe()) else { return Ok(()) };
    let Err(e) = session.query::<redis::Value>(&probe)? else { return Ok(()) };
    if e.code() == Some("NOPERM") {
        return Err(Error::access_denied_to(format!(
            "this user may not run WAITAOF, which replica_acks_aof sends after every write ({node}): {e}"
        )));
    }
    let why = if e.to_string().to_ascii_lowercase().contains("unknown command") {
        "does not have WAITAOF (Redis 7.2 or newer and Valkey have it; use replica_acks, which waits with WAIT)"
    } else {
        "refuses WAITAOF"
    };
    Err(Error::invalid_config(format!("replica_acks_aof: {node} {why}: {e}")))
}

/// A channel name for probes: never subscribed or published to by locks.
pub(super) const PROBE_CHANNEL: &str = "keyholder:access-check";

/// Where the primary is, the pub/sub connection's TLS configuration, and,
/// through Sentinel, the watch that follows the master.
pub(super) type PrimaryParts = (Arc<Primary>, Option<TlsConfig>, Option<Arc<SentinelWatch>>);

/// Follows the sentinel watch's reports (see `pubsub/sentinel_watch.rs`).
pub(super) struct FollowPrimary(pub(super) Arc<Primary>);

impl Switches for FollowPrimary {
    fn subscribed(&self, sentinel: usize) {
        self.0.ask_sentinel(sentinel);
    }

    fn switched(&self, host: String, port: u16) {
        self.0.observe_logged((host, port));
    }
}

/// The primary's node, found (through Sentinel) after the access check.
pub(super) fn locate(primary: &Primary) -> Result<Arc<Node>> {
    primary.locate().map_err(Error::redis)
}

/// A URL redis-rs refused, or a `rediss://` one without the `tls` feature.
/// Fails `build()` with `AccessDenied` when the server refuses this client
/// the subscriptions every wait needs: Redisson's unlock channels and
/// keyholder's wake channels (an ACL user's `&pattern`s, or `-subscribe`).
pub(super) fn check_subscriptions(target: &Target, client_id: &str, config: &Config) -> Result<()> {
    const PROBE: &str = PROBE_CHANNEL;
    let channels = [crate::names::unlock_channel(PROBE), crate::names::wake_channel(PROBE, client_id)];
    let channels = [channels[0].as_str(), channels[1].as_str()];
    match target.refused_subscription(config.connect_timeout, config.command_timeout, &channels) {
        Ok(None) => Ok(()),
        Ok(Some(refusal)) => Err(Error::access_denied_to(format!(
            "this user may not subscribe to keyholder's channels ({}, {}), which waiting needs: {refusal}",
            channels[0], channels[1]
        ))),
        Err(e) => Err(Error::connect(e)),
    }
}

pub(super) fn bad_url(url: &str, e: redis::RedisError) -> Error {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    if !cfg!(feature = "tls") && ["rediss", "valkeys"].contains(&scheme.to_ascii_lowercase().as_str()) {
        return Error::invalid_config(format!("{scheme}:// URLs need keyholder's `tls` cargo feature"));
    }
    match crate::config::check_url(url) {
        Err(said) => said,
        Ok(()) => Error::invalid_config(format!(
            "bad redis url {:?}: it does not parse (is its user, password or database index malformed?): {}",
            crate::config::without_credentials(url),
            e.detail().unwrap_or_else(|| e.category())
        )),
    }
}
