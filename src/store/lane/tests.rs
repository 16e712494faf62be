//! The lane driven by a fake wire (`store/wire/fake.rs`): which caller
//! gets which reply, who writes and who reads each batch, what a deadline,
//! an error reply, a dead connection, a refused connect and a close do.
//! Callers are named threads; the test learns what they wrote and read
//! from the fake's events, holds each read until it releases it, and waits
//! for nothing longer than [`LIMIT`].

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;

use crossbeam_channel::{Receiver, bounded};

use super::*;
use crate::store::wire::fake::{Control, Event, FakeDial, FakeWire, LIMIT, Release, answer, echo, fake};

/// A timeout no test reaches.
const PATIENT: Duration = Duration::from_secs(60);

/// A lane on a fake connection, and the fake's control.
struct Rig {
    lane: Arc<Lane<FakeWire>>,
    dial: Arc<FakeDial>,
    control: Control,
}

type Outcome = Result<Replies, Failure>;

impl Rig {
    fn new(hold: bool) -> Rig {
        let (dial, control) = fake(hold);
        Rig { lane: Arc::new(Lane::new(None)), dial: Arc::new(dial), control }
    }

    /// A call on the test's own thread.
    fn call(&self, id: &str) -> Outcome {
        self.lane.claim();
        self.lane.call(echo(id), PATIENT, Wiring { dial: &*self.dial, wait: None })
    }

    /// A call on a thread named `id`; its outcome comes on the channel.
    fn spawn(&self, id: &str, timeout: Duration) -> Receiver<Outcome> {
        let (done, outcome) = bounded(1);
        let (lane, dial, name) = (Arc::clone(&self.lane), Arc::clone(&self.dial), id.to_owned());
        thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                lane.claim();
                let _ = done.send(lane.call(echo(&name), timeout, Wiring { dial: &*dial, wait: None }));
            })
            .unwrap();
        outcome
    }

    /// A call on a thread named `id` that the test has seen queue (the
    /// lane's queue holding `queued` requests then).
    fn queue(&self, id: &str, timeout: Duration, queued: usize) -> Receiver<Outcome> {
        let outcome = self.spawn(id, timeout);
        until(|| self.lane.queued() == queued, || format!("{id} to queue as number {queued}"));
        outcome
    }

    fn sent(&self, wire: usize, by: &str, ids: &[&str]) {
        let ids = ids.iter().map(|id| (*id).to_owned()).collect();
        assert_eq!(self.control.event(), Event::Sent { wire, by: by.to_owned(), ids });
    }

    fn reading(&self, wire: usize, by: &str, replies: usize) {
        assert_eq!(self.control.event(), Event::Reading { wire, by: by.to_owned(), replies });
    }

    /// Waits until the lane has no caller left, and checks it is idle.
    fn settled(&self) {
        until(|| self.lane.load() == 0, || "every caller to leave".to_owned());
        let state = self.lane.state.lock();
        assert!(!state.leading && state.queue.is_empty() && state.in_flight.is_none());
        assert_eq!(self.lane.queued(), 0);
        assert!(!self.lane.is_stalled(|| Instant::now() + PATIENT, Duration::ZERO));
    }
}

/// Polls `done` until it holds, for at most [`LIMIT`] (the lane has no
/// hook that says a caller queued; its counters say it).
fn until(done: impl Fn() -> bool, what: impl Fn() -> String) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < LIMIT, "waited {LIMIT:?} for {}", what());
        thread::yield_now();
    }
}

/// The outcome of a spawned call, waiting for it at most [`LIMIT`].
fn outcome(of: &Receiver<Outcome>) -> Outcome {
    of.recv_timeout(LIMIT).expect("a caller hung")
}

fn answered(of: &Receiver<Outcome>) -> String {
    match outcome(of) {
        Ok(replies) => answer(&replies),
        Err(failure) => panic!("no reply: {failure:?}"),
    }
}

fn failed(of: &Receiver<Outcome>) -> Failure {
    match outcome(of) {
        Ok(replies) => panic!("replies instead of a failure: {replies:?}"),
        Err(failure) => failure,
    }
}

fn this_thread() -> String {
    thread::current().name().unwrap_or("unnamed").to_owned()
}

#[test]
fn an_uncontended_caller_leads_its_own_batch_on_its_own_thread() {
    let rig = Rig::new(false);
    let me = this_thread();
    assert!(!rig.lane.is_connected());
    assert_eq!(answer(&rig.call("a").unwrap()), "a");
    rig.sent(1, &me, &["a"]);
    rig.reading(1, &me, 1);
    assert_eq!(answer(&rig.call("b").unwrap()), "b");
    rig.sent(1, &me, &["b"]);
    rig.reading(1, &me, 1);
    assert_eq!(rig.dial.connects(), 1, "the connection is kept");
    assert!(rig.lane.is_connected());
    rig.settled();
}

