//! The benchmark runs its tiny configuration (`--quick`) to completion
//! against the private redis-server it starts itself, and prints every
//! workload's table. A smoke test, not a measurement: figures of this debug
//! build mean nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longer than `--quick` takes in a debug build on a busy 2-core machine.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn the_benchmark_runs_its_tiny_configuration() {
    let output = run_within(&["--quick"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "bench failed: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    for workload in [
        "### W1",
        "### W2",
        "### W3",
        "### W4",
        "### W5",
        "### W6",
        "### W7",
        "### FAIR",
        "### RW",
        "### SEM",
        "### SPIN",
        "### REDLOCK",
    ] {
        assert!(stdout.contains(workload), "no {workload} table in:\n{stdout}");
    }
}

/// `--cluster --quick`: a private Redis Cluster (about 3 s to start), W1
/// and W2 over names spread across its shards and on the one-node
/// reference, tables printed; no call took a second hop (nothing moves
/// slots during the run).
#[test]
fn the_benchmark_runs_its_cluster_mode() {
    let output = run_within(&["--cluster", "--quick"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "bench failed: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    for table in [
        "### Cluster W1",
        "per shard: where each implementation's commands went",
        "### Cluster W2",
        "### One-node reference W2",
    ] {
        assert!(stdout.contains(table), "no {table} table in:\n{stdout}");
    }
    let shard_rows: Vec<&str> = stdout.lines().filter(|l| l.contains("(slot ")).collect();
    assert!(!shard_rows.is_empty(), "no per-shard rows in:\n{stdout}");
    for row in shard_rows {
        let last = row.split('|').map(str::trim).rfind(|cell| !cell.is_empty());
        assert_eq!(last, Some("0 / 0"), "a redirection or ASKING in: {row}\n{stdout}");
    }
}

/// Runs the bench with `args` and no `REDIS_URL`, failing after [`LIMIT`].
fn run_within(args: &[&str]) -> std::process::Output {
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_keyholder-bench"))
        .args(args)
        .env_remove("REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output =
        rx.recv_timeout(LIMIT).unwrap_or_else(|_| panic!("did not finish within {LIMIT:?}")).unwrap();
    eprintln!("finished in {:?}", started.elapsed());
    output
}

#[test]
fn a_bad_flag_is_refused_with_the_usage() {
    let output = Command::new(env!("CARGO_BIN_EXE_keyholder-bench")).arg("--fast").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("usage: keyholder-bench"));
}
