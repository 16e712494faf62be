//! What to run: the full or the `--quick` configuration, adjusted by the
//! command-line flags. Parsed by hand: seven flags do not need a parser crate.

use std::time::Duration;

/// The help text.
pub(crate) const USAGE: &str = "\
usage: keyholder-bench [--quick] [--cluster] [--runs N] [--only W1,W2,...,SPIN,REDLOCK,ELECTION] [--w2-clients N] [--w6-clients N,N,...] [--w7-threads N,N,...] [--barging-window-ms N,N,...] [--w3-baseline-threads N] [--no-audit] [--aa]

  --quick                    a tiny configuration that finishes in a few seconds
  --cluster                  W1 and W2 on a private Redis Cluster (3 primaries, 3 replicas, all on
                             127.0.0.1) over lock names spread across its shards, with each
                             primary's command counts and redirections (REDIS_URL is ignored)
  --runs N                   runs per workload; figures are medians (default 3, quick 1)
  --only LIST                run only these workloads (W1..W7, FAIR, RW, SEM, SPIN, REDLOCK, ELECTION; comma-separated)
  --w2-clients N             clients of W2's second configuration (default 4; the 8 threads are spread over them)
  --w6-clients LIST          W6's client counts, one thread each (default 8,32,128; quick 8)
  --w7-threads LIST          W7's thread counts (default 1,8,32,128,512; quick 1,8)
  --barging-window-ms LIST   keyholder rows of W6 and of W2's clients configuration, one per barging
                             window in ms (ClientBuilder::barging_window; 0 = always hand over);
                             default: one row with the client's default
  --w3-baseline-threads N    polling threads for the W3 baseline (default: as many as keyholder's)
  --no-audit                 do not count top-level commands with the slow log in W2 and W3
                             (then keyholder's top-level HEXISTS calls go uncounted)
  --aa                       W1 and W7 measure the minimal floor a second time, as a row of its own
                             (A/A): its ratio to the minimal floor, identical code, is the noise of
                             one run on this machine

REDIS_URL selects a Redis server; without it a private redis-server is started
(REDIS_SERVER_BIN overrides the binary; with --cluster, REDIS_CLI_BIN overrides redis-cli).";

/// The workloads `--cluster` runs.
pub(crate) const CLUSTER_WORKLOADS: [&str; 2] = ["W1", "W2"];

/// The workloads, in the order they run.
pub(crate) const WORKLOADS: [&str; 13] =
    ["W1", "W2", "W3", "W4", "W5", "W6", "W7", "FAIR", "RW", "SEM", "SPIN", "REDLOCK", "ELECTION"];

/// Sizes and switches of one bench run.
#[derive(Debug, Clone)]
pub(crate) struct Cfg {
    pub(crate) runs: usize,
    pub(crate) quick: bool,
    /// `--cluster`: W1 and W2 on a private Redis Cluster.
    pub(crate) cluster: bool,
    pub(crate) only: Vec<String>,
    /// Floor pairs measured for "one handoff" of the contended ideals.
    pub(crate) handoff_pairs: usize,
    pub(crate) w1_pairs: usize,
    pub(crate) w2_threads: usize,
    pub(crate) w2_clients: usize,
    pub(crate) w2_per_thread: usize,
    /// The critical section of W2, W3 and W6.
    pub(crate) hold: Duration,
    pub(crate) w3_threads: usize,
    pub(crate) w3_clients: usize,
    /// W3's second configuration: the same threads over this many clients.
    pub(crate) w3_many_clients: usize,
    /// W6: client counts, one thread each.
    pub(crate) w6_clients: Vec<usize>,
    /// W6: acquisitions over all threads.
    pub(crate) w6_acquisitions: usize,
    /// W6 and W2's clients configuration: a keyholder row per barging
    /// window (ms); empty: one row with the client's default.
    pub(crate) barging_windows_ms: Vec<u64>,
    /// W7: thread counts, one client, distinct names per thread.
    pub(crate) w7_threads: Vec<usize>,
    /// W7: acquire+release pairs over all threads (a quarter with one
    /// thread).
    pub(crate) w7_pairs: usize,
    pub(crate) w3_baseline_threads: usize,
    /// Count top-level commands with the slow log in W2 and W3.
    pub(crate) audit: bool,
    /// W1 and W7: the minimal floor measured twice, the second as a row
    /// of its own (an A/A comparison: the noise of one run).
    pub(crate) aa: bool,
    pub(crate) w3_idle: Duration,
    /// Stack size of W3's and W7's many threads.
    pub(crate) w3_stack: usize,
    pub(crate) w4_locks: usize,
    pub(crate) w4_threads: usize,
    pub(crate) w4_watchdog: Duration,
    pub(crate) w4_periods: u32,
    pub(crate) w5_iters: usize,
    /// SEM: acquisitions per thread (8 threads).
    pub(crate) sem_per_thread: usize,
}

impl Cfg {
    /// The full run: about 50 s a run on 2 cores.
    pub(crate) fn full() -> Cfg {
        Cfg {
            runs: 3,
            quick: false,
            cluster: false,
            only: Vec::new(),
            handoff_pairs: 500,
            w1_pairs: 5000,
            w2_threads: 8,
            w2_clients: 4,
            w2_per_thread: 100,
            hold: Duration::from_millis(1),
            w3_threads: 1000,
            w3_clients: 4,
            w3_many_clients: 100,
            w6_clients: vec![8, 32, 128],
            w6_acquisitions: 1600,
            barging_windows_ms: Vec::new(),
            w7_threads: vec![1, 8, 32, 128, 512],
            w7_pairs: 32000,
            w3_baseline_threads: 1000,
            audit: true,
            aa: false,
            w3_idle: Duration::from_secs(1),
            w3_stack: 64 * 1024,
            w4_locks: 10_000,
            w4_threads: 4,
            w4_watchdog: Duration::from_millis(3000),
            w4_periods: 4,
            w5_iters: 2000,
            sem_per_thread: 200,
        }
    }

    /// `--quick`: every workload, tiny, in a few seconds.
    pub(crate) fn quick() -> Cfg {
        Cfg {
            runs: 1,
            quick: true,
            handoff_pairs: 100,
            w1_pairs: 200,
            w2_per_thread: 5,
            w3_threads: 40,
            w3_many_clients: 10,
            w6_clients: vec![8],
            w6_acquisitions: 40,
            w7_threads: vec![1, 8],
            w7_pairs: 100,
            w3_baseline_threads: 40,
            w3_idle: Duration::from_millis(200),
            w4_locks: 200,
            w4_threads: 2,
            w4_watchdog: Duration::from_millis(600),
            w5_iters: 100,
            sem_per_thread: 10,
            ..Cfg::full()
        }
    }

    /// Whether `workload` (`W1`..`W7`) is to run.
    pub(crate) fn wants(&self, workload: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| w.eq_ignore_ascii_case(workload))
    }

    /// The configuration the arguments (without the program name) ask for;
    /// `None` for `--help`.
    pub(crate) fn from_args(args: &[String]) -> Result<Option<Cfg>, String> {
        let mut cfg = if args.iter().any(|a| a == "--quick") { Cfg::quick() } else { Cfg::full() };
        let mut i = 0;
        while i < args.len() {
            let (flag, inline) = match args[i].split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (args[i].clone(), None),
            };
            let mut value = || -> Result<String, String> {
                if let Some(v) = inline.clone() {
                    return Ok(v);
                }
                i += 1;
                args.get(i).cloned().ok_or_else(|| format!("{flag} needs a value"))
            };
            match flag.as_str() {
                "--quick" => {}
                "--cluster" => cfg.cluster = true,
                "--no-audit" => cfg.audit = false,
                "--aa" => cfg.aa = true,
                "--runs" => {
                    cfg.runs = value()?.parse().map_err(|e| format!("--runs: {e}"))?;
                    if cfg.runs == 0 || cfg.runs > 100 {
                        return Err("--runs must be 1..=100".into());
                    }
                }
                "--only" => {
                    cfg.only = value()?.split(',').map(|s| s.trim().to_uppercase()).collect();
                    for w in &cfg.only {
                        if !WORKLOADS.contains(&w.as_str()) {
                            return Err(format!("--only: unknown workload {w}"));
                        }
                    }
                }
                "--w2-clients" => {
                    cfg.w2_clients = value()?.parse().map_err(|e| format!("--w2-clients: {e}"))?;
                    if cfg.w2_clients < 2 || cfg.w2_clients > cfg.w2_threads {
                        return Err(format!("--w2-clients must be 2..={}", cfg.w2_threads));
                    }
                }
                "--w6-clients" => cfg.w6_clients = counts("--w6-clients", &value()?, 2..=512)?,
                "--w7-threads" => cfg.w7_threads = counts("--w7-threads", &value()?, 1..=1024)?,
                "--barging-window-ms" => {
                    let list = value()?;
                    cfg.barging_windows_ms = list
                        .split(',')
                        .map(|n| n.trim().parse::<u64>().map_err(|e| format!("--barging-window-ms: {e}")))
                        .collect::<Result<_, _>>()?;
                    if cfg.barging_windows_ms.iter().any(|ms| *ms > 60_000) {
                        return Err("--barging-window-ms takes windows of 0..=60000".into());
                    }
                }
                "--w3-baseline-threads" => {
                    cfg.w3_baseline_threads =
                        value()?.parse().map_err(|e| format!("--w3-baseline-threads: {e}"))?;
                    if cfg.w3_baseline_threads == 0 || cfg.w3_baseline_threads > 5000 {
                        return Err("--w3-baseline-threads must be 1..=5000".into());
                    }
                }
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other}")),
            }
            i += 1;
        }
        if cfg.cluster {
            if let Some(w) = cfg.only.iter().find(|w| !CLUSTER_WORKLOADS.contains(&w.as_str())) {
                return Err(format!("--cluster runs W1 and W2 only, not {w}"));
            }
            if cfg.only.is_empty() {
                cfg.only = CLUSTER_WORKLOADS.iter().map(|w| (*w).to_owned()).collect();
            }
        }
        Ok(Some(cfg))
    }
}

