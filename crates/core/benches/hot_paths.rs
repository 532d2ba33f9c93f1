//! Micro-benchmarks of hookraft-core's hot pure functions:
//!
//! - `signing/sign` and `signing/verify`: one Standard Webhooks `v1,`
//!   signature over a 200-byte body, made and checked as a receiver would.
//! - `apply/ingest_1024_events`: `ClusterState::apply` of one `IngestEvents`
//!   batch of 1,024 events with 200-byte payloads against 100 endpoints, each
//!   subscribed to its own event type, so every event makes one delivery.
//! - `apply/record_256_outcomes`: `ClusterState::apply` of one
//!   `RecordOutcomes` batch of 256 successful attempts, all under the current
//!   fencing token, so every one is applied.
//!
//! The `apply` benchmarks run each iteration on a fresh clone of the state
//! (cloned outside the timing) and report throughput in events or outcomes.
//!
//! Run: `cargo bench -p hookraft-core --bench hot_paths`
//! (quicker: append `-- --warm-up-time 1 --measurement-time 3`).

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use hookraft_core::command::{IngestResult, NewEvent, Outcome};
use hookraft_core::ids::{EndpointId, EventId, NodeId, SHARD_COUNT};
use hookraft_core::model::{AttemptRecord, Endpoint};
use hookraft_core::retry::Decision;
use hookraft_core::signing::{self, Secret};
use hookraft_core::{ClusterState, Command, Response};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Bytes of every request body and event payload.
const PAYLOAD_BYTES: usize = 200;
const ENDPOINTS: usize = 100;
const INGEST_BATCH: usize = 1_024;
const OUTCOME_BATCH: usize = 256;
/// The node that owns every shard and reports the outcomes.
const NODE: NodeId = 1;
const NOW_MS: u64 = 1_700_000_000_000;
const NOW_S: u64 = NOW_MS / 1_000;

