//! `--cluster`: W1 and W2 on a private Redis Cluster (three primaries and
//! three replicas of the installed redis-server, all on 127.0.0.1, from
//! `keyholder_testkit::cluster`), over lock names spread across the shards:
//! one name per primary. The floors and the baseline reach each name's
//! primary on a plain connection (a connection per session to each
//! primary, picked by the name's slot); keyholder is a cluster client
//! (`Client::builder_cluster`). Every primary's counters are read at both
//! ends of each window, so the tables give round trips per acquisition,
//! each shard's share of the commands, and the redirections (`MOVED`, `ASK`,
//! `ASKING`) that a call sent to the wrong shard would cost.
//!
//! All six nodes share this host's cores with the bench, so adding shards
//! cannot add throughput here: what the mode shows is where each command
//! goes and what it costs, not scaling.

use keyholder_testkit::cluster::RedisCluster;
use keyholder_testkit::server::RedisServer;

use super::contended::{Cells, Figures, Shape, cells, run_workers};
use super::handoff::handoff_over;
use super::header::{build_line, configuration_line, machine_line, p50_p99_us, ping_rtts, redis_version};
use super::loops::{Loop, floor_gap, loop_header, loop_row};
use super::w1::{redisson_note, w1_runs};
use crate::config::Cfg;
use crate::env::{Env, PRELOADED, Shards, connect, key_slot, raw_client};
use crate::error::{Res, err};
use crate::lock_impl::{Baseline, Keyholder, LockImpl, MinimalFloor};
use crate::measure::{NodeDelta, ShardStats, median};
use crate::report::{fmt, print_table};

/// A lock name and the primary serving its slot.
struct Named {
    name: String,
    slot: u16,
    port: u16,
}

/// Starts the cluster, runs W1 and W2 (as `--only` selects) and stops it.
pub(crate) fn run_cluster(cfg: Cfg) -> Res<()> {
    let cluster = start_cluster()?;
    let mut primaries = cluster.primaries();
    primaries.sort_unstable();
    let ranges: Vec<(u16, u16, u16)> =
        cluster.slot_map().iter().map(|r| (r.start, r.end, r.primary)).collect();
    let url = |port: u16| format!("redis://127.0.0.1:{port}/");
    let clients = primaries
        .iter()
        .map(|p| Ok((*p, raw_client(&url(*p))?)))
        .collect::<Res<Vec<(u16, redis::Client)>>>()?;
    let mut stats =
        ShardStats { nodes: clients.iter().map(|(p, c)| Ok((*p, connect(c)?))).collect::<Res<Vec<_>>>()? };
    let first = *primaries.first().ok_or_else(|| err("the cluster has no primary"))?;
    let threshold = {
        let (_, con) = stats.nodes.first_mut().ok_or_else(|| err("no primary connection"))?;
        let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("slowlog-log-slower-than").query(con)?;
        pair.get(1).cloned().ok_or_else(|| err("CONFIG GET slowlog-log-slower-than replied nothing"))?
    };
    let shards = Shards { seeds: cluster.seed_urls(), primaries: clients, ranges };
    let env = Env::new(cfg, url(first), threshold)?.with_shards(shards);
    for (_, con) in &mut stats.nodes {
        for source in PRELOADED {
            redis::cmd("SCRIPT").arg("LOAD").arg(source).query::<String>(con)?;
        }
    }
    // The reference: the same workloads, names and implementations on one
    // private redis-server, measured in the same run.
    let one = start_one()?;
    let one_url = one.url();
    let mut one_stats = ShardStats { nodes: vec![(one.port(), connect(&raw_client(&one_url)?)?)] };
    for (_, con) in &mut one_stats.nodes {
        for source in PRELOADED {
            redis::cmd("SCRIPT").arg("LOAD").arg(source).query::<String>(con)?;
        }
    }
    let one_env = Env::new(env.cfg.clone(), one_url, env.slowlog_threshold.clone())?;
    let on_one = |names: &[Named]| -> Vec<Named> {
        names.iter().map(|n| Named { name: n.name.clone(), slot: n.slot, port: one.port() }).collect()
    };
    header(&env, &cluster, &mut stats, one.port())?;
    if env.cfg.wants("W1") {
        let names = spread(&env, &cluster, "w1", None)?;
        w1(&env, &mut stats, &names, "one per shard")?;
        // The same loop with every name on one shard: what hopping between
        // server processes costs on this host, apart from the cluster's own.
        let first = names.first().map(|n| n.port).ok_or_else(|| err("no W1 name"))?;
        let together = spread(&env, &cluster, "w1-one-shard", Some(first))?;
        w1(&env, &mut stats, &together, &format!("all on the shard :{first}"))?;
        w1(&one_env, &mut one_stats, &on_one(&names), "the spread ones, all on one server")?;
    }
    if env.cfg.wants("W2") {
        let names = spread(&env, &cluster, "w2", None)?;
        w2(&env, &mut stats, &names)?;
        w2(&one_env, &mut one_stats, &on_one(&names))?;
    }
    drop(stats);
    drop(one_stats);
    drop(one);
    drop(cluster);
    Ok(())
}

