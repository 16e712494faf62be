//! Observability: `tracing` spans and events (the `tracing` feature) and
//! counters, histograms and gauges through the `metrics` facade (the
//! `metrics` feature), emitted from the few places that matter: acquire,
//! release, a hold's loss, a renewal round, a pub/sub reconnect, a run-once
//! job and a command connection opened, closed or failing to open.
//!
//! The two gauges (holds now, waiting calls now) go up and down through a
//! [`Counted`]: one is made where a hold begins (`Hold::new`) and where an
//! acquire call starts waiting (`Acquire::waiting`), and it gives its unit
//! back exactly once, at the first of its ends (a release, a loss, an
//! error, a timeout) or when it is dropped, so that no end path can leave
//! the gauge high.
//!
//! Without the features every type here is zero-sized and every function an
//! empty `#[inline]` one, so the callers compile to what they were before:
//! no clock read, no allocation, no atomic. `docs/observability.md` lists
//! the spans, their fields, and every metric's name, type, labels and unit.

use std::time::Instant;

#[cfg(any(feature = "tracing", feature = "metrics"))]
use std::cell::Cell;
#[cfg(not(any(feature = "tracing", feature = "metrics")))]
use std::marker::PhantomData;

#[cfg(any(feature = "tracing", feature = "metrics"))]
use crate::error::ErrorKind;
use crate::error::{LostReason, Result};

/// The names of the metrics keyholder emits with the `metrics` feature.
///
/// Every counter is a monotonic count of events, every histogram records
/// seconds. `docs/observability.md` describes each one's labels; with
/// `label_metrics_by_lock` (the `metrics` feature) the per-lock
/// metrics also carry a `lock` label.
pub mod metric_names {
    /// Counter: finished acquire calls (`lock`, `try_lock`, `try_lock_for`,
    /// `try_lock_until`), re-entries included. Labels: `outcome`
    /// (`acquired`, `busy`: a `try_lock` found it held, `timed_out`,
    /// `error`) and `mode` (`try`, `blocking`, `timed`).
    pub const ACQUISITIONS: &str = "keyholder_acquisitions_total";
    /// Counter: acquire calls that found the lock held and waited for it
    /// (in Redis, or behind another thread of the client). Label: `outcome`.
    pub const ACQUIRE_WAITS: &str = "keyholder_acquire_waits_total";
    /// Histogram, seconds: the time an acquire call took, from the call to
    /// its outcome (for an uncontended call, its round trip). Label:
    /// `outcome`.
    pub const ACQUIRE_WAIT_SECONDS: &str = "keyholder_acquire_wait_seconds";
    /// Counter: guard releases (drop or `unlock`). Label: `outcome`
    /// (`released`, `lock_lost`, `not_owner`, `error`).
    pub const RELEASES: &str = "keyholder_releases_total";
    /// Histogram, seconds: how long holds were held, from the acquire
    /// call's send to the release of their last guard (re-entries are part
    /// of the outer hold).
    pub const HOLD_SECONDS: &str = "keyholder_hold_seconds";
    /// Counter: holds the client learned were lost, once per hold. Label:
    /// `reason` (`renewal_refused`, `lease_expired`, `release_found_gone`,
    /// `gone`), as [`LostReason`](crate::LostReason).
    pub const HOLDS_LOST: &str = "keyholder_holds_lost_total";
    /// Counter: watchdog renewal rounds that had holds to renew (one round
    /// renews every watchdog-lease hold of the client, in batches).
    pub const RENEWAL_ROUNDS: &str = "keyholder_renewal_rounds_total";
    /// Counter: renewal rounds cut short because a renewal call failed
    /// (Redis unreachable or erroring); retried the next period.
    pub const RENEWAL_FAILURES: &str = "keyholder_renewal_failures_total";
    /// Counter: times the pub/sub connection was established again after it
    /// was lost or out of reach (a restart, a failover, a silent connection,
    /// Redis down when the reader first connected).
    pub const PUBSUB_RECONNECTS: &str = "keyholder_pubsub_reconnects_total";
    /// Counter: run-once job calls (`Job::run`, `Job::run_with`). Label:
    /// `outcome` (`ran`, `skipped`, `lost`, `error`).
    pub const JOBS: &str = "keyholder_jobs_total";
    /// Counter: command connections opened (set up and ready). Label: `by`
    /// (`pool`: opened in reserve on the pool's maintenance thread,
    /// `caller`: opened by a call that found none ready).
    pub const CONNECTIONS_OPENED: &str = "keyholder_connections_opened_total";
    /// Counter: command connections closed (failed, found dead, past their
    /// idle timeout or maximum lifetime, of an earlier generation, or the
    /// client shut down).
    pub const CONNECTIONS_CLOSED: &str = "keyholder_connections_closed_total";
    /// Counter: command connections that could not be opened (refused,
    /// timed out, denied). Label: `by` (`pool`, `caller`), as
    /// [`CONNECTIONS_OPENED`].
    pub const CONNECTION_FAILURES: &str = "keyholder_connection_failures_total";
    /// Gauge: holds of the client now: locks, read or write holds,
    /// semaphore permits and jobs' holds acquired and neither released nor
    /// known lost (a re-entry is part of its thread's hold). Labels:
    /// `client` (the first 8 characters of the client's id, as its threads'
    /// names), and `lock` with `label_metrics_by_lock`.
    pub const LOCKS_HELD: &str = "keyholder_locks_held";
    /// Gauge: acquire calls of the client waiting now for a lock held
    /// elsewhere (in Redis, or by another thread of the client): up when a
    /// call starts waiting, down when it returns (acquired, timed out or
    /// failed). Labels: `client`, and `lock` with `label_metrics_by_lock`.
    pub const THREADS_WAITING: &str = "keyholder_threads_waiting";

