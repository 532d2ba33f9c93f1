//! Replay of dead-lettered deliveries.

use super::*;

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

/// A state whose endpoint `a` has `counts[i]` dead deliveries created at
/// `i * 100 + 100` ms (events sent to it while disabled), enabled again.
fn dead_backlog(seed: u64, counts: &[usize]) -> (ClusterState, Endpoint) {
    let mut rng = StdRng::seed_from_u64(seed);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let disable = |disabled| EndpointPatch { disabled: Some(disabled), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id: a.id, patch: disable(true), now_ms: 50 });
    for (i, &count) in counts.iter().enumerate() {
        // Ids carry their time: each group's come after the one before's.
        let events = (0..count)
            .map(|_| NewEvent {
                id: EventId::generate(10_000 + i as u64 * 100, &mut rng),
                ..event(&mut rng, "a", None, Some(vec![a.id]))
            })
            .collect();
        state.apply(&Command::IngestEvents { now_ms: i as u64 * 100 + 100, events });
    }
    state.apply(&Command::UpdateEndpoint { id: a.id, patch: disable(false), now_ms: 60 });
    (state, a)
}

fn step(
    state: &mut ClusterState,
    a: &Endpoint,
    since_ms: Option<u64>,
    after: Option<DeliveryId>,
    max: u32,
) -> (Vec<DeliveryId>, Option<DeliveryId>) {
    let target = ReplayTarget::EndpointDeadAfter { endpoint_id: a.id, since_ms, until_ms: None, after, max };
    match state.apply(&Command::Replay { now_ms: 9_000, target }) {
        Response::ReplayedUpTo { deliveries, next_after } => {
            (deliveries.into_iter().map(|(d, _)| d).collect(), next_after)
        }
        other => panic!("expected ReplayedUpTo, got {other:?}"),
    }
}

#[test]
fn one_bulk_replay_entry_requeues_at_most_the_bound_and_the_cursor_walks_the_rest_in_id_order() {
    let (mut state, a) = dead_backlog(21, &[1_300]);
    let dead: Vec<DeliveryId> = state.dead_of(&a.id, None).collect();
    assert_eq!(dead.len(), 1_300);
    let mut after = None;
    let mut replayed = Vec::new();
    let mut entries = 0;
    loop {
        // Asking for more than the bound gets the bound.
        let (chosen, next) = step(&mut state, &a, None, after, u32::MAX);
        entries += 1;
        assert!(chosen.len() <= REPLAY_BATCH_MAX as usize, "one entry re-queued {}", chosen.len());
        replayed.extend(chosen);
        state.check_invariants().unwrap();
        match next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(entries, 3);
    assert_eq!(replayed, dead, "every dead delivery once, in id order");
    assert_eq!(state.dead_of(&a.id, None).count(), 0);
    assert_eq!(state.active[&a.id].len(), 1_300);
}

#[test]
fn a_bulk_replay_entry_looks_at_a_bounded_number_of_dead_deliveries_outside_its_window() {
    let scan = REPLAY_SCAN_MAX;
    // `scan + 10` deliveries created at 100 ms, then one at 200 ms.
    let (mut state, a) = dead_backlog(22, &[scan + 10, 1]);
    let (chosen, next) = step(&mut state, &a, Some(200), None, 10);
    assert!(chosen.is_empty(), "none of the first {scan} is in the window");
    let cursor = next.expect("more to look at");
    assert_eq!(state.dead_of(&a.id, None).position(|id| id == cursor), Some(scan - 1));
    let (chosen, next) = step(&mut state, &a, Some(200), Some(cursor), 10);
    assert_eq!(chosen.len(), 1);
    assert_eq!(state.delivery(&chosen[0]).expect("stored").created_at_ms, 200);
    assert_eq!(next, None);
    assert_eq!(state.dead_of(&a.id, None).count(), scan + 10, "those outside the window stay dead");
}

#[test]
fn a_bulk_replay_step_is_refused_for_a_missing_or_disabled_endpoint() {
    let (mut state, a) = dead_backlog(23, &[3]);
    let target = |endpoint_id| ReplayTarget::EndpointDeadAfter {
        endpoint_id,
        since_ms: None,
        until_ms: None,
        after: None,
        max: 10,
    };
    let mut rng = StdRng::seed_from_u64(24);
    let missing = EndpointId::generate(1, &mut rng);
    assert!(matches!(state.apply(&Command::Replay { now_ms: 1, target: target(missing) }), Response::NotFound { .. }));
    let patch = EndpointPatch { disabled: Some(true), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id: a.id, patch, now_ms: 2 });
    assert!(matches!(state.apply(&Command::Replay { now_ms: 3, target: target(a.id) }), Response::Conflict { .. }));
    assert_eq!(state.dead_of(&a.id, None).count(), 3);
}

mod dead_index {
    use super::*;
    use proptest::prelude::*;
    use rand::RngExt;

    /// Every dead delivery of each endpoint, by looking at each delivery.
    fn scanned(state: &ClusterState) -> BTreeMap<EndpointId, Vec<DeliveryId>> {
        let mut dead: BTreeMap<EndpointId, Vec<DeliveryId>> = BTreeMap::new();
        for d in state.deliveries_in((Bound::Unbounded, Bound::Unbounded), false) {
            if d.state == DeliveryState::Dead {
                dead.entry(d.endpoint_id).or_default().push(d.id);
            }
        }
        dead
    }

