//! One shared command connection: callers queue their requests, and one of
//! them at a time *leads*, writing every queued request in one write and
//! reading the replies in order (flat combining).
//!
//! Why: with a connection per call (a pool), a thread-per-request server
//! either opens a connection per thread or queues its threads for a few
//! connections, one command each per round trip. Here a thread that finds
//! the connection busy queues its request; when the leader's replies are
//! in, it writes everything queued by then as the next batch, at once, and
//! hands the reading of that batch to one of its members before returning
//! with its own reply. Redis reads a batch in one system call and answers
//! it in one, so a few connections carry many threads' commands, with
//! fewer system calls than a connection per thread, and the connection
//! never waits for a woken thread to send what is queued. An uncontended
//! caller leads its own one-request batch on its own thread: no hand-off
//! to another thread, one round trip.
//!
//! **Bounded time.** The leader's I/O is bounded by the socket timeouts
//! (connect, and the command timeout per write and read). A queued caller
//! waits at most until its deadline: if its request was not written by
//! then, it is withdrawn and fails as never sent; if it was, it fails as a
//! timeout that may have run, and whoever reads its batch drops the late
//! reply. A caller handed the reading of a batch after its deadline fails
//! that batch and retires the connection rather than wait longer. A failed
//! write or read retires the connection, and fails only the requests it
//! left without replies; the callers queued behind it are sent by the next
//! leader on a new connection.
//!
//! **Tested without Redis.** The lane needs only a [`Wire`] and a [`Dial`]
//! (`store/wire.rs`), so a scripted fake drives it in `lane/tests.rs`, and
//! a `loom` model (`lane/model.rs`, `cfg(loom)`) explores the interleavings
//! of callers handing the reading on, over this very code: its lock,
//! condition variable and atomics come from `lane/sync.rs`, which swaps in
//! loom's for the model.

#[cfg(all(test, loom))]
mod model;
mod sync;
#[cfg(all(test, not(loom)))]
mod tests;

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use self::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex};
use crate::store::batch::{Batch, Replies, Request, Wait};
use crate::store::connection::Generation;
use crate::store::wire::{Dial, Wire};

/// Why a request got no replies.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// No connection could be opened: the request was never sent.
    Connect(RedisError),
    /// The request was written, or about to be, and its replies did not
    /// all come back: it may have run. `dead`: the connection was found
    /// dropped or reset, not merely slow.
    Transport { error: RedisError, dead: bool },
    /// Its deadline passed before it was written: it never ran.
    Unsent,
}

/// What a leader needs besides the lane.
#[derive(Debug)]
pub(crate) struct Wiring<'a, D> {
    /// Opens a connection when the lane has none fit for use.
    pub(crate) dial: &'a D,
    /// The `WAIT` that ends a batch that asks for acknowledgement.
    pub(crate) wait: Option<Wait>,
}

impl<D> Clone for Wiring<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D> Copy for Wiring<'_, D> {}

/// One shared connection (a [`Wire`]) and the callers queued for it.
pub(crate) struct Lane<W> {
    state: Mutex<LaneState<W>>,
    /// Callers queued or being served, read without the lock to choose a
    /// lane.
    load: AtomicUsize,
    /// The lane has a connection (idle or in use), read without the lock
    /// to choose a lane.
    connected: AtomicBool,
    /// Requests queued for the lane's next batch, read without the lock to
    /// choose a lane.
    queued: AtomicUsize,
    /// When the batch in flight was written (nanoseconds after `origin`,
    /// plus one); 0 when none is.
    written_at: AtomicU64,
    origin: Instant,
}

struct LaneState<W> {
    /// Requests not yet written, in arrival order.
    queue: VecDeque<Queued>,
    /// A caller leads: it holds the connection (taken out of `conn`) or
    /// has been handed the lead.
    leading: bool,
    /// The connection, while no leader holds it.
    conn: Option<W>,
    /// A batch written on `conn` whose replies are still to be read, by the
    /// member of it handed the lead.
    in_flight: Option<InFlight>,
    /// The client shut down: the connection is closed once done with.
    closed: bool,
}

struct Queued {
    request: Request,
    ticket: Arc<Ticket>,
}

