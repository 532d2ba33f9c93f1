//! Node liveness and shard grants.

use super::ClusterState;
use crate::command::Response;
use crate::ids::{NodeId, SHARD_COUNT, Shard};
use crate::model::{NodeRecord, ShardGrant};

impl ClusterState {
    pub(super) fn heartbeat(&mut self, node_id: NodeId, now_ms: u64, lease_ms: u64) -> Response {
        let record = self.nodes.entry(node_id).or_insert(NodeRecord {
            id: node_id,
            last_heartbeat_ms: 0,
            live_until_ms: 0,
            draining: false,
        });
        // Heartbeats may commit out of order when forwarded; liveness never moves back.
        record.last_heartbeat_ms = record.last_heartbeat_ms.max(now_ms);
        record.live_until_ms = record.live_until_ms.max(now_ms.saturating_add(lease_ms));
        Response::Ok
    }

    pub(super) fn set_draining(&mut self, node_id: NodeId, draining: bool, _now_ms: u64) -> Response {
        let record = self.nodes.entry(node_id).or_insert(NodeRecord {
            id: node_id,
            last_heartbeat_ms: 0,
            live_until_ms: 0,
            draining: false,
        });
        record.draining = draining;
        Response::Ok
    }

    /// Frees the shards of a departed node; the rebalancer grants them anew
    /// (with new tokens, so the departed node's late outcomes are stale).
    pub(super) fn forget_node(&mut self, node_id: NodeId, now_ms: u64) -> Response {
        self.nodes.remove(&node_id);
        for grant in self.shards.iter_mut().filter(|g| g.owner == Some(node_id)) {
            grant.owner = None;
            grant.granted_at_ms = now_ms;
        }
        Response::Ok
    }

    pub(super) fn revoke_shards(&mut self, shards: &[(Shard, Option<NodeId>)], now_ms: u64) -> Response {
        if let Some((shard, _)) = shards.iter().find(|(s, _)| *s >= SHARD_COUNT) {
            return Response::Conflict { detail: format!("shard {shard} does not exist") };
        }
        let mut tokens = Vec::with_capacity(shards.len());
        for &(shard, next_owner) in shards {
            self.last_token += 1;
            self.shards[shard as usize] =
                ShardGrant { owner: None, token: self.last_token, granted_at_ms: now_ms, next_owner };
            tokens.push((shard, self.last_token));
        }
        Response::ShardsAssigned { tokens }
    }

    pub(super) fn assign_shards(&mut self, grants: &[(Shard, NodeId)], now_ms: u64) -> Response {
        if let Some((shard, _)) = grants.iter().find(|(s, _)| *s >= SHARD_COUNT) {
            return Response::Conflict { detail: format!("shard {shard} does not exist") };
        }
        let mut tokens = Vec::with_capacity(grants.len());
        for &(shard, node) in grants {
            self.last_token += 1;
            self.shards[shard as usize] =
                ShardGrant { owner: Some(node), token: self.last_token, granted_at_ms: now_ms, next_owner: None };
            tokens.push((shard, self.last_token));
        }
        Response::ShardsAssigned { tokens }
    }
}
