//! [`Client::watch`]: a kind's channel as it is published on, heard through
//! the client's own pub/sub connections (`pubsub/`), so that a watch
//! follows what the library's waits follow: a restart of Redis (the
//! subscriber reconnects and resubscribes), a Sentinel failover (it is
//! pointed at the new primary) and, on a Redis Cluster, a slot that moves
//! (the channel is dropped where it was and subscribed again where it
//! went). The watch itself only reports what happened: the messages, and
//! the gaps in which messages may have been lost. There is no reconnect
//! loop here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::layout::{Companions, LockKind};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::pubsub::subscriber::{Grant, Interest, Subscription, Waiters};

/// A message received by an [`UnlockWatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnlockMessage {
    /// The channel it came on.
    pub channel: String,
    /// The message as sent: `0`, `1` or `2` on a lock's channel, a permit
    /// count on a semaphore's, `0` or `1` on a latch's.
    pub payload: String,
    /// The kind whose channel it came on (as the watch was opened for).
    pub kind: LockKind,
}

impl UnlockMessage {
    /// What the message means to waiters, in a few words.
    pub fn meaning(&self) -> &'static str {
        match (self.kind, self.payload.as_str()) {
            (LockKind::ReadWrite, "0") => "unlocked: the last read hold went (Redisson's read unlock)",
            (LockKind::ReadWrite, "1") => {
                "unlocked: a write hold went, or a keyholder writer waits: every waiter may proceed"
            }
            (LockKind::CountDownLatch, "0") => "opened: the count reached zero",
            (LockKind::CountDownLatch, "1") => "the count was set, or the latch deleted",
            (
                LockKind::Semaphore | LockKind::PermitExpirableSemaphore | LockKind::SemaphoreOrLatch,
                payload,
            ) if payload.trim().parse::<i64>().is_ok() => {
                "permits released or added: the number available now (the permits added, for addPermits of a permit-expirable semaphore)"
            }
            (_, "0") => "unlocked: one waiter may proceed",
            (_, "1") => "unlocked: every waiter may proceed (a Redisson read-write lock)",
            (_, "2") => "keyholder hand-over: the next keyholder client was woken",
            _ => "unknown message",
        }
    }
}

/// What an [`UnlockWatch`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchEvent {
    /// A message on the channel.
    Message(UnlockMessage),
    /// The subscription was lost: the connection dropped (Redis restarted
    /// or failed over), or the name's cluster slot moved. The watch follows
    /// on its own, as the library's waits do; messages published until
    /// [`WatchEvent::Resubscribed`] are not heard.
    Interrupted,
    /// Subscribed again after an interruption, on `node`.
    Resubscribed {
        /// The node subscribed on now (`host:port`, or a socket path).
        node: String,
    },
}

/// The messages of one name's channel, as they come; from
/// [`Client::watch`]. It listens on the client's pub/sub connection (on a
/// cluster, the one to the node serving the name), so it follows restarts,
/// failovers and slot moves as the library's waits do. Dropping it
/// unsubscribes (after the subscriber's short linger).
pub struct UnlockWatch {
    client: Client,
    /// The name watched.
    key: String,
    /// The listener's name on the subscriber: the watched name behind a
    /// control character and a serial number.
    name: Arc<str>,
    channel: String,
    kind: LockKind,
    feed: Arc<Feed>,
    incoming: Receiver<Item>,
    subscription: Option<Subscription>,
    /// Told [`WatchEvent::Interrupted`], not yet resubscribed.
    interrupted: bool,
}

impl std::fmt::Debug for UnlockWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnlockWatch")
            .field("channel", &self.channel)
            .field("kind", &self.kind)
            .field("interrupted", &self.interrupted)
            .finish_non_exhaustive()
    }
}

/// What the subscriber hands a watch.
enum Item {
    Message(String),
    /// Something changed: a reconnect, a dropped subscription, a shutdown.
    Changed,
}

/// The watch's listener on the subscriber: an observer, handed every
/// message ([`Waiters::hears_every_message`]).
struct Feed {
    tx: Sender<Item>,
    /// Messages dropped because the watch was not read.
    missed: AtomicU64,
}

/// Messages kept for a watch that is not read; later ones are counted in
/// [`UnlockWatch::missed`].
const BACKLOG: usize = 10_000;

