//! Node liveness and shard grants.

use super::ClusterState;
use super::operational::Kind;
use crate::command::Response;
use crate::ids::{NodeId, SHARD_COUNT, Shard};
use crate::model::{NodeRecord, ShardGrant};

impl ClusterState {
    /// The liveness record of `node_id`, created empty on first mention.
    fn node_record(&mut self, node_id: NodeId) -> &mut NodeRecord {
        self.nodes.entry(node_id).or_insert(NodeRecord {
            id: node_id,
            last_heartbeat_ms: 0,
            live_until_ms: 0,
            draining: false,
        })
    }

    pub(super) fn heartbeat(&mut self, node_id: NodeId, now_ms: u64, lease_ms: u64) -> Response {
        let record = self.node_record(node_id);
        // Heartbeats may commit out of order when forwarded; liveness never moves back.
        record.last_heartbeat_ms = record.last_heartbeat_ms.max(now_ms);
        record.live_until_ms = record.live_until_ms.max(now_ms.saturating_add(lease_ms));
        Response::Ok
    }

    pub(super) fn set_draining(&mut self, node_id: NodeId, draining: bool, _now_ms: u64) -> Response {
        self.node_record(node_id).draining = draining;
        Response::Ok
    }

    /// Frees the shards of a departed node; the rebalancer grants them anew
    /// (with new tokens, so the departed node's late outcomes are stale).
    pub(super) fn forget_node(&mut self, node_id: NodeId, now_ms: u64) -> Response {
        let at_ms = self.node_lease_from(node_id, now_ms);
        self.nodes.remove(&node_id);
        for grant in self.shards.iter_mut().filter(|g| g.owner == Some(node_id)) {
            grant.owner = None;
            grant.granted_at_ms = at_ms;
        }
        Response::Ok
    }

    /// The time a revocation of `shard` stamped `now_ms` counts from: the
    /// rebalancer grants a revoked shard again `lease + margin` after it, so
    /// it must not be older than a lease the shard's last owner may still
    /// hold. A command's own stamp can be: a plan or an operator's call
    /// stamped on one node may commit seconds later (a deposed leader's
    /// proposal forwarded once its partition heals), after the owner renewed
    /// its lease under heartbeats it applied, though not the revocation (the
    /// simulator, seed 90885: a shard granted again 0.8 s after a revocation
    /// stamped 3.7 s before it committed, while its owner, cut off, still
    /// held a lease). So it is the latest of the stamp, the owner's last
    /// committed heartbeat and, for a shard already revoked, that
    /// revocation's time. A heartbeat committed after the revocation cannot
    /// extend a lease over the shard: its node applies the revocation before
    /// the heartbeat returns.
    fn revocation_from(&self, shard: Shard, now_ms: u64) -> u64 {
        match self.shards.get(shard as usize) {
            Some(ShardGrant { owner: Some(owner), .. }) => self.node_lease_from(*owner, now_ms),
            Some(ShardGrant { owner: None, granted_at_ms, .. }) => now_ms.max(*granted_at_ms),
            None => now_ms,
        }
    }

    /// The later of `now_ms` and `node`'s last committed heartbeat.
    fn node_lease_from(&self, node: NodeId, now_ms: u64) -> u64 {
        now_ms.max(self.nodes.get(&node).map_or(0, |r| r.last_heartbeat_ms))
    }

    /// Revokes shards: each gets a new token and no owner (`next_owner` is
    /// where an operator wants it to go).
    pub(super) fn revoke_shards(&mut self, shards: &[(Shard, Option<NodeId>)], now_ms: u64) -> Response {
        // Owners whose lease has lapsed lose their shards because they are down.
        let mut down: Vec<NodeId> = shards
            .iter()
            .filter_map(|&(shard, _)| self.shards.get(shard as usize).and_then(|g| g.owner))
            .filter(|owner| self.nodes.get(owner).is_none_or(|n| n.live_until_ms <= now_ms))
            .collect();
        down.sort_unstable();
        down.dedup();
        let stamped: Vec<(Shard, Option<NodeId>, Option<NodeId>, u64)> = shards
            .iter()
            .map(|&(shard, next_owner)| (shard, None, next_owner, self.revocation_from(shard, now_ms)))
            .collect();
        let response = self.set_grants(stamped.into_iter());
        if matches!(response, Response::ShardsAssigned { .. }) {
            for node in down {
                let data = format!("{{\"node_id\":{node}}}");
                self.emit(Kind::NodeDown, &node.to_string(), &data, now_ms);
            }
        }
        response
    }

    /// Grants shards, except one whose owner is another node that is live at
    /// `now_ms`. The leader plans a direct grant only away from an owner it
    /// saw dead; if that owner's heartbeat committed between the plan and
    /// this command, it holds a lease again, and granting now would give the
    /// shard two senders until its state catches up (found by the
    /// simulator, seed 20237). Such a grant is dropped here, where every
    /// replica decides the same, and the next plan moves the shard in two
    /// steps, as from any live owner.
    pub(super) fn assign_shards(&mut self, grants: &[(Shard, NodeId)], now_ms: u64) -> Response {
        let revived =
            |state: &Self, shard: Shard, node: NodeId| {
                state.shards.get(shard as usize).and_then(|g| g.owner).is_some_and(|owner| {
                    owner != node && state.nodes.get(&owner).is_some_and(|r| r.live_until_ms > now_ms)
                })
            };
        let kept: Vec<(Shard, NodeId)> =
            grants.iter().copied().filter(|&(shard, node)| !revived(self, shard, node)).collect();
        let response = self.set_grants(kept.iter().map(|&(shard, node)| (shard, Some(node), None, now_ms)));
        if let Response::ShardsAssigned { tokens } = &response
            && !tokens.is_empty()
        {
            let moves: Vec<String> = kept
                .iter()
                .zip(tokens)
                .map(|((shard, node), (_, token))| format!("{{\"shard\":{shard},\"owner\":{node},\"token\":{token}}}"))
                .collect();
            let data = format!("{{\"shards\":[{}]}}", moves.join(","));
            let subject = tokens.iter().map(|(s, t)| format!("{s}:{t}")).collect::<Vec<_>>().join(",");
            self.emit(Kind::ShardMoved, &subject, &data, now_ms);
        }
        response
    }

    /// Replaces each shard's grant under the next fencing token; refuses the
    /// whole command if one shard does not exist.
    fn set_grants(
        &mut self,
        grants: impl Iterator<Item = (Shard, Option<NodeId>, Option<NodeId>, u64)> + Clone,
    ) -> Response {
        if let Some((shard, ..)) = grants.clone().find(|(s, ..)| *s >= SHARD_COUNT) {
            return Response::Conflict { detail: format!("shard {shard} does not exist") };
        }
        let mut tokens = Vec::new();
        for (shard, owner, next_owner, at_ms) in grants {
            self.last_token += 1;
            self.shards[shard as usize] =
                ShardGrant { owner, token: self.last_token, granted_at_ms: at_ms, next_owner };
            tokens.push((shard, self.last_token));
        }
        Response::ShardsAssigned { tokens }
    }
}
