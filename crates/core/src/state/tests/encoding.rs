//! The snapshot format of a delivery.

use super::*;

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
    let pending = state.delivery(&id).expect("stored").as_ref().clone();
    assert!(pending.history.is_empty(), "a pending delivery stores no timeline");
    let o = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 9_000, rule: RetryRule::Backoff });
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 6, outcomes: vec![o] });
    let retrying = state.delivery(&id).expect("stored").as_ref().clone();
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
    let mut encoded: serde_json::Value =
        serde_json::to_value(state.delivery(&id).expect("stored").as_ref()).expect("encodes");
    encoded["timeline"] = serde_json::json!([]);
    let error = serde_json::from_value::<Delivery>(encoded).expect_err("refused");
    assert!(error.to_string().contains("must begin with its Received entry"), "{error}");
}
