//! [`LogStore`] across a reopen, on sled and on a crashed [`MemDisk`]: what
//! was appended, voted, committed, truncated and purged is what comes back;
//! a store of another format version is refused.

use hookraft_core::Command;
use hookraft_raft::{
    Backend, Disk, Entry, EntryPayload, Error, LogId, LogStore, MemDisk, SledDisk, Vote, open, open_sled,
};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, RaftLogReader};

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry {
    let payload =
        if index.is_multiple_of(2) { EntryPayload::Blank } else { EntryPayload::Normal(Command::Noop.into()) };
    Entry { log_id: log_id(term, index), payload }
}

fn open_log(backend: &Backend) -> LogStore {
    open(backend, None).expect("open the store").0
}

/// Opens the store again after the previous one was dropped; a memory disk
/// crashes first, so only what was flushed comes back.
fn reopen_log(backend: &Backend) -> LogStore {
    if let Backend::Memory(disk) = backend {
        disk.crash();
    }
    open_log(backend)
}

fn indexes(entries: &[Entry]) -> Vec<u64> {
    entries.iter().map(|e| e.log_id.index).collect()
}

async fn log_vote_and_committed_survive_a_reopen_after_truncate_and_purge(backend: &Backend) {
    let sizes;
    {
        let mut store = open_log(backend);
        store.blocking_append((0..=10).map(|i| entry(1, i))).await.expect("append");
        store.truncate(log_id(1, 8)).await.expect("truncate");
        store.blocking_append([entry(2, 8)]).await.expect("append after truncate");
        store.purge(log_id(1, 3)).await.expect("purge");
        store.save_vote(&Vote::new(2, 1)).await.expect("save vote");
        store.save_committed(Some(log_id(2, 8))).await.expect("save committed");
        // A final append fsyncs the committed id too.
        store.blocking_append([entry(2, 9)]).await.expect("append");
        sizes = (store.size_watch().bytes_after(None), store.size_watch().bytes_after(Some(6)));
    }

    let mut store = reopen_log(backend);
    let reopened = (store.size_watch().bytes_after(None), store.size_watch().bytes_after(Some(6)));
    assert_eq!(reopened, sizes, "the entries' sizes are rebuilt from the disk");
    assert!(sizes.0 > sizes.1 && sizes.1 > 0, "entries 4..=9 are held, 7..=9 after index 6: {sizes:?}");
    assert_eq!(store.size_watch().bytes_after(Some(3)), sizes.0, "nothing at or before the purge point is counted");
    let state = store.get_log_state().await.expect("log state");
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 3)));
    assert_eq!(state.last_log_id, Some(log_id(2, 9)));
    assert_eq!(store.read_vote().await.expect("read vote"), Some(Vote::new(2, 1)));
    assert_eq!(store.read_committed().await.expect("read committed"), Some(log_id(2, 8)));

    let entries = store.try_get_log_entries(0..100).await.expect("read entries");
    assert_eq!(indexes(&entries), (4..=9).collect::<Vec<_>>());
    assert_eq!(entries[4].log_id, log_id(2, 8), "the truncated entry was replaced");
    let mut reader = store.get_log_reader().await;
    assert_eq!(indexes(&reader.limited_get_log_entries(5, 7).await.expect("read")), vec![5, 6]);
    assert!(reader.try_get_log_entries(7..7).await.expect("empty range").is_empty());
}

#[tokio::test]
async fn sled_log_vote_and_committed_survive_a_reopen_after_truncate_and_purge() {
    let dir = tempfile::tempdir().expect("tempdir");
    log_vote_and_committed_survive_a_reopen_after_truncate_and_purge(&Backend::sled(dir.path())).await;
}

#[tokio::test]
async fn memory_log_vote_and_committed_survive_a_crash_after_truncate_and_purge() {
    log_vote_and_committed_survive_a_reopen_after_truncate_and_purge(&Backend::Memory(MemDisk::new())).await;
}

#[tokio::test]
async fn purging_every_entry_keeps_the_purge_point_as_last_log_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_log(&Backend::sled(dir.path()));
    store.blocking_append((0..5).map(|i| entry(1, i))).await.expect("append");
    store.purge(log_id(1, 4)).await.expect("purge");
    let state = store.get_log_state().await.expect("log state");
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(1, 4)), Some(log_id(1, 4))));
}

