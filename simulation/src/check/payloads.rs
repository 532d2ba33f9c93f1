//! Receivers get what producers posted, and the state keeps it sealed.
//!
//! - [`sent`]: every request a receiver got carries, byte for byte, the
//!   JSON payload the workload posted for its event (`webhook-id`): the
//!   plaintext the sender opened, never the sealed bytes the log keeps. An
//!   event whose acknowledgement never reached its producer (the producer
//!   gave up, or its retry came after a prune freed the key) must still
//!   carry one of the payloads the producers posted.
//! - [`stored`]: with a keyring, every payload of the final state (at work
//!   or in the history) is sealed
//!   under a key of the ring, opens to what was posted for its event, and
//!   does not hold that text among its bytes; without one, every payload is
//!   the posted text in clear.

use std::collections::BTreeMap;

use hookraft_core::payload::{self, Keyring, Payload};
use hookraft_core::state::ClusterState;

use super::{Violation, every, listed};
use crate::receivers::SendRecord;
use crate::workload::Ledger;

/// Checks the body of every request in `sends` against what was posted.
pub fn sent(ledger: &Ledger, sends: &[SendRecord]) -> Vec<Violation> {
    let wrong = sends.iter().filter_map(|send| {
        let body = &*send.body;
        let expected = ledger.payloads.get(&send.event_id);
        let fine = match expected {
            Some(expected) => body == expected.as_bytes(),
            None => std::str::from_utf8(body).is_ok_and(|text| ledger.posted.contains(text)),
        };
        if fine {
            return None;
        }
        let what = describe(body);
        let detail = match expected {
            Some(_) => format!(
                "{} of event {} to {} from node {}: the body is {what}, not the payload posted for it",
                send.delivery_id, send.event_id, send.receiver, send.origin.node_id
            ),
            None => format!(
                "{} of event {} to {} from node {}: the body is {what}, not any payload posted",
                send.delivery_id, send.event_id, send.receiver, send.origin.node_id
            ),
        };
        Some(detail)
    });
    listed("payloads", wrong, "sends")
}

/// What a wrong body is, without printing it.
fn describe(body: &[u8]) -> String {
    match Payload::from_stored(body.into()) {
        Ok(stored) if stored.is_sealed() => {
            format!("sealed payload bytes (key {})", stored.key_id().unwrap_or_default())
        }
        _ => format!("{} bytes of something else", body.len()),
    }
}

