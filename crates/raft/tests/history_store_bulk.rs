//! The history store at size: an import's memory, in a test binary of its
//! own so no other test's allocations share its process's peak, and (run by
//! hand, in release) the timings of a flush, an export and an import.

use std::io::{BufReader, BufWriter};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::state::history_store::{Flush, HistoryStore, StoreCounts, StoredDelivery, StoredEvent};
use hookraft_raft::history_store::{HISTORY_CACHE_BYTES_DEFAULT, RedbHistory};

/// The tests here measure the process: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Events `first..first + count` with one delivery each, records of about
/// `event_bytes` and `delivery_bytes`; every tenth delivery dead.
fn batch(first: u64, count: u64, event_bytes: usize, delivery_bytes: usize) -> Flush {
    let ids = first..first + count;
    Flush {
        events: ids
            .clone()
            .map(|n| StoredEvent {
                id: EventId::from_bytes((u128::from(n) << 16).to_be_bytes()),
                received_at_ms: 1_700_000_000_000 + n,
                record: vec![n as u8; event_bytes + (n % 64) as usize],
            })
            .collect(),
        deliveries: ids
            .map(|n| StoredDelivery {
                id: DeliveryId::from_bytes((u128::from(n) << 16).to_be_bytes()),
                dead_of: (n % 10 == 0).then(|| EndpointId::from_bytes(u128::from(n % 50).to_be_bytes())),
                record: vec![!(n as u8); delivery_bytes + (n % 32) as usize],
            })
            .collect(),
        ..Flush::default()
    }
}

/// A `/proc/self/status` figure, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|line| line.starts_with(field)).expect("the field");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("a number of KiB")
}

/// Resets the process's peak resident size (`VmHWM`) to its current one.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("resets VmHWM");
}

/// Exports `store`'s latest commit into the file `path`; returns its bytes.
fn export_to(store: &RedbHistory, path: &Path) -> u64 {
    let mut file = BufWriter::new(std::fs::File::create(path).expect("creates"));
    store.view().expect("view").export(&mut file).expect("exports")
}

fn import_from(stream: &Path, path: &Path) -> RedbHistory {
    let mut file = BufReader::new(std::fs::File::open(stream).expect("opens"));
    RedbHistory::import(&mut file, path, HISTORY_CACHE_BYTES_DEFAULT).expect("imports")
}

#[test]
fn an_import_of_200_mb_stays_within_modest_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    // 40 flushes of 2,500 events (~1.5 KB) and deliveries (~0.5 KB): 200 MB of records,
    // built in small pieces so little of the building is left in the heap.
    let counts = {
        let source = RedbHistory::open(&dir.path().join("source.redb"), 1 << 20).expect("opens");
        let mut counts = StoreCounts::default();
        for step in 0..40 {
            counts = source.flush(&batch(step * 2_500, 2_500, 1_500, 500), [b"state"], b"applied").expect("flushes");
        }
        assert!(counts.bytes > 200_000_000, "{counts:?}");
        export_to(&source, &dir.path().join("stream"));
        counts
    };

    reset_peak();
    let before = status_kib("VmHWM:");
    let imported = import_from(&dir.path().join("stream"), &dir.path().join("imported.redb"));
    let growth_mib = (status_kib("VmHWM:") - before) / 1024;
    assert_eq!(imported.counts().expect("counts"), counts);
    println!("importing {} MB of records raised the peak resident size by {growth_mib} MiB", counts.bytes / 1_000_000);
    // Under the stream's own size, so an import that held the stream (or a
    // transaction of it all) fails; above redb's cache and one commit's pages.
    assert!(
        growth_mib < 160,
        "importing {} MB raised the peak resident size by {growth_mib} MiB",
        counts.bytes / 1_000_000
    );
}

/// Timings: ten flushes of 20,000 events + 20,000 deliveries (~600 B each)
/// with a 4 MiB state, then an export of the store and its import. Run by
/// hand, in release: `cargo test --release -p hookraft-raft --test
/// history_store_bulk -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, run by hand in release"]
#[allow(clippy::disallowed_methods, reason = "a measurement of real time; the clock seam is for production code")]
fn timings_of_flush_export_and_import() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let store = RedbHistory::open(&dir.path().join("history.redb"), HISTORY_CACHE_BYTES_DEFAULT).expect("opens");
    let state = vec![7u8; 4 << 20];
    let mut flushes = Vec::new();
    for step in 0..10 {
        let flush = batch(step * 20_000, 20_000, 570, 570);
        let started = Instant::now();
        store.flush(&flush, [&state], b"applied").expect("flushes");
        flushes.push(started.elapsed());
    }
    let counts = store.counts().expect("counts");
    flushes.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "flush of 20,000 + 20,000 records ({:.1} MB of records) and a 4 MiB state, 10 flushes: p50 {:.0} ms, min {:.0} ms, max {:.0} ms",
        counts.bytes as f64 / 10.0 / 1e6,
        ms(flushes[5]),
        ms(flushes[0]),
        ms(flushes[9])
    );

    let stream = dir.path().join("stream");
    let started = Instant::now();
    let bytes = export_to(&store, &stream);
    let export = started.elapsed();
    let started = Instant::now();
    let imported = import_from(&stream, &dir.path().join("imported.redb"));
    let import = started.elapsed();
    assert_eq!(imported.counts().expect("counts"), counts);
    let mb_s = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
    println!(
        "stream of {:.1} MB ({} events, {} deliveries): export {:.2} s, {:.0} MB/s; import {:.2} s, {:.0} MB/s",
        bytes as f64 / 1e6,
        counts.events,
        counts.deliveries,
        export.as_secs_f64(),
        mb_s(export),
        import.as_secs_f64(),
        mb_s(import)
    );
}