    /// Every name above.
    pub const ALL: [&str; 15] = [
        ACQUISITIONS,
        ACQUIRE_WAITS,
        ACQUIRE_WAIT_SECONDS,
        RELEASES,
        HOLD_SECONDS,
        HOLDS_LOST,
        RENEWAL_ROUNDS,
        RENEWAL_FAILURES,
        PUBSUB_RECONNECTS,
        JOBS,
        CONNECTIONS_OPENED,
        CONNECTIONS_CLOSED,
        CONNECTION_FAILURES,
        LOCKS_HELD,
        THREADS_WAITING,
    ];
}

/// How an acquire call waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `try_lock`: one attempt.
    Try,
    /// `lock`: as long as it takes.
    Blocking,
    /// `try_lock_for`, `try_lock_until`: until a deadline.
    Timed,
}

impl Mode {
    #[inline]
    pub(crate) fn of(deadline: Option<Instant>, block: bool) -> Mode {
        match (deadline, block) {
            (_, false) => Mode::Try,
            (None, true) => Mode::Blocking,
            (Some(_), true) => Mode::Timed,
        }
    }

    #[cfg(any(feature = "tracing", feature = "metrics"))]
    fn as_str(self) -> &'static str {
        match self {
            Mode::Try => "try",
            Mode::Blocking => "blocking",
            Mode::Timed => "timed",
        }
    }
}

/// How an acquire call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    /// Got a guard; `reentrant` when the thread already held the lock.
    Acquired { reentrant: bool },
    /// A `try_lock` found the lock held.
    Busy,
    /// A wait ended at its deadline without the lock.
    TimedOut,
    /// An error was returned.
    Error,
}

impl AcquireOutcome {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    fn as_str(self) -> &'static str {
        match self {
            AcquireOutcome::Acquired { .. } => "acquired",
            AcquireOutcome::Busy => "busy",
            AcquireOutcome::TimedOut => "timed_out",
            AcquireOutcome::Error => "error",
        }
    }
}

