//! W3: the herd. Many threads wait on one lock held by another owner; what
//! do they cost while they wait (connections, CPU, wake-ups, commands), and
//! how does the lock travel through them once it is free? Run over a few
//! clients with the polling baseline, then over many clients (processes,
//! pods): one wake per unlock must not become one per client.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::env::{Env, channel_of};
use crate::error::{Res, err};
use crate::lock_impl::{Baseline, Keyholder, LockImpl, ScriptFloor, Session};
use crate::measure::{
    Delta, audit_end, audit_start, connected_clients, info, info_field, med, median, snap, thread_switches,
};
use crate::report::{fmt, fmt_ratio, print_table};

use super::handoff::handoff;
use super::threads::{join, wait_until};

/// One herd's figures (NaN where they do not apply).
struct Herd {
    threads: usize,
    total_s: f64,
    ideal_s: f64,
    vs_ideal: f64,
    pubsub_conns: f64,
    conns: f64,
    numsub: f64,
    attempts: f64,
    rt: f64,
    evalsha: f64,
    subs: f64,
    handoffs: f64,
    /// acquire.lua calls per published unlock message.
    per_unlock: f64,
    /// Top-level HEXISTS per acquisition, from the audit.
    hexists: f64,
    idle_cpu_ms_s: f64,
    idle_wakeups_s: f64,
    idle_cmds_s: f64,
    herd_cpu_us: f64,
    herd_server_us: f64,
}

impl Herd {
    /// The minimal floor's ideal row of a run: the measured holds plus one handoff
    /// per thread, with the minimal floor's known costs per acquisition.
    fn ideal(keyholder: &Herd) -> Herd {
        Herd {
            threads: keyholder.threads,
            total_s: keyholder.ideal_s,
            ideal_s: keyholder.ideal_s,
            vs_ideal: 1.0,
            pubsub_conns: f64::NAN,
            conns: f64::NAN,
            numsub: f64::NAN,
            attempts: 1.0,
            rt: 2.0,
            evalsha: 2.0,
            subs: 0.0,
            handoffs: 0.0,
            per_unlock: 1.0,
            hexists: 0.0,
            idle_cpu_ms_s: f64::NAN,
            idle_wakeups_s: f64::NAN,
            idle_cmds_s: f64::NAN,
            herd_cpu_us: f64::NAN,
            herd_server_us: f64::NAN,
        }
    }
}

/// What the server and the process did while every thread waited on a held lock.
struct Idle {
    cpu_ms_s: f64,
    wakeups_s: f64,
    cmds_s: f64,
    pubsub_conns: f64,
    conns: f64,
    numsub: f64,
}

pub(crate) fn w3(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    herds(env, stats, env.cfg.w3_clients, true)?;
    // The same herd spread over many clients. The baseline has no clients.
    herds(env, stats, env.cfg.w3_many_clients, false)
}

