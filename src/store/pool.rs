//! Each node's command connections, counted and kept fresh: an r2d2 pool
//! holds the node's idle connections in reserve, and the lanes check one
//! out and keep it (ADR 47).
//!
//! **What r2d2 does here.** It opens reserve connections in the background
//! (on the one maintenance thread the whole process shares, within the
//! connect timeout, retried with back-off), keeps `min_idle` of them warm,
//! closes reserve connections past their idle timeout or maximum lifetime
//! (its reaper, every 30 s), tests a connection before handing it out
//! ([`Manager::is_valid`]: failed, dead, of an earlier generation, idle or
//! old; no I/O), closes a returned one that is no longer fit
//! ([`Manager::has_broken`]), and reports errors and events through its
//! handlers (into `log`, and `tracing` and `metrics` through `observe.rs`).
//!
//! **What it does not do.** A lane takes a connection with
//! [`Pool::try_get`](r2d2::Pool::try_get), which never blocks; when the
//! reserve is empty, the caller opens one on its own thread, as before the
//! pool, rather than wait on the maintenance thread (`Pool::get` would):
//! with one such thread per process, one black-holed node would hold up
//! every client's connects. A connection a lane took stays with the lane
//! until it is unfit; then it is closed, never put back (its replies may
//! still be on their way). And the lanes retire a connection of their own
//! past its idle timeout or lifetime before using it (no I/O), so that a
//! flow a NAT silently forgot costs a connect, not a command timeout.
//!
//! **The budget.** Every connection to a node, in reserve or held by a
//! lane, counts against the node's `pool_max_size` ([`Limits`]): the
//! reserve is refilled only below it, so a default client still opens at
//! most 15 command connections per node (16 with its pub/sub one). A
//! caller that finds no connection ready opens one even at the limit (it
//! must not wait), and then closes one of the reserve, if any, to get back
//! under it (looking again on the maintenance thread, after the reserve
//! connect that may be in flight there).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};
use scheduled_thread_pool::ScheduledThreadPool;

use crate::observe::{self, Opener};
use crate::store::connection::{Conn, Connector, Generation};
use crate::store::wire::{Dial, Wire};

/// How often r2d2's reaper closes reserve connections past their limits
/// (fixed by r2d2).
const REAPER_PERIOD: Duration = Duration::from_secs(30);

/// The process's one pool maintenance thread, shared by every client's
/// pools, created with the first pool.
static MAINTENANCE: OnceLock<Arc<ScheduledThreadPool>> = OnceLock::new();

fn maintenance() -> Arc<ScheduledThreadPool> {
    let pool = MAINTENANCE.get_or_init(|| {
        Arc::new(ScheduledThreadPool::builder().num_threads(1).thread_name_pattern("keyholder-pool").build())
    });
    Arc::clone(pool)
}

/// How one node's connections are kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolSettings {
    /// The most connections to the node, in reserve or held by a lane: the
    /// lanes' count.
    pub(crate) max_size: u32,
    /// Idle connections kept in reserve.
    pub(crate) min_idle: u32,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) max_lifetime: Option<Duration>,
    pub(crate) connect_timeout: Duration,
}

/// A node's open connections, counted, and when one is too idle or too old
/// to use.
#[derive(Debug)]
struct Limits {
    open: AtomicU32,
    /// 0 once the client shut down: no reserve any more.
    max: AtomicU32,
    idle_timeout: Option<Duration>,
    max_lifetime: Option<Duration>,
}

impl Limits {
    /// A place for a connection a caller opens, even over the limit.
    fn reserve(self: &Arc<Self>) -> Slot {
        self.open.fetch_add(1, Ordering::AcqRel);
        Slot(Arc::clone(self))
    }

