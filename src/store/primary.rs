//! Where the primary is: the one server of a `redis://` URL, or the master
//! the sentinels name, found again after a failover.
//!
//! Connection openers ask [`Primary::locate`] each time they connect rather
//! than keeping an address, so that after a failover every new connection
//! goes to the new primary without any of them knowing about Sentinel. A
//! node reached through Sentinel is checked on every new connection with
//! `ROLE`: a sentinel can still name a primary it is demoting, and a demoted
//! primary keeps answering PING (it refuses writes with `READONLY`, which
//! `connection.rs` treats like a dropped connection).
//!
//! When the primary moves ([`Primary::observe`] hears of a new address, from
//! a `+switch-master` message or a fresh answer), the client's `on_move`
//! hook retires every command connection and moves the pub/sub connection,
//! which then has every hold verified on the new primary.

use std::io;
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::net::stream::{Address, TlsConfig};
use crate::store::sentinel::{MasterAddr, Sentinels};

/// Where the command and pub/sub connections go.
pub(crate) struct Primary {
    source: Source,
    /// The node connections go to, and whether it is still trusted.
    current: RwLock<Current>,
    /// One discovery at a time: callers that arrive meanwhile take its answer.
    discovering: Mutex<()>,
    /// Called when the primary moved, with the new node.
    on_move: OnceLock<MoveHook>,
}

/// What the client does when the primary moved.
type MoveHook = Box<dyn Fn(&Node) + Send + Sync>;

/// The last node found, and whether connections still go there.
#[derive(Default)]
struct Current {
    node: Option<Arc<Node>>,
    /// False once the node refused a connection or was no master: the next
    /// connection asks the sentinels first.
    trusted: bool,
}

impl Current {
    fn trusted(&self) -> Option<Arc<Node>> {
        self.node.as_ref().filter(|_| self.trusted).cloned()
    }
}

enum Source {
    /// A URL's server: it never moves.
    Fixed,
    /// The master the sentinels name.
    Sentinel(Box<Discovered>),
}

/// A primary found through Sentinel: nodes are made from `template` (the
/// primary's credentials, database, socket settings and whether it speaks
/// TLS) and the address a sentinel gives, by `open` (which adds the TLS
/// certificates when there are some).
struct Discovered {
    sentinels: Sentinels,
    template: redis::ConnectionInfo,
    open: OpenNode,
}

/// Makes a node from its connection description (with the builder's TLS
/// settings, when there are some).
pub(crate) type OpenNode = Box<dyn Fn(redis::ConnectionInfo) -> Result<Node> + Send + Sync>;

/// One Redis server to open connections to.
#[derive(Debug)]
pub(crate) struct Node {
    client: redis::Client,
    /// Where keyholder's own command connections go (see
    /// `store/connection.rs`); credentials and database are the client's.
    address: Address,
}

impl Node {
    /// The node `client` describes, reached over TLS with `tls` when its
    /// URL says `rediss://`.
    pub(crate) fn new(client: redis::Client, tls: Option<TlsConfig>) -> Result<Node> {
        let address = Address::of(client.get_connection_info(), tls)?;
        Ok(Node { client, address })
    }

    /// Where the node listens.
    pub(crate) fn address(&self) -> &Address {
        &self.address
    }

    /// The redis-rs client that opens connections to the node.
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// The node's address and settings.
    pub(crate) fn info(&self) -> &redis::ConnectionInfo {
        self.client.get_connection_info()
    }
}

impl std::fmt::Debug for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current.read().node.as_ref().map(|n| n.info().addr().to_string());
        f.debug_struct("Primary")
            .field("discovered", &self.is_discovered())
            .field("current", &current)
            .finish_non_exhaustive()
    }
}

impl Primary {
    /// The server of a URL.
    pub(crate) fn fixed(node: Node) -> Primary {
        Primary::new(Source::Fixed, Some(Arc::new(node)))
    }

    /// The master `sentinels` name, reached with `template`'s settings
    /// through clients `open` makes. No I/O: the first
    /// [`locate`](Primary::locate) asks the sentinels.
    pub(crate) fn sentinel(sentinels: Sentinels, template: redis::ConnectionInfo, open: OpenNode) -> Primary {
        Primary::new(Source::Sentinel(Box::new(Discovered { sentinels, template, open })), None)
    }