#[test]
fn replies_reach_their_callers_in_arrival_order_and_the_reading_is_handed_on() {
    let rig = Rig::new(true);
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    let queued: Vec<_> =
        ["q1", "q2", "q3"].iter().zip(1..).map(|(id, n)| rig.queue(id, PATIENT, n)).collect();

    rig.control.release(Release::Answer);
    // The leader writes what queued while its batch was in flight before
    // it returns: the connection does not wait for a woken thread. It
    // hands the reading to the first caller of that batch.
    rig.sent(1, "first", &["q1", "q2", "q3"]);
    rig.reading(1, "q1", 3);
    assert_eq!(answered(&first), "first");

    // A caller that queues while that batch is in flight goes out in the
    // next one, which the reader of this one writes and hands on.
    let late = rig.queue("late", PATIENT, 1);
    rig.control.release(Release::Answer);
    rig.sent(1, "q1", &["late"]);
    rig.reading(1, "late", 1);
    for (id, outcome) in ["q1", "q2", "q3"].iter().zip(&queued) {
        assert_eq!(answered(outcome), *id);
    }
    rig.control.release(Release::Answer);
    assert_eq!(answered(&late), "late");
    assert!(rig.control.is_quiet());
    assert_eq!(rig.dial.connects(), 1);
    rig.settled();
}

#[test]
fn an_unsent_request_is_withdrawn_at_its_deadline_and_never_written() {
    let rig = Rig::new(true);
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    let hasty = rig.queue("hasty", Duration::from_millis(20), 1);
    assert!(matches!(failed(&hasty), Failure::Unsent));

    rig.control.release(Release::Answer);
    assert_eq!(answered(&first), "first");
    assert!(rig.control.is_quiet(), "the withdrawn request was written");
    rig.settled();
}

#[test]
fn a_request_written_but_unanswered_by_its_deadline_fails_as_a_timeout_and_its_reply_is_dropped() {
    let rig = Rig::new(true);
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    let reader = rig.queue("reader", PATIENT, 1);
    // Long enough to be written before its deadline on a loaded machine.
    let hasty = rig.queue("hasty", Duration::from_secs(1), 2);
    rig.control.release(Release::Answer);
    rig.sent(1, "first", &["reader", "hasty"]);
    rig.reading(1, "reader", 2);
    assert_eq!(answered(&first), "first");

    match failed(&hasty) {
        Failure::Transport { error, dead: false } => assert!(error.is_timeout(), "{error:?}"),
        other => panic!("not a timeout: {other:?}"),
    }
    rig.control.release(Release::Answer);
    assert_eq!(answered(&reader), "reader");
    assert!(rig.lane.is_connected(), "every reply was read: the connection is fine");
    rig.settled();
}

#[test]
fn an_error_reply_reaches_its_own_caller_only() {
    let rig = Rig::new(true);
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    let ok1 = rig.queue("ok1", PATIENT, 1);
    let refused = rig.queue("err-refused", PATIENT, 2);
    let ok2 = rig.queue("ok2", PATIENT, 3);
    rig.control.release(Release::Answer);
    rig.sent(1, "first", &["ok1", "err-refused", "ok2"]);
    rig.reading(1, "ok1", 3);
    rig.control.release(Release::Answer);
    assert_eq!(answered(&first), "first");
    assert_eq!(answered(&ok1), "ok1");
    assert_eq!(answered(&refused), "error reply: err-refused");
    assert_eq!(answered(&ok2), "ok2");

    rig.control.hold(false);
    assert_eq!(answer(&rig.call("after").unwrap()), "after");
    assert_eq!(rig.dial.connects(), 1, "an error reply leaves the connection as it was");
    rig.settled();
}

#[test]
fn a_connection_dying_mid_batch_tells_every_caller_and_the_next_batch_reconnects() {
    let rig = Rig::new(true);
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    let batch: Vec<_> = ["b", "c", "d"].iter().zip(1..).map(|(id, n)| rig.queue(id, PATIENT, n)).collect();
    rig.control.release(Release::Answer);
    rig.sent(1, "first", &["b", "c", "d"]);
    rig.reading(1, "b", 3);
    assert_eq!(answered(&first), "first");
    let behind = rig.queue("behind", PATIENT, 1);

    // One reply in, then the connection is reset.
    rig.control.release(Release::Fail { after: 1, dead: true });
    assert_eq!(answered(&batch[0]), "b");
    for cut in &batch[1..] {
        assert!(matches!(failed(cut), Failure::Transport { dead: true, .. }));
    }
    assert_eq!(rig.dial.generation().current(), 1, "a dead connection starts a new generation");
    // The caller queued behind the dead batch goes out on a new connection.
    rig.sent(2, "behind", &["behind"]);
    rig.reading(2, "behind", 1);
    rig.control.release(Release::Answer);
    assert_eq!(answered(&behind), "behind");
    assert_eq!(rig.dial.connects(), 2);
    rig.settled();
}

