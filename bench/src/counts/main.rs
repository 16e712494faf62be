//! Exact counts per operation on keyholder's hot paths (issue 38, item 1):
//! the client's instructions, counted by callgrind, and the Redis commands
//! the operation runs, counted by the server (`INFO commandstats`, scripts'
//! inner calls included). Neither depends on load, so unlike the timed
//! benchmark they can gate a change: `.ci/run` fails when a path's
//! instructions grow by more than 3% or any of its commands grows, against
//! the committed `bench/counts-baseline.txt`, and prints the table either
//! way.
//!
//! ```text
//! cargo run --profile counts -p keyholder-bench --bin counts              # measure, compare, exit 1 on a regression
//! cargo run --profile counts -p keyholder-bench --bin counts -- --bless   # measure and rewrite the baseline
//! cargo run --profile counts -p keyholder-bench --bin counts -- --only pair,reentry
//! ```
//!
//! `KEYHOLDER_COUNTS_BLESS=1` does what `--bless` does. The program starts
//! a private `redis-server` (or `$REDIS_SERVER_BIN`) on a free loopback
//! port, then runs itself once per path under valgrind (`--worker`, see
//! `paths.rs`); valgrind must be installed. Why callgrind with a few
//! options rather than gungraun (iai-callgrind's successor): gungraun needs
//! its runner binary installed at the library's exact version and counts
//! whole benchmark functions, where a path here is one call inside a
//! process with live connections, a pub/sub thread and a watchdog thread,
//! measured call by call; the three options below do that directly.

#[path = "../error.rs"]
mod error;

mod baseline;
mod callgrind;
mod commands;
mod handoff;
mod measured;
mod paths;
mod renewal;
mod tally;

use std::process::ExitCode;

use keyholder_testkit::server::RedisServer;

use error::{Res, err};

const USAGE: &str = "\
usage: counts [--bless] [--only PATH,PATH...]

Measures keyholder's instructions (callgrind) and Redis commands per
operation on each hot path and compares them with bench/counts-baseline.txt:
exit status 1 when a path's instructions moved by more than 3% or any command
count moved (a fall asks for --bless, in the same commit). --bless (or
KEYHOLDER_COUNTS_BLESS=1) rewrites the baseline instead. Needs valgrind and
redis-server.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result =
        if args.first().map(String::as_str) == Some("--worker") { worker(&args) } else { parent(&args) };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("counts: {e}");
            ExitCode::from(2)
        }
    }
}

/// The value after `flag` in `args`.
fn value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
}

/// Under valgrind: runs one path and prints what the parent reads.
fn worker(args: &[String]) -> Res<ExitCode> {
    let (Some(name), Some(url), Some(dir)) = (args.get(1), value(args, "--url"), value(args, "--dir")) else {
        return Err(err("usage: counts --worker PATH --url URL --dir DIR"));
    };
    let outcome = paths::path(name)?.work(url, dir)?;
    println!("commands {}", commands::format(&outcome.commands));
    let dumps: Vec<String> = outcome.dumps.iter().map(usize::to_string).collect();
    println!("dumps {}", dumps.join(" "));
    println!("outliers {}", outcome.outliers);
    Ok(ExitCode::SUCCESS)
}

/// Measures every path (or `--only` those), then compares or blesses.
fn parent(args: &[String]) -> Res<ExitCode> {
    let mut bless = std::env::var("KEYHOLDER_COUNTS_BLESS").is_ok_and(|v| v == "1");
    let mut only: Option<Vec<String>> = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--bless" => bless = true,
            "--check" => {}
            "--only" => {
                let list = rest.next().ok_or_else(|| err("--only needs a list of paths"))?;
                only = Some(list.split(',').map(str::to_owned).collect());
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(ExitCode::SUCCESS);
            }
            other => return Err(err(format!("unknown argument {other:?}\n\n{USAGE}"))),
        }
    }
    let chosen: Vec<&paths::Path> = match &only {
        Some(names) => names.iter().map(|n| paths::path(n)).collect::<Res<_>>()?,
        None => paths::PATHS.iter().collect(),
    };
    if bless && only.is_some() {
        return Err(err("--bless measures every path: leave --only out"));
    }
    if cfg!(debug_assertions) {
        eprintln!(
            "counts: a debug build; the baseline is the counts profile's (cargo run --profile counts ...)"
        );
    }
    let server = RedisServer::start_standalone();
    let url = server.url();
    let scratch = std::env::temp_dir().join(format!("keyholder-counts-{}", std::process::id()));
    let measured = measure_all(&chosen, &url, &scratch);
    if std::env::var_os("KEYHOLDER_COUNTS_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let measured = measured?;
    if bless {
        baseline::write(&measured)?;
        let (table, _) = baseline::compare(&measured, &baseline::read()?, true);
        println!("{table}\nWrote {}.", baseline::FILE);
        return Ok(ExitCode::SUCCESS);
    }
    let (table, failures) = baseline::compare(&measured, &baseline::read()?, only.is_none());
    println!("{table}");
    println!(
        "Per operation. instructions: the fewest any counted operation took; median / most: of the same \
         operations (how many; above the fewest, an operation also woke a client thread); memset: instructions \
         in the C library's memset, left out (bytes zeroed; see docs/performance.md)."
    );
    if failures.is_empty() {
        println!("Within the baseline ({}).", baseline::FILE);
        return Ok(ExitCode::SUCCESS);
    }
    for failure in &failures {
        println!("FAIL {failure}");
    }
    Ok(ExitCode::FAILURE)
}

/// Each path in turn, its progress on stderr.
fn measure_all<'p>(
    chosen: &[&'p paths::Path],
    url: &str,
    scratch: &std::path::Path,
) -> Res<Vec<(&'p str, callgrind::Measured)>> {
    let mut measured = Vec::new();
    for path in chosen {
        let started = std::time::Instant::now();
        // Once more if the worker fails: most of its operations taking
        // another path, or a settled state not reached in time, is what a
        // machine busy with other work can cause; twice is the path's.
        let m = match callgrind::measure(path, url, scratch) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("counts: {} failed, measuring it once more: {e}", path.name);
                callgrind::measure(path, url, &scratch.join("again"))?
            }
        };
        eprintln!(
            "counts: {} ({}): {} instructions and {} in memset (median {}, most {}, over {} operations, {} left out), {} commands, {:.1} s",
            path.name,
            path.about,
            m.instructions,
            m.memset,
            m.median,
            m.most,
            m.ops,
            m.outliers,
            m.commands.values().sum::<u64>(),
            started.elapsed().as_secs_f64()
        );
        measured.push((path.name, m));
    }
    Ok(measured)
}
