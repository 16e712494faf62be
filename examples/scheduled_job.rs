//! A scheduled job run from several processes, once per tick.
//!
//! Every process ("node") runs the same schedule: on each tick it calls
//! [`Job::run`](keyholder::Job::run) for the job `jobs:report`. The job
//! records which node ran which tick in Redis. Node `i` fires `i * skew`
//! late, as a node with a slow clock or a busy scheduler would; the job's
//! `at_least` (longer than that skew, shorter than the tick) keeps the lock
//! after the first node's short run, so the late nodes find it held and skip.
//! At the end the parent prints who ran each tick and exits with status 1
//! unless every tick ran exactly once.
//!
//! With `--leader`, the nodes first elect a leader
//! ([`Client::election`](keyholder::Client::election)) and only the leader
//! runs the schedule, while the others stand by: each leader runs half the
//! ticks and resigns, and a standby takes over at once for the next tick.
//! The job is the leadership's ([`Leadership::job`](keyholder::Leadership::job)),
//! so each run carries the leader's term as its fencing token, recorded
//! with the node (`<node>@<term>`); the parent also checks that the terms
//! never go down from tick to tick.
//!
//! ```text
//! cargo run --example scheduled_job                         # 4 nodes, 5 ticks of 1 s
//! cargo run --example scheduled_job -- --leader --nodes 3 --ticks 4
//! cargo run --example scheduled_job -- --nodes 3 --ticks 3
//! cargo run --example scheduled_job -- --at-least-ms 0      # see ticks run twice
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example scheduled_job
//! ```
//!
//! Without `REDIS_URL` it starts its own `redis-server` on a free loopback
//! port, as the demo does. The nodes are this program run again with
//! `--node`.

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use keyholder::{Client, JobOutcome};
use keyholder_testkit::server::url_from_env_or_start;

const USAGE: &str = "\
usage: scheduled_job [--nodes N] [--ticks N] [--tick-ms MS] [--at-least-ms MS] [--skew-ms MS] [--leader]

  --nodes N        processes running the schedule (default 4)
  --ticks N        ticks each runs (default 5)
  --tick-ms MS     the schedule's period (default 1000)
  --at-least-ms MS the job's at_least (default 60% of the tick)
  --skew-ms MS     node i fires i * MS late (default 5% of the tick)
  --leader         only an elected leader runs the schedule; the others stand by

REDIS_URL selects a Redis server; without it a private redis-server is started.";

/// The job's name, shared by every node.
const JOB: &str = "jobs:report";
/// How long one run of the job works.
const WORK: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
struct Options {
    nodes: u32,
    ticks: u32,
    tick: Duration,
    at_least: Duration,
    skew: Duration,
    /// Only an elected leader runs the schedule.
    leader: bool,
    /// In a node: its number, Redis's URL and the schedule's start (Unix ms).
    node: Option<(u32, String, u64)>,
}