/// A JSON object of exactly [`PAYLOAD_BYTES`] bytes, distinct per `n`.
fn payload(n: usize) -> String {
    let head = format!(r#"{{"id":"inv_{n:08}","type":"invoice.paid","amount":4200,"currency":"eur","note":""#);
    let tail = r#""}"#;
    let body = format!("{head}{}{tail}", "x".repeat(PAYLOAD_BYTES - head.len() - tail.len()));
    debug_assert_eq!(body.len(), PAYLOAD_BYTES);
    body
}

fn event_type(n: usize) -> String {
    format!("type.{n}")
}

fn endpoint(rng: &mut StdRng, n: usize) -> Endpoint {
    let id = EndpointId::generate(NOW_MS, rng);
    let mut endpoint = Endpoint::new(id, format!("https://hooks.example.com/{n}"), Secret::generate(rng), NOW_MS);
    endpoint.event_types = Some(vec![event_type(n)]);
    endpoint
}

/// Every shard granted to [`NODE`] and [`ENDPOINTS`] endpoints registered.
fn state_with_endpoints(rng: &mut StdRng) -> ClusterState {
    let mut state = ClusterState::default();
    let grants = (0..SHARD_COUNT).map(|shard| (shard, NODE)).collect();
    state.apply(&Command::AssignShards { now_ms: NOW_MS, grants });
    for n in 0..ENDPOINTS {
        let registered = state.apply(&Command::RegisterEndpoint { endpoint: Box::new(endpoint(rng, n)) });
        assert_eq!(registered, Response::Ok);
    }
    state
}

/// A batch of `count` events, spread round-robin over the endpoints' types.
fn ingest_command(rng: &mut StdRng, count: usize, now_ms: u64) -> Command {
    let events = (0..count)
        .map(|n| NewEvent {
            id: EventId::generate(now_ms, rng),
            event_type: event_type(n % ENDPOINTS),
            payload: payload(n),
            idempotency_key: Some(format!("idem-{now_ms}-{n}")),
            endpoint_ids: None,
        })
        .collect();
    Command::IngestEvents { now_ms, events }
}

/// A successful attempt of each of the first `count` active deliveries,
/// under its shard's current grant.
fn delivered_outcomes(state: &ClusterState, count: usize, now_ms: u64) -> Command {
    let outcomes = state
        .active
        .values()
        .flatten()
        .take(count)
        .map(|delivery_id| {
            let endpoint_id = &state.deliveries[delivery_id].endpoint_id;
            let token = state.grant_for(endpoint_id).token;
            Outcome {
                delivery_id: delivery_id.clone(),
                shard: endpoint_id.shard(),
                token,
                attempt: AttemptRecord {
                    node_id: NODE,
                    fencing_token: token,
                    started_at_ms: now_ms - 40,
                    latency_ms: 40,
                    status_code: Some(200),
                    error: None,
                    response_excerpt: Some(r#"{"ok":true}"#.to_owned()),
                },
                decision: Decision::Delivered,
                breaker: None,
            }
        })
        .collect::<Vec<_>>();
    assert_eq!(outcomes.len(), count, "not enough active deliveries");
    Command::RecordOutcomes { node_id: NODE, now_ms, outcomes }
}

fn bench_signing(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(1);
    let secret = Secret::generate(&mut rng);
    let msg_id = EventId::generate(NOW_MS, &mut rng);
    let body = payload(0);
    let signature = signing::sign(&secret, msg_id.as_str(), NOW_S, body.as_bytes());
    let timestamp = NOW_S.to_string();
    let secrets = [&secret];
    assert_eq!(signing::verify(&secrets, msg_id.as_str(), &timestamp, &signature, body.as_bytes(), NOW_S), Ok(()));

    let mut group = c.benchmark_group("signing");
    group.throughput(Throughput::Elements(1));
    group.bench_function("sign", |b| {
        b.iter(|| signing::sign(black_box(&secret), black_box(msg_id.as_str()), NOW_S, black_box(body.as_bytes())))
    });
    group.bench_function("verify", |b| {
        b.iter(|| {
            signing::verify(
                black_box(&secrets),
                black_box(msg_id.as_str()),
                black_box(&timestamp),
                black_box(&signature),
                black_box(body.as_bytes()),
                NOW_S,
            )
        })
    });
    group.finish();
}

fn bench_apply(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(2);
    let endpoints_only = state_with_endpoints(&mut rng);
    let ingest = ingest_command(&mut rng, INGEST_BATCH, NOW_MS + 1);

    // Check once that the batch does what the benchmark says it measures.
    let mut ingested = endpoints_only.clone();
    let Response::Ingested { results } = ingested.apply(&ingest) else { panic!("IngestEvents answers Ingested") };
    assert!(results.iter().all(|r| matches!(r, IngestResult::Created { deliveries, .. } if deliveries.len() == 1)));
    assert_eq!(ingested.deliveries.len(), INGEST_BATCH);

    let outcomes = delivered_outcomes(&ingested, OUTCOME_BATCH, NOW_MS + 2);
    let expected = Response::OutcomesApplied { applied: OUTCOME_BATCH as u32, stale: 0, ignored: 0 };
    assert_eq!(ingested.clone().apply(&outcomes), expected);

    let mut group = c.benchmark_group("apply");
    // Returning the state moves its drop out of the timed section.
    group.throughput(Throughput::Elements(INGEST_BATCH as u64));
    group.bench_function("ingest_1024_events", |b| {
        b.iter_batched(
            || endpoints_only.clone(),
            |mut state| {
                let response = state.apply(black_box(&ingest));
                (state, response)
            },
            BatchSize::LargeInput,
        )
    });
    group.throughput(Throughput::Elements(OUTCOME_BATCH as u64));
    group.bench_function("record_256_outcomes", |b| {
        b.iter_batched(
            || ingested.clone(),
            |mut state| {
                let response = state.apply(black_box(&outcomes));
                (state, response)
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_signing, bench_apply);
criterion_main!(benches);
