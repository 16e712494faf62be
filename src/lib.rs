//! Redisson-compatible reentrant distributed locks on Redis, for synchronous
//! Rust.
//!
//! keyholder replaces the hand-rolled `SET key token NX PX` + sleep-and-retry +
//! Lua compare-and-delete with Redisson's `RLock`: reentrant, kept alive by a
//! watchdog while held, and woken by pub/sub instead of polling. It writes
//! Redisson's own data layout, so Rust and Java services can share a lock.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), keyholder::Error> {
//! let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
//! let lock = client.lock("orders:42")?;        // a handle; no I/O
//!
//! {
//!     let _guard = lock.lock()?;               // blocks until held
//!     let _again = lock.lock()?;               // re-entrant: hold count 2
//! }                                            // both released here
//!
//! if let Some(guard) = lock.try_lock_for(Duration::from_secs(2))? {
//!     // ... guarded work ...
//!     guard.unlock()?;                         // like drop, but returns the error
//! }
//! # Ok(()) }
//! ```
//!
//! # Reentrancy
//!
//! The owner of a lock is a thread of a client: `<client-uuid>:<thread-id>`.
//! The thread that holds a lock may acquire it again without waiting; Redis
//! keeps the count, and each acquisition's guard releases one level. Another
//! thread, or another client, waits until the count is back to zero. Guards
//! are neither `Send` nor `Sync`.
//!
//! # Leases and the watchdog
//!
//! By default ([`Lease::Watchdog`]) a lock has no fixed lease: its key's TTL
//! is the client's watchdog timeout (30 s), which the client's watchdog
//! thread renews every third of it while the lock is held. If the process
//! dies, the lock frees itself within that timeout. With a fixed lease
//! ([`Lease::Fixed`], through [`Client::lock_with_lease`] or
//! [`Lock::with_lease`]) there is no renewal and the lock expires after it.
//!
//! A lease lock cannot stop a holder that pauses longer than its lease. When
//! the client learns that a hold was lost (a renewal refused, the lease
//! deadline passed without renewal, a force unlock by any client, heard on
//! the lock's channel within about a round trip), [`LockGuard::is_lost`]
//! says so without I/O.
//!
//! # Waiting
//!
//! [`Lock::try_lock`] makes one attempt; [`Lock::lock`] waits as long as it
//! takes; [`Lock::try_lock_for`] and [`Lock::try_lock_until`] wait at most so
//! long and return `Ok(None)` when time runs out: not getting a lock in time
//! is an ordinary outcome, not an error.
//!
//! Nobody polls. Threads of one client queue locally for a lock; the thread
//! in front subscribes once for the client and sleeps until it is woken, the
//! holder's remaining lease runs out, or its own deadline. Clients waiting
//! for a lock queue in Redis, and a release serves the next one: it hands
//! the lock over, or wakes that client alone, so an unlock wakes one waiter,
//! not one per client. A lost message costs latency, never correctness. A
//! release hands a contended lock straight to the next local thread for up
//! to the client's fairness window (see [`ClientBuilder::fairness_window`]),
//! and, between clients, may leave it to the releasing client until the
//! first queued client has waited the barging window
//! ([`ClientBuilder::barging_window`]): bounded barging, as `parking_lot`'s
//! eventual fairness.
//!
//! # Fair locks
//!
//! [`Client::fair_lock`] gives a [`FairLock`], Redisson's `RFairLock`: one
//! queue in Redis of every waiting thread of every client (Java's too),
//! served strictly first come, first served; a release wakes (or hands the
//! lock to) the queue's head alone. Its guard, [`FairLockGuard`], has
//! [`LockGuard`]'s strengths (reentrancy, watchdog, lost-hold signals,
//! fencing with [`FairLock::fenced`]); a waiter whose process died is
//! skipped after its wait slot ([`FairLock::with_wait_timeout`]).
//!
//! # Read-write locks
//!
//! [`Client::read_write_lock`] gives a [`ReadWriteLock`], Redisson's
//! `RReadWriteLock` on its own layout: any number of readers
//! ([`ReadWriteLock::read`]) or one writer ([`ReadWriteLock::write`]), both
//! reentrant, with guards released on drop. The writer may also read (a
//! downgrade); a reader asking to write gets
//! [`ErrorKind::InvalidArgument`] at once rather than waiting forever (an
//! upgrade, which Redisson never grants). A waiting keyholder writer holds
//! back new keyholder readers, so a stream of readers cannot starve it; write
//! holds can carry fencing tokens ([`WriteLock::fenced`]).
//!
//! # Semaphores and latches
//!
//! [`Client::semaphore`], [`Client::permit_expirable_semaphore`] and
//! [`Client::count_down_latch`] give Redisson's `RSemaphore`,
//! `RPermitExpirableSemaphore` and `RCountDownLatch` on the same keys and
//! channels, so Java services share them. Permits come in guards that give
//! them back on drop ([`SemaphorePermits`], [`ExpirablePermits`]); expirable
//! permits are renewed by the watchdog while their guard lives, so a holder
//! that dies loses them within the watchdog timeout, and a guard whose
//! permits were reclaimed reports it like a lost lock. Every wait sleeps on
//! the object's channel and is bounded ([`CountDownLatch::await_for`]; no
//! endless `await`).
//!
//! # Other kinds of lock
//!
//! [`Client::spin_lock`] gives a [`SpinLock`]: the same lock without pub/sub,
//! which sleeps a [`BackOff`] between tries (for deployments where pub/sub
//! is unavailable). [`Client::non_reentrant_lock`] and
//! [`Client::non_reentrant_fair_lock`] give Redisson 4.4's non-reentrant
//! twins of [`Lock`] and [`FairLock`]: the same keys, but a holder's second
//! acquire fails with [`ErrorKind::AlreadyHeld`] instead of counting.
//! [`MultiLock`] takes several [`Lock`]s, of any clients,
//! all or none, in an order every process agrees on. [`RedLock`] holds one
//! name on a quorum of N independent masters, with an optional combined
//! fencing token; `docs/redlock.md` says what it does not guarantee.
//!
//! # Run-once jobs
//!
//! [`Client::job`] gives a [`Job`]: a scheduled job that runs on one node at a
//! time with ShedLock's semantics. [`Job::run`] calls its closure only if the
//! lock is free (a held lock means skip, never wait), holds it at most
//! [`Job::at_most`] even if the node hangs, and keeps it at least
//! [`Job::at_least`] after the start, so nodes with skewed clocks do not run
//! the same tick twice; the [`JobOutcome`] says whether it ran, was skipped,
//! or lost its lock while running.
//!
//! # Migrating from hand-rolled locks
//!
//! During a node-by-node rollout, old nodes' `SET key token NX PX` strings and
//! keyholder's hashes meet at the same names. With
//! [`ClientBuilder::migration_mode`] (or [`Lock::with_migration_mode`]) such a
//! string counts as held by a legacy holder: waited on by its PTTL, never
//! modified. `docs/migrating.md` has the rollout.
//!
//! # Operators
//!
//! [`Client::inspect`] tells what sits at a lock's name (a [`LockInfo`]:
//! holders and hold counts, remaining lease, fencing token, waiting
//! subscribers, queued clients), [`Client::list_locks`] finds the locks
//! matching a pattern with `SCAN` (on every primary of a cluster),
//! [`Client::watch`] hands over a lock's unlock messages as they come, and
//! [`Lock::force_unlock`] frees a lock whose holder died.
//! [`Client::doctor`] checks the deployment against the guarantees the
//! locks rely on (eviction, persistence, replication, clocks, the server's
//! version) and hands back a typed [`Report`]. The `keyholder`
//! binary (the `cli` cargo feature) offers them from a shell, as tables or
//! JSON; see `docs/operations.md`.
//!
//! # Errors
//!
//! [`Error`] tells apart Redis and connection failures, releasing what one
//! does not own, a lost hold, a key of another type at the lock's name,
//! invalid arguments and configuration, and a shut-down client. With Redis
//! unreachable every call returns an error within the configured timeouts;
//! a waiting call (`lock()`, `try_lock_for`, a semaphore's `acquire`) first
//! rides out the outage, a restart or a failover, and acquires once Redis
//! is back, for at most [`ClientBuilder::outage_budget`] and its deadline.
//!
//! # How it works
//!
//! One client owns a few command connections shared by all of its threads
//! (the commands of threads that call at once go out together, pipelined),
//! one pub/sub connection with a reader thread (on a Redis Cluster, both
//! per primary), one watchdog thread, one thread that listens for unlocks
//! of the locks the client holds
//! (and, through Sentinel, a thread that listens to a sentinel). Lua scripts
//! under `lua/` acquire, release, hand over, renew and force-unlock
//! atomically, sent by EVALSHA. `docs/design.md` walks through an acquisition, a wait, a renewal
//! and a release; `docs/redisson-compat.md` documents the wire format.
//!
//! # Guarantees and limits
//!
//! Mutual exclusion holds while leases hold: against one Redis primary,
//! between holders whose pauses stay shorter than their lease. A failover
//! with asynchronous replication can lose a lock, unless it was
//! acknowledged by the replica that is promoted
//! ([`ClientBuilder::replica_acks`]). Redis 5 or newer; TCP (`redis://`),
//! TLS (`rediss://`, with the `tls` feature) and Unix-socket
//! (`redis+unix://`) connections, the primary found through Redis
//! Sentinel, or a Redis Cluster.
//!
//! # Redis Cluster
//!
//! [`Client::builder_cluster`] takes seed nodes' URLs; the rest of the API
//! is unchanged. Each call goes to the primary that serves its lock's slot
//! (every key and channel of a lock shares the name's hash tag), on shared
//! connections to that node; waiters listen on shard channels there
//! (`SSUBSCRIBE`, Redis 7+), as Redisson does. The client follows `MOVED`
//! and `ASK` while a slot is moved, reads the slot map again when a
//! primary dies, and verifies every hold after a failover. See
//! `docs/cluster.md`.
//!
//! # Sentinel
//!
//! [`Client::builder_sentinel`] takes the sentinels' URLs and the master's
//! name instead of a URL; the rest of the API is unchanged. The client
//! follows failovers (`+switch-master`, and the sentinels asked again after
//! a refused connection or a `READONLY` reply), moves every connection to
//! the new primary, and verifies every hold there at once, so a holder
//! whose lock did not survive is told at the switch.
//!
//! # TLS
//!
//! With the `tls` cargo feature, `rediss://` URLs carry every connection of
//! a client (the command connections and the pub/sub connection) over TLS
//! (rustls, with the *ring* provider). A private CA and a client
//! certificate for mutual TLS are set on the builder; a certificate either
//! side refuses fails [`ClientBuilder::build`] with [`ErrorKind::Tls`]:
//!
//! ```no_run
//! # #[cfg(feature = "tls")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = keyholder::Client::builder("rediss://redis.internal:6380/")
//!     .tls_ca_certificate(std::fs::read("ca.crt")?)
//!     .tls_client_certificate(std::fs::read("client.crt")?, std::fs::read("client.key")?)
//!     .build()?;
//! # Ok(()) }
//! # #[cfg(not(feature = "tls"))]
//! # fn main() {}
//! ```
//!
//! # Observability
//!
//! With the `tracing` cargo feature, acquire, release and run-once jobs run
//! in `keyholder.acquire`, `keyholder.release` and `keyholder.job` spans
//! (lock name, mode, outcome, wait time, re-entry), with events for waits,
//! lost holds, watchdog renewal rounds and pub/sub reconnects. With the
//! `metrics` feature the same moments are counted through the `metrics`
//! facade, under the names in [`metric_names`]; `label_metrics_by_lock`
//! adds a `lock` label of bounded cardinality (see [`collapse_ids`]).
//! Without the features none of this is compiled in. `docs/observability.md`
//! lists every span, field and metric.

