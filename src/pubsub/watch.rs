//! A pub/sub connection of its own that listens to one channel and hands
//! each message to its caller, for the operators' tool (`Client::watch`):
//! not the subscriber, which shares its connection between locks and wakes
//! waiters rather than reporting messages.
//!
//! It subscribes with `SUBSCRIBE`, or `SSUBSCRIBE` for a shard channel (a
//! Redis Cluster with shard channels, where the scripts publish with
//! `SPUBLISH`), and waits for the server's confirmation. Each
//! [`next`](ChannelWatch::next) waits at most its timeout for the first
//! byte of a push; once one has come, the rest of it is read within the
//! command timeout, so a timeout never leaves half a push behind.

use std::io::{self, BufRead, BufReader};
use std::time::{Duration, Instant};

use crate::net::stream::Stream;
use crate::pubsub::resp::{self, Resp};
use crate::pubsub::target::Target;

/// The shortest read timeout set on the socket (zero means none to it).
const MIN_WAIT: Duration = Duration::from_millis(1);

/// One subscribed channel on a connection of its own.
pub(crate) struct ChannelWatch {
    reader: BufReader<Stream>,
    writer: Stream,
    channel: String,
    sharded: bool,
    command_timeout: Duration,
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
    /// A connection failure, or the server's refusal (`PermissionDenied`
    /// for an ACL refusal, `InvalidData` for another error reply, such as
    /// `MOVED`).
    pub(crate) fn open(
        target: &Target,
        channel: &str,
        sharded: bool,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> io::Result<ChannelWatch> {
        let (mut reader, mut writer) = target.open(connect_timeout, command_timeout)?;
        let command: &[u8] = if sharded { b"SSUBSCRIBE" } else { b"SUBSCRIBE" };
        resp::write_command(&mut writer, &[command, channel.as_bytes()])?;
        match resp::read_value(&mut reader)? {
            Resp::Array(Some(items)) if items.first().and_then(Resp::text).is_some_and(is_confirmation) => {}
            Resp::Error(e) if e.starts_with("NOPERM") => {
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, e));
            }
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected reply to {}: {other:?}", String::from_utf8_lossy(command)),
                ));
            }
        }
        Ok(ChannelWatch { reader, writer, channel: channel.to_owned(), sharded, command_timeout })
    }

    /// The next message on the channel, waiting at most `wait`; `None`
    /// when none came in time. Other pushes (confirmations) are skipped.
    ///
    /// # Errors
    ///
    /// The connection failed or closed, or sent something that is not RESP.
    pub(crate) fn next(&mut self, wait: Duration) -> io::Result<Option<Push>> {
        let deadline = Instant::now() + wait;
        loop {
            if self.reader.buffer().is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                self.reader.get_ref().set_read_timeout(Some(left.max(MIN_WAIT)))?;
                match self.reader.fill_buf() {
                    Ok([]) => {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed"));
                    }
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                        if Instant::now() >= deadline {
                            return Ok(None);
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            self.reader.get_ref().set_read_timeout(Some(self.command_timeout))?;
            let value = resp::read_value(&mut self.reader)?;
            if let Some(push) = self.push(value) {
                return Ok(Some(push));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// A push about the watched channel, or `None` for one to skip.
    fn push(&self, value: Resp) -> Option<Push> {
        let Resp::Array(Some(items)) = value else { return None };
        let kind = items.first().and_then(Resp::text)?;
        let channel = items.get(1).and_then(Resp::text)?;
        if channel != self.channel {
            return None;
        }
        match (kind, items.get(2)) {
            ("message" | "smessage", Some(Resp::Bulk(Some(payload)))) => Some(Push::Message(payload.clone())),
            ("sunsubscribe", _) => Some(Push::Dropped),
            _ => None,
        }
    }
}

impl Drop for ChannelWatch {
    fn drop(&mut self) {
        self.writer.shutdown();
    }
}

fn is_confirmation(kind: &str) -> bool {
    kind.eq_ignore_ascii_case("subscribe") || kind.eq_ignore_ascii_case("ssubscribe")
}
