//! Inbound sources: fan-out by source, the stale guard, deletion, retention.

use super::*;
use crate::ids::SourceId;
use crate::inbound::{Inbound, Locator, Scheme, Source, Version};
use crate::payload::StoredSecret;

pub(super) fn source(rng: &mut StdRng) -> Source {
    Source {
        id: SourceId::generate(1_000, rng),
        description: None,
        scheme: Scheme::Github,
        secret: StoredSecret::clear(b"a github secret"),
        previous_secrets: Vec::new(),
        event_id: Locator::Header("x-github-delivery".into()),
        event_type: None,
        entity_key: Some("/customer".into()),
        version: Some("/version".into()),
        rate_limit_per_s: None,
        allow_cidrs: Vec::new(),
        disabled: false,
        created_at_ms: 1_000,
        updated_at_ms: 1_000,
    }
}

/// An inbound event of `source` about `key` at `version`.
fn inbound(rng: &mut StdRng, source: &SourceId, provider_id: &str, key: &str, version: i64) -> NewEvent {
    let inbound = Inbound {
        source_id: *source,
        provider_event_id: provider_id.into(),
        entity_key: Some(key.into()),
        version: Some(Version::Number(version)),
    };
    NewEvent {
        idempotency_key: Some(Inbound::idempotency_key(source, provider_id)),
        ordering_key: Some(key.into()),
        inbound: Some(Box::new(inbound)),
        ..event(rng, "customer.updated", None, None)
    }
}

/// A state with a source, an endpoint receiving from it and a producers' endpoint.
fn with_source(seed: u64) -> (ClusterState, StdRng, SourceId, EndpointId, EndpointId) {
    let mut rng = StdRng::seed_from_u64(seed);
    let src = source(&mut rng);
    let (mut receiving, producers) = (endpoint(&mut rng, None), endpoint(&mut rng, None));
    receiving.sources = vec![src.id];
    let mut state = state_with(&[]);
    assert_eq!(state.apply(&Command::CreateSource { source: Box::new(src.clone()) }), Response::Ok);
    for e in [&receiving, &producers] {
        assert_eq!(state.apply(&Command::RegisterEndpoint { endpoint: Box::new(e.clone()) }), Response::Ok);
    }
    (state, rng, src.id, receiving.id, producers.id)
}

fn ingest_one(state: &mut ClusterState, event: NewEvent) -> Vec<(DeliveryId, EndpointId)> {
    created(state.apply(&Command::IngestEventsFrom { node_id: NODE, now_ms: 5, events: vec![event] }))
}

#[test]
fn a_sources_events_go_only_to_its_endpoints_and_producers_events_never_do() {
    let (mut state, mut rng, src, receiving, producers) = with_source(1);
    let from_source = ingest_one(&mut state, inbound(&mut rng, &src, "d-1", "cus_1", 1));
    assert_eq!(from_source.iter().map(|(_, e)| *e).collect::<Vec<_>>(), vec![receiving]);
    let from_producer = ingest_one(&mut state, event(&mut rng, "customer.updated", None, None));
    assert_eq!(from_producer.iter().map(|(_, e)| *e).collect::<Vec<_>>(), vec![producers]);
    assert_eq!(state.fanout_count("customer.updated", Some(&src)), 1);
    assert_eq!(decoded(&state), state, "sources and endpoints' sources survive a snapshot");
}

#[test]
fn a_provider_event_sent_again_is_one_event() {
    let (mut state, mut rng, src, _, _) = with_source(2);
    ingest_one(&mut state, inbound(&mut rng, &src, "d-1", "cus_1", 1));
    let again = state.apply(&Command::IngestEventsFrom {
        node_id: NODE,
        now_ms: 6,
        events: vec![inbound(&mut rng, &src, "d-1", "cus_1", 1)],
    });
    assert!(
        matches!(again, Response::Ingested { ref results } if matches!(results[0], IngestResult::Duplicate { .. }))
    );
    assert_eq!(state.events.len(), 1);
}

