//! `ClusterState::usage`: the pending deliveries and the estimated bytes
//! of retained state, kept by every apply.

use super::*;
use crate::state::{delivery_bytes, new_event_bytes};

/// Ingests `count` events of type "a" with keys `k{n}`; their deliveries.
fn ingest(state: &mut ClusterState, rng: &mut StdRng, count: usize, now_ms: u64) -> Vec<DeliveryId> {
    let events: Vec<NewEvent> = (0..count).map(|n| event(rng, "a", Some(&format!("k{now_ms}-{n}")), None)).collect();
    let Response::Ingested { results } = state.apply(&Command::IngestEvents { now_ms, events }) else { panic!() };
    results
        .into_iter()
        .flat_map(|r| match r {
            IngestResult::Created { deliveries, .. } => deliveries.into_iter().map(|(d, _)| d),
            other => panic!("expected Created, got {other:?}"),
        })
        .collect()
}

fn report(state: &mut ClusterState, delivery: &DeliveryId, status: Option<u16>, decision: Decision) {
    let o = outcome(state, delivery, status, decision);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 9_000, outcomes: vec![o] });
    state.check_invariants().expect("the counters match the records");
}

#[test]
fn ingest_counts_each_pending_delivery_and_its_estimated_bytes() {
    let mut rng = StdRng::seed_from_u64(70);
    let (a, b) = (endpoint(&mut rng, None), endpoint(&mut rng, Some(&["b"])));
    let mut state = state_with(&[a, b]);
    assert_eq!(state.usage(), Usage::default(), "endpoints alone are not counted");
    assert_eq!((state.fanout_count("a", None), state.fanout_count("b", None)), (1, 2), "before the index is built");

    ingest(&mut state, &mut rng, 100, 5_000);
    let usage = state.usage();
    assert_eq!(usage.pending, 100, "one delivery per event: only `a` takes type a");
    assert_eq!(
        (state.fanout_count("a", None), state.fanout_count("b", None), state.fanout_count("c", None)),
        (1, 2, 1),
        "from the index"
    );
    // The fixture's events: type "a", payload {"n":1}, keys k5000-0 .. k5000-99.
    let expected: u64 = (0..100).map(|n: usize| new_event_bytes(1, 7, Some(format!("k5000-{n}").len()), 1)).sum();
    assert_eq!(usage.bytes, expected, "what is stored is what admission estimated before proposing it");
    state.check_invariants().unwrap();

    // An event to both endpoints counts two deliveries.
    let both =
        NewEvent { endpoint_ids: Some(state.endpoints.keys().copied().collect()), ..event(&mut rng, "b", None, None) };
    state.apply(&Command::IngestEvents { now_ms: 6_000, events: vec![both] });
    assert_eq!(state.usage().pending, 102);
    assert_eq!(state.usage().bytes, expected + new_event_bytes(1, 7, None, 2));
    state.check_invariants().unwrap();
}

#[test]
fn a_duplicate_key_counts_nothing() {
    let mut rng = StdRng::seed_from_u64(71);
    let mut state = state_with(&[endpoint(&mut rng, None)]);
    let first = event(&mut rng, "a", Some("same"), None);
    state.apply(&Command::IngestEvents { now_ms: 5, events: vec![first.clone()] });
    let usage = state.usage();
    let again = NewEvent { id: EventId::generate(6, &mut rng), ..first.clone() };
    state.apply(&Command::IngestEvents { now_ms: 6, events: vec![first, again] });
    assert_eq!(state.usage(), usage);
}

#[test]
fn a_pending_delivery_costs_what_the_benchmarks_measured() {
    // The backlog benchmark and `benches/pending_memory.rs` measured 462-490
    // bytes per pending delivery beyond its payload (an event of one
    // delivery, a short type, a short key): the estimate stays near that.
    let beyond_payload = new_event_bytes("order.created".len(), 0, Some("idem-1733380000000-12345".len()), 1);
    assert!((440..=560).contains(&beyond_payload), "{beyond_payload} bytes");
}

