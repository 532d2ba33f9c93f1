//! Replicas applying the same log agree; a batch applies in order.

use super::*;
use proptest::prelude::*;

/// A random command drawn against the current state.
fn random_command(state: &ClusterState, rng: &mut StdRng, pick: u8, now_ms: u64) -> Command {
    use rand::RngExt;
    let endpoint_ids: Vec<_> = state.endpoints.keys().cloned().collect();
    let delivery_ids: Vec<_> = state.deliveries.keys().cloned().collect();
    match pick % 7 {
        0 => {
            let types: Option<&[&str]> = if rng.random_bool(0.5) { Some(&["a"]) } else { None };
            let ordering = random_ordering(rng);
            Command::RegisterEndpoint { endpoint: Box::new(Endpoint { ordering, ..endpoint(rng, types) }) }
        }
        1 | 2 => Command::IngestEventsFrom {
            node_id: NODE,
            now_ms,
            events: (0..3)
                .map(|i| {
                    let key = [None, Some("k1"), Some("k2")][rng.random_range(0..3)].map(str::to_string);
                    NewEvent { ordering_key: key, ..event(rng, "a", (i == 0).then_some("dup"), None) }
                })
                .collect(),
        },
        6 if !endpoint_ids.is_empty() => {
            let id = endpoint_ids[rng.random_range(0..endpoint_ids.len())];
            if rng.random_bool(0.5) {
                let ordering_key = ["k1", "k2"][rng.random_range(0..2)].to_string();
                Command::SkipBlocked { endpoint_id: id, ordering_key, now_ms }
            } else {
                Command::SetOrdering { id, ordering: random_ordering(rng), now_ms }
            }
        }
        3 if !delivery_ids.is_empty() => {
            let id = &delivery_ids[rng.random_range(0..delivery_ids.len())];
            let decision = match rng.random_range(0..4) {
                0 => Decision::Delivered,
                1 => Decision::Retry { at_ms: now_ms + 10, rule: RetryRule::Backoff },
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

fn random_ordering(rng: &mut StdRng) -> crate::model::Ordering {
    use crate::model::Ordering;
    use crate::ordering::OnDead;
    use rand::RngExt;
    [Ordering::None, Ordering::PerKey { on_dead: OnDead::Block }, Ordering::PerKey { on_dead: OnDead::Skip }]
        [rng.random_range(0..3)]
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
                follower = decoded(&leader);
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
    let all = batched.deliveries_in((Bound::Unbounded, Bound::Unbounded), false);
    assert!(matches!(all.map(|d| d.state).collect::<Vec<_>>()[..], [DeliveryState::Dead]));
}
