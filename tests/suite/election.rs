//! Leader election (issue 26 item 2): one leader among several clients,
//! terms that only grow across resignations and takeovers, a dead leader
//! replaced within its lease, a leader told at once when its hold is taken
//! from it, and observers that see every change; on a single server, a
//! Redis Cluster and a Sentinel set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, Instant};

use common::{RedisServer, ServerExt, exists, recv_within, spawn};
use keyholder::{Client, DEFAULT_ELECTION_LEASE, Leadership, LeadershipChange, LostReason};
use keyholder_testkit::SentinelSet;
use keyholder_testkit::cluster::RedisCluster;
use keyholder_testkit::sentinel::MASTER_NAME;

const SECOND: Duration = Duration::from_secs(1);

/// Slack over the lease for a takeover on a loaded machine.
const SLACK: Duration = Duration::from_millis(700);

/// Three clients of `server`.
fn three_clients(server: &RedisServer) -> [Client; 3] {
    [server.client(), server.client(), server.client()]
}

/// A process that dies while leading: its renewals stop (its client shuts
/// down, and with it the companion client that renews with the election's
/// lease) and it never resigns.
fn die(client: &Client, leadership: Leadership) {
    client.shutdown();
    std::mem::forget(leadership);
}

/// The next change on `changes` within `limit`.
#[track_caller]
fn next_change(changes: &keyholder::LeadershipChanges, limit: Duration) -> LeadershipChange {
    changes.recv_timeout(limit).expect("a leadership change in time")
}

/// Campaigns of the three clients, and the one that won: exactly one wins
/// at once, and leader() names it. Returns the winner's index and its
/// leadership; the others are left campaigning.
fn one_leader_of(clients: &[Client], name: &str) -> (usize, Leadership) {
    let mut won: Vec<(usize, Leadership)> = clients
        .iter()
        .enumerate()
        .filter_map(|(i, client)| client.election(name).unwrap().try_campaign().unwrap().map(|l| (i, l)))
        .collect();
    assert_eq!(won.len(), 1, "exactly one of three leads");
    won.pop().unwrap()
}

#[test]
fn one_of_three_clients_leads_and_leader_names_it() {
    let server = RedisServer::start();
    let clients = three_clients(&server);
    let observer = clients[0].election("leads").unwrap();
    assert_eq!(observer.leader().unwrap(), None);

    let (_, leadership) = one_leader_of(&clients, "leads");
    let leader = observer.leader().unwrap().expect("a leader");
    assert_eq!(leader, leadership.leader());
    assert_eq!(leader.term, observer.leader().unwrap().unwrap().term);
    assert!(clients.iter().all(|c| c.election("leads").unwrap().try_campaign().unwrap().is_none()));

    leadership.resign().unwrap();
    assert_eq!(observer.leader().unwrap(), None);
    assert!(!exists(&mut server.conn(), "leads"));
}

#[test]
fn terms_strictly_increase_across_resignations_and_takeovers() {
    let server = RedisServer::start();
    let clients = three_clients(&server);
    let (first, mut leadership) = one_leader_of(&clients, "terms");
    let mut terms = vec![leadership.term()];
    // The others campaign and wait; each resignation hands over at once.
    let (tx, standbys) = std::sync::mpsc::channel();
    for i in (0..3).filter(|&i| i != first) {
        let (election, tx) = (clients[i].election("terms").unwrap(), tx.clone());
        std::thread::spawn(move || {
            tx.send(election.campaign_for(10 * SECOND).unwrap().expect("leads in time"))
        });
    }
    for _ in 0..2 {
        let resigned = Instant::now();
        leadership.resign().unwrap();
        leadership = recv_within(&standbys, SECOND, "a standby's takeover");
        assert!(resigned.elapsed() < DEFAULT_ELECTION_LEASE, "took {:?}", resigned.elapsed());
        assert!(leadership.term() > *terms.last().unwrap());
        terms.push(leadership.term());
    }
    // And the first client, campaigning again, gets a term above all. A
    // campaign, not a try: right after a release the lock may be kept a few
    // milliseconds for listeners keyholder cannot tell from Redisson
    // waiters (a foreign turn, lua/lock/release.lua), which a try would
    // take for a leader.
    leadership.resign().unwrap();
    let again =
        clients[first].election("terms").unwrap().campaign_for(SECOND).unwrap().expect("leads in time");
    assert!(again.term() > terms[2], "{} after {terms:?}", again.term());
}

