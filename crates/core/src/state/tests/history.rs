//! The history: finished events leave memory, and come back when a command
//! names them.

use super::*;

fn report(state: &mut ClusterState, id: &DeliveryId, status: Option<u16>, decision: Decision, now_ms: u64) -> Response {
    let o = outcome(state, id, status, decision);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms, outcomes: vec![o] })
}

fn dead(reason: &str) -> Decision {
    Decision::Dead { reason: reason.into() }
}

#[test]
fn a_finished_event_leaves_memory_for_the_history_and_reads_the_same() {
    let (mut state, a, id) = one_pending(70);
    let event_id = state.deliveries[&id].event_id;
    let before = state.delivery(&id).expect("pending").into_owned();
    assert!(state.history().event_count() == 0 && state.events.contains_key(&event_id));

    report(&mut state, &id, Some(200), Decision::Delivered, 6_000);
    assert!(state.events.is_empty() && state.deliveries.is_empty(), "nothing left at work in memory");
    assert!(state.history().contains_event(&event_id) && state.history().contains_delivery(&id));
    let delivered = state.delivery(&id).expect("read from the history");
    assert_eq!(delivered.state, DeliveryState::Delivered);
    assert_eq!(delivered.history.len(), before.history.len() + 2, "the attempt and the delivery");
    assert_eq!(state.event(&event_id).expect("read from the history").deliveries[..], [id]);
    assert_eq!((state.event_count(), state.delivery_count()), (1, 1));
    assert_eq!(state.usage().pending, 0);
    assert_eq!(state.usage().bytes, state.history().bytes(), "only the encoded records are retained");
    assert!(!state.active.contains_key(&a.id));
    state.check_invariants().unwrap();
    // A replica decoding a snapshot holds the same history.
    assert_eq!(decoded(&state), state);
}

#[test]
fn an_event_stays_in_memory_until_its_last_delivery_is_over() {
    let mut rng = StdRng::seed_from_u64(71);
    let (a, b) = (endpoint(&mut rng, None), endpoint(&mut rng, None));
    let mut state = state_with(&[a.clone(), b.clone()]);
    let Response::Ingested { results } =
        state.apply(&Command::IngestEvents { now_ms: 5, events: vec![event(&mut rng, "x", None, None)] })
    else {
        panic!("expected Ingested")
    };
    let IngestResult::Created { event_id, deliveries } = &results[0] else { panic!("expected Created") };
    let (first, second) = (deliveries[0].0, deliveries[1].0);
    report(&mut state, &first, Some(200), Decision::Delivered, 6_000);
    assert!(state.events.contains_key(event_id), "its other delivery is still pending");
    assert_eq!(state.deliveries[&first].state, DeliveryState::Delivered);
    report(&mut state, &second, Some(500), dead("attempts exhausted"), 7_000);
    assert!(state.history().contains_event(event_id) && !state.events.contains_key(event_id));
    assert_eq!(state.dead_count(), 1);
    assert_eq!(state.dead_of(&deliveries[1].1, None).collect::<Vec<_>>(), [second]);
    state.check_invariants().unwrap();
}

#[test]
fn an_event_that_matches_no_endpoint_is_finished_when_it_is_received() {
    let mut rng = StdRng::seed_from_u64(72);
    let only_b = endpoint(&mut rng, Some(&["b"]));
    let mut state = state_with(&[only_b]);
    let new = event(&mut rng, "a", Some("key-1"), None);
    let id = new.id;
    state.apply(&Command::IngestEvents { now_ms: 5, events: vec![new.clone()] });
    assert!(state.history().contains_event(&id) && state.events.is_empty());
    // Its idempotency key still answers, from the history.
    let again = state.apply(&Command::IngestEvents { now_ms: 6, events: vec![new] });
    assert!(matches!(&again, Response::Ingested { results } if results[0] == IngestResult::Duplicate { event_id: id }));
    state.check_invariants().unwrap();
}

