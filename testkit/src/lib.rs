//! The harness shared by keyholder's tests (`tests/`), its demo and its
//! benchmark (`bench/`): a private `redis-server` per test on a free
//! loopback port, a Sentinel set-up (a primary, a replica, three
//! sentinels), a Redis Cluster (three primaries, three replicas), a TCP
//! fault proxy, child processes that run a test binary again, and a store
//! that checks fencing tokens. It does not depend on keyholder itself, so
//! the tests' `keyholder` is the one under test.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod child;
pub mod clock_shim;
pub mod cluster;
pub mod proxy;
pub mod sentinel;
pub mod server;
pub mod store;
#[cfg(feature = "tls")]
pub mod tls;

pub use cluster::RedisCluster;
pub use sentinel::SentinelSet;
#[cfg(feature = "tls")]
pub use server::ClientAuth;
pub use server::{RedisServer, ServerVersion, free_port, server_version};
