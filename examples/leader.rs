//! Leader election across three processes: the leader is killed, the next
//! resigns, and the term grows each time.
//!
//! The parent starts three nodes (this program again, with `--node`), each
//! campaigning in the election `examples:leader`. A node that wins prints
//! `node <i> leads term <t>`, leads for a moment, resigns and exits. The
//! parent kills the first leader as soon as it announces itself (it never
//! resigns: its lease, 900 ms by default, has to run out), then watches the
//! others take over. It exits with status 1 unless the three terms grew
//! strictly and the takeover after the kill came within the lease and a
//! little slack, and prints `terms <a> < <b> < <c>; a standby took over
//! <n> ms after the leader was killed`.
//!
//! ```text
//! cargo run --example leader                         # private redis-server
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example leader
//! ```
//!
//! Without `REDIS_URL` it starts its own `redis-server` on a free loopback
//! port, as the other examples do.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use keyholder::{Client, DEFAULT_ELECTION_LEASE};
use keyholder_testkit::server::url_from_env_or_start;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long a node that is not killed leads before it resigns.
const LEAD: Duration = Duration::from_millis(300);
/// How much later than the lease's end a takeover may come.
const SLACK: Duration = Duration::from_millis(700);
/// How long the parent waits for the three terms.
const LIMIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.as_slice() {
        [flag, i, url, name] if flag == "--node" => node(i, url, name),
        [] => parent(),
        _ => Err("usage: leader (REDIS_URL selects a Redis server)".into()),
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("leader: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A node: campaigns, and once it leads, says so, leads a moment and
/// resigns (unless killed first).
fn node(i: &str, url: &str, name: &str) -> Result<bool, Error> {
    let client = Client::open(url)?;
    let election = client.election(name)?;
    let Some(leadership) = election.campaign_for(LIMIT)? else {
        return Err(format!("node {i} was not elected within {LIMIT:?}").into());
    };
    let term = leadership.term();
    println!("node {i} leads term {term}");
    std::io::stdout().flush()?;
    std::thread::sleep(LEAD);
    leadership.resign()?;
    println!("node {i} resigned term {term}");
    Ok(true)
}

/// The parent: starts the nodes, kills the first leader, checks the terms.
fn parent() -> Result<bool, Error> {
    let (url, _private) = url_from_env_or_start()?;
    let name = format!("examples:leader:{}", std::process::id());
    let exe = std::env::current_exe()?;
    let (tx, lines) = mpsc::channel::<(usize, String)>();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let mut child = Command::new(&exe)
            .args(["--node", &i.to_string(), &url, &name])
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send((i, line));
            }
        });
        nodes.push(child);
    }
    drop(tx);
    let deadline = Instant::now() + LIMIT;
    let (mut terms, mut killed_at, mut takeover) = (Vec::new(), None, None);
    while terms.len() < 3 {
        let (i, line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))?;
        println!("{line}");
        let Some(term) = line.rsplit_once("leads term ").and_then(|(_, t)| t.parse::<u64>().ok()) else {
            continue;
        };
        terms.push(term);
        match killed_at {
            None => {
                nodes[i].kill()?;
                println!("killed node {i}, the leader of term {term}");
                killed_at = Some(Instant::now());
            }
            Some(at) if takeover.is_none() => takeover = Some(at.elapsed()),
            Some(_) => {}
        }
    }
    for mut child in nodes {
        let _ = child.wait();
    }
    // The last leader's resignation, and anything else said.
    for (_, line) in lines.iter() {
        println!("{line}");
    }
    let takeover = takeover.ok_or("no takeover")?;
    let grew = terms.windows(2).all(|w| w[0] < w[1]);
    println!(
        "terms {} < {} < {}; a standby took over {} ms after the leader was killed",
        terms[0],
        terms[1],
        terms[2],
        takeover.as_millis()
    );
    Ok(grew && takeover < DEFAULT_ELECTION_LEASE + SLACK)
}
