//! This node's lease and its leader duties.
//!
//! Every `lease/3` the node proposes a `Heartbeat`. Its lease is valid until
//! the monotonic time at which it *proposed* the last heartbeat that
//! committed, plus the lease: measured on its own clock, never extended by
//! a slow commit. It may send for its shards only while the lease is valid
//! ([`LeaseOwnership`]). When the lease starts or stops being valid the
//! delivery supervisor rebalances its actors. The heartbeats and this
//! watch run in a task of their own, apart from the leader duties below,
//! so no duty's commit, however slow, delays a renewal.
//!
//! As leader, the node also runs the rebalancer ([`hookraft_core::rebalance`])
//! every [`LEADER_DUTY_MS`]: shards of nodes whose liveness expired (plus
//! [`DRIFT_MARGIN_MS`]), of draining or departed nodes, and unowned shards
//! are granted to live nodes, each grant under a new fencing token.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hookraft_core::clock::Clock;
use hookraft_core::command::{Command, Response};
use hookraft_core::ids::{NodeId, Shard};
use hookraft_core::propose::Proposer;
use hookraft_core::rebalance;
use hookraft_delivery::context::Ownership;
use hookraft_delivery::supervisor::SupervisorMsg;
use hookraft_raft::{Raft, StateHandle};
use ractor::ActorRef;

/// How much the leader's clock may run ahead of a node's before the leader
/// could reassign a shard the node still believes it holds. A node's own
/// lease lapses `lease_ms` after it proposed its last committed heartbeat;
/// the leader reassigns no earlier than that heartbeat's wall time plus
/// `lease_ms` plus this margin.
pub const DRIFT_MARGIN_MS: u64 = 1_000;
/// How often the leader checks liveness and placement.
pub const LEADER_DUTY_MS: u64 = 500;

/// The lease, shared by the heartbeat loop and the ownership checks.
#[derive(Debug, Default)]
pub struct Lease {
    /// Monotonic ms until which the lease is valid; 0 = never held.
    valid_until_ms: AtomicU64,
    /// Heartbeats committed (each renews the lease).
    pub renewals_total: AtomicU64,
    /// Times the lease lapsed while it had been valid.
    pub expiries_total: AtomicU64,
    /// Woken by each committed heartbeat, so the leader duties run at
    /// once when this node's liveness is new (its first heartbeat) rather
    /// than up to [`LEADER_DUTY_MS`] later: a fresh node owns its shards
    /// before its first events arrive.
    renewed: tokio::sync::Notify,
}

impl Lease {
    pub fn is_valid(&self, monotonic_now_ms: u64) -> bool {
        monotonic_now_ms < self.valid_until_ms.load(Ordering::Acquire)
    }

    fn extend_to(&self, until_ms: u64) {
        self.valid_until_ms.fetch_max(until_ms, Ordering::AcqRel);
    }
}

/// [`Ownership`] from the replicated shard map and this node's lease.
pub struct LeaseOwnership {
    pub node_id: NodeId,
    pub state: StateHandle,
    pub lease: Arc<Lease>,
    pub clock: Arc<dyn Clock>,
}

impl Ownership for LeaseOwnership {
    fn token_for(&self, shard: Shard) -> Option<u64> {
        if !self.lease.is_valid(self.clock.monotonic_ms()) {
            return None;
        }
        self.granted_token(shard)
    }

    fn granted_token(&self, shard: Shard) -> Option<u64> {
        let grant = self.state.read().shards.get(shard as usize).copied()?;
        (grant.owner == Some(self.node_id)).then_some(grant.token)
    }
}

/// What the renewal and the leader duties need.
pub struct LeaseLoop {
    pub node_id: NodeId,
    pub lease_ms: u64,
    /// How long finished events are kept; `None` keeps them all.
    pub retention_ms: Option<u64>,
    pub lease: Arc<Lease>,
    pub clock: Arc<dyn Clock>,
    pub proposer: Arc<dyn Proposer>,
    pub raft: Raft,
    pub state: StateHandle,
    pub supervisor: ActorRef<SupervisorMsg>,
    /// Becomes true when the node stops.
    pub stop: tokio::sync::watch::Receiver<bool>,
}