#[test]
fn a_leader_that_dies_without_resigning_is_replaced_within_its_lease() {
    let server = RedisServer::start();
    let dying = server.client();
    let leadership = dying.election("dies").unwrap().try_campaign().unwrap().unwrap();
    let term = leadership.term();
    let standby = server.client().election("dies").unwrap();
    let next = spawn(move || standby.campaign_for(10 * SECOND).unwrap().expect("leads in time"));
    std::thread::sleep(Duration::from_millis(200));

    let died = Instant::now();
    die(&dying, leadership);
    let next = recv_within(&next, DEFAULT_ELECTION_LEASE + SLACK, "the standby's takeover");
    assert!(died.elapsed() < DEFAULT_ELECTION_LEASE + SLACK, "took {:?}", died.elapsed());
    assert!(next.term() > term);
}

#[test]
fn the_lost_signal_fires_when_the_hold_is_deleted_behind_the_leaders_back() {
    let server = RedisServer::start();
    let client = server.client();
    let leadership = client.election("deleted").unwrap().try_campaign().unwrap().unwrap();
    let lost = leadership.lost_signal();
    assert!(lost.try_recv().is_err());
    let deleted = Instant::now();
    let _: i64 = redis::cmd("DEL").arg("deleted").query(&mut server.conn()).unwrap();
    // A renewal every third of the lease finds the field gone.
    let reason = lost.recv_timeout(DEFAULT_ELECTION_LEASE / 3 + SLACK).expect("told in time");
    assert!(matches!(reason, LostReason::RenewalRefused | LostReason::Gone), "{reason:?}");
    assert!(deleted.elapsed() < DEFAULT_ELECTION_LEASE, "told after {:?}", deleted.elapsed());
    assert!(leadership.is_lost());
    // Another campaigner leads in a later term.
    let next = client.election("deleted").unwrap().try_campaign().unwrap().unwrap();
    assert!(next.term() > leadership.term());
}

#[test]
fn an_election_with_a_shorter_lease_fails_over_sooner() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let dying = server.client();
    let leadership =
        dying.election("short").unwrap().with_lease(lease).unwrap().try_campaign().unwrap().unwrap();
    let standby = server.client().election("short").unwrap().with_lease(lease).unwrap();
    // Renewed past several leases.
    std::thread::sleep(3 * lease);
    assert!(standby.try_campaign().unwrap().is_none());
    assert!(!leadership.is_lost());
    let died = Instant::now();
    die(&dying, leadership);
    let next = standby.campaign_for(5 * SECOND).unwrap().expect("leads in time");
    assert!(died.elapsed() < lease + SLACK, "took {:?}", died.elapsed());
    drop(next);
    let refused = server.client().election("short").unwrap().with_lease(Duration::ZERO).unwrap_err();
    assert_eq!(refused.kind(), keyholder::ErrorKind::InvalidArgument);
}

#[test]
fn observers_see_every_election_and_vacancy() {
    let server = RedisServer::start();
    let clients = three_clients(&server);
    let changes = clients[0].election("observed").unwrap().observe().unwrap();

    let first = clients[1].election("observed").unwrap().try_campaign().unwrap().unwrap();
    let elected = first.leader();
    assert_eq!(next_change(&changes, SECOND), LeadershipChange::Elected(elected));
    let term = first.term();
    first.resign().unwrap();
    assert_eq!(next_change(&changes, SECOND), LeadershipChange::Vacated { term });

    // A leader that dies is seen vacated when its lease runs out.
    let dying = server.client();
    let second = dying.election("observed").unwrap().try_campaign().unwrap().unwrap();
    let elected = second.leader();
    assert_eq!(next_change(&changes, SECOND), LeadershipChange::Elected(elected));
    let term = second.term();
    let died = Instant::now();
    die(&dying, second);
    assert_eq!(next_change(&changes, DEFAULT_ELECTION_LEASE + SLACK), LeadershipChange::Vacated { term });
    assert!(died.elapsed() < DEFAULT_ELECTION_LEASE + SLACK);

    // A new observer is told the current leader first.
    let third = clients[2].election("observed").unwrap().try_campaign().unwrap().unwrap();
    let late = clients[1].election("observed").unwrap().observe().unwrap();
    let elected = LeadershipChange::Elected(third.leader());
    assert_eq!(next_change(&late, SECOND), elected);
    assert_eq!(next_change(&changes, SECOND), elected);
    assert!(changes.try_recv().is_err());
}

