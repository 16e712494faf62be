//! The client's one pub/sub connection, shared by every waiting thread.
//!
//! Waiters subscribe to a lock's unlock channel through [`Subscriber::subscribe`],
//! which reference-counts channels: the first waiter on a name sends SUBSCRIBE;
//! when the last one leaves, the channel lingers for [`LINGER`] and is then
//! unsubscribed, so that waiters coming and going in quick succession (a busy
//! lock) do not pay a SUBSCRIBE and an UNSUBSCRIBE each. SUBSCRIBE is written by the waiting
//! thread itself, on a clone of the socket, so a subscription costs one round
//! trip and never waits for the reader thread.
//!
//! One reader thread decodes what Redis pushes: subscription confirmations
//! (which release the subscribing waiter) and unlock messages (which wake the
//! lock's waiting thread). When the connection fails, or stays silent through
//! a PING, the reader reconnects, resubscribes every channel in use and wakes
//! every waiter, since messages published meanwhile were lost. Waiters never
//! depend on a message alone: every wait is bounded by the holder's lease.
//!
//! The connection is probed with PING after silence whether or not anything
//! is subscribed ([`Subscriber::new`] says after how long): a NAT or a load
//! balancer that forgets idle flows must never be given one to forget, or
//! the first waiter after an idle period would subscribe on a dead flow and
//! hear nothing for a command timeout (issue 35). A waiter about to
//! subscribe on a connection silent for longer than the idle timeout (the
//! probes could not run: a suspended process) has it replaced first, as the
//! command connections are.
//!
//! The lingering channels are timed out by a thread of their own, the
//! linger timer, started and stopped with the reader: it sleeps until the
//! oldest lingering channel is due and writes the UNSUBSCRIBE itself. (The
//! reader, blocked in `recv`, cannot be hurried: Linux reads a socket's
//! read timeout when `recv` starts, so shortening it meanwhile did nothing,
//! and channels lingered for up to a command timeout.)
//!
//! When the primary moves (a Sentinel failover), [`Subscriber::retarget`]
//! points the subscriber at the new one and drops the old connection: the
//! reader reconnects there at once, with the same consequences.
//!
//! The same connection listens, for the client's [`Holders`], on the
//! unlock channels of locks the client holds ([`Subscriber::hold_channels`],
//! many channels per SUBSCRIBE, no waiting for the confirmation): every
//! message on such a channel, and every confirmation of its subscription
//! (the first one, and each after a reconnect, when messages may have been
//! missed), is told to them, so that they can check their holds.
//!
//! It also receives the removal alarms of the node's tracking connection
//! (`tracking.rs`): on each connection it first sends `CLIENT ID` and
//! subscribes to `__redis__:invalidate`, whose confirmation makes it the
//! redirect, and hands every invalidation to the [`Holders`].

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use redis::{PushKind, RedisResult, Value};

use crate::error::{Error, Result};
use crate::names;
use crate::net::commands::write_commands;
use crate::net::stream::Stream;
use crate::pubsub::push::{channel_of, message_of, payload_of, push_of};
use crate::pubsub::target::{Incoming, Target};
use crate::pubsub::tracking::{self, INVALIDATE_CHANNEL, Tracking};

mod channel;
mod grant;
mod probes;
mod subscription;

use channel::{Channel, Kind, Listener};
pub(crate) use grant::Grant;
use grant::parse_grant;
use probes::Probes;
pub(crate) use probes::longest_idle_silence;
pub(crate) use subscription::Subscription;

/// What a subscription wakes: the waiting threads of one lock name in this
/// client (the lock's local entry implements it; the subscriber knows
/// nothing else of it).
pub(crate) trait Waiters: Send + Sync {
    /// An unlock message arrived (or the connection was replaced): the
    /// waiting thread should look again.
    fn notify(&self);
    /// This client's turn came with the lock handed over to `grant.owner`.
    fn grant(&self, grant: Grant);
    /// A message on another kind's channel (an [`Interest`] without a wake
    /// channel), with its payload: the waiters decide whom it wakes (a
    /// semaphore's count wakes at most that many threads).
    fn message(&self, payload: &str);
    /// True for an observer (the operators' watch, `admin/watch.rs`) rather
    /// than a waiter: it is handed every message on its channel with
    /// [`Waiters::message`], whatever the channel carries, and a channel it
    /// subscribes alone takes its kind from the first real waiter.
    fn hears_every_message(&self) -> bool {
        false
    }
}