    fn new(source: Source, node: Option<Arc<Node>>) -> Primary {
        let trusted = node.is_some();
        Primary {
            source,
            current: RwLock::new(Current { node, trusted }),
            discovering: Mutex::new(()),
            on_move: OnceLock::new(),
        }
    }

    /// Sets the hook called (on the thread that noticed) each time the
    /// primary moves. Set once, before the client starts its threads.
    pub(crate) fn on_move(&self, hook: impl Fn(&Node) + Send + Sync + 'static) {
        let _ = self.on_move.set(Box::new(hook));
    }

    /// The address of the server connected to now, if one is known (no
    /// I/O: a Sentinel primary not located yet, or lost, has none).
    pub(crate) fn known_address(&self) -> Option<String> {
        self.current.read().node.as_ref().map(|node| node.address().shown())
    }

    /// True when the primary is found through Sentinel.
    pub(crate) fn is_discovered(&self) -> bool {
        matches!(self.source, Source::Sentinel(_))
    }

    /// The node to connect to: the known one, or, when there is none (at
    /// first, or after [`lost`](Primary::lost)), the one the sentinels name.
    pub(crate) fn locate(&self) -> redis::RedisResult<Arc<Node>> {
        if let Some(node) = self.current.read().trusted() {
            return Ok(node);
        }
        let Source::Sentinel(discovered) = &self.source else {
            return Err(io::Error::other("no server to connect to").into());
        };
        let _one_at_a_time = self.discovering.lock();
        if let Some(node) = self.current.read().trusted() {
            return Ok(node);
        }
        let addr = discovered.sentinels.ask()?;
        self.observe(addr).map_err(|e| io::Error::other(e.to_string()).into())
    }

    /// The sentinels (or a `+switch-master` message) name `addr` as the
    /// primary: connect there from now on, and if that is a move, call the
    /// `on_move` hook.
    pub(crate) fn observe(&self, (host, port): MasterAddr) -> Result<Arc<Node>> {
        let Source::Sentinel(discovered) = &self.source else {
            return Err(Error::invalid_config("a fixed primary does not move".to_owned()));
        };
        let mut current = self.current.write();
        let same = current.node.as_ref().filter(|node| is_at(node.info().addr(), &host, port));
        if let Some(node) = same.cloned() {
            // The same node again (named anew after it refused a
            // connection, say): not a move.
            current.trusted = true;
            return Ok(node);
        }
        let node = Arc::new((discovered.open)(at_address(&discovered.template, host, port))?);
        let previous = current.node.replace(Arc::clone(&node));
        current.trusted = true;
        drop(current);
        // The first discovery is not a move.
        if previous.is_some() {
            log::info!("keyholder: the primary moved to {}", node.info().addr());
            if let Some(hook) = self.on_move.get() {
                hook(&node);
            }
        }
        Ok(node)
    }

    /// `node` refused a connection, or is no longer a master: ask the
    /// sentinels again on the next [`locate`](Primary::locate). Does nothing
    /// for a fixed primary, or when another node is current already.
    pub(crate) fn lost(&self, node: &Arc<Node>) {
        if !self.is_discovered() {
            return;
        }
        let mut current = self.current.write();
        if current.node.as_ref().is_some_and(|c| Arc::ptr_eq(c, node)) {
            current.trusted = false;
        }
    }

    /// Asks sentinel `at` where the master is (the sentinel watch has just
    /// subscribed to it) and follows the answer.
    pub(crate) fn ask_sentinel(&self, at: usize) {
        let Source::Sentinel(discovered) = &self.source else { return };
        match discovered.sentinels.ask_at(at) {
            Ok(Some(addr)) => self.observe_logged(addr),
            Ok(None) => log::warn!("keyholder: sentinel {at} does not know the master"),
            Err(e) => log::debug!("keyholder: sentinel {at} did not answer: {e}"),
        }
    }

    /// [`observe`](Primary::observe), for callers that can only log.
    pub(crate) fn observe_logged(&self, addr: MasterAddr) {
        if let Err(e) = self.observe(addr) {
            log::warn!("keyholder: {e}");
        }
    }