fn parse_options() -> Result<Option<Options>, String> {
    let mut opts = Options {
        nodes: 4,
        ticks: 5,
        tick: Duration::from_millis(1000),
        at_least: Duration::ZERO,
        skew: Duration::ZERO,
        leader: false,
        node: None,
    };
    let (mut at_least, mut skew) = (None, None);
    let mut args = std::env::args().skip(1);
    let number = |flag: &str, value: Option<String>| -> Result<u64, String> {
        value.ok_or_else(|| format!("{flag} needs a value"))?.parse().map_err(|e| format!("{flag}: {e}"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--nodes" => opts.nodes = u32::try_from(number(&arg, args.next())?).map_err(|e| e.to_string())?,
            "--ticks" => opts.ticks = u32::try_from(number(&arg, args.next())?).map_err(|e| e.to_string())?,
            "--tick-ms" => opts.tick = Duration::from_millis(number(&arg, args.next())?),
            "--at-least-ms" => at_least = Some(Duration::from_millis(number(&arg, args.next())?)),
            "--leader" => opts.leader = true,
            "--skew-ms" => skew = Some(Duration::from_millis(number(&arg, args.next())?)),
            "--node" => {
                let i = u32::try_from(number(&arg, args.next())?).map_err(|e| e.to_string())?;
                let url = args.next().ok_or("--node needs a number, a URL and a start")?;
                let start = number(&arg, args.next())?;
                opts.node = Some((i, url, start));
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if opts.nodes == 0 || opts.ticks == 0 || opts.tick < Duration::from_millis(100) {
        return Err("nodes and ticks must be at least 1, the tick at least 100 ms".into());
    }
    opts.at_least = at_least.unwrap_or(opts.tick * 3 / 5);
    opts.skew = skew.unwrap_or(opts.tick / 20);
    Ok(Some(opts))
}

fn main() -> ExitCode {
    let opts = match parse_options() {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("scheduled_job: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let outcome = match &opts.node {
        Some((i, url, start)) if opts.leader => leader_node(&opts, *i, url, *start),
        Some((i, url, start)) => node(&opts, *i, url, *start),
        None => parent(&opts),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("scheduled_job: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ran_key(tick: u32) -> String {
    format!("{JOB}:ran:{tick}")
}

/// One node: the schedule's ticks, each calling the job.
fn node(opts: &Options, i: u32, url: &str, start_ms: u64) -> Result<bool, Box<dyn std::error::Error>> {
    let client = Client::open(url)?;
    let mut con = redis::Client::open(url)?.get_connection()?;
    // Longest run allowed: within the tick, so a hung node frees the next one.
    let job = client.job(JOB)?.at_most(opts.tick * 9 / 10).at_least(opts.at_least);
    let late = opts.skew * i;
    for tick in 0..opts.ticks {
        // The scheduler: fire at the tick, `late` behind the others.
        let fire_at = start_ms + u64::from(tick) * millis(opts.tick) + millis(late);
        std::thread::sleep(Duration::from_millis(fire_at.saturating_sub(unix_ms())));
        let outcome = job.run(|| {
            let _: i64 = redis::cmd("RPUSH").arg(ran_key(tick)).arg(i).query(&mut con)?;
            std::thread::sleep(WORK);
            Ok::<_, redis::RedisError>(())
        })?;
        println!("tick {tick} node {i}: {}", told(outcome, "ran")?);
    }
    Ok(true)
}

/// One node with `--leader`: campaigns until the schedule ends; once it
/// leads, runs the ticks still ahead (at most half of them) with the
/// leadership's job, and resigns.
fn leader_node(opts: &Options, i: u32, url: &str, start_ms: u64) -> Result<bool, Box<dyn std::error::Error>> {
    let client = Client::open(url)?;
    let mut con = redis::Client::open(url)?.get_connection()?;
    let end_ms = start_ms + u64::from(opts.ticks) * millis(opts.tick);
    let election = client.election(&format!("{JOB}:leader"))?;
    let Some(leadership) = election.campaign_for(Duration::from_millis(end_ms.saturating_sub(unix_ms())))?
    else {
        println!("node {i}: stood by");
        return Ok(true);
    };
    let term = leadership.term();
    println!("node {i}: leads in term {term}");
    let job = leadership.job(JOB)?.at_most(opts.tick * 9 / 10).at_least(opts.at_least);
    let lost = leadership.lost_signal();
    let fire_at = |tick: u32| start_ms + u64::from(tick) * millis(opts.tick);
    // The ticks whose time has not come: the earlier ones were a former
    // leader's.
    let ahead = (0..opts.ticks).filter(|&tick| fire_at(tick) >= unix_ms());
    for tick in ahead.take(usize::try_from(opts.ticks.div_ceil(2))?) {
        std::thread::sleep(Duration::from_millis(fire_at(tick).saturating_sub(unix_ms())));
        if let Ok(reason) = lost.try_recv() {
            println!("node {i}: no longer leads ({reason})");
            return Ok(false);
        }
        let outcome = job.run_with(|run| {
            let token = run.fencing_token().unwrap_or(0);
            let _: i64 =
                redis::cmd("RPUSH").arg(ran_key(tick)).arg(format!("{i}@{token}")).query(&mut con)?;
            std::thread::sleep(WORK);
            Ok::<_, redis::RedisError>(())
        })?;
        println!("tick {tick} node {i}: {}", told(outcome, &format!("ran in term {term}"))?);
    }
    leadership.resign()?;
    println!("node {i}: resigned term {term}");
    Ok(true)
}

/// A run's outcome in words (`ran` said as `ran`); the job's own error.
fn told(outcome: JobOutcome<redis::RedisResult<()>>, ran: &str) -> redis::RedisResult<String> {
    Ok(match outcome {
        JobOutcome::Ran(result) => {
            result?;
            ran.to_owned()
        }
        JobOutcome::Skipped => "skipped".to_owned(),
        JobOutcome::Lost { reason, .. } => format!("ran, lock lost: {reason}"),
        _ => "?".to_owned(),
    })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Starts Redis (unless `REDIS_URL` is set) and the nodes, and checks that
/// each tick ran once.
fn parent(opts: &Options) -> Result<bool, Box<dyn std::error::Error>> {
    // Stopped (when private) at the end of this function.
    let (url, _private) = url_from_env_or_start()?;
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    for tick in 0..opts.ticks {
        let _: i64 = redis::cmd("DEL").arg(ran_key(tick)).query(&mut con)?;
    }
    println!(
        "{} nodes, {} ticks of {:?}; at_least {:?}; node i fires i * {:?} late",
        opts.nodes, opts.ticks, opts.tick, opts.at_least, opts.skew
    );
    // Room for the nodes to start before the first tick.
    let start = unix_ms() + 1500;
    let exe = std::env::current_exe()?;
    let mut nodes = Vec::new();
    for i in 0..opts.nodes {
        let mut command = Command::new(&exe);
        command.args(["--tick-ms", &millis(opts.tick).to_string()]);
        command.args(["--ticks", &opts.ticks.to_string()]);
        command.args(["--at-least-ms", &millis(opts.at_least).to_string()]);
        command.args(["--skew-ms", &millis(opts.skew).to_string()]);
        if opts.leader {
            command.arg("--leader");
        }
        command.args(["--node", &i.to_string(), &url, &start.to_string()]);
        nodes.push(command.stdout(Stdio::inherit()).spawn()?);
    }
    let mut ok = true;
    for mut node in nodes {
        ok &= node.wait()?.success();
    }
    let (mut once, mut last_term) = (true, 0);
    for tick in 0..opts.ticks {
        let ran: Vec<String> = redis::cmd("LRANGE").arg(ran_key(tick)).arg(0).arg(-1).query(&mut con)?;
        println!("tick {tick}: ran on node(s) [{}]", ran.join(", "));
        once &= ran.len() == 1;
        // With --leader, `<node>@<term>`: the terms never go down.
        for term in ran.iter().filter_map(|r| r.split_once('@')).filter_map(|(_, t)| t.parse::<u64>().ok()) {
            once &= term >= last_term;
            last_term = term;
        }
    }
    if once && ok {
        println!("ran once per tick");
    } else {
        println!("FAILED: {}", if ok { "a tick did not run exactly once" } else { "a node failed" });
    }
    Ok(once && ok)
}