/// A comma-separated list of counts given to `flag`, each in `range`.
fn counts(flag: &str, list: &str, range: std::ops::RangeInclusive<usize>) -> Result<Vec<usize>, String> {
    let counts = list
        .split(',')
        .map(|n| n.trim().parse::<usize>().map_err(|e| format!("{flag}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if counts.iter().any(|n| !range.contains(n)) {
        return Err(format!("{flag} takes counts of {}..={}", range.start(), range.end()));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::Cfg;

    fn parse(args: &[&str]) -> Result<Option<Cfg>, String> {
        Cfg::from_args(&args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn quick_applies_wherever_it_stands_and_flags_override_it() {
        let cfg = parse(&["--runs", "2", "--quick", "--only=w1,W3"]).unwrap().unwrap();
        assert!(cfg.quick);
        assert_eq!(cfg.runs, 2);
        assert_eq!(cfg.w1_pairs, Cfg::quick().w1_pairs);
        assert!(cfg.wants("W1") && cfg.wants("w3") && !cfg.wants("W2"));
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for (args, flag) in [
            (&["--only", "W8"][..], "--only"),
            (&["--runs", "0"][..], "--runs"),
            (&["--w2-clients", "9"][..], "--w2-clients"),
            (&["--w6-clients", "8,1"][..], "--w6-clients"),
            (&["--barging-window-ms", "5,x"][..], "--barging-window-ms"),
            (&["--w3-baseline-threads"][..], "--w3-baseline-threads"),
            (&["--fast"][..], "--fast"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
        assert!(parse(&["--help"]).unwrap().is_none());
    }

    #[test]
    fn cluster_mode_runs_w1_and_w2_only() {
        let cfg = parse(&["--cluster", "--quick"]).unwrap().unwrap();
        assert!(cfg.cluster && cfg.wants("W1") && cfg.wants("W2") && !cfg.wants("W3"));
        let cfg = parse(&["--only", "w2", "--cluster"]).unwrap().unwrap();
        assert!(cfg.wants("W2") && !cfg.wants("W1"));
        let e = parse(&["--cluster", "--only", "W1,W4"]).unwrap_err();
        assert!(e.contains("--cluster") && e.contains("W4"), "{e}");
    }
}
