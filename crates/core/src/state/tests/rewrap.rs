use super::*;
use crate::command::{REWRAP_BATCH_MAX, RewrappedPayload};
use crate::model::Rewrapped;
use crate::payload::Payload;

fn sealed(key_id: &str, fill: u8) -> Payload {
    // A well-formed sealed payload; apply never opens one.
    let mut bytes = vec![0x00, 1, key_id.len() as u8];
    bytes.extend_from_slice(key_id.as_bytes());
    bytes.extend(std::iter::repeat_n(fill, 24 + 10 + 16));
    Payload::from_stored(bytes.into()).expect("well formed")
}

fn one_event(payload: Payload) -> (ClusterState, EventId) {
    let mut rng = StdRng::seed_from_u64(3);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(&[a]);
    let new = NewEvent { payload, ..event(&mut rng, "a", None, None) };
    let id = new.id;
    state.apply(&Command::IngestEventsFrom { node_id: 2, now_ms: 5, events: vec![new] });
    (state, id)
}

fn rewrap(state: &mut ClusterState, id: EventId, from: Option<&str>, payload: Payload, at: u64) -> Response {
    let payloads = vec![RewrappedPayload { event_id: id, from_key_id: from.map(str::to_string), payload }];
    state.apply(&Command::RewrapPayloads { now_ms: at, payloads })
}

#[test]
fn events_record_the_node_that_accepted_them() {
    let (state, id) = one_event("{}".into());
    assert_eq!(state.event(&id).expect("stored").received_by, Some(2));
    let (state, _, delivery) = one_pending(1);
    let event = state.event(&state.delivery(&delivery).expect("stored").event_id).expect("stored");
    assert_eq!(event.received_by, None, "IngestEvents, as earlier logs hold it, names no node");
}

#[test]
fn a_rewrap_replaces_the_payload_read_and_remembers_the_first_key() {
    let (mut state, id) = one_event(sealed("k1", 1));
    assert_eq!(
        rewrap(&mut state, id, Some("k1"), sealed("k2", 2), 50),
        Response::Rewrapped { rewrapped: 1, skipped: 0 }
    );
    assert_eq!(state.event(&id).expect("stored").payload, sealed("k2", 2));
    let first = Some(Box::new(Rewrapped { at_ms: 50, first_key_id: Some("k1".into()) }));
    assert_eq!(state.event(&id).expect("stored").rewrapped, first);
    // A second rotation keeps the first key and moves the time.
    assert_eq!(
        rewrap(&mut state, id, Some("k2"), sealed("k3", 3), 60),
        Response::Rewrapped { rewrapped: 1, skipped: 0 }
    );
    let second = Some(Box::new(Rewrapped { at_ms: 60, first_key_id: Some("k1".into()) }));
    assert_eq!(state.event(&id).expect("stored").rewrapped, second);
    state.check_invariants().expect("usage counted");
}

#[test]
fn a_clear_payload_can_be_sealed_but_a_sealed_one_never_made_clear() {
    let (mut state, id) = one_event("{\"card\":1}".into());
    assert_eq!(rewrap(&mut state, id, None, "{}".into(), 50), Response::Rewrapped { rewrapped: 0, skipped: 1 });
    assert_eq!(rewrap(&mut state, id, None, sealed("k1", 1), 50), Response::Rewrapped { rewrapped: 1, skipped: 0 });
    assert_eq!(state.event(&id).expect("stored").rewrapped.as_ref().map(|r| r.first_key_id.clone()), Some(None));
}

#[test]
fn a_payload_changed_since_it_was_read_or_a_gone_event_is_skipped() {
    let (mut state, id) = one_event(sealed("k1", 1));
    // Two nodes rewrap at once: the second read k1 too, but k1 is gone by then.
    rewrap(&mut state, id, Some("k1"), sealed("k2", 2), 50);
    assert_eq!(
        rewrap(&mut state, id, Some("k1"), sealed("k2", 9), 51),
        Response::Rewrapped { rewrapped: 0, skipped: 1 }
    );
    assert_eq!(state.event(&id).expect("stored").payload, sealed("k2", 2), "the first rewrap stands");
    let mut rng = StdRng::seed_from_u64(99);
    let ghost = EventId::generate(1, &mut rng);
    assert_eq!(rewrap(&mut state, ghost, None, sealed("k2", 2), 52), Response::Rewrapped { rewrapped: 0, skipped: 1 });
}

#[test]
fn an_entry_rewraps_at_most_its_bound() {
    let (mut state, id) = one_event(sealed("k1", 1));
    let item = RewrappedPayload { event_id: id, from_key_id: Some("other".into()), payload: sealed("k2", 2) };
    let payloads = vec![item; REWRAP_BATCH_MAX + 3];
    let Response::Rewrapped { rewrapped, skipped } = state.apply(&Command::RewrapPayloads { now_ms: 9, payloads })
    else {
        panic!("expected Rewrapped")
    };
    assert_eq!((rewrapped, skipped), (0, REWRAP_BATCH_MAX as u32 + 3));
}
