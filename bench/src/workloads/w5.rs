//! W5: reentrancy, a depth-3 nested acquire then release, one thread. The
//! baseline is not reentrant (its second `SET NX` fails and it would wait
//! on itself until its own lease expires), so only the two floors and
//! keyholder run it.

use crate::env::Env;
use crate::error::{Res, err};
use crate::lock_impl::{Keyholder, LockImpl, MinimalFloor, ScriptFloor, Session};
use crate::report::print_table;

use super::loops::{LOOP_COLUMNS, Loop, floor_gap, loop_header, loop_row, measure_loop};

pub(crate) fn w5(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let n = env.cfg.w5_iters;
    let key = env.key("w5");
    let (minimal, scripts, keyholder) =
        (MinimalFloor::new(env), ScriptFloor::new(env), Keyholder::new(env, 1, None)?);
    let mut sessions = (minimal.session(1)?, scripts.session(1)?, keyholder.session(0)?);
    let mut runs: [Vec<Loop>; 3] = Default::default();
    for run in 1..=env.cfg.runs {
        eprintln!("W5 run {run}/{}", env.cfg.runs);
        // Each run starts with another of the three.
        let mut this: [Option<Loop>; 3] = Default::default();
        for turn in 0..3 {
            let which = (run + turn) % 3;
            this[which] = Some(match which {
                0 => nested(stats, n, &minimal, &mut sessions.0, &key)?,
                1 => nested(stats, n, &scripts, &mut sessions.1, &key)?,
                _ => nested(stats, n, &keyholder, &mut sessions.2, &key)?,
            });
        }
        let [Some(m), Some(s), Some(k)] = this else {
            return Err(err("W5: an implementation's turn was skipped"));
        };
        let floor = m.rate;
        for (all, mut one) in runs.iter_mut().zip([m, s, k]) {
            one.vs_floor = one.rate / floor;
            all.push(one);
        }
    }
    drop(sessions);
    drop(keyholder);
    let [m, s, k] = runs;
    let mut na = vec!["baseline".to_owned()];
    na.extend(std::iter::repeat_n("n/a".to_owned(), LOOP_COLUMNS));
    print_table(
        &format!(
            "W5: reentrancy, depth-3 nested acquire then release, 1 thread, {n} iterations (target: keyholder \
             >= 0.9x the minimal floor)"
        ),
        &loop_header("iter", "iterations/s", None),
        &[
            loop_row("minimal floor (6 script calls)", &m, None),
            loop_row("keyholder scripts (6 script calls)", &s, None),
            na,
            loop_row("keyholder", &k, None),
        ],
        &[
            "vs floor = median over runs of (iterations/s ÷ the same run's minimal floor iterations/s), in \
             brackets the worst run's; the \
             three take turns, each run starting with another. baseline: n/a: SET NX is not reentrant; the \
             holder's second SET NX fails and it would wait on itself until its own 30 s lease expires."
                .to_owned(),
            floor_gap("iteration", &m, &s, &k),
        ],
    );
    Ok(())
}

/// `n` iterations of: acquire `key` three times, release three times.
fn nested<I: LockImpl>(
    stats: &mut redis::Connection,
    n: usize,
    imp: &I,
    session: &mut I::Session,
    key: &str,
) -> Res<Loop> {
    measure_loop(stats, n, 0, imp.script_commands(), |_| {
        let outer = session.acquire(key)?;
        let middle = session.acquire(key)?;
        let inner = session.acquire(key)?;
        session.release(inner)?;
        session.release(middle)?;
        session.release(outer)
    })
}
