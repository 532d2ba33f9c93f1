use std::collections::{BTreeMap, BTreeSet};

use hookraft_core::state::history_store::{StoredDelivery, StoredEvent};

use super::*;

fn event_id(n: u64) -> EventId {
    EventId::from_bytes((u128::from(n) << 20 | 0xe).to_be_bytes())
}

fn delivery_id(n: u64) -> DeliveryId {
    DeliveryId::from_bytes((u128::from(n) << 20 | 0xd).to_be_bytes())
}

fn endpoint_id(n: u64) -> EndpointId {
    EndpointId::from_bytes((u128::from(n) << 20 | 0xa).to_be_bytes())
}

/// A record of `len` bytes that names `n`, so records differ.
fn record(n: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (n as usize).wrapping_mul(31).wrapping_add(i) as u8).collect()
}

fn stored_event(n: u64, received_at_ms: u64, len: usize) -> StoredEvent {
    StoredEvent { id: event_id(n), received_at_ms, record: record(n, len) }
}

fn stored_delivery(n: u64, dead_of: Option<u64>, len: usize) -> StoredDelivery {
    StoredDelivery { id: delivery_id(n), dead_of: dead_of.map(endpoint_id), record: record(n + 1_000_000, len) }
}

fn open(dir: &tempfile::TempDir) -> RedbHistory {
    RedbHistory::open(&dir.path().join("history.redb"), 1 << 20).expect("opens")
}

/// What the store should hold: every table as ordered collections.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Model {
    events: BTreeMap<[u8; 16], Vec<u8>>,
    deliveries: BTreeMap<[u8; 16], Vec<u8>>,
    by_time: BTreeSet<(u64, [u8; 16])>,
    dead: BTreeSet<([u8; 16], [u8; 16])>,
}

impl Model {
    fn apply(&mut self, flush: &Flush) {
        for (at, id) in &flush.removed_events {
            self.events.remove(&id.to_bytes());
            self.by_time.remove(&(*at, id.to_bytes()));
        }
        for (id, dead_of) in &flush.removed_deliveries {
            self.deliveries.remove(&id.to_bytes());
            if let Some(endpoint) = dead_of {
                self.dead.remove(&(endpoint.to_bytes(), id.to_bytes()));
            }
        }
        for event in &flush.events {
            self.events.insert(event.id.to_bytes(), event.record.clone());
            self.by_time.insert((event.received_at_ms, event.id.to_bytes()));
        }
        for delivery in &flush.deliveries {
            self.deliveries.insert(delivery.id.to_bytes(), delivery.record.clone());
            if let Some(endpoint) = &delivery.dead_of {
                self.dead.insert((endpoint.to_bytes(), delivery.id.to_bytes()));
            }
        }
    }

    fn counts(&self) -> StoreCounts {
        StoreCounts {
            events: self.events.len() as u64,
            deliveries: self.deliveries.len() as u64,
            bytes: self.events.values().chain(self.deliveries.values()).map(|r| r.len() as u64).sum(),
        }
    }

    fn dead_of(&self, endpoint: &EndpointId) -> Vec<DeliveryId> {
        let endpoint = endpoint.to_bytes();
        self.dead.iter().filter(|(e, _)| *e == endpoint).map(|(_, d)| DeliveryId::from_bytes(*d)).collect()
    }
}

const ALL: usize = usize::MAX;

/// Asserts that every read of `store` answers what `model` holds.
fn assert_holds(store: &impl HistoryStore, model: &Model) {
    assert_eq!(store.counts().expect("counts"), model.counts(), "counts");
    let events = store.events((Bound::Unbounded, Bound::Unbounded), false, ALL).expect("events");
    let expected: Vec<_> = model.events.iter().map(|(id, r)| (EventId::from_bytes(*id), r.clone())).collect();
    assert_eq!(events, expected, "events");
    let deliveries = store.deliveries((Bound::Unbounded, Bound::Unbounded), false, ALL).expect("deliveries");
    let expected: Vec<_> = model.deliveries.iter().map(|(id, r)| (DeliveryId::from_bytes(*id), r.clone())).collect();
    assert_eq!(deliveries, expected, "deliveries");
    for (id, r) in &model.events {
        assert_eq!(store.event(&EventId::from_bytes(*id)).expect("event").as_ref(), Some(r));
    }
    for (id, r) in &model.deliveries {
        assert_eq!(store.delivery(&DeliveryId::from_bytes(*id)).expect("delivery").as_ref(), Some(r));
    }
    let received = store.received(None, ALL).expect("received");
    let expected: Vec<_> = model.by_time.iter().map(|(at, id)| (*at, EventId::from_bytes(*id))).collect();
    assert_eq!(received, expected, "by time");
    let endpoints: BTreeSet<_> = model.dead.iter().map(|(e, _)| *e).chain([endpoint_id(999).to_bytes()]).collect();
    for endpoint in endpoints.into_iter().map(EndpointId::from_bytes) {
        let dead = store.dead(&endpoint, (Bound::Unbounded, Bound::Unbounded), false, ALL).expect("dead");
        assert_eq!(dead, model.dead_of(&endpoint), "dead of {endpoint}");
    }
}

