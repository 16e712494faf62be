//! W4: many locks held at once under the watchdog. What renewal costs:
//! script calls per period, keys kept alive, CPU. keyholder's watchdog
//! renews by itself; the floor is the raw `renew.lua` loop written here
//! (batches of 100 keys every period); the baseline holds a fixed 30 s lease
//! and renews nothing.

use std::thread;
use std::time::{Duration, Instant};

use crate::env::Env;
use crate::error::{Res, err};
use crate::lock_impl::{Baseline, Keyholder, LockImpl, ScriptFloor, Session};
use crate::measure::{Delta, med, snap, sum_of};
use crate::report::{fmt, print_table};

use super::threads::join;

/// Who keeps W4's locks alive while they are held: the part of W4 that
/// differs by implementation.
enum Renewal<'a> {
    /// keyholder's watchdog, on its own.
    Watchdog,
    /// The bench, calling the floor's `renew.lua` every period.
    ByHand(&'a ScriptFloor<'a>),
    /// Nobody (a fixed lease): the hold window is skipped.
    Never,
}

/// One W4 run's figures (NaN where they do not apply).
struct Many {
    acquire_rate: f64,
    release_rate: f64,
    rounds: f64,
    calls_per_round: f64,
    per_100: f64,
    keys_per_round: f64,
    keys_lost: f64,
    guards_lost: f64,
    /// Releases that failed (the hold was found lost at release).
    release_errors: f64,
    min_pttl_ms: f64,
    cpu_ms_round: f64,
    server_ms_round: f64,
    acquire_rt: f64,
}

pub(crate) fn w4(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    let (floor, baseline) = (ScriptFloor::new(env), Baseline::new(env));
    let (mut floor_runs, mut base_runs, mut kh_runs) = (Vec::new(), Vec::new(), Vec::new());
    for run in 1..=c.runs {
        eprintln!("W4 run {run}/{}", c.runs);
        floor_runs.push(many(env, stats, &floor, "w4f", Renewal::ByHand(&floor))?);
        base_runs.push(many(env, stats, &baseline, "w4b", Renewal::Never)?);
        let keyholder = Keyholder::new(env, 1, Some(c.w4_watchdog))?;
        kh_runs.push(many(env, stats, &keyholder, "w4k", Renewal::Watchdog)?);
    }
    let n = c.w4_locks;
    let mut base_row = many_row("baseline (fixed 30 s lease)", &base_runs);
    base_row[4] = format!("none ({n} PEXPIRE if hand-renewed)");
    base_row[5] = "none (100.00 if hand-renewed)".to_owned();
    print_table(
        &format!(
            "W4: {n} locks held under the watchdog from {} threads, watchdog timeout {:?} (a period of \
             {:?}), held {} periods (targets: <= 1 renewal call per 100 locks per period, 0 keys lost)",
            c.w4_threads,
            c.w4_watchdog,
            c.w4_watchdog / 3,
            c.w4_periods
        ),
        &[
            "impl",
            "acquire locks/s",
            "round trips/acquire",
            "renewal rounds",
            "renewal calls/round",
            "calls per 100 locks per round",
            "keys renewed/round",
            "keys lost",
            "guards lost / release errors",
            "min PTTL ms at end",
            "client CPU ms/round",
            "Redis CPU ms/round",
            "release locks/s",
        ],
        &[
            many_row("floor (raw renew.lua, 100 keys/call)", &floor_runs),
            base_row,
            many_row("keyholder", &kh_runs),
        ],
        &[format!(
            "A renewal round is one watchdog period; rounds are counted by the server (renew.lua runs TYPE \
             once per key, so rounds = TYPE calls / locks) and calls are EVALSHA calls in the hold window. \
             Keys lost: keys missing or without TTL at the end of the hold (PTTL <= 0); guards lost: \
             LockGuard::is_lost() at the end (n/a where the implementation cannot tell); release errors: \
             releases that failed; all summed over runs. CPU is over the hold window only. The \
             baseline holds a fixed 30 s lease and never renews (its hold window is skipped): renewing it by \
             hand costs one PEXPIRE per lock per period, {n} calls."
        )],
    );
    Ok(())
}

