//! One shared command connection: callers queue their requests, and one of
//! them at a time *leads*, writing every queued request in one write and
//! reading the replies in order (flat combining).
//!
//! Why: with a connection per call (a pool), a thread-per-request server
//! either opens a connection per thread or queues its threads for a few
//! connections, one command each per round trip. Here a thread that finds
//! the connection busy queues its request; when the leader's round trip
//! ends, the next queued caller leads and sends everything queued by then
//! in one write. Redis reads the batch in one system call and answers it
//! in one, so a few connections carry many threads' commands, and do so
//! with fewer system calls than a connection per thread. An uncontended
//! caller leads its own one-request batch on its own thread: no hand-off
//! to another thread, one round trip.
//!
//! **Bounded time.** The leader's I/O is bounded by the socket timeouts
//! (connect, and the command timeout per write and read). A queued caller
//! waits at most until its deadline: if its request was not written by
//! then, it is withdrawn and fails as never sent; if it was, it fails as a
//! timeout that may have run, and the leader drops its late reply. A
//! failed exchange retires the connection, and fails only the requests it
//! left without replies; the callers queued behind it are sent by the next
//! leader on a new connection.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use redis::RedisError;

use crate::store::batch::{Batch, Replies, Request, Wait};
use crate::store::connection::{Conn, Connector};

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
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wiring<'a> {
    /// Opens a connection when the lane has none fit for use.
    pub(crate) connector: &'a Connector,
    /// The `WAIT` that ends a batch that asks for acknowledgement.
    pub(crate) wait: Option<Wait>,
}

/// One shared connection and the callers queued for it.
pub(crate) struct Lane {
    state: Mutex<LaneState>,
    /// Callers queued or being served, read without the lock to choose a
    /// lane.
    load: AtomicUsize,
    /// The lane has a connection (idle or in use), read without the lock
    /// to choose a lane.
    connected: AtomicBool,
}

struct LaneState {
    /// Requests not yet written, in arrival order.
    queue: VecDeque<Queued>,
    /// A caller leads: it holds the connection (taken out of `conn`) or
    /// has been handed the lead.
    leading: bool,
    /// The connection, while no leader holds it.
    conn: Option<Conn>,
    /// The client shut down: the connection is closed once done with.
    closed: bool,
}

struct Queued {
    request: Request,
    ticket: Arc<Ticket>,
}

/// One request's progress, shared by its caller and the leader.
struct Ticket {
    stage: Mutex<Stage>,
    changed: Condvar,
}

enum Stage {
    /// In the lane's queue, not written.
    Queued,
    /// Its caller is to lead the lane.
    Lead,
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
    /// `led`: the caller had been handed the lead, which it must pass on.
    TimedOut {
        sent: bool,
        led: bool,
    },
}

