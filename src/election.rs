//! Leader election ([`Client::election`]): one process of a deployment
//! leads while it lives, the others stand by and take over when it resigns
//! or dies. Redisson has no election; this is etcd's and Curator's shape
//! (campaign, resign, observe, a lease that ends with the process, the
//! leader told at once when it loses) built on Redisson's lock layout, so
//! nothing new lives in Redis but one channel.
//!
//! A leadership is a token-owned, fenced hold of the plain lock named like
//! the election ([`Lock::lock_owned`] on a [`fenced`](crate::Handle::fenced)
//! handle): the hash `<name>` with the leader's `<uuid>:<number>` field, and
//! the term is the fencing token from `redisson_lock_token:{<name>}`, so
//! every term is strictly greater than the last. The hold is renewed by a
//! watchdog with the election's short lease (900 ms by default, renewed every
//! third), which bounds a takeover after the leader's process dies.
//! Standbys wait as the lock's waiters do, woken by its unlock channel on a
//! resignation and by the end of the leader's lease otherwise.
//!
//! The election is a layer above `kinds/` and `admin/`: it uses the lock,
//! and [`Client::watch_as`]'s observers for [`Election::observe`]
//! (`election/observer.rs`); neither knows of it. The leader's guard is
//! wrapped in [`Leadership`] (`election/leadership.rs`).

mod leadership;
mod observer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

pub use leadership::Leadership;
pub use observer::{LeadershipChange, LeadershipChanges};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::kinds::lock::Lock;
use crate::names;

/// The election's lease when none is given: a standby takes over within
/// this long and a round trip after the leader's process dies, under a
/// second (900 ms, renewed every 300 ms).
pub const DEFAULT_ELECTION_LEASE: Duration = Duration::from_millis(900);

/// The channel prefix on which a new leader announces its term (see
/// [`Election::observe`]).
const ELECTED_PREFIX: &str = "keyholder_election__channel";

/// A handle to one named election; from [`Client::election`]. Cheap to
/// clone and shareable across threads; it does no I/O until asked.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> Result<(), keyholder::Error> {
/// let client = keyholder::Client::open("redis://127.0.0.1:6379/")?;
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign()?; // blocks while another leads
/// let lost = leadership.lost_signal();
/// println!("leading in term {}", leadership.term());
/// for _step in 0..3 {
///     if lost.try_recv().is_ok() {
///         break; // no longer the leader: stop at once
///     }
///     // ... one step of the leader's work, stamped with leadership.term() ...
/// }
/// leadership.resign()?; // a standby takes over at once
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    client: Client,
    name: Arc<str>,
    lease: Duration,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// Who leads an election, as read from Redis ([`Election::leader`]) or
/// heard by an observer ([`Election::observe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's owner id, the field in the lock hash:
    /// `<client-uuid>:<number>` (its [`Leadership::owner_id`]).
    pub owner: String,
    /// Its term: the fencing token of its hold ([`Leadership::term`]).
    pub term: u64,
}

impl Client {
    /// A handle to the election `name`, with the
    /// [`DEFAULT_ELECTION_LEASE`] (900 ms); [`Election::with_lease`] changes
    /// it. Its lock is the plain lock `name` (Redisson's `RLock` layout,
    /// fenced by `redisson_lock_token:{name}`): do not lock that name for
    /// anything else. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a name [`Client::lock`] refuses.
    pub fn election(&self, name: &str) -> Result<Election> {
        self.lock(name)?;
        Ok(Election { client: self.clone(), name: Arc::from(name), lease: DEFAULT_ELECTION_LEASE })
    }
}

impl Election {
    /// This election with leaderships renewed to `lease` every third of it
    /// (a watchdog lease): a standby takes over within `lease` (plus a
    /// round trip) of the leader's process dying, and a leader that cannot
    /// reach Redis learns it lost within `lease`. Shorter is faster to fail
    /// over and costs more renewals. When it differs from the client's
    /// [`watchdog_timeout`](Client::watchdog_timeout), the first campaign
    /// starts a companion client with the same settings but this watchdog
    /// timeout (its own connections and watchdog thread), shared by the
    /// client's elections with that lease and shut down with the client:
    /// a client's shutdown (or the drop of its last handle) ends its
    /// leaderships' renewals, as the death of its process does. No I/O.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// for a lease outside
    /// [`MIN_WATCHDOG_TIMEOUT`](crate::MIN_WATCHDOG_TIMEOUT) ..=
    /// [`MAX_LEASE`](crate::MAX_LEASE).
    pub fn with_lease(&self, lease: Duration) -> Result<Election> {
        if !(crate::MIN_WATCHDOG_TIMEOUT..=crate::MAX_LEASE).contains(&lease) {
            return Err(Error::invalid_argument(format!(
                "an election lease of {} is outside {} ..= {}",
                crate::lease::for_people(lease),
                crate::lease::for_people(crate::MIN_WATCHDOG_TIMEOUT),
                crate::lease::for_people(crate::MAX_LEASE)
            )));
        }
        Ok(Election { lease, ..self.clone() })
    }

    /// The election's name (its lock's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lease of its leaderships.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Campaigns until this caller leads: waits as long as another leads,
    /// woken by its resignation (the lock's unlock channel) or the end of
    /// its lease.
    ///
    /// # Errors
    ///
    /// A Redis failure outlasting the client's outage budget;
    /// [`ErrorKind::Shutdown`](crate::ErrorKind::Shutdown);
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the
    /// campaigning client (see [`with_lease`](Election::with_lease)) cannot
    /// be started.
    pub fn campaign(&self) -> Result<Leadership> {
        self.campaign_with(None)?.ok_or_else(Error::shutdown)
    }

