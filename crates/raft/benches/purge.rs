//! How long a purge holds openraft's core task, on sled: the log a snapshot
//! replaced (16,384 entries of 14 events, about 60 MiB) is purged from a
//! store opened cold, as after a day of ingest its entries are out of
//! sled's cache. Prints, for each of a few rounds, what removing those
//! entries and flushing costs when done inside the call (how `purge` worked
//! before note 30 of docs/DESIGN-NOTES.md) and how long `purge` holds the
//! caller now, then how long the background removal takes to empty the
//! disk below the purge point.
//!
//! `cargo bench -p hookraft-raft --bench purge`
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time; the clock seam is for production code")]

use std::ops::Bound;
use std::time::{Duration, Instant};

use hookraft_core::Command;
use hookraft_core::command::NewEvent;
use hookraft_core::ids::EventId;
use hookraft_raft::{Backend, Disk, Entry, EntryPayload, KvTree, LogId, LogStore, SledDisk, open};
use openraft::CommittedLeaderId;
use openraft::RaftLogReader;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Entries purged: what 64 MiB of log holds at about 3.6 KiB an entry.
const PURGED: u64 = 16_384;
/// Entries appended after them, so the purged ones are old.
const KEPT: u64 = 16_384;
const EVENTS_PER_ENTRY: usize = 14;
const ROUNDS: usize = 3;

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn entry(rng: &mut StdRng, index: u64) -> Entry {
    let events = (0..EVENTS_PER_ENTRY)
        .map(|_| NewEvent {
            id: EventId::generate(1_700_000_000_000, rng),
            event_type: "bench.1".into(),
            payload: format!("{{\"pad\":\"{}\"}}", "x".repeat(190)).into(),
            idempotency_key: None,
            endpoint_ids: None,
            ordering_key: None,
            inbound: None,
        })
        .collect();
    Entry { log_id: log_id(index), payload: EntryPayload::Normal(Command::IngestEvents { now_ms: 1, events }.into()) }
}

/// A sled store at `backend` holding entries 1..=PURGED+KEPT, closed again.
async fn fill(backend: &Backend) {
    let mut rng = StdRng::seed_from_u64(7);
    let (mut store, _sm, _state) = open(backend, None).expect("open");
    for from in (1..=PURGED + KEPT).step_by(64) {
        let entries: Vec<Entry> = (from..from + 64).map(|i| entry(&mut rng, i)).collect();
        store.blocking_append(entries).await.expect("append");
    }
}

fn stored_through(tree: &dyn KvTree, index: u64) -> usize {
    tree.range(Bound::Unbounded, Bound::Included(&index.to_be_bytes()[..]), usize::MAX).expect("range").len()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("purge of {PURGED} entries of {EVENTS_PER_ENTRY} events, {KEPT} newer entries kept, sled, cold cache");
    for round in 1..=ROUNDS {
        // Inside the call: remove the range, then flush.
        let dir = tempfile::tempdir().expect("temp dir");
        fill(&Backend::sled(dir.path())).await;
        let disk = SledDisk::open(dir.path()).expect("reopen");
        let tree = disk.open_tree("raft_log").expect("log tree");
        let started = Instant::now();
        tree.remove_range(Bound::Unbounded, Bound::Included(&PURGED.to_be_bytes()[..])).expect("remove");
        tree.flush().await.expect("flush");
        let inline = started.elapsed();
        drop((tree, disk));

        // `purge` now: the purge point, then a background removal.
        let dir = tempfile::tempdir().expect("temp dir");
        fill(&Backend::sled(dir.path())).await;
        let disk = SledDisk::open(dir.path()).expect("reopen");
        let mut store = LogStore::open(&disk).expect("open the log");
        let tree = disk.open_tree("raft_log").expect("log tree");
        let started = Instant::now();
        store.purge(log_id(PURGED)).await.expect("purge");
        let held = started.elapsed();
        let first = store.try_get_log_entries(0..PURGED + 2).await.expect("read");
        assert_eq!(first.first().map(|e| e.log_id.index), Some(PURGED + 1), "purged entries are gone for readers");
        let removed_in = loop {
            if stored_through(&*tree, PURGED) == 0 {
                break started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        println!(
            "round {round}: inside the call {:.1} ms; purge now holds the caller {:.2} ms, the disk is emptied below the purge point {:.1} ms later",
            ms(inline),
            ms(held),
            ms(removed_in)
        );
    }
}