    /// A place for a reserve connection, if under the limit.
    fn try_reserve(self: &Arc<Self>) -> Option<Slot> {
        let max = self.max.load(Ordering::Acquire);
        let reserved = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| (open < max).then_some(open + 1));
        reserved.ok().map(|_| Slot(Arc::clone(self)))
    }

    fn is_over(&self) -> bool {
        self.open.load(Ordering::Acquire) > self.max.load(Ordering::Acquire)
    }

    /// Why `conn` must not be used any more, if it must not (no I/O).
    fn unfit(&self, conn: &Conn, generation: &Generation, now: Instant) -> Option<&'static str> {
        if conn.is_dead() {
            return Some("found dropped or reset");
        }
        if !conn.is_usable(generation) {
            return Some("failed, or opened before a connection was found dead");
        }
        if self.idle_timeout.is_some_and(|idle| now.saturating_duration_since(conn.last_used()) >= idle) {
            return Some("idle past its idle timeout");
        }
        if self.max_lifetime.is_some_and(|life| now.saturating_duration_since(conn.opened_at()) >= life) {
            return Some("past its maximum lifetime");
        }
        None
    }
}

/// A connection's place in its node's count, given back when it closes.
#[derive(Debug)]
struct Slot(Arc<Limits>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A command connection, counted against its node's limit.
pub(crate) struct Counted {
    conn: Conn,
    slot: Slot,
}

impl fmt::Debug for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counted").field("generation", &self.conn.generation()).finish_non_exhaustive()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        observe::connection_closed();
    }
}

/// Why the pool's manager did not open or keep a connection.
#[derive(Debug)]
pub(crate) enum PoolError {
    /// Opening one failed, with redis-rs's typed error.
    Connect(RedisError),
    /// A reserve connection was found unfit on checkout.
    Unfit(&'static str),
    /// The node has as many connections as it may: no reserve for now.
    Full,
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Connect(e) => write!(f, "cannot open a command connection: {e}"),
            PoolError::Unfit(why) => write!(f, "a reserve connection was closed: {why}"),
            PoolError::Full => f.write_str("the node has all the connections it may have"),
        }
    }
}

impl std::error::Error for PoolError {}

/// Opens and checks one node's connections for r2d2.
pub(crate) struct Manager {
    connector: Connector,
    limits: Arc<Limits>,
    /// Opening reserve connections has been failing: the next success is
    /// worth a log line.
    failing: Arc<AtomicBool>,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Counted;
    type Error = PoolError;

    /// Opens a reserve connection (on the maintenance thread), within the
    /// connect timeout, unless the node has all the connections it may.
    fn connect(&self) -> Result<Counted, PoolError> {
        let slot = self.limits.try_reserve().ok_or(PoolError::Full)?;
        let conn = self.connector.connect().map_err(PoolError::Connect)?;
        observe::connection_opened(Opener::Pool);
        if self.failing.swap(false, Ordering::AcqRel) {
            log::info!("keyholder: reserve command connections open again");
        }
        let counted = Counted { conn, slot };
        // A caller opened one meanwhile: this one is over the limit.
        if self.limits.is_over() {
            return Err(PoolError::Full);
        }
        Ok(counted)
    }

    fn is_valid(&self, conn: &mut Counted) -> Result<(), PoolError> {
        match self.limits.unfit(&conn.conn, self.connector.generation(), Instant::now()) {
            Some(why) => Err(PoolError::Unfit(why)),
            None => Ok(()),
        }
    }

    fn has_broken(&self, conn: &mut Counted) -> bool {
        self.limits.unfit(&conn.conn, self.connector.generation(), Instant::now()).is_some()
    }
}

/// Where r2d2's errors go: `log`, and the failures to `observe`.
#[derive(Debug)]
struct ReportErrors {
    node: String,
    failing: Arc<AtomicBool>,
}

impl r2d2::HandleError<PoolError> for ReportErrors {
    fn handle_error(&self, error: PoolError) {
        match error {
            PoolError::Connect(e) => {
                observe::connection_failed(Opener::Pool, &e);
                // Retried in the background for as long as it fails: one
                // warning per streak.
                if self.failing.swap(true, Ordering::AcqRel) {
                    log::debug!("keyholder: a reserve connection to {} could not be opened: {e}", self.node);
                } else {
                    log::warn!(
                        "keyholder: a reserve connection to {} could not be opened (retried in the \
                         background; calls connect by themselves meanwhile): {e}",
                        self.node
                    );
                }
            }
            PoolError::Unfit(why) => {
                log::debug!("keyholder: a connection to {} was closed: {why}", self.node)
            }
            PoolError::Full => {}
        }
    }
}