/// The one-node reference's private redis-server.
fn start_one() -> Res<RedisServer> {
    std::panic::catch_unwind(RedisServer::start)
        .map_err(|_| err("the reference redis-server did not start (its log is printed above)"))
}

/// The servers a window's counters are summed over.
fn servers(env: &Env) -> &'static str {
    if env.shards.is_some() { "the three primaries together" } else { "the one server" }
}

/// The table title's prefix: where the window ran.
fn topology(env: &Env) -> &'static str {
    if env.shards.is_some() { "Cluster" } else { "One-node reference" }
}

/// Starts the cluster; the harness panics (with the node logs) when it
/// cannot, which becomes an error here.
fn start_cluster() -> Res<RedisCluster> {
    for (var, default) in [("REDIS_SERVER_BIN", "redis-server"), ("REDIS_CLI_BIN", "redis-cli")] {
        let bin = std::env::var(var).unwrap_or_else(|_| default.to_owned());
        match std::process::Command::new(&bin).arg("--version").output() {
            Ok(out) if out.status.success() => {}
            _ => {
                return Err(err(format!(
                    "cannot run {bin}: --cluster needs redis-server and redis-cli (Debian's redis-server \
                     package brings both; {var} overrides the binary)"
                )));
            }
        }
    }
    eprintln!("starting a Redis Cluster (3 primaries, 3 replicas) on 127.0.0.1");
    std::panic::catch_unwind(RedisCluster::start)
        .map_err(|_| err("the Redis Cluster did not start (the harness printed why above)"))
}

/// As many lock names as primaries, `<prefix>:<what>:<i>` for the
/// smallest `i`s: one on each primary, or with `only` all on that one; each
/// slot checked against `CLUSTER KEYSLOT`.
fn spread(env: &Env, cluster: &RedisCluster, what: &str, only: Option<u16>) -> Res<Vec<Named>> {
    let shards = env.shards.as_ref().ok_or_else(|| err("not a cluster run"))?;
    let mut names: Vec<Named> = Vec::new();
    for i in 0..10_000 {
        if names.len() == shards.primaries.len() {
            break;
        }
        let name = env.key(&format!("{what}:{i}"));
        let port = shards.owner(&name)?;
        let taken = match only {
            Some(only) => port != only,
            None => names.iter().any(|n| n.port == port),
        };
        if taken {
            continue;
        }
        let slot = key_slot(&name);
        let theirs = cluster.keyslot(&name);
        if slot != theirs {
            return Err(err(format!("{name}: slot {slot} computed, CLUSTER KEYSLOT says {theirs}")));
        }
        names.push(Named { name, slot, port });
    }
    if names.len() != shards.primaries.len() {
        return Err(err(format!("found names for {} of {} primaries", names.len(), shards.primaries.len())));
    }
    names.sort_by_key(|n| n.port);
    Ok(names)
}

