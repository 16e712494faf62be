//! What a kind sees of its client: a narrow view instead of the client's
//! state (issue 22, item 2).
//!
//! A kind needs four things from the client, and this view gives exactly
//! those: **calls** ([`Calls`]: a script on the node of a key, sent again on
//! a fresh connection only when that is safe, with the replicas'
//! acknowledgement the client requires), **waits** ([`Waits`]: the channel
//! waits, the subscriber, the ride through an outage), **holds** ([`Holds`]:
//! hold ids, the watchdog, the renewers), and the client's id and config.
//! Kinds written against it do not depend on how the client stores these,
//! so the client can change behind them. The semaphores, the count-down
//! latch and run-once jobs use it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::Value;

use super::Inner;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::holds::hold::Hold;
use crate::holds::renew::{OnLost, Renew};
use crate::names;
use crate::pubsub::router::Subscribers;
use crate::store::eval::{Call, LuaScript};
use crate::store::lanes::Session;
use crate::store::scripts::Scripts;
use crate::wait::channel::{ChannelWait, Wakes};
use crate::wait::entry::Entry;
use crate::wait::outage::Outage;
use crate::wait::owed::OwedWakes;

/// A kind's view of its client (see the module docs).
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    inner: &'a Inner,
}

/// Script calls on the client's connections.
#[derive(Clone, Copy)]
pub(crate) struct Calls<'a> {
    inner: &'a Inner,
}

/// The client's waiting machinery.
#[derive(Clone, Copy)]
pub(crate) struct Waits<'a> {
    inner: &'a Inner,
}

/// The client's holds: ids, the watchdog, the renewers.
#[derive(Clone, Copy)]
pub(crate) struct Holds<'a> {
    inner: &'a Inner,
}

/// Whether a call may be sent again on a new connection when the first
/// one died under it (see [`Calls::with_live_conn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Safe to repeat: a read, or a write whose second run changes nothing.
    Safe,
    /// Not safe (a count changed twice): sent once.
    Once,
}

/// An unlock latch: the outcome of a release request, kept for its retry
/// (see `kinds/latch.rs`). A script that takes one checks it first (see
/// `lua/lock/release.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latch<'a> {
    /// The owner's latch key for the lock.
    pub(crate) key: &'a str,
    pub(crate) ttl_ms: u64,
    /// Unique per release request; a retry sends the same.
    pub(crate) request: u64,
    pub(crate) retry: bool,
}

impl<'a> Context<'a> {
    pub(super) fn new(inner: &'a Inner) -> Self {
        Context { inner }
    }

    /// The client id (a UUID), the first half of every owner id it writes.
    pub(crate) fn id(&self) -> &'a str {
        &self.inner.id
    }

    /// The client id as a number, for thread-local records keyed by client.
    pub(crate) fn uuid(&self) -> u128 {
        self.inner.uuid.as_u128()
    }

    /// Runs `unlock`, a force unlock of the lock at `name` that returns
    /// whether it deleted one, and marks this client's holds of it from
    /// before as lost ([`LostReason::Gone`](crate::LostReason::Gone)).
    pub(crate) fn force_unlocking(&self, name: &str, unlock: impl FnOnce() -> Result<bool>) -> Result<bool> {
        self.inner.force_unlocking(name, unlock)
    }

    pub(crate) fn config(&self) -> &'a Config {
        &self.inner.config
    }

    /// `ErrorKind::Shutdown` once the client is shut down.
    pub(crate) fn check_running(&self) -> Result<()> {
        self.inner.check_running()
    }

    /// Checks an object's name before any I/O (see `names.rs`).
    pub(crate) fn validate_name(&self, name: &str) -> Result<()> {
        self.inner.validate_name(name)
    }

    /// True for a Redis Cluster client.
    pub(crate) fn is_cluster(&self) -> bool {
        self.inner.routes.cluster().is_some()
    }

    pub(crate) fn calls(&self) -> Calls<'a> {
        Calls { inner: self.inner }
    }

    pub(crate) fn waits(&self) -> Waits<'a> {
        Waits { inner: self.inner }
    }

    pub(crate) fn holds(&self) -> Holds<'a> {
        Holds { inner: self.inner }
    }
}