/// One acquire call being observed: the `keyholder.acquire` span, and what
/// its metrics need.
#[derive(Debug)]
pub(crate) struct Acquire<'a> {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    name: &'a str,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    mode: Mode,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    start: Instant,
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    waited: Cell<bool>,
    /// The `client` label of the waiting gauge.
    #[cfg(feature = "metrics")]
    client: &'a str,
    /// The `kind` label of the waiting gauge (with the `lock` label).
    #[cfg(feature = "metrics")]
    kind: &'static str,
    /// The call's unit of the waiting gauge, from its first wait to its
    /// end (the drop of `self`).
    #[cfg(feature = "metrics")]
    waiting: std::cell::OnceCell<Counted>,
    #[cfg(feature = "tracing")]
    span: tracing::Span,
    #[cfg(not(any(feature = "tracing", feature = "metrics")))]
    _name: PhantomData<&'a str>,
}

impl<'a> Acquire<'a> {
    /// Starts observing an acquire call of `name`'s lock, a `kind` (the
    /// kind's noun: `lock`, `read lock`, `semaphore`, ...), by the client
    /// `client` (its id).
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn start(name: &'a str, client: &'a str, kind: &'static str, mode: Mode) -> Self {
        Acquire {
            #[cfg(feature = "tracing")]
            span: tracing::debug_span!(
                "keyholder.acquire",
                lock = name,
                mode = mode.as_str(),
                outcome = tracing::field::Empty,
                wait_ms = tracing::field::Empty,
                waited = tracing::field::Empty,
                reentrant = tracing::field::Empty,
            ),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            name,
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            mode,
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            start: Instant::now(),
            #[cfg(any(feature = "tracing", feature = "metrics"))]
            waited: Cell::new(false),
            #[cfg(feature = "metrics")]
            client,
            #[cfg(feature = "metrics")]
            kind,
            #[cfg(feature = "metrics")]
            waiting: std::cell::OnceCell::new(),
            #[cfg(not(any(feature = "tracing", feature = "metrics")))]
            _name: PhantomData,
        }
    }

    /// Runs `f` inside the span, so that the wait event is its child.
    #[inline]
    pub(crate) fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        #[cfg(feature = "tracing")]
        let _entered = self.span.enter();
        f()
    }

    /// The call found the lock held and is about to wait: a
    /// `keyholder.wait` event, once per call, and the call counted in the
    /// waiting gauge until it ends.
    #[inline]
    pub(crate) fn waiting(&self) {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        if !self.waited.replace(true) {
            #[cfg(feature = "tracing")]
            tracing::debug!(name: "keyholder.wait", lock = self.name, "waiting for the lock");
            #[cfg(feature = "metrics")]
            self.waiting.get_or_init(|| {
                Counted::start(metric_names::THREADS_WAITING, self.name, self.client, self.kind)
            });
        }
    }

    /// Ends the call: records the span's outcome fields and the metrics.
    /// `outcome` is only asked for with a feature on.
    #[inline]
    #[cfg_attr(not(any(feature = "tracing", feature = "metrics")), allow(unused_variables))]
    pub(crate) fn finish(self, outcome: impl FnOnce() -> AcquireOutcome) {
        #[cfg(any(feature = "tracing", feature = "metrics"))]
        {
            let outcome = outcome();
            let took = self.start.elapsed();
            let waited = self.waited.get();
            #[cfg(feature = "tracing")]
            {
                let span = &self.span;
                span.record("outcome", outcome.as_str());
                span.record("wait_ms", u64::try_from(took.as_millis()).unwrap_or(u64::MAX));
                span.record("waited", waited);
                if let AcquireOutcome::Acquired { reentrant } = outcome {
                    span.record("reentrant", reentrant);
                }
            }
            #[cfg(feature = "metrics")]
            {
                let outcome = outcome.as_str();
                let lock = lock_label(self.name);
                metrics::counter!(
                    metric_names::ACQUISITIONS,
                    labels([("outcome", outcome), ("mode", self.mode.as_str())], lock.as_deref())
                )
                .increment(1);
                let by_outcome = labels([("outcome", outcome)], lock.as_deref());
                if waited {
                    metrics::counter!(metric_names::ACQUIRE_WAITS, by_outcome.clone()).increment(1);
                }
                metrics::histogram!(metric_names::ACQUIRE_WAIT_SECONDS, by_outcome)
                    .record(took.as_secs_f64());
            }
            #[cfg(not(feature = "metrics"))]
            let _ = (self.mode, self.name);
        }
    }
}