impl Lane {
    /// A lane; its connection is `conn`, or opened on first use.
    pub(crate) fn new(conn: Option<Conn>) -> Lane {
        let connected = AtomicBool::new(conn.is_some());
        let state = LaneState { queue: VecDeque::new(), leading: false, conn, closed: false };
        Lane { state: Mutex::new(state), load: AtomicUsize::new(0), connected }
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

    /// Sends `request` and waits for its replies, at most until `deadline`
    /// unless it leads (then the socket timeouts bound it).
    pub(crate) fn call(
        &self,
        request: Request,
        deadline: Instant,
        wiring: Wiring<'_>,
    ) -> Result<Replies, Failure> {
        self.load.fetch_add(1, Ordering::Relaxed);
        let ticket = Arc::new(Ticket { stage: Mutex::new(Stage::Queued), changed: Condvar::new() });
        let lead = {
            let mut state = self.state.lock();
            state.queue.push_back(Queued { request, ticket: Arc::clone(&ticket) });
            !std::mem::replace(&mut state.leading, true)
        };
        if lead {
            self.lead(wiring);
        }
        let outcome = loop {
            match ticket.wait(deadline) {
                Turn::Done(outcome) => break outcome,
                Turn::Lead => self.lead(wiring),
                Turn::TimedOut { sent, led } => {
                    if led {
                        Self::hand_on(&mut self.state.lock());
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

    /// Writes every queued request in one batch, reads the replies, deals
    /// them out, and hands the lead to the first caller queued meanwhile.
    fn lead(&self, wiring: Wiring<'_>) {
        let (conn, members) = {
            let mut state = self.state.lock();
            let members: Vec<Queued> = state.queue.drain(..).filter(|q| q.ticket.take_into_batch()).collect();
            (state.conn.take(), members)
        };
        let (kept, outcomes) =
            if members.is_empty() { (conn, Vec::new()) } else { exchange(conn, &members, wiring) };
        {
            let mut state = self.state.lock();
            if !state.closed {
                state.conn = kept;
            }
            self.connected.store(state.conn.is_some(), Ordering::Relaxed);
            Self::hand_on(&mut state);
        }
        for (member, outcome) in members.into_iter().zip(outcomes) {
            member.ticket.finish(outcome);
        }
    }

    /// Passes the lead to the first caller still queued, or leaves the lane
    /// without a leader.
    fn hand_on(state: &mut LaneState) {
        while let Some(front) = state.queue.front() {
            if front.ticket.offer_lead() {
                return;
            }
            state.queue.pop_front();
        }
        state.leading = false;
    }

    /// Closes the connection, now if idle, else when its leader is done.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        state.conn = None;
        self.connected.store(false, Ordering::Relaxed);
    }
}

/// One batch's round trip on `conn`, or on a new connection if it is unfit
/// for use; returns the connection if it is still fit, and each member's
/// outcome.
fn exchange(
    conn: Option<Conn>,
    members: &[Queued],
    wiring: Wiring<'_>,
) -> (Option<Conn>, Vec<Result<Replies, Failure>>) {
    let generation = wiring.connector.generation();
    let conn = match conn {
        Some(conn) if conn.is_usable(generation) => Ok(conn),
        _ => wiring.connector.connect(),
    };
    let mut conn = match conn {
        Ok(conn) => conn,
        Err(e) => return (None, members.iter().map(|_| Err(Failure::Connect(e.clone()))).collect()),
    };
    let batch = Batch::new(members.iter().map(|m| &m.request), wiring.wait);
    let (values, failure) = conn.exchange(batch.bytes(), batch.replies());
    let dead = conn.is_dead();
    if dead {
        generation.advance_past(conn.generation());
    }
    let outcomes = batch
        .split(values, failure.as_ref())
        .into_iter()
        .map(|outcome| outcome.map_err(|error| Failure::Transport { error, dead }))
        .collect();
    (failure.is_none().then_some(conn), outcomes)
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply within the command timeout on a shared connection",
    ))
}

impl Ticket {
    /// Waits for the outcome or the lead, at most until `deadline`.
    fn wait(&self, deadline: Instant) -> Turn {
        let mut stage = self.stage.lock();
        let mut timed_out = false;
        loop {
            match std::mem::replace(&mut *stage, Stage::Abandoned) {
                Stage::Done(outcome) => return Turn::Done(outcome),
                Stage::Lead if timed_out => return Turn::TimedOut { sent: false, led: true },
                Stage::Lead => {
                    *stage = Stage::Queued;
                    return Turn::Lead;
                }
                Stage::Queued if timed_out => return Turn::TimedOut { sent: false, led: false },
                Stage::Sent if timed_out => return Turn::TimedOut { sent: true, led: false },
                waiting @ (Stage::Queued | Stage::Sent) => *stage = waiting,
                Stage::Abandoned => return Turn::TimedOut { sent: true, led: false },
            }
            timed_out = self.changed.wait_until(&mut stage, deadline).timed_out();
        }
    }

    /// Takes the request into a batch unless its caller gave up.
    fn take_into_batch(&self) -> bool {
        let mut stage = self.stage.lock();
        match *stage {
            Stage::Queued | Stage::Lead => {
                *stage = Stage::Sent;
                true
            }
            _ => false,
        }
    }

    /// Hands the lead to the caller unless it gave up.
    fn offer_lead(&self) -> bool {
        let mut stage = self.stage.lock();
        if matches!(*stage, Stage::Queued) {
            *stage = Stage::Lead;
            self.changed.notify_one();
            true
        } else {
            false
        }
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
