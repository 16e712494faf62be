//! A pub/sub connection of its own that listens to one channel and hands
//! each message to its caller, for the operators' tool (`Client::watch`):
//! not the subscriber, which shares its connection between locks and wakes
//! waiters rather than reporting messages.
//!
//! It subscribes with `SUBSCRIBE`, or `SSUBSCRIBE` for a shard channel (a
//! Redis Cluster with shard channels, where the scripts publish with
//! `SPUBLISH`), and waits for the server's confirmation. Each
//! [`next`](ChannelWatch::next) waits at most its timeout; a push still
//! arriving when it ends is finished by the next call (the reader keeps
//! what came).

use std::io;
use std::time::{Duration, Instant};

use redis::{PushKind, RedisResult, Value};

use crate::net::commands::write_commands;
use crate::net::stream::Stream;
use crate::pubsub::push::{channel_of, message_of, push_of};
use crate::pubsub::target::{Incoming, Target};

/// The shortest read timeout set on the socket (zero means none to it).
const MIN_WAIT: Duration = Duration::from_millis(1);

/// One subscribed channel on a connection of its own.
pub(crate) struct ChannelWatch {
    incoming: Incoming,
    writer: Stream,
    channel: String,
    sharded: bool,
}

impl std::fmt::Debug for ChannelWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelWatch")
            .field("channel", &self.channel)
            .field("sharded", &self.sharded)
            .finish_non_exhaustive()
    }
}

/// What the server pushed on a watched connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Push {
    /// A message on the watched channel.
    Message(Vec<u8>),
    /// The server dropped the subscription: the channel's slot moved to
    /// another node (shard channels only).
    Dropped,
}

impl ChannelWatch {
    /// Connects to `target`, subscribes to `channel` and waits for the
    /// confirmation, each step within the timeouts.
    ///
    /// # Errors
    ///
    /// A connection failure, or the server's refusal: its error reply
    /// (`NOPERM` for an ACL refusal, `MOVED`...), or an `InvalidData` I/O
    /// error for another reply than a confirmation.
    pub(crate) fn open(
        target: &Target,
        channel: &str,
        sharded: bool,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> RedisResult<ChannelWatch> {
        let (mut incoming, mut writer) = target.open(connect_timeout, command_timeout)?;
        let verb = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
        write_commands(&mut writer, &[redis::cmd(verb).arg(channel).clone()])?;
        match incoming.next()? {
            Value::ServerError(refusal) => return Err(refusal.into()),
            reply => match push_of(reply) {
                Some(push) if matches!(push.kind, PushKind::Subscribe | PushKind::SSubscribe) => {}
                other => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("unexpected reply to {verb}: {other:?}"),
                    )
                    .into());
                }
            },
        }
        Ok(ChannelWatch { incoming, writer, channel: channel.to_owned(), sharded })
    }

    /// The next message on the channel, waiting at most `wait`; `None`
    /// when none came in time. Other pushes (confirmations) are skipped.
    ///
    /// # Errors
    ///
    /// The connection failed or closed, or sent something that is not RESP.
    pub(crate) fn next(&mut self, wait: Duration) -> RedisResult<Option<Push>> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            self.incoming.set_read_timeout(left.max(MIN_WAIT))?;
            match self.incoming.next() {
                Ok(value) => {
                    if let Some(push) = self.push(value) {
                        return Ok(Some(push));
                    }
                }
                Err(e) if e.is_timeout() => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// A push about the watched channel, or `None` for one to skip.
    fn push(&self, value: Value) -> Option<Push> {
        let push = push_of(value)?;
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let message = message_of(push)?;
                (message.get_channel_name() == self.channel)
                    .then(|| Push::Message(message.get_payload_bytes().to_vec()))
            }
            PushKind::SUnsubscribe if channel_of(&push) == Some(self.channel.as_str()) => Some(Push::Dropped),
            _ => None,
        }
    }
}

impl Drop for ChannelWatch {
    fn drop(&mut self) {
        self.writer.shutdown();
    }
}
