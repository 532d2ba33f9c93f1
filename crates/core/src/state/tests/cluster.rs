//! Heartbeats and shard grants.

use super::*;

#[test]
fn heartbeat_liveness_never_moves_back() {
    let mut state = ClusterState::default();
    state.apply(&Command::Heartbeat { node_id: 3, now_ms: 10_000, lease_ms: 6_000 });
    state.apply(&Command::Heartbeat { node_id: 3, now_ms: 9_000, lease_ms: 6_000 });
    assert_eq!(state.nodes[&3].live_until_ms, 16_000);
    assert_eq!(state.nodes[&3].last_heartbeat_ms, 10_000);
}

#[test]
fn every_grant_takes_a_strictly_greater_token() {
    let mut state = ClusterState::default();
    let mut last = 0;
    for round in 0..5u64 {
        let Response::ShardsAssigned { tokens } =
            state.apply(&Command::AssignShards { now_ms: round, grants: vec![(1, 1), (2, 2)] })
        else {
            panic!()
        };
        for (_, token) in tokens {
            assert!(token > last);
            last = token;
        }
    }
    assert!(matches!(
        state.apply(&Command::AssignShards { now_ms: 9, grants: vec![(SHARD_COUNT, 1)] }),
        Response::Conflict { .. }
    ));
}

#[test]
fn a_direct_grant_away_from_an_owner_that_came_back_is_dropped() {
    let mut state = ClusterState::default();
    state.apply(&Command::AssignShards { now_ms: 1_000, grants: vec![(5, 3), (6, 3)] });
    // Node 3 looked dead to the planner, but its heartbeat committed first.
    state.apply(&Command::Heartbeat { node_id: 3, now_ms: 20_000, lease_ms: 6_000 });
    let before = state.shards[5];
    let response = state.apply(&Command::AssignShards { now_ms: 21_000, grants: vec![(5, 2), (7, 2)] });
    assert_eq!(state.shards[5], before, "shard 5 stays with its live owner, under its token");
    assert_eq!(state.shards[7].owner, Some(2), "an unowned shard is granted as before");
    match response {
        Response::ShardsAssigned { tokens } => assert_eq!(tokens.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [7]),
        other => panic!("{other:?}"),
    }
    // Once its lease has run out, the grant goes through.
    state.apply(&Command::AssignShards { now_ms: 26_001, grants: vec![(5, 2)] });
    assert_eq!(state.shards[5].owner, Some(2));
    assert!(state.shards[5].token > before.token);
}

/// Seed 90885's shape: a revocation stamped long before it commits (a
/// deposed leader's plan, forwarded once its partition heals) counts from
/// the owner's last committed heartbeat, so the shard is not granted again
/// while the owner, which has not applied the revocation, may hold a lease.
#[test]
fn a_revocation_stamped_before_the_owners_last_heartbeat_counts_from_that_heartbeat() {
    use crate::rebalance::{Timing, plan};
    const LEASE: u64 = 2_000;
    const MARGIN: u64 = 1_000;
    let mut state = ClusterState::default();
    for node in [1, 2] {
        state.apply(&Command::Heartbeat { node_id: node, now_ms: 24_000, lease_ms: LEASE });
    }
    state.apply(&Command::AssignShards { now_ms: 24_000, grants: vec![(60, 2)] });
    state.apply(&Command::Heartbeat { node_id: 2, now_ms: 24_688, lease_ms: LEASE });
    state.apply(&Command::RevokeShards { now_ms: 21_907, shards: vec![(60, Some(1))] });
    assert_eq!(state.shards[60].owner, None);
    assert_eq!(state.shards[60].granted_at_ms, 24_688, "the owner's lease may run from its last heartbeat");

    // A later revocation stamped even earlier does not move the time back.
    state.apply(&Command::RevokeShards { now_ms: 20_000, shards: vec![(60, Some(1))] });
    assert_eq!(state.shards[60].granted_at_ms, 24_688);

    let voters = [1, 2].into();
    let at = |now_ms| Timing { now_ms, lease_ms: LEASE, drift_margin_ms: MARGIN };
    for node in [1, 2] {
        state.apply(&Command::Heartbeat { node_id: node, now_ms: 25_900, lease_ms: LEASE });
    }
    assert!(
        !plan(&state, &voters, at(25_973)).grant.iter().any(|(s, _)| *s == 60),
        "granted while node 2's lease from 24,688 may still run"
    );
    assert!(plan(&state, &voters, at(24_688 + LEASE + MARGIN)).grant.contains(&(60, 1)));
}

#[test]
fn forgetting_a_node_counts_its_shards_free_from_its_last_heartbeat() {
    let mut state = ClusterState::default();
    state.apply(&Command::Heartbeat { node_id: 2, now_ms: 10_000, lease_ms: 2_000 });
    state.apply(&Command::AssignShards { now_ms: 10_000, grants: vec![(7, 2)] });
    state.apply(&Command::Heartbeat { node_id: 2, now_ms: 12_500, lease_ms: 2_000 });
    // The removal was stamped on a node whose call committed late.
    state.apply(&Command::ForgetNode { node_id: 2, now_ms: 11_000 });
    assert_eq!(state.shards[7].owner, None);
    assert_eq!(state.shards[7].granted_at_ms, 12_500);
    assert!(!state.nodes.contains_key(&2));
}
