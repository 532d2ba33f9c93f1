//! Memory of a pending delivery in the replicated state, measured with a
//! counting allocator (not RSS): 100,000 events with 200-byte payloads and
//! idempotency keys, each making one pending delivery, then each part of
//! the state dropped in turn to see what it held. (The node also keeps, per
//! pending delivery, its actor's queue entry; the backlog benchmark's RSS
//! figure covers everything.)
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
use fixtures::{ENDPOINTS, NODE, NOW_MS, PAYLOAD_BYTES, endpoint, new_event};

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
