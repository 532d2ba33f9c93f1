//! The leader's shard rebalancer, as a pure function of the replicated
//! state, the current voters and the leader's clock.
//!
//! Rules, in order:
//! 1. A shard whose owner is gone (not a voter, forgotten), draining, or
//!    whose liveness expired more than `drift_margin_ms` ago moves to the
//!    eligible node owning the fewest shards. Unowned shards are granted
//!    the same way.
//! 2. When an eligible node owns fewer than half its fair share (a node
//!    joined, or came back), shards move from the most to the least loaded
//!    until no two nodes differ by more than one. Smaller imbalances, such
//!    as an operator's single move, are left alone: the rebalancer never
//!    fights an explicit placement.
//!
//! Eligible means: a voter, with a liveness record that has not expired,
//! not draining. With no eligible node nothing moves.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{NodeId, SHARD_COUNT, Shard};
use crate::state::ClusterState;

/// Grants to propose in one `AssignShards` command (empty: nothing to do).
pub fn plan(
    state: &ClusterState,
    voters: &BTreeSet<NodeId>,
    now_ms: u64,
    drift_margin_ms: u64,
) -> Vec<(Shard, NodeId)> {
    let live =
        |node: &NodeId| state.nodes.get(node).is_some_and(|n| n.live_until_ms.saturating_add(drift_margin_ms) > now_ms);
    let eligible: BTreeSet<NodeId> =
        voters.iter().copied().filter(|n| live(n) && state.nodes.get(n).is_some_and(|r| !r.draining)).collect();
    if eligible.is_empty() {
        return Vec::new();
    }
    let mut owned: BTreeMap<NodeId, Vec<Shard>> = eligible.iter().map(|&n| (n, Vec::new())).collect();
    let mut orphans = Vec::new();
    for shard in 0..SHARD_COUNT {
        match state.shards[shard as usize].owner {
            Some(owner) if eligible.contains(&owner) => owned.entry(owner).or_default().push(shard),
            _ => orphans.push(shard),
        }
    }
    let mut grants = Vec::new();
    for shard in orphans {
        let target = least_loaded(&owned);
        owned.get_mut(&target).expect("eligible node").push(shard);
        grants.push((shard, target));
    }
    let fair_share = SHARD_COUNT as usize / eligible.len();
    let starved = owned.values().any(|s| s.len() < fair_share / 2);
    if starved {
        loop {
            let target = least_loaded(&owned);
            let source = most_loaded(&owned);
            if owned[&source].len() <= owned[&target].len() + 1 {
                break;
            }
            let shard = owned.get_mut(&source).and_then(Vec::pop).expect("most loaded owns shards");
            owned.get_mut(&target).expect("eligible node").push(shard);
            grants.retain(|(s, _)| *s != shard);
            grants.push((shard, target));
        }
    }
    grants.sort_unstable();
    grants
}

fn least_loaded(owned: &BTreeMap<NodeId, Vec<Shard>>) -> NodeId {
    owned.iter().min_by_key(|(id, s)| (s.len(), **id)).map(|(id, _)| *id).expect("at least one eligible node")
}