/// A written batch and its members, in order.
struct InFlight {
    batch: Batch,
    members: Vec<Queued>,
    /// When it was written.
    written: Instant,
}

/// What follows a batch read by its leader.
enum Next {
    /// Nothing was queued meanwhile (or it could not be written).
    Nothing,
    /// The next batch is written, and one of its members reads it.
    Handed,
    /// The next batch is written, and every member gave up: the leader
    /// reads it.
    ReadHere(InFlight),
}

impl Next {
    fn into_batch(self) -> Option<InFlight> {
        match self {
            Next::ReadHere(in_flight) => Some(in_flight),
            Next::Nothing | Next::Handed => None,
        }
    }
}

/// One request's progress, shared by its caller and the leader.
struct Ticket {
    stage: Mutex<Stage>,
    changed: Condvar,
}

enum Stage {
    /// In the lane's queue, not written.
    Queued,
    /// Its caller is to lead the lane: to write the queue, or (`sent`) to
    /// read the replies of the batch its request went out in.
    Lead {
        sent: bool,
    },
    /// Taken into a batch.
    Sent,
    Done(Result<Replies, Failure>),
    /// Its caller gave up: not to be written, its outcome not delivered.
    Abandoned,
}

/// What a waiting caller is woken for.
enum Turn {
    Done(Result<Replies, Failure>),
    Lead,
    /// The deadline passed; `sent`: the request was taken into a batch;
    /// `led`: the caller had been handed the lead, which it must give up.
    TimedOut {
        sent: bool,
        led: bool,
    },
}