/// What a held lock's channel tells: the client's holds of the lock may be
/// gone, and are worth checking (see `holds/foreign.rs`). Called on the
/// reader thread, without the subscriber's lock held: it must not block.
pub(crate) trait Holders: Send + Sync {
    /// A message arrived on `channel`, or its subscription was confirmed
    /// (anything may have been published before).
    fn heard(&self, channel: &str);
    /// `channel` is no longer subscribed here (its cluster slot moved): ask
    /// again with [`Subscriber::hold_channels`], through the router.
    fn dropped(&self, channel: &str);
    /// Keys armed through [`Subscriber::tracking`] were modified (`None`:
    /// every key, a `FLUSHDB`), see `pubsub/tracking.rs`.
    fn invalidated(&self, keys: Option<&[String]>);
    /// Invalidations come to a new pub/sub connection: keys armed before
    /// are not tracked for it, and are worth arming again.
    fn retrack(&self);
    /// True while the client has holds whose removal alarms (invalidations)
    /// come to this connection: the reader then probes a silent connection
    /// as promptly as one with channels subscribed.
    fn holding(&self) -> bool {
        false
    }
}

/// What a waiter subscribes for: a lock name, its channels, and whom to
/// wake.
pub(crate) struct Interest<'a> {
    pub(crate) name: &'a Arc<str>,
    /// The channel whose messages wake the waiters (Redisson's unlock
    /// channel, or a kind's own).
    pub(crate) channel: &'a str,
    /// This client's wake channel for the lock, whose messages carry
    /// grants (the reentrant lock's). Without one (the other kinds), every
    /// message on `channel` goes to the waiters with its payload
    /// ([`Waiters::message`]): a permit count, a latch's `0`, a read-write
    /// lock's release.
    pub(crate) wake_channel: Option<&'a str>,
    pub(crate) waiters: Weak<dyn Waiters>,
}

impl Interest<'_> {
    /// The channels to subscribe, and what each carries.
    fn channels(&self) -> impl Iterator<Item = (&str, Kind)> {
        let (first, wake) = match self.wake_channel {
            Some(wake) => ((self.channel, Kind::Unlock), Some((wake, Kind::Wake))),
            None => ((self.channel, Kind::Any), None),
        };
        std::iter::once(first).chain(wake)
    }
}

pub(crate) struct Subscriber {
    /// Where to connect; replaced when the primary moves.
    target: Mutex<Target>,
    /// Counts [`Subscriber::retarget`] calls, so that a connection opened
    /// to the previous target is not used.
    target_epoch: AtomicU64,
    /// Cuts a reconnect back-off short after a retarget.
    retargeted: (Sender<()>, Receiver<()>),
    connect_timeout: Duration,
    command_timeout: Duration,
    /// The command connections' idle timeout: a connection silent for
    /// longer is not subscribed on (see [`Subscriber::subscribe`]).
    idle_timeout: Option<Duration>,
    /// After how much silence the reader PINGs: with channels subscribed
    /// and without (see [`Subscriber::new`]).
    probe_subscribed: Duration,
    probe_idle: Option<Duration>,
    /// The reader's read timeout: how often, at most, it looks at the
    /// silence (a fixed one, set before its first read of a connection).
    read_timeout: Duration,
    /// When the reader last heard from the server, in milliseconds since
    /// `epoch`: what a subscribing waiter reads to tell a connection silent
    /// for too long.
    heard_ms: AtomicU64,
    epoch: Instant,
    state: Mutex<State>,
    confirmed: Condvar,
    /// Wakes the linger timer: a first channel lingers, or the reader stopped.
    linger_due: Condvar,
    /// Told when the connection was replaced (see [`Subscriber::new`]).
    reconnected: Sender<()>,
    /// Called when connecting failed, before the back-off (see
    /// [`Subscriber::on_unreachable`]).
    unreachable: OnceLock<UnreachableHook>,
    /// Told what happens on held locks' channels (see [`Holders`]); weak,
    /// since what it keeps (the locks' local state) keeps subscriptions.
    holders: OnceLock<Weak<dyn Holders>>,
    /// The removal alarms redirected to this connection.
    tracking: Tracking,
}

/// What the client does when the target cannot be reached.
type UnreachableHook = Box<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber").field("target", &self.target.lock().describe()).finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// The socket's write side; `None` while disconnected.
    writer: Option<Stream>,
    channels: foldhash::HashMap<String, Channel>,
    /// SUBSCRIBE confirmations still expected on the current connection.
    acks_pending: HashMap<String, u32>,
    /// Unsubscriptions sent and not yet confirmed, so that a confirmation
    /// is told apart from a sharded channel the server dropped.
    unsubscribes_pending: HashMap<String, u32>,
    /// Channels that started to linger, oldest first, with when: expired
    /// from the front, so that the linger timer walks no other channel
    /// (thousands, when the client holds thousands of locks). An entry
    /// whose channel was taken back meanwhile is dropped when reached.
    lingering: VecDeque<(Instant, String)>,
    /// The linger timer sleeps with no deadline (nothing lingered): a
    /// channel that starts lingering must wake it.
    timer_idle: bool,
    /// The reader returned: the linger timer stops too.
    reader_gone: bool,
    /// Shard channels (Redis Cluster, Redis 7+): `SSUBSCRIBE`.
    sharded: bool,
    /// The reader has tried to connect at least once (see
    /// [`Subscriber::wait_first_attempt`]).
    attempted: bool,
    shutdown: bool,
}

