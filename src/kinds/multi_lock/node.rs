//! Which Redis deployment a client talks to, as a string, without I/O.
//!
//! Kinds that span several locks need it twice: a MultiLock orders its
//! locks by (deployment, name), the same order in every process, so two
//! MultiLocks over overlapping sets cannot deadlock; a RedLock refuses two
//! clients of the same master, whose votes would count twice. The identity
//! comes from the client's configuration (a URL's normalised address and
//! database, Sentinel's master name and sentinels, a cluster's seeds), so
//! `redis://localhost:6379` and `redis://127.0.0.1:6379` are two
//! deployments to it: name a server the same way everywhere.

use redis::IntoConnectionInfo;

use crate::client::Client;

/// The deployment `client` talks to: `<host:port>/<db>` for one server,
/// `sentinel:<master>@<sentinels>` through Sentinel, `cluster:<seeds>` for a
/// Redis Cluster (addresses normalised and sorted; no credentials).
pub(crate) fn identity(client: &Client) -> String {
    let config = client.context().config();
    if let Some(seeds) = &config.cluster {
        return format!("cluster:{}", sorted_addresses(&seeds.0));
    }
    if let Some(sentinel) = &config.sentinel {
        return format!(
            "sentinel:{}@{}/{}",
            sentinel.master,
            sorted_addresses(&sentinel.urls),
            config.node.database
        );
    }
    address(&config.url)
}

/// `<host:port>/<db>` (or `<socket path>/<db>`) of a URL; the URL itself
/// when it does not parse (it did when the client was built).
fn address(url: &str) -> String {
    match url.into_connection_info() {
        Ok(info) => format!("{}/{}", info.addr(), info.redis_settings().db()),
        Err(_) => url.to_owned(),
    }
}

fn sorted_addresses(urls: &[String]) -> String {
    let mut addresses: Vec<String> = urls.iter().map(|url| address(url)).collect();
    addresses.sort();
    addresses.dedup();
    addresses.join(",")
}