/// A table and its rows, keys and values.
type TableRows = (Table, Vec<(Vec<u8>, Vec<u8>)>);

/// Every row of every table of `view`, for comparing two stores whole.
fn dump(view: &HistoryView) -> Vec<TableRows> {
    Table::ALL
        .into_iter()
        .map(|table| {
            let rows = view.table(table).expect("table");
            let rows = rows.range(..).expect("range").map(|entry| {
                let (k, v) = entry.expect("row");
                (k.value().to_vec(), v.value().to_vec())
            });
            (table, rows.collect())
        })
        .collect()
}

/// A flush of events `range` (received 10 ms apart, from `at`) with one
/// delivery each; every third delivery dead, of endpoint n % 3.
fn flush_of(range: std::ops::Range<u64>, at: u64, len: usize) -> Flush {
    Flush {
        events: range.clone().map(|n| stored_event(n, at + n * 10, len + (n as usize % 7))).collect(),
        deliveries: range.map(|n| stored_delivery(n, (n % 3 == 0).then_some(n % 3), len / 2)).collect(),
        ..Flush::default()
    }
}

#[test]
fn flushed_records_read_back_after_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flush = flush_of(0..50, 1_000, 300);
    let mut model = Model::default();
    model.apply(&flush);
    let state = record(7, 3 * STATE_CHUNK_BYTES / 2);
    {
        let store = open(&dir);
        assert_eq!(store.view().expect("view").applied().expect("applied"), None, "nothing applied before a flush");
        assert_eq!(store.view().expect("view").state().expect("state"), Vec::<u8>::new());
        let counts = store.flush(&flush, [&state], b"log 7").expect("flushes");
        assert_eq!(counts, model.counts(), "the flush returns the counts after it");
        assert_holds(&store, &model);
    }
    let store = open(&dir);
    assert_holds(&store, &model);
    let view = store.view().expect("view");
    assert_holds(&view, &model);
    assert_eq!(view.state().expect("state"), state);
    assert_eq!(view.applied().expect("applied").as_deref(), Some(&b"log 7"[..]));
}

#[test]
fn a_flush_applies_its_removals_and_its_puts_together() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let mut model = Model::default();
    let first = flush_of(0..6, 0, 100);
    store.flush(&first, [b"one"], b"1").expect("flushes");
    model.apply(&first);

    // Event 1 and its dead delivery go; event 3 is taken back and finished
    // again with a longer record and a live delivery; event 9 is new.
    let second = Flush {
        removed_events: vec![(10, event_id(1)), (30, event_id(3))],
        removed_deliveries: vec![(delivery_id(1), None), (delivery_id(3), Some(endpoint_id(0)))],
        events: vec![stored_event(3, 30, 500), stored_event(9, 5, 40)],
        deliveries: vec![stored_delivery(3, None, 70), stored_delivery(9, Some(2), 30)],
    };
    let counts = store.flush(&second, [b"two"], b"2").expect("flushes");
    model.apply(&second);
    assert_eq!(counts, model.counts());
    assert_holds(&store, &model);
    assert_eq!(store.event(&event_id(1)).expect("reads"), None, "the removal is in");
    assert_eq!(store.event(&event_id(9)).expect("reads"), Some(record(9, 40)), "the put is in");
    assert_eq!(store.event(&event_id(3)).expect("reads"), Some(record(3, 500)), "removed and put again");
    assert_eq!(
        store.dead(&endpoint_id(0), (Bound::Unbounded, Bound::Unbounded), false, ALL).expect("dead"),
        [delivery_id(0)]
    );
    let view = store.view().expect("view");
    assert_eq!(
        (view.state().expect("state"), view.applied().expect("applied")),
        (b"two".to_vec(), Some(b"2".to_vec()))
    );
}

