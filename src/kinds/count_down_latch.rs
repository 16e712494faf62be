//! Redisson's `RCountDownLatch`: a count shared across processes that
//! waiters wait to see reach zero.
//!
//! The latch is one Redis STRING at the name itself, holding the count;
//! an absent key is an open latch. Counting down to zero deletes the key
//! and publishes `0` on `redisson_countdownlatch__channel__{<name>}`;
//! setting a count (only on an open latch) and deleting publish `1`. Java's
//! `await()` waits without limit; keyholder's waits are bounded
//! ([`CountDownLatch::await_for`], [`CountDownLatch::await_until`]), sleep
//! on the channel, and read the count again after every message.
//!
//! The channel always wraps the whole name in braces (Redisson's rule), so
//! for a name with its own hash tag the channel hashes to another Redis
//! Cluster slot than the key: a cluster client refuses such names.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{Calls, Client, Context, Repeat};
use crate::error::{Error, Result};
use crate::kinds::semaphore::scripts::{int, read_count};
use crate::kinds::semaphore::wait::{self, Attempt};
use crate::names::hash_tag;
use crate::store::eval::LuaScript;
use crate::store::scripts::unexpected;
use crate::wait::patience::Patience;

static COUNT_DOWN: LuaScript = LuaScript::new(concat!(
    include_str!("../../lua/common/integer.lua"),
    include_str!("../../lua/count_down_latch/count_down.lua")
));
static TRY_SET_COUNT: LuaScript =
    LuaScript::new(include_str!("../../lua/count_down_latch/try_set_count.lua"));
static DELETE: LuaScript = LuaScript::new(include_str!("../../lua/count_down_latch/delete.lua"));

impl Client {
    /// A handle to the count-down latch `name`, Redisson's
    /// `getCountDownLatch(name)`. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a name [`Client::lock`] would refuse, and, on a Redis Cluster,
    /// for a name whose channel would hash to another slot than its key
    /// (a name with its own `{tag}`: Redisson's channel wraps it in a
    /// second pair of braces).
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        let ctx = self.context();
        ctx.validate_name(name)?;
        let channel = crate::names::latch_channel(name);
        if ctx.is_cluster() && hash_tag(channel.as_bytes()) != hash_tag(name.as_bytes()) {
            return Err(Error::invalid_argument(format!(
                "latch name {name:?}: on a Redis Cluster its channel {channel:?} (Redisson's) would hash to \
                 another slot than the key; use a name without braces"
            )));
        }
        Ok(CountDownLatch { client: self.clone(), name: Arc::from(name), channel: Arc::from(channel) })
    }
}

/// A handle to one named count-down latch (Redisson's `RCountDownLatch`).
///
/// Cheap to clone and shareable across threads; no I/O until asked.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// use std::time::Duration;
/// let client = keyholder::Client::open("redis://127.0.0.1/")?;
/// let ready = client.count_down_latch("shards-loaded")?;
/// ready.try_set_count(3)?;                       // closed, counting 3
/// // ... three workers, anywhere, each call ready.count_down()? ...
/// if ready.await_for(Duration::from_secs(30))? {
///     println!("all shards loaded");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    client: Client,
    name: Arc<str>,
    channel: Arc<str>,
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch").field("name", &self.name).finish()
    }
}

impl CountDownLatch {
    /// The latch's name (its Redis key).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn ctx(&self) -> Context<'_> {
        self.client.context()
    }

    fn calls(&self) -> Calls<'_> {
        self.ctx().calls()
    }

    /// Closes an open latch with `count`, and publishes `1` (Redisson's
    /// `trySetCount`). True when set; false when the latch is counting
    /// already (or another key sits at its name).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a count of 0 or above `i64::MAX` (before any I/O); connection
    /// failures.
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        if count == 0 || i64::try_from(count).is_err() {
            return Err(Error::invalid_argument(format!("latch count {count} is outside 1 ..= i64::MAX")));
        }
        let calls = self.calls();
        let reply = calls.eval(&self.name, &TRY_SET_COUNT, Repeat::Safe, |call| {
            call.key(&*self.name).key(&*self.channel).arg(count).arg(calls.publish());
        })?;
        match int("latch try_set_count", &reply)? {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(unexpected("latch try_set_count", &reply)),
        }
    }

    /// Counts down by one and returns the count left; at zero the latch
    /// opens (its key is deleted and `0` published, waking every waiter).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// when the latch is open already (count 0): nothing is changed.
    /// Redisson's `countDown()` returns normally there (its script
    /// decrements the absent key to -1 and deletes it again); keyholder
    /// tells the caller that its count-down found nothing to count.
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when another
    /// type sits at the name, `ErrorKind::Redis` for a string that is no
    /// count; connection failures.
    pub fn count_down(&self) -> Result<u64> {
        let calls = self.calls();
        let reply = calls.eval(&self.name, &COUNT_DOWN, Repeat::Once, |call| {
            call.key(&*self.name).key(&*self.channel).arg(calls.publish());
        })?;
        match int("latch count_down", &reply)? {
            -1 => Err(Error::invalid_argument(format!(
                "count_down on latch '{}': the latch is already open (count 0); nothing was changed",
                self.name
            ))),
            n if n >= 0 => Ok(n.unsigned_abs()),
            _ => Err(unexpected("latch count_down", &reply)),
        }
    }

    /// The count now (0 when open).
    ///
    /// # Errors
    ///
    /// As [`count_down`](CountDownLatch::count_down), but an open latch is 0.
    pub fn count(&self) -> Result<u64> {
        let count = read_count(self.calls(), &self.name, "latch count")?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Deletes the latch, opening it, and publishes `1` so that waiters
    /// read the count again (Redisson's `delete`). True when it existed.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when another
    /// type sits at the name (left untouched); connection failures.
    pub fn delete(&self) -> Result<bool> {
        let calls = self.calls();
        let reply = calls.eval(&self.name, &DELETE, Repeat::Safe, |call| {
            call.key(&*self.name).key(&*self.channel).arg(calls.publish());
        })?;
        match int("latch delete", &reply)? {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(unexpected("latch delete", &reply)),
        }
    }

    /// Waits at most `timeout` for the latch to open; true when it is open
    /// (at once if it is already), false when time ran out.
    ///
    /// # Errors
    ///
    /// As [`count`](CountDownLatch::count). Redis unreachable ends the wait
    /// only once the outage has lasted the client's outage budget
    /// ([`ClientBuilder::outage_budget`](crate::ClientBuilder::outage_budget))
    /// or the timeout has passed; any other failure ends it at once.
    pub fn await_for(&self, timeout: Duration) -> Result<bool> {
        self.await_with(Patience::within(timeout))
    }

    /// Waits until `deadline` at most for the latch to open; true when it
    /// is open, false when time ran out. The wait sleeps on the latch's
    /// channel and reads the count again after every message (and at least
    /// every watchdog timeout).
    ///
    /// # Errors
    ///
    /// As [`count`](CountDownLatch::count); a failure ends the wait.
    pub fn await_until(&self, deadline: Instant) -> Result<bool> {
        self.await_with(Patience::until(deadline))
    }

    fn await_with(&self, patience: Patience) -> Result<bool> {
        let opened = wait::wait_for(self.ctx(), &self.name, &self.channel, patience, || {
            Ok(if self.count()? == 0 { Attempt::Won(()) } else { Attempt::Refused { retry_in: None } })
        })?;
        Ok(opened.is_some())
    }
}