/// The header: machine, cluster layout, the loopback round trip, build and
/// configuration.
fn header(env: &Env, cluster: &RedisCluster, stats: &mut ShardStats, one: u16) -> Res<()> {
    let (port, con) = stats.nodes.first_mut().ok_or_else(|| err("no primary"))?;
    let port = *port;
    let version = redis_version(con)?;
    let rtts = ping_rtts(con)?;
    let c = &env.cfg;
    let links = cluster.replica_links();
    let layout: Vec<String> = stats
        .nodes
        .iter()
        .map(|(p, _)| {
            let replicas: Vec<String> =
                links.iter().filter(|(_, primary)| primary == p).map(|(r, _)| format!(":{r}")).collect();
            let slots = env.shards.as_ref().map(|s| s.slots_of(*p)).unwrap_or_default();
            format!("primary :{p} slots {slots} (replica {})", replicas.join(", "))
        })
        .collect();
    println!("# keyholder benchmark, Redis Cluster mode (--cluster)\n");
    println!("{}", machine_line());
    println!(
        "- redis: {version}, a private cluster of 3 primaries and 3 replicas, all on 127.0.0.1 (this host): {}",
        layout.join("; ")
    );
    println!(
        "- one-node reference: a private redis-server on 127.0.0.1:{one}, the same names and \
         implementations, measured after the cluster in each workload"
    );
    println!("- loopback PING round trip to primary :{port}: {} (1000 pings)", p50_p99_us(&rtts));
    println!("{}", build_line());
    let workloads = format!(
        "W1 {} pairs over one name per shard, in turn; W2 one lock per shard, {} threads on each (all \
         locks at once) x {} acquisitions, hold {:?}, keyholder in 1 client and in {} clients; handoff = \
         minimal floor pair mean over {} pairs per name",
        c.w1_pairs, c.w2_threads, c.w2_per_thread, c.hold, c.w2_clients, c.handoff_pairs,
    );
    println!("{}", configuration_line(c, &workloads));
    Ok(())
}

/// The per-shard columns' label of a node.
fn shard_label(env: &Env, port: u16) -> String {
    let slots = env.shards.as_ref().map(|s| s.slots_of(port)).unwrap_or_default();
    format!(":{port} ({slots})")
}

/// A name's label: its name and slot.
fn names_on(names: &[Named], port: u16) -> String {
    let on: Vec<String> =
        names.iter().filter(|n| n.port == port).map(|n| format!("{} (slot {})", n.name, n.slot)).collect();
    on.join(", ")
}

/// One primary's share of a window.
struct ShardRun {
    port: u16,
    /// Operations (pairs, acquisitions) made on names it serves.
    ops: usize,
    /// The implementation's top-level commands it received.
    top: f64,
    evalsha: f64,
    /// `-MOVED` and `-ASK` replies it sent.
    redirects: u64,
    /// `ASKING` calls it received.
    asking: f64,
}

impl ShardRun {
    /// `node`'s share, `ops` operations made on it, `nested` the
    /// implementation's script commands, `counter_ops` the counter's GETs
    /// and SETs on it.
    fn new(node: &NodeDelta, ops: usize, nested: &[&str], counter_ops: u64) -> ShardRun {
        ShardRun {
            port: node.port,
            ops,
            top: node.delta.round_trips(nested, counter_ops),
            evalsha: node.delta.calls("evalsha"),
            redirects: node.moved + node.ask,
            asking: node.delta.calls("asking"),
        }
    }
}