#[test]
fn a_flush_that_fails_midway_leaves_the_previous_commit_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir).with_record_limit(1_000);
    let mut model = Model::default();
    let first = flush_of(0..10, 0, 100);
    store.flush(&first, [b"state one"], b"1").expect("flushes");
    model.apply(&first);

    // Removals and a put go in before the put that is too large.
    let failing = Flush {
        removed_events: vec![(0, event_id(0)), (10, event_id(1))],
        removed_deliveries: vec![(delivery_id(0), Some(endpoint_id(0)))],
        events: vec![stored_event(20, 200, 100), stored_event(21, 210, 1_001)],
        deliveries: vec![stored_delivery(20, Some(1), 50)],
    };
    let error = store.flush(&failing, [b"state two"], b"2").expect_err("a record past the limit");
    assert!(matches!(error, Error::RecordTooLarge { len: 1_001, limit: 1_000 }), "{error}");
    assert_holds(&store, &model);
    let view = store.view().expect("view");
    assert_eq!(view.state().expect("state"), b"state one");
    assert_eq!(view.applied().expect("applied").as_deref(), Some(&b"1"[..]));
    drop(view);

    // The store goes on: the same flush without the large record commits.
    let mut fixed = failing;
    fixed.events.pop();
    store.flush(&fixed, [b"state two"], b"2").expect("flushes");
    model.apply(&fixed);
    assert_holds(&store, &model);
    drop(store);
    assert_holds(&open(&dir), &model);
}

#[test]
fn removals_drop_their_index_rows_and_counts_stay_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let mut model = Model::default();
    let first = flush_of(0..30, 0, 200);
    store.flush(&first, [b""], b"").expect("flushes");
    model.apply(&first);
    let dead_before = store.dead(&endpoint_id(0), (Bound::Unbounded, Bound::Unbounded), false, ALL).expect("dead");
    assert_eq!(dead_before.len(), 10);

    let removals = Flush {
        removed_events: (0..30).step_by(2).map(|n| (n * 10, event_id(n))).collect(),
        removed_deliveries: (0..30)
            .step_by(2)
            .map(|n| (delivery_id(n), (n % 3 == 0).then(|| endpoint_id(0))))
            .collect(),
        ..Flush::default()
    };
    let counts = store.flush(&removals, [b""], b"").expect("flushes");
    model.apply(&removals);
    assert_eq!(counts, model.counts());
    assert_holds(&store, &model);
    let dead = store.dead(&endpoint_id(0), (Bound::Unbounded, Bound::Unbounded), false, ALL).expect("dead");
    assert_eq!(dead, [3, 9, 15, 21, 27].map(delivery_id), "only the odd dead deliveries are left");
    let received = store.received(None, ALL).expect("received");
    assert!(received.iter().all(|(at, id)| at % 20 == 10 && *id == event_id(at / 10)), "{received:?}");

    // Removing what is not there again changes nothing and is no error.
    let counts = store.flush(&removals, [b""], b"").expect("flushes");
    assert_eq!(counts, model.counts());

    // A put over a stored record counts the change of length only.
    let over = Flush { events: vec![stored_event(1, 10, 999)], ..Flush::default() };
    let counts = store.flush(&over, [b""], b"").expect("flushes");
    model.apply(&over);
    assert_eq!(counts, model.counts());
    assert_holds(&store, &model);
}