impl<W: Wire> Lane<W> {
    /// A lane; its connection is `conn`, or opened on first use.
    pub(crate) fn new(conn: Option<W>) -> Lane<W> {
        let connected = AtomicBool::new(conn.is_some());
        let state =
            LaneState { queue: VecDeque::new(), leading: false, conn, in_flight: None, closed: false };
        Lane {
            state: Mutex::new(state),
            load: AtomicUsize::new(0),
            connected,
            queued: AtomicUsize::new(0),
            written_at: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    /// True when the lane has a connection: a call on it need not connect
    /// (unless the connection turns out unfit).
    pub(crate) fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Callers queued or being served right now.
    pub(crate) fn load(&self) -> usize {
        self.load.load(Ordering::Relaxed)
    }

    /// Requests queued for the lane's next batch: joining them costs no
    /// extra round trip, and no extra wake-up to send them.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// True when the batch in flight has waited for its replies for longer
    /// than `patience`: joining the lane would wait at least as long.
    pub(crate) fn is_stalled(&self, now: impl FnOnce() -> Instant, patience: Duration) -> bool {
        let written_at = self.written_at.load(Ordering::Relaxed);
        if written_at == 0 {
            return false;
        }
        let patience = u64::try_from(patience.as_nanos()).unwrap_or(u64::MAX);
        self.nanos(now()).saturating_sub(written_at - 1) > patience
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Notes when the batch in flight was written (`None`: none is).
    fn note_written(&self, at: Option<Instant>) {
        let at = at.map_or(0, |at| self.nanos(at).saturating_add(1));
        self.written_at.store(at, Ordering::Relaxed);
    }

    /// Counts a caller in if the lane is idle: two threads never both take
    /// an idle lane for their own.
    pub(crate) fn claim_idle(&self) -> bool {
        self.load.compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// Counts a caller in, idle or not.
    pub(crate) fn claim(&self) {
        self.load.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends `request` and waits for its replies, at most `timeout` unless
    /// it leads (then the socket timeouts bound it). The caller has
    /// claimed the lane ([`claim`](Lane::claim) or
    /// [`claim_idle`](Lane::claim_idle)); the claim ends here.
    pub(crate) fn call<D: Dial<Wire = W>>(
        &self,
        request: Request,
        timeout: Duration,
        wiring: Wiring<'_, D>,
    ) -> Result<Replies, Failure> {
        // The deadline counts from the caller's first wait, right after it
        // queues (a caller that leads first has its reply by then): the
        // clock is read only if the caller has to wait.
        let queued_at = std::cell::OnceCell::new();
        let deadline = || *queued_at.get_or_init(Instant::now) + timeout;
        let ticket = {
            let mut state = self.state.lock();
            if !state.leading {
                // An idle lane (no leader means nothing queued or in
                // flight): the caller leads a batch of its own request
                // alone, with no ticket, since nobody can hand it the lead
                // or its replies.
                state.leading = true;
                let conn = state.conn.take();
                drop(state);
                let outcome = self.lead_alone(conn, request, wiring);
                self.load.fetch_sub(1, Ordering::Relaxed);
                return outcome;
            }
            let ticket = Arc::new(Ticket { stage: Mutex::new(Stage::Queued), changed: Condvar::new() });
            state.queue.push_back(Queued { request, ticket: Arc::clone(&ticket) });
            self.queued.store(state.queue.len(), Ordering::Relaxed);
            ticket
        };
        let outcome = loop {
            match ticket.wait(deadline) {
                Turn::Done(outcome) => break outcome,
                Turn::Lead => self.lead(wiring),
                Turn::TimedOut { sent, led } => {
                    if led {
                        self.give_up_lead();
                    }
                    break Err(if sent {
                        Failure::Transport { error: timed_out(), dead: false }
                    } else {
                        Failure::Unsent
                    });
                }
            }
        };
        self.load.fetch_sub(1, Ordering::Relaxed);
        outcome
    }

    /// Leads a batch of `request` alone (the lane was idle; `conn` is its
    /// connection, if any): writes it, reads its replies, then goes on as
    /// [`lead`](Lane::lead) does after a batch with what queued meanwhile.
    fn lead_alone<D: Dial<Wire = W>>(
        &self,
        mut conn: Option<W>,
        mut request: Request,
        wiring: Wiring<'_, D>,
    ) -> Result<Replies, Failure> {
        let generation = wiring.dial.generation();
        let batch = Batch::new(std::iter::once(&mut request), wiring.wait);
        let outcome = match send(&mut conn, &batch, wiring) {
            Ok(written) => {
                self.note_written(Some(written));
                read_one(&mut conn, batch, generation)
            }
            Err(failure) => Err(failure),
        };
        let in_flight = self.write_next(&mut conn, wiring);
        if !matches!(in_flight, Next::Handed) {
            self.lead_on(conn, in_flight.into_batch(), wiring);
        }
        outcome
    }

    /// Leads the lane: writes the queue as one batch (unless a batch is
    /// already in flight), reads its replies, writes what queued meanwhile
    /// as the next batch, hands the reading of that one to one of its
    /// members, and deals out the replies read. The connection never waits
    /// for a woken thread to write what is queued.
    fn lead<D: Dial<Wire = W>>(&self, wiring: Wiring<'_, D>) {
        let (mut conn, mut in_flight) = {
            let mut state = self.state.lock();
            (state.conn.take(), state.in_flight.take())
        };
        if in_flight.is_none() {
            in_flight = write(&mut conn, self.take_queue(), wiring);
            self.note_written(in_flight.as_ref().map(|f| f.written));
        }
        self.lead_on(conn, in_flight, wiring);
    }

    /// Goes on leading from `in_flight`, a batch written on `conn` whose
    /// replies the leader reads, until a batch's reading is handed to one
    /// of its members or nothing is left; then leaves the lane to the next
    /// queued caller, or idle.
    fn lead_on<D: Dial<Wire = W>>(
        &self,
        mut conn: Option<W>,
        mut in_flight: Option<InFlight>,
        wiring: Wiring<'_, D>,
    ) {
        let generation = wiring.dial.generation();
        while let Some(InFlight { batch, members, .. }) = in_flight.take() {
            let outcomes = read(&mut conn, batch, generation);
            let next = self.write_next(&mut conn, wiring);
            for (member, outcome) in members.into_iter().zip(outcomes) {
                member.ticket.finish(outcome);
            }
            match next {
                Next::Handed => return,
                next => in_flight = next.into_batch(),
            }
        }
        let mut state = self.state.lock();
        if !state.closed {
            state.conn = conn;
        }
        self.connected.store(state.conn.is_some(), Ordering::Relaxed);
        self.hand_on(&mut state);
    }

    /// After a batch's replies are read: writes what queued meanwhile as
    /// the next batch and hands its reading (and the connection) to one of
    /// its members; when every member gave up, the leader reads it.
    fn write_next<D: Dial<Wire = W>>(&self, conn: &mut Option<W>, wiring: Wiring<'_, D>) -> Next {
        let next = if conn.is_some() { write(conn, self.take_queue(), wiring) } else { None };
        self.note_written(next.as_ref().map(|f| f.written));
        let Some(next) = next else { return Next::Nothing };
        let mut state = self.state.lock();
        if next.members.iter().any(|m| m.ticket.offer_lead()) {
            state.conn = conn.take();
            state.in_flight = Some(next);
            Next::Handed
        } else {
            Next::ReadHere(next)
        }
    }

    /// The queued requests whose callers still wait, taken into a batch.
    fn take_queue(&self) -> Vec<Queued> {
        let mut state = self.state.lock();
        self.queued.store(0, Ordering::Relaxed);
        state.queue.drain(..).filter(|q| q.ticket.take_into_batch()).collect()
    }

    /// Gives up a lead handed to a caller whose deadline passed: a batch it
    /// was to read fails, its connection retired (its replies are still on
    /// their way), and the lead passes to the queue.
    fn give_up_lead(&self) {
        let abandoned = {
            let mut state = self.state.lock();
            let abandoned = state.in_flight.take();
            self.note_written(None);
            if abandoned.is_some() {
                state.conn = None;
                self.connected.store(false, Ordering::Relaxed);
            }
            self.hand_on(&mut state);
            abandoned
        };
        for member in abandoned.into_iter().flat_map(|f| f.members) {
            member.ticket.finish(Err(Failure::Transport { error: timed_out(), dead: false }));
        }
    }

    /// Passes the lead to the first caller still queued, or leaves the lane
    /// without a leader.
    fn hand_on(&self, state: &mut LaneState<W>) {
        while let Some(front) = state.queue.front() {
            if front.ticket.offer_lead() {
                return;
            }
            state.queue.pop_front();
            self.queued.store(state.queue.len(), Ordering::Relaxed);
        }
        state.leading = false;
    }

    /// Takes `conn` as the lane's connection if it has none and nobody
    /// leads it (a connection opened for it beforehand, by a check).
    pub(crate) fn adopt(&self, conn: W) {
        let mut state = self.state.lock();
        if state.conn.is_none() && !state.leading && !state.closed {
            state.conn = Some(conn);
            self.connected.store(true, Ordering::Relaxed);
        }
    }

    /// Closes the connection, now if idle, else when its leader is done.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        if state.in_flight.is_none() {
            state.conn = None;
            self.connected.store(false, Ordering::Relaxed);
        }
    }
}

/// Writes `members`' requests as one batch on `conn`, or on a new
/// connection if it has none fit for use. On failure the members get it,
/// and a connection that failed is dropped.
fn write<D: Dial>(
    conn: &mut Option<D::Wire>,
    mut members: Vec<Queued>,
    wiring: Wiring<'_, D>,
) -> Option<InFlight> {
    if members.is_empty() {
        return None;
    }
    let batch = Batch::new(members.iter_mut().map(|m| &mut m.request), wiring.wait);
    match send(conn, &batch, wiring) {
        Ok(written) => Some(InFlight { batch, members, written }),
        Err(failure) => {
            for member in members {
                member.ticket.finish(Err(failure.clone()));
            }
            None
        }
    }
}

/// Writes `batch` on `conn`, or on a new connection if it has none fit for
/// use; a connection that failed is dropped, and a dead one starts a new
/// generation.
fn send<D: Dial>(
    conn: &mut Option<D::Wire>,
    batch: &Batch,
    wiring: Wiring<'_, D>,
) -> Result<Instant, Failure> {
    let generation = wiring.dial.generation();
    // One clock read: whether the connection idled too long, and when the
    // batch was written (read again after opening a connection, which may
    // take up to the connect timeout).
    let mut now = Instant::now();
    let mut fit = match conn.take() {
        Some(open) if open.is_usable(generation, now) => open,
        _ => {
            let opened = wiring.dial.connect().map_err(Failure::Connect)?;
            now = Instant::now();
            opened
        }
    };
    if let Err(error) = fit.send(batch.bytes(), now) {
        let dead = fit.is_dead();
        if dead {
            generation.advance_past(fit.generation());
        }
        return Err(Failure::Transport { error, dead });
    }
    *conn = Some(fit);
    Ok(now)
}

/// Reads the replies of `batch`, written on `conn`, and deals them out; a
/// connection that failed is dropped, and a dead one starts a new
/// generation.
fn read<W: Wire>(
    conn: &mut Option<W>,
    batch: Batch,
    generation: &Generation,
) -> Vec<Result<Replies, Failure>> {
    let (values, failure, dead) = receive(conn, &batch, generation);
    batch
        .split(values, failure.as_ref())
        .into_iter()
        .map(|outcome| outcome.map_err(|error| Failure::Transport { error, dead }))
        .collect()
}

/// [`read`] for a batch of one request: its outcome.
fn read_one<W: Wire>(
    conn: &mut Option<W>,
    batch: Batch,
    generation: &Generation,
) -> Result<Replies, Failure> {
    let (values, failure, dead) = receive(conn, &batch, generation);
    batch.single(values, failure.as_ref()).map_err(|error| Failure::Transport { error, dead })
}

/// The replies of `batch` read from `conn`, what stopped the reading (the
/// connection is then dropped), and whether the connection was found dead
/// (a new generation starts).
fn receive<W: Wire>(
    conn: &mut Option<W>,
    batch: &Batch,
    generation: &Generation,
) -> (Vec<Value>, Option<RedisError>, bool) {
    let (values, failure, dead) = match conn.as_mut() {
        Some(open) => {
            let (values, failure) = open.receive(batch.replies());
            let dead = open.is_dead();
            if dead {
                generation.advance_past(open.generation());
            }
            (values, failure, dead)
        }
        None => (Vec::new(), Some(closed()), false),
    };
    if failure.is_some() {
        *conn = None;
    }
    (values, failure, dead)
}

fn closed() -> RedisError {
    RedisError::from((redis::ErrorKind::Io, "the shared connection was closed"))
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply within the command timeout on a shared connection",
    ))
}

impl Ticket {
    /// Waits for the outcome or the lead, at most until `deadline()`.
    fn wait(&self, deadline: impl Fn() -> Instant) -> Turn {
        let mut stage = self.stage.lock();
        let mut timed_out = false;
        loop {
            match std::mem::replace(&mut *stage, Stage::Abandoned) {
                Stage::Done(outcome) => return Turn::Done(outcome),
                Stage::Lead { sent } if timed_out => return Turn::TimedOut { sent, led: true },
                Stage::Lead { sent } => {
                    *stage = if sent { Stage::Sent } else { Stage::Queued };
                    return Turn::Lead;
                }
                Stage::Queued if timed_out => return Turn::TimedOut { sent: false, led: false },
                Stage::Sent if timed_out => return Turn::TimedOut { sent: true, led: false },
                waiting @ (Stage::Queued | Stage::Sent) => *stage = waiting,
                Stage::Abandoned => return Turn::TimedOut { sent: true, led: false },
            }
            timed_out = self.changed.wait_until(&mut stage, deadline()).timed_out();
        }
    }

    /// Takes the request into a batch unless its caller gave up.
    fn take_into_batch(&self) -> bool {
        let mut stage = self.stage.lock();
        match *stage {
            Stage::Queued | Stage::Lead { sent: false } => {
                *stage = Stage::Sent;
                true
            }
            _ => false,
        }
    }

    /// Hands the lead to the caller unless it gave up or is done.
    fn offer_lead(&self) -> bool {
        let mut stage = self.stage.lock();
        let sent = match *stage {
            Stage::Queued => false,
            Stage::Sent => true,
            _ => return false,
        };
        *stage = Stage::Lead { sent };
        self.changed.notify_one();
        true
    }

    /// Delivers the outcome unless the caller gave up.
    fn finish(&self, outcome: Result<Replies, Failure>) {
        let mut stage = self.stage.lock();
        if matches!(*stage, Stage::Sent) {
            *stage = Stage::Done(outcome);
            self.changed.notify_one();
        }
    }
}
