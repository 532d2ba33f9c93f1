//! Operational events: emitted by apply to the endpoints that receive
//! hookraft's own events, never about those endpoints themselves.

use super::*;
use crate::ids::SourceId;
use serde_json::Value;

/// A state with endpoint `a` (every type, fails) and an operational endpoint `ops`.
fn with_ops(seed: u64, ops_types: Option<&[&str]>) -> (ClusterState, StdRng, EndpointId, EndpointId) {
    let mut rng = StdRng::seed_from_u64(seed);
    let a = endpoint(&mut rng, None);
    let mut ops = endpoint(&mut rng, ops_types);
    ops.sources = vec![SourceId::OPERATIONAL];
    let state = state_with(&[a.clone(), ops.clone()]);
    (state, rng, a.id, ops.id)
}

/// The operational events in the state, as (type, payload JSON).
fn emitted_events(state: &ClusterState) -> Vec<(String, Value)> {
    state
        .events
        .values()
        .filter(|e| e.inbound.as_ref().is_some_and(|i| i.source_id == SourceId::OPERATIONAL))
        .map(|e| {
            let text = String::from_utf8(e.payload.as_bytes().to_vec()).expect("clear JSON");
            (e.event_type.to_string(), serde_json::from_str(&text).expect("valid JSON"))
        })
        .collect()
}

#[test]
fn a_dead_delivery_and_a_disabled_endpoint_are_told_to_the_operational_endpoint() {
    let (mut state, mut rng, a, ops) = with_ops(1, None);
    let (id, _) =
        created(state.apply(&Command::IngestEvents { now_ms: 5, events: vec![event(&mut rng, "t", None, None)] }))
            .into_iter()
            .find(|(_, e)| *e == a)
            .expect("a's delivery");
    let dead = outcome(&state, &id, Some(500), Decision::Dead { reason: "attempts \"exhausted\"".into() });
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 10, outcomes: vec![dead] });
    let events = emitted_events(&state);
    assert_eq!(events.len(), 1, "{events:?}");
    let (kind, payload) = &events[0];
    assert_eq!(kind, "delivery.dead");
    assert_eq!(payload["data"]["delivery_id"], id.to_string());
    assert_eq!(payload["data"]["reason"], "attempts \"exhausted\"");
    assert_eq!(state.to_wake().len(), 1, "its delivery is handed to the node to wake");
    assert_eq!(state.to_wake()[0].1, ops);

    let patch = EndpointPatch { disabled: Some(true), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id: a, patch, now_ms: 20 });
    let patch = EndpointPatch { disabled: Some(false), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id: a, patch, now_ms: 30 });
    let kinds: Vec<String> = emitted_events(&state).into_iter().map(|(k, _)| k).collect();
    assert_eq!(kinds, ["delivery.dead", "endpoint.disabled", "endpoint.enabled"]);
    assert_eq!(state.apply(&Command::Noop), Response::Ok);
    assert!(state.to_wake().is_empty(), "each apply hands over only its own");
}

#[test]
fn nothing_is_told_about_the_operational_endpoint_itself_nor_without_a_receiver() {
    let (mut state, mut rng, a, ops) = with_ops(2, Some(&["endpoint.disabled"]));
    // Its own failures: no event about them (no loop).
    let results =
        created(state.apply(&Command::IngestEvents { now_ms: 5, events: vec![event(&mut rng, "t", None, None)] }));
    let (a_delivery, _) = results.iter().find(|(_, e)| *e == a).copied().expect("a's");
    let patch = EndpointPatch { disabled: Some(true), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id: ops, patch, now_ms: 6 });
    assert!(emitted_events(&state).is_empty(), "no event about the operational endpoint");
    // A kind it does not subscribe to: not even stored.
    let dead = outcome(&state, &a_delivery, Some(500), Decision::Dead { reason: "r".into() });
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 10, outcomes: vec![dead] });
    assert!(emitted_events(&state).is_empty());
}

#[test]
fn shard_moves_and_down_nodes_are_told_and_every_replica_emits_the_same() {
    let (mut state, _, _, _) = with_ops(3, Some(&["shard.moved", "node.down"]));
    state.apply(&Command::Heartbeat { node_id: 2, now_ms: 10, lease_ms: 100 });
    let mut replica = decoded(&state);
    let commands = [
        Command::AssignShards { now_ms: 20, grants: vec![(4, 2), (5, 2)] },
        Command::RevokeShards { now_ms: 500, shards: vec![(4, Some(NODE)), (5, None)] },
    ];
    for command in &commands {
        state.apply(command);
        replica.apply(command);
    }
    let events = emitted_events(&state);
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["shard.moved", "node.down"]);
    assert_eq!(events[0].1["data"]["shards"][1]["owner"], 2);
    assert_eq!(events[1].1["data"]["node_id"], 2);
    assert_eq!(replica, state, "replicas derive the same ids and records");
}