/// r2d2's events, into `log` at trace level.
#[derive(Debug)]
struct LogEvents;

impl r2d2::HandleEvent for LogEvents {
    fn handle_acquire(&self, event: r2d2::event::AcquireEvent) {
        log::trace!("keyholder: reserve connection {} opened", event.connection_id());
    }

    fn handle_release(&self, event: r2d2::event::ReleaseEvent) {
        log::trace!("keyholder: pooled connection {} closed after {:?}", event.connection_id(), event.age());
    }
}

/// One node's pool: its reserve, its count, and its connector.
pub(crate) struct NodePool {
    pool: r2d2::Pool<Manager>,
    connector: Connector,
    limits: Arc<Limits>,
}

impl fmt::Debug for NodePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePool").field("state", &self.pool.state()).field("limits", &self.limits).finish()
    }
}

impl NodePool {
    /// A pool of connections opened by `connector` (`node` names it in
    /// logs). No I/O here: the reserve is opened on the maintenance thread.
    pub(crate) fn new(connector: Connector, settings: PoolSettings, node: String) -> NodePool {
        let max = settings.max_size.max(1);
        let limits = Arc::new(Limits {
            open: AtomicU32::new(0),
            max: AtomicU32::new(max),
            idle_timeout: settings.idle_timeout,
            max_lifetime: settings.max_lifetime,
        });
        let failing = Arc::new(AtomicBool::new(false));
        let manager = Manager {
            connector: connector.clone(),
            limits: Arc::clone(&limits),
            failing: Arc::clone(&failing),
        };
        // The reaper closes a reserve connection up to 30 s past its limit:
        // it runs that much earlier, so that the reserve is fit when taken.
        let early = |limit: Duration| Some(limit.checked_sub(REAPER_PERIOD).unwrap_or(limit));
        let pool = r2d2::Pool::builder()
            .max_size(max)
            .min_idle(Some(settings.min_idle.min(max)))
            .idle_timeout(settings.idle_timeout.and_then(early))
            .max_lifetime(settings.max_lifetime.and_then(early))
            .connection_timeout(settings.connect_timeout.max(Duration::from_millis(1)))
            .test_on_check_out(true)
            .thread_pool(maintenance())
            .error_handler(Box::new(ReportErrors { node, failing }))
            .event_handler(Box::new(LogEvents))
            .build_unchecked(manager);
        NodePool { pool, connector, limits }
    }

    /// Opens this node's connections (on the caller's thread).
    pub(crate) fn connector(&self) -> &Connector {
        &self.connector
    }

    /// The generation of this node's connections.
    pub(crate) fn generation(&self) -> &Generation {
        self.connector.generation()
    }

    /// A connection for a lane: one from the reserve, tested (no I/O), or
    /// else one opened here, on the caller's thread, within the connect
    /// timeout. Never waits for the maintenance thread.
    ///
    /// # Errors
    ///
    /// The connect's, typed as redis-rs types it.
    pub(crate) fn take(&self) -> RedisResult<Leased> {
        if let Some(reserve) = self.pool.try_get() {
            return Ok(Leased::Reserve(reserve));
        }
        let slot = self.limits.reserve();
        match self.connector.connect() {
            Ok(conn) => {
                observe::connection_opened(Opener::Caller);
                if self.limits.is_over() {
                    self.retire_surplus();
                }
                Ok(Leased::Own(Counted { conn, slot }))
            }
            Err(e) => {
                observe::connection_failed(Opener::Caller, &e);
                Err(e)
            }
        }
    }

