//! The `tracing` feature: the spans and events keyholder emits for real lock
//! operations against a real Redis, seen by a small collecting subscriber.
//!
//! Acquire, release and job spans belong to the calling thread, so most
//! tests install the subscriber for their own thread only. The watchdog's
//! events come from its own thread: one test installs the collector as the
//! global default and looks only at its own lock's records. Hence a test
//! binary of its own, not a module of `tests/suite`, whose other tests
//! would all report to that subscriber.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{RedisServer, ServerExt, eventually, recv_within, spawn};
use keyholder::{ErrorKind, Lease, LostReason};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

const LIMIT: Duration = Duration::from_secs(10);

type Fields = BTreeMap<String, String>;

#[derive(Debug, Clone)]
struct SpanRec {
    name: &'static str,
    fields: Fields,
    metadata: &'static Metadata<'static>,
}

#[derive(Debug, Clone)]
struct EventRec {
    name: &'static str,
    fields: Fields,
    /// The name of the span it happened in.
    parent: Option<&'static str>,
}

#[derive(Debug, Default)]
struct Collected {
    spans: Vec<SpanRec>,
    events: Vec<EventRec>,
}

/// A subscriber that keeps every span's and event's name and fields.
#[derive(Clone, Default)]
struct Collector {
    data: Arc<Mutex<Collected>>,
    /// Entered spans, per thread.
    stacks: Arc<Mutex<std::collections::HashMap<std::thread::ThreadId, Vec<u64>>>>,
}

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Collector {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut fields = Fields::new();
        attrs.record(&mut Visitor(&mut fields));
        let mut data = self.data.lock().unwrap();
        data.spans.push(SpanRec { name: attrs.metadata().name(), fields, metadata: attrs.metadata() });
        Id::from_u64(data.spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut data = self.data.lock().unwrap();
        let idx = usize::try_from(span.into_u64()).unwrap() - 1;
        values.record(&mut Visitor(&mut data.spans[idx].fields));
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        let current =
            self.stacks.lock().unwrap().get(&std::thread::current().id()).and_then(|s| s.last().copied());
        let mut data = self.data.lock().unwrap();
        let parent = event.parent().map(Id::into_u64).or(current).map(|id| data.spans[id as usize - 1].name);
        data.events.push(EventRec { name: event.metadata().name(), fields, parent });
    }

    /// What `Span::current()` asks for: the innermost span this thread entered.
    fn current_span(&self) -> tracing_core::span::Current {
        let current =
            self.stacks.lock().unwrap().get(&std::thread::current().id()).and_then(|s| s.last().copied());
        match current {
            Some(id) => {
                let metadata = self.data.lock().unwrap().spans[id as usize - 1].metadata;
                tracing_core::span::Current::new(Id::from_u64(id), metadata)
            }
            None => tracing_core::span::Current::none(),
        }
    }

    fn enter(&self, span: &Id) {
        self.stacks.lock().unwrap().entry(std::thread::current().id()).or_default().push(span.into_u64());
    }

    fn exit(&self, _: &Id) {
        self.stacks.lock().unwrap().entry(std::thread::current().id()).or_default().pop();
    }
}

impl Collector {
    fn spans(&self, name: &str, lock: &str) -> Vec<Fields> {
        let data = self.data.lock().unwrap();
        data.spans
            .iter()
            .filter(|s| s.name == name && s.fields.get("lock").map(String::as_str) == Some(lock))
            .map(|s| s.fields.clone())
            .collect()
    }

    fn events(&self, name: &str) -> Vec<EventRec> {
        self.data.lock().unwrap().events.iter().filter(|e| e.name == name).cloned().collect()
    }
}

fn field<'a>(fields: &'a Fields, name: &str) -> &'a str {
    fields.get(name).map_or_else(|| panic!("no field {name} in {fields:?}"), String::as_str)
}

fn wait_ms(fields: &Fields) -> u64 {
    field(fields, "wait_ms").parse().unwrap()
}

#[test]
fn acquire_and_release_spans_carry_name_mode_outcome_and_wait() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("trace:a").unwrap();
    let collector = Collector::default();
    tracing::subscriber::with_default(collector.clone(), || {
        let outer = lock.lock().unwrap();
        let inner = lock.lock().unwrap();
        inner.unlock().unwrap();
        outer.unlock().unwrap();
    });
    let acquires = collector.spans("keyholder.acquire", "trace:a");
    assert_eq!(acquires.len(), 2, "{acquires:?}");
    for (span, reentrant) in acquires.iter().zip(["false", "true"]) {
        assert_eq!(field(span, "mode"), "blocking");
        assert_eq!(field(span, "outcome"), "acquired");
        assert_eq!(field(span, "reentrant"), reentrant);
        assert_eq!(field(span, "waited"), "false");
        assert!(wait_ms(span) < LIMIT.as_millis() as u64);
    }
    let releases = collector.spans("keyholder.release", "trace:a");
    assert_eq!(releases.len(), 2);
    assert!(releases.iter().all(|s| field(s, "outcome") == "released"), "{releases:?}");
    // Only the last guard's release ends the hold, and says how long it was held.
    assert!(!releases[0].contains_key("held_ms"), "{releases:?}");
    assert!(field(&releases[1], "held_ms").parse::<u64>().is_ok(), "{releases:?}");
    // An uncontended acquire does not wait.
    assert!(collector.events("keyholder.wait").is_empty());
}

