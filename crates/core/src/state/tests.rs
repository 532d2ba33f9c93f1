//! Tests of `ClusterState::apply`: fan-out, idempotency, fencing, outcomes,
//! replay, and determinism across replicas.

use super::*;
use crate::command::{EndpointPatch, IngestResult, NewEvent, Outcome, ReplayTarget};
use crate::model::{AttemptRecord, DeliveryState, TimelineEntry};
use crate::retry::Decision;
use crate::signing::Secret;
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::BTreeSet;

const NODE: NodeId = 1;

fn endpoint(rng: &mut StdRng, event_types: Option<&[&str]>) -> Endpoint {
    let secret = Secret::from_key(vec![7; 32]).unwrap();
    let mut endpoint =
        Endpoint::new(EndpointId::generate(1_000, rng), "https://example.com/hook".into(), secret, 1_000);
    endpoint.event_types = event_types.map(|t| t.iter().map(|s| s.to_string()).collect());
    endpoint
}

fn event(rng: &mut StdRng, event_type: &str, key: Option<&str>, targets: Option<Vec<EndpointId>>) -> NewEvent {
    NewEvent {
        id: EventId::generate(2_000, rng),
        event_type: event_type.into(),
        payload: "{\"n\":1}".into(),
        idempotency_key: key.map(str::to_string),
        endpoint_ids: targets,
    }
}

/// A state with all shards granted to `NODE` and the given endpoints.
fn state_with(endpoints: &[Endpoint]) -> ClusterState {
    let mut state = ClusterState::default();
    let grants = (0..SHARD_COUNT).map(|s| (s, NODE)).collect();
    state.apply(&Command::AssignShards { now_ms: 1, grants });
    for e in endpoints {
        assert_eq!(state.apply(&Command::RegisterEndpoint { endpoint: Box::new(e.clone()) }), Response::Ok);
    }
    state
}

/// A state with one endpoint `a` (every event type) and one pending
/// delivery to it, of an event received at 5 ms.
fn one_pending(seed: u64) -> (ClusterState, Endpoint, DeliveryId) {
    let mut rng = StdRng::seed_from_u64(seed);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let (id, _) =
        created(state.apply(&Command::IngestEvents { now_ms: 5, events: vec![event(&mut rng, "a", None, None)] }))
            .remove(0);
    (state, a, id)
}

fn created(response: Response) -> Vec<(DeliveryId, EndpointId)> {
    match response {
        Response::Ingested { results } => match results.into_iter().next() {
            Some(IngestResult::Created { deliveries, .. }) => deliveries,
            other => panic!("expected Created, got {other:?}"),
        },
        other => panic!("expected Ingested, got {other:?}"),
    }
}

fn outcome(state: &ClusterState, delivery: &DeliveryId, status: Option<u16>, decision: Decision) -> Outcome {
    let endpoint = &state.deliveries[delivery].endpoint_id;
    Outcome {
        delivery_id: *delivery,
        shard: endpoint.shard(),
        token: state.grant_for(endpoint).token,
        attempt: AttemptRecord {
            node_id: NODE,
            fencing_token: state.grant_for(endpoint).token,
            // Each attempt of a delivery starts at its own time (as the
            // actor's do), so its outcome is not taken for a repeat.
            started_at_ms: 3_000 + u64::from(state.deliveries[delivery].attempt_count),
            latency_ms: 5,
            status_code: status,
            error: None,
            response_excerpt: None,
        },
        decision,
        breaker: None,
    }
}

#[test]
fn fan_out_follows_event_types_and_skips_disabled_endpoints() {
    let mut rng = StdRng::seed_from_u64(1);
    let a = endpoint(&mut rng, Some(&["a"]));
    let ab = endpoint(&mut rng, Some(&["a", "b"]));
    let all = endpoint(&mut rng, None);
    let mut off = endpoint(&mut rng, None);
    off.disabled = true;
    let mut state = state_with(&[a.clone(), ab.clone(), all.clone(), off.clone()]);
    assert_eq!(fanned_out_to(&mut state, &mut rng, "a"), BTreeSet::from([a.id, ab.id, all.id]));
    assert_eq!(fanned_out_to(&mut state, &mut rng, "b"), BTreeSet::from([ab.id, all.id]));
    state.check_invariants().unwrap();
}