    /// Closes a reserve connection: a caller opened one over the limit.
    ///
    /// When the reserve looks empty, one may still be on its way in: the
    /// maintenance thread checks the limit after its connect but puts the
    /// connection in the reserve a moment later, so a caller that opened
    /// its own in between sees neither the connection nor, the manager
    /// having checked before it, anyone to close it (it would stay over the
    /// limit until its idle timeout). The look is then repeated on the
    /// maintenance thread itself, after the job in flight there.
    fn retire_surplus(&self) {
        if !retire_spare(&self.pool) {
            self.retire_surplus_later();
        }
    }

    /// Closes a reserve connection, if the node is still over its limit,
    /// on the maintenance thread (see [`NodePool::retire_surplus`]).
    fn retire_surplus_later(&self) {
        let (pool, limits) = (self.pool.clone(), Arc::clone(&self.limits));
        maintenance().execute(move || {
            if limits.is_over() {
                retire_spare(&pool);
            }
        });
    }

    /// Counts `conn`, opened beforehand (by the access check), as one of
    /// this node's.
    pub(crate) fn adopt(&self, conn: Conn) -> Leased {
        observe::connection_opened(Opener::Caller);
        Leased::Own(Counted { conn, slot: self.limits.reserve() })
    }

    /// Closes reserve connections that are no longer fit (the primary
    /// moved): taking one tests and closes every unfit one before it.
    pub(crate) fn purge(&self) {
        drop(self.pool.try_get());
    }

    /// The client shut down: the reserve is closed and not refilled (the
    /// lanes close their own connections).
    pub(crate) fn close(&self) {
        self.limits.max.store(0, Ordering::Release);
        while retire_spare(&self.pool) {}
    }

    /// The node's open connections, in reserve or held by a lane.
    #[cfg(test)]
    fn open(&self) -> u32 {
        self.limits.open.load(Ordering::Acquire)
    }
}

/// Closes one reserve connection of `pool`, if it has one: taken out and
/// retired, so that r2d2 closes rather than keeps it. False when the
/// reserve is empty.
fn retire_spare(pool: &r2d2::Pool<Manager>) -> bool {
    match pool.try_get() {
        Some(mut spare) => {
            spare.conn.retire();
            true
        }
        None => false,
    }
}

/// A connection a lane holds: taken from the reserve, or opened by a
/// caller. Closed when dropped (a reserve one is never put back: a lane
/// drops a connection when it is unfit, or when its replies may still be
/// on their way).
pub(crate) enum Leased {
    Reserve(r2d2::PooledConnection<Manager>),
    Own(Counted),
}

impl fmt::Debug for Leased {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leased::Reserve(_) => f.write_str("Leased::Reserve"),
            Leased::Own(_) => f.write_str("Leased::Own"),
        }
    }
}

impl Drop for Leased {
    fn drop(&mut self) {
        if let Leased::Reserve(reserve) = self {
            reserve.conn.retire();
        }
    }
}

impl Leased {
    fn counted(&self) -> &Counted {
        match self {
            Leased::Reserve(reserve) => reserve,
            Leased::Own(own) => own,
        }
    }

    fn conn_mut(&mut self) -> &mut Conn {
        match self {
            Leased::Reserve(reserve) => &mut reserve.conn,
            Leased::Own(own) => &mut own.conn,
        }
    }

    /// Writes `bytes` (packed commands) at `now`, the caller's clock read.
    /// A failure retires the connection.
    fn send_at(&mut self, bytes: &[u8], now: Instant) -> Result<(), RedisError> {
        self.conn_mut().send_at(bytes, now)
    }

    /// Reads `replies` replies, stopping at the first failure.
    pub(crate) fn receive(&mut self, replies: usize) -> (Vec<Value>, Option<RedisError>) {
        self.conn_mut().receive(replies)
    }

    /// Whether the connection can take the next command at `now`: not
    /// failed, of the current generation, and neither idle past its idle
    /// timeout nor older than its maximum lifetime (no I/O).
    fn is_usable_at(&self, generation: &Generation, now: Instant) -> bool {
        let counted = self.counted();
        counted.slot.0.unfit(&counted.conn, generation, now).is_none()
    }

