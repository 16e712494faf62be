//! The client's command connections: a few shared lanes (see
//! `store/lane.rs`), and the [`Session`] through which one call uses them.
//!
//! **Which lane.** A caller joins the batch being formed on a busy lane,
//! if there is one; else it takes an idle lane (one with a connection
//! first); else it starts a batch on the least loaded lane. So with fewer
//! threads calling at once than lanes, every thread has a connection to
//! itself, as with a pool, and only as many connections are opened as
//! threads ever called at once; with more, the overflow gathers in as few
//! batches as possible. That matters on a busy machine: each batch costs a
//! round trip, a hand-off and, in Redis, a read and a write, however many
//! requests it carries, while a request alone on a shared lane costs one
//! wake-up more than on a connection of its own (see `docs/design.md`,
//! "Command connections"). A lane whose batch has waited for its replies
//! for over 50 ms is joined only when every lane is in that state, so a
//! stuck reply holds up the callers already queued behind it (for less
//! than the command timeout), not the client. A thread starts looking at a
//! lane of its own (by its thread id), which spreads threads over lanes.
//!
//! Lanes take their connections on first use from the node's pool
//! (`store/pool.rs`: one kept warm in reserve, or else one the caller opens
//! on its own thread) and keep them; a connection that failed, that
//! belongs to an earlier generation (one of its siblings was found dead),
//! or that has been idle past its idle timeout or open past its maximum
//! lifetime, is replaced before its next use. When a connection could not be opened within the connect
//! timeout, Redis is taken to be unreachable for one connect timeout, and
//! calls fail at once instead of each waiting it out (dropping 500 guards
//! would otherwise take 500 timeouts); a refused connection fails at once
//! by itself. After shutdown, each call opens a connection of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{FromRedisValue, RedisResult, Value};

use crate::error::{Error, Result};
use crate::owner;
use crate::store::batch::{Replies, Request, Wait};
use crate::store::connection::{Conn, Connector};
use crate::store::lane::{Failure, Lane, Wiring};
use crate::store::pool::{Leased, NodePool};
use crate::store::slots::{self, Redirect};
use crate::store::wire::Wire;

/// How long a batch may wait for its replies before callers stop joining
/// its lane while another will do: far above a round trip, even on a
/// loaded machine or behind a replica acknowledgement, far below a command
/// timeout.
const STALLED: Duration = Duration::from_millis(50);

/// The client's shared command connections.
pub(crate) struct Lanes {
    lanes: Box<[Lane<Leased>]>,
    /// The node's connections: the reserve, the count, the connector.
    pool: NodePool,
    wait: Option<Wait>,
    /// How long a queued call waits at most: a connect and a command.
    call_timeout: Duration,
    connect_timeout: Duration,
    /// The origin of `unreachable_until`.
    started: Instant,
    /// Until when (nanoseconds after `started`) calls fail at once because
    /// no connection could be opened.
    unreachable_until: AtomicU64,
    /// The failure that set `unreachable_until`, to say it again (with
    /// its address) to the calls that fail at once.
    unreachable_because: parking_lot::Mutex<Option<redis::RedisError>>,
    closed: AtomicBool,
}

impl Lanes {
    /// `count` lanes, the first on `first` (when given), the others
    /// connecting on first use; batches that ask for acknowledgement end
    /// with `wait`.
    pub(crate) fn new(
        pool: NodePool,
        first: Option<Conn>,
        count: u32,
        wait: Option<Wait>,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> Lanes {
        let mut first = first.map(|conn| pool.adopt(conn));
        let lanes = (0..count.max(1)).map(|_| Lane::new(first.take())).collect();
        Lanes {
            lanes,
            pool,
            wait,
            call_timeout: connect_timeout + command_timeout,
            connect_timeout,
            started: Instant::now(),
            unreachable_until: AtomicU64::new(0),
            unreachable_because: parking_lot::Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// A session for one call.
    ///
    /// # Errors
    ///
    /// `ErrorKind::Connection` at once while Redis is taken to be
    /// unreachable.
    pub(crate) fn session(self: &Arc<Self>) -> Result<Session<'static>> {
        self.session_with(None)
    }

    /// A session for one call on a Redis Cluster node's lanes, which
    /// follows the node's redirections through `redirects`.
    ///
    /// # Errors
    ///
    /// As [`session`](Lanes::session).
    pub(crate) fn routed_session<'a>(self: &Arc<Self>, redirects: &'a dyn Redirects) -> Result<Session<'a>> {
        self.session_with(Some(redirects))
    }