    /// One attempt, never waiting: `Ok(None)` while another leads.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Election::campaign).
    pub fn try_campaign(&self) -> Result<Option<Leadership>> {
        self.campaign_with(Some(Instant::now()))
    }

    /// Campaigns for at most `wait`: `Ok(None)` if this caller does not
    /// lead by then.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Election::campaign).
    pub fn campaign_for(&self, wait: Duration) -> Result<Option<Leadership>> {
        match Instant::now().checked_add(wait) {
            Some(deadline) => self.campaign_until(deadline),
            None => self.campaign().map(Some),
        }
    }

    /// Campaigns until `deadline` at the latest: `Ok(None)` if this caller
    /// does not lead by then.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Election::campaign).
    pub fn campaign_until(&self, deadline: Instant) -> Result<Option<Leadership>> {
        self.campaign_with(Some(deadline))
    }

    fn campaign_with(&self, deadline: Option<Instant>) -> Result<Option<Leadership>> {
        let campaigner = self.campaigner()?;
        let lock: Lock = campaigner.lock(&self.name)?.fenced();
        let guard = match deadline {
            None => lock.lock_owned()?,
            Some(deadline) if deadline <= Instant::now() => match lock.try_lock_owned()? {
                Some(guard) => guard,
                None => return Ok(None),
            },
            Some(deadline) => match lock.try_lock_owned_until(deadline)? {
                Some(guard) => guard,
                None => return Ok(None),
            },
        };
        let leadership = Leadership::new(campaigner, guard)?;
        self.announce(&leadership);
        Ok(Some(leadership))
    }

    /// The client whose watchdog renews with the election's lease.
    fn campaigner(&self) -> Result<Client> {
        if self.client.watchdog_timeout() == self.lease {
            return Ok(self.client.clone());
        }
        self.client.inner().companion(self.lease)
    }

    /// Tells observers of the new term: `<term> <owner>` on the election's
    /// channel. Best effort: an observer that misses it learns of the term
    /// from Redis when it looks next (a message or the end of a lease).
    fn announce(&self, leadership: &Leadership) {
        let inner = self.client.inner();
        let payload = format!("{} {}", leadership.term(), leadership.owner_id());
        let publish =
            redis::cmd(inner.scripts.publish()).arg(elected_channel(&self.name)).arg(payload).clone();
        let sent = inner.with_live_conn(&self.name, |session| Ok(session.query::<i64>(&publish)?.is_ok()));
        if let Err(e) = sent {
            log::debug!(
                "keyholder: announcing term {} of election '{}' failed: {e}",
                leadership.term(),
                self.name
            );
        }
    }

    /// Who leads now, read from Redis in one transaction (the lock hash's
    /// field and the fencing counter): `None` when nobody does.
    ///
    /// The term is the counter's value, which is the leader's fencing
    /// token as long as only the election takes the lock `name`.
    ///
    /// # Errors
    ///
    /// A Redis failure; [`ErrorKind::WrongType`](crate::ErrorKind::WrongType)
    /// when `name` holds something other than a lock.
    pub fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.look()?.0)
    }

    /// The leader and the time left of its lease.
    fn look(&self) -> Result<(Option<Leader>, Option<Duration>)> {
        let name: &str = &self.name;
        let inner = self.client.inner();
        inner.check_running()?;
        let commands = [
            redis::cmd("MULTI"),
            redis::cmd("HGETALL").arg(name).clone(),
            redis::cmd("PTTL").arg(name).clone(),
            redis::cmd("GET").arg(names::token_key(name)).clone(),
            redis::cmd("EXEC"),
        ];
        let refs: Vec<&redis::Cmd> = commands.iter().collect();
        type Reply = (Value, Value, Value, Value, (Vec<(String, String)>, i64, Option<u64>));
        let reply: Reply = inner.with_live_conn(name, |session| {
            session.query_all(&refs)?.map_err(|e| Error::from_redis(name, e))
        })?;
        let (fields, pttl, term) = reply.4;
        let owner = fields.into_iter().map(|(field, _)| field).find(|field| field != "mode");
        let leader = owner.map(|owner| Leader { owner, term: term.unwrap_or(0) });
        let left = u64::try_from(pttl).ok().map(Duration::from_millis);
        Ok((leader, left))
    }

    /// A channel of the election's leadership changes, as they happen: at
    /// once the current leader if there is one, then a
    /// [`LeadershipChange::Elected`] for each new term and a
    /// [`LeadershipChange::Vacated`] when the leader resigns or its lease
    /// runs out with nobody taking over. A takeover seen late may come as
    /// an `Elected` with no `Vacated` before it.
    ///
    /// It listens on the client's pub/sub connections (as
    /// [`Client::watch_as`] does, following restarts, failovers and slot
    /// moves) to two channels: the lock's unlock channel
    /// `redisson_lock__channel:{<name>}` (a resignation publishes `0`
    /// there), and `keyholder_election__channel:{<name>}`, on which a new
    /// leader publishes `<term> <owner>` (its fencing token in decimal, a
    /// space, its owner id). On each message, and when the leader's lease
    /// runs out (a leader that died publishes nothing), it reads
    /// [`leader`](Election::leader) and reports the difference. No polling:
    /// while someone leads the wait is bounded by its lease, while nobody
    /// does by the messages. Two threads listen until the
    /// [`LeadershipChanges`] is dropped (within a second) or the client
    /// shuts down.
    ///
    /// # Errors
    ///
    /// As [`Client::watch_as`] and [`leader`](Election::leader).
    pub fn observe(&self) -> Result<LeadershipChanges> {
        observer::start(self.clone())
    }
}

/// The channel on which a new leader of `name` announces its term.
pub(crate) fn elected_channel(name: &str) -> String {
    names::prefixed(ELECTED_PREFIX, name)
}
