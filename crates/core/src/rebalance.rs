//! The leader's shard rebalancer, as a pure function of the replicated
//! state, the current voters and the leader's clock.
//!
//! A shard never has two senders: it moves in two steps unless its owner is
//! known to have stopped. Rules, in order:
//! 1. A shard whose owner's liveness expired more than `drift_margin_ms`
//!    ago (or that was never granted) is granted at once to the eligible
//!    node owning the fewest shards: the old owner's own lease lapsed first.
//! 2. A shard whose owner is alive but should not keep it (draining, no
//!    longer a voter) is *revoked*: it gets a new token and no owner, so the
//!    owner stops as soon as it applies the revocation, and its late
//!    outcomes are stale.
//! 3. A revoked shard is granted again once `lease_ms + drift_margin_ms`
//!    have passed since the revocation: by then the old owner either applied
//!    the revocation or saw its lease lapse. It goes to the node the
//!    revocation named (an operator's move) when that node is eligible.
//! 4. When an eligible node owns fewer than half its fair share (a node
//!    joined or came back), shards are revoked from the most loaded nodes
//!    until no two differ by more than one; rule 3 hands them over. Smaller
//!    imbalances, such as an operator's single move, are left alone.
//!
//! Eligible means: a voter, with a liveness record that has not expired,
//! not draining. With no eligible node nothing moves.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{NodeId, SHARD_COUNT, Shard};
use crate::state::ClusterState;

/// What the leader should propose: revocations first, then grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub revoke: Vec<(Shard, Option<NodeId>)>,
    pub grant: Vec<(Shard, NodeId)>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.revoke.is_empty() && self.grant.is_empty()
    }
}

/// Timing the plan depends on.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub now_ms: u64,
    pub lease_ms: u64,
    pub drift_margin_ms: u64,
}

pub fn plan(state: &ClusterState, voters: &BTreeSet<NodeId>, timing: Timing) -> Plan {
    let Timing { now_ms, lease_ms, drift_margin_ms } = timing;
    let live =
        |node: &NodeId| state.nodes.get(node).is_some_and(|n| n.live_until_ms.saturating_add(drift_margin_ms) > now_ms);
    let eligible: BTreeSet<NodeId> =
        voters.iter().copied().filter(|n| live(n) && state.nodes.get(n).is_some_and(|r| !r.draining)).collect();
    let mut plan = Plan::default();
    if eligible.is_empty() {
        return plan;
    }
    let mut owned: BTreeMap<NodeId, Vec<Shard>> = eligible.iter().map(|&n| (n, Vec::new())).collect();
    let mut to_grant = Vec::new();
    for shard in 0..SHARD_COUNT {
        let grant = state.shards[shard as usize];
        match grant.owner {
            Some(owner) if eligible.contains(&owner) => owned.entry(owner).or_default().push(shard),
            // Alive but unwanted here: stop it first.
            Some(owner) if live(&owner) => {
                plan.revoke.push((shard, None));
            }
            // Its lease lapsed long ago: hand it over at once.
            Some(_) => to_grant.push((shard, None)),
            None if grant.token == 0 => to_grant.push((shard, None)),
            None if now_ms >= grant.granted_at_ms.saturating_add(lease_ms + drift_margin_ms) => {
                to_grant.push((shard, grant.next_owner));
            }
            None => {} // revoked recently: wait until the old owner has stopped
        }
    }
    for (shard, hint) in to_grant {
        let target = hint.filter(|n| eligible.contains(n)).unwrap_or_else(|| least_loaded(&owned));
        owned.get_mut(&target).expect("eligible node").push(shard);
        plan.grant.push((shard, target));
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
            if plan.grant.iter().any(|(s, _)| *s == shard) {
                // Granted in this very plan, so nobody sends for it yet.
                plan.grant.retain(|(s, _)| *s != shard);
                plan.grant.push((shard, target));
            } else {
                plan.revoke.push((shard, Some(target)));
            }
        }
    }
    plan.revoke.sort_unstable();
    plan.grant.sort_unstable();
    plan
}