/// Observes one guard release: the `keyholder.release` span around `f`, and
/// the releases counter.
#[inline]
#[cfg_attr(not(any(feature = "tracing", feature = "metrics")), allow(unused_variables))]
pub(crate) fn release(name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    #[cfg(feature = "tracing")]
    let span = tracing::debug_span!(
        "keyholder.release",
        lock = name,
        outcome = tracing::field::Empty,
        held_ms = tracing::field::Empty,
    );
    #[cfg(feature = "tracing")]
    let result = span.in_scope(f);
    #[cfg(not(feature = "tracing"))]
    let result = f();
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    {
        let outcome = match &result {
            Ok(()) => "released",
            Err(e) if e.kind() == ErrorKind::LockLost => "lock_lost",
            Err(e) if e.kind() == ErrorKind::NotOwner => "not_owner",
            Err(_) => "error",
        };
        #[cfg(feature = "tracing")]
        span.record("outcome", outcome);
        #[cfg(feature = "metrics")]
        metrics::counter!(
            metric_names::RELEASES,
            labels([("outcome", outcome)], lock_label(name).as_deref())
        )
        .increment(1);
    }
    result
}

/// The last guard of a hold of `name`'s lock taken at `acquired_at` was
/// released: the hold-time histogram, and `held_ms` on the release span.
#[inline]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn hold_ended(name: &str, acquired_at: Instant) {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    {
        let held = acquired_at.elapsed();
        #[cfg(feature = "tracing")]
        tracing::Span::current().record("held_ms", u64::try_from(held.as_millis()).unwrap_or(u64::MAX));
        #[cfg(feature = "metrics")]
        metrics::histogram!(metric_names::HOLD_SECONDS, labels([], lock_label(name).as_deref()))
            .record(held.as_secs_f64());
    }
}

/// A hold of `name`'s lock is known lost, for the first time.
#[inline]
#[cfg_attr(not(any(feature = "tracing", feature = "metrics")), allow(unused_variables))]
pub(crate) fn hold_lost(name: &str, reason: LostReason) {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    {
        let reason = lost_reason_label(reason);
        #[cfg(feature = "tracing")]
        tracing::warn!(name: "keyholder.hold_lost", lock = name, reason, "a hold was lost");
        #[cfg(feature = "metrics")]
        metrics::counter!(
            metric_names::HOLDS_LOST,
            labels([("reason", reason)], lock_label(name).as_deref())
        )
        .increment(1);
    }
}

/// A watchdog renewal round over `holds` holds ended; `failed` when a
/// renewal call failed and cut it short.
#[inline]
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn renewal_round(holds: usize, failed: bool, started: Option<Instant>) {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    {
        if holds == 0 {
            return;
        }
        #[cfg(feature = "tracing")]
        {
            let took_ms = started.map_or(0, |s| u64::try_from(s.elapsed().as_millis()).unwrap_or(u64::MAX));
            if failed {
                tracing::warn!(name: "keyholder.renewal", holds, failed, took_ms, "a renewal round failed");
            } else {
                tracing::debug!(name: "keyholder.renewal", holds, failed, took_ms, "renewal round");
            }
        }
        #[cfg(feature = "metrics")]
        {
            metrics::counter!(metric_names::RENEWAL_ROUNDS).increment(1);
            if failed {
                metrics::counter!(metric_names::RENEWAL_FAILURES).increment(1);
            }
        }
    }
}

/// When a renewal round starts, if anything will use it.
#[inline]
pub(crate) fn renewal_start() -> Option<Instant> {
    #[cfg(feature = "tracing")]
    return Some(Instant::now());
    #[cfg(not(feature = "tracing"))]
    None
}

/// The pub/sub connection was re-established after it was lost.
#[inline]
pub(crate) fn pubsub_reconnected() {
    #[cfg(feature = "tracing")]
    tracing::info!(name: "keyholder.pubsub_reconnect", "pub/sub connection re-established");
    #[cfg(feature = "metrics")]
    metrics::counter!(metric_names::PUBSUB_RECONNECTS).increment(1);
}