    fn indexed(state: &ClusterState) -> BTreeMap<EndpointId, Vec<DeliveryId>> {
        let mut endpoints: BTreeSet<EndpointId> = state.endpoints.keys().copied().collect();
        endpoints.extend(state.deliveries_in((Bound::Unbounded, Bound::Unbounded), false).map(|d| d.endpoint_id));
        endpoints
            .into_iter()
            .map(|e| (e, state.dead_of(&e, None).collect::<Vec<_>>()))
            .filter(|(_, ids)| !ids.is_empty())
            .collect()
    }

    fn pick<T: Copy>(rng: &mut StdRng, items: &[T]) -> Option<T> {
        (!items.is_empty()).then(|| items[rng.random_range(0..items.len())])
    }

    /// A random command: ingest (by type or at explicit, maybe disabled,
    /// targets), an outcome (delivered, retry, dead, gone), a replay of one
    /// delivery or a bulk step after a random cursor, a prune, a change or
    /// a deletion of an endpoint.
    fn command(state: &ClusterState, rng: &mut StdRng, pick_of: u8, now_ms: u64) -> Command {
        let endpoints: Vec<EndpointId> = state.endpoints.keys().copied().collect();
        let deliveries: Vec<DeliveryId> = state.deliveries.keys().copied().collect();
        match pick_of % 9 {
            0 => Command::RegisterEndpoint { endpoint: Box::new(endpoint(rng, None)) },
            1 => Command::IngestEvents { now_ms, events: (0..3).map(|_| event(rng, "a", None, None)).collect() },
            2 if !endpoints.is_empty() => {
                let targets = vec![pick(rng, &endpoints).unwrap()];
                Command::IngestEvents { now_ms, events: vec![event(rng, "a", None, Some(targets))] }
            }
            3 | 4 if !deliveries.is_empty() => {
                let id = pick(rng, &deliveries).unwrap();
                let decision = match rng.random_range(0..5) {
                    0 => Decision::Delivered,
                    1 => Decision::Retry { at_ms: now_ms + 10, rule: RetryRule::Backoff },
                    4 => Decision::Gone,
                    _ => Decision::Dead { reason: "x".into() },
                };
                Command::RecordOutcomes {
                    node_id: NODE,
                    now_ms,
                    outcomes: vec![outcome(state, &id, Some(500), decision)],
                }
            }
            5 if !deliveries.is_empty() => {
                let target = if rng.random_bool(0.5) {
                    ReplayTarget::Delivery(pick(rng, &deliveries).unwrap())
                } else {
                    let endpoint_id = state.delivery(&pick(rng, &deliveries).unwrap()).expect("stored").endpoint_id;
                    let after = rng.random_bool(0.5).then(|| pick(rng, &deliveries).unwrap());
                    let since_ms = rng.random_bool(0.3).then(|| rng.random_range(0..now_ms));
                    ReplayTarget::EndpointDeadAfter {
                        endpoint_id,
                        since_ms,
                        until_ms: None,
                        after,
                        max: rng.random_range(0..6),
                    }
                };
                Command::Replay { now_ms, target }
            }
            6 => Command::Prune { now_ms, before_ms: rng.random_range(0..=now_ms), max_events: rng.random_range(1..8) },
            7 if !endpoints.is_empty() => {
                let patch = EndpointPatch { disabled: Some(rng.random_bool(0.5)), ..Default::default() };
                Command::UpdateEndpoint { id: pick(rng, &endpoints).unwrap(), patch, now_ms }
            }
            8 if !endpoints.is_empty() => Command::DeleteEndpoint { id: pick(rng, &endpoints).unwrap(), now_ms },
            _ => Command::Heartbeat { node_id: NODE, now_ms, lease_ms: 10 },
        }
    }

    proptest! {
        /// After any sequence of commands, the dead index lists exactly the
        /// dead deliveries a scan finds, in id order; a decoded copy
        /// rebuilds the same index; a bulk step re-queues at most its bound.
        #[test]
        fn the_dead_index_agrees_with_a_scan(seed in any::<u64>(), picks in prop::collection::vec(any::<u8>(), 1..120)) {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut state = state_with(&[]);
            for (i, p) in picks.into_iter().enumerate() {
                let command = command(&state, &mut rng, p, 10 + i as u64);
                let response = state.apply(&command);
                if let (Command::Replay { target: ReplayTarget::EndpointDeadAfter { max, .. }, .. }, Response::ReplayedUpTo { deliveries, .. }) = (&command, &response) {
                    prop_assert!(deliveries.len() <= (*max).min(REPLAY_BATCH_MAX) as usize);
                }
                prop_assert_eq!(indexed(&state), scanned(&state));
                prop_assert!(state.check_invariants().is_ok(), "{:?}", state.check_invariants());
            }
            let copy = decoded(&state);
            prop_assert_eq!(indexed(&copy), scanned(&state));
            prop_assert_eq!(&copy, &state);
        }
    }
}