#[test]
fn a_contended_acquire_records_its_wait_inside_its_span() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = client.lock("trace:b").unwrap();
    // Held by another client, so the waits below are in Redis.
    let holder = server.client().lock("trace:b").unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holding = spawn(move || {
        let guard = holder.lock().unwrap();
        held_tx.send(()).unwrap();
        let _ = done_rx.recv_timeout(LIMIT);
        guard.unlock().unwrap();
    });
    held_rx.recv_timeout(LIMIT).unwrap();

    let collector = Collector::default();
    tracing::subscriber::with_default(collector.clone(), || {
        assert!(lock.try_lock().unwrap().is_none());
        assert!(lock.try_lock_for(Duration::from_millis(200)).unwrap().is_none());
    });
    done_tx.send(()).unwrap();
    recv_within(&holding, LIMIT, "the holder");

    let spans = collector.spans("keyholder.acquire", "trace:b");
    assert_eq!(spans.len(), 2, "{spans:?}");
    let (tried, timed) = (&spans[0], &spans[1]);
    assert_eq!((field(tried, "mode"), field(tried, "outcome")), ("try", "busy"));
    assert_eq!(field(tried, "waited"), "false");
    assert_eq!((field(timed, "mode"), field(timed, "outcome")), ("timed", "timed_out"));
    assert_eq!(field(timed, "waited"), "true");
    assert!(wait_ms(timed) >= 190, "{timed:?}");
    assert!(!timed.contains_key("reentrant"), "only an acquisition says whether it re-entered");
    let waits = collector.events("keyholder.wait");
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].parent, Some("keyholder.acquire"));
    assert_eq!(field(&waits[0].fields, "lock"), "trace:b");
}

#[test]
fn an_acquire_that_fails_says_error() {
    let server = RedisServer::start();
    let client = server.client();
    let _: () = redis::cmd("SET").arg("trace:c").arg("not a lock").query(&mut server.conn()).unwrap();
    let collector = Collector::default();
    let err = tracing::subscriber::with_default(collector.clone(), || {
        client.lock("trace:c").unwrap().try_lock().unwrap_err()
    });
    assert_eq!(err.kind(), ErrorKind::WrongType);
    let spans = collector.spans("keyholder.acquire", "trace:c");
    assert_eq!(spans.len(), 1);
    assert_eq!(field(&spans[0], "outcome"), "error");
}

#[test]
fn a_job_runs_inside_its_span() {
    let server = RedisServer::start();
    let client = server.client();
    let job = client.job("trace:job").unwrap();
    let collector = Collector::default();
    tracing::subscriber::with_default(collector.clone(), || {
        assert!(job.run(|| tracing::info!(name: "app.work", "working")).unwrap().ran());
    });
    let spans = collector.spans("keyholder.job", "trace:job");
    assert_eq!(spans.len(), 1);
    assert_eq!(field(&spans[0], "outcome"), "ran");
    let work = collector.events("app.work");
    assert_eq!(work.len(), 1);
    assert_eq!(work[0].parent, Some("keyholder.job"));
}

/// The watchdog thread's events need the global default subscriber.
#[test]
fn renewal_rounds_and_a_lost_hold_are_events_of_the_watchdog() {
    let collector = Collector::default();
    tracing::subscriber::set_global_default(collector.clone()).expect("the only global subscriber");
    let server = RedisServer::start();
    let client = server.builder().watchdog_timeout(Duration::from_millis(300)).build().unwrap();
    let lock = client.lock("trace:renewed").unwrap().with_lease(Lease::Watchdog).unwrap();
    let guard = lock.lock().unwrap();
    let lost = guard.lost_signal();
    assert!(
        eventually(LIMIT, || collector
            .events("keyholder.renewal")
            .iter()
            .any(|e| field(&e.fields, "holds") != "0")),
        "no renewal round seen"
    );
    let round = &collector.events("keyholder.renewal")[0];
    assert_eq!(field(&round.fields, "failed"), "false");
    // Deleted without a message: its removal alarm tells the holder at
    // once (tests/suite/key_removed.rs), before the next renewal.
    let _: i64 = redis::cmd("DEL").arg("trace:renewed").query(&mut server.conn()).unwrap();
    assert_eq!(lost.recv_timeout(LIMIT).unwrap(), LostReason::Gone);
    let lost_events: Vec<EventRec> = collector
        .events("keyholder.hold_lost")
        .into_iter()
        .filter(|e| e.fields.get("lock").map(String::as_str) == Some("trace:renewed"))
        .collect();
    assert_eq!(lost_events.len(), 1, "{lost_events:?}");
    assert_eq!(field(&lost_events[0].fields, "reason"), "gone");
    drop(guard);
}