/// One W3 configuration: the herd over `clients` keyholder clients, with
/// the polling baseline when `baseline`, `--runs` times; prints its table.
fn herds(env: &Env, stats: &mut redis::Connection, clients: usize, baseline: bool) -> Res<()> {
    let c = &env.cfg;
    let (mut ideal, mut base, mut kh, mut handoffs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 1..=c.runs {
        eprintln!("W3 ({clients} clients) run {run}/{}", c.runs);
        let h = handoff(env)?;
        handoffs.push(h * 1e6);
        if baseline {
            // Another baseline owner holds the lock while the herd waits.
            let baseline = || Ok(Baseline::new(env));
            base.push(herd(env, stats, baseline, &Baseline::new(env), c.w3_baseline_threads, "w3b", h)?);
        }
        // keyholder's herd waits behind the raw scripts: the same wire
        // format, held by an owner outside its clients.
        let keyholder = || Keyholder::new(env, clients, None);
        let k = herd(env, stats, keyholder, &ScriptFloor::new(env), c.w3_threads, "w3", h)?;
        ideal.push(Herd::ideal(&k));
        kh.push(k);
    }
    let mut notes = vec![format!(
        "ideal = sum of measured holds + threads x one handoff (minimal floor pair, median {} µs). Idle figures are \
         measured over {:?} while every thread waits on a lock held by another owner: client CPU, context \
         switches of all non-main threads (wake-ups), and top-level Redis commands. pub/sub conns: CLIENT \
         LIST TYPE pubsub; conns: connected_clients added by the implementation; subscribers: PUBSUB NUMSUB \
         of the lock's channel. Acquire attempts per acquisition: keyholder's acquire.lua calls (EVALSHA \
         less one release per acquisition), the baseline's SET NX calls; hand-offs: HDEL count, i.e. handoff.lua calls that passed the \
         lock straight to a local thread and, across clients, grant entries taken off the queue (so about \
         one per acquisition once clients queue); acquire calls/unlock: acquire.lua calls per unlock message published \
         (those / PUBLISH count, a release that hands the lock over publishing once, one that wakes a \
         client three times), at most one per client when each unlock wakes at most one thread per \
         client. EVALSHA counts every script \
         call: acquires, releases, hand-offs. keyholder's round trips and idle commands{}; HEXISTS: its own \
         top-level HEXISTS. The baseline's are INFO commandstats less its compare-and-delete's GET/DEL.",
        fmt(median(handoffs), 0),
        c.w3_idle,
        if c.audit {
            " are top-level commands counted by the server's slow log"
        } else {
            " are INFO commandstats less script-internal commands (--no-audit: top-level HEXISTS uncounted)"
        }
    )];
    if !baseline {
        notes.push("The polling baseline has no clients: see the first W3 table.".to_owned());
    } else if c.w3_baseline_threads != c.w3_threads {
        notes.push(format!(
            "The baseline ran {} polling threads, not {}, each with its own connection.",
            c.w3_baseline_threads, c.w3_threads
        ));
    }
    print_table(
        &format!(
            "W3: herd, {} threads over {} clients wait on 1 lock held elsewhere, then each takes it once \
             for {:?} (targets: 1 pub/sub connection per client, <= 1 woken thread per client per unlock, \
             no CPU while waiting)",
            c.w3_threads, clients, c.hold
        ),
        &[
            "impl",
            "threads",
            "total s",
            "vs ideal",
            "pub/sub conns",
            "conns",
            "subscribers",
            "acquire attempts/acq",
            "EVALSHA/acq",
            "(UN)SUBSCRIBE/acq",
            "hand-offs/acq",
            "acquire calls/unlock",
            "HEXISTS/acq",
            "round trips/acq",
            "idle client CPU ms/s",
            "idle wake-ups/s",
            "idle Redis cmds/s",
            "herd client CPU µs/acq",
            "herd Redis CPU µs/acq",
        ],
        &if baseline {
            vec![
                herd_row("minimal floor (ideal)", &ideal),
                herd_row("baseline", &base),
                herd_row("keyholder", &kh),
            ]
        } else {
            vec![herd_row("minimal floor (ideal)", &ideal), herd_row("keyholder", &kh)]
        },
        &notes,
    );
    Ok(())
}

/// One herd: `outsider` holds the lock `what` while `n` threads of
/// the implementation `build` makes ask for it; after the idle window it
/// releases, and each thread takes the lock once for the hold. The
/// implementation is built here so that the connections it adds are
/// counted, and dropped (shut down) at the end.
fn herd<I: LockImpl, O: LockImpl>(
    env: &Env,
    stats: &mut redis::Connection,
    build: impl FnOnce() -> Res<I>,
    outsider: &O,
    n: usize,
    what: &str,
    handoff: f64,
) -> Res<Herd> {
    let c = &env.cfg;
    let conns_before = connected_clients(stats)?;
    let imp = &build()?;
    let key = env.key(what);
    imp.warm_up(&key)?;
    let mut blocker = outsider.session(n)?;
    let blocked = blocker.acquire(&key)?;
    // A polling herd would fill the slow log (and the baseline runs no
    // command both inside and outside a script): only the others are audited.
    let audit = !imp.polls();
    let ready = AtomicUsize::new(0);
    let held_ns = AtomicU64::new(0);
    thread::scope(|scope| -> Res<Herd> {
        let mut handles = Vec::new();
        let mut spawn_error = None;
        for i in 0..n {
            let (key, ready, held_ns, hold) = (&key, &ready, &held_ns, c.hold);
            let spawned =
                thread::Builder::new().stack_size(c.w3_stack).spawn_scoped(scope, move || -> Res<()> {
                    let session = imp.session(i);
                    ready.fetch_add(1, Ordering::AcqRel);
                    let mut session = session?;
                    let held = session.acquire(key)?;
                    let start = Instant::now();
                    thread::sleep(hold);
                    held_ns.fetch_add(start.elapsed().as_nanos() as u64, Ordering::AcqRel);
                    session.release(held)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawn_error = Some(err(format!("W3: spawning thread {i} failed: {e}")));
                    break;
                }
            }
        }
        let idle = match spawn_error {
            Some(e) => Err(e),
            None => (|| -> Res<Idle> {
                wait_until(Duration::from_secs(60), "W3 threads to start", || {
                    ready.load(Ordering::Acquire) >= n
                })?;
                // Give keyholder's waiters a bounded moment to subscribe (the
                // idle window reports what is there either way).
                let _ =
                    wait_until(Duration::from_secs(5), "every client to subscribe", || imp.waiters_settled());
                thread::sleep(Duration::from_millis(if c.quick { 50 } else { 300 }));
                // The blocker's connection is one more.
                measure_idle(env, stats, &channel_of(&key), imp.script_commands(), conns_before + 1.0, audit)
            })(),
        };
        // Pass the lock along, whatever happened above: the threads finish.
        let audited = audit && audit_start(env, stats).unwrap_or(false);
        let a = snap(stats);
        let start = Instant::now();
        let released = blocker.release(blocked);
        let mut failure = None;
        for h in handles {
            if let Err(e) = join(h) {
                failure = Some(e);
            }
        }
        let total = start.elapsed().as_secs_f64();
        let b = snap(stats)?;
        let top = audit_end(env, stats, audited)?;
        let a = a?;
        released?;
        if let Some(e) = failure {
            return Err(e);
        }
        let idle = idle?;
        let d = Delta::between(&a, &b).with_audit(top);
        let nf = n as f64;
        let ideal_s = held_ns.load(Ordering::Acquire) as f64 / 1e9 + nf * handoff;
        Ok(Herd {
            threads: n,
            total_s: total,
            ideal_s,
            vs_ideal: ideal_s / total,
            pubsub_conns: idle.pubsub_conns,
            conns: idle.conns,
            numsub: idle.numsub,
            attempts: d.attempts(imp.attempt_command(), 0, n as u64) / nf,
            rt: d.round_trips(imp.script_commands(), 0) / nf,
            evalsha: d.calls("evalsha") / nf,
            subs: d.subscribes() / nf,
            handoffs: d.calls("hdel") / nf,
            // acquire.lua calls per unlock message; 0 / 0, n/a, for the
            // baseline, which runs neither.
            per_unlock: d.attempts("evalsha", 0, n as u64) / d.calls("publish"),
            // NaN without an audit.
            hexists: d.top_calls("hexists") / nf,
            idle_cpu_ms_s: idle.cpu_ms_s,
            idle_wakeups_s: idle.wakeups_s,
            idle_cmds_s: idle.cmds_s,
            herd_cpu_us: d.client_cpu / nf * 1e6,
            herd_server_us: d.server_cpu / nf * 1e6,
        })
    })
}

/// The idle window: what every waiting thread costs while the lock is held
/// elsewhere, and the connections and subscribers they use.
fn measure_idle(
    env: &Env,
    stats: &mut redis::Connection,
    channel: &str,
    nested: &[&str],
    conns_before: f64,
    audit: bool,
) -> Res<Idle> {
    let window = env.cfg.w3_idle;
    let audited = audit && audit_start(env, stats)?;
    let w0 = thread_switches();
    let a = snap(stats)?;
    thread::sleep(window);
    let b = snap(stats)?;
    let w1 = thread_switches();
    let top = audit_end(env, stats, audited)?;
    let d = Delta::between(&a, &b).with_audit(top);
    let secs = d.wall;
    let pubsub: String = redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub").query(stats)?;
    let numsub: HashMap<String, i64> = redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query(stats)?;
    let clients = info(stats, "clients")?;
    let connected =
        info_field(&clients, "connected_clients").and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
    Ok(Idle {
        cpu_ms_s: d.client_cpu * 1e3 / secs,
        wakeups_s: (w1 - w0) / secs,
        cmds_s: d.round_trips(nested, 0) / secs,
        pubsub_conns: pubsub.lines().filter(|l| !l.trim().is_empty()).count() as f64,
        conns: connected - conns_before,
        numsub: numsub.get(channel).copied().unwrap_or(0) as f64,
    })
}

/// A table row: medians over runs.
fn herd_row(name: &str, runs: &[Herd]) -> Vec<String> {
    vec![
        name.to_owned(),
        runs.first().map(|r| r.threads.to_string()).unwrap_or_default(),
        fmt(med(runs, |r| r.total_s), 2),
        fmt_ratio(med(runs, |r| r.vs_ideal)),
        fmt(med(runs, |r| r.pubsub_conns), 0),
        fmt(med(runs, |r| r.conns), 0),
        fmt(med(runs, |r| r.numsub), 0),
        fmt(med(runs, |r| r.attempts), 2),
        fmt(med(runs, |r| r.evalsha), 2),
        fmt(med(runs, |r| r.subs), 2),
        fmt(med(runs, |r| r.handoffs), 2),
        fmt(med(runs, |r| r.per_unlock), 2),
        fmt(med(runs, |r| r.hexists), 2),
        fmt(med(runs, |r| r.rt), 2),
        fmt(med(runs, |r| r.idle_cpu_ms_s), 0),
        fmt(med(runs, |r| r.idle_wakeups_s), 0),
        fmt(med(runs, |r| r.idle_cmds_s), 0),
        fmt(med(runs, |r| r.herd_cpu_us), 0),
        fmt(med(runs, |r| r.herd_server_us), 0),
    ]
}
