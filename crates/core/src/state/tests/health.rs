//! Auto-disable: an endpoint failing every attempt for its
//! `disable_after_s` is disabled and its pending work dead-lettered.

use super::*;
use crate::model::DISABLE_AFTER_S_DEFAULT;

fn retry_at(at_ms: u64) -> Decision {
    Decision::Retry { at_ms, rule: RetryRule::Backoff }
}

/// A state with one endpoint that disables after 60 s and `n` pending deliveries to it.
fn failing(n: usize) -> (ClusterState, EndpointId, Vec<DeliveryId>) {
    let mut rng = StdRng::seed_from_u64(11);
    let mut a = endpoint(&mut rng, None);
    assert_eq!(a.disable_after_s, DISABLE_AFTER_S_DEFAULT, "five days unless asked");
    a.disable_after_s = 60;
    let mut state = state_with(std::slice::from_ref(&a));
    let events = (0..n).map(|_| event(&mut rng, "a", None, None)).collect();
    let Response::Ingested { results } = state.apply(&Command::IngestEvents { now_ms: 5, events }) else {
        panic!("ingested")
    };
    let ids = results
        .into_iter()
        .flat_map(|r| match r {
            IngestResult::Created { deliveries, .. } => deliveries,
            other => panic!("{other:?}"),
        })
        .map(|(d, _)| d)
        .collect();
    (state, a.id, ids)
}

fn record(state: &mut ClusterState, delivery: &DeliveryId, status: Option<u16>, decision: Decision, now_ms: u64) {
    let outcome = outcome(state, delivery, status, decision);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms, outcomes: vec![outcome] });
}

#[test]
fn an_endpoint_failing_every_attempt_for_its_limit_is_disabled_and_its_pending_work_dead_lettered() {
    let (mut state, id, deliveries) = failing(3);
    record(&mut state, &deliveries[0], Some(500), retry_at(20_000), 10_000);
    assert_eq!(state.endpoints[&id].failing_since_ms, Some(10_000));
    record(&mut state, &deliveries[1], Some(500), retry_at(60_000), 50_000);
    assert!(!state.endpoints[&id].disabled, "40 s of failures is not 60");
    record(&mut state, &deliveries[0], Some(503), retry_at(80_000), 70_000);
    let endpoint = &state.endpoints[&id];
    assert!(endpoint.disabled);
    let reason = endpoint.disabled_reason.clone().expect("a reason");
    assert!(reason.starts_with("every attempt failed for 1m (since 1970-01-01T00:00:10"), "{reason}");
    for delivery in &deliveries {
        let record = state.delivery(delivery).expect("stored");
        assert_eq!(record.state, DeliveryState::Dead);
        assert!(matches!(record.history.last(), Some(TimelineEntry::Dead { reason: r, .. }) if r.contains(&reason)));
    }
    assert_eq!(state.usage().pending, 0);
    assert!(state.fanout_count("a", None) == 0, "a disabled endpoint receives nothing");

    // Enabled again: its failing time starts over, its dead letters replay.
    let enable = EndpointPatch { disabled: Some(false), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id, patch: enable, now_ms: 90_000 });
    assert_eq!((state.endpoints[&id].disabled, state.endpoints[&id].failing_since_ms), (false, None));
    let replay = ReplayTarget::Delivery(deliveries[2]);
    assert!(matches!(state.apply(&Command::Replay { now_ms: 91_000, target: replay }), Response::Replayed { .. }));
}

#[test]
fn a_success_ends_the_failing_time_and_unsent_attempts_do_not_count() {
    let (mut state, id, deliveries) = failing(2);
    record(&mut state, &deliveries[0], Some(500), retry_at(20_000), 10_000);
    record(&mut state, &deliveries[1], Some(200), Decision::Delivered, 30_000);
    assert_eq!(state.endpoints[&id].failing_since_ms, None);
    record(&mut state, &deliveries[0], None, Decision::Deferred { at_ms: 200_000 }, 100_000);
    assert_eq!(state.endpoints[&id].failing_since_ms, None, "nothing was sent");
    record(&mut state, &deliveries[0], Some(500), retry_at(400_000), 300_000);
    assert_eq!(state.endpoints[&id].failing_since_ms, Some(300_000));
    assert!(!state.endpoints[&id].disabled, "one failure is no minute of them");
}

#[test]
fn zero_turns_auto_disable_off() {
    let (mut state, id, deliveries) = failing(1);
    state.apply(&Command::SetDisableAfter { id, disable_after_s: 0, now_ms: 6 });
    record(&mut state, &deliveries[0], Some(500), retry_at(20_000), 10_000);
    record(&mut state, &deliveries[0], Some(500), retry_at(9_000_000), 8_000_000);
    assert!(!state.endpoints[&id].disabled);
    assert_eq!(decoded(&state), state, "the failing time survives a snapshot");
}