/// Who opened a command connection: the pool's maintenance thread (in
/// reserve) or a caller that found none ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opener {
    Pool,
    Caller,
}

impl Opener {
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    fn as_str(self) -> &'static str {
        match self {
            Opener::Pool => "pool",
            Opener::Caller => "caller",
        }
    }
}

/// A command connection was opened.
#[inline]
#[cfg_attr(not(any(feature = "tracing", feature = "metrics")), allow(unused_variables))]
pub(crate) fn connection_opened(by: Opener) {
    #[cfg(feature = "tracing")]
    tracing::debug!(name: "keyholder.connection_opened", by = by.as_str(), "command connection opened");
    #[cfg(feature = "metrics")]
    metrics::counter!(metric_names::CONNECTIONS_OPENED, "by" => by.as_str()).increment(1);
}

/// A command connection was closed.
#[inline]
pub(crate) fn connection_closed() {
    #[cfg(feature = "tracing")]
    tracing::debug!(name: "keyholder.connection_closed", "command connection closed");
    #[cfg(feature = "metrics")]
    metrics::counter!(metric_names::CONNECTIONS_CLOSED).increment(1);
}

/// A command connection could not be opened.
#[inline]
#[cfg_attr(not(any(feature = "tracing", feature = "metrics")), allow(unused_variables))]
pub(crate) fn connection_failed(by: Opener, error: &dyn std::fmt::Display) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        name: "keyholder.connection_failed",
        by = by.as_str(),
        error = %error,
        "a command connection could not be opened"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = error;
    #[cfg(feature = "metrics")]
    metrics::counter!(metric_names::CONNECTION_FAILURES, "by" => by.as_str()).increment(1);
}

/// How a run-once job call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobOutcome {
    Ran,
    Skipped,
    Lost,
}

/// Observes one run-once job call: the `keyholder.job` span around `f`
/// (the job's closure runs inside it), and the jobs counter.
#[inline]
#[cfg_attr(not(any(feature = "tracing", feature = "metrics")), allow(unused_variables))]
pub(crate) fn job<T>(
    name: &str,
    f: impl FnOnce() -> Result<T>,
    outcome: impl Fn(&T) -> JobOutcome,
) -> Result<T> {
    #[cfg(feature = "tracing")]
    let span = tracing::debug_span!("keyholder.job", lock = name, outcome = tracing::field::Empty);
    #[cfg(feature = "tracing")]
    let result = span.in_scope(f);
    #[cfg(not(feature = "tracing"))]
    let result = f();
    #[cfg(any(feature = "tracing", feature = "metrics"))]
    {
        let label = match result.as_ref().map(outcome) {
            Ok(JobOutcome::Ran) => "ran",
            Ok(JobOutcome::Skipped) => "skipped",
            Ok(JobOutcome::Lost) => "lost",
            Err(_) => "error",
        };
        #[cfg(feature = "tracing")]
        span.record("outcome", label);
        #[cfg(feature = "metrics")]
        metrics::counter!(metric_names::JOBS, labels([("outcome", label)], lock_label(name).as_deref()))
            .increment(1);
    }
    result
}

/// One unit of a gauge (holds now, waiting calls now), given back exactly
/// once: at [`end`](Counted::end), or when dropped, whichever comes first.
/// Zero-sized without the `metrics` feature.
pub(crate) struct Counted {
    #[cfg(feature = "metrics")]
    gauge: metrics::Gauge,
    #[cfg(feature = "metrics")]
    counted: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted").finish_non_exhaustive()
    }
}