fn w1(env: &Env, stats: &mut ShardStats, names: &[Named], placed: &str) -> Res<()> {
    let n = env.cfg.w1_pairs;
    let name = |i: usize| names[i % names.len()].name.as_str();
    let all = w1_runs(env, stats, &format!("{} W1", topology(env)), names.len() * 10, name)?;
    let hops = |runs: &[Loop<Vec<NodeDelta>>]| -> f64 {
        runs.iter().map(|r| r.parts.iter().map(NodeDelta::hops).sum::<f64>()).sum()
    };
    print_table(
        &format!(
            "{} W1: uncontended acquire+release, 1 thread, {n} pairs over {} names ({placed}), in turn",
            topology(env),
            names.len(),
        ),
        &loop_header("pair", "pairs/s", Some("MOVED+ASK+ASKING")),
        &all.iter().map(|r| loop_row(r.label, &r.runs, Some(fmt(hops(&r.runs), 0)))).collect::<Vec<_>>(),
        &[
            format!(
                "vs floor = median over runs of (pairs/s ÷ the same run's minimal floor pairs/s), in brackets the \
                 worst run's. Round trips: top-level \
             commands on {} (INFO commandstats less the scripts' own commands). MOVED+ASK+ASKING: \
             redirections answered (INFO errorstats) and ASKING calls received, summed over runs: a call \
             sent to a shard that does not serve its name would add one and a second hop. Redis CPU: {}. \
             minimal floor: the minimal Redisson-semantics scripts raw (SPUBLISH on a cluster); keyholder \
             scripts: keyholder's own, raw; Redisson 4: Redisson 4's acquire and latched unlock (SPUBLISH on a \
             cluster, as its sharded mode) and the latch's DEL; the five take turns, each run starting with \
             another.",
                servers(env),
                servers(env)
            ),
            floor_gap("pair", &all[0].runs, &all[1].runs, &all[3].runs),
            redisson_note(&all[4].runs),
        ],
    );
    if env.shards.is_none() {
        return Ok(());
    }
    // Each primary's share of each run: the pairs made on names it serves.
    let pairs_on = |port: u16| (0..n).filter(|i| names[i % names.len()].port == port).count();
    let shards: Vec<(&str, Vec<Vec<ShardRun>>)> = all
        .iter()
        .map(|r| {
            let of_run = |run: &Loop<Vec<NodeDelta>>| {
                run.parts.iter().map(|node| ShardRun::new(node, pairs_on(node.port), r.nested, 0)).collect()
            };
            (r.label, r.runs.iter().map(of_run).collect())
        })
        .collect();
    print_shards(
        env,
        &format!(
            "Cluster W1 (names {placed}), per shard: where each implementation's commands went \
             ({n} pairs a run)"
        ),
        "pairs",
        names,
        &shards.iter().map(|(label, runs)| (*label, runs)).collect::<Vec<_>>(),
        |r| r,
    );
    Ok(())
}

/// The per-shard table: for each implementation and primary, the
/// operations made on names it serves and the implementation's top-level
/// commands it received (medians over runs), and its redirections (summed).
fn print_shards<R>(
    env: &Env,
    title: &str,
    unit: &str,
    names: &[Named],
    all: &[(&str, &Vec<R>)],
    nodes_of: impl Fn(&R) -> &Vec<ShardRun>,
) {
    let mut rows = Vec::new();
    for (label, runs) in all {
        let Some(first) = runs.first() else { continue };
        for (i, shard) in nodes_of(first).iter().enumerate() {
            let of_runs = || runs.iter().filter_map(|r| nodes_of(r).get(i));
            let ops = median(of_runs().map(|s| s.ops as f64).collect());
            let top = median(of_runs().map(|s| s.top).collect());
            let per_op = median(of_runs().filter(|s| s.ops > 0).map(|s| s.top / s.ops as f64).collect());
            let redirects: u64 = of_runs().map(|s| s.redirects).sum();
            let asking: f64 = of_runs().map(|s| s.asking).sum();
            rows.push(vec![
                (*label).to_owned(),
                shard_label(env, shard.port),
                names_on(names, shard.port),
                fmt(ops, 0),
                fmt(top, 0),
                fmt(per_op, 2),
                fmt(median(of_runs().map(|s| s.evalsha).collect()), 0),
                format!("{redirects} / {}", fmt(asking, 0)),
            ]);
        }
    }
    let per = format!("commands/{}", if unit == "pairs" { "pair" } else { unit });
    print_table(
        title,
        &[
            "impl",
            "shard (slots)",
            "names",
            unit,
            "top-level commands",
            &per,
            "EVALSHA",
            "MOVED+ASK / ASKING",
        ],
        &rows,
        &[format!(
            "Medians over runs but the last column (summed). {unit}: the operations made on the names this \
             primary serves; top-level commands: the commands it received from the implementation (the \
             scripts' own commands{} left out). A call sent to a shard that does not serve its name \
             would show there as a MOVED or ASK reply, and as a second command on the right shard. \
             MOVED+ASK / ASKING: the redirections this primary answered and the ASKING calls it received \
             (0 / 0: no call took a second hop).",
            if unit == "acq" { " and the counter's GET and SET" } else { "" }
        )],
    );
}