#[test]
fn outcomes_end_pending_deliveries_and_grow_the_timelines() {
    let mut rng = StdRng::seed_from_u64(72);
    let mut state = state_with(&[endpoint(&mut rng, None)]);
    let ids = ingest(&mut state, &mut rng, 4, 5_000);
    let footprint = |state: &ClusterState, id: &DeliveryId| delivery_bytes(&state.delivery(id).expect("stored"));
    let start = state.usage();
    let before = footprint(&state, &ids[0]);

    // A retry keeps it pending, and its timeline (and the estimate) grows
    // by exactly what the delivery's footprint grew.
    report(&mut state, &ids[0], Some(503), Decision::Retry { at_ms: 20_000, rule: RetryRule::Backoff });
    assert_eq!(state.usage().pending, 4);
    assert!(footprint(&state, &ids[0]) > before);
    assert_eq!(state.usage().bytes, start.bytes + footprint(&state, &ids[0]) - before);
    let last = state.usage();

    // Delivered and dead end it; the records stay until pruned, finished
    // and kept encoded in the history, which takes less than they did.
    report(&mut state, &ids[0], Some(200), Decision::Delivered);
    report(&mut state, &ids[1], Some(500), Decision::Dead { reason: "attempts exhausted".into() });
    assert_eq!(state.usage().pending, 2);
    assert_eq!(state.history().delivery_count(), 2);
    assert!(state.history().bytes() > 0 && state.usage().bytes < last.bytes);

    // A 410 disables the endpoint and dead-letters the rest of its queue.
    report(&mut state, &ids[2], Some(410), Decision::Gone);
    assert_eq!(state.usage().pending, 0);
}

#[test]
fn replay_and_endpoint_delete_move_the_pending_count() {
    let mut rng = StdRng::seed_from_u64(73);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let ids = ingest(&mut state, &mut rng, 3, 5_000);
    report(&mut state, &ids[0], Some(500), Decision::Dead { reason: "attempts exhausted".into() });
    assert_eq!(state.usage().pending, 2);
    let bytes = state.usage().bytes;
    state.apply(&Command::Replay { now_ms: 10_000, target: ReplayTarget::Delivery(ids[0]) });
    assert_eq!(state.usage().pending, 3);
    assert!(state.usage().bytes > bytes, "the replay is on the timeline");
    state.check_invariants().unwrap();

    state.apply(&Command::DeleteEndpoint { id: a.id, now_ms: 11_000 });
    assert_eq!(state.usage().pending, 0, "a deleted endpoint's queue is dead-lettered");
    state.check_invariants().unwrap();
}

#[test]
fn pruning_everything_brings_the_counters_back_to_zero() {
    let mut rng = StdRng::seed_from_u64(74);
    let mut state = state_with(&[endpoint(&mut rng, None)]);
    let ids = ingest(&mut state, &mut rng, 10, 5_000);
    for id in &ids {
        report(&mut state, id, Some(200), Decision::Delivered);
    }
    assert_eq!(state.usage().pending, 0);
    assert!(state.usage().bytes > 0, "delivered events are kept until their retention");
    let pruned = state.apply(&Command::Prune { now_ms: 9_000_000, before_ms: 9_000_000, max_events: 100 });
    assert_eq!(pruned, Response::Pruned { events: 10, deliveries: 10 });
    assert_eq!(state.usage(), Usage::default());
    state.check_invariants().unwrap();
}

#[test]
fn a_decoded_state_counts_again_what_the_original_kept() {
    let mut rng = StdRng::seed_from_u64(75);
    let mut state = state_with(&[endpoint(&mut rng, None)]);
    let ids = ingest(&mut state, &mut rng, 20, 5_000);
    report(&mut state, &ids[3], Some(503), Decision::Retry { at_ms: 20_000, rule: RetryRule::Backoff });
    report(&mut state, &ids[4], Some(200), Decision::Delivered);

    let bytes = bincode::serde::encode_to_vec(&state, bincode::config::standard()).unwrap();
    let copy: ClusterState = bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap().0;
    assert_eq!(copy.usage(), state.usage(), "the counters, not encoded, are counted again as the state decodes");
    assert_eq!(copy.usage().pending, 19);
    copy.check_invariants().unwrap();
    // A counter that disagrees with the records is caught.
    let mut skewed = copy.clone();
    skewed.recount_delivery(0, 1);
    assert!(skewed.check_invariants().is_err());
}