fn most_loaded(owned: &BTreeMap<NodeId, Vec<Shard>>) -> NodeId {
    owned
        .iter()
        .max_by_key(|(id, s)| (s.len(), std::cmp::Reverse(**id)))
        .map(|(id, _)| *id)
        .expect("at least one eligible node")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Response};
    use proptest::prelude::*;

    const LEASE: u64 = 6_000;
    const MARGIN: u64 = 1_000;

    fn cluster(nodes: &[NodeId], now_ms: u64) -> ClusterState {
        let mut state = ClusterState::default();
        for &n in nodes {
            state.apply(&Command::Heartbeat { node_id: n, now_ms, lease_ms: LEASE });
        }
        state
    }

    fn apply(state: &mut ClusterState, grants: Vec<(Shard, NodeId)>) {
        if !grants.is_empty() {
            assert!(matches!(
                state.apply(&Command::AssignShards { now_ms: 0, grants }),
                Response::ShardsAssigned { .. }
            ));
        }
    }

    fn counts(state: &ClusterState) -> BTreeMap<Option<NodeId>, usize> {
        let mut c = BTreeMap::new();
        for g in &state.shards {
            *c.entry(g.owner).or_default() += 1;
        }
        c
    }

    fn voters(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_fresh_cluster_spreads_all_shards_evenly() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        let grants = plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN);
        apply(&mut state, grants);
        let c = counts(&state);
        assert_eq!(c.get(&None), None);
        assert!(c.values().all(|&n| (21..=22).contains(&n)), "{c:?}");
        assert!(plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN).is_empty(), "a balanced map is left alone");
    }

    #[test]
    fn an_expired_owner_loses_its_shards_only_after_the_margin() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        let grants = plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN);
        apply(&mut state, grants);
        // Nodes 1 and 2 keep heartbeating; node 3 stops.
        for now in [3_000, 5_000, 7_000] {
            state.apply(&Command::Heartbeat { node_id: 1, now_ms: now, lease_ms: LEASE });
            state.apply(&Command::Heartbeat { node_id: 2, now_ms: now, lease_ms: LEASE });
        }
        let expiry = 1_000 + LEASE;
        assert!(plan(&state, &voters(&[1, 2, 3]), expiry + MARGIN - 1, MARGIN).is_empty(), "within the margin");
        let grants = plan(&state, &voters(&[1, 2, 3]), expiry + MARGIN, MARGIN);
        assert!(!grants.is_empty() && grants.iter().all(|(_, n)| *n != 3));
        let before = state.last_token;
        apply(&mut state, grants);
        assert_eq!(counts(&state).get(&Some(3)), None);
        assert!(state.shards.iter().filter(|g| g.token > before).count() >= 21, "every moved shard has a new token");
    }

    #[test]
    fn draining_moves_everything_off_and_a_returning_node_gets_its_share_back() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        let grants = plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN);
        apply(&mut state, grants);
        state.apply(&Command::SetDraining { node_id: 2, draining: true, now_ms: 1_000 });
        let grants = plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN);
        apply(&mut state, grants);
        assert_eq!(counts(&state).get(&Some(2)), None);
        state.apply(&Command::SetDraining { node_id: 2, draining: false, now_ms: 1_000 });
        let grants = plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN);
        apply(&mut state, grants);
        assert!(counts(&state).values().all(|&n| (21..=22).contains(&n)), "{:?}", counts(&state));
    }

    #[test]
    fn a_single_operator_move_is_not_undone() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        let grants = plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN);
        apply(&mut state, grants);
        let shard = state.shards_owned_by(1)[0];
        apply(&mut state, vec![(shard, 2)]);
        assert!(plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN).is_empty());
    }

    #[test]
    fn a_removed_voter_or_no_live_node_is_handled() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        let grants = plan(&state, &voters(&[1, 2, 3]), 1_000, MARGIN);
        apply(&mut state, grants);
        let grants = plan(&state, &voters(&[1, 2]), 1_000, MARGIN);
        assert!(grants.iter().all(|(_, n)| *n != 3) && grants.len() >= 21);
        assert!(plan(&state, &voters(&[1, 2, 3]), 1_000_000, MARGIN).is_empty(), "nobody live: nothing moves");
    }

    proptest! {
        /// Whatever the liveness and drain pattern, a plan grants only to
        /// eligible nodes, and after applying it every shard has an eligible owner.
        #[test]
        fn plans_grant_only_to_eligible_nodes_and_leave_no_orphans(
            live in prop::collection::vec(any::<bool>(), 1..6),
            draining in prop::collection::vec(any::<bool>(), 1..6),
            rounds in 1usize..4,
        ) {
            let ids: Vec<NodeId> = (1..=live.len() as u64).collect();
            let mut state = cluster(&ids, 1_000);
            let grants = plan(&state, &voters(&ids), 1_000, MARGIN);
        apply(&mut state, grants);
            let now = 100_000;
            for (i, &id) in ids.iter().enumerate() {
                if live[i] { state.apply(&Command::Heartbeat { node_id: id, now_ms: now, lease_ms: LEASE }); }
                let d = draining.get(i).copied().unwrap_or(false);
                state.apply(&Command::SetDraining { node_id: id, draining: d, now_ms: now });
            }
            let eligible: BTreeSet<NodeId> = ids.iter().enumerate()
                .filter(|(i, _)| live[*i] && !draining.get(*i).copied().unwrap_or(false)).map(|(_, &id)| id).collect();
            for _ in 0..rounds {
                let grants = plan(&state, &voters(&ids), now, MARGIN);
                prop_assert!(grants.iter().all(|(_, n)| eligible.contains(n)));
                apply(&mut state, grants);
            }
            if !eligible.is_empty() {
                prop_assert!(state.shards.iter().all(|g| g.owner.is_some_and(|o| eligible.contains(&o))));
            }
        }
    }
}