/// The endpoints one event of `event_type` was delivered to.
fn fanned_out_to(state: &mut ClusterState, rng: &mut StdRng, event_type: &str) -> BTreeSet<EndpointId> {
    let events = vec![event(rng, event_type, None, None)];
    created(state.apply(&Command::IngestEvents { now_ms: 5, events })).into_iter().map(|(_, e)| e).collect()
}

#[test]
fn fan_out_follows_every_change_of_the_endpoints_and_a_decoded_state() {
    let mut rng = StdRng::seed_from_u64(2);
    let a = endpoint(&mut rng, Some(&["a"]));
    let b = endpoint(&mut rng, Some(&["b", "b"]));
    let all = endpoint(&mut rng, None);
    let mut state = state_with(&[a.clone(), b.clone(), all.clone()]);
    let patch = |state: &mut ClusterState, id: EndpointId, patch: EndpointPatch| {
        assert_eq!(state.apply(&Command::UpdateEndpoint { id, patch, now_ms: 6 }), Response::Ok);
    };
    assert_eq!(fanned_out_to(&mut state, &mut rng, "a"), BTreeSet::from([a.id, all.id]));
    assert_eq!(fanned_out_to(&mut state, &mut rng, "b"), BTreeSet::from([b.id, all.id]));

    patch(
        &mut state,
        b.id,
        EndpointPatch { event_types: Some(Some(vec!["a".into(), "b".into()])), ..Default::default() },
    );
    assert_eq!(fanned_out_to(&mut state, &mut rng, "a"), BTreeSet::from([a.id, b.id, all.id]), "b's new types");
    patch(&mut state, a.id, EndpointPatch { disabled: Some(true), ..Default::default() });
    assert_eq!(fanned_out_to(&mut state, &mut rng, "a"), BTreeSet::from([b.id, all.id]), "a disabled");
    patch(&mut state, a.id, EndpointPatch { disabled: Some(false), ..Default::default() });
    assert_eq!(fanned_out_to(&mut state, &mut rng, "a"), BTreeSet::from([a.id, b.id, all.id]), "a enabled");
    assert_eq!(state.apply(&Command::DeleteEndpoint { id: all.id, now_ms: 7 }), Response::Ok);
    assert_eq!(fanned_out_to(&mut state, &mut rng, "a"), BTreeSet::from([a.id, b.id]), "all deleted");
    let c = endpoint(&mut rng, Some(&["c"]));
    assert_eq!(state.apply(&Command::RegisterEndpoint { endpoint: Box::new(c.clone()) }), Response::Ok);
    assert_eq!(fanned_out_to(&mut state, &mut rng, "c"), BTreeSet::from([c.id]), "c registered");

    // A state decoded from its encoding (a snapshot) holds no index: it
    // builds one from its endpoints.
    let bytes = bincode::serde::encode_to_vec(&state, bincode::config::standard()).expect("encodes");
    let (mut decoded, _): (ClusterState, usize) =
        bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).expect("decodes");
    assert_eq!(fanned_out_to(&mut decoded, &mut rng, "a"), BTreeSet::from([a.id, b.id]));

    // b answers 410 Gone: disabled, out of the fan-out.
    let pending = state.active[&b.id].iter().next().copied().expect("b has deliveries");
    let gone = outcome(&state, &pending, Some(410), Decision::Gone);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 8, outcomes: vec![gone] });
    assert!(state.endpoints[&b.id].disabled);
    assert_eq!(fanned_out_to(&mut state, &mut rng, "a"), BTreeSet::from([a.id]), "b gone");
    state.check_invariants().unwrap();
}

#[test]
fn explicit_targets_ignore_types_and_dead_letter_disabled_endpoints() {
    let mut rng = StdRng::seed_from_u64(2);
    let a = endpoint(&mut rng, Some(&["a"]));
    let mut off = endpoint(&mut rng, None);
    off.disabled = true;
    let mut state = state_with(&[a.clone(), off.clone()]);
    let new = event(&mut rng, "zzz", None, Some(vec![a.id, off.id, a.id]));
    let deliveries = created(state.apply(&Command::IngestEvents { now_ms: 5, events: vec![new] }));
    assert_eq!(deliveries.len(), 2, "duplicate targets collapse");
    for (id, endpoint) in &deliveries {
        let expected = if endpoint == &off.id { DeliveryState::Dead } else { DeliveryState::Pending };
        assert_eq!(state.deliveries[id].state, expected);
        assert_eq!(state.deliveries[id].initial_state, expected);
    }
    state.check_invariants().unwrap();
}

