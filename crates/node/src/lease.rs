//! This node's lease and its leader duties.
//!
//! Every `lease/3` the node proposes a `Heartbeat`. Its lease is valid until
//! the monotonic time at which it *proposed* the last heartbeat that
//! committed, plus the lease: measured on its own clock, never extended by
//! a slow commit. It may send for its shards only while the lease is valid
//! ([`LeaseOwnership`]). When the lease starts or stops being valid the
//! delivery supervisor rebalances its actors.
//!
//! As leader, the node also grants shards that have no live owner. With one
//! node that means: at first start, every shard goes to it. Moving shards
//! between nodes (liveness expiry, drains, admin moves) comes with clustering.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hookraft_core::clock::Clock;
use hookraft_core::command::Command;
use hookraft_core::ids::{NodeId, SHARD_COUNT, Shard};
use hookraft_delivery::batcher::Proposer;
use hookraft_delivery::context::Ownership;
use hookraft_delivery::supervisor::SupervisorMsg;
use hookraft_raft::{Raft, StateHandle};
use ractor::ActorRef;

/// The lease, shared by the heartbeat loop and the ownership checks.
#[derive(Debug, Default)]
pub struct Lease {
    /// Monotonic ms until which the lease is valid; 0 = never held.
    valid_until_ms: AtomicU64,
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
        let grant = self.state.read().shards.get(shard as usize).copied()?;
        (grant.owner == Some(self.node_id)).then_some(grant.token)
    }
}

/// What the heartbeat loop needs.
pub struct LeaseLoop {
    pub node_id: NodeId,
    pub lease_ms: u64,
    pub lease: Arc<Lease>,
    pub clock: Arc<dyn Clock>,
    pub proposer: Arc<dyn Proposer>,
    pub raft: Raft,
    pub state: StateHandle,
    pub supervisor: ActorRef<SupervisorMsg>,
}

/// How often the loop checks whether the lease lapsed between heartbeats.
const LEASE_CHECK_MS: u64 = 100;

impl LeaseLoop {
    /// Runs until the proposer shuts down.
    pub async fn run(self) {
        let period_ms = (self.lease_ms / 3).max(1);
        let mut next_heartbeat_ms = 0;
        let mut was_valid = false;
        loop {
            let now_ms = self.clock.monotonic_ms();
            if now_ms >= next_heartbeat_ms {
                next_heartbeat_ms = now_ms + period_ms;
                self.heartbeat(now_ms).await;
                self.leader_duties().await;
            }
            let valid = self.lease.is_valid(self.clock.monotonic_ms());
            if valid != was_valid {
                tracing::info!(node = self.node_id, valid, "lease changed");
                was_valid = valid;
                if self.supervisor.send_message(SupervisorMsg::Rebalance).is_err() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(LEASE_CHECK_MS)).await;
        }
    }

    async fn heartbeat(&self, proposed_at_ms: u64) {
        let command =
            Command::Heartbeat { node_id: self.node_id, now_ms: self.clock.wall_ms(), lease_ms: self.lease_ms };
        match self.proposer.propose(command).await {
            Ok(_) => self.lease.extend_to(proposed_at_ms + self.lease_ms),
            Err(error) => tracing::debug!(%error, "heartbeat not committed"),
        }
    }

    /// Grants every unowned shard to this node when it leads.
    async fn leader_duties(&self) {
        if self.raft.metrics().borrow().current_leader != Some(self.node_id) {
            return;
        }
        let unowned: Vec<(Shard, NodeId)> = {
            let state = self.state.read();
            (0..SHARD_COUNT).filter(|&s| state.shards[s as usize].owner.is_none()).map(|s| (s, self.node_id)).collect()
        };
        if unowned.is_empty() {
            return;
        }
        let command = Command::AssignShards { now_ms: self.clock.wall_ms(), grants: unowned };
        if let Err(error) = self.proposer.propose(command).await {
            tracing::warn!(%error, "could not assign shards");
        }
    }
}