/// One W2 window over all locks at once.
struct Window {
    fig: Figures,
    hops: f64,
    /// Each primary's share.
    nodes: Vec<ShardRun>,
}

fn w2(env: &Env, stats: &mut ShardStats, names: &[Named]) -> Res<()> {
    let c = &env.cfg;
    let (floor, baseline) = (MinimalFloor::new(env), Baseline::new(env));
    let locks = names.len();
    for clients in [1, c.w2_clients] {
        let (mut ideal, mut handoffs, mut floor_loop, mut base, mut kh) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut pubsub = Vec::new();
        for run in 1..=c.runs {
            eprintln!("{} W2 ({clients} client(s)) run {run}/{}", topology(env), c.runs);
            let h = handoff_over(env, &names.iter().map(|n| n.name.as_str()).collect::<Vec<_>>())?;
            handoffs.push(h * 1e6);
            let alone = Shape { threads: 1, per_thread: (c.w2_per_thread * 2).max(10) };
            floor_loop.push(window(env, stats, &floor, alone, names, h)?);
            let shape = Shape { threads: c.w2_threads, per_thread: c.w2_per_thread };
            base.push(window(env, stats, &baseline, shape, names, h)?);
            let keyholder = Keyholder::new(env, clients, None)?;
            for named in names {
                keyholder.warm_up(&named.name)?;
            }
            let k = window(env, stats, &keyholder, shape, names, h)?;
            pubsub.push(keyholder.pubsub_connections());
            drop(keyholder);
            ideal.push(Window { fig: k.fig.ideal(h), hops: 0.0, nodes: Vec::new() });
            kh.push(k);
        }
        let spread = if clients == 1 {
            format!("{} threads per lock in 1 client", c.w2_threads)
        } else {
            format!("{} threads per lock over {clients} clients", c.w2_threads)
        };
        let row = |label: &str, runs: &[Window]| {
            let Cells { waits, max, costs, cpu } = cells(&runs.iter().map(|r| r.fig).collect::<Vec<_>>());
            let mut row = vec![label.to_owned()];
            row.extend(waits);
            row.push(max);
            row.extend(costs);
            row.push(fmt(runs.iter().map(|r| r.hops).sum(), 0));
            row.extend(cpu);
            row
        };
        print_table(
            &format!(
                "{} W2: {locks} locks, {}, all at once: {spread}, {} acquisitions each, hold {:?} with a \
                 GET-then-SET counter in the lock's slot",
                topology(env),
                if env.shards.is_some() { "one per shard" } else { "the cluster's, all on one server" },
                c.w2_per_thread,
                c.hold
            ),
            &[
                "impl",
                "acq/s (all locks)",
                "vs ideal",
                "hold ms",
                "handoff µs",
                "p50 wait ms",
                "p99 wait ms",
                "max wait ms",
                "lost updates",
                "round trips/acq",
                "cmds/acq",
                "acquire attempts/acq",
                "EVALSHA/acq",
                "(S)SUBSCRIBE/acq",
                "HEXISTS/acq",
                "MOVED+ASK+ASKING",
                "client CPU µs/acq",
                "Redis CPU µs/acq",
            ],
            &[
                row("minimal floor (ideal)", &ideal),
                row(&format!("minimal floor loop, 1 thread per lock ({locks}), same hold"), &floor_loop),
                row("baseline", &base),
                row("keyholder", &kh),
            ],
            &[format!(
                "ideal = {locks} locks / (measured mean hold + one handoff); handoff = minimal floor acquire+release \
                 pair on each lock in turn, median {} µs; an implementation's handoff = {locks}/(acq/s) - \
                 mean hold. Waits are each acquisition's, over all locks. Lost updates: summed over runs \
                 and locks. Round trips: top-level commands on {}{}, less the counter's GET and SET; \
                 cmds/acq: every command the servers ran, top-level and inside scripts (INFO \
                 commandstats), less the counter's GET and SET and the bench's own; \
                 (S)SUBSCRIBE: SUBSCRIBE, SSUBSCRIBE and their unsubscribes (keyholder's cluster client \
                 uses shard channels on Redis 7). MOVED+ASK+ASKING: summed over runs. Redis CPU: {}. \
                 keyholder's pub/sub connections after the window: {:?} (per run, all clients together).",
                fmt(median(handoffs), 0),
                servers(env),
                if c.audit {
                    ", counted by the slow log (every command logged, script-internal ones told apart by \
                     their peer)"
                } else {
                    " (INFO commandstats less script-internal commands; --no-audit: top-level HEXISTS \
                     uncounted)"
                },
                servers(env),
                pubsub
            )],
        );
        if env.shards.is_none() {
            continue;
        }
        print_shards(
            env,
            &format!("Cluster W2 ({spread}), per shard"),
            "acq",
            names,
            &[("minimal floor loop", &floor_loop), ("baseline", &base), ("keyholder", &kh)],
            |r| &r.nodes,
        );
    }
    Ok(())
}