/// Checks how `state` stores its payloads: sealed and opening under
/// `keyring` to what was posted, or, without one, in clear. Answers the
/// violations and the payloads counted by key (`clear` for none).
pub fn stored(
    ledger: &Ledger,
    state: &ClusterState,
    keyring: Option<&Keyring>,
) -> (Vec<Violation>, BTreeMap<String, u64>) {
    let mut by_key: BTreeMap<String, u64> = BTreeMap::new();
    let wrong = state.events_in(every(), false).filter_map(|event| {
        let id = event.id.to_string();
        let stored = &event.payload;
        *by_key.entry(stored.key_id().unwrap_or("clear").to_string()).or_default() += 1;
        if keyring.is_some() && !stored.is_sealed() {
            return Some(format!("event {id} is stored in clear under a keyring"));
        }
        if keyring.is_none() && stored.is_sealed() {
            return Some(format!("event {id} is stored sealed by nodes without a keyring"));
        }
        let opened = match payload::open(keyring, &id, &event.event_type, stored) {
            Ok(opened) => opened,
            Err(error) => return Some(format!("event {id}: {error}")),
        };
        let fine = match ledger.payloads.get(&id) {
            Some(expected) => *opened == *expected.as_bytes(),
            None => std::str::from_utf8(&opened).is_ok_and(|text| ledger.posted.contains(text)),
        };
        if !fine {
            return Some(format!("event {id} opens to {} bytes that were not posted for it", opened.len()));
        }
        if stored.is_sealed() && contains(stored.as_bytes(), &opened) {
            return Some(format!("event {id}: its sealed bytes hold its plaintext"));
        }
        None
    });
    let found = listed("payloads", wrong, "events");
    (found, by_key)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hookraft_core::ids::EventId;
    use hookraft_core::model::Event;
    use hookraft_delivery::transport::SendOrigin;
    use hookraft_node::SeededEntropy;

    use super::*;
    use crate::check::LISTED_MAX;
    use crate::check::fixture::through_snapshot;
    use crate::keys::RunKeys;

    const POSTED: &str = r#"{"n":1,"note":"naïve café ☕"}"#;

    fn ledger() -> Ledger {
        let mut ledger = Ledger::default();
        ledger.payloads.insert("evt_a".into(), POSTED.into());
        ledger.posted.insert(POSTED.into());
        ledger.posted.insert(r#"{"n":2}"#.into());
        ledger
    }

    fn send(event_id: &str, body: &[u8]) -> SendRecord {
        SendRecord {
            at_ms: 0,
            receiver: "r0".into(),
            origin: SendOrigin { node_id: 1, shard: 0, token: 1, started_at_ms: 0 },
            event_id: event_id.into(),
            delivery_id: "dlv_a".into(),
            answered: Some(200),
            answered_at_ms: 2,
            in_time: true,
            signature_valid: true,
            body: Arc::from(body),
            sequence: None,
            ordering_key: None,
        }
    }

    #[test]
    fn the_posted_plaintext_passes() {
        assert!(sent(&ledger(), &[send("evt_a", POSTED.as_bytes())]).is_empty());
        // Not acknowledged, but posted.
        assert!(sent(&ledger(), &[send("evt_b", br#"{"n":2}"#)]).is_empty());
    }

    #[test]
    fn sealed_bytes_or_another_payload_are_violations() {
        let keys = RunKeys::new(1, 40_000).unwrap();
        let sealed = keys.first.seal("evt_a", "order.paid", POSTED.as_bytes(), &SeededEntropy::new(1));
        let found = sent(&ledger(), &[send("evt_a", sealed.as_bytes())]);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("sealed payload bytes (key k1)"), "{}", found[0].detail);
        // Another event's payload, or the same JSON written differently.
        assert_eq!(sent(&ledger(), &[send("evt_a", br#"{"n":2}"#)]).len(), 1);
        assert_eq!(sent(&ledger(), &[send("evt_a", r#"{"n": 1, "note": "naïve café ☕"}"#.as_bytes())]).len(), 1);
        assert_eq!(sent(&ledger(), &[send("evt_b", br#"{"n":3}"#)]).len(), 1);
    }

    #[test]
    fn many_violations_are_listed_a_few_then_counted() {
        let sends: Vec<SendRecord> = (0..12).map(|_| send("evt_a", b"{}")).collect();
        let found = sent(&ledger(), &sends);
        assert_eq!(found.len(), LISTED_MAX + 1);
        assert!(found[LISTED_MAX].detail.contains("and 7 more sends"), "{}", found[LISTED_MAX].detail);
    }

    /// A state of one event per `(payload, posted as)`, and the ledger of
    /// what was posted for each. The events have no delivery: finished, a
    /// node keeps them in its history.
    fn state_of(events: &[(Payload, &str)]) -> (ClusterState, Ledger) {
        let mut state = ClusterState::default();
        let mut ledger = Ledger::default();
        for (n, (payload, posted)) in events.iter().enumerate() {
            let id = EventId::parse(&self::id(n)).unwrap();
            let event = Event {
                id,
                event_type: "order.paid".into(),
                payload: payload.clone(),
                received_at_ms: 0,
                idempotency_key: None,
                deliveries: Box::new([]),
                received_by: Some(1),
                rewrapped: None,
                ordering_key: None,
                inbound: None,
            };
            state.events.insert(id, Box::new(event));
            ledger.payloads.insert(id.to_string(), posted.to_string());
            ledger.posted.insert(posted.to_string());
        }
        let state = through_snapshot(&state);
        assert!(state.events.is_empty() && state.history().event_count() == events.len());
        (state, ledger)
    }

    /// The `n`th event's id as the state writes it.
    fn id(n: usize) -> String {
        EventId::parse(&format!("evt_01J00000000000000000000{n:03}")).unwrap().to_string()
    }

    #[test]
    fn sealed_payloads_that_open_to_what_was_posted_pass_and_are_counted_by_key() {
        let keys = RunKeys::new(1, 40_000).unwrap();
        let entropy = SeededEntropy::new(1);
        let (a, b) = (r#"{"n":1}"#, r#"{"n":2}"#);
        let sealed_a = keys.first.seal(&id(0), "order.paid", a.as_bytes(), &entropy);
        let sealed_b = keys.rotated.seal(&id(1), "order.paid", b.as_bytes(), &entropy);
        let (state, ledger) = state_of(&[(sealed_a, a), (sealed_b, b)]);
        let (found, by_key) = stored(&ledger, &state, Some(&keys.first));
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(by_key, BTreeMap::from([("k1".to_string(), 1), ("k2".to_string(), 1)]));
        // Without a keyring, each sealed payload is a violation.
        assert_eq!(stored(&ledger, &state, None).0.len(), 2);
    }

    #[test]
    fn clear_payloads_pass_only_without_a_keyring() {
        let keys = RunKeys::new(1, 40_000).unwrap();
        let (state, ledger) = state_of(&[(Payload::clear(POSTED), POSTED)]);
        assert!(stored(&ledger, &state, None).0.is_empty());
        let (found, by_key) = stored(&ledger, &state, Some(&keys.first));
        assert!(found[0].detail.contains("stored in clear"), "{found:?}");
        assert_eq!(by_key, BTreeMap::from([("clear".to_string(), 1)]));
    }

    #[test]
    fn a_payload_that_opens_to_something_else_or_not_at_all_is_a_violation() {
        let keys = RunKeys::new(1, 40_000).unwrap();
        let entropy = SeededEntropy::new(1);
        // Sealed for this event, but not what was posted.
        let other = keys.first.seal(&id(0), "order.paid", br#"{"n":9}"#, &entropy);
        // Sealed for another event: authentication fails.
        let moved = keys.first.seal(&id(7), "order.paid", br#"{"n":2}"#, &entropy);
        let (state, ledger) = state_of(&[(other, r#"{"n":1}"#), (moved, r#"{"n":2}"#)]);
        let (found, _) = stored(&ledger, &state, Some(&keys.first));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].detail.contains("not posted for it"), "{}", found[0].detail);
        assert!(found[1].detail.contains("failed authentication"), "{}", found[1].detail);
    }

    #[test]
    fn contains_finds_a_run_of_bytes() {
        assert!(contains(b"xx{\"n\":1}yy", b"{\"n\":1}"));
        assert!(!contains(b"xx{\"n\":1", b"{\"n\":1}"));
        assert!(!contains(b"abc", b""));
    }
}
