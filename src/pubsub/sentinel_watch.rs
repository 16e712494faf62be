//! Hearing from Sentinel when the master moves: a subscription to
//! `+switch-master` on one sentinel, then the next when it fails.
//!
//! The sentinel says where the master went the moment a failover ends, so
//! the client moves without waiting for a command to fail on the old
//! primary (a demoted one still answers PING). After each subscription the
//! watch asks for the master again (through [`Switches::subscribed`]): a
//! switch may have happened while no sentinel was listened to.
//!
//! It runs on keyholder's own socket and wire (`net/`), as the subscriber does, for
//! one reason: [`SentinelWatch::shut_down`] closes the socket and the
//! reader thread returns at once. Behind redis-rs's `PubSub`, whose socket
//! cannot be reached, dropping a client would wait for the read timeout (3 s
//! by default). A quiet subscription is the usual case: after a command
//! timeout of silence the watch PINGs, and a PING unanswered for another
//! one moves it to the next sentinel.

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use redis::{Msg, PushKind, RedisResult, Value};

use crate::net::commands::write_commands;
use crate::net::stream::Stream;
use crate::pubsub::push::{message_of, payload_of, push_of};
use crate::pubsub::target::{Incoming, Target};

/// What the watch reports (the client follows the primary with it; the
/// watch knows nothing of primaries).
pub(crate) trait Switches: Send + Sync {
    /// Subscribed to sentinel `sentinel` (an index into the watch's
    /// sentinels): ask it where the master is now.
    fn subscribed(&self, sentinel: usize);
    /// The sentinels moved the master to `host:port`.
    fn switched(&self, host: String, port: u16);
}

/// The `+switch-master` subscription of one client.
#[derive(Debug)]
pub(crate) struct SentinelWatch {
    sentinels: Vec<Target>,
    master: String,
    connect_timeout: Duration,
    command_timeout: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The write half of the socket being read; `None` between connections.
    socket: Option<Stream>,
    shutdown: bool,
}