/// One W4 run of `imp`: `--w4-threads` threads each take their share of
/// the locks `what:0..` and keep them; the locks are held (and renewed as
/// `renewal` says) for `--w4-periods` periods, checked, then released by
/// the threads that took them.
fn many<I: LockImpl>(
    env: &Env,
    stats: &mut redis::Connection,
    imp: &I,
    what: &str,
    renewal: Renewal<'_>,
) -> Res<Many> {
    let c = &env.cfg;
    let names: Vec<String> = (0..c.w4_locks).map(|i| env.key(&format!("{what}:{i}"))).collect();
    imp.warm_up(&env.key(&format!("{what}:warm-up")))?;
    let per_thread = names.len().div_ceil(c.w4_threads);
    let (ready_tx, ready_rx) = crossbeam_channel::unbounded::<Res<()>>();
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
    thread::scope(|scope| -> Res<Many> {
        let mut handles = Vec::new();
        let a = snap(stats)?;
        for (t, chunk) in names.chunks(per_thread).enumerate() {
            let (ready, go) = (ready_tx.clone(), go_rx.clone());
            handles.push(scope.spawn(move || -> Res<(Option<usize>, usize)> {
                let mut holds = Vec::with_capacity(chunk.len());
                let session = imp.session(t).and_then(|mut session| {
                    for name in chunk {
                        holds.push(session.acquire(name)?);
                    }
                    Ok(session)
                });
                let _ = ready.send(session.as_ref().map(drop).map_err(|e| err(e.to_string())));
                let _ = go.recv_timeout(Duration::from_secs(600));
                let mut session = session?;
                // Summed as options: `None` when the implementation cannot tell.
                let lost = holds.iter().map(|h| session.is_lost(h).map(usize::from)).sum();
                let release_errors =
                    holds.into_iter().map(|h| session.release(h)).filter(Result::is_err).count();
                Ok((lost, release_errors))
            }));
        }
        let start = Instant::now();
        let mut acquired: Res<()> = Ok(());
        for _ in 0..handles.len() {
            match ready_rx.recv_timeout(Duration::from_secs(300)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => acquired = Err(e),
                Err(_) => acquired = Err(err("W4: acquiring timed out")),
            }
        }
        let acquire_s = start.elapsed().as_secs_f64();
        let measured = acquired.and_then(|()| -> Res<_> {
            let b = snap(stats)?;
            let hold = hold_window(env, stats, &names, per_thread, renewal)?;
            let keys = check_keys(stats, &names)?;
            Ok((Delta::between(&a, &b), hold, keys))
        });
        let release_start = Instant::now();
        drop(go_tx);
        let mut guards_lost = Some(0);
        let mut release_errors = 0;
        let mut failure = None;
        for h in handles {
            match join(h) {
                Ok((lost, errors)) => {
                    guards_lost = guards_lost.zip(lost).map(|(a, b)| a + b);
                    release_errors += errors;
                }
                Err(e) => failure = Some(e),
            }
        }
        let release_s = release_start.elapsed().as_secs_f64();
        if let Some(e) = failure {
            return Err(e);
        }
        let (acq, hold, (keys_lost, min_pttl)) = measured?;
        let n = names.len() as f64;
        // Without a hold window, every renewal figure is NaN.
        let (keys_renewed, calls, cpu, server_cpu) = hold
            .map_or((f64::NAN, f64::NAN, f64::NAN, f64::NAN), |d| {
                (d.calls("type"), d.calls("evalsha"), d.client_cpu, d.server_cpu)
            });
        let rounds = keys_renewed / n;
        Ok(Many {
            acquire_rate: n / acquire_s,
            release_rate: n / release_s,
            rounds,
            calls_per_round: calls / rounds,
            per_100: calls / rounds / (n / 100.0),
            keys_per_round: keys_renewed / rounds,
            keys_lost,
            guards_lost: guards_lost.map_or(f64::NAN, |l| l as f64),
            release_errors: release_errors as f64,
            min_pttl_ms: min_pttl,
            cpu_ms_round: cpu * 1e3 / rounds,
            server_ms_round: server_cpu * 1e3 / rounds,
            acquire_rt: acq.round_trips(imp.script_commands(), 0) / n,
        })
    })
}