#[test]
fn store_of_another_format_version_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = sled::open(dir.path()).expect("open sled");
        let meta = db.open_tree("raft_meta").expect("meta tree");
        let version = bincode::serde::encode_to_vec(99u32, bincode::config::standard()).expect("encode");
        meta.insert("format_version", version).expect("insert");
        db.flush().expect("flush");
    }
    match open_sled(dir.path(), None) {
        Err(Error::UnsupportedFormat { found: 99, expected: 1, .. }) => {}
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a store of format version 99 was opened"),
    }
}

#[test]
fn memory_store_of_another_format_version_is_refused_and_named() {
    let disk = MemDisk::new();
    let meta = disk.open_tree("raft_meta").expect("meta tree");
    let version = bincode::serde::encode_to_vec(99u32, bincode::config::standard()).expect("encode");
    meta.insert(b"format_version", version).expect("insert");
    match open(&Backend::Memory(disk), None) {
        Err(Error::UnsupportedFormat { store, found: 99, expected: 1 }) => assert_eq!(store, "in-memory disk"),
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a store of format version 99 was opened"),
    }
}

/// Replication reads the log's tail from memory (`recent_entries`); what it
/// returns must be what the disk holds, through truncation and purge.
#[tokio::test]
async fn reads_of_the_cached_tail_match_the_disk() {
    let disk = MemDisk::new();
    let backend = Backend::Memory(disk.clone());
    let mut store = open_log(&backend);
    store.blocking_append((0..=20).map(|i| entry(1, i))).await.expect("append");
    store.truncate(log_id(1, 15)).await.expect("truncate");
    store.blocking_append((15..=25).map(|i| entry(2, i))).await.expect("append after truncate");
    store.purge(log_id(1, 5)).await.expect("purge");
    let mut reader = store.get_log_reader().await;
    let cached = reader.try_get_log_entries(0..100).await.expect("read");
    let limited = reader.limited_get_log_entries(12, 18).await.expect("read");

    // A second store on the same disk starts with nothing cached.
    let mut fresh = open_log(&backend);
    let from_disk = fresh.try_get_log_entries(0..100).await.expect("read");
    assert_eq!(indexes(&cached), (6..=25).collect::<Vec<_>>());
    assert_eq!(format!("{cached:?}"), format!("{from_disk:?}"));
    assert_eq!(indexes(&limited), (12..18).collect::<Vec<_>>());
    assert_eq!(limited[3].log_id, log_id(2, 15), "the truncated tail is gone from the cache too");
    assert_eq!(format!("{:?}", fresh.limited_get_log_entries(12, 18).await.expect("read")), format!("{limited:?}"));
}

/// How many entries at or below `index` the log tree of `disk` holds.
fn stored_through(disk: &MemDisk, index: u64) -> usize {
    let tree = disk.open_tree("raft_log").expect("log tree");
    let end = index.to_be_bytes();
    tree.range(std::ops::Bound::Unbounded, std::ops::Bound::Included(&end[..]), usize::MAX).expect("range").len()
}

/// A purge returns once its purge point is durable, and its entries leave
/// the disk afterwards, in the background (after each snapshot this was a
/// stop of openraft's core while the whole replaced log was removed). They
/// are gone for readers at once; a crash before their removal was durable
/// keeps them on the disk, and the store removes them when it opens.
#[tokio::test]
async fn purged_entries_are_gone_for_readers_at_once_and_from_the_disk_in_the_background() {
    let disk = MemDisk::new();
    let backend = Backend::Memory(disk.clone());
    let mut store = open_log(&backend);
    store.blocking_append((0..=1_000).map(|i| entry(1, i))).await.expect("append");
    store.purge(log_id(1, 900)).await.expect("purge");
    let read = store.try_get_log_entries(0..2_000).await.expect("read");
    assert_eq!(indexes(&read), (901..=1_000).collect::<Vec<_>>());
    assert!(store.try_get_log_entries(0..901).await.expect("read").is_empty());

    // A crash before any later flush: the removal was not durable.
    drop(store);
    disk.crash();
    assert_eq!(stored_through(&disk, 900), 901, "the crash undid the removal");
    let mut store = open_log(&backend);
    assert_eq!(stored_through(&disk, 900), 0, "opening removed what the purge left");
    let state = store.get_log_state().await.expect("log state");
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(1, 900)), Some(log_id(1, 1_000))));
    assert_eq!(indexes(&store.try_get_log_entries(0..2_000).await.expect("read")), (901..=1_000).collect::<Vec<_>>());

    // Without a crash the background removal empties the disk below the
    // purge point, and the next flush makes that durable.
    store.purge(log_id(1, 950)).await.expect("purge");
    for _ in 0..1_000 {
        if stored_through(&disk, 950) == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(stored_through(&disk, 950), 0, "the background removal finished");
    store.blocking_append([entry(1, 1_001)]).await.expect("an append flushes the removal");
    drop(store);
    disk.crash();
    assert_eq!(stored_through(&disk, 950), 0, "the removal is durable");
    let mut store = open_log(&backend);
    assert_eq!(indexes(&store.try_get_log_entries(0..2_000).await.expect("read")), (951..=1_001).collect::<Vec<_>>());
}