/// One window: `shape.threads` threads on each lock at once, each
/// `shape.per_thread` acquisitions with the critical section on the lock's
/// own counter `{<name>}:counter` (same slot, same shard).
fn window<I: LockImpl>(
    env: &Env,
    stats: &mut ShardStats,
    imp: &I,
    shape: Shape,
    names: &[Named],
    handoff: f64,
) -> Res<Window> {
    let counters: Vec<String> = names.iter().map(|n| format!("{{{}}}:counter", n.name)).collect();
    let counter_con = |stats: &mut ShardStats, i: usize| -> Res<usize> {
        let port = names[i].port;
        stats.nodes.iter().position(|(p, _)| *p == port).ok_or_else(|| err(format!("no primary {port}")))
    };
    for (i, counter) in counters.iter().enumerate() {
        let at = counter_con(stats, i)?;
        redis::cmd("DEL").arg(counter).query::<()>(&mut stats.nodes[at].1)?;
    }
    let locks: Vec<(&str, &str)> =
        names.iter().map(|n| n.name.as_str()).zip(counters.iter().map(String::as_str)).collect();
    let (workers, nodes, d) = run_workers(env, stats, imp, shape, &locks)?;
    let acquired_on = |lock: usize| -> usize {
        workers.iter().filter(|w| w.index / shape.threads == lock).map(|w| w.waits_ms.len()).sum()
    };
    let mut lost = 0.0;
    for (i, counter) in counters.iter().enumerate() {
        let at = counter_con(stats, i)?;
        let con = &mut stats.nodes[at].1;
        let counted: Option<i64> = redis::cmd("GET").arg(counter).query(con)?;
        redis::cmd("DEL").arg(counter).query::<()>(con)?;
        lost += acquired_on(i) as f64 - counted.unwrap_or(0) as f64;
    }
    let hops = nodes.iter().map(NodeDelta::hops).sum();
    let nodes = nodes
        .iter()
        .map(|node| {
            let k: usize = (0..names.len()).filter(|l| names[*l].port == node.port).map(acquired_on).sum();
            ShardRun::new(node, k, imp.script_commands(), k as u64)
        })
        .collect();
    let subs = d.subscribes() + d.calls("ssubscribe") + d.calls("sunsubscribe");
    let fig = Figures::new(imp, &workers, &d, names.len(), handoff, lost, subs);
    Ok(Window { fig, hops, nodes })
}
