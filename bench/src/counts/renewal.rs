//! The watchdog's renewal of 100 holds: one round, counted on the
//! watchdog's own thread and timer.

use std::time::Duration;

use keyholder::{Client, Lock};

use crate::commands::{self, Calls};
use crate::error::{Res, err};
use crate::measured::one_lane;
use crate::tally::Outcome;

/// The renewal path's watchdog lease: renewed every 400 ms, long enough for
/// a round under callgrind to finish well within a period.
const RENEWAL_LEASE: Duration = Duration::from_millis(1_200);
/// How long the 100 holds are kept: about six rounds.
const RENEWAL_WINDOW: Duration = Duration::from_millis(2_600);
/// Holds renewed per round: one batch (`BATCH` in src/holds/watchdog.rs).
const RENEWED: usize = 100;

/// The watchdog renews on its own thread, on its own timer: the worker
/// takes 100 locks, sleeps through several rounds and lets callgrind count
/// each round (`renew_all`, one dump per round). The rounds that count are
/// those that began after the 100 holds were all registered and ended
/// before the window's end, found by the dump files written meanwhile; the
/// commands are the window's, divided by its rounds (one EVALSHA each).
pub(crate) fn renewal(url: &str, dir: &str) -> Res<Outcome> {
    let client = one_lane(Client::builder(url)).watchdog_timeout(RENEWAL_LEASE).build()?;
    let locks =
        (0..RENEWED).map(|i| client.lock(&format!("counts:renewal:{i}"))).collect::<Result<Vec<_>, _>>()?;
    let guards = locks.iter().map(Lock::lock).collect::<Result<Vec<_>, _>>()?;
    let mut stats = redis::Client::open(url)?.get_connection()?;
    // Every hold listened for (its channel subscribed, its key armed): only
    // renewals from here on. Renewals keep the server busy every 400 ms, so
    // "quiet" is a pause between two of them.
    let last = locks.last().ok_or_else(|| err("no lock"))?;
    commands::until_quiet(&mut stats, last.channel(), true)?;
    let first_dumps = dumps_in(dir)?;
    let before = commands::calls(&mut stats)?;
    std::thread::sleep(RENEWAL_WINDOW);
    // Ended between two rounds too, so that no round is cut in two.
    commands::until_quiet(&mut stats, last.channel(), true)?;
    let ran = commands::between(&before, &commands::calls(&mut stats)?);
    let last_dumps = dumps_in(dir)?;
    for guard in guards {
        guard.unlock()?;
    }
    let rounds = ran.get("evalsha").copied().unwrap_or(0);
    if std::env::var_os("KEYHOLDER_COUNTS_TRACE").is_some() {
        eprintln!("{rounds} renewal rounds: {}", commands::format(&ran));
    }
    if rounds == 0 {
        return Err(err(format!("no renewal round in {RENEWAL_WINDOW:?}")));
    }
    let mut per_round = Calls::new();
    for (name, n) in &ran {
        if n % rounds != 0 {
            return Err(err(format!(
                "{rounds} renewal rounds ran {}: not a whole number of each per round",
                commands::format(&ran)
            )));
        }
        per_round.insert(name.clone(), n / rounds);
    }
    // The round in progress at the first listing may have begun before the
    // window: it is left out.
    let dumps: Vec<usize> = (first_dumps + 2..=last_dumps).collect();
    if dumps.len() < 2 {
        return Err(err(format!("fewer than two whole renewal rounds in {RENEWAL_WINDOW:?}")));
    }
    Ok(Outcome { commands: per_round, dumps, outliers: 0 })
}

/// How many dump files callgrind has written to `dir` (`cg.out.<n>`).
fn dumps_in(dir: &str) -> Res<usize> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("cg.out."))
        .count())
}