impl Counted {
    /// Adds one to `gauge` for `name`'s lock, a `kind`, of the client
    /// `client` (its id; the label is its first 8 characters). With the
    /// `lock` label (`label_metrics_by_lock`), a `kind` label too.
    #[cfg(feature = "metrics")]
    fn start(gauge: &'static str, name: &str, client: &str, kind: &'static str) -> Counted {
        let client: String = client.chars().take(8).collect();
        let lock = lock_label(name);
        let mut labels = labels([], lock.as_deref());
        if lock.is_some() {
            labels.push(metrics::Label::new("kind", kind));
        }
        labels.push(metrics::Label::new("client", client));
        let gauge = metrics::gauge!(gauge, labels);
        gauge.increment(1.0);
        Counted { gauge, counted: std::sync::atomic::AtomicBool::new(true) }
    }

    /// Gives the unit back, if it was not already.
    #[inline]
    pub(crate) fn end(&self) {
        #[cfg(feature = "metrics")]
        if self.counted.swap(false, std::sync::atomic::Ordering::AcqRel) {
            self.gauge.decrement(1.0);
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.end();
    }
}

/// A hold of `name`'s lock, a `kind`, by the client `client` (its id)
/// began: one more in the held-now gauge, until the returned unit ends (see
/// `Hold::new`).
#[cfg(feature = "metrics")]
pub(crate) fn hold_started(name: &str, client: &str, kind: &'static str) -> Counted {
    Counted::start(metric_names::LOCKS_HELD, name, client, kind)
}

/// A hold began (nothing to count without the `metrics` feature).
#[cfg(not(feature = "metrics"))]
#[inline]
pub(crate) fn hold_started(_name: &str, _client: &str, _kind: &'static str) -> Counted {
    Counted {}
}

/// The label value of a loss reason.
#[cfg(any(feature = "tracing", feature = "metrics"))]
fn lost_reason_label(reason: LostReason) -> &'static str {
    match reason {
        LostReason::RenewalRefused => "renewal_refused",
        LostReason::LeaseExpired => "lease_expired",
        LostReason::ReleaseFoundGone => "release_found_gone",
        LostReason::Gone => "gone",
    }
}

#[cfg(feature = "metrics")]
static LOCK_LABEL: std::sync::OnceLock<fn(&str) -> String> = std::sync::OnceLock::new();

/// Adds a `lock` label to the per-lock metrics (acquisitions, waits, wait
/// time, releases, holds lost, jobs), whose value is `label(lock_name)`.
/// Process-wide, like the `metrics` recorder itself; only the first call
/// takes effect, and it returns whether it did. Without it the metrics carry
/// no lock label.
///
/// Every distinct value is a time series in the metrics backend, so `label`
/// must map the lock names of a service to a small, fixed set: collapse the
/// ids in them ([`collapse_ids`] turns `orders:42` into `orders:*`), or
/// map them to a name group of your own. Never return the name itself when
/// names carry ids, UUIDs or timestamps.
///
/// ```
/// # #[cfg(feature = "metrics")] {
/// keyholder::label_metrics_by_lock(keyholder::collapse_ids);
/// # }
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn label_metrics_by_lock(label: fn(&str) -> String) -> bool {
    LOCK_LABEL.set(label).is_ok()
}

/// `name` with every id-like segment replaced by `*`, for a bounded `lock`
/// metrics label (see `label_metrics_by_lock`, the `metrics` feature). Segments are separated
/// by `:`, `/` or `.`; a segment is id-like when it holds a digit, or is 8
/// or more hex digits and dashes (a UUID, a hash). So `orders:42:ship`
/// becomes `orders:*:ship`, `{tenant-7}:report` becomes `*:report` and
/// `reports:daily` stays as it is.
///
/// ```
/// assert_eq!(keyholder::collapse_ids("orders:42:ship"), "orders:*:ship");
/// assert_eq!(keyholder::collapse_ids("reports:daily"), "reports:daily");
/// ```
pub fn collapse_ids(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut segment = String::new();
    let flush = |segment: &mut String, out: &mut String| {
        let hexlike = segment.len() >= 8 && segment.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
        if segment.chars().any(|c| c.is_ascii_digit()) || hexlike {
            out.push('*');
        } else {
            out.push_str(segment);
        }
        segment.clear();
    };
    for c in name.chars() {
        if matches!(c, ':' | '/' | '.') {
            flush(&mut segment, &mut out);
            out.push(c);
        } else {
            segment.push(c);
        }
    }
    flush(&mut segment, &mut out);
    out
}

