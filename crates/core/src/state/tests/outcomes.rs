//! Outcomes: retries, fencing by token, 410 Gone, repeated outcomes, and
//! the bounded timeline.

use super::*;

#[test]
fn retry_then_success_records_every_attempt_and_leaves_the_active_index() {
    let (mut state, a, id) = one_pending(5);
    let endpoint_id = a.id;
    for _ in 0..2 {
        let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 9_000, rule: RetryRule::Backoff });
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: vec![o] });
        assert_eq!(state.delivery(&id).expect("stored").state, DeliveryState::Retrying);
        assert_eq!(state.delivery(&id).expect("stored").next_attempt_at_ms.get(), Some(9_000));
    }
    let o = outcome(&state, &id, Some(200), Decision::Delivered);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 7, outcomes: vec![o] });
    let d = state.delivery(&id).expect("stored");
    assert_eq!(d.state, DeliveryState::Delivered);
    assert_eq!(d.attempt_count, 3);
    let kinds: Vec<_> = d.timeline().iter().map(std::mem::discriminant).collect();
    assert_eq!(kinds.len(), 1 + 2 * 2 + 2);
    assert!(!state.active.contains_key(&endpoint_id));
    state.check_invariants().unwrap();
}

#[test]
fn a_retry_records_the_rule_that_chose_its_wait() {
    let (mut state, _, id) = one_pending(15);
    let o = outcome(&state, &id, Some(429), Decision::Retry { at_ms: 9_000, rule: RetryRule::Throttled });
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: vec![o] });
    let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 12_000, rule: RetryRule::Backoff });
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 10_000, outcomes: vec![o] });
    let d = state.delivery(&id).expect("stored");
    assert_eq!((d.state, d.next_attempt_at_ms.get()), (DeliveryState::Retrying, Some(12_000)));
    let retries: Vec<_> =
        d.timeline().into_iter().filter(|e| matches!(e, TimelineEntry::RetryScheduled { .. })).collect();
    assert_eq!(
        retries,
        [
            TimelineEntry::RetryScheduled { at_ms: 6, next_attempt_at_ms: 9_000, rule: RetryRule::Throttled },
            TimelineEntry::RetryScheduled { at_ms: 10_000, next_attempt_at_ms: 12_000, rule: RetryRule::Backoff },
        ]
    );
    // They encode and come back as they were.
    let back = decoded(&state);
    assert_eq!(back.delivery(&id), state.delivery(&id));
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
    assert_eq!(state.delivery(&id).expect("stored").state, DeliveryState::Pending);
    assert_eq!(state.delivery(&id).expect("stored").timeline().len(), 1, "a stale outcome writes nothing");
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
    assert_eq!(state.delivery(&first).expect("stored").state, DeliveryState::Pending);
    assert_eq!(state.delivery(&first).expect("stored").cycle_attempts, 0);
    state.check_invariants().unwrap();
}

#[test]
fn timeline_stays_bounded_and_keeps_received_first() {
    let (mut state, _, id) = one_pending(9);
    for i in 0..2_000 {
        let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: i, rule: RetryRule::Backoff });
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: i, outcomes: vec![o] });
    }
    let timeline = state.delivery(&id).expect("stored").timeline();
    assert_eq!(timeline.len(), crate::model::TIMELINE_ENTRIES_MAX);
    assert!(matches!(timeline[0], TimelineEntry::Received { .. }));
    let TimelineEntry::Truncated { dropped, .. } = timeline[1] else { panic!("expected a truncation marker") };
    assert_eq!(dropped as usize + timeline.len() - 1, 1 + 2 * 2_000);
}

#[test]
fn an_outcome_batch_committed_twice_counts_each_attempt_once() {
    // The batcher proposes a batch again when it cannot tell whether it
    // committed; if it had, each outcome comes a second time.
    for decision in [
        Decision::Retry { at_ms: 9_000, rule: RetryRule::Backoff },
        Decision::Delivered,
        Decision::Dead { reason: "no".into() },
    ] {
        let (mut state, _, id) = one_pending(21);
        let status = if decision == Decision::Delivered { 200 } else { 500 };
        let batch = vec![outcome(&state, &id, Some(status), decision.clone())];
        let first = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: batch.clone() });
        assert_eq!(first, Response::OutcomesApplied { applied: 1, stale: 0, ignored: 0 }, "{decision:?}");
        let after_first = state.clone();
        let again = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 8, outcomes: batch });
        assert_eq!(again, Response::OutcomesApplied { applied: 0, stale: 0, ignored: 1 }, "{decision:?}");
        assert_eq!(state, after_first, "the repeat changed nothing ({decision:?})");
        assert_eq!(state.delivery(&id).expect("stored").attempt_count, 1);
    }
}

#[test]
fn a_second_attempt_with_the_same_result_is_counted() {
    let (mut state, _, id) = one_pending(22);
    for expected in 1..=3 {
        let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 9_000, rule: RetryRule::Backoff });
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: vec![o] });
        assert_eq!(state.delivery(&id).expect("stored").attempt_count, expected);
        assert_eq!(state.delivery(&id).expect("stored").cycle_attempts, expected);
    }
}

#[test]
fn a_deferred_attempt_is_on_the_timeline_but_spends_none_of_the_cycle() {
    let (mut state, _, id) = one_pending(21);
    let mut not_sent = outcome(&state, &id, None, Decision::Deferred { at_ms: 9_000 });
    not_sent.attempt.error = Some("payload: key k2 is not in this node's keyring".into());
    let response = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 7_000, outcomes: vec![not_sent] });
    assert_eq!(response, Response::OutcomesApplied { applied: 1, stale: 0, ignored: 0 });
    let delivery = state.delivery(&id).expect("stored");
    assert_eq!((delivery.state, delivery.attempt_count, delivery.cycle_attempts), (DeliveryState::Retrying, 1, 0));
    assert_eq!(delivery.next_attempt_at_ms.get(), Some(9_000));
    let timeline = delivery.timeline();
    assert!(matches!(&timeline[1], TimelineEntry::Attempt { attempt, .. }
        if attempt.error.as_deref() == Some("payload: key k2 is not in this node's keyring")));
    assert_eq!(
        timeline[2],
        TimelineEntry::RetryScheduled { at_ms: 7_000, next_attempt_at_ms: 9_000, rule: RetryRule::PayloadUnavailable }
    );
    assert!(state.active[&delivery.endpoint_id].contains(&id), "still active");
}