/// Pause between attempts to subscribe again when no node can be reached.
const RETRY: Duration = Duration::from_millis(200);

impl Waiters for Feed {
    fn notify(&self) {
        // One pending change is enough: the watch looks at the state.
        let _ = self.tx.try_send(Item::Changed);
    }

    fn grant(&self, _grant: Grant) {
        self.notify();
    }

    fn message(&self, payload: &str) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(Item::Message(payload.to_owned())) {
            self.missed.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn hears_every_message(&self) -> bool {
        true
    }
}

/// Numbers the watches, so that each listens under a name of its own.
static WATCHES: AtomicU64 = AtomicU64::new(0);

impl Client {
    /// Subscribes to the channel of what sits at `name` (as
    /// [`Client::inspect`] finds it: a lock's unlock channel, a read-write
    /// lock's, a semaphore's, a latch's; the lock's when the name is free)
    /// and returns once the server confirmed: every message published after
    /// that, by keyholder or Redisson, reaches [`UnlockWatch::next_message`].
    /// [`Client::watch_as`] names the kind instead.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a name [`Client::lock`] refuses;
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the
    /// subscription was not confirmed within the command timeout; a Redis
    /// failure of the inspection.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # fn main() -> Result<(), keyholder::Error> {
    /// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut watch = client.watch("orders:42")?;
    /// while let Some(message) = watch.next_message(Duration::from_secs(60))? {
    ///     println!("{}: {}", message.payload, message.meaning());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch(&self, name: &str) -> Result<UnlockWatch> {
        let kind = self.inspect(name)?.kind;
        self.watch_as(name, kind)
    }

    /// Subscribes to the channel `kind` publishes on for `name`, as
    /// [`Client::watch`] does, without looking at the name first (for a
    /// name not created yet, or a [`LockKind::SemaphoreOrLatch`]: the
    /// semaphore's channel, unless [`LockKind::CountDownLatch`] is named).
    ///
    /// # Errors
    ///
    /// As [`Client::watch`].
    pub fn watch_as(&self, name: &str, kind: LockKind) -> Result<UnlockWatch> {
        self.watch_channel(name, Companions::of(name).channel_of(kind).to_owned(), kind)
    }

    /// A watch of `channel`, a channel of `name`'s slot (the election's
    /// announcements, `election.rs`), its messages told as `kind`'s.
    pub(crate) fn watch_channel(&self, name: &str, channel: String, kind: LockKind) -> Result<UnlockWatch> {
        let inner = self.inner();
        inner.check_running()?;
        inner.validate_name(name)?;
        let (tx, incoming) = crossbeam_channel::bounded(BACKLOG);
        let feed = Arc::new(Feed { tx, missed: AtomicU64::new(0) });
        let serial = WATCHES.fetch_add(1, Ordering::Relaxed);
        let mut watch = UnlockWatch {
            client: self.clone(),
            key: name.to_owned(),
            // A control character: no lock's name, so no lock's waiters.
            name: Arc::from(format!("\u{1}watch-{serial}\u{1}{name}")),
            channel,
            kind,
            feed,
            incoming,
            subscription: None,
            interrupted: false,
        };
        let until = Instant::now() + inner.config.command_timeout;
        let subscription = watch.subscribe(until)?;
        if !subscription.wait_confirmed(until) {
            return Err(Error::connect(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the subscription to {} on {} was not confirmed within {:?}",
                    watch.channel,
                    subscription.node(),
                    inner.config.command_timeout
                ),
            ))));
        }
        watch.subscription = Some(subscription);
        Ok(watch)
    }
}

impl UnlockWatch {
    /// Subscribes on the node that serves the channel now.
    fn subscribe(&self, until: Instant) -> Result<Subscription> {
        let waiters: Arc<dyn Waiters> = Arc::<Feed>::clone(&self.feed);
        let interest = Interest {
            name: &self.name,
            channel: &self.channel,
            wake_channel: None,
            waiters: Arc::downgrade(&waiters),
        };
        self.client.inner().subscribers.subscribe(interest, Some(until))
    }

