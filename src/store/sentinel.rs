//! Asking Redis Sentinel where a master is: `SENTINEL
//! get-master-addr-by-name` over plain redis-rs connections, trying the
//! sentinels in turn, starting with the one that answered last (or that the
//! sentinel watch listens to), each bounded by the client's connect and
//! command timeouts. Whether the node named is still a master is checked on
//! every connection opened to it (`ROLE`, in `primary.rs`): a sentinel may
//! name a primary that has just been demoted. Hearing when the master moves
//! is `pubsub/sentinel_watch.rs`'s part.
//!
//! Why not redis-rs's `SentinelClient`: its lookups connect without a
//! timeout, and it would hold the command connections' addresses itself, where
//! keyholder needs one answer shared by them and the pub/sub connection (see
//! docs/reference/decisions.md, ADR 31).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::error::reaching::{NetError, What};
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
        let tried: Vec<String> = self.nodes.iter().map(describe).collect();
        let what = What::NoSentinel { master: self.master.clone() };
        let none = match last {
            Some(last) => NetError::caused(tried.join(", "), what, io::Error::other(last)),
            None => NetError::new(tried.join(", "), what),
        };
        Err(none.peer("the sentinels").into())
    }

    /// Asks sentinel `at` alone (the one the sentinel watch listens to:
    /// during a failover, a sentinel that has not heard of it yet would name
    /// the old primary); it is asked first from now on.
    pub(crate) fn ask_at(&self, at: usize) -> redis::RedisResult<Option<MasterAddr>> {
        let Some(node) = self.nodes.get(at) else { return Ok(None) };
        let addr = self.ask_one(node)?;
        if addr.is_some() {
            self.preferred.store(at, Ordering::Relaxed);
        }
        Ok(addr)
    }

    /// The sentinel that answered last.
    pub(crate) fn preferred(&self) -> usize {
        self.preferred.load(Ordering::Relaxed)
    }

    /// What each sentinel says of the master (`SENTINEL MASTER`: its
    /// `down-after-milliseconds`, `failover-timeout`, `quorum`, the other
    /// sentinels it knows), by sentinel (`host:port`), in the order they
    /// were given; a sentinel that could not be reached or refused, its
    /// error. For the doctor: every sentinel is asked, each bounded by the
    /// connect and command timeouts.
    pub(crate) fn masters(&self) -> Vec<(String, redis::RedisResult<redis::Value>)> {
        self.nodes
            .iter()
            .map(|node| {
                let reply = self.connect(node).and_then(|mut con| {
                    redis::cmd("SENTINEL").arg("MASTER").arg(&self.master).query::<redis::Value>(&mut con)
                });
                (describe(node), reply)
            })
            .collect()
    }

    fn ask_one(&self, node: &redis::Client) -> redis::RedisResult<Option<MasterAddr>> {
        let mut con = self.connect(node)?;
        redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.master).query(&mut con)
    }

    fn connect(&self, node: &redis::Client) -> redis::RedisResult<redis::Connection> {
        let con =
            node.get_connection_with_timeout(self.connect_timeout).map_err(
                |e| match NetError::of_redis_rs(describe(node), self.connect_timeout, &e) {
                    Some(unreachable) => unreachable.peer("the sentinel").into(),
                    None => e,
                },
            )?;
        con.set_read_timeout(Some(self.command_timeout))?;
        con.set_write_timeout(Some(self.command_timeout))?;
        Ok(con)
    }
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