impl<'a> Calls<'a> {
    /// The client's scripts' settings: which command publishes, whether to
    /// ask the replicas.
    pub(crate) fn scripts(&self) -> &'a Scripts {
        &self.inner.scripts
    }

    /// The command a script publishes with (`PUBLISH` or `SPUBLISH`).
    pub(crate) fn publish(&self) -> &'static str {
        self.inner.scripts.publish()
    }

    /// Whether the client requires the replicas' acknowledgement.
    pub(crate) fn acks_required(&self) -> bool {
        self.inner.config.replica_acks_required
    }

    /// Runs `f` in a session on the connections that reach `key`.
    pub(crate) fn with_conn<T>(&self, key: &str, f: impl FnOnce(&mut Session<'_>) -> Result<T>) -> Result<T> {
        self.inner.with_conn(key, f)
    }

    /// As [`Calls::with_conn`], and once more on new connections if one it
    /// used turned out dead: only for calls that are safe to repeat.
    pub(crate) fn with_live_conn<T>(
        &self,
        key: &str,
        f: impl Fn(&mut Session<'_>) -> Result<T>,
    ) -> Result<T> {
        self.inner.with_live_conn(key, f)
    }

    /// Runs `script` on the node of `name`'s keys, with the keys and
    /// arguments `fill` gives it; a Redis error reply becomes the crate's
    /// error (`WRONGTYPE` → [`ErrorKind::WrongType`](crate::ErrorKind::WrongType),
    /// `OVERFLOW` → [`ErrorKind::CountOverflow`](crate::ErrorKind::CountOverflow),
    /// anything else, `BADCOUNT` included, → `ErrorKind::Redis`). When the
    /// client requires the replicas' acknowledgement
    /// ([`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks))
    /// and they did not give it, the call is
    /// [`ErrorKind::ReplicaAcks`](crate::ErrorKind::ReplicaAcks) (an acquire
    /// uses [`Calls::eval_replicated`] instead, to give back what it took).
    pub(crate) fn eval(
        &self,
        name: &str,
        script: &LuaScript,
        repeat: Repeat,
        fill: impl Fn(&mut Call<'_>),
    ) -> Result<Value> {
        let (value, replicated) = self.eval_replicated(name, script, repeat, fill)?;
        if !replicated && self.acks_required() {
            return Err(Error::replica_acks(name));
        }
        Ok(value)
    }

    /// As [`Calls::eval`], returning whether the replicas asked for
    /// acknowledged the call (true when none were asked for) instead of
    /// failing without them.
    pub(crate) fn eval_replicated(
        &self,
        name: &str,
        script: &LuaScript,
        repeat: Repeat,
        fill: impl Fn(&mut Call<'_>),
    ) -> Result<(Value, bool)> {
        let run = |session: &mut Session<'_>| -> Result<(Value, bool)> {
            let mut call = script.call();
            fill(&mut call);
            let (reply, acked) = call.invoke(session, self.inner.scripts.acks())?;
            session.note_replicated(acked);
            reply.map_err(|e| count_error(name, e)).map(|value| (value, acked != Some(false)))
        };
        match repeat {
            Repeat::Safe => self.with_live_conn(name, run),
            Repeat::Once => self.with_conn(name, run),
        }
    }

    /// Runs `script`, a latched release of `thread`'s hold on the lock
    /// `name`; with `retry`, once more on a fresh connection if the first
    /// reply was lost: the latch makes the retry return the first outcome
    /// rather than release a second hold (see `kinds/latch.rs`).
    pub(crate) fn run_latched<T>(
        &self,
        name: &str,
        thread: u64,
        retry: bool,
        script: impl Fn(&mut Session<'_>, Latch<'_>) -> Result<T>,
    ) -> Result<T> {
        let key = names::unlock_latch(name, self.inner.uuid.as_u128(), thread);
        let request = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
        let ttl_ms = crate::lease::millis_ceil(self.latch_ttl());
        let latch = Latch { key: &key, ttl_ms, request, retry: false };
        match self.with_conn(name, |conn| script(conn, latch)) {
            Err(e) if retry && e.is_transport() => {
                self.with_conn(name, |conn| script(conn, Latch { retry: true, ..latch }))
            }
            outcome => outcome,
        }
    }

    /// How long an unlock latch must outlive its first use: a command
    /// timeout for the lost reply, then a connect and a command timeout for
    /// the retry, and a second of slack.
    fn latch_ttl(&self) -> Duration {
        let config = &self.inner.config;
        config.command_timeout * 2 + config.connect_timeout + Duration::from_secs(1)
    }
}

/// Maps a script's error reply: `OVERFLOW` (a count would leave the 64-bit
/// range; the script wrote nothing) is typed, the rest as for any lock.
fn count_error(name: &str, e: redis::RedisError) -> Error {
    let text = e.to_string();
    if text.contains("OVERFLOW") {
        return Error::count_overflow(name, e.detail().unwrap_or(&text).to_owned());
    }
    Error::from_redis(name, e)
}

impl<'a> Waits<'a> {
    /// A place among the client's threads waiting on `channel` for the
    /// object `name`, whose messages say what `wakes` says.
    pub(crate) fn join(&self, name: &Arc<str>, channel: &str, wakes: Wakes) -> ChannelWait {
        self.inner.waits.join(name, channel, wakes)
    }

    /// The wakes this client's barging releases owe (`wait/owed.rs`).
    pub(crate) fn owed(&self) -> &'a OwedWakes {
        &self.inner.owed
    }

    /// The client's pub/sub connections, to subscribe a channel wait.
    pub(crate) fn subscribers(&self) -> &'a Subscribers {
        &self.inner.subscribers
    }

    /// How many of the client's threads are in the wait on `channel`.
    pub(crate) fn waiting_on(&self, channel: &str) -> usize {
        self.inner.waits.waiting(channel)
    }

    /// The client's identity while it lives (its address), for state kept
    /// per thread (a semaphore's hand-over).
    pub(crate) fn client_id(&self) -> usize {
        std::ptr::from_ref(self.inner) as usize
    }

    /// A call's ride through outages (see `wait/outage.rs`).
    pub(crate) fn outage(&self, waits: bool) -> Outage<'a> {
        self.inner.outage(waits)
    }

    /// The reentrant lock's local state for `name`: its gate, wake-up slot
    /// and subscription (see `wait/entry.rs`).
    pub(crate) fn entry(&self, name: &Arc<str>) -> Arc<Entry> {
        self.inner.entry(name)
    }

    /// The longest sleep without news: the client's watchdog timeout.
    pub(crate) fn recheck(&self) -> Duration {
        self.inner.config.watchdog_timeout
    }
}