#[test]
fn pages_follow_their_bounds_order_and_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    // Events and deliveries 0, 2, …, 38; all deliveries dead, of endpoints 0 and 1 in turn.
    let flush = Flush {
        events: (0..40).step_by(2).map(|n| stored_event(n, 1_000 - n, 10)).collect(),
        deliveries: (0..40).step_by(2).map(|n| stored_delivery(n, Some(n / 2 % 2), 10)).collect(),
        ..Flush::default()
    };
    store.flush(&flush, [b""], b"").expect("flushes");
    let view = store.view().expect("view");

    // Bounds on stored ids, between them, and past both ends.
    let points = [0, 1, 2, 17, 20, 38, 39, 100];
    let mut bounds = vec![Bound::Unbounded];
    for n in points {
        bounds.extend([Bound::Included(n), Bound::Excluded(n)]);
    }
    let in_range = |n: u64, bounds: (Bound<u64>, Bound<u64>)| std::ops::RangeBounds::contains(&bounds, &n);
    for &lower in &bounds {
        for &upper in &bounds {
            for newest_first in [false, true] {
                for limit in [0, 1, 3, 100] {
                    let expect = |ids: Vec<u64>| {
                        let mut ids: Vec<u64> = ids.into_iter().filter(|n| in_range(*n, (lower, upper))).collect();
                        if newest_first {
                            ids.reverse();
                        }
                        ids.truncate(limit);
                        ids
                    };
                    let case = format!("{lower:?}..{upper:?} newest_first {newest_first} limit {limit}");
                    let events =
                        view.events((lower.map(event_id), upper.map(event_id)), newest_first, limit).expect("events");
                    let expected = expect((0..40).step_by(2).collect());
                    assert_eq!(
                        events,
                        expected.iter().map(|&n| (event_id(n), record(n, 10))).collect::<Vec<_>>(),
                        "{case}"
                    );
                    let deliveries = view
                        .deliveries((lower.map(delivery_id), upper.map(delivery_id)), newest_first, limit)
                        .expect("deliveries");
                    let ids: Vec<_> = deliveries.into_iter().map(|(id, _)| id).collect();
                    assert_eq!(ids, expected.iter().map(|&n| delivery_id(n)).collect::<Vec<_>>(), "{case}");
                    let dead = view
                        .dead(&endpoint_id(1), (lower.map(delivery_id), upper.map(delivery_id)), newest_first, limit)
                        .expect("dead");
                    let expected = expect((2..40).step_by(4).collect());
                    assert_eq!(dead, expected.iter().map(|&n| delivery_id(n)).collect::<Vec<_>>(), "dead {case}");
                }
            }
        }
    }

    // By time: newest ids were received first; pages continue after a key.
    let all = view.received(None, ALL).expect("received");
    let expected: Vec<_> = (0..20u64).rev().map(|n| (1_000 - 2 * n, event_id(2 * n))).collect();
    assert_eq!(all, expected);
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = view.received(after, 3).expect("received");
        assert!(page.len() <= 3);
        let Some(&last) = page.last() else { break };
        paged.extend(page);
        after = Some(last);
    }
    assert_eq!(paged, expected, "pages of 3 after each last key read everything once");
    assert_eq!(view.received(Some((1_000, event_id(0))), ALL).expect("received"), [], "nothing after the last");
}

#[test]
fn a_view_keeps_its_cut_while_flushes_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let mut model = Model::default();
    let first = flush_of(0..5, 0, 50);
    store.flush(&first, [b"first state"], b"1").expect("flushes");
    model.apply(&first);
    let before = model.clone();

    let view = store.view().expect("view");
    let second = Flush {
        removed_events: vec![(0, event_id(0))],
        removed_deliveries: vec![(delivery_id(0), Some(endpoint_id(0)))],
        ..flush_of(5..9, 0, 50)
    };
    store.flush(&second, [b"second state"], b"2").expect("flushes");
    model.apply(&second);

    assert_holds(&view, &before);
    assert_eq!(view.state().expect("state"), b"first state");
    assert_eq!(view.applied().expect("applied").as_deref(), Some(&b"1"[..]));
    assert_holds(&store, &model);
    let fresh = store.view().expect("view");
    assert_holds(&fresh, &model);
    assert_eq!(fresh.state().expect("state"), b"second state");
}

#[test]
fn the_state_is_stored_in_chunks_that_a_smaller_state_replaces() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let large = record(1, 2 * STATE_CHUNK_BYTES + 10);
    let (head, tail) = large.split_at(100);
    store.flush(&Flush::default(), [head, tail], b"").expect("flushes");
    let view = store.view().expect("view");
    let sizes: Vec<usize> = view.state_chunks().expect("chunks").map(|c| c.expect("chunk").len()).collect();
    assert_eq!(sizes, [STATE_CHUNK_BYTES, STATE_CHUNK_BYTES, 10], "the pieces joined, then cut at the chunk size");
    assert_eq!(view.state().expect("state"), large);

    store.flush(&Flush::default(), [b"small"], b"").expect("flushes");
    let view = store.view().expect("view");
    assert_eq!(view.state_chunks().expect("chunks").count(), 1, "the old chunks past the new state are gone");
    assert_eq!(view.state().expect("state"), b"small");
}

