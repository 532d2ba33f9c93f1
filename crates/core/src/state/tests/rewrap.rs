use super::*;
use crate::command::{REWRAP_BATCH_MAX, RewrappedPayload, RewrappedSecret, SecretSlot};
use crate::model::Rewrapped;
use crate::payload::{Payload, StoredSecret};

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

fn sealed_secret(key_id: &str, fill: u8) -> StoredSecret {
    // Apply never opens a secret either.
    StoredSecret::Sealed { key_id: key_id.into(), nonce: [fill; 24], body: vec![fill; 48] }
}

fn rewrap_secret(state: &mut ClusterState, slot: SecretSlot, from: StoredSecret, secret: StoredSecret) -> Response {
    state.apply(&Command::RewrapSecrets { now_ms: 9, secrets: vec![RewrappedSecret { slot, from, secret }] })
}

#[test]
fn a_secret_rewrap_replaces_the_slot_read_and_only_with_a_sealed_secret() {
    let mut rng = StdRng::seed_from_u64(4);
    let a = endpoint(&mut rng, None);
    let id = a.id;
    let mut state = state_with(&[a]);
    let clear = state.endpoints[&id].secret.clone();
    assert_eq!(clear.key_id(), None);
    let current = SecretSlot::Endpoint { id, retired: None };
    // Never back to clear.
    let done = rewrap_secret(&mut state, current.clone(), clear.clone(), clear.clone());
    assert_eq!(done, Response::Rewrapped { rewrapped: 0, skipped: 1 });
    let done = rewrap_secret(&mut state, current.clone(), clear.clone(), sealed_secret("k1", 1));
    assert_eq!(done, Response::Rewrapped { rewrapped: 1, skipped: 0 });
    assert_eq!(state.endpoints[&id].secret, sealed_secret("k1", 1));
    // Read before that rewrap: left as it is.
    let done = rewrap_secret(&mut state, current.clone(), clear, sealed_secret("k2", 2));
    assert_eq!(done, Response::Rewrapped { rewrapped: 0, skipped: 1 });
    assert_eq!(state.endpoints[&id].secret, sealed_secret("k1", 1));
    assert_eq!(state.endpoints[&id].updated_at_ms, 1_000, "no setting changed");

    // A rotation retires the sealed secret; the retired slot rewraps on its own.
    state.apply(&Command::RotateSecret { id, secret: sealed_secret("k1", 3), grace_until_ms: 50, now_ms: 20 });
    let retired = SecretSlot::Endpoint { id, retired: Some(0) };
    let done = rewrap_secret(&mut state, retired, sealed_secret("k1", 1), sealed_secret("k2", 4));
    assert_eq!(done, Response::Rewrapped { rewrapped: 1, skipped: 0 });
    let endpoint = &state.endpoints[&id];
    assert_eq!(endpoint.secret, sealed_secret("k1", 3));
    assert_eq!(endpoint.previous_secrets[0].secret, sealed_secret("k2", 4));
    assert_eq!(endpoint.previous_secrets[0].expires_at_ms, 50);

    // Slots that do not exist, and a batch past the bound.
    let gone = SecretSlot::Endpoint { id, retired: Some(7) };
    assert_eq!(
        rewrap_secret(&mut state, gone, sealed_secret("k1", 3), sealed_secret("k2", 5)),
        Response::Rewrapped { rewrapped: 0, skipped: 1 }
    );
    let other = SecretSlot::Endpoint { id: EndpointId::generate(1, &mut rng), retired: None };
    assert_eq!(
        rewrap_secret(&mut state, other, sealed_secret("k1", 3), sealed_secret("k2", 5)),
        Response::Rewrapped { rewrapped: 0, skipped: 1 }
    );
    let over: Vec<_> = (0..=REWRAP_BATCH_MAX)
        .map(|n| RewrappedSecret {
            slot: current.clone(),
            from: if n == REWRAP_BATCH_MAX { sealed_secret("k1", 3) } else { sealed_secret("none", 0) },
            secret: sealed_secret("k2", 6),
        })
        .collect();
    let done = state.apply(&Command::RewrapSecrets { now_ms: 9, secrets: over });
    assert_eq!(done, Response::Rewrapped { rewrapped: 0, skipped: REWRAP_BATCH_MAX as u32 + 1 });
    assert_eq!(state.endpoints[&id].secret, sealed_secret("k1", 3), "the one past the bound is not applied");
}

#[test]
fn a_source_secret_rewraps_like_an_endpoint_secret() {
    let mut rng = StdRng::seed_from_u64(5);
    let mut state = ClusterState::default();
    let source = super::sources::source(&mut rng);
    let id = source.id;
    assert!(matches!(state.apply(&Command::CreateSource { source: Box::new(source.clone()) }), Response::Ok));
    let slot = SecretSlot::Source { id, retired: None };
    let done = rewrap_secret(&mut state, slot, source.secret.clone(), sealed_secret("k1", 1));
    assert_eq!(done, Response::Rewrapped { rewrapped: 1, skipped: 0 });
    assert_eq!(state.inbound.sources[&id].secret, sealed_secret("k1", 1));
}