/// The `lock` label of `name`, when the application asked for one.
#[cfg(feature = "metrics")]
fn lock_label(name: &str) -> Option<String> {
    LOCK_LABEL.get().map(|label| label(name))
}

/// `fixed` labels, and `lock` when given.
#[cfg(feature = "metrics")]
fn labels<const N: usize>(
    fixed: [(&'static str, &'static str); N],
    lock: Option<&str>,
) -> Vec<metrics::Label> {
    let mut labels: Vec<metrics::Label> = fixed.iter().map(|&(k, v)| metrics::Label::new(k, v)).collect();
    if let Some(lock) = lock {
        labels.push(metrics::Label::new("lock", lock.to_owned()));
    }
    labels
}

/// Registers the description and unit of every keyholder metric with the
/// installed recorder (call it after installing one), so exporters can
/// show help texts.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    use metric_names as m;
    use metrics::Unit;
    metrics::describe_counter!(
        m::ACQUISITIONS,
        Unit::Count,
        "Finished lock acquire calls, by outcome and mode."
    );
    metrics::describe_counter!(
        m::ACQUIRE_WAITS,
        Unit::Count,
        "Acquire calls that found the lock held and waited."
    );
    metrics::describe_histogram!(
        m::ACQUIRE_WAIT_SECONDS,
        Unit::Seconds,
        "Time from an acquire call to its outcome."
    );
    metrics::describe_counter!(m::RELEASES, Unit::Count, "Lock guard releases, by outcome.");
    metrics::describe_histogram!(
        m::HOLD_SECONDS,
        Unit::Seconds,
        "How long holds were held, acquire to last release."
    );
    metrics::describe_counter!(m::HOLDS_LOST, Unit::Count, "Holds the client learned were lost, by reason.");
    metrics::describe_counter!(
        m::RENEWAL_ROUNDS,
        Unit::Count,
        "Watchdog renewal rounds with holds to renew."
    );
    metrics::describe_counter!(
        m::RENEWAL_FAILURES,
        Unit::Count,
        "Watchdog renewal rounds cut short by a failure."
    );
    metrics::describe_counter!(m::PUBSUB_RECONNECTS, Unit::Count, "Pub/sub connection re-establishments.");
    metrics::describe_counter!(m::JOBS, Unit::Count, "Run-once job calls, by outcome.");
    metrics::describe_counter!(
        m::CONNECTIONS_OPENED,
        Unit::Count,
        "Command connections opened, by who opened them (pool, caller)."
    );
    metrics::describe_counter!(m::CONNECTIONS_CLOSED, Unit::Count, "Command connections closed.");
    metrics::describe_counter!(
        m::CONNECTION_FAILURES,
        Unit::Count,
        "Command connections that could not be opened, by who tried (pool, caller)."
    );
    metrics::describe_gauge!(
        m::LOCKS_HELD,
        Unit::Count,
        "Holds of the client now (acquired, not released, not known lost)."
    );
    metrics::describe_gauge!(m::THREADS_WAITING, Unit::Count, "Acquire calls of the client waiting now.");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_ids_keeps_words_and_hides_ids() {
        assert_eq!(collapse_ids("orders:42:ship"), "orders:*:ship");
        assert_eq!(collapse_ids("reports:daily"), "reports:daily");
        assert_eq!(collapse_ids("user/3f2a9c1e-aaaa-bbbb-cccc-0123456789ab/cart"), "user/*/cart");
        assert_eq!(collapse_ids("session:deadbeefcafe"), "session:*");
        assert_eq!(collapse_ids("{tenant-7}:report"), "*:report");
        assert_eq!(collapse_ids("plain"), "plain");
        assert_eq!(collapse_ids(""), "");
    }

    #[test]
    fn modes() {
        assert_eq!(Mode::of(None, true), Mode::Blocking);
        assert_eq!(Mode::of(Some(Instant::now()), false), Mode::Try);
        assert_eq!(Mode::of(Some(Instant::now()), true), Mode::Timed);
    }
}