#[test]
fn unknown_explicit_target_creates_nothing() {
    let mut rng = StdRng::seed_from_u64(3);
    let mut state = state_with(&[]);
    let ghost = EndpointId::generate(1, &mut rng);
    let response = state
        .apply(&Command::IngestEvents { now_ms: 5, events: vec![event(&mut rng, "a", Some("k"), Some(vec![ghost]))] });
    assert_eq!(response, Response::Ingested { results: vec![IngestResult::UnknownEndpoint { endpoint_id: ghost }] });
    assert!(state.events.is_empty() && state.idempotency.is_empty());
}

#[test]
fn repeated_idempotency_key_in_one_batch_or_later_creates_one_event() {
    let mut rng = StdRng::seed_from_u64(4);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(&[a]);
    let first = event(&mut rng, "a", Some("key-1"), None);
    let second = event(&mut rng, "a", Some("key-1"), None);
    let Response::Ingested { results } =
        state.apply(&Command::IngestEvents { now_ms: 5, events: vec![first.clone(), second] })
    else {
        panic!()
    };
    assert!(matches!(results[0], IngestResult::Created { .. }));
    assert_eq!(results[1], IngestResult::Duplicate { event_id: first.id });
    assert_eq!(state.events.len(), 1);
    assert_eq!(state.deliveries.len(), 1);
}

#[test]
fn retry_then_success_records_every_attempt_and_leaves_the_active_index() {
    let (mut state, a, id) = one_pending(5);
    let endpoint_id = a.id;
    for _ in 0..2 {
        let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 9_000 });
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: vec![o] });
        assert_eq!(state.deliveries[&id].state, DeliveryState::Retrying);
        assert_eq!(state.deliveries[&id].next_attempt_at_ms.get(), Some(9_000));
    }
    let o = outcome(&state, &id, Some(200), Decision::Delivered);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 7, outcomes: vec![o] });
    let d = &state.deliveries[&id];
    assert_eq!(d.state, DeliveryState::Delivered);
    assert_eq!(d.attempt_count, 3);
    let kinds: Vec<_> = d.timeline().iter().map(std::mem::discriminant).collect();
    assert_eq!(kinds.len(), 1 + 2 * 2 + 2);
    assert!(!state.active.contains_key(&endpoint_id));
    state.check_invariants().unwrap();
}

#[test]
fn outcome_with_a_stale_token_or_wrong_node_is_rejected_and_counted() {
    let (mut state, a, id) = one_pending(6);
    let old = outcome(&state, &id, Some(200), Decision::Delivered);
    // The shard moves to node 2: the old grant's outcomes are now stale.
    state.apply(&Command::AssignShards { now_ms: 8, grants: vec![(a.id.shard(), 2)] });
    let response = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 9, outcomes: vec![old.clone()] });
    assert_eq!(response, Response::OutcomesApplied { applied: 0, stale: 1, ignored: 0 });
    // The new token from the wrong node is stale too.
    let mut wrong_node = outcome(&state, &id, Some(200), Decision::Delivered);
    wrong_node.token = state.grant_for(&a.id).token;
    let response = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 9, outcomes: vec![wrong_node] });
    assert_eq!(response, Response::OutcomesApplied { applied: 0, stale: 1, ignored: 0 });
    assert_eq!(state.outcomes_rejected_stale, 2);
    assert_eq!(state.deliveries[&id].state, DeliveryState::Pending);
    assert_eq!(state.deliveries[&id].timeline().len(), 1, "a stale outcome writes nothing");
}

#[test]
fn gone_disables_the_endpoint_and_dead_letters_its_queue() {
    let mut rng = StdRng::seed_from_u64(7);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let events = (0..3).map(|_| event(&mut rng, "a", None, None)).collect();
    state.apply(&Command::IngestEvents { now_ms: 5, events });
    let first = *state.active[&a.id].iter().next().unwrap();
    let o = outcome(&state, &first, Some(410), Decision::Gone);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: vec![o] });
    assert!(state.endpoints[&a.id].disabled);
    assert!(state.deliveries.values().all(|d| d.state == DeliveryState::Dead));
    assert!(!state.active.contains_key(&a.id));
    // Replay is refused until the endpoint is enabled again.
    let replay = Command::Replay { now_ms: 7, target: ReplayTarget::Delivery(first) };
    assert!(matches!(state.apply(&replay), Response::Conflict { .. }));
    let enable = EndpointPatch { disabled: Some(false), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id: a.id, patch: enable, now_ms: 8 });
    assert!(matches!(state.apply(&replay), Response::Replayed { .. }));
    assert_eq!(state.deliveries[&first].state, DeliveryState::Pending);
    assert_eq!(state.deliveries[&first].cycle_attempts, 0);
    state.check_invariants().unwrap();
}

