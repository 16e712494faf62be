//! The demo runs to completion: a short run against the private
//! redis-server it starts itself, and one against a private Redis Cluster
//! (`--cluster`, about 3 s more to start). `cargo test` builds examples before it
//! runs tests. (The benchmark, a crate of its own, has its smoke test in
//! `bench/tests/quick.rs`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The built example `name`, next to this test binary's directory; built
/// with cargo first if this run did not build it (`cargo test --test
/// examples`, or `--all-targets`, which builds examples as tests).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = profile_dir.join("examples").join(name);
    if !path.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--example", name, "--manifest-path"])
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
            .status()
            .unwrap();
        assert!(status.success(), "cargo build --example {name} failed");
    }
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Runs `cmd`, failing the test if it takes longer than `limit`.
fn run_within(mut cmd: Command, limit: Duration) -> Output {
    let started = Instant::now();
    let child = cmd.env_remove("REDIS_URL").spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output =
        rx.recv_timeout(limit).unwrap_or_else(|_| panic!("did not finish within {limit:?}")).unwrap();
    eprintln!("finished in {:?}", started.elapsed());
    output
}

#[test]
fn the_demo_runs_and_its_checks_pass() {
    let mut cmd = Command::new(example("demo"));
    cmd.args(["--seconds", "2"]).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let output = run_within(cmd, Duration::from_secs(120));
    assert!(
        output.status.success(),
        "demo failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_demo_runs_on_a_cluster_and_its_checks_pass() {
    let mut cmd = Command::new(example("demo"));
    cmd.args(["--cluster", "--seconds", "2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let output = run_within(cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("shard ") && stdout.contains("all checks passed"), "{stdout}");
}