    fn session_with<'a>(self: &Arc<Self>, redirects: Option<&'a dyn Redirects>) -> Result<Session<'a>> {
        self.check_reachable()?;
        let own = self.closed.load(Ordering::Acquire).then(|| Lane::new(None));
        Ok(Session { lanes: Arc::clone(self), redirects, own, dead: false, replicated: None })
    }

    fn check_reachable(&self) -> Result<()> {
        // The clock is read only after an unreachable spell (0: never).
        let until = self.unreachable_until.load(Ordering::Acquire);
        if until != 0 && self.nanos_since_start(Instant::now()) < until {
            return Err(Error::unreachable_after(self.unreachable_because.lock().as_ref()));
        }
        Ok(())
    }

    /// Claims a lane for the calling thread (see [`claim_among`]), looking
    /// from the thread's own lane on.
    fn claim(&self) -> &Lane<Leased> {
        let home = usize::try_from(owner::current_thread_id() % self.lanes.len() as u64).unwrap_or(0);
        claim_among(&self.lanes, home, Instant::now)
    }

    /// Opens this node's connections.
    pub(crate) fn connector(&self) -> &Connector {
        self.pool.connector()
    }

    /// Takes `conn`, opened beforehand (by the access check), as a lane's
    /// connection.
    pub(crate) fn adopt(&self, conn: Conn) {
        if let Some(lane) = self.lanes.first() {
            lane.adopt(self.pool.adopt(conn));
        }
    }

    /// Closes every connection (those in use once their batch is done);
    /// later calls open their own.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for lane in &self.lanes {
            lane.close();
        }
        self.pool.close();
    }

    /// The primary moved (a Sentinel failover): every connection to the
    /// old one is replaced before its next use, and calls stop failing
    /// fast, since the unreachable node is not the one they will reach.
    pub(crate) fn primary_moved(&self) {
        self.pool.generation().advance();
        self.pool.purge();
        self.unreachable_until.store(0, Ordering::Release);
    }

    fn mark_unreachable(&self, because: &redis::RedisError) {
        *self.unreachable_because.lock() = Some(because.clone());
        let until = self.nanos_since_start(Instant::now() + self.connect_timeout);
        self.unreachable_until.store(until, Ordering::Release);
    }

    fn nanos_since_start(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.started).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Claims one of `lanes`: the lane with the largest batch being formed,
/// if any; else an idle lane (one with a connection first); else the least
/// loaded, where a batch starts to form. Lanes whose batch in flight is
/// stalled (by `clock`) are joined only when all are. Looks from `home`
/// on; `lanes` is not empty.
fn claim_among<W: Wire>(lanes: &[Lane<W>], home: usize, clock: impl Fn() -> Instant) -> &Lane<W> {
    let count = lanes.len();
    // The thread's own lane, idle and connected, when no lane has a batch
    // forming: taken without reading the other lanes' state (each a cache
    // line other threads write).
    if let Some(lane) = lanes.get(home)
        && lane.queued() == 0
        && lane.is_connected()
        && lane.claim_idle()
    {
        return lane;
    }
    let order = || (home..count).chain(0..home).map(|i| &lanes[i]);
    // The clock is read only when some lane is busy.
    let now = std::cell::OnceCell::new();
    let moving = || order().filter(|lane| !lane.is_stalled(|| *now.get_or_init(&clock), STALLED));
    let forming = moving().filter(|lane| lane.queued() > 0).max_by_key(|lane| lane.queued());
    if let Some(lane) = forming {
        lane.claim();
        return lane;
    }
    if let Some(lane) = order().find(|lane| lane.is_connected() && lane.claim_idle()) {
        return lane;
    }
    if let Some(lane) = order().find(|lane| lane.claim_idle()) {
        return lane;
    }
    let lane = moving().min_by_key(|lane| lane.load());
    let lane = lane.or_else(|| order().min_by_key(|lane| lane.load())).unwrap_or(&lanes[home]);
    lane.claim();
    lane
}

/// What a Redis Cluster session needs to follow a node's redirections
/// (`store/cluster.rs` implements it).
pub(crate) trait Redirects: Sync {
    /// The lanes of the node `redirect` names; a `MOVED` also updates the
    /// slot map. Not called for `TRYAGAIN`.
    fn follow(&self, redirect: &Redirect) -> Result<Arc<Lanes>>;
    /// A call on `lanes` failed in transit or could not connect: the node
    /// may be gone, and the slot map stale.
    fn failed(&self, lanes: &Lanes);
}

/// The most redirections one call follows (a slot moves once at a time;
/// more means the cluster is being reconfigured under it).
const MAX_REDIRECTS: u32 = 5;