#[test]
fn a_slow_read_fails_its_batch_without_starting_a_generation() {
    let rig = Rig::new(false);
    let me = this_thread();
    assert!(rig.call("connects").is_ok());
    rig.sent(1, &me, &["connects"]);
    rig.reading(1, &me, 1);
    rig.control.hold(true);
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    rig.control.release(Release::Fail { after: 0, dead: false });
    match failed(&first) {
        Failure::Transport { error, dead: false } => assert!(error.is_timeout(), "{error:?}"),
        other => panic!("not a timeout: {other:?}"),
    }
    assert_eq!(rig.dial.generation().current(), 0);
    until(|| rig.lane.load() == 0, || "the caller to leave".to_owned());
    assert!(!rig.lane.is_connected(), "a connection that timed out is retired");
    rig.control.hold(false);
    assert_eq!(answer(&rig.call("again").unwrap()), "again");
    assert_eq!(rig.dial.connects(), 2);
    rig.settled();
}

#[test]
fn a_failed_write_fails_its_batch_and_a_dead_one_starts_a_new_generation() {
    let rig = Rig::new(false);
    assert!(rig.call("a").is_ok());
    rig.control.fail_next_send(true);
    assert!(matches!(rig.call("b"), Err(Failure::Transport { dead: true, .. })));
    assert_eq!(rig.dial.generation().current(), 1);
    assert!(!rig.lane.is_connected());
    assert_eq!(answer(&rig.call("c").unwrap()), "c");
    assert_eq!(rig.dial.connects(), 2);
    rig.settled();
}

#[test]
fn a_connection_of_an_earlier_generation_is_replaced_before_its_next_use() {
    let rig = Rig::new(false);
    let me = this_thread();
    assert!(rig.call("a").is_ok());
    rig.sent(1, &me, &["a"]);
    rig.reading(1, &me, 1);
    rig.dial.generation().advance();
    assert!(rig.call("b").is_ok());
    rig.sent(2, &me, &["b"]);
    rig.reading(2, &me, 1);
    assert_eq!(rig.dial.connects(), 2);
    rig.settled();
}

#[test]
fn a_refused_connect_fails_the_callers_queued_behind_it_as_never_sent() {
    let rig = Rig::new(true);
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    let queued: Vec<_> = ["b", "c"].iter().zip(1..).map(|(id, n)| rig.queue(id, PATIENT, n)).collect();
    rig.control
        .refuse(Some(redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))));
    rig.control.release(Release::Fail { after: 0, dead: true });
    assert!(matches!(failed(&first), Failure::Transport { dead: true, .. }));
    for refused in &queued {
        assert!(matches!(failed(refused), Failure::Connect(_)));
    }
    assert!(rig.control.is_quiet(), "nothing was written");
    rig.settled();
}

#[test]
fn a_lane_whose_batch_waits_for_its_replies_is_stalled() {
    let rig = Rig::new(true);
    let later = || Instant::now() + Duration::from_secs(1);
    assert!(!rig.lane.is_stalled(later, Duration::from_millis(50)), "an idle lane");
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    assert!(rig.lane.is_stalled(later, Duration::from_millis(50)));
    assert!(!rig.lane.is_stalled(Instant::now, PATIENT));
    rig.control.release(Release::Answer);
    assert_eq!(answered(&first), "first");
    assert!(!rig.lane.is_stalled(later, Duration::from_millis(50)), "no batch in flight");
    rig.settled();
}

#[test]
fn a_lane_closed_while_led_serves_its_callers_then_drops_the_connection() {
    let rig = Rig::new(true);
    let first = rig.spawn("first", PATIENT);
    rig.sent(1, "first", &["first"]);
    rig.reading(1, "first", 1);
    let queued = rig.queue("queued", PATIENT, 1);
    rig.lane.close();
    rig.control.release(Release::Answer);
    rig.sent(1, "first", &["queued"]);
    rig.reading(1, "queued", 1);
    rig.control.release(Release::Answer);
    assert_eq!(answered(&first), "first");
    assert_eq!(answered(&queued), "queued");
    until(|| rig.lane.load() == 0, || "every caller to leave".to_owned());
    assert!(!rig.lane.is_connected(), "closed once its leader was done");

    // A closed lane still serves a call, on a connection it does not keep.
    rig.control.hold(false);
    assert_eq!(answer(&rig.call("after").unwrap()), "after");
    assert_eq!(rig.dial.connects(), 2);
    assert!(!rig.lane.is_connected());
    rig.settled();
}

