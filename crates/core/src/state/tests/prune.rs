//! Retention: `Prune`.

use super::*;

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
        assert!(!state.has_event(gone));
    }
    assert!(state.delivery(&d1).is_none() && state.delivery(&d3).is_none());
    // A delivery still to be sent keeps its event however old, in memory;
    // a recent one stays, in the history.
    assert!(state.events.contains_key(&pending) && state.deliveries.contains_key(&d2));
    assert!(state.history().contains_event(&recent) && state.history().contains_delivery(&d4));
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
    assert_eq!(all_event_ids(&state), events[2..]);
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
    assert_eq!(first.event_count(), 13);
    first.check_invariants().unwrap();
}