/// The first pause after a `TRYAGAIN`, doubled after each up to
/// [`MAX_TRY_AGAIN_PAUSE`], for as long as the call may take (a connect
/// and a command timeout): a slot's keys are being moved, one `MIGRATE`
/// round trip per batch of keys, and the slot then handed over.
const TRY_AGAIN_PAUSE: Duration = Duration::from_millis(5);
const MAX_TRY_AGAIN_PAUSE: Duration = Duration::from_millis(100);

/// One call's use of the shared connections: what it sends, whether a
/// connection it used was found dead (so that a call safe to repeat runs
/// once more on a new one), and whether its last write reached the
/// replicas. On a Redis Cluster, the node's lanes, and the way to the
/// others when a slot has moved.
pub(crate) struct Session<'a> {
    lanes: Arc<Lanes>,
    redirects: Option<&'a dyn Redirects>,
    /// After shutdown: a lane of the call's own, closed with the session.
    own: Option<Lane<Leased>>,
    dead: bool,
    replicated: Option<bool>,
}

impl Session<'_> {
    /// Sends `request` and waits for its replies (error replies included).
    /// On a Redis Cluster, follows `MOVED` and `ASK` to the node that
    /// serves the slot now (at most [`MAX_REDIRECTS`] times), and sends
    /// again after a `TRYAGAIN` within the call's time (none of them ran
    /// the command); past those bounds the last replies are returned as
    /// they are.
    ///
    /// # Errors
    ///
    /// `ErrorKind::Connection`: a transport failure (the request may have
    /// run; [`Error::is_transport`]), no connection, or the call's time
    /// ran out before a shared connection could send it (it never ran).
    pub(crate) fn send(&mut self, request: Request) -> Result<Replies> {
        let Some(redirects) = self.redirects else {
            let lanes = Arc::clone(&self.lanes);
            return self.send_on(&lanes, request);
        };
        let started = Instant::now();
        let mut pause = TRY_AGAIN_PAUSE;
        let mut hops = 0;
        loop {
            let lanes = Arc::clone(&self.lanes);
            let mut replies =
                self.send_on(&lanes, request.clone()).inspect_err(|_| redirects.failed(&lanes))?;
            let mut redirect = replies.values.iter().find_map(slots::redirect);
            if let Some(ask @ Redirect::Ask { .. }) = &redirect {
                let target = redirects.follow(ask)?;
                replies = self
                    .send_on(&target, request.clone().asking())
                    .inspect_err(|_| redirects.failed(&target))?;
                // ASKING's own reply.
                if !replies.values.is_empty() {
                    replies.values.remove(0);
                }
                redirect = replies.values.iter().find_map(slots::redirect);
            }
            match redirect {
                None => return Ok(replies),
                Some(Redirect::TryAgain) => {
                    // The slot's keys are being moved, and a command on
                    // several of them must wait until they are all on one
                    // side: nothing to wait on but the migration's next
                    // step, so a short pause, as the server asks, within
                    // the call's time.
                    if started.elapsed() + pause > lanes.call_timeout {
                        return Ok(replies);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_TRY_AGAIN_PAUSE);
                }
                Some(moved @ Redirect::Moved { .. }) => {
                    hops += 1;
                    if hops > MAX_REDIRECTS {
                        return Ok(replies);
                    }
                    self.lanes = redirects.follow(&moved)?;
                }
                // ASK from the node ASKed: the migration moved on; start over.
                Some(Redirect::Ask { .. }) => {
                    hops += 1;
                    if hops > MAX_REDIRECTS {
                        return Ok(replies);
                    }
                }
            }
        }
    }

    fn send_on(&mut self, lanes: &Lanes, request: Request) -> Result<Replies> {
        let lane = match &self.own {
            Some(own) => {
                own.claim();
                own
            }
            None => lanes.claim(),
        };
        let wiring = Wiring { dial: &lanes.pool, wait: lanes.wait };
        // A wait that outlives a move of the primary says nothing of the
        // new one: only a failure within one generation fails fast.
        let generation = lanes.pool.generation().current();
        match lane.call(request, lanes.call_timeout, wiring) {
            Ok(replies) => Ok(replies),
            Err(Failure::Transport { error, dead }) => {
                self.dead |= dead;
                Err(Error::redis(error))
            }
            Err(Failure::Connect(error)) => {
                // A refused connection fails fast by itself; one that timed
                // out would cost every caller a connect timeout.
                if error.is_timeout() && lanes.pool.generation().current() == generation {
                    lanes.mark_unreachable(&error);
                }
                Err(Error::connect(error))
            }
            Err(Failure::Unsent) => Err(Error::unsent(lanes.pool.connector().known_address())),
        }
    }

    /// Sends one command and decodes its reply; an error reply is the
    /// inner error.
    pub(crate) fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<RedisResult<T>> {
        let replies = self.send(Request::command(cmd))?;
        Ok(decode(replies.values.into_iter().next().unwrap_or(Value::Nil)))
    }

    /// Sends commands in one request and decodes their replies as one
    /// array (a tuple, say); the first error reply is the inner error.
    pub(crate) fn query_all<T: FromRedisValue>(&mut self, cmds: &[&redis::Cmd]) -> Result<RedisResult<T>> {
        let replies = self.send(Request::commands(cmds))?;
        let values: RedisResult<Vec<Value>> = replies.values.into_iter().map(Value::extract_error).collect();
        Ok(values.and_then(|values| decode(Value::Array(values))))
    }

    /// True once a connection this session used was found dropped or reset
    /// (not merely slow).
    pub(crate) fn is_dead(&self) -> bool {
        self.dead
    }

    /// Records whether the last call's write reached the replicas.
    pub(crate) fn note_replicated(&mut self, replicated: Option<bool>) {
        self.replicated = replicated;
    }

    /// Whether the last script call's write reached the replicas asked for;
    /// `None` when none were asked for.
    pub(crate) fn replicated(&self) -> Option<bool> {
        self.replicated
    }
}