#[test]
fn an_older_version_after_a_newer_was_delivered_ends_ignored_stale_until_replayed() {
    let (mut state, mut rng, src, _, _) = with_source(3);
    let (older, _) = ingest_one(&mut state, inbound(&mut rng, &src, "d-1", "cus_1", 1))[0];
    let (newer, _) = ingest_one(&mut state, inbound(&mut rng, &src, "d-2", "cus_1", 2))[0];
    let (other_key, _) = ingest_one(&mut state, inbound(&mut rng, &src, "d-3", "cus_2", 0))[0];
    let newer_event = state.delivery(&newer).expect("stored").event_id;
    assert_eq!(state.stale_newer(&state.delivery(&older).expect("stored")), None, "nothing delivered yet");

    let delivered = outcome(&state, &newer, Some(200), Decision::Delivered);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 10, outcomes: vec![delivered] });
    assert_eq!(state.stale_newer(&state.delivery(&older).expect("stored")), Some(newer_event));
    assert_eq!(state.stale_newer(&state.delivery(&other_key).expect("stored")), None, "another key is not affected");

    let ignored = Outcome {
        decision: Decision::IgnoredStale { newer: newer_event },
        ..outcome(&state, &older, None, Decision::Delivered)
    };
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 11, outcomes: vec![ignored.clone()] });
    let record = state.delivery(&older).expect("stored");
    assert_eq!((record.state, record.attempt_count), (DeliveryState::IgnoredStale, 0), "nothing was sent");
    assert!(matches!(record.history.last(), Some(TimelineEntry::IgnoredStale { newer, .. }) if **newer == newer_event));
    assert!(!state.active.values().any(|set| set.contains(&older)), "terminal: off the endpoint's queue");
    let again = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 12, outcomes: vec![ignored] });
    assert_eq!(again, Response::OutcomesApplied { applied: 0, stale: 0, ignored: 1 });

    state.apply(&Command::Replay { now_ms: 20, target: ReplayTarget::Delivery(older) });
    assert_eq!(state.delivery(&older).expect("stored").state, DeliveryState::Pending);
    assert_eq!(state.stale_newer(&state.delivery(&older).expect("stored")), None, "replayed on purpose: it is sent");
    assert_eq!(decoded(&state), state, "the guard's versions survive a snapshot");
}

#[test]
fn a_stale_report_from_a_stale_owner_is_refused() {
    let (mut state, mut rng, src, _, _) = with_source(4);
    let (older, _) = ingest_one(&mut state, inbound(&mut rng, &src, "d-1", "cus_1", 1))[0];
    let newer_event = EventId::generate(9, &mut rng);
    let mut ignored = Outcome {
        decision: Decision::IgnoredStale { newer: newer_event },
        ..outcome(&state, &older, None, Decision::Delivered)
    };
    ignored.token += 1;
    let answer = state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 11, outcomes: vec![ignored] });
    assert_eq!(answer, Response::OutcomesApplied { applied: 0, stale: 1, ignored: 0 });
    assert_eq!(state.delivery(&older).expect("stored").state, DeliveryState::Pending);
}

#[test]
fn deleting_a_source_takes_it_off_its_endpoints_and_unknown_sources_are_refused() {
    let (mut state, mut rng, src, receiving, _) = with_source(5);
    let unknown = SourceId::generate(7, &mut rng);
    let set = Command::SetEndpointSources { id: receiving, sources: vec![unknown], now_ms: 9 };
    assert!(matches!(state.apply(&set), Response::NotFound { .. }));
    assert_eq!(state.apply(&Command::DeleteSource { id: src, now_ms: 10 }), Response::Ok);
    assert!(state.endpoints[&receiving].sources.is_empty());
    assert!(matches!(state.apply(&Command::DeleteSource { id: src, now_ms: 11 }), Response::NotFound { .. }));
}

#[test]
fn retention_forgets_a_keys_newest_version_with_its_event() {
    let (mut state, mut rng, src, _, _) = with_source(6);
    let (first, _) = ingest_one(&mut state, inbound(&mut rng, &src, "d-1", "cus_1", 5))[0];
    let delivered = outcome(&state, &first, Some(200), Decision::Delivered);
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: 10, outcomes: vec![delivered] });
    assert_eq!(state.inbound.newest.len(), 1);
    state.apply(&Command::Prune { now_ms: 100, before_ms: 50, max_events: 10 });
    assert!(state.inbound.newest.is_empty(), "the key costs nothing once its events are gone");
    let (late, _) = ingest_one(&mut state, inbound(&mut rng, &src, "d-0", "cus_1", 1))[0];
    assert_eq!(state.stale_newer(&state.delivery(&late).expect("stored")), None);
}
