use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;
use crate::ids::{DeliveryId, EndpointId, EventId};
use crate::model::{AttemptRecord, DeliveryState, OptionalMs, Rewrapped};
use crate::payload::Payload;
use crate::retry::RetryRule;

fn sealed(key_id: &str) -> Payload {
    let mut bytes = vec![0x00, 1, key_id.len() as u8];
    bytes.extend_from_slice(key_id.as_bytes());
    bytes.extend([7u8; 24 + 2 + 16]);
    Payload::from_stored(bytes.into()).expect("well formed")
}

fn fixture(payload: Payload) -> (Event, Delivery) {
    let mut rng = StdRng::seed_from_u64(1);
    let event_id = EventId::generate(1_000, &mut rng);
    let endpoint_id = EndpointId::generate(1_000, &mut rng);
    let id = DeliveryId::derive(&event_id, &endpoint_id);
    let event = Event {
        id: event_id,
        event_type: "t".into(),
        payload,
        received_at_ms: 1_000,
        idempotency_key: None,
        deliveries: Box::new([id]),
        received_by: Some(3),
        rewrapped: None,
        ordering_key: None,
        inbound: None,
    };
    let delivery = Delivery {
        id,
        event_id,
        endpoint_id,
        state: DeliveryState::Pending,
        initial_state: DeliveryState::Pending,
        attempt_count: 0,
        cycle_attempts: 0,
        sequence: 0,
        cycle_started_at_ms: 1_000,
        next_attempt_at_ms: OptionalMs::at(1_000),
        created_at_ms: 1_000,
        updated_at_ms: 1_000,
        history: Box::default(),
    };
    (event, delivery)
}

fn attempt(at_ms: u64, node_id: NodeId, token: u64, status: u16) -> TimelineEntry {
    TimelineEntry::Attempt {
        at_ms,
        attempt: Box::new(AttemptRecord {
            node_id,
            fencing_token: token,
            started_at_ms: at_ms - 5,
            latency_ms: 5,
            status_code: Some(status),
            error: None,
            response_excerpt: None,
        }),
    }
}

fn grant(owner: Option<NodeId>, token: u64, at_ms: u64) -> ShardGrant {
    ShardGrant { owner, token, granted_at_ms: at_ms, next_owner: None }
}

#[test]
fn a_pending_delivery_shows_who_received_the_key_and_who_holds_it_now() {
    let (event, delivery) = fixture(sealed("k1"));
    let stages = lifecycle(&delivery, Some(&event), &grant(Some(2), 40, 500));
    assert_eq!(
        stages,
        [
            Stage::Received { at_ms: 1_000, node_id: Some(3) },
            Stage::Encrypted { at_ms: 1_000, key_id: "k1" },
            Stage::Leased { at_ms: 1_000, node_id: 2, fencing_token: 40 },
        ]
    );
    // Unowned shard (revoked, waiting): no lease to show.
    assert_eq!(lifecycle(&delivery, Some(&event), &grant(None, 41, 2_000)).len(), 2);
}

#[test]
fn each_grant_an_attempt_was_sent_under_is_a_lease_before_it() {
    let (event, mut delivery) = fixture(Payload::clear("{}"));
    let retry = TimelineEntry::RetryScheduled { at_ms: 1_100, next_attempt_at_ms: 1_500, rule: RetryRule::Backoff };
    delivery.history = vec![
        attempt(1_100, 1, 10, 503),
        retry.clone(),
        attempt(1_600, 2, 12, 200),
        TimelineEntry::Delivered { at_ms: 1_600 },
    ]
    .into();
    delivery.state = DeliveryState::Delivered;
    let stages = lifecycle(&delivery, Some(&event), &grant(Some(2), 12, 1_400));
    assert_eq!(
        stages,
        [
            Stage::Received { at_ms: 1_000, node_id: Some(3) },
            Stage::Leased { at_ms: 1_095, node_id: 1, fencing_token: 10 },
            Stage::Recorded(&delivery.history[0]),
            Stage::Recorded(&retry),
            Stage::Leased { at_ms: 1_400, node_id: 2, fencing_token: 12 },
            Stage::Recorded(&delivery.history[2]),
            Stage::Recorded(&delivery.history[3]),
        ],
        "clear payload: no encrypted stage; the current grant's lease starts at its grant"
    );
}

#[test]
fn a_rewrap_shows_the_first_key_then_the_new_one_at_its_time() {
    let (mut event, mut delivery) = fixture(sealed("k2"));
    event.rewrapped = Some(Box::new(Rewrapped { at_ms: 1_300, first_key_id: Some("k1".into()) }));
    delivery.history = vec![attempt(1_100, 1, 10, 500), attempt(1_500, 1, 10, 200)].into();
    let stages = lifecycle(&delivery, Some(&event), &grant(Some(1), 10, 900));
    let kinds: Vec<String> =
        stages.iter().map(|s| format!("{s:?}").split([' ', '(']).next().unwrap().to_string()).collect();
    assert_eq!(kinds, ["Received", "Encrypted", "Leased", "Recorded", "Rewrapped", "Recorded"]);
    assert!(stages.contains(&Stage::Encrypted { at_ms: 1_000, key_id: "k1" }));
    assert!(stages.contains(&Stage::Rewrapped { at_ms: 1_300, key_id: "k2" }));
    // Stored in clear first, sealed by a rewrap later.
    event.rewrapped = Some(Box::new(Rewrapped { at_ms: 1_300, first_key_id: None }));
    let stages = lifecycle(&delivery, Some(&event), &grant(Some(1), 10, 900));
    assert!(!stages.iter().any(|s| matches!(s, Stage::Encrypted { .. })));
    assert!(stages.contains(&Stage::Rewrapped { at_ms: 1_300, key_id: "k2" }));
}

#[test]
fn a_pruned_event_leaves_the_recorded_timeline() {
    let (_, delivery) = fixture(Payload::clear("{}"));
    assert_eq!(lifecycle(&delivery, None, &grant(None, 1, 0)), [Stage::Received { at_ms: 1_000, node_id: None }]);
}
