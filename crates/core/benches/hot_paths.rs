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
//! - `dense/split_chunk`: the one insert into a `DenseMap` of deliveries
//!   (id → boxed record) that fills a chunk and rebuilds it as two halves:
//!   the longest pause the dense maps add to one `apply`, whatever their size.
//! - `dense/append_1m` and `btreemap/append_1m`: a million deliveries
//!   inserted in id order into a `DenseMap` and into a plain `BTreeMap`:
//!   what keeping the map dense costs over all.
//!
//! - `after_clone/ingest_10_events/{alone,beside_a_clone}`: one
//!   `IngestEvents` batch of 10 events applied to a state of 24,576 events
//!   built for the iteration, alone or while a clone of it is alive (as a
//!   snapshot's encoding holds one): what a first write after the clone
//!   pays to copy the chunks it changes.
//! - `prune_512_events/{alone,beside_a_clone}`: one `Prune` that forgets
//!   512 delivered events (the leader's batch) and their deliveries, the
//!   oldest of a state of 16,384 built for the iteration, alone or while a
//!   clone of it is alive.
//!
//! The `apply` benchmarks run each iteration on a fresh clone of the state
//! (cloned outside the timing) and report throughput in events or outcomes.
//!
//! Run: `cargo bench -p hookraft-core --bench hot_paths`
//! (quicker: append `-- --warm-up-time 1 --measurement-time 3`).

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use hookraft_core::command::IngestResult;
use hookraft_core::dense::{CHUNK_SPLIT_LEN, DenseMap};
use hookraft_core::ids::{DeliveryId, EventId, SHARD_COUNT};
use hookraft_core::signing::{self, Secret};
use hookraft_core::{ClusterState, Command, Response};
use rand::SeedableRng;
use rand::rngs::StdRng;

mod fixtures;
use fixtures::{ENDPOINTS, NODE, NOW_MS, delivered, endpoint, new_event, payload};

const INGEST_BATCH: usize = 1_024;
const OUTCOME_BATCH: usize = 256;
/// What one `Prune` entry of the leader's removes at most (`hookraft_node::lease::PRUNE_BATCH`).
const PRUNE_BATCH: usize = 512;
const NOW_S: u64 = NOW_MS / 1_000;

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
    let events = (0..count).map(|n| new_event(rng, n, now_ms)).collect();
    Command::IngestEvents { now_ms, events }
}

/// A successful attempt of each of the first `count` active deliveries.
fn delivered_outcomes(state: &ClusterState, count: usize, now_ms: u64) -> Command {
    let outcomes =
        state.active.values().flatten().take(count).map(|id| delivered(state, id, now_ms)).collect::<Vec<_>>();
    assert_eq!(outcomes.len(), count, "not enough active deliveries");
    Command::RecordOutcomes { node_id: NODE, now_ms, outcomes }
}

