//! Ingest: fan-out by type and explicit targets, idempotency keys.

use super::*;

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
    assert_eq!(fanned_out_to(&mut decoded(&state), &mut rng, "a"), BTreeSet::from([a.id, b.id]));

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
        assert_eq!(state.delivery(id).expect("stored").state, expected);
        assert_eq!(state.delivery(id).expect("stored").initial_state, expected);
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
