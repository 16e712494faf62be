//! W2: 8 threads, one lock, 1 ms holds, back to back; in one client, then
//! spread over `--w2-clients` clients.

use crate::env::Env;
use crate::error::Res;

use super::contended::{Shape, contended};

pub(crate) fn w2(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    let shape = Shape { threads: c.w2_threads, per_thread: c.w2_per_thread };
    for clients in [1, c.w2_clients] {
        let spread = if clients == 1 {
            format!("{} threads in 1 client", c.w2_threads)
        } else {
            format!("{} threads over {clients} clients", c.w2_threads)
        };
        let title = format!(
            "W2: {spread}, 1 lock, {} acquisitions each, hold {:?} with a GET-then-SET counter \
             (targets: >= 0.9x ideal, max wait <= 50 ms, 0 lost updates, <= 3 round trips/acq)",
            c.w2_per_thread, c.hold
        );
        contended(env, stats, "W2", shape, clients, &title)?;
    }
    Ok(())
}