    /// True once the connection was found dropped or reset.
    pub(crate) fn is_dead(&self) -> bool {
        self.counted().conn.is_dead()
    }

    /// The generation the connection was opened in.
    pub(crate) fn generation(&self) -> u64 {
        self.counted().conn.generation()
    }
}

impl Dial for NodePool {
    type Wire = Leased;

    #[inline]
    fn connect(&self) -> RedisResult<Leased> {
        self.take()
    }

    #[inline]
    fn generation(&self) -> &Generation {
        NodePool::generation(self)
    }
}

impl Wire for Leased {
    #[inline]
    fn send(&mut self, bytes: &[u8], now: Instant) -> Result<(), RedisError> {
        Leased::send_at(self, bytes, now)
    }

    #[inline]
    fn receive(&mut self, replies: usize) -> (Vec<Value>, Option<RedisError>) {
        Leased::receive(self, replies)
    }

    #[inline]
    fn is_usable(&self, generation: &Generation, now: Instant) -> bool {
        Leased::is_usable_at(self, generation, now)
    }

    #[inline]
    fn is_dead(&self) -> bool {
        Leased::is_dead(self)
    }

    #[inline]
    fn generation(&self) -> u64 {
        Leased::generation(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: u32, idle: Option<u64>, life: Option<u64>) -> Arc<Limits> {
        Arc::new(Limits {
            open: AtomicU32::new(0),
            max: AtomicU32::new(max),
            idle_timeout: idle.map(Duration::from_millis),
            max_lifetime: life.map(Duration::from_millis),
        })
    }

    #[test]
    fn the_reserve_stays_under_the_limit_and_callers_do_not() {
        let limits = limits(2, None, None);
        let first = limits.try_reserve().unwrap();
        let second = limits.reserve();
        assert!(limits.try_reserve().is_none(), "the reserve is refused at the limit");
        let third = limits.reserve();
        assert!(limits.is_over(), "a caller is not refused");
        drop((first, third));
        assert_eq!(limits.open.load(Ordering::Acquire), 1);
        assert!(!limits.is_over() && limits.try_reserve().is_some());
        drop(second);
    }

    /// Against a real server: what the pool opens, hands out and closes.
    mod on_a_server {
        use keyholder_testkit::RedisServer;

        use super::*;
        use crate::store::primary::{Node, Primary};

        const TIMEOUT: Duration = Duration::from_millis(500);

        fn pool(url: &str, settings: PoolSettings) -> NodePool {
            let node = Node::new(redis::Client::open(url).unwrap(), None).unwrap();
            let generation = Arc::new(Generation::default());
            let connector = Connector::new(
                Arc::new(Primary::fixed(node)),
                TIMEOUT,
                TIMEOUT,
                generation,
                Arc::from("kh-pool"),
            );
            NodePool::new(connector, settings, url.to_owned())
        }

        fn settings(
            max_size: u32,
            min_idle: u32,
            idle: Option<Duration>,
            life: Option<Duration>,
        ) -> PoolSettings {
            PoolSettings {
                max_size,
                min_idle,
                idle_timeout: idle,
                max_lifetime: life,
                connect_timeout: TIMEOUT,
            }
        }

        /// Waits (bounded) until `pool` has at least `idle` connections in
        /// reserve.
        fn wait_for_reserve(pool: &NodePool, idle: u32) {
            let deadline = Instant::now() + Duration::from_secs(5);
            while pool.pool.state().idle_connections < idle {
                assert!(Instant::now() < deadline, "not {idle} in reserve: {pool:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }

        fn ping(conn: &mut Leased) -> Value {
            conn.send_at(&redis::cmd("PING").get_packed_command(), Instant::now()).unwrap();
            let (mut replies, failure) = conn.receive(1);
            assert!(failure.is_none(), "{failure:?}");
            replies.pop().unwrap()
        }

        #[test]
        fn keeps_a_warm_reserve_within_the_limit() {
            let server = RedisServer::start();
            let pool = pool(&server.url(), settings(2, 1, None, None));
            wait_for_reserve(&pool, 1);
            let mut first = pool.take().unwrap();
            assert!(matches!(first, Leased::Reserve(_)), "{first:?}");
            assert_eq!(ping(&mut first), Value::SimpleString("PONG".into()));
            // The reserve is refilled up to the limit, and no further.
            wait_for_reserve(&pool, 1);
            let second = pool.take().unwrap();
            assert!(matches!(second, Leased::Reserve(_)));
            assert_eq!(pool.open(), 2);
            let third = pool.take().unwrap();
            assert!(matches!(third, Leased::Own(_)), "the caller opened its own");
            assert_eq!(pool.open(), 3);
            drop(third);
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(pool.open(), 2, "no reserve at the limit");
            // A lane's connection is closed when dropped, never put back; the
            // reserve is refilled once under the limit.
            drop(first);
            wait_for_reserve(&pool, 1);
            assert_eq!(pool.open(), 2);
            drop(second);
        }

        #[test]
        fn a_reserve_connection_that_lands_over_the_limit_is_closed() {
            let server = RedisServer::start();
            let pool = pool(&server.url(), settings(1, 1, None, None));
            wait_for_reserve(&pool, 1);
            // The maintenance thread busy with a job (as with a reserve
            // connect whose connection is not in the reserve yet); a caller
            // over the limit meanwhile.
            let (release, gate) = crossbeam_channel::bounded::<()>(0);
            maintenance().execute(move || {
                let _ = gate.recv_timeout(Duration::from_secs(5));
            });
            let caller = pool.limits.reserve();
            pool.retire_surplus_later();
            assert_eq!(pool.open(), 2, "nothing closed while the maintenance thread is busy");
            release.send(()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while pool.open() > 1 {
                assert!(Instant::now() < deadline, "the surplus stayed: {pool:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(pool.pool.state().idle_connections, 0, "the reserve connection was the one closed");
            drop(caller);
        }

        #[test]
        fn an_idle_or_old_connection_is_unfit() {
            let server = RedisServer::start();
            let idle = Duration::from_millis(200);
            let pool = pool(&server.url(), settings(4, 0, Some(idle), Some(Duration::from_secs(60))));
            let mut conn = pool.take().unwrap();
            assert!(matches!(conn, Leased::Own(_)), "no reserve with min_idle 0");
            assert!(conn.is_usable_at(pool.generation(), Instant::now()));
            ping(&mut conn);
            std::thread::sleep(idle);
            assert!(!conn.is_usable_at(pool.generation(), Instant::now()), "idle past its idle timeout");

            let pool = pool_with_lifetime(&server.url(), Duration::from_millis(200));
            let fresh = pool.take().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            assert!(!fresh.is_usable_at(pool.generation(), Instant::now()), "past its maximum lifetime");
        }

        fn pool_with_lifetime(url: &str, life: Duration) -> NodePool {
            pool(url, settings(4, 0, None, Some(life)))
        }

        #[test]
        fn a_reserve_of_an_earlier_generation_is_closed_on_checkout() {
            let server = RedisServer::start();
            let pool = pool(&server.url(), settings(4, 1, None, None));
            wait_for_reserve(&pool, 1);
            pool.generation().advance();
            pool.purge();
            // The stale one closed, a fresh one opened in its place (r2d2
            // may open two: it refills on the checkout and on the close).
            wait_for_reserve(&pool, 1);
            assert!(pool.open() <= 2, "{pool:?}");
            let conn = pool.take().unwrap();
            assert!(matches!(conn, Leased::Reserve(_)));
            assert!(conn.is_usable_at(pool.generation(), Instant::now()));
        }

        #[test]
        fn a_refused_connect_is_typed_and_the_caller_does_not_wait_for_the_reserve() {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let pool = pool(&format!("redis://127.0.0.1:{port}/"), settings(4, 1, None, None));
            let started = Instant::now();
            let e = pool.take().err().unwrap();
            assert!(e.is_connection_refusal(), "{e:?}");
            assert!(started.elapsed() < TIMEOUT, "the caller connected by itself, at once");
        }
    }
}
