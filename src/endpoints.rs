//! Where a client's connections go, and the checks `build()` makes before
//! it hands out locks: a URL's server, the primary the sentinels name, or a
//! cluster's nodes (made from one template, with the builder's TLS
//! settings); a URL refused with an error that says why; the subscription
//! check every waiter's channels need.
//! No client state: `nodes.rs` resolves the settings into nodes and makes
//! the checks, `wiring.rs` makes a new client's connections from them,
//! `client.rs` assembles the client from what it makes, and
//! `background.rs` holds the client's threads. The children import one
//! another, never this file, which only re-exports.

mod background;
mod nodes;
mod wiring;

pub(crate) use background::Background;
pub(crate) use wiring::{BackgroundSignals, Connections, Wired, cluster_connections, primary_connections};