/// How often the loop checks whether the lease lapsed between heartbeats.
const LEASE_CHECK_MS: u64 = 100;
/// How often the leader looks for events past their retention.
pub const PRUNE_EVERY_MS: u64 = 10_000;
/// Events one `Prune` entry removes at most: its apply takes about 0.6 ms
/// (5 ms while a snapshot's clone of the state is alive; `cargo bench -p
/// hookraft-core --bench hot_paths -- prune`), the longest a commit behind
/// it waits.
pub const PRUNE_BATCH: u32 = 512;
/// `Prune` entries one leader duty proposes at most, one after another,
/// when events are due faster than one entry removes them: up to 16,384
/// events each 500 ms, above any ingest rate a node sustains.
pub const PRUNE_ENTRIES_PER_DUTY: usize = 32;

impl LeaseLoop {
    /// Runs until the node stops: the renewal (heartbeats and the watch on
    /// the lease's validity) here, the leader duties (rebalancing, pruning)
    /// in a task of their own. A duty waits on its commits as long as they
    /// take (a `Prune` behind a snapshot's clone, a rebalance behind a
    /// slow follower); in one loop with the heartbeats, 32 slow prunes in a
    /// row let the lease lapse while the node was healthy
    /// (DESIGN-NOTES note 46).
    pub async fn run(self) {
        let this = Arc::new(self);
        let duties = tokio::spawn(this.clone().run_duties());
        this.run_renewal().await;
        // The duties watch the same stop signal; a duty's commit in flight
        // is not waited for.
        duties.abort();
    }

    /// Every `lease/3` a heartbeat; every [`LEASE_CHECK_MS`], also while a
    /// heartbeat is waiting for its commit, a look at whether the lease
    /// started or stopped being valid. The lease is also looked at just
    /// before a committed heartbeat extends it: a lapse is seen and counted
    /// even when the renewal lands before the next look (a process paused
    /// past its lease renews within milliseconds of waking).
    async fn run_renewal(&self) {
        let period_ms = (self.lease_ms / 3).max(1);
        let mut stop = self.stop.clone();
        let mut next_heartbeat_ms = 0;
        let mut was_valid = false;
        loop {
            let now_ms = self.clock.monotonic_ms();
            if now_ms >= next_heartbeat_ms {
                next_heartbeat_ms = now_ms + period_ms;
                let beat = self.heartbeat();
                tokio::pin!(beat);
                loop {
                    tokio::select! {
                        biased;
                        _ = stop.wait_for(|stopped| *stopped) => return,
                        committed = &mut beat => {
                            if committed {
                                if !self.watch_validity(&mut was_valid) {
                                    return;
                                }
                                self.renewed(now_ms);
                            }
                            break;
                        }
                        () = tokio::time::sleep(Duration::from_millis(LEASE_CHECK_MS)) => {
                            if !self.watch_validity(&mut was_valid) {
                                return;
                            }
                        }
                    }
                }
            }
            if !self.watch_validity(&mut was_valid) {
                return;
            }
            tokio::select! {
                biased;
                _ = stop.wait_for(|stopped| *stopped) => return,
                () = tokio::time::sleep(Duration::from_millis(LEASE_CHECK_MS)) => {}
            }
        }
    }

    /// Tells the supervisor when the lease started or stopped being valid
    /// since the last look; false once the supervisor is gone.
    fn watch_validity(&self, was_valid: &mut bool) -> bool {
        let valid = self.lease.is_valid(self.clock.monotonic_ms());
        if valid == *was_valid {
            return true;
        }
        tracing::info!(node = self.node_id, valid, "lease changed");
        if *was_valid {
            self.lease.expiries_total.fetch_add(1, Ordering::Relaxed);
        }
        *was_valid = valid;
        self.supervisor.send_message(SupervisorMsg::Rebalance).is_ok()
    }

    /// Every [`LEADER_DUTY_MS`], as leader: the rebalancer, then pruning
    /// (up to [`PRUNE_ENTRIES_PER_DUTY`] entries in a row while events are
    /// due faster than one entry removes them).
    async fn run_duties(self: Arc<Self>) {
        let mut stop = self.stop.clone();
        let mut next_prune_ms = 0;
        loop {
            let duty_started_ms = self.clock.monotonic_ms();
            self.leader_duties().await;
            if let Some(retention_ms) = self.retention_ms
                && self.clock.monotonic_ms() >= next_prune_ms
                && self.is_leader()
            {
                let mut more = false;
                for _ in 0..PRUNE_ENTRIES_PER_DUTY {
                    if *stop.borrow() {
                        return;
                    }
                    more = self.prune(retention_ms).await;
                    if !more {
                        break;
                    }
                }
                next_prune_ms = self.clock.monotonic_ms() + if more { 0 } else { PRUNE_EVERY_MS };
            }
            let next_duty_ms = duty_started_ms + LEADER_DUTY_MS;
            let pause_ms = next_duty_ms.saturating_sub(self.clock.monotonic_ms());
            tokio::select! {
                biased;
                _ = stop.wait_for(|stopped| *stopped) => return,
                () = tokio::time::sleep(Duration::from_millis(pause_ms)) => {}
                () = self.lease.renewed.notified() => {}
            }
        }
    }

