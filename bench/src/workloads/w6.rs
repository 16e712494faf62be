//! W6: many processes, as a service scaled out to many pods would run: N
//! clients of one thread each on one lock. Each client is a `Client` of its
//! own in this process (its own command connections, pub/sub connection and client id), as
//! a separate process would have.

use crate::env::Env;
use crate::error::Res;

use super::contended::{Shape, contended};

pub(crate) fn w6(env: &Env, stats: &mut redis::Connection) -> Res<()> {
    let c = &env.cfg;
    for &clients in &c.w6_clients {
        let shape = Shape { threads: clients, per_thread: (c.w6_acquisitions / clients).max(3) };
        let title = format!(
            "W6: {clients} clients of 1 thread each, 1 lock, {} acquisitions each, hold {:?} with a \
             GET-then-SET counter (targets: <= 3 round trips/acq, >= the baseline's throughput and >= 0.9x \
             ideal, max wait <= 50 ms with 8 clients and growing no faster than the waiters ahead)",
            shape.per_thread, c.hold
        );
        contended(env, stats, "W6", shape, clients, &title)?;
    }
    Ok(())
}