#[test]
fn a_store_of_another_format_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(open(&dir));
    let path = dir.path().join("history.redb");
    {
        let db = redb::Database::create(&path).expect("opens");
        let tx = db.begin_write().expect("writes");
        tx.open_table(Table::Meta.definition())
            .expect("meta")
            .insert(META_FORMAT, 99u32.to_be_bytes().as_slice())
            .expect("inserts");
        tx.commit().expect("commits");
    }
    let error = RedbHistory::open(&path, 1 << 20).expect_err("another format");
    assert!(matches!(error, Error::UnsupportedFormat { found: 99, expected: FORMAT_VERSION, .. }), "{error}");
}

/// A store with every table holding rows, and its model.
fn filled_store(dir: &tempfile::TempDir) -> (RedbHistory, Model) {
    let store = open(dir);
    let mut model = Model::default();
    let first = flush_of(0..40, 500, 120);
    store.flush(&first, [b"unused"], b"").expect("flushes");
    model.apply(&first);
    let second = Flush {
        removed_events: vec![(500, event_id(0))],
        removed_deliveries: vec![(delivery_id(0), Some(endpoint_id(0)))],
        ..flush_of(40..60, 500, 80)
    };
    store.flush(&second, [record(5, STATE_CHUNK_BYTES + 3)], b"applied 60").expect("flushes");
    model.apply(&second);
    (store, model)
}

fn export(view: &HistoryView) -> Vec<u8> {
    let mut stream = Vec::new();
    let written = view.export(&mut stream).expect("exports");
    assert_eq!(written, stream.len() as u64, "export returns the bytes it wrote");
    stream
}

#[test]
fn an_export_imports_into_the_same_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, model) = filled_store(&dir);
    let view = store.view().expect("view");
    let stream = export(&view);

    let path = dir.path().join("imported.redb");
    let imported = RedbHistory::import(&mut stream.as_slice(), &path, 1 << 20).expect("imports");
    let copy = imported.view().expect("view");
    assert_eq!(dump(&copy), dump(&view), "every row of every table");
    assert_holds(&copy, &model);
    assert_eq!(copy.state().expect("state"), record(5, STATE_CHUNK_BYTES + 3));
    assert_eq!(copy.applied().expect("applied").as_deref(), Some(&b"applied 60"[..]));
    drop((copy, imported));

    // Durable and a store like any other: it reopens, flushes and exports the same.
    let reopened = RedbHistory::open(&path, 1 << 20).expect("reopens");
    assert_eq!(dump(&reopened.view().expect("view")), dump(&view));
    assert_eq!(export(&reopened.view().expect("view")), stream);
    let mut model = model;
    let more = flush_of(60..62, 0, 10);
    reopened.flush(&more, [b""], b"").expect("flushes");
    model.apply(&more);
    assert_holds(&reopened, &model);
}

#[test]
fn an_empty_store_exports_and_imports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let view = store.view().expect("view");
    let stream = export(&view);
    let imported =
        RedbHistory::import(&mut stream.as_slice(), &dir.path().join("copy.redb"), 1 << 20).expect("imports");
    assert_eq!(dump(&imported.view().expect("view")), dump(&view));
    assert_holds(&imported, &Model::default());
}

/// Imports `stream` at a new path; asserts it is refused and leaves no file.
fn assert_refused(dir: &tempfile::TempDir, stream: &[u8], case: &str) -> Error {
    let path = dir.path().join("refused.redb");
    let error = RedbHistory::import(&mut &stream[..], &path, 1 << 20).expect_err(case);
    assert!(!path.exists(), "{case}: no file is left");
    error
}

#[test]
fn a_truncated_or_altered_stream_is_refused_and_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = filled_store(&dir);
    let stream = export(&store.view().expect("view"));
    let len = stream.len();

    for cut in [0, 7, 36, 37, 1_000, len / 2, len - 33, len - 32, len - 1] {
        let error = assert_refused(&dir, &stream[..cut], &format!("cut at {cut}"));
        assert!(matches!(error, Error::StreamRefused(_)), "cut at {cut}: {error}");
    }
    // Flips across the header, frames, records, the state and the checksum.
    for at in (0..len).step_by(len / 23).chain([8, 12, 36, 38, 41, len - 33, len - 1]) {
        let mut altered = stream.clone();
        altered[at] ^= 0x01;
        assert_refused(&dir, &altered, &format!("byte {at} flipped"));
    }
    let mut longer = stream.clone();
    longer.push(0);
    assert_refused(&dir, &longer, "a byte after the end");

    // An existing file is never overwritten.
    let existing = dir.path().join("history.redb");
    let before = std::fs::metadata(&existing).expect("exists").len();
    let error = RedbHistory::import(&mut stream.as_slice(), &existing, 1 << 20).expect_err("exists");
    assert!(matches!(error, Error::File { what: "create", .. }), "{error}");
    assert_eq!(std::fs::metadata(&existing).expect("exists").len(), before);
    drop(store);
    RedbHistory::open(&existing, 1 << 20).expect("the live store is untouched");
}

