//! Asking Redis Sentinel where a master is, and hearing when it moves.
//!
//! Two things, both over plain redis-rs connections to the sentinels, each
//! bounded by the client's connect and command timeouts:
//!
//! - [`Sentinels::ask`]: `SENTINEL get-master-addr-by-name`, trying the
//!   sentinels in turn, starting with the one that answered last. Whether
//!   the node named is still a master is checked on every connection opened
//!   to it (`ROLE`, in `primary.rs`): a sentinel may name a primary that has
//!   just been demoted.
//! - [`Sentinels::watch`]: a subscription to `+switch-master` on one
//!   sentinel, which says where the master went the moment a failover ends,
//!   without waiting for a command to fail on the old one. Whenever the
//!   subscription is (re)made, the master is asked for again, since a switch
//!   may have been missed meanwhile.
//!
//! Why not redis-rs's `SentinelClient`: its lookups connect without a
//! timeout, it has no switch notifications, and it would hold the pool's
//! addresses itself, where keyholder needs one answer shared by the pool and
//! the pub/sub connection (see docs/design.md, ADR 30).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, TryRecvError};

use crate::error::{Error, Result};

/// The sentinels of one master.
#[derive(Debug)]
pub(crate) struct Sentinels {
    /// One per sentinel URL, with the sentinels' own credentials.
    nodes: Vec<redis::Client>,
    master: String,
    connect_timeout: Duration,
    command_timeout: Duration,
    /// The sentinel that answered last: asked first next time.
    preferred: AtomicUsize,
}

/// A master's address as a sentinel gives it.
pub(crate) type MasterAddr = (String, u16);

impl Sentinels {
    /// The sentinels at `urls` (`redis://[[user]:password@]host:port`) for
    /// the master named `master`. No I/O.
    pub(crate) fn new(
        urls: &[String],
        master: &str,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Result<Sentinels> {
        if urls.is_empty() {
            return Err(Error::invalid_config("no sentinel addresses were given".to_owned()));
        }
        if master.is_empty() {
            return Err(Error::invalid_config("the sentinel master name is empty".to_owned()));
        }
        let nodes = urls
            .iter()
            .map(|url| {
                let client = redis::Client::open(url.as_str())
                    .map_err(|e| Error::invalid_config(format!("bad sentinel url {url:?}: {e}")))?;
                match client.get_connection_info().addr() {
                    redis::ConnectionAddr::Tcp(..) => Ok(client),
                    other => Err(Error::invalid_config(format!(
                        "keyholder reaches sentinels over redis:// (TCP) URLs; got {other}"
                    ))),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Sentinels {
            nodes,
            master: master.to_owned(),
            connect_timeout,
            command_timeout,
            preferred: AtomicUsize::new(0),
        })
    }

    /// Where the sentinels say the master is: the first answer of the
    /// sentinels asked in turn. Each sentinel costs at most a connect and a
    /// command timeout (a refused connection costs nothing).
    ///
    /// A master name no reachable sentinel knows is
    /// `MasterNameNotFoundBySentinel`; sentinels that refuse the credentials
    /// in their URLs, that refusal; no sentinel reachable, an I/O error.
    pub(crate) fn ask(&self) -> redis::RedisResult<MasterAddr> {
        let first = self.preferred.load(Ordering::Relaxed);
        let mut unknown = false;
        let mut refused: Option<redis::RedisError> = None;
        let mut last: Option<redis::RedisError> = None;
        for offset in 0..self.nodes.len() {
            let at = (first + offset) % self.nodes.len();
            match self.ask_one(&self.nodes[at]) {
                Ok(Some(addr)) => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return Ok(addr);
                }
                Ok(None) => unknown = true,
                Err(e) if refuses_credentials(&e) => refused = Some(e),
                Err(e) => {
                    log::debug!("keyholder: sentinel {} did not answer: {e}", describe(&self.nodes[at]));
                    last = Some(e);
                }
            }
        }
        if unknown {
            return Err(redis::RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "no sentinel knows a master by that name",
                self.master.clone(),
            )));
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        let why = last.map_or_else(String::new, |e| e.to_string());
        Err(io::Error::new(
            io::ErrorKind::NotConnected,
            format!("no sentinel answered for master {:?} (last: {why})", self.master),
        )
        .into())
    }

    fn ask_one(&self, node: &redis::Client) -> redis::RedisResult<Option<MasterAddr>> {
        let mut con = self.connect(node)?;
        redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.master).query(&mut con)
    }

    fn connect(&self, node: &redis::Client) -> redis::RedisResult<redis::Connection> {
        let con = node.get_connection_with_timeout(self.connect_timeout)?;
        con.set_read_timeout(Some(self.command_timeout))?;
        con.set_write_timeout(Some(self.command_timeout))?;
        Ok(con)
    }