fn bench_signing(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(1);
    let secret = Secret::generate(&mut rng);
    let msg_id = EventId::generate(NOW_MS, &mut rng);
    let body = payload(0);
    let signature = signing::sign(&secret, &msg_id.as_str(), NOW_S, body.as_bytes());
    let timestamp = NOW_S.to_string();
    let secrets = [&secret];
    assert_eq!(signing::verify(&secrets, &msg_id.as_str(), &timestamp, &signature, body.as_bytes(), NOW_S), Ok(()));

    let mut group = c.benchmark_group("signing");
    group.throughput(Throughput::Elements(1));
    group.bench_function("sign", |b| {
        b.iter(|| signing::sign(black_box(&secret), black_box(&msg_id.as_str()), NOW_S, black_box(body.as_bytes())))
    });
    group.bench_function("verify", |b| {
        b.iter(|| {
            signing::verify(
                black_box(&secrets),
                black_box(&msg_id.as_str()),
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
    apply_on_a_clone(&mut group, "ingest_1024_events", INGEST_BATCH, &endpoints_only, &ingest);
    apply_on_a_clone(&mut group, "record_256_outcomes", OUTCOME_BATCH, &ingested, &outcomes);
    group.finish();
}

/// Times `state.apply(command)` on a fresh clone of `state` per iteration
/// (cloned outside the timing; returning the state moves its drop out too).
fn apply_on_a_clone(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    elements: usize,
    state: &ClusterState,
    command: &Command,
) {
    group.throughput(Throughput::Elements(elements as u64));
    group.bench_function(name, |b| {
        b.iter_batched(
            || state.clone(),
            |mut state| {
                let response = state.apply(black_box(command));
                (state, response)
            },
            BatchSize::LargeInput,
        )
    });
}

/// The insert that splits a full chunk, and a million appends against a
/// plain `BTreeMap` (maps built and dropped outside the timing).
fn bench_dense(c: &mut Criterion) {
    const ENTRIES: u64 = 1_000_000;
    let mut rng = StdRng::seed_from_u64(3);
    let ids: Vec<DeliveryId> = (0..ENTRIES).map(|n| DeliveryId::generate(NOW_MS + n, &mut rng)).collect();
    let mut group = c.benchmark_group("dense");
    group.sample_size(10);
    let full: DenseMap<DeliveryId, Box<[u64; 16]>> =
        ids[..CHUNK_SPLIT_LEN - 1].iter().map(|&id| (id, Box::new([0; 16]))).collect();
    let next = ids[CHUNK_SPLIT_LEN - 1];
    group.bench_function("split_chunk", |b| {
        b.iter_batched(
            || full.clone(),
            |mut map| {
                map.insert(black_box(next), Box::new([1; 16]));
                map
            },
            BatchSize::LargeInput,
        )
    });
    group.throughput(Throughput::Elements(ENTRIES));
    group.bench_function("append_1m", |b| {
        b.iter_batched(
            || ids.clone(),
            |ids| ids.into_iter().map(|id| (id, Box::new([0u64; 16]))).collect::<DenseMap<_, _>>(),
            BatchSize::LargeInput,
        )
    });
    group.finish();
    let mut group = c.benchmark_group("btreemap");
    group.sample_size(10);
    group.throughput(Throughput::Elements(ENTRIES));
    group.bench_function("append_1m", |b| {
        b.iter_batched(
            || ids.clone(),
            |ids| {
                let mut map = std::collections::BTreeMap::new();
                for id in ids {
                    map.insert(id, Box::new([0u64; 16]));
                }
                map
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

/// The first apply after the state was cloned, against the same apply on a
/// state that shares nothing (both states built outside the timing).
fn bench_after_clone(c: &mut Criterion) {
    const EVENTS: usize = 3 * CHUNK_SPLIT_LEN;
    const BATCH: usize = 10;
    let build = || {
        let mut rng = StdRng::seed_from_u64(4);
        let mut state = state_with_endpoints(&mut rng);
        for batch in 0..EVENTS / INGEST_BATCH {
            state.apply(&ingest_command(&mut rng, INGEST_BATCH, NOW_MS + batch as u64));
        }
        state
    };
    let mut rng = StdRng::seed_from_u64(5);
    let ingest = ingest_command(&mut rng, BATCH, NOW_MS + EVENTS as u64);
    let mut checked = build();
    checked.apply(&ingest);
    assert_eq!(checked.deliveries.len(), EVENTS + BATCH, "every event makes one delivery");

    let mut group = c.benchmark_group("after_clone/ingest_10_events");
    alone_and_beside_a_clone(&mut group, build, &ingest);
    group.finish();
}

/// Times `command` applied to a state `build` makes for the iteration, as
/// `alone`, and while a clone of that state is alive, as `beside_a_clone`
/// (as a snapshot's encoding holds one). Building stays outside the timing.
fn alone_and_beside_a_clone(
    group: &mut BenchmarkGroup<'_, WallTime>,
    build: impl Fn() -> ClusterState + Copy,
    command: &Command,
) {
    group.sample_size(20);
    group.bench_function("alone", |b| {
        b.iter_batched(
            build,
            |mut state| {
                let response = state.apply(black_box(command));
                (state, response)
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("beside_a_clone", |b| {
        b.iter_batched(
            || {
                let state = build();
                let clone = state.clone();
                (state, clone)
            },
            |(mut state, clone)| {
                let response = state.apply(black_box(command));
                (state, clone, response)
            },
            BatchSize::PerIteration,
        )
    });
}

fn bench_prune(c: &mut Criterion) {
    const EVENTS: usize = 16 * INGEST_BATCH;
    let build = || {
        let mut rng = StdRng::seed_from_u64(6);
        let mut state = state_with_endpoints(&mut rng);
        for round in 0..(EVENTS / INGEST_BATCH) as u64 {
            state.apply(&ingest_command(&mut rng, INGEST_BATCH, NOW_MS + 10 + round));
            let active = state.active.values().map(|s| s.len()).sum();
            state.apply(&delivered_outcomes(&state, active, NOW_MS + 50 + round));
        }
        state
    };
    let prune = Command::Prune { now_ms: NOW_MS + 100, before_ms: NOW_MS + 100, max_events: PRUNE_BATCH as u32 };
    let mut checked = build();
    assert_eq!(checked.apply(&prune), Response::Pruned { events: PRUNE_BATCH as u32, deliveries: PRUNE_BATCH as u32 });
    assert_eq!(checked.events.len(), EVENTS - PRUNE_BATCH);

    let mut group = c.benchmark_group("prune_512_events");
    group.throughput(Throughput::Elements(PRUNE_BATCH as u64));
    alone_and_beside_a_clone(&mut group, build, &prune);
    group.finish();
}

criterion_group!(benches, bench_signing, bench_apply, bench_dense, bench_after_clone, bench_prune);
criterion_main!(benches);