// docs.rs (`--cfg docsrs`, see Cargo.toml): mark the items a cargo feature
// gates ("Available on crate feature tls only").
#![cfg_attr(docsrs, feature(doc_cfg))]

// Layers, top to bottom; a module imports only from below it (or, within
// the top layer, one way). See docs/design.md, "Modules".
// Checking a deployment against the guarantees (over the client and the
// admin's way of sending commands).
mod doctor;
// Leader election, on the lock and the operators' watch.
mod election;
// The kinds of lock (one module each), and the operators' view of them.
mod admin;
mod kinds;
// The client that wires the layers below, and its configuration.
mod client;
mod config;
mod endpoints;
// Waiting without polling: per-channel waits, the reentrant lock's gate.
mod wait;
// Holds, and the watchdog that renews them.
mod holds;
// Connections: pub/sub, and the Redis layer (shared connections, scripts),
// both over the sockets of `net`.
mod net;
mod pubsub;
mod store;
// Vocabulary every layer shares.
mod durations;
mod error;
mod lease;
mod names;
mod owner;
// Spans and metrics (the `tracing` and `metrics` features); no-ops without.
mod observe;
#[cfg(feature = "tls")]
mod tls;

pub use admin::{
    HeldPermit, Holder, ListedLock, LockInfo, LockKind, ReadWriteMode, UnlockMessage, UnlockWatch, Waiter,
    WatchEvent,
};
pub use client::Client;
pub use config::{ClientBuilder, MIN_WATCHDOG_TIMEOUT};
pub use doctor::{Check, DoctorOptions, Figure, Level, Report, Verdict};
pub use election::{
    DEFAULT_ELECTION_LEASE, Election, Leader, Leadership, LeadershipChange, LeadershipChanges,
};
pub use error::{Error, ErrorKind, LostReason, Result};
pub use kinds::count_down_latch::CountDownLatch;
pub use kinds::fair::{
    DEFAULT_FAIR_WAIT_TIMEOUT, FairLock, FairLockGuard, MAX_FAIR_WAIT_TIMEOUT, MIN_FAIR_WAIT_TIMEOUT,
    OwnedFairLockGuard,
};
pub use kinds::family::{
    ByThread, ByToken, Fenced, Guard, Handle, Kind, Ownership, ThreadOwnedHold, TokenOwned,
};
pub use kinds::job::{DEFAULT_JOB_AT_MOST, Job, JobOutcome, JobRun};
pub use kinds::lock::{Lock, LockGuard, OwnedLockGuard};
pub use kinds::multi_lock::{Lost, LostSignals, MultiLock, MultiLockGuard};
pub use kinds::non_reentrant::{
    NonReentrantFairLock, NonReentrantFairLockGuard, NonReentrantLock, NonReentrantLockGuard,
    OwnedNonReentrantFairLockGuard, OwnedNonReentrantLockGuard,
};
pub use kinds::permit_semaphore::{
    ExpirablePermits, MAX_PERMITS_PER_CALL, PermitExpirableSemaphore, PermitId,
};
pub use kinds::red_lock::{RedLock, RedLockGuard};
pub use kinds::rwlock::{
    OwnedReadGuard, OwnedWriteGuard, ReadGuard, ReadLock, ReadWriteLock, WriteGuard, WriteLock,
};
pub use kinds::semaphore::{Semaphore, SemaphorePermits};
pub use kinds::spin_lock::{BackOff, OwnedSpinLockGuard, SpinLock, SpinLockGuard};
pub use lease::{Lease, MAX_LEASE, MIN_LEASE};
pub use names::MAX_NAME_LEN;
pub use observe::{collapse_ids, metric_names};
#[cfg(feature = "metrics")]
pub use observe::{describe_metrics, label_metrics_by_lock};
pub use owner::OwnerToken;

// The README's Rust examples are compiled as doc tests (`no_run`), so the
// first code a new user copies keeps up with the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The kinds of lock, the parameter of [`Handle`], [`Guard`] and
/// [`MultiLock`]: `Handle<kind::Fair>` is a [`FairLock`]. Code that names
/// the aliases never needs these.
pub mod kind {
    pub use crate::kinds::fair::Fair;
    pub use crate::kinds::lock::Reentrant;
    pub use crate::kinds::non_reentrant::NonReentrant;
    pub use crate::kinds::rwlock::{Read, RwSide, Write};
    pub use crate::kinds::spin_lock::Spin;
}