    /// Follows the master until `stop` disconnects: subscribes to
    /// `+switch-master` on one sentinel after another, and calls `moved`
    /// with the master's address after each (re)subscription (a switch may
    /// have been missed) and after each switch of this master. Returns
    /// within a connect and a command timeout of `stop`.
    pub(crate) fn watch(&self, stop: &Receiver<()>, moved: impl Fn(MasterAddr)) {
        let mut next = self.preferred.load(Ordering::Relaxed);
        let mut backoff = FIRST_BACKOFF;
        loop {
            let at = next % self.nodes.len();
            next += 1;
            match self.follow(at, stop, &moved) {
                Followed::Stopped => return,
                Followed::Failed(e) => {
                    log::debug!("keyholder: sentinel {} subscription ended: {e}", describe(&self.nodes[at]));
                }
            }
            // Every sentinel in turn at once; then back off, up to a second.
            if next.is_multiple_of(self.nodes.len()) {
                match stop.recv_timeout(backoff) {
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                        backoff = (backoff * 2).min(MAX_BACKOFF)
                    }
                    _ => return,
                }
            }
        }
    }

    /// One subscription to sentinel `at`, until it fails or `stop`
    /// disconnects.
    fn follow(&self, at: usize, stop: &Receiver<()>, moved: &impl Fn(MasterAddr)) -> Followed {
        let node = &self.nodes[at];
        let mut con = match self.connect(node) {
            Ok(con) => con,
            Err(e) => return Followed::Failed(e),
        };
        let mut pubsub = con.as_pubsub();
        if let Err(e) = pubsub.subscribe(SWITCH_CHANNEL) {
            return Followed::Failed(e);
        }
        // Subscribed first, asked second: no switch falls in between. The
        // sentinel that reports switches is asked first by `ask` too: during
        // a failover, a sentinel that has not heard of it yet would name the
        // old primary.
        match self.ask_one(node) {
            Ok(Some(addr)) => {
                self.preferred.store(at, Ordering::Relaxed);
                moved(addr);
            }
            Ok(None) => {}
            Err(e) => return Followed::Failed(e),
        }
        loop {
            if let Err(TryRecvError::Disconnected) = stop.try_recv() {
                return Followed::Stopped;
            }
            match pubsub.get_message() {
                Ok(msg) => {
                    let payload: String = msg.get_payload().unwrap_or_default();
                    if let Some(addr) = parse_switch(&payload, &self.master) {
                        log::info!(
                            "keyholder: sentinel reports master {} moved to {}:{}",
                            self.master,
                            addr.0,
                            addr.1
                        );
                        moved(addr);
                    }
                }
                // A quiet channel is the usual case: make sure the sentinel
                // is still there, and give up on it if a PING goes unanswered.
                Err(e) if e.is_timeout() => {
                    if let Err(TryRecvError::Disconnected) = stop.try_recv() {
                        return Followed::Stopped;
                    }
                    if let Err(e) = pubsub.ping::<redis::Value>() {
                        return Followed::Failed(e);
                    }
                }
                Err(e) => return Followed::Failed(e),
            }
        }
    }
}

/// How a subscription to a sentinel ended.
enum Followed {
    Stopped,
    Failed(redis::RedisError),
}

/// Sentinel's channel for finished failovers.
const SWITCH_CHANNEL: &str = "+switch-master";

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The new address in a `+switch-master` message
/// (`<master name> <old ip> <old port> <new ip> <new port>`), if it is about
/// `master`.
fn parse_switch(payload: &str, master: &str) -> Option<MasterAddr> {
    let fields: Vec<&str> = payload.split(' ').collect();
    let [name, _, _, host, port] = fields.as_slice() else { return None };
    if *name != master {
        return None;
    }
    Some(((*host).to_owned(), port.parse().ok()?))
}

/// True when a sentinel refused this client's credentials (or their
/// absence).
fn refuses_credentials(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

fn describe(node: &redis::Client) -> String {
    node.get_connection_info().addr().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_message_names_the_new_address_of_its_master() {
        assert_eq!(
            parse_switch("orders 10.0.0.1 6379 10.0.0.2 6380", "orders"),
            Some(("10.0.0.2".to_owned(), 6380))
        );
        assert_eq!(parse_switch("other 10.0.0.1 6379 10.0.0.2 6380", "orders"), None);
        assert_eq!(parse_switch("orders 10.0.0.1 6379 10.0.0.2", "orders"), None);
        assert_eq!(parse_switch("orders 10.0.0.1 6379 10.0.0.2 port", "orders"), None);
    }

    #[test]
    fn sentinel_settings_are_checked_before_any_io() {
        let timeout = Duration::from_secs(1);
        let url = vec!["redis://127.0.0.1:26379".to_owned()];
        assert!(Sentinels::new(&[], "m", timeout, timeout).unwrap_err().is_invalid());
        assert!(Sentinels::new(&url, "", timeout, timeout).unwrap_err().is_invalid());
        let bad = vec!["nonsense".to_owned()];
        assert!(Sentinels::new(&bad, "m", timeout, timeout).unwrap_err().is_invalid());
        assert!(Sentinels::new(&url, "m", timeout, timeout).is_ok());
    }
}