/// Holds the locks for `--w4-periods` watchdog periods, renewing them as
/// `renewal` says; the window's counters, or `None` when nobody renews.
fn hold_window(
    env: &Env,
    stats: &mut redis::Connection,
    names: &[String],
    per_thread: usize,
    renewal: Renewal<'_>,
) -> Res<Option<Delta>> {
    let c = &env.cfg;
    let period = c.w4_watchdog / 3;
    let s0 = match renewal {
        Renewal::Never => return Ok(None),
        Renewal::Watchdog => {
            let s0 = snap(stats)?;
            thread::sleep(period * c.w4_periods);
            s0
        }
        Renewal::ByHand(floor) => {
            // The floor's session `t` took chunk `t`; its owner renews it.
            let lease_ms = c.w4_watchdog.as_millis() as u64;
            let mut con = env.connect()?;
            let s0 = snap(stats)?;
            let start = Instant::now();
            for round in 1..=c.w4_periods {
                thread::sleep((start + period * round).saturating_duration_since(Instant::now()));
                for (t, chunk) in names.chunks(per_thread).enumerate() {
                    let owner = ScriptFloor::owner(t);
                    for batch in chunk.chunks(100) {
                        floor.renew(&mut con, batch, &owner, lease_ms)?;
                    }
                }
            }
            thread::sleep((start + period * c.w4_periods).saturating_duration_since(Instant::now()));
            s0
        }
    };
    Ok(Some(Delta::between(&s0, &snap(stats)?)))
}

/// Every key present with a TTL? Returns (missing or without TTL, min PTTL).
fn check_keys(stats: &mut redis::Connection, names: &[String]) -> Res<(f64, f64)> {
    let mut lost = 0;
    let mut min = i64::MAX;
    for chunk in names.chunks(1000) {
        let mut pipe = redis::pipe();
        for name in chunk {
            pipe.cmd("PTTL").arg(name);
        }
        let ttls: Vec<i64> = pipe.query(stats)?;
        for ttl in ttls {
            if ttl <= 0 {
                lost += 1;
            } else {
                min = min.min(ttl);
            }
        }
    }
    Ok((lost as f64, if min == i64::MAX { f64::NAN } else { min as f64 }))
}

/// A table row: medians over runs, sums of losses.
fn many_row(name: &str, runs: &[Many]) -> Vec<String> {
    vec![
        name.to_owned(),
        fmt(med(runs, |r| r.acquire_rate), 0),
        fmt(med(runs, |r| r.acquire_rt), 2),
        fmt(med(runs, |r| r.rounds), 0),
        fmt(med(runs, |r| r.calls_per_round), 1),
        fmt(med(runs, |r| r.per_100), 2),
        fmt(med(runs, |r| r.keys_per_round), 0),
        fmt(sum_of(runs, |r| r.keys_lost), 0),
        format!(
            "{} / {}",
            fmt(sum_of(runs, |r| r.guards_lost), 0),
            fmt(sum_of(runs, |r| r.release_errors), 0)
        ),
        fmt(med(runs, |r| r.min_pttl_ms), 0),
        fmt(med(runs, |r| r.cpu_ms_round), 1),
        fmt(med(runs, |r| r.server_ms_round), 1),
        fmt(med(runs, |r| r.release_rate), 0),
    ]
}