/// Nodes the state keeps a liveness record of although they are no member
/// of the cluster (no voter, no learner) and their liveness expired more
/// than `drift_margin_ms` ago: removed nodes whose removal did not also
/// forget them (the leader removed itself, or the removal answered late).
/// The leader forgets them; their shards move by [`plan`] either way.
pub fn departed(state: &ClusterState, members: &BTreeSet<NodeId>, timing: Timing) -> Vec<NodeId> {
    state
        .nodes
        .values()
        .filter(|record| !members.contains(&record.id))
        .filter(|record| record.live_until_ms.saturating_add(timing.drift_margin_ms) <= timing.now_ms)
        .map(|record| record.id)
        .collect()
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

    fn at(now_ms: u64) -> Timing {
        Timing { now_ms, lease_ms: LEASE, drift_margin_ms: MARGIN }
    }

    fn cluster(nodes: &[NodeId], now_ms: u64) -> ClusterState {
        let mut state = ClusterState::default();
        for &n in nodes {
            state.apply(&Command::Heartbeat { node_id: n, now_ms, lease_ms: LEASE });
        }
        state
    }

    fn heartbeat(state: &mut ClusterState, nodes: &[NodeId], now_ms: u64) {
        for &n in nodes {
            state.apply(&Command::Heartbeat { node_id: n, now_ms, lease_ms: LEASE });
        }
    }

    /// Applies a plan as the leader proposes it: revocations, then grants.
    fn apply(state: &mut ClusterState, plan: Plan, now_ms: u64) {
        if !plan.revoke.is_empty() {
            let r = state.apply(&Command::RevokeShards { now_ms, shards: plan.revoke });
            assert!(matches!(r, Response::ShardsAssigned { .. }));
        }
        if !plan.grant.is_empty() {
            let r = state.apply(&Command::AssignShards { now_ms, grants: plan.grant });
            assert!(matches!(r, Response::ShardsAssigned { .. }));
        }
    }

    fn step(state: &mut ClusterState, voters: &[NodeId], now_ms: u64) -> Plan {
        let p = plan(state, &voters.iter().copied().collect(), at(now_ms));
        apply(state, p.clone(), now_ms);
        p
    }

    #[test]
    fn departed_names_non_members_only_once_their_liveness_has_expired() {
        let state = cluster(&[1, 2, 3, 4], 0);
        let members: BTreeSet<NodeId> = [1, 2, 3].into();
        let expired = LEASE + MARGIN;
        assert_eq!(departed(&state, &members, at(expired - 1)), Vec::<NodeId>::new(), "node 4 may still be live");
        assert_eq!(departed(&state, &members, at(expired)), vec![4]);
        let everyone: BTreeSet<NodeId> = [1, 2, 3, 4].into();
        assert!(departed(&state, &everyone, at(expired * 10)).is_empty(), "a member is never departed, even dead");
    }

    fn counts(state: &ClusterState) -> BTreeMap<Option<NodeId>, usize> {
        let mut c = BTreeMap::new();
        for g in &state.shards {
            *c.entry(g.owner).or_default() += 1;
        }
        c
    }

    #[test]
    fn a_fresh_cluster_spreads_all_shards_evenly_at_once() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        step(&mut state, &[1, 2, 3], 1_000);
        let c = counts(&state);
        assert_eq!(c.get(&None), None);
        assert!(c.values().all(|&n| (21..=22).contains(&n)), "{c:?}");
        assert!(step(&mut state, &[1, 2, 3], 1_000).is_empty(), "a balanced map is left alone");
    }

    #[test]
    fn an_expired_owner_loses_its_shards_only_after_the_margin_and_then_at_once() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        step(&mut state, &[1, 2, 3], 1_000);
        heartbeat(&mut state, &[1, 2], 7_000);
        let expiry = 1_000 + LEASE;
        assert!(step(&mut state, &[1, 2, 3], expiry + MARGIN - 1).is_empty(), "within the margin");
        let before = state.last_token;
        let moved = step(&mut state, &[1, 2, 3], expiry + MARGIN);
        assert!(moved.revoke.is_empty(), "an expired owner needs no revocation");
        assert!(moved.grant.len() >= 21 && moved.grant.iter().all(|(_, n)| *n != 3));
        assert_eq!(counts(&state).get(&Some(3)), None);
        assert!(state.shards.iter().filter(|g| g.token > before).count() >= 21);
    }

    #[test]
    fn draining_revokes_first_and_grants_only_after_the_old_lease_lapsed() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        step(&mut state, &[1, 2, 3], 1_000);
        state.apply(&Command::SetDraining { node_id: 2, draining: true, now_ms: 1_000 });
        let first = step(&mut state, &[1, 2, 3], 2_000);
        assert!(first.grant.is_empty() && first.revoke.len() >= 21, "{first:?}");
        assert_eq!(counts(&state).get(&Some(2)), None, "node 2 owns nothing once revoked");
        heartbeat(&mut state, &[1, 2, 3], 5_000);
        assert!(step(&mut state, &[1, 2, 3], 2_000 + LEASE + MARGIN - 1).grant.is_empty(), "too early to hand over");
        let later = step(&mut state, &[1, 2, 3], 2_000 + LEASE + MARGIN);
        assert!(later.grant.iter().all(|(_, n)| *n != 2) && later.grant.len() >= 21);
        assert_eq!(counts(&state).get(&None), None);
    }

    #[test]
    fn a_returning_node_gets_its_share_back_in_two_steps() {
        let mut state = cluster(&[1, 2], 1_000);
        step(&mut state, &[1, 2], 1_000);
        heartbeat(&mut state, &[1, 2, 3], 2_000);
        let revoked = step(&mut state, &[1, 2, 3], 2_000);
        assert!(revoked.revoke.iter().all(|(_, hint)| *hint == Some(3)) && revoked.revoke.len() >= 20);
        heartbeat(&mut state, &[1, 2, 3], 8_000);
        step(&mut state, &[1, 2, 3], 2_000 + LEASE + MARGIN);
        assert!(counts(&state).values().all(|&n| (21..=22).contains(&n)), "{:?}", counts(&state));
    }

    #[test]
    fn an_operator_move_is_honoured_and_not_undone() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        step(&mut state, &[1, 2, 3], 1_000);
        let shard = state.shards_owned_by(1)[0];
        state.apply(&Command::RevokeShards { now_ms: 1_000, shards: vec![(shard, Some(2))] });
        heartbeat(&mut state, &[1, 2, 3], 7_000);
        step(&mut state, &[1, 2, 3], 1_000 + LEASE + MARGIN);
        assert_eq!(state.shards[shard as usize].owner, Some(2));
        assert!(step(&mut state, &[1, 2, 3], 1_000 + LEASE + MARGIN).is_empty());
    }

    #[test]
    fn nobody_live_means_nothing_moves() {
        let mut state = cluster(&[1, 2, 3], 1_000);
        step(&mut state, &[1, 2, 3], 1_000);
        assert!(step(&mut state, &[1, 2, 3], 1_000_000).is_empty());
    }

    proptest! {
        /// Whatever the liveness and drain pattern over several rounds: a
        /// plan grants only to eligible nodes, and never grants a shard whose
        /// previous owner may still hold a valid lease.
        #[test]
        fn plans_never_hand_a_shard_to_a_second_sender(
            rounds in prop::collection::vec((prop::collection::vec(any::<bool>(), 4), prop::collection::vec(any::<bool>(), 4), 0u64..4_000), 1..8),
        ) {
            let ids: Vec<NodeId> = vec![1, 2, 3, 4];
            let mut state = cluster(&ids, 1_000);
            step(&mut state, &ids, 1_000);
            let mut now = 1_000;
            for (beating, draining, advance) in rounds {
                now += advance;
                for (i, &id) in ids.iter().enumerate() {
                    if beating[i] { state.apply(&Command::Heartbeat { node_id: id, now_ms: now, lease_ms: LEASE }); }
                    state.apply(&Command::SetDraining { node_id: id, draining: draining[i], now_ms: now });
                }
                let before = state.clone();
                let p = plan(&state, &ids.iter().copied().collect(), at(now));
                for (shard, target) in &p.grant {
                    prop_assert!(before.nodes[target].live_until_ms + MARGIN > now && !before.nodes[target].draining);
                    let old = before.shards[*shard as usize];
                    if let Some(owner) = old.owner {
                        // Only an owner whose lease lapsed (plus margin) loses a shard by a direct grant.
                        prop_assert!(before.nodes.get(&owner).is_none_or(|n| n.live_until_ms + MARGIN <= now));
                    } else if old.token > 0 {
                        prop_assert!(now >= old.granted_at_ms + LEASE + MARGIN);
                    }
                }
                apply(&mut state, p, now);
            }
        }
    }
}
