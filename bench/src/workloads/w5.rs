//! W5: reentrancy, a depth-3 nested acquire then release, one thread. The
//! baseline is not reentrant (its second `SET NX` fails and it would wait
//! on itself until its own lease expires), so only the floor and keyholder
//! run it.

use crate::env::Env;
use crate::error::Res;
use crate::lock_impl::{Floor, Keyholder, LockImpl, Session};
use crate::report::print_table;

use super::loops::{LOOP_COLUMNS, Loop, loop_header, loop_row, measure_loop};

pub(crate) fn w5(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let n = env.cfg.w5_iters;
    let key = env.key("w5");
    let (floor, keyholder) = (Floor::new(env), Keyholder::new(env, 1, None)?);
    let (mut floor_session, mut kh_session) = (floor.session(1)?, keyholder.session(0)?);
    let (mut floor_runs, mut kh_runs) = (Vec::new(), Vec::new());
    for run in 1..=env.cfg.runs {
        eprintln!("W5 run {run}/{}", env.cfg.runs);
        let mut f = nested(stats, n, &floor, &mut floor_session, &key)?;
        let mut k = nested(stats, n, &keyholder, &mut kh_session, &key)?;
        k.vs_floor = k.rate / f.rate;
        f.vs_floor = 1.0;
        floor_runs.push(f);
        kh_runs.push(k);
    }
    drop((floor_session, kh_session));
    drop(keyholder);
    let mut na = vec!["baseline".to_owned()];
    na.extend(std::iter::repeat_n("n/a".to_owned(), LOOP_COLUMNS));
    print_table(
        &format!("W5: reentrancy, depth-3 nested acquire then release, 1 thread, {n} iterations"),
        &loop_header("iter", "iterations/s", None),
        &[loop_row("floor (6 script calls)", &floor_runs, None), na, loop_row("keyholder", &kh_runs, None)],
        &["baseline: n/a: SET NX is not reentrant; the holder's second SET NX fails and it would wait on \
           itself until its own 30 s lease expires."
            .to_owned()],
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
