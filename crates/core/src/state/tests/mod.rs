//! Tests of `ClusterState::apply`, a file per family of commands:
//! `ingest` (fan-out, idempotency), `outcomes` (fencing, retries, 410,
//! timelines), `replay`, `cluster` (heartbeats and grants), `replicas`
//! (determinism across replicas, batches), `encoding` (the snapshot format
//! of a delivery), `prune` (retention), `usage` (the counters admission
//! control reads) and `tally` (what each apply tallies for metrics).
//! Shared fixtures are here.

mod cluster;
mod encoding;
mod health;
mod history;
mod ingest;
mod operational;
mod ordered;
mod outcomes;
mod prune;
mod replay;
mod replicas;
mod rewrap;
mod sources;
mod tally;
mod throughput;
mod usage;

use super::*;
use crate::command::{EndpointPatch, IngestResult, NewEvent, Outcome, ReplayTarget};
use crate::model::{AttemptRecord, DeliveryState, TimelineEntry};
use crate::retry::{Decision, RetryRule};
use crate::signing::Secret;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

const NODE: NodeId = 1;

fn endpoint(rng: &mut StdRng, event_types: Option<&[&str]>) -> Endpoint {
    let secret = Secret::from_key(vec![7; 32]).unwrap();
    let mut endpoint =
        Endpoint::new(EndpointId::generate(1_000, rng), "https://example.com/hook".into(), (&secret).into(), 1_000);
    endpoint.event_types = event_types.map(|t| t.iter().map(|s| s.to_string()).collect());
    endpoint
}

fn event(rng: &mut StdRng, event_type: &str, key: Option<&str>, targets: Option<Vec<EndpointId>>) -> NewEvent {
    NewEvent {
        id: EventId::generate(2_000, rng),
        event_type: event_type.into(),
        payload: "{\"n\":1}".into(),
        idempotency_key: key.map(str::to_string),
        endpoint_ids: targets,
        ordering_key: None,
        inbound: None,
    }
}

/// A state with all shards granted to `NODE` and the given endpoints.
fn state_with(endpoints: &[Endpoint]) -> ClusterState {
    let mut state = ClusterState::default();
    let grants = (0..SHARD_COUNT).map(|s| (s, NODE)).collect();
    state.apply(&Command::AssignShards { now_ms: 1, grants });
    for e in endpoints {
        assert_eq!(state.apply(&Command::RegisterEndpoint { endpoint: Box::new(e.clone()) }), Response::Ok);
    }
    state
}

/// A state with one endpoint `a` (every event type) and one pending
/// delivery to it, of an event received at 5 ms.
fn one_pending(seed: u64) -> (ClusterState, Endpoint, DeliveryId) {
    let mut rng = StdRng::seed_from_u64(seed);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let (id, _) =
        created(state.apply(&Command::IngestEvents { now_ms: 5, events: vec![event(&mut rng, "a", None, None)] }))
            .remove(0);
    (state, a, id)
}

fn created(response: Response) -> Vec<(DeliveryId, EndpointId)> {
    match response {
        Response::Ingested { results } => match results.into_iter().next() {
            Some(IngestResult::Created { deliveries, .. }) => deliveries,
            other => panic!("expected Created, got {other:?}"),
        },
        other => panic!("expected Ingested, got {other:?}"),
    }
}

/// Every event's id, in memory and in the history, in id order.
fn all_event_ids(state: &ClusterState) -> Vec<EventId> {
    state.events_in((Bound::Unbounded, Bound::Unbounded), false).map(|e| e.id).collect()
}

fn outcome(state: &ClusterState, delivery: &DeliveryId, status: Option<u16>, decision: Decision) -> Outcome {
    let endpoint = &state.delivery(delivery).expect("stored").endpoint_id.clone();
    Outcome {
        delivery_id: *delivery,
        shard: endpoint.shard(),
        token: state.grant_for(endpoint).token,
        attempt: AttemptRecord {
            node_id: NODE,
            fencing_token: state.grant_for(endpoint).token,
            // Each attempt of a delivery starts at its own time (as the
            // actor's do), so its outcome is not taken for a repeat.
            started_at_ms: 3_000 + u64::from(state.delivery(delivery).expect("stored").attempt_count),
            latency_ms: 5,
            status_code: status,
            error: None,
            response_excerpt: None,
        },
        decision,
        breaker: None,
    }
}

/// `state` as a replica gets it in a snapshot: encoded and decoded, with
/// none of the derived indexes of the original.
fn decoded(state: &ClusterState) -> ClusterState {
    let bytes = bincode::serde::encode_to_vec(state, bincode::config::standard()).expect("encodes");
    // Decoding rebuilds the derived indexes and usage counters.
    bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).expect("decodes").0
}
