//! A `loom` model of the lane: every interleaving (up to the preemption
//! bound) of two or three callers on one lane, over a wire that answers at
//! once. Run by `.ci/run`:
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --lib loom`.
//!
//! What it covers: the real `Lane` (`call`, `lead`, `take_queue`,
//! `hand_on`, `close`) and `Ticket` (`wait`, `take_into_batch`,
//! `offer_lead`, `finish`), with loom's lock, condition variable, atomics
//! and `Arc` in place of `parking_lot`'s and `std`'s (`lane/sync.rs`). It
//! checks that every caller gets its own replies or a failure, that none
//! is left waiting (loom fails a model in which every thread blocks), that
//! the lane ends idle (no leader, nothing queued or in flight, no caller
//! counted), and that a connection found dead fails only the batch it cut
//! short.
//!
//! What it does not: deadlines. Loom does not model time, so a wait never
//! times out here and withdrawal at the deadline (`Stage::Abandoned`,
//! `give_up_lead`) is left to the unit tests (`lane/tests.rs`); nor the
//! lane selection of `lanes.rs`, nor real I/O.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;

use redis::Value;

use super::*;

/// Past any deadline the model could reach (a wait never times out under
/// loom anyway).
const PATIENT: Duration = Duration::from_secs(3600);

/// A connection that answers every `ECHO <id>` written on it with `id`,
/// at once. When `doomed`, its first read fails as a reset, and the ids
/// written on it before are noted there.
struct EchoWire {
    pending: VecDeque<Value>,
    generation: u64,
    doomed: Option<Arc<Mutex<Vec<String>>>>,
    broken: bool,
    dead: bool,
}

/// Opens [`EchoWire`]s; the first is doomed when `first_dies`.
struct EchoDial {
    generation: Generation,
    connects: AtomicUsize,
    first_dies: bool,
    /// The ids written on the doomed connection before it died.
    cut_short: Arc<Mutex<Vec<String>>>,
}

impl EchoDial {
    fn new(first_dies: bool) -> EchoDial {
        EchoDial {
            generation: Generation::default(),
            connects: AtomicUsize::new(0),
            first_dies,
            cut_short: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl Dial for EchoDial {
    type Wire = EchoWire;

    fn connect(&self) -> redis::RedisResult<EchoWire> {
        let first = self.connects.fetch_add(1, Ordering::SeqCst) == 0;
        Ok(EchoWire {
            pending: VecDeque::new(),
            generation: self.generation.current(),
            doomed: (first && self.first_dies).then(|| Arc::clone(&self.cut_short)),
            broken: false,
            dead: false,
        })
    }

    fn generation(&self) -> &Generation {
        &self.generation
    }
}

impl Wire for EchoWire {
    fn send(&mut self, bytes: &[u8], _now: Instant) -> Result<(), RedisError> {
        let text = String::from_utf8_lossy(bytes);
        let tokens: Vec<&str> = text.split("\r\n").collect();
        for (at, token) in tokens.iter().enumerate() {
            if *token == "ECHO"
                && let Some(id) = tokens.get(at + 2)
            {
                self.pending.push_back(Value::BulkString(id.as_bytes().to_vec()));
                if let Some(doomed) = &self.doomed {
                    doomed.lock().push((*id).to_owned());
                }
            }
        }
        Ok(())
    }

    fn receive(&mut self, replies: usize) -> (Vec<Value>, Option<RedisError>) {
        if self.doomed.take().is_some() {
            self.broken = true;
            self.dead = true;
            return (Vec::new(), Some(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into()));
        }
        let values: Vec<Value> = (0..replies).map_while(|_| self.pending.pop_front()).collect();
        assert_eq!(values.len(), replies, "a batch read more replies than it wrote");
        (values, None)
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

/// One caller: claims the lane, calls, and checks it got its own reply
/// (or, on a connection that dies, a failure that says so). `None` when
/// answered; its id when cut short.
fn caller(lane: &Lane<EchoWire>, dial: &EchoDial, id: String) -> Option<String> {
    lane.claim();
    let request = Request::command(redis::cmd("ECHO").arg(&id));
    match lane.call(request, PATIENT, Wiring { dial, wait: None }) {
        Ok(replies) => {
            assert_eq!(
                replies.values,
                vec![Value::BulkString(id.as_bytes().to_vec())],
                "{id} got another's reply"
            );
            None
        }
        Err(Failure::Transport { dead: true, .. }) if dial.first_dies => Some(id),
        Err(other) => panic!("{id} failed: {other:?}"),
    }
}

/// `callers` callers on one lane, each on a thread of its own but the
/// last, which runs on the model's main thread (loom allows four threads);
/// the connection first opened dies at its first read when `first_dies`;
/// the main thread closes the lane before it calls when `close_too`.
fn run(callers: usize, first_dies: bool, close_too: bool) {
    let lane = Arc::new(Lane::new(None));
    let dial = Arc::new(EchoDial::new(first_dies));
    let threads: Vec<_> = (1..callers)
        .map(|n| {
            let (lane, dial) = (Arc::clone(&lane), Arc::clone(&dial));
            loom::thread::spawn(move || caller(&lane, &dial, format!("c{n}")))
        })
        .collect();
    if close_too {
        lane.close();
    }
    let mut cut_short: Vec<String> = caller(&lane, &dial, "c0".to_owned()).into_iter().collect();
    for thread in threads {
        cut_short.extend(thread.join().unwrap_or_else(|_| panic!("a caller panicked")));
    }
    let state = lane.state.lock();
    assert!(!state.leading, "a leader is left");
    assert!(state.queue.is_empty() && state.in_flight.is_none(), "a request is left");
    assert_eq!(lane.load(), 0);
    assert_eq!(lane.queued(), 0);
    assert_eq!(lane.is_connected(), !close_too && state.conn.is_some());
    if !first_dies && !close_too {
        assert_eq!(dial.connects.load(Ordering::SeqCst), 1, "a connection was opened for nothing");
    }
    if first_dies {
        // Exactly the callers of the batch the dead connection cut short
        // fail; whoever queued behind it is answered on a new connection.
        let mut written = dial.cut_short.lock().clone();
        written.sort();
        cut_short.sort();
        assert!(!written.is_empty());
        assert_eq!(cut_short, written);
        assert_eq!(dial.generation.current(), 1);
    } else {
        assert!(cut_short.is_empty());
    }
}

#[test]
fn loom_two_callers_get_their_own_replies() {
    loom::model(|| run(2, false, false));
}

#[test]
fn loom_three_callers_hand_the_reading_on() {
    loom::model(|| run(3, false, false));
}

#[test]
fn loom_a_dead_connection_tells_every_caller_of_its_batch() {
    loom::model(|| run(3, true, false));
}

#[test]
fn loom_a_close_while_callers_lead() {
    loom::model(|| run(2, false, true));
}
