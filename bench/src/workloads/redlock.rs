//! REDLOCK: a RedLock over five private local masters, against five times
//! the single-node floor measured in the same run, and with one, two and
//! three masters killed.
//!
//! The floor is the minimal floor's scripts (SPEC section 2's minimal
//! Redisson-semantics pair) raw on one master's plain connection (two round trips a pair); a RedLock pair asks five
//! masters one after another, so "5x the floor" is the time of five floor
//! pairs, and `vs 5x floor` = RedLock pairs/s ÷ (floor pairs/s ÷ 5).
//! Round trips are the masters' top-level commands (EVALSHA, EVAL,
//! SUBSCRIBE, UNSUBSCRIBE, PING) summed over all five, per pair.

use std::time::{Duration, Instant};

use keyholder::{Client, RedLock};
use keyholder_testkit::server::RedisServer;

use crate::env::{Env, channel_of, connect, raw_client};
use crate::error::{Res, err};
use crate::lock_impl::LEASE_MS;
use crate::measure::{Delta, med, snap};
use crate::report::{fmt, fmt_ratio, print_table};

/// Top-level commands of a lock pair (everything else runs in scripts).
const TOP_LEVEL: [&str; 6] = ["evalsha", "eval", "subscribe", "unsubscribe", "ping", "script"];

struct Row {
    rate: f64,
    round_trips: f64,
}

pub(crate) fn redlock(env: &Env, _stats: &mut redis::Connection) -> Res<()> {
    let pairs = if env.cfg.quick { 200 } else { 2_000 };
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let masters: Vec<Client> = servers
        .iter()
        .map(|s| {
            Client::builder(s.url())
                .connect_timeout(Duration::from_millis(500))
                .command_timeout(Duration::from_millis(500))
                .build()
        })
        .collect::<Result<_, _>>()?;
    let lock = RedLock::new(&masters, "bench:redlock")?;
    let fenced = lock.fenced();
    let (mut floor_runs, mut red_runs, mut fenced_runs) = (Vec::new(), Vec::new(), Vec::new());
    let mut parallel_runs = Vec::new();
    for run in 1..=env.cfg.runs {
        eprintln!("REDLOCK run {run}/{}", env.cfg.runs);
        floor_runs.push(floor(env, &servers[0], pairs)?);
        parallel_runs.push(parallel_raw(env, &servers, pairs)?);
        red_runs.push(measure(&servers, pairs, || pair(&lock))?);
        fenced_runs.push(measure(&servers, pairs, || pair(&fenced))?);
    }
    let floor_rate = med(&floor_runs, |r| r.rate);
    let row = |label: &str, runs: &[Row], per: f64| {
        vec![
            label.to_owned(),
            fmt(med(runs, |r| r.rate), 0),
            fmt_ratio(med(runs, |r| r.rate) / (floor_rate / per)),
            fmt(med(runs, |r| r.round_trips), 2),
        ]
    };
    print_table(
        &format!("REDLOCK: acquire+release pairs over 5 local masters, 1 thread, {pairs} pairs"),
        &["implementation", "pairs/s", "vs 5x floor", "round trips/pair"],
        &[
            row("minimal floor, 1 master (raw scripts)", &floor_runs, 1.0),
            row("raw scripts, 5 masters asked in parallel (5 threads)", &parallel_runs, 5.0),
            row("RedLock, 5 masters", &red_runs, 5.0),
            row("RedLock fenced, 5 masters", &fenced_runs, 5.0),
        ],
        &["vs 5x floor = pairs/s ÷ (the same runs' single-master floor pairs/s ÷ 5); the floor row is vs 1x. \
           Masters are asked one after another. Round trips: the five masters' EVALSHA/EVAL/SUBSCRIBE/\
           UNSUBSCRIBE/PING calls per pair. Fenced adds one raise_token.lua call per master held. \
           The parallel row is a reference, not a RedLock: the floor's scripts on five masters, one \
           thread per master, the caller waiting for all five (channel wake-ups) at each step."
            .to_owned()],
    );

    // Masters killed: how it behaves with 4, 3 and 2 of 5 alive.
    let mut rows = Vec::new();
    for killed in 1..=3 {
        servers[killed - 1].stop();
        let attempts = if env.cfg.quick { 50 } else { 300 };
        let (mut ok, mut refused, mut errors) = (0, 0, 0);
        let mut masters_held = 0;
        let started = Instant::now();
        for _ in 0..attempts {
            match lock.try_lock() {
                Ok(Some(guard)) => {
                    ok += 1;
                    masters_held = guard.masters_held().len();
                    guard.unlock()?;
                }
                Ok(None) => refused += 1,
                Err(_) => errors += 1,
            }
        }
        let per = started.elapsed().as_secs_f64() / f64::from(attempts);
        rows.push(vec![
            format!("{killed} killed ({} alive)", 5 - killed),
            format!("{ok}/{attempts}"),
            format!("{refused}"),
            format!("{errors}"),
            format!("{masters_held}"),
            fmt(per * 1e6, 0),
        ]);
    }
    print_table(
        "REDLOCK: masters killed (SIGKILL), quorum 3 of 5, try_lock then unlock",
        &["masters", "acquired", "refused", "errors (no quorum answered)", "masters held", "µs/attempt"],
        &rows,
        &["Clients' connect and command timeouts 500 ms. A killed master's connection fails at once \
           (refused on loopback); with fewer than a quorum answering, try_lock returns that error."
            .to_owned()],
    );
    Ok(())
}