#[test]
fn a_replay_brings_a_dead_delivery_back_into_memory_and_a_success_settles_it_again() {
    let (mut state, _, id) = one_pending(73);
    report(&mut state, &id, Some(500), dead("attempts exhausted"), 6_000);
    assert!(state.history().contains_delivery(&id));

    let replayed = state.apply(&Command::Replay { now_ms: 7_000, target: ReplayTarget::Delivery(id) });
    assert!(matches!(replayed, Response::Replayed { .. }), "{replayed:?}");
    assert!(!state.history().contains_delivery(&id), "back at work");
    assert_eq!(state.deliveries[&id].state, DeliveryState::Pending);
    assert_eq!(state.usage().pending, 1);
    state.check_invariants().unwrap();

    report(&mut state, &id, Some(200), Decision::Delivered, 8_000);
    let record = state.delivery(&id).expect("in the history again");
    assert!(state.history().contains_delivery(&id) && record.state == DeliveryState::Delivered);
    assert!(matches!(record.history.iter().rev().nth(1), Some(TimelineEntry::Attempt { .. })));
    assert!(record.history.iter().any(|e| matches!(e, TimelineEntry::Replayed { at_ms: 7_000 })));
    assert_eq!(state.dead_count(), 0);
    state.check_invariants().unwrap();
}

#[test]
fn a_bulk_replay_walks_the_dead_deliveries_of_the_history_too() {
    let mut rng = StdRng::seed_from_u64(74);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let events = (0..5).map(|_| event(&mut rng, "a", None, None)).collect();
    let Response::Ingested { results } = state.apply(&Command::IngestEvents { now_ms: 5, events }) else { panic!() };
    let ids: Vec<DeliveryId> = results
        .iter()
        .map(|r| match r {
            IngestResult::Created { deliveries, .. } => deliveries[0].0,
            other => panic!("expected Created, got {other:?}"),
        })
        .collect();
    for id in &ids {
        report(&mut state, id, Some(500), dead("attempts exhausted"), 6_000);
    }
    assert_eq!(state.history().dead_count_of(&a.id), 5);
    let target =
        ReplayTarget::EndpointDeadAfter { endpoint_id: a.id, since_ms: None, until_ms: None, after: None, max: 3 };
    let Response::ReplayedUpTo { deliveries, next_after } = state.apply(&Command::Replay { now_ms: 7_000, target })
    else {
        panic!("expected ReplayedUpTo")
    };
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(deliveries.iter().map(|(d, _)| *d).collect::<Vec<_>>(), sorted[..3]);
    assert_eq!(next_after, Some(sorted[2]));
    assert_eq!((state.usage().pending, state.dead_count_of(&a.id)), (3, 2));
    state.check_invariants().unwrap();
}

#[test]
fn a_late_success_of_a_finished_dead_delivery_still_makes_it_delivered() {
    let (mut state, _, id) = one_pending(75);
    // Dead-lettered while an attempt was in flight, which then succeeded.
    let in_flight = outcome(&state, &id, Some(200), Decision::Delivered);
    report(&mut state, &id, Some(500), dead("attempts exhausted"), 6_000);
    assert!(state.history().contains_delivery(&id));
    let applied = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6_500, outcomes: vec![in_flight] });
    assert_eq!(applied, Response::OutcomesApplied { applied: 1, stale: 0, ignored: 0 });
    assert_eq!(state.delivery(&id).expect("stored").state, DeliveryState::Delivered);
    assert!(state.history().contains_delivery(&id) && state.dead_count() == 0);
    state.check_invariants().unwrap();
}

#[test]
fn an_outcome_of_a_finished_delivery_that_comes_twice_changes_nothing() {
    let (mut state, _, id) = one_pending(76);
    let o = outcome(&state, &id, Some(200), Decision::Delivered);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6_000, outcomes: vec![o.clone()] });
    let after_first = state.clone();
    let again = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 7_000, outcomes: vec![o] });
    assert_eq!(again, Response::OutcomesApplied { applied: 0, stale: 0, ignored: 1 });
    assert_eq!(state, after_first);
}

