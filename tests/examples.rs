//! The examples run to completion: short runs against the private
//! redis-servers they start themselves, and the demo once against a private
//! Redis Cluster (`--cluster`, about 3 s more to start). `cargo test` builds examples before it
//! runs tests. (The benchmark, a crate of its own, has its smoke test in
//! `bench/tests/quick.rs`.) A test binary of its own, not a module of
//! `tests/suite`: it runs `cargo build` for each example (a first build
//! compiles the library without features), which must not load the machine
//! under the suite's timing-bound tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The built example `name`, next to this test binary's directory, built
/// (or found up to date) by cargo first: `cargo test` builds examples as
/// tests under other names (`--all-targets`) or not at all (`--test
/// examples`), and a binary left by an earlier build would be stale.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let path = profile_dir.join("examples").join(name);
    let status = Command::new(env!("CARGO"))
        .args(["build", "--example", name, "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .status()
        .unwrap();
    assert!(status.success(), "cargo build --example {name} failed");
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

/// Runs the example `name` with `args` (within 2 min) and returns its
/// standard output, failing the test unless it succeeded and printed
/// `marker`.
fn run_example(name: &str, args: &[&str], marker: &str) -> String {
    let mut cmd = Command::new(example(name));
    cmd.args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let output = run_within(cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && stdout.contains(marker),
        "{name} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
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

/// The scheduled job from several processes: each tick ran on one node.
#[test]
fn the_scheduled_job_runs_once_per_tick_across_processes() {
    let stdout = run_example(
        "scheduled_job",
        &["--nodes", "3", "--ticks", "3", "--tick-ms", "1000"],
        "ran once per tick",
    );
    // Every node took part: the late ones skipped.
    assert_eq!(stdout.matches(": ran\n").count(), 3, "{stdout}");
    assert_eq!(stdout.matches(": skipped\n").count(), 6, "{stdout}");
}

/// The scheduled job with a leader: only the elected node runs the
/// schedule; it resigns halfway and a standby runs the rest, in a higher
/// term.
#[test]
fn the_scheduled_job_runs_on_the_leader_and_a_standby_takes_over() {
    let args = ["--leader", "--nodes", "3", "--ticks", "4", "--tick-ms", "500"];
    let stdout = run_example("scheduled_job", &args, "ran once per tick");
    assert_eq!(stdout.matches(": ran in term ").count(), 4, "{stdout}");
    // The two that ran ticks resigned (the third may lead after the end).
    assert!(stdout.matches(": resigned term ").count() >= 2, "{stdout}");
}

/// Token-owned holds: handlers lock, pool threads release; one order's jobs
/// never overlap.
#[test]
fn the_worker_pool_releases_on_pool_threads_and_orders_never_overlap() {
    let marker = "orders: 12 jobs, never two at once on one order";
    run_example("worker_pool", &["--jobs", "12", "--workers", "3"], marker);
}

/// Leader election: three processes, the leader killed, the next resigns;
/// the term grows and the takeover comes within the lease.
#[test]
fn the_leader_is_killed_and_a_standby_takes_over_with_a_higher_term() {
    let stdout = run_example("leader", &[], "a standby took over");
    assert_eq!(stdout.matches(" resigned term ").count(), 2, "{stdout}");
}

/// One HTTP/1.1 request on a new connection: the status and the body.
fn http(addr: &str, method: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned();
    (status, body)
}

/// The thread-per-request server: concurrent requests on one order id
/// serialize (no lost update, never two handlers inside), nested handlers
/// re-enter the lock, and another order id is not held up.
#[test]
fn the_http_server_serializes_requests_per_order_and_reenters() {
    use std::io::BufRead;
    let mut child = Command::new(example("http_orders"))
        .env_remove("REDIS_URL")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let mut child = Kill(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening on ") {
                let _ = tx.send(addr.trim().to_owned());
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(60)).expect("the server never listened");

    let requests: Vec<_> = (0..12)
        .map(|i| {
            let addr = addr.clone();
            let order = if i % 4 == 3 { "7" } else { "42" };
            std::thread::spawn(move || http(&addr, "POST", &format!("/orders/{order}/pay")))
        })
        .collect();
    for request in requests {
        let (status, body) = request.join().unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("reentered_hold_count=2"), "the nested handler did not re-enter: {body}");
    }
    let (status, body) = http(&addr, "GET", "/orders/42");
    assert_eq!(status, 200);
    assert_eq!(body.trim(), "order 42 payments=9 audit=9 max_inside=1", "lost update or overlap");
    let (_, body) = http(&addr, "GET", "/orders/7");
    assert_eq!(body.trim(), "order 7 payments=3 audit=3 max_inside=1");
    assert_eq!(http(&addr, "GET", "/nowhere").0, 404);

    assert_eq!(http(&addr, "POST", "/shutdown").0, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
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
