//! A scripted [`Wire`] and [`Dial`] for unit tests of the lanes: no
//! socket, no Redis.
//!
//! A request is `ECHO <id>` ([`echo`]); the fake answers each with its id
//! (an id starting with `err` with an error reply), so a caller can tell
//! its own reply from another's. Every write and every read is reported
//! on a channel ([`Event`], naming the thread that did it), and reads can
//! be *held* until the test releases them ([`Release`]), answered or cut
//! short by a failure, dead or not. The dial counts its connects, and can
//! refuse them or make the next write fail. Every wait of the fake is
//! bounded ([`LIMIT`]): a test that goes wrong fails, it does not hang.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};
use parking_lot::Mutex;
use redis::{RedisError, Value};

use super::{Dial, Wire};
use crate::store::batch::{Replies, Request};
use crate::store::connection::Generation;

/// How long a test waits for anything before it fails: far above any step
/// of a fake lane.
pub(crate) const LIMIT: Duration = Duration::from_secs(10);

/// What the fake saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A batch was written on connection `wire` (numbered from 1 in the
    /// order opened) by the thread named `by`: the requests' ids, in order.
    Sent { wire: usize, by: String, ids: Vec<String> },
    /// A read of `replies` replies started on `wire`, by `by`.
    Reading { wire: usize, by: String, replies: usize },
}

/// What a held read does when the test releases it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Release {
    /// Every reply asked for comes back.
    Answer,
    /// `after` replies come back, then the read fails: the connection was
    /// reset (`dead`) or timed out.
    Fail { after: usize, dead: bool },
}

/// What the dial, its connections and the test share.
#[derive(Debug)]
struct Script {
    events: Sender<Event>,
    releases: Receiver<Release>,
    hold: AtomicBool,
    /// The next write fails: `Some(dead)`.
    fail_send: Mutex<Option<bool>>,
    /// Connects fail with this error.
    refuse: Mutex<Option<RedisError>>,
}

/// Opens fake connections.
#[derive(Debug)]
pub(crate) struct FakeDial {
    script: Arc<Script>,
    connects: AtomicUsize,
    generation: Generation,
}

/// The test's end of a fake: what happened, and what happens next.
#[derive(Debug)]
pub(crate) struct Control {
    events: Receiver<Event>,
    releases: Sender<Release>,
    script: Arc<Script>,
}

/// A fake dial and its control; reads are held when `hold`.
pub(crate) fn fake(hold: bool) -> (FakeDial, Control) {
    let (events_tx, events) = unbounded();
    let (releases, releases_rx) = unbounded();
    let script = Arc::new(Script {
        events: events_tx,
        releases: releases_rx,
        hold: AtomicBool::new(hold),
        fail_send: Mutex::new(None),
        refuse: Mutex::new(None),
    });
    let dial = FakeDial {
        script: Arc::clone(&script),
        connects: AtomicUsize::new(0),
        generation: Generation::default(),
    };
    (dial, Control { events, releases, script })
}

impl FakeDial {
    /// Connections opened so far.
    pub(crate) fn connects(&self) -> usize {
        self.connects.load(Ordering::SeqCst)
    }
}

impl Control {
    /// The next thing the fake saw, waiting for it at most [`LIMIT`].
    pub(crate) fn event(&self) -> Event {
        match self.events.recv_timeout(LIMIT) {
            Ok(event) => event,
            Err(e) => panic!("nothing was written or read within {LIMIT:?}: {e}"),
        }
    }

    /// True when nothing was written or read since the last [`event`](Control::event).
    pub(crate) fn is_quiet(&self) -> bool {
        self.events.is_empty()
    }

    /// Lets the oldest held read go on.
    pub(crate) fn release(&self, release: Release) {
        let _ = self.releases.send(release);
    }

    /// Holds reads until released, or not.
    pub(crate) fn hold(&self, hold: bool) {
        self.script.hold.store(hold, Ordering::SeqCst);
    }

    /// Makes the next write fail; a `dead` connection was reset.
    pub(crate) fn fail_next_send(&self, dead: bool) {
        *self.script.fail_send.lock() = Some(dead);
    }

    /// Makes connects fail with `error`, or succeed again.
    pub(crate) fn refuse(&self, error: Option<RedisError>) {
        *self.script.refuse.lock() = error;
    }
}