    /// The next message, waiting at most `wait`; `Ok(None)` when none came
    /// in time. Interruptions are followed (see [`WatchEvent`]) and not
    /// reported: use [`UnlockWatch::next_event`] to hear of them.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Shutdown`](crate::ErrorKind::Shutdown) once the client
    /// shut down.
    pub fn next_message(&mut self, wait: Duration) -> Result<Option<UnlockMessage>> {
        let until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.next_event(left)? {
                Some(WatchEvent::Message(message)) => return Ok(Some(message)),
                Some(_) if !left.is_zero() => {}
                _ => return Ok(None),
            }
        }
    }

    /// The next event, waiting at most `wait`: a message, or an
    /// interruption and the resubscription that ends it; `Ok(None)` when
    /// nothing happened in time.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Shutdown`](crate::ErrorKind::Shutdown) once the client
    /// shut down.
    pub fn next_event(&mut self, wait: Duration) -> Result<Option<WatchEvent>> {
        let until = Instant::now() + wait;
        self.client.inner().check_running()?;
        if self.interrupted {
            return self.resume(until);
        }
        match self.incoming.recv_deadline(until) {
            Ok(Item::Message(payload)) => Ok(Some(self.message(payload))),
            Ok(Item::Changed) => {
                self.client.inner().check_running()?;
                // Even when reconnected and confirmed already, messages
                // published in between were not heard: a gap.
                self.interrupted = true;
                Ok(Some(WatchEvent::Interrupted))
            }
            Err(_) => Ok(None),
        }
    }

    fn message(&self, payload: String) -> WatchEvent {
        WatchEvent::Message(UnlockMessage { channel: self.channel.clone(), payload, kind: self.kind })
    }

    /// After an interruption: subscribes again where the channel is served
    /// (a cluster slot that moved drops the subscription), waits for the
    /// confirmation until `until`, and reports it.
    fn resume(&mut self, until: Instant) -> Result<Option<WatchEvent>> {
        loop {
            let live = self.subscription.as_ref().is_some_and(Subscription::is_live);
            if !live {
                self.subscription = None;
                // The slot map learns of a move from the next command about
                // the name (MOVED), and the router then subscribes where the
                // slot went.
                let probe = redis::cmd("EXISTS").arg(&self.key).clone();
                let _ = self
                    .client
                    .inner()
                    .with_live_conn(&self.key, |session| Ok(session.query::<i64>(&probe)?.is_ok()));
                match self.subscribe(until) {
                    Ok(subscription) => self.subscription = Some(subscription),
                    Err(e) if e.kind() == crate::ErrorKind::Shutdown => return Err(e),
                    Err(_) => {}
                }
            }
            if let Some(subscription) = &self.subscription
                && subscription.wait_confirmed(until)
            {
                self.interrupted = false;
                // The changes that led here are told.
                while let Ok(Item::Changed) = self.incoming.try_recv() {}
                return Ok(Some(WatchEvent::Resubscribed { node: subscription.node() }));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            // No node to subscribe on yet (a failover under way): wait for a
            // change, or a little, and look again.
            let pause = until.min(Instant::now() + RETRY);
            if let Ok(Item::Message(payload)) = self.incoming.recv_deadline(pause) {
                self.interrupted = false;
                return Ok(Some(self.message(payload)));
            }
        }
    }

    /// The channel watched.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The kind whose channel is watched.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The node subscribed on (`host:port`, or a socket path).
    pub fn node(&self) -> String {
        self.subscription.as_ref().map(Subscription::node).unwrap_or_default()
    }

    /// Messages dropped because the watch was not read fast enough (it
    /// keeps 10 000).
    pub fn missed(&self) -> u64 {
        self.feed.missed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: LockKind, payload: &str) -> UnlockMessage {
        UnlockMessage { channel: "c".to_owned(), payload: payload.to_owned(), kind }
    }

    #[test]
    fn messages_say_what_they_mean_for_their_kind() {
        assert!(message(LockKind::Reentrant, "0").meaning().contains("one waiter"));
        assert!(message(LockKind::Reentrant, "1").meaning().contains("every waiter"));
        assert!(message(LockKind::Free, "2").meaning().contains("keyholder"));
        assert_eq!(message(LockKind::Reentrant, "x").meaning(), "unknown message");
        assert!(message(LockKind::ReadWrite, "0").meaning().contains("read hold"));
        assert!(message(LockKind::ReadWrite, "1").meaning().contains("write hold"));
        assert!(message(LockKind::CountDownLatch, "0").meaning().contains("opened"));
        assert!(message(LockKind::Semaphore, "3").meaning().contains("permits"));
    }
}