#[test]
fn bulk_replay_takes_dead_deliveries_in_the_window_only() {
    let mut rng = StdRng::seed_from_u64(8);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    for now_ms in [100, 200, 300] {
        let id =
            created(state.apply(&Command::IngestEvents { now_ms, events: vec![event(&mut rng, "a", None, None)] }))
                .remove(0)
                .0;
        let o = outcome(&state, &id, Some(500), Decision::Dead { reason: "attempts exhausted".into() });
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms, outcomes: vec![o] });
    }
    let target = |since_ms, until_ms| ReplayTarget::EndpointDead { endpoint_id: a.id, since_ms, until_ms };
    let Response::Replayed { deliveries } =
        state.apply(&Command::Replay { now_ms: 400, target: target(Some(150), Some(300)) })
    else {
        panic!()
    };
    assert_eq!(deliveries.len(), 1);
    let Response::Replayed { deliveries } = state.apply(&Command::Replay { now_ms: 400, target: target(None, None) })
    else {
        panic!()
    };
    assert_eq!(deliveries.len(), 2, "the one replayed already is no longer dead");
    assert_eq!(state.active[&a.id].len(), 3);
    let replayed = state.deliveries.values().next().unwrap();
    assert!(matches!(replayed.history.last(), Some(TimelineEntry::Replayed { .. })));
    state.check_invariants().unwrap();
}

#[test]
fn timeline_stays_bounded_and_keeps_received_first() {
    let (mut state, _, id) = one_pending(9);
    for i in 0..2_000 {
        let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: i });
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: i, outcomes: vec![o] });
    }
    let timeline = state.deliveries[&id].timeline();
    assert_eq!(timeline.len(), crate::model::TIMELINE_ENTRIES_MAX);
    assert!(matches!(timeline[0], TimelineEntry::Received { .. }));
    let TimelineEntry::Truncated { dropped, .. } = timeline[1] else { panic!("expected a truncation marker") };
    assert_eq!(dropped as usize + timeline.len() - 1, 1 + 2 * 2_000);
}

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

/// A random command drawn against the current state.
fn random_command(state: &ClusterState, rng: &mut StdRng, pick: u8, now_ms: u64) -> Command {
    use rand::RngExt;
    let endpoint_ids: Vec<_> = state.endpoints.keys().cloned().collect();
    let delivery_ids: Vec<_> = state.deliveries.keys().cloned().collect();
    match pick % 6 {
        0 => {
            let types: Option<&[&str]> = if rng.random_bool(0.5) { Some(&["a"]) } else { None };
            Command::RegisterEndpoint { endpoint: Box::new(endpoint(rng, types)) }
        }
        1 | 2 => Command::IngestEvents {
            now_ms,
            events: (0..3).map(|i| event(rng, "a", (i == 0).then_some("dup"), None)).collect(),
        },
        3 if !delivery_ids.is_empty() => {
            let id = &delivery_ids[rng.random_range(0..delivery_ids.len())];
            let decision = match rng.random_range(0..4) {
                0 => Decision::Delivered,
                1 => Decision::Retry { at_ms: now_ms + 10 },
                2 => Decision::Dead { reason: "x".into() },
                _ => Decision::Gone,
            };
            Command::RecordOutcomes { node_id: NODE, now_ms, outcomes: vec![outcome(state, id, Some(500), decision)] }
        }
        4 if !endpoint_ids.is_empty() => {
            let id = endpoint_ids[rng.random_range(0..endpoint_ids.len())];
            if rng.random_bool(0.5) {
                let mut patch = EndpointPatch { disabled: Some(rng.random_bool(0.5)), ..Default::default() };
                if rng.random_bool(0.5) {
                    let types = [None, Some(vec!["a".to_string()]), Some(vec!["b".to_string()])];
                    patch.event_types = Some(types[rng.random_range(0..types.len())].clone());
                }
                Command::UpdateEndpoint { id, patch, now_ms }
            } else {
                Command::Replay {
                    now_ms,
                    target: ReplayTarget::EndpointDead { endpoint_id: id, since_ms: None, until_ms: None },
                }
            }
        }
        5 if !endpoint_ids.is_empty() => {
            Command::DeleteEndpoint { id: endpoint_ids[rng.random_range(0..endpoint_ids.len())], now_ms }
        }
        _ => Command::Heartbeat { node_id: NODE, now_ms, lease_ms: 10 },
    }
}