impl State {
    /// Writes a command; a failed write drops the connection for the reader
    /// to notice and replace.
    fn send(&mut self, command: &redis::Cmd) {
        if let Some(writer) = self.writer.as_mut()
            && write_commands(writer, std::slice::from_ref(command)).is_err()
        {
            writer.shutdown();
            self.writer = None;
        }
    }

    fn send_subscribe(&mut self, channels: &[String]) {
        let verb = if self.sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
        self.send_counted(verb, channels, |st| &mut st.acks_pending);
    }

    fn send_unsubscribe(&mut self, channels: &[String]) {
        let verb = if self.sharded { "SUNSUBSCRIBE" } else { "UNSUBSCRIBE" };
        self.send_counted(verb, channels, |st| &mut st.unsubscribes_pending);
    }

    /// Writes `verb channels...` and counts each channel's confirmation
    /// still to come in the map `pending` picks. A reentrant lock's unlock
    /// channel takes its listening channel along in the same command (see
    /// `names::listening_channel`), so that no script ever sees one
    /// subscribed without the other; the companions' confirmations are
    /// not waited for.
    fn send_counted(
        &mut self,
        verb: &str,
        channels: &[String],
        pending: impl Fn(&mut State) -> &mut HashMap<String, u32>,
    ) {
        if self.writer.is_none() || channels.is_empty() {
            return;
        }
        let mut command = redis::cmd(verb);
        for channel in channels {
            *pending(self).entry(channel.clone()).or_insert(0) += 1;
            command.arg(channel);
            if let Some(companion) = names::listening_companion(channel) {
                command.arg(companion);
            }
        }
        self.send(&command);
    }

    /// Drops the channels `moved` names (their slot moved to another node)
    /// and returns their waiters, to be woken: they subscribe again, where
    /// the slot is now.
    fn evict(&mut self, moved: impl Fn(&str) -> bool) -> Evicted {
        let names: Vec<String> = self.channels.keys().filter(|name| moved(name)).cloned().collect();
        let mut evicted = Evicted::default();
        for name in names {
            if let Some(channel) = self.channels.remove(&name) {
                evicted.waiters.extend(channel.waiters());
                if channel.held {
                    evicted.held.push(name.clone());
                }
            }
            self.acks_pending.remove(&name);
        }
        // Not unsubscribed: the node no longer serves the slot (it would
        // answer MOVED), and drops the channel itself when it loses it.
        evicted
    }

    fn is_confirmed(&self, channel: &str) -> bool {
        self.writer.is_some() && !self.acks_pending.contains_key(channel)
    }

    fn waiters(&self) -> Vec<Arc<dyn Waiters>> {
        self.channels.values().flat_map(Channel::waiters).collect()
    }

    /// Unsubscribes channels that have lingered unused for [`LINGER`].
    fn expire_lingering(&mut self, now: Instant) {
        let mut expired: Vec<String> = Vec::new();
        while let Some((since, _)) = self.lingering.front() {
            if now.saturating_duration_since(*since) < LINGER {
                break;
            }
            let Some((_, name)) = self.lingering.pop_front() else { break };
            let idle = self
                .channels
                .get(&name)
                .is_some_and(|c| c.idle_since.is_some_and(|t| now.saturating_duration_since(t) >= LINGER));
            if idle {
                self.channels.remove(&name);
                expired.push(name);
            }
        }
        self.send_unsubscribe(&expired);
    }

    /// Marks `name` (no longer in use) as lingering from `now`; true when
    /// the linger timer must be woken to time it (it sleeps with no
    /// deadline: nothing lingered).
    fn start_lingering(&mut self, name: &str, now: Instant) -> bool {
        let Some(channel) = self.channels.get_mut(name) else { return false };
        channel.idle_since = Some(now);
        self.lingering.push_back((now, name.to_owned()));
        std::mem::take(&mut self.timer_idle)
    }
}

/// What [`State::evict`] dropped: the waiters to wake, the held locks'
/// channels to subscribe again where their slot went.
#[derive(Default)]
struct Evicted {
    waiters: Vec<Arc<dyn Waiters>>,
    held: Vec<String>,
}

/// How long an unused channel stays subscribed.
pub(crate) const LINGER: Duration = Duration::from_millis(100);

/// What the linger timer may add to [`LINGER`] before the UNSUBSCRIBE
/// reaches the server: its own wake-up on a loaded machine, the write, the
/// server's turn. A client tells the scripts it listens this much longer
/// than its linger (see [`Subscriber::listening_for`]), so that it is never
/// taken for a Redisson waiter while its UNSUBSCRIBE is on its way.
pub(crate) const LINGER_SLACK: Duration = Duration::from_millis(20);

/// The linger timer wakes at most once per this while channels keep
/// starting to linger (a busy lock's each contended acquisition): the
/// channels due meanwhile go in one UNSUBSCRIBE.
const LINGER_TICK: Duration = Duration::from_millis(10);

