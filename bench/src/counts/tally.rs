//! Each operation's Redis commands, counted in a window around its call,
//! and the choice of the operations that count: those that took the path
//! most took.

use crate::commands::{self, Calls};
use crate::error::{Res, err};

/// Each operation's commands, with the number of its callgrind dump.
pub(crate) struct Tally {
    pub(crate) stats: redis::Connection,
    /// Operations of the warm-up, not kept.
    warm: usize,
    before: Calls,
    calls: usize,
    ran: Vec<(usize, Calls)>,
}

impl Tally {
    pub(crate) fn new(url: &str, warm: usize) -> Res<Tally> {
        let stats = redis::Client::open(url)?.get_connection()?;
        Ok(Tally { stats, warm, before: Calls::new(), calls: 0, ran: Vec::new() })
    }

    /// Opens an operation's window.
    pub(crate) fn start(&mut self) -> Res<()> {
        self.before = commands::calls(&mut self.stats)?;
        Ok(())
    }

    /// Closes it; the warm-up's are not kept.
    pub(crate) fn end(&mut self) -> Res<()> {
        let ran = commands::between(&self.before, &commands::calls(&mut self.stats)?);
        self.calls += 1;
        if std::env::var_os("KEYHOLDER_COUNTS_TRACE").is_some() {
            eprintln!("operation {}: {}", self.calls, commands::format(&ran));
        }
        if self.calls > self.warm {
            self.ran.push((self.calls, ran));
        }
        Ok(())
    }

    /// The commands most operations ran, and those operations' dumps. An
    /// operation that ran others took another path, which only timing can
    /// cause here (a hold that grew older than `LISTEN_AFTER` on a loaded
    /// machine is listened for): it is left out, and counted as an outlier;
    /// if most did, the path is not deterministic and the run fails.
    pub(crate) fn outcome(self) -> Res<Outcome> {
        let mut modes: Vec<(&Calls, usize)> = Vec::new();
        for (_, ran) in &self.ran {
            match modes.iter_mut().find(|(calls, _)| *calls == ran) {
                Some((_, n)) => *n += 1,
                None => modes.push((ran, 1)),
            }
        }
        let Some(&(commands, n)) = modes.iter().max_by_key(|(_, n)| *n) else {
            return Err(err("no operation was measured"));
        };
        if n * 2 <= self.ran.len() {
            let seen: Vec<String> =
                modes.iter().map(|(c, n)| format!("{n}x {}", commands::format(c))).collect();
            return Err(err(format!("no path taken by most operations: {}", seen.join("; "))));
        }
        let dumps = self.ran.iter().filter(|(_, ran)| ran == commands).map(|(dump, _)| *dump).collect();
        Ok(Outcome { commands: commands.clone(), dumps, outliers: self.ran.len() - n })
    }
}

/// What a worker reports: the commands of one operation, which of
/// callgrind's dump files (numbered from 1 in the order of the calls) are
/// the operations that count, and how many operations were left out for
/// taking another path.
pub(crate) struct Outcome {
    pub(crate) commands: Calls,
    pub(crate) dumps: Vec<usize>,
    pub(crate) outliers: usize,
}
