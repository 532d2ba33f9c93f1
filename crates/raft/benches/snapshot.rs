//! Benchmark of building a Raft snapshot of a loaded node: openraft's
//! `RaftSnapshotBuilder::build_snapshot` on a `StateMachineStore` over a
//! `MemDisk`, i.e. encoding the whole `ClusterState` (bincode, under the read
//! lock) and storing the snapshot on the disk, as a node does when openraft
//! asks it to compact its log.
//!
//! The state is built through the store's public `apply`, from log entries
//! as a node commits them: 100 endpoints, 10,000 events of 200-byte payloads
//! (one delivery each), half of them delivered (those are in the history,
//! encoded). Throughput is in bytes of the snapshot.
//!
//! `clone_state_10k_events` copies the same state in memory, for comparison.
//!
//! Run: `cargo bench -p hookraft-raft --bench snapshot`
//! (quicker: append `-- --warm-up-time 1 --measurement-time 3`).

use std::ops::Bound;

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use hookraft_core::command::Outcome;
use hookraft_core::ids::SHARD_COUNT;
use hookraft_core::model::DeliveryState;
use hookraft_core::state::ClusterState;
use hookraft_raft::{Command, Entry, EntryPayload, LogId, MemDisk, Response, StateMachineStore};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, RaftSnapshotBuilder};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::runtime::Runtime;

#[path = "../../core/benches/fixtures/mod.rs"]
mod fixtures;
use fixtures::{ENDPOINTS, NODE, NOW_MS, delivered, endpoint, new_event};

const EVENTS: usize = 10_000;
/// Events per `IngestEvents` entry, and outcomes per `RecordOutcomes` entry.
const BATCH: usize = 500;

/// Appends `commands` to the store as committed log entries after the last
/// applied one, and checks that none was refused.
fn commit(rt: &Runtime, store: &mut StateMachineStore, commands: Vec<Command>) {
    let next = store.handle().last_applied().map_or(1, |id| id.index + 1);
    let entries = commands.into_iter().zip(next..).map(|(command, index)| Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, NODE), index),
        payload: EntryPayload::Normal(command.into()),
    });
    let responses = rt.block_on(store.apply(entries)).expect("the state machine applies");
    for response in responses {
        assert!(
            !matches!(response, Response::Conflict { .. } | Response::NotFound { .. }),
            "command refused: {response:?}"
        );
    }
}

/// A state machine holding [`EVENTS`] events over [`ENDPOINTS`] endpoints,
/// every other delivery delivered.
fn loaded_store(rt: &Runtime) -> StateMachineStore {
    let (mut store, handle) = StateMachineStore::open(&MemDisk::new(), None).expect("opens on an empty disk");
    let mut rng = StdRng::seed_from_u64(7);

    let grants = (0..SHARD_COUNT).map(|shard| (shard, NODE)).collect();
    let mut setup = vec![Command::AssignShards { now_ms: NOW_MS, grants }];
    setup.extend((0..ENDPOINTS).map(|n| Command::RegisterEndpoint { endpoint: Box::new(endpoint(&mut rng, n)) }));
    commit(rt, &mut store, setup);

    let ingests = (0..EVENTS / BATCH)
        .map(|i| {
            let now_ms = NOW_MS + i as u64;
            let events = (i * BATCH..(i + 1) * BATCH).map(|n| new_event(&mut rng, n, now_ms)).collect();
            Command::IngestEvents { now_ms, events }
        })
        .collect();
    commit(rt, &mut store, ingests);

    let now_ms = NOW_MS + 2_000;
    let outcomes: Vec<Outcome> = {
        let state = handle.read();
        state.active.values().flatten().step_by(2).map(|id| delivered(&state, id, now_ms)).collect()
    };
    let records = outcomes
        .chunks(BATCH)
        .map(|batch| Command::RecordOutcomes { node_id: NODE, now_ms, outcomes: batch.to_vec() })
        .collect();
    commit(rt, &mut store, records);

    let state = handle.read();
    assert_eq!((state.event_count(), state.delivery_count()), (EVENTS, EVENTS));
    // The delivered half is finished: its events are in the history.
    let every = (Bound::Unbounded, Bound::Unbounded);
    let done = state.deliveries_in(every, false).filter(|d| d.state == DeliveryState::Delivered).count();
    assert_eq!((done, state.history().event_count()), (EVENTS / 2, EVENTS / 2));
    drop(state);
    store
}

fn bench_snapshot(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
    let mut store = loaded_store(&rt);
    rt.block_on(store.build_snapshot()).expect("the snapshot builds");
    let bytes = store.snapshot_bytes().load(std::sync::atomic::Ordering::Relaxed);

    let mut group = c.benchmark_group("snapshot");
    // Milliseconds per iteration: few flat samples keep the run short.
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("build_10k_events", |b| {
        b.iter(|| rt.block_on(store.build_snapshot()).expect("the snapshot builds"))
    });
    // Copying the state, the first step of any build that would let applies
    // go on while a copy is encoded: it costs about what the encoding does
    // (docs/benchmarks-history.md, "the log's flush path is not the lever"),
    // so holding applies for a copy gains nothing.
    let handle = store.handle();
    group.bench_function("clone_state_10k_events", |b| b.iter(|| ClusterState::clone(&handle.read())));
    group.finish();
}

criterion_group!(benches, bench_snapshot);
criterion_main!(benches);
