//! ELECTION: how fast leadership moves (issue 26). Three clients of the
//! same server campaign for one election with the default lease
//! ([`keyholder::DEFAULT_ELECTION_LEASE`], 1 s); the first leads, the two
//! others wait in `campaign_for`. Then the leader either dies (its client
//! shuts down, so its renewals stop, and it never resigns: what a killed
//! process leaves behind) or resigns, and the time until a standby's
//! campaign returns is measured, with the terms checked to rise strictly.
//! A death is bounded by the lease (the hold must run out); a resignation
//! by a release and a wake-up.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use keyholder::{Client, DEFAULT_ELECTION_LEASE, Leadership};

use crate::env::Env;
use crate::error::{Res, err};
use crate::measure::{pct, sorted};
use crate::report::{fmt, print_table};

/// How the leader leaves.
#[derive(Clone, Copy)]
enum Leaving {
    Dies,
    Resigns,
}

/// How long the standbys campaign before a round fails.
const CAMPAIGN_LIMIT: Duration = Duration::from_secs(10);

pub(crate) fn election(env: &Env, _stats: &mut redis::Connection) -> Res<()> {
    let rounds: u32 = if env.cfg.quick { 2 } else { 6 };
    let mut rows = Vec::new();
    for (label, leaving) in [("the leader dies", Leaving::Dies), ("the leader resigns", Leaving::Resigns)] {
        let mut took = Vec::new();
        for run in 1..=env.cfg.runs {
            eprintln!("ELECTION ({label}) run {run}/{}", env.cfg.runs);
            for round in 0..rounds {
                // The leader leaves at a point spread over one renewal
                // period (a third of the lease), so that a death comes at
                // every distance from the last renewal.
                let offset = DEFAULT_ELECTION_LEASE / 3 * round / rounds;
                took.push(takeover(env, &format!("{run}:{round}"), leaving, offset)?);
            }
        }
        let ms = sorted(took.iter().map(|d| d.as_secs_f64() * 1e3).collect());
        rows.push(vec![
            label.to_owned(),
            ms.len().to_string(),
            fmt(pct(&ms, 50.0), 1),
            fmt(pct(&ms, 90.0), 1),
            fmt(ms.last().copied().unwrap_or(f64::NAN), 1),
        ]);
    }
    print_table(
        &format!(
            "ELECTION: 3 clients, default lease {} ms; time from the leader leaving to a standby leading",
            DEFAULT_ELECTION_LEASE.as_millis()
        ),
        &["leader", "takeovers", "p50 ms", "p90 ms", "max ms"],
        &rows,
        &["A death: the leader's client shuts down without resigning (its renewals stop, as when its \
           process is killed); the standby takes over once the lease it last renewed runs out, so a \
           takeover is at most one lease and a round trip after the last renewal, less the time since \
           it (the rounds leave at points spread over one renewal period). A resignation releases the hold and wakes a standby through the unlock channel. Every \
           round uses fresh clients and a fresh election; each new term is checked to be above the \
           last."
            .to_owned()],
    );
    Ok(())
}

/// One round: a leader among three fresh clients, two standbys waiting,
/// the leader leaving as `leaving` says; how long until a standby leads.
fn takeover(env: &Env, round: &str, leaving: Leaving, offset: Duration) -> Res<Duration> {
    let name = env.key(&format!("election:{round}"));
    let clients = [client(env)?, client(env)?, client(env)?];
    let leader = clients[0]
        .election(&name)?
        .try_campaign()?
        .ok_or_else(|| err(format!("ELECTION: nobody led {name} yet, and the first campaign lost")))?;
    let first_term = leader.term();
    let (won, standbys) = mpsc::channel::<Res<(Instant, u64)>>();
    let mut handles = Vec::new();
    for client in &clients[1..] {
        let (client, name, won) = (client.clone(), name.clone(), won.clone());
        handles.push(thread::spawn(move || {
            let outcome = campaign(&client, &name).map(|won| won.map(|l| (Instant::now(), l)));
            match outcome {
                Ok(Some((at, leadership))) => {
                    let _ = won.send(Ok((at, leadership.term())));
                    // Keep leading until the round ends, then resign.
                    thread::sleep(Duration::from_millis(50));
                    let _ = leadership.resign();
                }
                Ok(None) => {}
                Err(e) => {
                    let _ = won.send(Err(e));
                }
            }
        }));
    }
    // The standbys are waiting once their campaigns have subscribed: give
    // them a moment (they wait in Redis, not on this thread), and the
    // round's offset into a renewal period.
    thread::sleep(Duration::from_millis(200) + offset);
    let left = Instant::now();
    match leaving {
        Leaving::Dies => die(&clients[0], leader),
        Leaving::Resigns => leader.resign()?,
    }
    let (at, term) = standbys
        .recv_timeout(CAMPAIGN_LIMIT + Duration::from_secs(1))
        .map_err(|_| err(format!("ELECTION: no standby led {name} after the leader left")))??;
    if term <= first_term {
        return Err(err(format!("ELECTION: term {term} after {first_term}: terms must rise")));
    }
    for handle in handles {
        handle.join().map_err(|_| err("ELECTION: a standby thread panicked"))?;
    }
    Ok(at.saturating_duration_since(left))
}

/// A standby's campaign, bounded; `None` when another standby won first
/// and kept the election past the limit.
fn campaign(client: &Client, name: &str) -> Res<Option<Leadership>> {
    Ok(client.election(name)?.campaign_for(CAMPAIGN_LIMIT)?)
}

/// The leader's process dies: its client stops (renewals with it) and the
/// leadership is never resigned.
fn die(client: &Client, leadership: Leadership) {
    client.shutdown();
    std::mem::forget(leadership);
}

/// A client of the bench's server with default settings.
fn client(env: &Env) -> Res<Client> {
    Ok(Client::builder(env.url.clone()).build()?)
}