    /// Proposes a heartbeat; true once it is committed. `propose` answers
    /// only after the heartbeat is applied on this node too (the leader
    /// answers from its own apply; a forwarded write waits for its log
    /// index here), so every grant committed before it is in this node's
    /// state when the lease is extended: a node catching up cannot hold a
    /// lease over a stale grant (DESIGN-NOTES note 17).
    async fn heartbeat(&self) -> bool {
        let command =
            Command::Heartbeat { node_id: self.node_id, now_ms: self.clock.wall_ms(), lease_ms: self.lease_ms };
        match self.proposer.propose(command).await {
            Ok(_) => true,
            Err(error) => {
                tracing::debug!(%error, "heartbeat not committed");
                false
            }
        }
    }

    /// A heartbeat proposed at `proposed_at_ms` committed: the lease runs
    /// a lease from then.
    fn renewed(&self, proposed_at_ms: u64) {
        self.lease.extend_to(proposed_at_ms + self.lease_ms);
        self.lease.renewals_total.fetch_add(1, Ordering::Relaxed);
        self.lease.renewed.notify_one();
    }

    fn is_leader(&self) -> bool {
        hookraft_raft::known_leader(&self.raft.metrics().borrow()) == Some(self.node_id)
    }

    /// As leader: proposes a `Prune` of events received more than
    /// `retention_ms` ago whose deliveries are all over, when there are
    /// any (a quiet cluster's log gains nothing). Returns whether more may
    /// be due at once (the entry removed as many as it could).
    async fn prune(&self, retention_ms: u64) -> bool {
        let now_ms = self.clock.wall_ms();
        let before_ms = now_ms.saturating_sub(retention_ms);
        if self.state.read().prunable(before_ms, PRUNE_BATCH as usize).next().is_none() {
            return false;
        }
        match self.proposer.propose(Command::Prune { now_ms, before_ms, max_events: PRUNE_BATCH }).await {
            Ok(Response::Pruned { events, deliveries }) => {
                tracing::info!(events, deliveries, before_ms, "forgot events past their retention");
                events >= PRUNE_BATCH
            }
            Ok(other) => {
                tracing::error!(?other, "unexpected response to Prune");
                false
            }
            Err(error) => {
                tracing::warn!(%error, "could not prune events past their retention");
                false
            }
        }
    }

    /// As leader: grants shards that have no live, eligible owner, and
    /// forgets departed nodes.
    async fn leader_duties(&self) {
        let (voters, members): (BTreeSet<NodeId>, BTreeSet<NodeId>) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            if hookraft_raft::known_leader(&m) != Some(self.node_id) {
                return;
            }
            let membership = m.membership_config.membership();
            (membership.voter_ids().collect(), membership.nodes().map(|(id, _)| *id).collect())
        };
        let timing = rebalance::Timing {
            now_ms: self.clock.wall_ms(),
            lease_ms: self.lease_ms,
            drift_margin_ms: DRIFT_MARGIN_MS,
        };
        let (plan, departed) = {
            let state = self.state.read();
            (rebalance::plan(&state, &voters, timing), rebalance::departed(&state, &members, timing))
        };
        let mut commands = Vec::with_capacity(2 + departed.len());
        for node_id in departed {
            tracing::info!(node = node_id, "forgetting a node that left the cluster");
            commands.push(Command::ForgetNode { node_id, now_ms: timing.now_ms });
        }
        if !plan.is_empty() {
            tracing::info!(revoke = plan.revoke.len(), grant = plan.grant.len(), "rebalancing shards");
        }
        if !plan.revoke.is_empty() {
            commands.push(Command::RevokeShards { now_ms: timing.now_ms, shards: plan.revoke });
        }
        if !plan.grant.is_empty() {
            commands.push(Command::AssignShards { now_ms: timing.now_ms, grants: plan.grant });
        }
        if commands.is_empty() {
            return;
        }
        if let Err(error) = self.proposer.propose(Command::Batch(commands)).await {
            tracing::warn!(%error, "could not rebalance shards");
        }
    }
}
