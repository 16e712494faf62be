//! The integration suite: one test binary, one module per behaviour area, all
//! against real Redis (each test starts its own private `redis-server`, or
//! uses the Redis Cluster the binary's tests share, `RedisCluster::shared`).
//! One binary instead of one per file, as `rust-postgres` does: cargo
//! compiles `tests/common` into each test binary and links the library and
//! its dependencies into each, and 44 binaries made most of the build
//! after a change to `src/`.
//!
//! Run one area with a filter: `cargo test --test suite fair_lock::`.
//! Child processes re-run this binary with `--exact <module>::<test>`
//! (`common::child`), so a child test's name carries its module.
//!
//! Three test binaries stay apart: `tests/lock.rs` (.ci/test runs it again
//! in the default build, without `tls`), and `tests/observe_metrics.rs` and
//! `tests/observe_tracing.rs` (each installs a process-global recorder or
//! subscriber that would see every other test's locks). `tests/examples.rs`
//! is apart too: it runs `cargo build` for the examples, which must not
//! share the machine with the suite's timing-bound tests.

#[path = "../common/mod.rs"]
mod common;
#[path = "../support/redisson_fair.rs"]
mod redisson_fair;
#[path = "../support/redisson_lock.rs"]
mod redisson_lock;

// Lua contracts: each script called directly on a raw connection.
mod script_headers;
mod scripts;
mod scripts_count_down_latch;
mod scripts_fair;
mod scripts_queue;
mod scripts_red_lock;
mod scripts_rwlock;
mod scripts_seams;
mod scripts_semaphore;
mod scripts_spin_lock;

// The kinds and the client on single servers.
mod acl;
mod barging;
mod connections;
mod doctor;
mod election;
mod fair_lock;
mod foreign_unlock;
mod idle;
mod jobs;
mod key_removed;
mod latch;
mod lease;
mod linger;
mod migration;
mod mixed_fleet;
mod mutual_exclusion;
mod non_reentrant;
mod queue;
mod reentrancy;
mod replicas;
mod rwlock;
mod seams;
mod semaphore;
mod shared_connections;
mod spin_lock;
mod token_holds;
mod token_holds_kinds;
mod traps;
mod waitaof;
mod wakeup;

// Several servers: RedLock, MultiLock, Redis Cluster, Sentinel.
mod cluster;
mod cluster_semaphore;
mod multi_lock;
mod redlock;
mod sentinel;

// Faults: Redis stopped, paused or cut off; processes killed and stopped;
// errors that say what went wrong (bad URLs, bad servers, TLS mismatches);
// fencing tokens that never go backwards across restarts and failovers.
mod errors;
mod failures;
mod faults;
mod fencing;
mod outage;
mod processes;

// Optional features.
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_kinds;
#[cfg(feature = "tls")]
mod tls;