#[test]
fn on_a_cluster_one_leads_and_a_resignation_hands_over_with_a_higher_term() {
    let cluster = RedisCluster::shared();
    let clients: Vec<Client> = (0..3)
        .map(|_| Client::builder_cluster(cluster.seed_urls()).build().expect("cluster client"))
        .collect();
    let name = format!("cluster-election:{}", clients[0].id());
    let changes = clients[0].election(&name).unwrap().observe().unwrap();
    let (first, leadership) = one_leader_of(&clients, &name);
    let leader = clients[0].election(&name).unwrap().leader().unwrap().unwrap();
    assert_eq!(leader.term, leadership.term());
    assert_eq!(next_change(&changes, 3 * SECOND), LeadershipChange::Elected(leader));

    let standby = clients[(first + 1) % 3].election(&name).unwrap();
    let next = spawn(move || standby.campaign_for(10 * SECOND).unwrap().expect("leads in time"));
    std::thread::sleep(Duration::from_millis(200));
    let term = leadership.term();
    leadership.resign().unwrap();
    let next = recv_within(&next, SECOND, "the takeover");
    assert!(next.term() > term);
    // Vacated, then the new term (or only the new term, when the observer
    // read after the takeover).
    let mut seen = next_change(&changes, 3 * SECOND);
    if seen == (LeadershipChange::Vacated { term }) {
        seen = next_change(&changes, 3 * SECOND);
    }
    assert_eq!(seen, LeadershipChange::Elected(next.leader()));
}

#[test]
fn through_sentinels_a_dead_leader_is_replaced_within_its_lease() {
    let set = SentinelSet::start();
    let builder = || {
        Client::builder_sentinel(set.sentinel_urls(), MASTER_NAME)
            .connect_timeout(SECOND)
            .command_timeout(SECOND)
    };
    let dying = builder().build().unwrap();
    let leadership = dying.election("sentinel-election").unwrap().try_campaign().unwrap().unwrap();
    let term = leadership.term();
    let standby = builder().build().unwrap().election("sentinel-election").unwrap();
    assert_eq!(standby.leader().unwrap().map(|l| l.term), Some(term));
    let next = {
        let standby = standby.clone();
        spawn(move || standby.campaign_for(10 * SECOND).unwrap().expect("leads in time"))
    };
    std::thread::sleep(Duration::from_millis(200));
    let died = Instant::now();
    die(&dying, leadership);
    let next = recv_within(&next, DEFAULT_ELECTION_LEASE + SLACK, "the takeover");
    assert!(died.elapsed() < DEFAULT_ELECTION_LEASE + SLACK);
    assert!(next.term() > term);
    assert_eq!(standby.leader().unwrap().map(|l| l.owner), Some(next.owner_id().to_owned()));
}

#[test]
fn a_leaders_job_runs_carry_its_term_as_their_fencing_token() {
    let server = RedisServer::start();
    let clients = three_clients(&server);
    let (_, first) = one_leader_of(&clients, "scheduler");
    let job = first.job("scheduler:report").unwrap();
    let seen = job.run_with(|run| run.fencing_token()).unwrap().output();
    assert_eq!(seen, Some(Some(first.term())));
    // A job without a token reports none.
    let plain = clients[0].job("scheduler:plain").unwrap().run_with(|run| run.fencing_token()).unwrap();
    assert_eq!(plain.output(), Some(None));

    // The next leader's runs carry a higher term.
    let term = first.term();
    first.resign().unwrap();
    let (_, second) = one_leader_of(&clients, "scheduler");
    let seen = second.job("scheduler:report").unwrap().run_with(|run| run.fencing_token()).unwrap().output();
    assert!(seen.flatten().is_some_and(|t| t > term), "{seen:?} after {term}");
}