#[test]
fn an_idle_lane_closes_at_once_and_adopts_nothing_after() {
    let rig = Rig::new(false);
    assert!(rig.call("a").is_ok());
    assert!(rig.lane.is_connected());
    rig.lane.close();
    assert!(!rig.lane.is_connected());
    rig.lane.adopt(rig.dial.connect().unwrap());
    assert!(!rig.lane.is_connected(), "a closed lane adopted a connection");
}

#[test]
fn an_adopted_connection_serves_the_first_call() {
    let rig = Rig::new(false);
    rig.lane.adopt(rig.dial.connect().unwrap());
    assert!(rig.lane.is_connected());
    assert!(rig.call("a").is_ok());
    assert_eq!(rig.dial.connects(), 1);
}

fn ticket(stage: Stage) -> Arc<Ticket> {
    Arc::new(Ticket { stage: Mutex::new(stage), changed: Condvar::new() })
}

#[test]
fn a_ticket_past_its_deadline_is_abandoned_and_then_neither_sent_led_nor_told() {
    let past = Instant::now;
    let queued = ticket(Stage::Queued);
    assert!(matches!(queued.wait(past), Turn::TimedOut { sent: false, led: false }));
    assert!(!queued.take_into_batch(), "an abandoned request was taken into a batch");
    assert!(!queued.offer_lead(), "an abandoned caller was offered the lead");

    let sent = ticket(Stage::Sent);
    assert!(matches!(sent.wait(past), Turn::TimedOut { sent: true, led: false }));
    sent.finish(Ok(Replies { values: Vec::new(), acked: None }));
    assert!(matches!(*sent.stage.lock(), Stage::Abandoned), "a late reply was delivered");

    // A lead found before the wait is taken, whatever the deadline; the
    // request stays sent (it is in the batch to read).
    let led = ticket(Stage::Lead { sent: true });
    assert!(matches!(led.wait(past), Turn::Lead));
    assert!(matches!(*led.stage.lock(), Stage::Sent));
    assert!(!led.take_into_batch(), "a sent request was taken into a second batch");

    let done = ticket(Stage::Sent);
    done.finish(Err(Failure::Unsent));
    assert!(!done.offer_lead(), "a caller with its outcome was offered the lead");
    assert!(matches!(done.wait(past), Turn::Done(Err(Failure::Unsent))));
}

/// The race that leads here (the reading handed to a caller just as its
/// deadline passes) cannot be forced from outside, so the lane is put in
/// that state by hand: a batch in flight whose reader gave up.
#[test]
fn a_reading_given_up_at_the_deadline_fails_its_batch_retires_the_connection_and_passes_the_lead_on() {
    let rig = Rig::new(false);
    let me = this_thread();
    assert!(rig.call("connects").is_ok());
    rig.sent(1, &me, &["connects"]);
    rig.reading(1, &me, 1);
    let (reader, member, next) = (ticket(Stage::Abandoned), ticket(Stage::Sent), ticket(Stage::Queued));
    let mut written = [echo("reader"), echo("member")];
    let batch = Batch::new(written.iter_mut(), None);
    {
        let mut state = rig.lane.state.lock();
        state.leading = true;
        let members = [("reader", &reader), ("member", &member)]
            .map(|(id, ticket)| Queued { request: echo(id), ticket: Arc::clone(ticket) });
        state.in_flight = Some(InFlight { batch, members: members.into(), written: Instant::now() });
        state.queue.push_back(Queued { request: echo("next"), ticket: Arc::clone(&next) });
    }
    rig.lane.give_up_lead();
    match &*member.stage.lock() {
        Stage::Done(Err(Failure::Transport { error, dead: false })) => {
            assert!(error.is_timeout(), "{error:?}")
        }
        _ => panic!("the other member of the batch was not told"),
    }
    assert!(!rig.lane.is_connected(), "the connection its late replies will arrive on was kept");
    assert!(matches!(*next.stage.lock(), Stage::Lead { sent: false }), "the lead was not passed on");

    // The caller handed the lead (played by the test's thread) writes the
    // queue on a new connection.
    rig.lane.lead(Wiring { dial: &*rig.dial, wait: None });
    rig.sent(2, &me, &["next"]);
    rig.reading(2, &me, 1);
    match &*next.stage.lock() {
        Stage::Done(Ok(replies)) => assert_eq!(answer(replies), "next"),
        _ => panic!("the queued request got no reply"),
    }
    assert!(rig.control.is_quiet());
    let state = rig.lane.state.lock();
    assert!(!state.leading && state.in_flight.is_none() && state.conn.is_some());
}