fn decode<T: FromRedisValue>(value: Value) -> RedisResult<T> {
    Ok(T::from_redis_value(value.extract_error()?)?)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::thread;

    use crossbeam_channel::{Receiver, bounded};

    use super::*;
    use crate::store::lane::Failure;
    use crate::store::wire::Dial;
    use crate::store::wire::fake::{FakeDial, FakeWire, LIMIT, Release, answer, echo, fake};

    type Outcome = std::result::Result<Replies, Failure>;

    fn call(lanes: &Arc<[Lane<FakeWire>; 2]>, dial: &Arc<FakeDial>, id: &'static str) -> Receiver<Outcome> {
        let (done, outcome) = bounded(1);
        let (lanes, dial) = (Arc::clone(lanes), Arc::clone(dial));
        thread::spawn(move || {
            lanes[0].claim();
            let _ = done.send(lanes[0].call(echo(id), LIMIT, Wiring { dial: &*dial, wait: None }));
        });
        outcome
    }

    #[test]
    fn a_caller_joins_the_batch_being_formed_unless_its_lane_is_stalled() {
        let (dial, control) = fake(true);
        let (lanes, dial) = (Arc::new([Lane::new(None), Lane::new(None)]), Arc::new(dial));
        // Lane 0: a batch in flight, its reply held, and a caller queued
        // behind it.
        // A clock stopped before the batch was written: not stalled yet.
        let before = Instant::now();
        let first = call(&lanes, &dial, "first");
        control.event();
        control.event();
        let queued = call(&lanes, &dial, "queued");
        let started = Instant::now();
        while lanes[0].queued() == 0 {
            assert!(started.elapsed() < LIMIT, "the second caller never queued");
            thread::yield_now();
        }
        let later = || Instant::now() + STALLED * 2;
        assert!(std::ptr::eq(claim_among(&*lanes, 1, || before), &lanes[0]), "joins the batch being formed");
        assert!(std::ptr::eq(claim_among(&*lanes, 0, later), &lanes[1]), "skips the stalled lane");
        assert!(std::ptr::eq(claim_among(&lanes[..1], 0, later), &lanes[0]), "every lane is stalled");

        control.release(Release::Answer);
        control.release(Release::Answer);
        assert_eq!(answer(&first.recv_timeout(LIMIT).unwrap().unwrap()), "first");
        assert_eq!(answer(&queued.recv_timeout(LIMIT).unwrap().unwrap()), "queued");
    }

    #[test]
    fn an_idle_lane_with_a_connection_is_taken_first_then_any_idle_one() {
        let (dial, _control) = fake(false);
        let lanes = [Lane::new(None), Lane::new(None), Lane::new(None)];
        lanes[0].adopt(dial.connect().unwrap());
        assert!(std::ptr::eq(claim_among(&lanes, 1, Instant::now), &lanes[0]));
        assert!(std::ptr::eq(claim_among(&lanes, 1, Instant::now), &lanes[1]), "the home lane");
        assert!(std::ptr::eq(claim_among(&lanes, 1, Instant::now), &lanes[2]));
        // None idle: the least loaded.
        lanes[0].claim();
        lanes[2].claim();
        assert!(std::ptr::eq(claim_among(&lanes, 0, Instant::now), &lanes[1]));
    }
}