impl Holds<'_> {
    /// A new hold's id.
    pub(crate) fn next_id(&self) -> u64 {
        self.inner.next_hold_id()
    }

    /// Has the watchdog renew `hold` through `renew`, and tell `on_lost`
    /// when it is lost.
    pub(crate) fn register(&self, hold: Arc<Hold>, on_lost: Option<Arc<dyn OnLost>>, renew: Arc<dyn Renew>) {
        self.inner.watchdog.register(hold, on_lost, renew);
    }

    /// Watches the deadline of `hold`, a fixed lease, and has it checked
    /// with `check` when the client verifies its holds (a reconnect, a
    /// primary move), since no renewal would find it gone.
    pub(crate) fn register_fixed(
        &self,
        hold: Arc<Hold>,
        on_lost: Option<Arc<dyn OnLost>>,
        check: Arc<dyn Renew>,
    ) {
        self.inner.watchdog.register_fixed(hold, on_lost, check);
    }

    /// Watches the deadline of `hold`, which is not renewed (a fixed lease).
    pub(crate) fn watch(&self, hold: Arc<Hold>, on_lost: Option<Arc<dyn OnLost>>) {
        self.inner.watchdog.watch(hold, on_lost);
    }

    /// Stops renewing or watching the hold `hold_id`.
    pub(crate) fn deregister(&self, hold_id: u64) {
        self.inner.watchdog.deregister(hold_id);
    }

    /// Listens for unlocks of `hold` on `channel` (if its kind publishes
    /// one), checked with `check`, telling `on_lost` (see `holds/foreign.rs`);
    /// this client's force unlock finds it too.
    pub(crate) fn listen(
        &self,
        hold: &Arc<Hold>,
        channel: Option<Arc<str>>,
        on_lost: Option<Arc<dyn OnLost>>,
        check: Arc<dyn Renew>,
    ) {
        self.inner.foreign.add(hold, channel, on_lost, check);
    }

    /// Forgets a hold whose last guard was released: no more renewal, no
    /// more listening for its lock's unlocks.
    pub(crate) fn forget(&self, hold_id: u64) {
        self.inner.forget_hold(hold_id);
    }

    /// The client's renewer for `key`, made by `make` (given a weak handle
    /// on the client, for its calls) on first use.
    pub(crate) fn renewer(
        &self,
        key: &'static str,
        make: impl FnOnce(Weak<Inner>) -> Arc<dyn Renew>,
    ) -> Arc<dyn Renew> {
        self.inner.renewers.get(key, || make(self.inner.weak()))
    }
}
