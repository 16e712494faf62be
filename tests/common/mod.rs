//! Shared test harness: a private `redis-server` per test (see `server.rs`)
//! and small helpers.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod proxy;
mod server;

use std::time::{Duration, Instant};

use keyholder::{Client, ClientBuilder};
#[allow(unused_imports)]
pub use server::{RedisServer, free_port};

/// Clients for a test server.
pub trait ServerExt {
    /// A builder with test-friendly timeouts.
    fn builder(&self) -> ClientBuilder;
    /// A client with test-friendly timeouts.
    fn client(&self) -> Client;
}

impl ServerExt for RedisServer {
    fn builder(&self) -> ClientBuilder {
        Client::builder(self.url())
            .connect_timeout(Duration::from_secs(2))
            .command_timeout(Duration::from_secs(2))
    }

    fn client(&self) -> Client {
        self.builder().build().unwrap()
    }
}

/// Reads `INFO` field `field` of section `section` as an integer.
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
}

/// Calls `f` until it returns true or `limit` passes; true if it did.
/// Bounded in time: for waiting on a background effect in tests only.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
