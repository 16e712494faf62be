//! Child processes for multi-process tests.
//!
//! The parent re-runs its own test binary with `--exact <test> --nocapture
//! --include-ignored` and an environment variable set; that `#[test]`,
//! marked `#[ignore]` so that a normal run neither runs nor counts it as a
//! test, acts as the child when the variable is there. The child talks back with
//! [`say`] (protocol lines on stdout, marked, since libtest writes there too)
//! and reads the parent's lines from stdin with [`stdin_lines`]. The parent
//! reads the child's lines with [`ChildProcess::expect`], signals it (SIGKILL,
//! SIGSTOP, SIGCONT), and kills it (SIGKILL) when the handle is dropped,
//! whatever the test's outcome.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Display;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Marks a child's protocol lines in its stdout.
const MARK: &str = "KEYHOLDER-CHILD ";

/// A child process running one test of this binary; killed when dropped.
pub struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    test: String,
}

impl ChildProcess {
    /// Re-runs this test binary as a child that runs only `test`, with `env`.
    /// `test` is libtest's full name, with the module path in a binary of
    /// modules (`fair_lock::child_fair_holder` in `tests/suite`): a name
    /// that matches no test makes a child that exits before answering.
    pub fn spawn(test: &str, env: &[(&str, &str)]) -> ChildProcess {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", test, "--nocapture", "--include-ignored", "--test-threads=1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have written "test name ... " on the same line.
                if let Some(at) = line.find(MARK)
                    && tx.send(line[at + MARK.len()..].trim_end().to_owned()).is_err()
                {
                    return;
                }
            }
        });
        ChildProcess { child, stdin, lines, test: test.to_owned() }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next protocol line, failing the test after `limit` or if the
    /// child's stdout closed (it exited or crashed).
    #[track_caller]
    pub fn next_line(&self, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => panic!("child {}: no line within {limit:?}", self.test),
            Err(RecvTimeoutError::Disconnected) => panic!("child {}: exited before answering", self.test),
        }
    }

    /// The rest of the next protocol line, which must start with `prefix`.
    #[track_caller]
    pub fn expect(&self, prefix: &str, limit: Duration) -> String {
        let line = self.next_line(limit);
        match line.strip_prefix(prefix) {
            Some(rest) => rest.trim().to_owned(),
            None => panic!("child {}: expected {prefix:?}, got {line:?}", self.test),
        }
    }

    /// A protocol line if one is waiting, without blocking.
    pub fn try_line(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// Writes `line` to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin closed");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a signal with kill(1): `"-STOP"`, `"-CONT"`, `"-KILL"`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").args([signal, &self.pid().to_string()]).status().unwrap();
        assert!(status.success(), "kill {signal} {} failed", self.pid());
    }

    /// Kills the child with SIGKILL and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        let _ = self.child.kill();
        self.child.wait().unwrap()
    }

    /// Waits (bounded) for the child to exit by itself.
    #[track_caller]
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "child {} did not exit within {limit:?}", self.test);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// In a child: the value of `var`, which tells the test it is the child.
pub fn child_env(var: &str) -> Option<String> {
    std::env::var(var).ok()
}

/// In a child: writes one protocol line for the parent.
pub fn say(line: impl Display) {
    let mut out = std::io::stdout().lock();
    // Start on a fresh line: libtest may have written "test name ... ".
    writeln!(out, "\n{MARK}{line}").unwrap();
    out.flush().unwrap();
}

/// In a child: the parent's lines, read on a thread. The channel disconnects
/// when stdin closes (the parent is gone).
pub fn stdin_lines() -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line.trim().to_owned()).is_err() {
                return;
            }
        }
    });
    rx
}

/// In a child: waits for the parent's line `expected`; exits the process if
/// stdin closes or nothing comes within `limit` (the parent is gone or
/// failed), so that no child outlives its test.
pub fn await_line(lines: &Receiver<String>, expected: &str, limit: Duration) {
    match lines.recv_timeout(limit) {
        Ok(line) if line == expected => {}
        Ok(line) => panic!("child: expected {expected:?} from the parent, got {line:?}"),
        Err(_) => std::process::exit(3),
    }
}