fn pair(lock: &RedLock) -> Res<()> {
    let guard = lock.try_lock()?.ok_or_else(|| err("REDLOCK: the lock was unexpectedly held"))?;
    guard.unlock()?;
    Ok(())
}

/// `pairs` calls of `f`, with the five masters' commands counted.
fn measure(servers: &[RedisServer], pairs: usize, mut f: impl FnMut() -> Res<()>) -> Res<Row> {
    let mut stats: Vec<redis::Connection> = servers.iter().map(RedisServer::conn).collect();
    for _ in 0..pairs / 10 {
        f()?;
    }
    let before = stats.iter_mut().map(snap).collect::<Res<Vec<_>>>()?;
    let started = Instant::now();
    for _ in 0..pairs {
        f()?;
    }
    let wall = started.elapsed().as_secs_f64();
    let after = stats.iter_mut().map(snap).collect::<Res<Vec<_>>>()?;
    let deltas: Vec<Delta> = before.iter().zip(&after).map(|(a, b)| Delta::between(a, b)).collect();
    let delta = Delta::merge(&deltas);
    let top: f64 = TOP_LEVEL.iter().map(|c| delta.calls(c)).sum();
    Ok(Row { rate: pairs as f64 / wall, round_trips: top / pairs as f64 })
}

/// The floor's scripts on all five masters at once: one thread per master
/// with its own connection; each pair, the caller starts the five acquires,
/// waits for all, then the five releases: what asking in parallel would
/// cost at best.
fn parallel_raw(env: &Env, servers: &[RedisServer], pairs: usize) -> Res<Row> {
    let name = "bench:redlock-parallel";
    let channel = channel_of(name);
    let mut conns = Vec::new();
    for server in servers {
        conns.push(connect(&raw_client(&server.url())?)?);
    }
    let (acquire, release) = (&env.scripts.minimal_acquire, &env.scripts.minimal_release);
    std::thread::scope(|scope| -> Res<Row> {
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<Result<(), String>>();
        let mut go = Vec::new();
        for mut con in conns {
            let (tx, rx) = crossbeam_channel::bounded::<bool>(1);
            go.push(tx);
            let done = done_tx.clone();
            let channel = channel.as_str();
            scope.spawn(move || {
                // true: acquire, false: release.
                while let Ok(take) = rx.recv() {
                    let outcome = if take {
                        acquire
                            .key(name)
                            .arg(LEASE_MS)
                            .arg("bench-par:0")
                            .invoke::<redis::Value>(&mut con)
                            .map(|_| ())
                    } else {
                        release
                            .key(name)
                            .key(channel)
                            .arg("0")
                            .arg(LEASE_MS)
                            .arg("bench-par:0")
                            .invoke::<redis::Value>(&mut con)
                            .map(|_| ())
                    };
                    if done.send(outcome.map_err(|e| e.to_string())).is_err() {
                        return;
                    }
                }
            });
        }
        let step = |take: bool| -> Res<()> {
            for tx in &go {
                tx.send(take).map_err(|_| err("REDLOCK parallel: a thread stopped"))?;
            }
            for _ in 0..go.len() {
                done_rx.recv().map_err(|_| err("REDLOCK parallel: a thread stopped"))?.map_err(err)?;
            }
            Ok(())
        };
        for _ in 0..pairs / 10 {
            step(true)?;
            step(false)?;
        }
        let started = Instant::now();
        for _ in 0..pairs {
            step(true)?;
            step(false)?;
        }
        let rate = pairs as f64 / started.elapsed().as_secs_f64();
        drop(go);
        Ok(Row { rate, round_trips: 10.0 })
    })
}

/// The single-master floor: the minimal acquire + release scripts, raw,
/// on one plain connection.
fn floor(env: &Env, server: &RedisServer, pairs: usize) -> Res<Row> {
    let mut con = connect(&raw_client(&server.url())?)?;
    let (name, owner) = ("bench:redlock-floor", "bench-floor:0");
    let channel = channel_of(name);
    let mut one = || -> Res<()> {
        let acquired: redis::Value =
            env.scripts.minimal_acquire.key(name).arg(LEASE_MS).arg(owner).invoke(&mut con)?;
        if acquired != redis::Value::Nil {
            return Err(err(format!("REDLOCK floor: acquire replied {acquired:?}")));
        }
        let _: i64 = env
            .scripts
            .minimal_release
            .key(name)
            .key(&channel)
            .arg("0")
            .arg(LEASE_MS)
            .arg(owner)
            .invoke(&mut con)?;
        Ok(())
    };
    for _ in 0..pairs / 10 {
        one()?;
    }
    let started = Instant::now();
    for _ in 0..pairs {
        one()?;
    }
    Ok(Row { rate: pairs as f64 / started.elapsed().as_secs_f64(), round_trips: 2.0 })
}