#[test]
fn a_history_record_that_does_not_decode_is_refused_with_the_snapshot() {
    let (mut state, _, id) = one_pending(79);
    report(&mut state, &id, Some(200), Decision::Delivered, 6_000);
    let bytes = bincode::serde::encode_to_vec(&state, bincode::config::standard()).expect("encodes");
    // The delivery's record, found in the snapshot, made to claim a length
    // no snapshot holds at its first field.
    let record = state.delivery(&id).expect("stored").into_owned();
    let encoded = bincode::serde::encode_to_vec(&record, bincode::config::standard()).expect("encodes");
    let at = bytes.windows(encoded.len()).position(|w| w == encoded).expect("the record is in the snapshot");
    let mut broken = bytes.clone();
    broken[at] = 0xfe;
    let refused = bincode::serde::decode_from_slice::<ClusterState, _>(&broken, bincode::config::standard());
    assert!(refused.is_err(), "a broken record decoded");
    assert!(bincode::serde::decode_from_slice::<ClusterState, _>(&bytes, bincode::config::standard()).is_ok());
}

#[test]
fn with_its_store_the_state_encodes_only_what_the_history_counts() {
    use crate::state::history_store::MemStore;
    let (mut state, _, pending) = one_pending(82);
    let mut rng = StdRng::seed_from_u64(83);
    let events = (0..5).map(|_| event(&mut rng, "a", None, None)).collect();
    let Response::Ingested { results } = state.apply(&Command::IngestEvents { now_ms: 9, events }) else {
        panic!("expected Ingested")
    };
    let finished: Vec<DeliveryId> = results
        .into_iter()
        .flat_map(|r| match r {
            IngestResult::Created { deliveries, .. } => deliveries,
            other => panic!("expected Created, got {other:?}"),
        })
        .map(|(d, _)| d)
        .collect();
    assert_eq!(finished.len(), 5);
    for (n, id) in finished.iter().enumerate() {
        let decision = if n % 2 == 0 { Decision::Delivered } else { dead("gone") };
        report(&mut state, id, Some(410), decision, 6_000 + n as u64);
    }
    let whole = bincode::serde::encode_to_vec(&state, bincode::config::standard()).expect("encodes");

    // Attached to an empty store, every record is still in memory.
    state.attach_history(Arc::new(MemStore::default())).expect("an empty store takes any history");
    let refused = state.attach_history(Arc::new(MemStore::default()));
    assert!(refused.is_err_and(|e| e.contains("already")), "a history has one store");
    let flush = state.seal_history();
    assert_eq!((flush.events.len(), flush.deliveries.len()), (5, 5));
    let snapshot = state.clone();
    let mut store = MemStore::default();
    store.apply(&flush);
    let apart = bincode::serde::encode_to_vec(&snapshot, bincode::config::standard()).expect("encodes");
    let records = snapshot.history().bytes() as usize;
    assert!(apart.len() + records <= whole.len(), "apart {} bytes, whole {}", apart.len(), whole.len());
    state.history_flushed(Arc::new(store.clone()));
    assert!(state.history().held_bytes() == 0 && state.history().delivery_count() == 5);

    // A node restarting decodes the state, then attaches the store.
    let (mut restored, _): (ClusterState, _) =
        bincode::serde::decode_from_slice(&apart, bincode::config::standard()).expect("decodes");
    assert!(restored.history().is_apart() && restored.delivery(&finished[1]).is_none(), "no records before its store");
    restored.attach_history(Arc::new(store.clone())).expect("the store holds what the state counts");
    assert_eq!(restored, state);
    assert_eq!(restored.delivery(&finished[1]).expect("read from the store").state, DeliveryState::Dead);
    assert_eq!(restored.dead_count(), 2);
    assert!(restored.deliveries.contains_key(&pending));
    restored.check_invariants().unwrap();

    // A store that is not the one written with the state is refused.
    let (mut stray, _): (ClusterState, _) =
        bincode::serde::decode_from_slice(&apart, bincode::config::standard()).expect("decodes");
    let refused = stray.attach_history(Arc::new(MemStore::default()));
    assert!(refused.is_err_and(|e| e.contains("the state counts 5 events")), "an empty store");
    let mut behind = MemStore::default();
    let mut partial = flush.clone();
    partial.deliveries.pop();
    behind.apply(&partial);
    assert!(stray.attach_history(Arc::new(behind)).is_err(), "a store missing a record");
    // A history kept in memory refuses a store that already holds records.
    let mut fresh = one_pending(84).0;
    assert!(fresh.attach_history(Arc::new(store)).is_err_and(|e| e.contains("none in the store")));
}