/// Channels per SUBSCRIBE sent for held locks.
pub(crate) const HOLD_SUBSCRIBE_BATCH: usize = 500;

const FIRST_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

impl Subscriber {
    /// `reconnected` hears (without blocking) each time the connection was
    /// replaced: Redis may have restarted or failed over, and holds are
    /// worth checking at once.
    ///
    /// `sharded`: subscribe with `SSUBSCRIBE` (shard channels, on the Redis
    /// Cluster node that serves their slot; Redis 7 and newer).
    ///
    /// `idle_timeout` (the command connections'): the connection is probed
    /// with PING after half of it of silence, subscribed or not (the reader
    /// looks every quarter of it, or every command timeout if sooner), so
    /// that a healthy connection is never silent for longer than the
    /// command connections may be idle (below the cloud NATs' cut-offs
    /// with the default 3 min); while channels are subscribed or the client
    /// holds locks (their removal alarms come here, see [`Holders::holding`]),
    /// after a command timeout of silence if that comes first. A PING
    /// unanswered for a command timeout replaces the connection. `None`:
    /// probed only while channels are subscribed or locks held, after a
    /// command timeout of silence.
    pub(crate) fn new(
        target: Target,
        connect_timeout: Duration,
        command_timeout: Duration,
        idle_timeout: Option<Duration>,
        reconnected: Sender<()>,
        sharded: bool,
    ) -> Self {
        let Probes { subscribed: probe_subscribed, idle: probe_idle, read_timeout } =
            Probes::of(command_timeout, idle_timeout);
        Subscriber {
            target: Mutex::new(target),
            target_epoch: AtomicU64::new(0),
            retargeted: crossbeam_channel::bounded(1),
            connect_timeout,
            command_timeout,
            idle_timeout,
            probe_subscribed,
            probe_idle,
            read_timeout,
            heard_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            state: Mutex::new(State { sharded, ..State::default() }),
            confirmed: Condvar::new(),
            linger_due: Condvar::new(),
            reconnected,
            unreachable: OnceLock::new(),
            holders: OnceLock::new(),
            tracking: Tracking::new(connect_timeout, command_timeout),
        }
    }

    /// The tracking connection whose invalidations come here.
    pub(crate) fn tracking(&self) -> &Tracking {
        &self.tracking
    }

    /// Sets whom to tell what happens on held locks' channels. Set once.
    pub(crate) fn set_holders(&self, holders: &Arc<dyn Holders>) {
        let _ = self.holders.set(Arc::downgrade(holders));
    }

    fn holders(&self) -> Option<Arc<dyn Holders>> {
        self.holders.get().and_then(Weak::upgrade)
    }

    /// Listens on `channels` for the client's holds: one SUBSCRIBE per
    /// [`HOLD_SUBSCRIBE_BATCH`] channels not subscribed yet, sent without
    /// waiting for the confirmation, which [`Holders::heard`] reports.
    /// Returns the channels that were subscribed and confirmed already (a
    /// waiter's, or still lingering): no confirmation will come for them.
    pub(crate) fn hold_channels(&self, channels: &[Arc<str>]) -> Vec<Arc<str>> {
        let mut st = self.state.lock();
        let mut created = Vec::new();
        let mut confirmed = Vec::new();
        for name in channels {
            match st.channels.get_mut(&**name) {
                Some(channel) => {
                    channel.held = true;
                    channel.idle_since = None;
                    if st.is_confirmed(name) {
                        confirmed.push(Arc::clone(name));
                    }
                }
                None => {
                    let channel = Channel {
                        kind: Kind::Held,
                        listeners: Vec::new(),
                        held: true,
                        idle_since: None,
                        paired: false,
                    };
                    st.channels.insert(name.to_string(), channel);
                    created.push(name.to_string());
                }
            }
        }
        for batch in created.chunks(HOLD_SUBSCRIBE_BATCH) {
            st.send_subscribe(batch);
        }
        confirmed
    }

    /// Stops listening on `channels` for the client's holds; those no
    /// waiter uses linger (see [`LINGER`]) and are then unsubscribed, many
    /// per UNSUBSCRIBE.
    pub(crate) fn unhold_channels(&self, channels: &[Arc<str>]) {
        let mut st = self.state.lock();
        let mut wake_timer = false;
        let now = Instant::now();
        for name in channels {
            if let Some(channel) = st.channels.get_mut(&**name) {
                channel.held = false;
                if !channel.in_use() {
                    wake_timer |= st.start_lingering(name, now);
                }
            }
        }
        drop(st);
        if wake_timer {
            self.linger_due.notify_one();
        }
    }

    /// Sets the hook called each time connecting fails, before the reader
    /// backs off: through Sentinel the client asks where the primary is now,
    /// and a move retargets the subscriber at once. Set once.
    pub(crate) fn on_unreachable(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.unreachable.set(Box::new(hook));
    }