/// Sentinel's channel for finished failovers.
const SWITCH_CHANNEL: &str = "+switch-master";

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl SentinelWatch {
    /// A watch of `master` through `sentinels` (at least one). No I/O.
    pub(crate) fn new(
        sentinels: Vec<Target>,
        master: String,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> SentinelWatch {
        SentinelWatch { sentinels, master, connect_timeout, command_timeout, state: Mutex::default() }
    }

    /// The watch thread: subscribes to sentinel `first`, then to the next
    /// one each time a subscription fails (every sentinel in turn at once,
    /// then backing off from 50 ms to 1 s between rounds), until shut down or
    /// `stop` disconnects.
    pub(crate) fn run(&self, first: usize, stop: &Receiver<()>, switches: &dyn Switches) {
        let count = self.sentinels.len().max(1);
        let mut backoff = FIRST_BACKOFF;
        loop {
            for offset in 0..count {
                let at = (first + offset) % count;
                if self.state.lock().shutdown {
                    return;
                }
                let started = Instant::now();
                if let Err(e) = self.follow(at, switches) {
                    log::debug!("keyholder: sentinel {} subscription ended: {e}", self.describe(at));
                }
                // A subscription that lasted is no reason to back off.
                if started.elapsed() > self.command_timeout {
                    backoff = FIRST_BACKOFF;
                }
            }
            crossbeam_channel::select! {
                recv(stop) -> _ => return,
                default(backoff) => backoff = (backoff * 2).min(MAX_BACKOFF),
            }
        }
    }

    fn describe(&self, at: usize) -> String {
        self.sentinels.get(at).map_or_else(String::new, Target::describe)
    }

    /// One subscription to sentinel `at`, until it fails or the watch is
    /// shut down (`Ok`).
    fn follow(&self, at: usize, switches: &dyn Switches) -> RedisResult<()> {
        let Some(target) = self.sentinels.get(at) else { return Ok(()) };
        let (mut incoming, mut writer) = target.open(self.connect_timeout, self.command_timeout)?;
        write_commands(&mut writer, &[redis::cmd("SUBSCRIBE").arg(SWITCH_CHANNEL).clone()])?;
        if let Value::ServerError(refusal) = incoming.next()? {
            return Err(refusal.into());
        }
        {
            let mut st = self.state.lock();
            if st.shutdown {
                writer.shutdown();
                return Ok(());
            }
            st.socket = Some(writer);
        }
        // Subscribed first, asked second: no switch falls in between.
        switches.subscribed(at);
        let outcome = self.read_switches(&mut incoming, switches);
        let mut st = self.state.lock();
        if let Some(socket) = st.socket.take() {
            socket.shutdown();
        }
        if st.shutdown { Ok(()) } else { outcome }
    }

    /// Reads pushes until the connection fails or stays silent through a
    /// PING (the read timeout, the command timeout, is the silence allowed).
    fn read_switches(&self, incoming: &mut Incoming, switches: &dyn Switches) -> RedisResult<()> {
        let mut ping_outstanding = false;
        loop {
            let value = match incoming.next() {
                Ok(value) => value,
                Err(e) if e.is_timeout() && !ping_outstanding => {
                    let mut st = self.state.lock();
                    let Some(socket) = st.socket.as_mut() else { return Ok(()) };
                    write_commands(socket, &[redis::cmd("PING")])?;
                    ping_outstanding = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            ping_outstanding = false;
            if let Some((host, port)) = switch_of(value, &self.master) {
                log::info!("keyholder: sentinel reports master {} moved to {host}:{port}", self.master);
                switches.switched(host, port);
            }
        }
    }

    /// Stops the watch: closes the socket its thread reads from.
    pub(crate) fn shut_down(&self) {
        let mut st = self.state.lock();
        st.shutdown = true;
        if let Some(socket) = st.socket.take() {
            socket.shutdown();
        }
    }
}

/// The new address in a `+switch-master` message
/// (`<master name> <old ip> <old port> <new ip> <new port>`), if `value` is
/// one about `master`.
fn switch_of(value: Value, master: &str) -> Option<(String, u16)> {
    let push = push_of(value)?;
    if push.kind != PushKind::Message {
        return None;
    }
    switch_in(&message_of(push)?, master)
}

/// The new address in a message on the switch channel about `master`.
fn switch_in(message: &Msg, master: &str) -> Option<(String, u16)> {
    if message.get_channel_name() != SWITCH_CHANNEL {
        return None;
    }
    parse_switch(payload_of(message)?, master)
}

/// The new address in a `+switch-master` payload, if it is about `master`.
fn parse_switch(payload: &str, master: &str) -> Option<(String, u16)> {
    let fields: Vec<&str> = payload.split(' ').collect();
    let [name, _, _, host, port] = fields.as_slice() else { return None };
    if *name != master {
        return None;
    }
    Some(((*host).to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(items: &[&str]) -> Value {
        Value::Array(items.iter().map(|item| Value::BulkString(item.as_bytes().to_vec())).collect())
    }

    #[test]
    fn a_switch_message_names_the_new_address_of_its_master() {
        assert_eq!(
            parse_switch("orders 10.0.0.1 6379 10.0.0.2 6380", "orders"),
            Some(("10.0.0.2".to_owned(), 6380))
        );
        assert_eq!(parse_switch("other 10.0.0.1 6379 10.0.0.2 6380", "orders"), None);
        assert_eq!(parse_switch("orders 10.0.0.1 6379 10.0.0.2", "orders"), None);
        assert_eq!(parse_switch("orders 10.0.0.1 6379 10.0.0.2 port", "orders"), None);
    }

    #[test]
    fn only_messages_on_the_switch_channel_count() {
        let message = |channel: &str| array(&["message", channel, "orders 10.0.0.1 1 10.0.0.2 2"]);
        assert_eq!(switch_of(message(SWITCH_CHANNEL), "orders"), Some(("10.0.0.2".to_owned(), 2)));
        assert_eq!(switch_of(message("+sdown"), "orders"), None);
        assert_eq!(switch_of(array(&["pong", ""]), "orders"), None);
        assert_eq!(switch_of(array(&["subscribe", SWITCH_CHANNEL]), "orders"), None);
    }
}