/// A fake connection: answers what was written on it, in order.
#[derive(Debug)]
pub(crate) struct FakeWire {
    id: usize,
    generation: u64,
    script: Arc<Script>,
    pending: VecDeque<Value>,
    broken: bool,
    dead: bool,
}

impl Dial for FakeDial {
    type Wire = FakeWire;

    fn connect(&self) -> redis::RedisResult<FakeWire> {
        if let Some(refused) = self.script.refuse.lock().clone() {
            return Err(refused);
        }
        Ok(FakeWire {
            id: self.connects.fetch_add(1, Ordering::SeqCst) + 1,
            generation: self.generation.current(),
            script: Arc::clone(&self.script),
            pending: VecDeque::new(),
            broken: false,
            dead: false,
        })
    }

    fn generation(&self) -> &Generation {
        &self.generation
    }
}

impl Wire for FakeWire {
    fn send(&mut self, bytes: &[u8], _now: Instant) -> Result<(), RedisError> {
        let fail = self.script.fail_send.lock().take();
        if let Some(dead) = fail {
            return Err(self.fail(dead));
        }
        let ids = echoed_ids(bytes);
        self.pending.extend(ids.iter().map(|id| reply(id)));
        let _ = self.script.events.send(Event::Sent { wire: self.id, by: thread_name(), ids });
        Ok(())
    }

    fn receive(&mut self, replies: usize) -> (Vec<Value>, Option<RedisError>) {
        let _ = self.script.events.send(Event::Reading { wire: self.id, by: thread_name(), replies });
        let release = if self.script.hold.load(Ordering::SeqCst) {
            // A test that never releases fails the read as timed out.
            self.script.releases.recv_timeout(LIMIT).unwrap_or(Release::Fail { after: 0, dead: false })
        } else {
            Release::Answer
        };
        let (count, failure) = match release {
            Release::Answer => (replies, None),
            Release::Fail { after, dead } => (after.min(replies), Some(dead)),
        };
        let values: Vec<Value> = (0..count).map_while(|_| self.pending.pop_front()).collect();
        // More replies asked for than written: a real read would time out.
        let failure = failure.or((values.len() < replies).then_some(false));
        match failure {
            Some(dead) => (values, Some(self.fail(dead))),
            None => (values, None),
        }
    }

    fn is_usable(&self, generation: &Generation, _now: Instant) -> bool {
        !self.broken && self.generation >= generation.current()
    }

    fn is_dead(&self) -> bool {
        self.dead
    }

    fn generation(&self) -> u64 {
        self.generation
    }
}

impl FakeWire {
    fn fail(&mut self, dead: bool) -> RedisError {
        self.broken = true;
        self.dead |= dead;
        let kind = if dead { std::io::ErrorKind::ConnectionReset } else { std::io::ErrorKind::TimedOut };
        RedisError::from(std::io::Error::from(kind))
    }
}

/// A request the fake answers with `id` (an error reply if `id` starts
/// with `err`).
pub(crate) fn echo(id: &str) -> Request {
    Request::command(redis::cmd("ECHO").arg(id))
}

/// The id a fake answered a request with, or what it got instead.
pub(crate) fn answer(replies: &Replies) -> String {
    match replies.values.as_slice() {
        [Value::BulkString(id)] => String::from_utf8_lossy(id).into_owned(),
        [Value::ServerError(e)] => format!("error reply: {}", e.details().unwrap_or_default()),
        other => format!("{other:?}"),
    }
}

/// The ids of the `ECHO`s packed in `bytes`, in order.
fn echoed_ids(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let tokens: Vec<&str> = text.split("\r\n").collect();
    tokens
        .iter()
        .enumerate()
        .filter(|(_, token)| **token == "ECHO")
        .filter_map(|(at, _)| tokens.get(at + 2).map(|id| (*id).to_owned()))
        .collect()
}

fn reply(id: &str) -> Value {
    if id.starts_with("err") {
        redis::parse_redis_value(format!("-ERR {id}\r\n").as_bytes()).unwrap_or(Value::Nil)
    } else {
        Value::BulkString(id.as_bytes().to_vec())
    }
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("unnamed").to_owned()
}
