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
