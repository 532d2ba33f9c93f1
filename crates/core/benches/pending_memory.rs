//! Memory of a pending delivery in the replicated state, measured with a
//! counting allocator (not RSS): 100,000 events with 200-byte payloads and
//! idempotency keys, each making one pending delivery, then each part of
//! the state dropped in turn to see what it held. (The node also keeps, per
//! pending delivery, its actor's queue entry; the backlog benchmark's RSS
//! figure covers everything.) Then the same events delivered, each once,
//! to see what a finished one holds in the history (design note 61).
//!
//! Run: `cargo bench -p hookraft-core --bench pending_memory`

use std::alloc::System;

use hookraft_core::ids::{DeliveryId, SHARD_COUNT};
use hookraft_core::model::{Delivery, Event, TimelineEntry};
use hookraft_core::{ClusterState, Command};
use rand::SeedableRng;
use rand::rngs::StdRng;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

// Shared with `hot_paths`, which uses the outcome fixtures this one does not.
#[allow(dead_code)]
mod fixtures;
use fixtures::{ENDPOINTS, NODE, NOW_MS, PAYLOAD_BYTES, delivered, endpoint, new_event};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const EVENTS: usize = 100_000;
const BATCH: usize = 1_000;

/// Bytes allocated and not yet freed.
fn live() -> isize {
    let stats = ALLOCATOR.stats();
    stats.bytes_allocated as isize - stats.bytes_deallocated as isize + stats.bytes_reallocated
}

fn main() {
    pending();
    finished();
}

/// A state with the fixtures' endpoints and `EVENTS` events, one pending
/// delivery each.
fn ingested() -> ClusterState {
    let mut rng = StdRng::seed_from_u64(7);
    let mut state = ClusterState::default();
    let grants = (0..SHARD_COUNT).map(|shard| (shard, NODE)).collect();
    state.apply(&Command::AssignShards { now_ms: NOW_MS, grants });
    for n in 0..ENDPOINTS {
        state.apply(&Command::RegisterEndpoint { endpoint: Box::new(endpoint(&mut rng, n)) });
    }
    for start in (0..EVENTS).step_by(BATCH) {
        let now_ms = NOW_MS + start as u64;
        let events = (start..start + BATCH).map(|n| new_event(&mut rng, n, now_ms)).collect();
        state.apply(&Command::IngestEvents { now_ms, events });
    }
    state
}

fn pending() {
    let mut state = ingested();
    assert_eq!(state.deliveries.len(), EVENTS, "one delivery per event");
    let per = |bytes: isize| bytes as f64 / EVENTS as f64;
    println!("pending deliveries: {EVENTS}, payload {PAYLOAD_BYTES} bytes each");
    // What admission control reads (`ClusterState::usage`), to compare with the count below.
    let usage = state.usage();
    assert_eq!(usage.pending, EVENTS as u64);
    println!("usage estimate: {:.0} bytes per pending delivery", per(usage.bytes as isize));
    // What each part frees when dropped: exact (the sizes freed are the sizes held).
    let mut parts = Vec::new();
    let mut part = |name: &'static str, drop_it: &mut dyn FnMut(&mut ClusterState)| {
        let at = live();
        drop_it(&mut state);
        parts.push((name, per(at - live())));
    };
    part("idempotency", &mut |s| s.idempotency = Default::default());
    part("active", &mut |s| s.active = Default::default());
    part("deliveries", &mut |s| s.deliveries = Default::default());
    part("events", &mut |s| s.events = Default::default());
    let held: f64 = parts.iter().map(|(_, b)| b).sum();
    println!(
        "held by the replicated state: {held:.0} bytes per pending delivery, {:.0} beyond the payload",
        held - PAYLOAD_BYTES as f64
    );
    for (name, bytes) in parts {
        println!("  {name:<12} {bytes:>6.0} bytes");
    }
    println!(
        "sizes: Delivery {} B, Event {} B, TimelineEntry {} B, DeliveryId {} B",
        size_of::<Delivery>(),
        size_of::<Event>(),
        size_of::<TimelineEntry>(),
        size_of::<DeliveryId>()
    );
}

/// What a finished event and its delivery hold once the history keeps
/// them: the live bytes after every delivery is delivered, against the
/// same state before (the maps' own slack included).
fn finished() {
    let base = live();
    let mut state = ingested();
    let pending = live() - base;
    let ids: Vec<DeliveryId> = state.deliveries.keys().copied().collect();
    for chunk in ids.chunks(BATCH) {
        let outcomes = chunk.iter().map(|id| delivered(&state, id, NOW_MS + 1)).collect();
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: NOW_MS + 1, outcomes });
    }
    assert!(state.deliveries.is_empty() && state.history().delivery_count() == EVENTS, "all finished");
    drop(ids);
    let encoded = state.history().bytes() as isize;
    let at_finish = live();
    drop(state);
    let finished = at_finish - live();
    let per = |bytes: isize| bytes as f64 / EVENTS as f64;
    println!("finished deliveries: {EVENTS}, each with its attempt and delivery on its timeline");
    println!(
        "held by the whole state: {:.0} bytes per finished delivery (its records encoded: {:.0}), {:.0} while pending",
        per(finished),
        per(encoded),
        per(pending)
    );
}