proptest! {
    /// Two replicas applying the same commands hold equal states, and the
    /// invariants tying the maps together hold after every command.
    #[test]
    fn replicas_applying_the_same_log_agree_and_keep_invariants(seed in any::<u64>(), picks in prop::collection::vec(any::<u8>(), 1..60)) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut leader = state_with(&[]);
        let mut follower = leader.clone();
        for (i, pick) in picks.into_iter().enumerate() {
            let command = random_command(&leader, &mut rng, pick, 10 + i as u64);
            let a = leader.apply(&command);
            let b = follower.apply(&command);
            prop_assert_eq!(a, b);
            if pick % 7 == 0 {
                // The follower installs the leader's state as a snapshot:
                // decoded, it holds none of the leader's derived indexes.
                let bytes = bincode::serde::encode_to_vec(&leader, bincode::config::standard()).expect("encodes");
                follower = bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).expect("decodes").0;
            }
            prop_assert!(leader.check_invariants().is_ok(), "{:?}", leader.check_invariants());
        }
        prop_assert_eq!(&leader, &follower);
    }
}

#[test]
fn a_batch_applies_its_commands_in_order_and_answers_each() {
    let mut rng = StdRng::seed_from_u64(10);
    let a = endpoint(&mut rng, None);
    let mut batched = state_with(&[]);
    let mut one_by_one = batched.clone();
    let commands = vec![
        Command::RegisterEndpoint { endpoint: Box::new(a.clone()) },
        Command::IngestEvents { now_ms: 5, events: vec![event(&mut rng, "a", Some("k"), None)] },
        Command::DeleteEndpoint { id: a.id, now_ms: 6 },
        Command::DeleteEndpoint { id: a.id, now_ms: 7 },
    ];
    let expected: Vec<Response> = commands.iter().map(|c| one_by_one.apply(c)).collect();
    assert_eq!(batched.apply(&Command::Batch(commands)), Response::Batch(expected));
    assert_eq!(batched, one_by_one);
    assert!(matches!(batched.deliveries.values().next().map(|d| d.state), Some(DeliveryState::Dead)));
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

/// The encoding a delivery had while its `Received` entry was stored: the
/// snapshot format must not change with the in-memory form.
#[derive(serde::Serialize)]
#[serde(rename = "Delivery")]
struct DeliveryAsStored {
    id: DeliveryId,
    event_id: EventId,
    endpoint_id: EndpointId,
    state: DeliveryState,
    initial_state: DeliveryState,
    attempt_count: u32,
    cycle_attempts: u32,
    cycle_started_at_ms: u64,
    next_attempt_at_ms: Option<u64>,
    created_at_ms: u64,
    updated_at_ms: u64,
    timeline: Vec<TimelineEntry>,
}

#[test]
fn a_delivery_encodes_with_its_received_entry_and_decodes_to_the_same_delivery() {
    let (mut state, _, id) = one_pending(11);
    let pending = state.deliveries[&id].as_ref().clone();
    assert!(pending.history.is_empty(), "a pending delivery stores no timeline");
    let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 9_000 });
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: vec![o] });
    let retrying = state.deliveries[&id].as_ref().clone();
    for d in [pending, retrying] {
        let stored = DeliveryAsStored {
            id: d.id,
            event_id: d.event_id,
            endpoint_id: d.endpoint_id,
            state: d.state,
            initial_state: d.initial_state,
            attempt_count: d.attempt_count,
            cycle_attempts: d.cycle_attempts,
            cycle_started_at_ms: d.cycle_started_at_ms,
            next_attempt_at_ms: d.next_attempt_at_ms.get(),
            created_at_ms: d.created_at_ms,
            updated_at_ms: d.updated_at_ms,
            timeline: d.timeline(),
        };
        let encoded = serde_json::to_string(&d).expect("encodes");
        assert_eq!(encoded, serde_json::to_string(&stored).expect("encodes"));
        assert!(matches!(d.timeline()[0], TimelineEntry::Received { at_ms: 5 }));
        let decoded: Delivery = serde_json::from_str(&encoded).expect("decodes");
        assert_eq!(decoded, d);
    }
}