/// On sled the removal runs on a thread of its own, not on the runtime
/// (design note 38): this test's runtime has one thread, and it never
/// yields while it waits, yet the entries leave the disk. Two purges in a
/// row are both removed, and the entries above them stay.
#[tokio::test]
async fn on_sled_purged_entries_leave_the_disk_on_a_thread_of_their_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = SledDisk::open(dir.path()).expect("open sled");
    let mut store = LogStore::open(&disk).expect("open the log");
    store.blocking_append((0..=3_000).map(|i| entry(1, i))).await.expect("append");
    store.purge(log_id(1, 1_000)).await.expect("purge");
    store.purge(log_id(1, 2_500)).await.expect("purge");
    let tree = disk.open_tree("raft_log").expect("log tree");
    let below = |index: u64| {
        let end = index.to_be_bytes();
        tree.range(std::ops::Bound::Unbounded, std::ops::Bound::Included(&end[..]), usize::MAX).expect("range").len()
    };
    for _ in 0..1_000 {
        if below(2_500) == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(below(2_500), 0, "both purges' entries were removed without the runtime");
    assert_eq!(below(3_000), 500, "the entries past the purge point stay");
    assert_eq!(indexes(&store.try_get_log_entries(0..4_000).await.expect("read")), (2_501..=3_000).collect::<Vec<_>>());
}

/// Purging past the last entry: the last log id is the purge point, never
/// an entry below it, while the entries are still on the disk.
#[tokio::test]
async fn a_log_purged_whole_reports_the_purge_point_as_last_even_before_the_removal() {
    let disk = MemDisk::new();
    let mut store = open_log(&Backend::Memory(disk.clone()));
    store.blocking_append((0..10).map(|i| entry(1, i))).await.expect("append");
    store.purge(log_id(1, 20)).await.expect("purge");
    assert_eq!(stored_through(&disk, 20), 10, "the background removal has not run yet");
    let state = store.get_log_state().await.expect("log state");
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(1, 20)), Some(log_id(1, 20))));
}

/// A replication read of large entries stops at its byte budget instead of
/// loading a thousand of them; one over the budget still goes alone.
#[tokio::test]
async fn a_replication_read_of_large_entries_stops_at_its_byte_budget() {
    use hookraft_core::command::NewEvent;
    use hookraft_core::ids::EventId;
    use hookraft_raft::log_store::LOG_READ_BYTES_MAX;
    use rand::SeedableRng;

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let payload_bytes = 400 * 1024;
    let big = |index: u64, rng: &mut rand::rngs::StdRng| {
        let event = NewEvent {
            id: EventId::generate(index, rng),
            event_type: "big".into(),
            payload: format!("\"{}\"", "x".repeat(payload_bytes)).into(),
            idempotency_key: None,
            endpoint_ids: None,
            ordering_key: None,
            inbound: None,
        };
        let command = Command::IngestEvents { now_ms: index, events: vec![event] };
        Entry { log_id: log_id(1, index), payload: EntryPayload::Normal(command.into()) }
    };
    let mut log = open_log(&Backend::Memory(MemDisk::new()));
    let entries: Vec<Entry> = (1..=100).map(|index| big(index, &mut rng)).collect();
    log.blocking_append(entries).await.expect("appends");

    let read = log.limited_get_log_entries(1, 101).await.expect("reads");
    let fit = (LOG_READ_BYTES_MAX / payload_bytes as u64) as usize;
    assert!(read.len() <= fit && read.len() >= fit - 2, "{} entries of {payload_bytes} bytes read", read.len());
    assert_eq!(indexes(&read)[0], 1);
    // Every entry is still there for a read that asks for it whole.
    assert_eq!(log.try_get_log_entries(1..101).await.expect("reads").len(), 100);
    // Small entries: the count's limit, not the bytes.
    let mut small = open_log(&Backend::Memory(MemDisk::new()));
    small.blocking_append((1..=2_000).map(|index| entry(1, index))).await.expect("appends");
    let read = small.limited_get_log_entries(1, 2_001).await.expect("reads");
    assert_eq!(read.len(), hookraft_raft::log_store::LOG_READ_ENTRIES_MAX);
}
