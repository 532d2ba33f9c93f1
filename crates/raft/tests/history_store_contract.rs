//! The store on disk answers as core's store in memory (`MemStore`, the
//! reference the history's layers are checked against): the same flushes,
//! committed to both, leave the same answers to every read.

use std::ops::Bound;

use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::state::IdRange;
use hookraft_core::state::history_store::{Flush, HistoryStore, MemStore, StoredDelivery, StoredEvent};
use hookraft_raft::history_store::RedbHistory;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// A stored record: its id, its time or dead row, and which version it is.
#[derive(Clone, Copy)]
struct Held {
    n: u64,
    received_at_ms: u64,
    dead_of: Option<EndpointId>,
}

fn event_id(n: u64) -> EventId {
    EventId::from_bytes((u128::from(n) << 20).to_be_bytes())
}

fn delivery_id(n: u64) -> DeliveryId {
    DeliveryId::from_bytes(((u128::from(n) << 20) | 7).to_be_bytes())
}

fn endpoint(n: u64) -> EndpointId {
    EndpointId::from_bytes(u128::from(n % 3 + 1).to_be_bytes())
}

/// A random flush as the history makes them: removals of held records,
/// some put again as new versions, and new records.
fn flush(rng: &mut StdRng, held: &mut Vec<Held>, next: &mut u64, version: u8) -> Flush {
    let mut flush = Flush::default();
    let put = |flush: &mut Flush, h: Held| {
        flush.events.push(StoredEvent {
            id: event_id(h.n),
            received_at_ms: h.received_at_ms,
            record: vec![version; 1 + (h.n % 5) as usize],
        });
        flush.deliveries.push(StoredDelivery {
            id: delivery_id(h.n),
            dead_of: h.dead_of,
            record: vec![!version; 2 + (h.n % 3) as usize],
        });
    };
    for _ in 0..rng.random_range(0..4) {
        if held.is_empty() {
            break;
        }
        let h = held.swap_remove(rng.random_range(0..held.len()));
        flush.removed_events.push((h.received_at_ms, event_id(h.n)));
        flush.removed_deliveries.push((delivery_id(h.n), h.dead_of));
        if rng.random_bool(0.5) {
            let again = Held { dead_of: if h.dead_of.is_some() { None } else { Some(endpoint(h.n)) }, ..h };
            put(&mut flush, again);
            held.push(again);
        }
    }
    for _ in 0..rng.random_range(0..6) {
        let n = *next;
        *next += 1;
        let h = Held { n, received_at_ms: rng.random_range(0..40), dead_of: rng.random_bool(0.4).then(|| endpoint(n)) };
        put(&mut flush, h);
        held.push(h);
    }
    flush
}

/// Every read, as text, with pages of `limit`.
fn reads(store: &dyn HistoryStore, bound: u64, limit: usize) -> String {
    let ranges: [IdRange<u64>; 3] = [
        (Bound::Unbounded, Bound::Unbounded),
        (Bound::Excluded(bound), Bound::Unbounded),
        (Bound::Unbounded, Bound::Included(bound)),
    ];
    let mut out = format!("{:?}\n", store.counts().unwrap());
    for (start, end) in ranges {
        for newest_first in [false, true] {
            let events = (start.map(event_id), end.map(event_id));
            let deliveries = (start.map(delivery_id), end.map(delivery_id));
            out += &format!("{:?}\n", store.events(events, newest_first, limit).unwrap());
            out += &format!("{:?}\n", store.deliveries(deliveries, newest_first, limit).unwrap());
            for e in 0..3 {
                out += &format!("{:?}\n", store.dead(&endpoint(e), deliveries, newest_first, limit).unwrap());
            }
        }
    }
    out += &format!("{:?}\n", store.received(None, limit).unwrap());
    out += &format!("{:?}\n", store.received(Some((bound % 40, event_id(bound))), limit).unwrap());
    for n in [0, bound, bound + 1] {
        out += &format!("{:?} {:?}\n", store.event(&event_id(n)).unwrap(), store.delivery(&delivery_id(n)).unwrap());
    }
    out
}

#[test]
fn the_store_on_disk_answers_as_the_store_in_memory_after_every_flush() {
    for seed in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let disk = RedbHistory::open(&dir.path().join("history.redb"), 1 << 20).unwrap();
        let mut memory = MemStore::default();
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut held, mut next) = (Vec::new(), 0);
        for version in 0..30u8 {
            let flush = flush(&mut rng, &mut held, &mut next, version);
            disk.flush(&flush, [b"state".as_slice()], b"applied").unwrap();
            memory.apply(&flush);
            let bound = rng.random_range(0..next.max(1));
            for limit in [1, 4, 1_000] {
                assert_eq!(
                    reads(&disk, bound, limit),
                    reads(&memory, bound, limit),
                    "seed {seed}, flush {version}, limit {limit}"
                );
            }
        }
    }
}