#[test]
fn a_delivery_whose_timeline_lacks_its_received_entry_is_refused_on_decode() {
    let (state, _, id) = one_pending(12);
    let mut encoded: serde_json::Value = serde_json::to_value(state.deliveries[&id].as_ref()).expect("encodes");
    encoded["timeline"] = serde_json::json!([]);
    let error = serde_json::from_value::<Delivery>(encoded).expect_err("refused");
    assert!(error.to_string().contains("must begin with its Received entry"), "{error}");
}

#[test]
fn an_outcome_batch_committed_twice_counts_each_attempt_once() {
    // The batcher proposes a batch again when it cannot tell whether it
    // committed; if it had, each outcome comes a second time.
    for decision in [Decision::Retry { at_ms: 9_000 }, Decision::Delivered, Decision::Dead { reason: "no".into() }] {
        let (mut state, _, id) = one_pending(21);
        let status = if decision == Decision::Delivered { 200 } else { 500 };
        let batch = vec![outcome(&state, &id, Some(status), decision.clone())];
        let first = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: batch.clone() });
        assert_eq!(first, Response::OutcomesApplied { applied: 1, stale: 0, ignored: 0 }, "{decision:?}");
        let after_first = state.clone();
        let again = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 8, outcomes: batch });
        assert_eq!(again, Response::OutcomesApplied { applied: 0, stale: 0, ignored: 1 }, "{decision:?}");
        assert_eq!(state, after_first, "the repeat changed nothing ({decision:?})");
        assert_eq!(state.deliveries[&id].attempt_count, 1);
    }
}

#[test]
fn a_second_attempt_with_the_same_result_is_counted() {
    let (mut state, _, id) = one_pending(22);
    for expected in 1..=3 {
        let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 9_000 });
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: vec![o] });
        assert_eq!(state.deliveries[&id].attempt_count, expected);
        assert_eq!(state.deliveries[&id].cycle_attempts, expected);
    }
}

/// Ingests one event of type "a" received at `at_ms` (its id made then too)
/// and returns its event id and its one delivery.
fn ingest_at(state: &mut ClusterState, rng: &mut StdRng, at_ms: u64, key: Option<&str>) -> (EventId, DeliveryId) {
    let mut new = event(rng, "a", key, None);
    new.id = EventId::generate(at_ms, rng);
    let event_id = new.id;
    let (delivery, _) = created(state.apply(&Command::IngestEvents { now_ms: at_ms, events: vec![new] })).remove(0);
    (event_id, delivery)
}

fn finish(state: &mut ClusterState, delivery: &DeliveryId, decision: Decision) {
    let o = outcome(state, delivery, Some(200), decision);
    let applied = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 4_000, outcomes: vec![o] });
    assert_eq!(applied, Response::OutcomesApplied { applied: 1, stale: 0, ignored: 0 });
}