    /// Subscribes `entry`'s unlock and wake channels for the calling waiter
    /// (one SUBSCRIBE for those not subscribed yet) and waits (at most the
    /// command timeout, and not past `deadline`) until Redis confirms them.
    /// An unconfirmed subscription is still returned: it will be made on
    /// reconnect, and the waiter's lease-bounded wait covers the gap.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        interest: Interest<'_>,
        deadline: Option<Instant>,
    ) -> Result<Subscription> {
        let mut st = self.state.lock();
        if st.shutdown {
            return Err(Error::shutdown());
        }
        let (subscription, created) = self.register(&mut st, interest);
        if !created.is_empty() && self.silent_too_long() {
            // Nothing heard for longer than a command connection may stay
            // idle: a NAT may have forgotten the flow. Replaced, as an idle
            // command connection is, rather than trusted with a SUBSCRIBE
            // whose confirmation might never come: the reader reconnects at
            // once and subscribes every channel in use, this one included.
            if let Some(writer) = st.writer.take() {
                log::debug!("keyholder pub/sub connection silent past the idle timeout; replacing it");
                writer.shutdown();
            }
        }
        st.send_subscribe(&created);
        let mut until = Instant::now() + self.command_timeout;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        while !subscription.channels.iter().all(|c| st.is_confirmed(c)) && !st.shutdown {
            if self.confirmed.wait_until(&mut st, until).timed_out() {
                break;
            }
        }
        let shutdown = st.shutdown;
        drop(st);
        if shutdown {
            return Err(Error::shutdown());
        }
        Ok(subscription)
    }

    /// Takes `entry`'s channels back for a waiter without a round trip, when
    /// both are still subscribed and confirmed (lingering, most likely);
    /// `None` otherwise.
    pub(crate) fn resume(self: &Arc<Self>, interest: Interest<'_>) -> Option<Subscription> {
        let mut st = self.state.lock();
        let ready = !st.shutdown
            && interest.channels().all(|(c, _)| st.channels.contains_key(c) && st.is_confirmed(c));
        ready.then(|| self.register(&mut st, interest).0)
    }

    /// Counts a waiter of `entry` on its two channels, creating them as
    /// needed; returns the share and the channels created, which need a
    /// SUBSCRIBE.
    fn register(self: &Arc<Self>, st: &mut State, interest: Interest<'_>) -> (Subscription, Vec<String>) {
        let (channels, kinds): (Vec<String>, Vec<Kind>) =
            interest.channels().map(|(c, kind)| (c.to_owned(), kind)).unzip();
        let Interest { name: lock_name, waiters, .. } = interest;
        let mut created = Vec::new();
        let observer = waiters.upgrade().is_some_and(|w| w.hears_every_message());
        for (name, kind) in channels.iter().zip(kinds) {
            // An observer leaves the channel's kind to the first waiter.
            let kind = if observer { Kind::Held } else { kind };
            let slot = st.channels.entry(name.clone()).or_insert_with(|| {
                created.push(name.clone());
                Channel { kind, listeners: Vec::new(), held: false, idle_since: None, paired: false }
            });
            // A lingering channel is still subscribed: reuse it.
            slot.idle_since = None;
            if slot.kind == Kind::Held {
                slot.kind = kind;
            }
            match slot.listeners.iter_mut().find(|l| l.name == *lock_name) {
                Some(listener) => {
                    listener.refs += 1;
                    listener.waiters = Weak::clone(&waiters);
                }
                None => slot.listeners.push(Listener {
                    name: Arc::clone(lock_name),
                    waiters: Weak::clone(&waiters),
                    refs: 1,
                }),
            }
        }
        (Subscription { subscriber: Arc::clone(self), channels, name: Arc::clone(lock_name) }, created)
    }

    /// For how much longer, at most, `channel` stays subscribed if nobody
    /// else waits on it: the rest of its linger, a whole linger while
    /// waiters use it, and [`LINGER_SLACK`] for the UNSUBSCRIBE to get
    /// there; zero when it is not subscribed.
    pub(crate) fn listening_for(&self, channel: &str) -> Duration {
        match self.state.lock().channels.get(channel) {
            Some(c) => c.idle_since.map_or(LINGER, |t| LINGER.saturating_sub(t.elapsed())) + LINGER_SLACK,
            None => Duration::ZERO,
        }
    }

    /// The number of channels subscribed for waiters right now (not
    /// counting lingering ones).
    pub(crate) fn channel_count(&self) -> usize {
        self.state.lock().channels.values().filter(|c| c.kind != Kind::Wake && c.refs() > 0).count()
    }

    /// True when the reader has heard nothing from the server for longer
    /// than the idle timeout (its probes could not run, or went unanswered).
    fn silent_too_long(&self) -> bool {
        let Some(idle) = self.idle_timeout else { return false };
        let heard = Duration::from_millis(self.heard_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(heard) > idle
    }

    /// Notes that the reader heard from the server at `now`.
    fn note_heard(&self, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX);
        self.heard_ms.store(ms, Ordering::Relaxed);
    }

    /// The linger timer: sleeps until the oldest lingering channel is due
    /// (at most once per [`LINGER_TICK`] while channels keep starting to
    /// linger), unsubscribes every channel due, and sleeps with no deadline
    /// while nothing lingers; until the reader stops.
    fn time_lingers(&self) {
        let mut st = self.state.lock();
        loop {
            if st.shutdown || st.reader_gone {
                return;
            }
            let now = Instant::now();
            st.expire_lingering(now);
            match st.lingering.front() {
                Some(&(since, _)) => {
                    let due = (since + LINGER).max(now + LINGER_TICK);
                    self.linger_due.wait_until(&mut st, due);
                }
                None => {
                    st.timer_idle = true;
                    self.linger_due.wait(&mut st);
                    st.timer_idle = false;
                }
            }
        }
    }

    /// Connects to `target` from now on (the primary moved): drops the
    /// current connection so that the reader reconnects there at once,
    /// resubscribes, wakes every waiter and has every hold verified.
    pub(crate) fn retarget(&self, target: Target) {
        *self.target.lock() = target;
        self.target_epoch.fetch_add(1, Ordering::AcqRel);
        if let Some(writer) = self.state.lock().writer.as_ref() {
            writer.shutdown();
        }
        let _ = self.retargeted.0.try_send(());
    }

    /// Drops the channels `moved` names (their slot is served by another
    /// cluster node now) and wakes their waiters, which subscribe again
    /// where the slot went.
    pub(crate) fn evict(&self, moved: impl Fn(&str) -> bool) {
        let evicted = self.state.lock().evict(moved);
        self.tell_evicted(evicted);
    }

    fn tell_evicted(&self, evicted: Evicted) {
        for waiters in evicted.waiters {
            waiters.notify();
        }
        if let Some(holders) = self.holders() {
            for channel in &evicted.held {
                holders.dropped(channel);
            }
        }
    }

    /// True when no channel is subscribed, lingering ones included.
    pub(crate) fn is_unused(&self) -> bool {
        self.state.lock().channels.is_empty()
    }

    /// Waits (at most `bound`) until the reader has tried to connect once.
    ///
    /// A client waits for this before it hands out locks: a restart of
    /// Redis is heard as the fall of this connection (or as the failure of a
    /// connect attempt), and one that happened after a lock was taken but
    /// before the reader first connected would go unheard until the next
    /// renewal.
    pub(crate) fn wait_first_attempt(&self, bound: Duration) {
        let until = Instant::now() + bound;
        let mut st = self.state.lock();
        while !st.attempted && !st.shutdown {
            if self.confirmed.wait_until(&mut st, until).timed_out() {
                return;
            }
        }
    }

    fn note_attempt(&self) {
        self.state.lock().attempted = true;
        self.confirmed.notify_all();
    }

    /// Stops the reader: closes the socket it reads from.
    pub(crate) fn shut_down(&self) {
        self.tracking.close();
        let mut st = self.state.lock();
        st.shutdown = true;
        if let Some(writer) = st.writer.take() {
            writer.shutdown();
        }
        self.confirmed.notify_all();
        self.linger_due.notify_all();
        // Waiters asleep on a channel look again now, and find the client
        // shut down, rather than at their wait's bound.
        let waiters: Vec<Arc<dyn Waiters>> = st.channels.values().flat_map(Channel::waiters).collect();
        drop(st);
        for waiters in waiters {
            waiters.notify();
        }
    }

    /// The reader thread: connect, read, reconnect, until shut down. `stop`
    /// disconnects on shutdown and bounds the back-off waits. Runs the
    /// linger timer on a thread of its own meanwhile (named as this one,
    /// `linger` for `pubsub`).
    pub(crate) fn run(self: Arc<Self>, stop: Receiver<()>) {
        let name =
            std::thread::current().name().unwrap_or("keyholder-pubsub").replacen("pubsub", "linger", 1);
        std::thread::scope(|scope| {
            let timer = std::thread::Builder::new().name(name).spawn_scoped(scope, || self.time_lingers());
            if let Err(e) = timer {
                // The reader's read timeouts unsubscribe them instead, later.
                log::warn!("keyholder: no linger timer thread ({e}); unused channels linger longer");
            }
            self.read_until_shutdown(&stop);
            self.state.lock().reader_gone = true;
            self.linger_due.notify_all();
        });
    }

    /// Connects, reads, reconnects, until shut down (see [`Subscriber::run`]).
    fn read_until_shutdown(&self, stop: &Receiver<()>) {
        let mut backoff = FIRST_BACKOFF;
        let mut reconnecting = false;
        loop {
            if self.state.lock().shutdown {
                return;
            }
            let epoch = self.target_epoch.load(Ordering::Acquire);
            match self.connect() {
                Ok((_, writer)) if epoch != self.target_epoch.load(Ordering::Acquire) => {
                    // Connected to where the primary was: try the new one.
                    writer.shutdown();
                    reconnecting = true;
                    continue;
                }
                Ok((mut incoming, writer)) => {
                    backoff = FIRST_BACKOFF;
                    let attached = self.attach(writer, epoch);
                    self.note_attempt();
                    if !attached {
                        return;
                    }
                    if reconnecting {
                        crate::observe::pubsub_reconnected();
                        self.wake_all();
                        let _ = self.reconnected.try_send(());
                    }
                    self.read_until_failure(&mut incoming);
                    self.detach();
                    self.wake_all();
                    reconnecting = true;
                    // Reconnect at once; back off only when connecting fails.
                    continue;
                }
                Err(e) => {
                    log::debug!("keyholder pub/sub connect failed: {e}");
                    // Redis was out of reach since the client was built
                    // (or since the last connection): holds taken before
                    // are worth verifying once it is back.
                    reconnecting = true;
                    self.note_attempt();
                    if let Some(hook) = self.unreachable.get() {
                        hook();
                    }
                }
            }
            crossbeam_channel::select! {
                recv(stop) -> _ => return,
                recv(self.retargeted.1) -> _ => backoff = FIRST_BACKOFF,
                default(backoff) => backoff = (backoff * 2).min(MAX_BACKOFF),
            }
        }
    }

    fn connect(&self) -> RedisResult<(Incoming, Stream)> {
        let target = self.target.lock().clone();
        target.open(self.connect_timeout, self.command_timeout)
    }

    /// Publishes a fresh connection and resubscribes every channel in use.
    /// False when the subscriber was shut down meanwhile. A connection
    /// opened before a retarget (`epoch` is past) is closed at once: the
    /// reader finds it closed and connects again.
    fn attach(&self, writer: Stream, epoch: u64) -> bool {
        let mut st = self.state.lock();
        if st.shutdown {
            writer.shutdown();
            return false;
        }
        if epoch != self.target_epoch.load(Ordering::Acquire) {
            writer.shutdown();
            return true;
        }
        st.writer = Some(writer);
        self.note_heard(Instant::now());
        st.acks_pending.clear();
        st.unsubscribes_pending.clear();
        // Lingering channels are not worth resubscribing.
        st.channels.retain(|_, c| c.in_use());
        for channel in st.channels.values_mut() {
            channel.paired = false;
        }
        // Its id first, for the tracking connection's redirection.
        if let Some(writer) = st.writer.as_mut()
            && write_commands(writer, &Tracking::greeting()).is_err()
        {
            writer.shutdown();
        }
        let channels: Vec<String> = st.channels.keys().cloned().collect();
        st.send_subscribe(&channels);
        true
    }

    fn detach(&self) {
        self.tracking.lost();
        let mut st = self.state.lock();
        if let Some(writer) = st.writer.take() {
            writer.shutdown();
        }
        st.acks_pending.clear();
    }

    fn wake_all(&self) {
        let waiters = self.state.lock().waiters();
        for waiters in waiters {
            waiters.notify();
        }
    }

    /// Reads pushes until the connection fails or stays silent through a PING.
    ///
    /// The read timeout is fixed for the connection's life, set here before
    /// the first read (a timeout changed while the reader is blocked in
    /// `recv` takes effect only at the next one; see [`Subscriber::new`]
    /// for how long it is). A read timeout is silence (a push
    /// half arrived is finished by the next read): after a probe interval
    /// of it the reader PINGs, and a PING unanswered for a command timeout
    /// (a stalled or black-holed connection, a flow a NAT forgot) replaces
    /// the connection. Each read timeout also unsubscribes channels whose
    /// linger passed, should the linger timer have failed to start.
    fn read_until_failure(&self, incoming: &mut Incoming) {
        if let Err(e) = incoming.set_read_timeout(self.read_timeout) {
            log::debug!("keyholder pub/sub connection: no read timeout ({e}); reconnecting");
            return;
        }
        let mut ping_sent: Option<Instant> = None;
        let mut last_heard = Instant::now();
        loop {
            match incoming.next() {
                Ok(value) => {
                    ping_sent = None;
                    last_heard = Instant::now();
                    self.note_heard(last_heard);
                    self.dispatch(value);
                }
                Err(e) if e.is_timeout() => {
                    // Holds whose removal alarms come here count as
                    // subscriptions: a dead connection would drop them.
                    // (Asked before the state's lock: never both at once.)
                    let alarms = self.holders().is_some_and(|h| h.holding());
                    let now = Instant::now();
                    let mut st = self.state.lock();
                    st.expire_lingering(now);
                    if let Some(sent) = ping_sent {
                        if now.saturating_duration_since(sent) >= self.command_timeout {
                            log::debug!("keyholder pub/sub connection silent through a PING; reconnecting");
                            return;
                        }
                        continue;
                    }
                    let probe = if st.channels.is_empty() && !alarms {
                        self.probe_idle
                    } else {
                        Some(self.probe_subscribed)
                    };
                    if probe.is_some_and(|probe| now.saturating_duration_since(last_heard) >= probe) {
                        st.send(&redis::cmd("PING"));
                        ping_sent = Some(now);
                    }
                }
                Err(_) => return,
            }
        }
    }

    fn dispatch(&self, value: Value) {
        if let Value::Int(id) = value {
            // The reply to `CLIENT ID`, the only command that has one.
            self.tracking.client_id(id);
            return;
        }
        let Some(push) = push_of(value) else { return };
        if push.kind == PushKind::Message
            && let Ok(keys) = tracking::invalidation(&push.data)
        {
            if let Some(holders) = self.holders() {
                holders.invalidated(keys.as_deref());
            }
            return;
        }
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let Some(message) = message_of(push) else { return };
                let (channel, Some(payload)) = (message.get_channel_name(), payload_of(&message)) else {
                    return;
                };
                let (kind, waiters, observers, held) = {
                    let mut st = self.state.lock();
                    let Some(slot) = st.channels.get_mut(channel) else { return };
                    let held = slot.held;
                    let wakes = slot.wakes(payload);
                    let (observers, waiters): (Vec<_>, Vec<_>) =
                        slot.waiters().partition(|w| w.hears_every_message());
                    (slot.kind, if wakes { waiters } else { Vec::new() }, observers, held)
                };
                if held && let Some(holders) = self.holders() {
                    holders.heard(channel);
                }
                for observer in observers {
                    observer.message(payload);
                }
                let grant = (kind == Kind::Wake).then(|| parse_grant(payload)).flatten();
                for waiters in waiters {
                    match (&grant, kind) {
                        (Some(grant), _) => waiters.grant(grant.clone()),
                        (None, Kind::Any) => waiters.message(payload),
                        (None, _) => waiters.notify(),
                    }
                }
            }
            PushKind::SUnsubscribe | PushKind::Unsubscribe => {
                let Some(channel) = channel_of(&push) else { return };
                // A companion goes and comes with its unlock channel.
                if names::is_listening_channel(channel) {
                    return;
                }
                let mut st = self.state.lock();
                match st.unsubscribes_pending.get_mut(channel) {
                    Some(pending) => {
                        *pending = pending.saturating_sub(1);
                        if *pending == 0 {
                            st.unsubscribes_pending.remove(channel);
                        }
                    }
                    // Not asked for: the server dropped a shard channel
                    // whose slot moved to another node (a resharding, a
                    // failover). Its waiters subscribe again there.
                    None => {
                        let evicted = st.evict(|name| name == channel);
                        drop(st);
                        self.tell_evicted(evicted);
                    }
                }
            }
            PushKind::Subscribe if channel_of(&push) == Some(INVALIDATE_CHANNEL) => {
                self.tracking.ready(self.target.lock().clone());
                if let Some(holders) = self.holders() {
                    holders.retrack();
                }
            }
            PushKind::Subscribe | PushKind::SSubscribe => {
                let Some(channel) = channel_of(&push) else { return };
                // Nobody waits for a companion's confirmation: no wake-up.
                if names::is_listening_channel(channel) {
                    return;
                }
                let mut st = self.state.lock();
                if let Some(pending) = st.acks_pending.get_mut(channel) {
                    *pending = pending.saturating_sub(1);
                    if *pending == 0 {
                        st.acks_pending.remove(channel);
                    }
                }
                let held = st.channels.get(channel).is_some_and(|c| c.held) && st.is_confirmed(channel);
                self.confirmed.notify_all();
                drop(st);
                // Subscribed from now on: whatever was published before is
                // unknown, so the holds are checked.
                if held && let Some(holders) = self.holders() {
                    holders.heard(channel);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel(kind: Kind) -> Channel {
        Channel { kind, listeners: Vec::new(), held: false, idle_since: None, paired: false }
    }

    #[test]
    fn a_zero_after_a_two_is_already_handled() {
        let mut unlock = channel(Kind::Unlock);
        assert!(unlock.wakes("0"), "a plain 0 (Redisson, force unlock) wakes");
        assert!(!unlock.wakes("2"));
        assert!(!unlock.wakes("0"), "the 0 of a keyholder release that woke its next client");
        assert!(unlock.wakes("0"), "the pairing covers one 0 only");
        assert!(!unlock.wakes("2"));
        assert!(unlock.wakes("1"), "1 always wakes");
        assert!(unlock.wakes("0"), "and clears a pending pairing");
        assert!(!unlock.wakes("hello") && !unlock.wakes("3"));
    }

    #[test]
    fn every_message_on_a_wake_channel_wakes() {
        let mut wake = channel(Kind::Wake);
        for payload in ["", "2", "0", "owner:1 12"] {
            assert!(wake.wakes(payload), "{payload:?}");
        }
    }
}