#[test]
fn an_imported_store_replaces_the_live_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (source, model) = filled_store(&dir);
    let stream = export(&source.view().expect("view"));
    drop(source);

    let live_dir = tempfile::tempdir().expect("tempdir");
    let live = live_dir.path().join("history.redb");
    let old = RedbHistory::open(&live, 1 << 20).expect("opens");
    old.flush(&flush_of(100..103, 0, 10), [b"old"], b"old").expect("flushes");
    drop(old);
    let new = live_dir.path().join("history.redb.incoming");
    drop(RedbHistory::import(&mut stream.as_slice(), &new, 1 << 20).expect("imports"));

    RedbHistory::replace(&live, &new).expect("replaces");
    assert!(!new.exists());
    let store = RedbHistory::open(&live, 1 << 20).expect("opens");
    assert_holds(&store, &model);
    assert_eq!(store.view().expect("view").applied().expect("applied").as_deref(), Some(&b"applied 60"[..]));
}

#[test]
fn an_import_checks_the_order_and_shape_of_rows() {
    let mut progress = Progress::default();
    assert!(progress.row(b"k", b"v").is_err(), "a row before any table");
    assert!(progress.begin_table(Table::Deliveries).is_err(), "tables come in order");
    progress.begin_table(Table::Events).expect("the first table");
    assert!(progress.row(&[1; 15], b"v").is_err(), "an id key has 16 bytes");
    progress.row(&[1; 16], b"abc").expect("a row");
    assert!(progress.row(&[1; 16], b"abc").is_err(), "a repeated key");
    assert!(progress.row(&[0; 16], b"abc").is_err(), "a key out of order");
    progress.row(&[2; 16], b"de").expect("a row");
    assert_eq!(progress.record_bytes, 5);
    assert!(progress.begin_table(Table::Events).is_err(), "a table once");
    progress.begin_table(Table::Deliveries).expect("the next table");
    progress.row(&[0; 16], b"").expect("keys start over in a new table");
    assert!(!progress.all_tables());
}

#[test]
fn a_row_longer_than_its_table_allows_is_refused_before_it_is_read() {
    let mut stream = Vec::new();
    let mut writer = StreamWriter::new(&mut stream);
    writer.header(StoreCounts::default()).expect("writes");
    writer.table(Table::Events).expect("writes");
    writer.put(&[FRAME_ROW]).expect("writes");
    writer.put(&16u32.to_be_bytes()).expect("writes");
    writer.put(&[0; 16]).expect("writes");
    writer.put(&u32::MAX.to_be_bytes()).expect("writes");
    writer.end().expect("writes");
    let mut reader = StreamReader::new(stream.as_slice());
    reader.header().expect("a header");
    assert_eq!(reader.next(None).expect("a frame"), Frame::Table(Table::Events));
    let error = reader.next(Some(Table::Events)).expect_err("too long");
    assert!(matches!(&error, Error::StreamRefused(reason) if reason.contains("4294967295")), "{error}");
    assert!(reader.value.capacity() < 1 << 20, "nothing was allocated for it");
}

#[test]
fn keys_and_bounds() {
    let id = event_id(77);
    assert_eq!(parse_time_key(&time_key(1_234, &id)).expect("parses"), (1_234, id));
    assert!(parse_time_key(&[0; 23]).is_err());
    assert!(time_key(1, &event_id(9)) < time_key(2, &event_id(1)), "time sorts first");
    let (one, two): (&[u8], &[u8]) = (&[1], &[2]);
    let (inc, exc) = (Bound::Included, Bound::Excluded);
    assert!(is_empty_range(inc(two), inc(one)));
    assert!(!is_empty_range(inc(one), inc(one)));
    assert!(is_empty_range(inc(one), exc(one)));
    assert!(is_empty_range(exc(one), inc(one)));
    assert!(!is_empty_range(exc(one), exc(two)), "keys longer than one byte lie between");
    assert!(!is_empty_range(Bound::Unbounded, exc(one)));
}