#[test]
fn prune_forgets_old_events_whose_deliveries_are_over_and_keeps_the_rest() {
    let mut rng = StdRng::seed_from_u64(40);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let (delivered, d1) = ingest_at(&mut state, &mut rng, 1_000, Some("k1"));
    let (pending, d2) = ingest_at(&mut state, &mut rng, 2_000, Some("k2"));
    let (dead, d3) = ingest_at(&mut state, &mut rng, 3_000, None);
    let (recent, d4) = ingest_at(&mut state, &mut rng, 10_000, None);
    finish(&mut state, &d1, Decision::Delivered);
    finish(&mut state, &d3, Decision::Dead { reason: "attempts exhausted".into() });
    finish(&mut state, &d4, Decision::Delivered);

    assert_eq!(state.prunable(5_000, 10).collect::<Vec<_>>(), vec![delivered, dead]);
    let pruned = state.apply(&Command::Prune { now_ms: 20_000, before_ms: 5_000, max_events: 10 });
    assert_eq!(pruned, Response::Pruned { events: 2, deliveries: 2 });
    state.check_invariants().unwrap();
    // The records removed wait to be dropped outside the state's lock.
    let retired = state.take_retired();
    let mut retired_events: Vec<EventId> = retired.events.iter().map(|e| e.id).collect();
    retired_events.sort();
    assert_eq!(retired_events, [delivered, dead]);
    assert_eq!(retired.deliveries.len(), 2);
    assert!(state.take_retired().is_empty());
    for gone in [&delivered, &dead] {
        assert!(!state.events.contains_key(gone));
    }
    assert!(!state.deliveries.contains_key(&d1) && !state.deliveries.contains_key(&d3));
    // A delivery still to be sent keeps its event however old; a recent one stays.
    assert!(state.events.contains_key(&pending) && state.deliveries.contains_key(&d2));
    assert!(state.events.contains_key(&recent) && state.deliveries.contains_key(&d4));
    assert!(state.active[&a.id].contains(&d2));
    // The pruned event's key is free again; the kept one's is not.
    assert!(!state.idempotency.contains_key("k1"));
    assert_eq!(state.idempotency.get("k2"), Some(&pending));
    let again =
        state.apply(&Command::IngestEvents { now_ms: 21_000, events: vec![event(&mut rng, "a", Some("k1"), None)] });
    assert!(matches!(&again, Response::Ingested { results } if matches!(results[0], IngestResult::Created { .. })));
    // A pruned delivery can no longer be replayed.
    let replay = state.apply(&Command::Replay { now_ms: 22_000, target: ReplayTarget::Delivery(d3) });
    assert!(matches!(replay, Response::NotFound { .. }), "{replay:?}");
    // Nothing more is due: pruning again removes nothing.
    assert_eq!(
        state.apply(&Command::Prune { now_ms: 23_000, before_ms: 5_000, max_events: 10 }),
        Response::Pruned { events: 0, deliveries: 0 }
    );
}

#[test]
fn prune_removes_at_most_max_events_oldest_first() {
    let mut rng = StdRng::seed_from_u64(41);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let mut events = Vec::new();
    for n in 0..5 {
        let (event_id, delivery) = ingest_at(&mut state, &mut rng, 1_000 + n * 100, None);
        finish(&mut state, &delivery, Decision::Delivered);
        events.push(event_id);
    }
    let pruned = state.apply(&Command::Prune { now_ms: 9_000, before_ms: 5_000, max_events: 2 });
    assert_eq!(pruned, Response::Pruned { events: 2, deliveries: 2 });
    assert_eq!(state.events.keys().copied().collect::<Vec<_>>(), events[2..]);
    assert_eq!(state.prunable(5_000, 10).collect::<Vec<_>>(), events[2..]);
    // Only events received before the bound go.
    assert_eq!(state.prunable(1_300, 10).collect::<Vec<_>>(), events[2..3]);
    state.check_invariants().unwrap();
}

#[test]
fn prune_applies_the_same_on_every_replica() {
    let mut rng = StdRng::seed_from_u64(42);
    let a = endpoint(&mut rng, None);
    let mut log = vec![Command::RegisterEndpoint { endpoint: Box::new(a.clone()) }];
    let mut first = state_with(&[]);
    first.apply(&log[0]);
    for n in 0..20u64 {
        let mut new = event(&mut rng, "a", Some(&format!("k{n}")), None);
        new.id = EventId::generate(1_000 + n, &mut rng);
        log.push(Command::IngestEvents { now_ms: 1_000 + n, events: vec![new] });
        first.apply(log.last().unwrap());
    }
    let ids: Vec<DeliveryId> = first.deliveries.keys().copied().collect();
    for (n, id) in ids.iter().enumerate().filter(|(n, _)| n % 3 != 0) {
        let decision = if n % 2 == 0 { Decision::Delivered } else { Decision::Dead { reason: "x".into() } };
        log.push(Command::RecordOutcomes {
            node_id: NODE,
            now_ms: 4_000,
            outcomes: vec![outcome(&first, id, Some(200), decision)],
        });
        first.apply(log.last().unwrap());
    }
    log.push(Command::Prune { now_ms: 9_000, before_ms: 5_000, max_events: 7 });
    let mut second = state_with(&[]);
    for command in &log {
        second.apply(command);
    }
    first.apply(log.last().unwrap());
    assert_eq!(first, second);
    assert_eq!(first.events.len(), 13);
    first.check_invariants().unwrap();
}