    /// The sentinel to listen to first: the one that answered last.
    pub(crate) fn preferred_sentinel(&self) -> usize {
        match &self.source {
            Source::Sentinel(discovered) => discovered.sentinels.preferred(),
            Source::Fixed => 0,
        }
    }

    /// The primary could not be reached (the pub/sub connection failed to
    /// connect): ask the sentinels where it is now, which moves the client if
    /// they name another node. Does nothing for a fixed primary.
    pub(crate) fn recheck(&self) {
        if !self.is_discovered() {
            return;
        }
        self.current.write().trusted = false;
        if let Err(e) = self.locate() {
            log::debug!("keyholder: no sentinel named the primary: {e}");
        }
    }
}

/// `template`'s settings (credentials, database, socket settings, and TLS
/// when it speaks TLS) for the node at `host:port`: a node named by a
/// sentinel or by a cluster's slot map.
pub(crate) fn at_address(template: &redis::ConnectionInfo, host: String, port: u16) -> redis::ConnectionInfo {
    let addr = match template.addr() {
        redis::ConnectionAddr::TcpTls { insecure, .. } => {
            redis::ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: None }
        }
        _ => redis::ConnectionAddr::Tcp(host, port),
    };
    template.clone().set_addr(addr)
}

/// True when `addr` is `host:port`, over TCP or TLS.
fn is_at(addr: &redis::ConnectionAddr, host: &str, port: u16) -> bool {
    match addr {
        redis::ConnectionAddr::Tcp(h, p) | redis::ConnectionAddr::TcpTls { host: h, port: p, .. } => {
            h == host && *p == port
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    fn discovered() -> Primary {
        let timeout = Duration::from_secs(1);
        let sentinels = Sentinels::new(&["redis://127.0.0.1:1".to_owned()], "m", timeout, timeout).unwrap();
        let template = redis::IntoConnectionInfo::into_connection_info("redis://:pw@127.0.0.1:1/3").unwrap();
        let open: OpenNode = Box::new(|info| {
            Node::new(redis::Client::open(info).map_err(|e| Error::invalid_config(e.to_string()))?, None)
        });
        Primary::sentinel(sentinels, template, open)
    }

    fn port_of(node: &Node) -> u16 {
        match node.info().addr() {
            redis::ConnectionAddr::Tcp(_, port) => *port,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_a_new_address_is_a_move() {
        let primary = discovered();
        let moves = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&moves);
        primary.on_move(move |node| {
            assert_eq!(port_of(node), 7001);
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let first = primary.observe(("127.0.0.1".to_owned(), 7000)).unwrap();
        assert_eq!(moves.load(Ordering::SeqCst), 0, "the first discovery is not a move");
        assert!(Arc::ptr_eq(&first, &primary.observe(("127.0.0.1".to_owned(), 7000)).unwrap()));
        // Given up on, then named again: the same node, not a move.
        primary.lost(&first);
        assert!(primary.current.read().trusted().is_none());
        primary.observe(("127.0.0.1".to_owned(), 7000)).unwrap();
        assert_eq!(moves.load(Ordering::SeqCst), 0);
        assert!(Arc::ptr_eq(&first, &primary.locate().unwrap()), "trusted again without I/O");

        let second = primary.observe(("127.0.0.1".to_owned(), 7001)).unwrap();
        assert_eq!(moves.load(Ordering::SeqCst), 1);
        // A connection that failed on the old node does not distrust the new.
        primary.lost(&first);
        assert!(Arc::ptr_eq(&second, &primary.locate().unwrap()));
    }

    #[test]
    fn a_node_keeps_the_template_credentials_and_database() {
        let primary = discovered();
        let node = primary.observe(("10.0.0.9".to_owned(), 6390)).unwrap();
        let settings = node.info().redis_settings();
        assert_eq!((settings.password(), settings.db()), (Some("pw"), 3));
        assert_eq!(node.info().addr(), &redis::ConnectionAddr::Tcp("10.0.0.9".to_owned(), 6390));
    }

    #[test]
    fn a_fixed_primary_never_moves_nor_asks() {
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let primary = Primary::fixed(Node::new(client, None).unwrap());
        let node = primary.locate().unwrap();
        primary.lost(&node);
        assert!(Arc::ptr_eq(&node, &primary.locate().unwrap()));
        assert!(primary.observe(("127.0.0.1".to_owned(), 2)).is_err());
    }
}
