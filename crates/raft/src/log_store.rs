//! [`LogStore`]: the Raft log, vote and committed id, on a [`Disk`].
//!
//! Two trees of the node's disk (sled in production, a
//! [`crate::MemDisk`] in simulation; the code is the same):
//! - `raft_log`: big-endian `u64` index → bincode of the [`Entry`], so the
//!   disk's byte order is log order;
//! - `raft_meta`: the vote, the last committed and last purged log ids, and
//!   the store's format version.
//!
//! Durability: `append` flushes the disk before it reports the entries
//! flushed, and `save_vote`, `truncate` and `purge` flush before they return
//! (a purge flushes its purge point; the entries it covers are removed
//! afterwards, in the background, as openraft allows: see
//! [`LogStore::remove_purged`]).
//! The committed id is written without a flush: openraft only uses it to
//! re-apply entries sooner after a restart, and a stale value is allowed (it
//! is flushed with the next append). Each append and truncate is one
//! atomic batch, and a purge removes from the oldest entry up, so the log
//! never has a hole after a crash.
//!
//! The newest entries are also kept decoded in memory
//! ([`crate::recent_entries`]), so replication reads them without decoding.
//!
//! This module must not interpret the entries it stores: it only orders,
//! persists and returns them.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, OptionalSend, RaftLogReader};

use crate::background::{self, Pace};
use crate::codec::{decode, encode};
use crate::disk::{Batch, Disk, KvTree};
use crate::log_size::LogSizeWatch;
use crate::recent_entries::RecentEntries;
use crate::snapshot_hold::SnapshotHold;
use crate::{Entry, Error, LogId, LogState, StorageError, TypeConfig, Vote};

/// The layout version this build writes and reads; bump it (and migrate)
/// when the encoding of anything in the log trees changes.
pub const LOG_FORMAT_VERSION: u32 = 1;

/// Upper bound on the entries one `limited_get_log_entries` call returns, so
/// a replication read never loads an unbounded slice of the log.
pub const LOG_READ_ENTRIES_MAX: usize = 1024;
/// Upper bound on the encoded bytes one `limited_get_log_entries` call
/// returns (one entry more than that goes alone): a replication read of
/// 1,024 entries of large batches loaded a gigabyte, and its append was
/// refused as over the 64 MiB body limit anyway.
pub const LOG_READ_BYTES_MAX: u64 = 16 << 20;

/// Entries removed per batch by a purge's removal in memory, and when a
/// store opens; appends and reads go on between two batches.
pub const PURGE_BATCH_ENTRIES: u64 = 256;

/// Entries removed per batch by a purge's removal on a disk that blocks,
/// paced between batches ([`crate::background::Pace`]): a batch of 256 took
/// 1–12 ms, and a background thread's longer bursts showed in the node's
/// p99 even at a low priority (design note 38).
pub const PACED_PURGE_BATCH_ENTRIES: u64 = 32;

const LOG_TREE: &str = "raft_log";
const META_TREE: &str = "raft_meta";
const KEY_FORMAT: &[u8] = b"format_version";
const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// The Raft log store. Cheap to clone: clones share the disk's trees, which
/// is how [`RaftLogStorage::get_log_reader`] hands out readers.
#[derive(Clone)]
pub struct LogStore {
    /// Index → entry. Its flush covers `meta` too (one disk).
    log: Arc<dyn KvTree>,
    /// Vote, committed, last purged, format version.
    meta: Arc<dyn KvTree>,
    /// The log's tail, decoded; shared by every clone like the trees.
    recent: Arc<Mutex<RecentEntries>>,
    /// The first index after the purge point (0 before any purge): entries
    /// below it are gone for readers even while their removal is under way.
    first_readable: Arc<AtomicU64>,
    /// Every stored entry's encoded size; see [`crate::log_size`].
    sizes: LogSizeWatch,
    /// The thread removing the last purge's entries from a disk that
    /// blocks, which the next one waits for, so removals stay in log order.
    removal: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
    /// Set by the state machine while it receives a snapshot.
    hold: SnapshotHold,
}

/// The old name of [`LogStore`], from when it only ran on sled.
pub type SledLogStore = LogStore;

/// Removals of the entries `first..=last`, oldest first, in batches of
/// `per_batch`.
fn purge_batches(first: u64, last: u64, per_batch: u64) -> impl Iterator<Item = Batch> {
    (first..=last).step_by(per_batch as usize).map(move |from| {
        let mut batch = Batch::default();
        for index in from..=last.min(from.saturating_add(per_batch - 1)) {
            batch.remove(&log_key(index));
        }
        batch
    })
}

/// Applies one batch of a purge's removal of `span`; false when the removal
/// is to stop: the store was dropped, or the disk failed (then what is left
/// is removed when the store opens again).
fn remove_purged_batch(log: &Weak<dyn KvTree>, batch: Batch, span: (u64, u64)) -> bool {
    let Some(tree) = log.upgrade() else { return false };
    match tree.apply_batch(batch) {
        Ok(()) => true,
        Err(error) => {
            let (first, last) = span;
            tracing::warn!(%error, first, last, "removing purged log entries failed; the next start removes them");
            false
        }
    }
}

fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn index_of_key(key: &[u8]) -> Result<u64, Error> {
    let bytes: [u8; 8] =
        key.try_into().map_err(|_| Error::Corrupt(format!("log key has {} bytes, expected 8", key.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

/// `[start, end)` of a range of indexes; `end == None` means unbounded.
/// `None` when the range is empty.
fn index_span(range: &impl RangeBounds<u64>) -> Option<(u64, Option<u64>)> {
    let start = match range.start_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&i) => i.checked_add(1),
        Bound::Excluded(&i) => Some(i),
        Bound::Unbounded => None,
    };
    match end {
        Some(end) if end <= start => None,
        _ => Some((start, end)),
    }
}

impl LogStore {
    /// Opens the log trees of `disk`, checking (or, on a new store, writing)
    /// the format version.
    pub fn open(disk: &dyn Disk) -> Result<Self, Error> {
        let store = Self {
            log: disk.open_tree(LOG_TREE)?,
            meta: disk.open_tree(META_TREE)?,
            recent: Arc::default(),
            first_readable: Arc::default(),
            sizes: LogSizeWatch::default(),
            removal: Arc::default(),
            hold: SnapshotHold::default(),
        };
        match store.meta.get(KEY_FORMAT)? {
            Some(bytes) => {
                let found: u32 = decode("log format version", &bytes)?;
                if found != LOG_FORMAT_VERSION {
                    return Err(Error::UnsupportedFormat {
                        store: disk.describe(),
                        found,
                        expected: LOG_FORMAT_VERSION,
                    });
                }
            }
            None => {
                // Durable with the first flush; until then a crash leaves a
                // store that is simply new again.
                store.meta.insert(KEY_FORMAT, encode("log format version", &LOG_FORMAT_VERSION)?)?;
            }
        }
        store.measure_stored_entries()?;
        let purged: Option<LogId> = store.read_meta("last purged log id", KEY_LAST_PURGED)?;
        if let Some(purged) = purged {
            // Entries a crash kept below the purge point (their removal was
            // not durable yet) go now; the next flush makes that durable.
            store.remove_through(purged, "removing log entries a purge left behind")?;
        }
        Ok(store)
    }

    /// Makes `purged` the purge point for readers and removes the entries
    /// up to it, now; the next flush makes the removal durable.
    fn remove_through(&self, purged: LogId, why: &'static str) -> Result<(), Error> {
        self.first_readable.fetch_max(purged.index.saturating_add(1), Ordering::SeqCst);
        if let Some((first, last)) = self.forget_through(purged.index) {
            tracing::info!(first, last, "{why}");
            for batch in purge_batches(first, last, PURGE_BATCH_ENTRIES) {
                self.log.apply_batch(batch)?;
            }
        }
        Ok(())
    }

    /// At open, beside a state restored from a snapshot up to `snapshot`:
    /// if the log does not hold that entry, what it holds up to there
    /// predates the snapshot (a node that received it while its log was
    /// behind, its purge held back until the install was durable: see
    /// [`SnapshotHold`]) and may leave a hole below the entries appended
    /// after it, which openraft cannot start over. Purges the log up to
    /// the snapshot, as openraft would have.
    pub fn purge_what_a_snapshot_replaced(&self, snapshot: LogId) -> Result<(), Error> {
        let purged: Option<LogId> = self.read_meta("last purged log id", KEY_LAST_PURGED)?;
        if purged.is_some_and(|purged| purged.index >= snapshot.index) {
            return Ok(());
        }
        let held = match self.log.get(&log_key(snapshot.index))? {
            Some(value) => Some(Self::decode_entry(&log_key(snapshot.index), &value)?.log_id),
            None => None,
        };
        if held == Some(snapshot) {
            return Ok(());
        }
        self.write_meta("last purged log id", KEY_LAST_PURGED, &snapshot)?;
        self.remove_through(snapshot, "removing log entries a received snapshot replaced")
    }

    /// Shares `hold` with the state machine (see [`SnapshotHold`]).
    pub fn with_hold(mut self, hold: SnapshotHold) -> Self {
        self.hold = hold;
        self
    }

    /// Records the size of every entry on the disk, a page at a time so a
    /// long log is never copied into memory whole.
    fn measure_stored_entries(&self) -> Result<(), Error> {
        let mut sizes = self.sizes.lock();
        let mut next = Some(0u64);
        while let Some(start) = next {
            let page = self.log.range(Bound::Included(&log_key(start)[..]), Bound::Unbounded, LOG_READ_ENTRIES_MAX)?;
            next = None;
            for (key, value) in &page {
                let index = index_of_key(key)?;
                sizes.appended(index, value.len() as u64);
                next = index.checked_add(1).filter(|_| page.len() == LOG_READ_ENTRIES_MAX);
            }
        }
        Ok(())
    }

    /// The sizes of the stored entries, for [`crate::log_size::snapshot_when_log_grows`].
    pub fn size_watch(&self) -> LogSizeWatch {
        self.sizes.clone()
    }

    fn read_meta<T: serde::de::DeserializeOwned>(&self, what: &'static str, key: &[u8]) -> Result<Option<T>, Error> {
        match self.meta.get(key)? {
            Some(bytes) => Ok(Some(decode(what, &bytes)?)),
            None => Ok(None),
        }
    }

    fn write_meta<T: serde::Serialize>(&self, what: &'static str, key: &[u8], value: &T) -> Result<(), Error> {
        self.meta.insert(key, encode(what, value)?)?;
        Ok(())
    }

    /// Decodes one stored entry and checks it sits under its own index.
    fn decode_entry(key: &[u8], value: &[u8]) -> Result<Entry, Error> {
        let index = index_of_key(key)?;
        let entry: Entry = decode("log entry", value)?;
        if entry.log_id.index != index {
            return Err(Error::Corrupt(format!("log key {index} holds entry {}", entry.log_id)));
        }
        Ok(entry)
    }

    fn recent(&self) -> MutexGuard<'_, RecentEntries> {
        self.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Entries in `range`, at most `limit` of them, in index order. With
    /// `whole`, every entry of the range (up to `limit`) that the log holds;
    /// without, possibly fewer, as long as the range's first entry is there.
    fn read_entries(&self, range: &impl RangeBounds<u64>, limit: usize, whole: bool) -> Result<Vec<Entry>, Error> {
        let Some((start, end)) = index_span(range) else {
            return Ok(Vec::new());
        };
        let start = start.max(self.first_readable.load(Ordering::SeqCst));
        if end.is_some_and(|end| end <= start) {
            return Ok(Vec::new());
        }
        let generation = {
            let recent = self.recent();
            if let Some(cached) = recent.read(start, end, limit, whole) {
                drop(recent);
                return Ok(cached.iter().map(|entry| Entry::clone(entry)).collect());
            }
            recent.generation()
        };
        let start = log_key(start);
        let end = end.map(log_key);
        let end = end.as_ref().map_or(Bound::Unbounded, |end| Bound::Excluded(&end[..]));
        let pairs = self.log.range(Bound::Included(&start[..]), end, limit)?;
        let mut entries = Vec::with_capacity(pairs.len());
        let mut read = Vec::with_capacity(pairs.len());
        for (key, value) in &pairs {
            let entry = Self::decode_entry(key, value)?;
            read.push((Arc::new(entry.clone()), value.len()));
            entries.push(entry);
        }
        self.recent().read_from_disk(generation, read);
        Ok(entries)
    }

    fn last_log_id(&self) -> Result<Option<LogId>, Error> {
        match self.log.last()? {
            Some((key, value)) => Ok(Some(Self::decode_entry(&key, &value)?.log_id)),
            None => Ok(None),
        }
    }

    fn log_state(&self) -> Result<LogState, Error> {
        let last_purged_log_id: Option<LogId> = self.read_meta("last purged log id", KEY_LAST_PURGED)?;
        // Entries at or below the purge point may still be on the disk (being
        // removed, or left by a crash before their removal): they do not
        // count, and the last log id is never below the purge point.
        let last_log_id = match (self.last_log_id()?, last_purged_log_id) {
            (Some(last), Some(purged)) if last.index <= purged.index => Some(purged),
            (last, purged) => last.or(purged),
        };
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    /// Removes every entry from `index` on.
    fn remove_from(&self, index: u64) -> Result<(), Error> {
        let mut recent = self.recent();
        recent.truncated(index);
        self.log.remove_range(Bound::Included(&log_key(index)[..]), Bound::Unbounded)?;
        self.sizes.lock().truncated(index);
        Ok(())
    }

    /// Forgets every entry up to and including `index` in memory; returns
    /// the span of indexes the disk still holds and [`Self::remove_purged`]
    /// is to remove.
    fn forget_through(&self, index: u64) -> Option<(u64, u64)> {
        let mut recent = self.recent();
        recent.purged(index);
        self.sizes.lock().purged(index)
    }

    /// Removes the entries `first..=last` from the disk, oldest first, in
    /// batches, after this returns.
    ///
    /// A purge used to remove its entries before it returned, inside
    /// openraft's core task: after each snapshot the core stopped, and with
    /// it every append, while the disk removed (and first read back) the
    /// whole log the snapshot replaced (64 MiB or more: 0.29–0.41 s on an
    /// idle machine, longer under load; docs/DESIGN-NOTES.md, note 30). The purge
    /// point is durable before this starts, so what a crash leaves behind
    /// lies below it: [`Self::log_state`] and reads ignore it, and the
    /// store removes it when it opens. Removing the oldest first keeps the
    /// log free of holes. Not flushed: the next append's flush makes the
    /// removal durable.
    ///
    /// On a disk that blocks, the removal runs on a thread of its own at a
    /// lower priority, paced, after the previous purge's
    /// ([`crate::background`]): on a runtime worker its batches of
    /// [`PURGE_BATCH_ENTRIES`] took 1–12 ms each, about 0.2 s of a worker per
    /// snapshot, while ingest waited (design note 38). In memory it is a task
    /// that yields between two batches, which keeps a simulation on its one
    /// thread.
    ///
    /// The removal holds the tree only while it removes a batch: a store that
    /// is dropped (a node shutting down) is not kept open by it, and what it
    /// did not remove yet is removed when the store opens again.
    fn remove_purged(&self, first: u64, last: u64) {
        let log = Arc::downgrade(&self.log);
        if !self.log.blocks() {
            tokio::spawn(async move {
                for batch in purge_batches(first, last, PURGE_BATCH_ENTRIES) {
                    if !remove_purged_batch(&log, batch, (first, last)) {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
            });
            return;
        }
        let mut removal = self.removal.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = removal.take();
        let started = background::spawn("hookraft-purge", move || {
            if let Some(previous) = previous {
                let _ = previous.join();
            }
            let mut pace = Pace::on();
            for batch in purge_batches(first, last, PACED_PURGE_BATCH_ENTRIES) {
                if !remove_purged_batch(&log, batch, (first, last)) {
                    return;
                }
                pace.breathe();
            }
        });
        match started {
            Ok(thread) => *removal = Some(thread),
            Err(error) => {
                tracing::warn!(%error, first, last, "cannot remove purged log entries; the next start removes them")
            }
        }
    }

    fn insert_entries(&self, entries: impl IntoIterator<Item = Entry>) -> Result<(), Error> {
        let mut batch = Batch::default();
        let mut written = Vec::new();
        for entry in entries {
            let index = entry.log_id.index;
            debug_assert!(written.last().is_none_or(|(e, _): &(Arc<Entry>, usize)| e.log_id.index + 1 == index));
            let bytes = encode("log entry", &entry)?;
            written.push((Arc::new(entry), bytes.len()));
            batch.insert(&log_key(index), bytes);
        }
        // The cache changes with the disk, under its lock, so a reader never
        // sees the two disagree.
        let mut recent = self.recent();
        self.log.apply_batch(batch)?;
        let total = {
            let mut sizes = self.sizes.lock();
            for (entry, bytes) in &written {
                sizes.appended(entry.log_id.index, *bytes as u64);
            }
            sizes.total()
        };
        recent.appended(written);
        drop(recent);
        self.sizes.after_append(total);
        Ok(())
    }

    /// Makes everything written so far durable, in every tree.
    async fn flush(&self) -> Result<(), Error> {
        self.log.flush().await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_entries(&range, usize::MAX, true).map_err(|e| e.storage(ErrorSubject::Logs, ErrorVerb::Read))
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        let limit = self.sizes.lock().entries_within(start, LOG_READ_ENTRIES_MAX, LOG_READ_BYTES_MAX);
        self.read_entries(&(start..end), limit, false).map_err(|e| e.storage(ErrorSubject::Logs, ErrorVerb::Read))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState, StorageError> {
        self.log_state().map_err(|e| e.storage(ErrorSubject::Logs, ErrorVerb::Read))
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.write_meta("vote", KEY_VOTE, vote).map_err(|e| e.storage(ErrorSubject::Vote, ErrorVerb::Write))?;
        self.flush().await.map_err(|e| e.storage(ErrorSubject::Vote, ErrorVerb::Write))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.read_meta("vote", KEY_VOTE).map_err(|e| e.storage(ErrorSubject::Vote, ErrorVerb::Read))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        if committed.is_some_and(|id| !self.hold.allows(id.index)) {
            // The one persisted before stays: entries back it.
            return Ok(());
        }
        // Not flushed on purpose: see the module docs.
        self.write_meta("committed log id", KEY_COMMITTED, &committed)
            .map_err(|e| e.storage(ErrorSubject::Store, ErrorVerb::Write))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let committed: Option<Option<LogId>> = self
            .read_meta("committed log id", KEY_COMMITTED)
            .map_err(|e| e.storage(ErrorSubject::Store, ErrorVerb::Read))?;
        Ok(committed.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.insert_entries(entries).map_err(|e| e.storage(ErrorSubject::Logs, ErrorVerb::Write))?;
        // The entries are readable now; they are durable only after this.
        match self.flush().await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e.storage(ErrorSubject::Logs, ErrorVerb::Write))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(%log_id, "truncating the raft log");
        self.remove_from(log_id.index).map_err(|e| e.storage(ErrorSubject::Logs, ErrorVerb::Delete))?;
        self.flush().await.map_err(|e| e.storage(ErrorSubject::Logs, ErrorVerb::Delete))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        if !self.hold.allows(log_id.index) {
            tracing::info!(%log_id, "purge put off until the snapshot being received is installed");
            return Ok(());
        }
        tracing::debug!(%log_id, "purging the raft log");
        // The purge point first, durably; the entries below it go afterwards
        // (`remove_purged`), so a crash leaves extra entries, never a hole.
        self.write_meta("last purged log id", KEY_LAST_PURGED, &log_id)
            .map_err(|e| e.storage(ErrorSubject::Logs, ErrorVerb::Write))?;
        self.flush().await.map_err(|e| e.storage(ErrorSubject::Logs, ErrorVerb::Write))?;
        self.first_readable.fetch_max(log_id.index.saturating_add(1), Ordering::SeqCst);
        if let Some((first, last)) = self.forget_through(log_id.index) {
            self.remove_purged(first, last);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_span_of_empty_and_unbounded_ranges() {
        assert_eq!(index_span(&(5..5)), None);
        assert_eq!(index_span(&(Bound::Included(6), Bound::Excluded(5))), None);
        assert_eq!(index_span(&(3..=3)), Some((3, Some(4))));
        assert_eq!(index_span(&(2..)), Some((2, None)));
        assert_eq!(index_span(&(..=u64::MAX)), Some((0, None)));
        assert_eq!(index_span(&(Bound::Excluded(u64::MAX), Bound::Unbounded)), None);
    }

    #[test]
    fn log_keys_sort_in_index_order() {
        assert!(log_key(255) < log_key(256));
        assert_eq!(index_of_key(&log_key(42)).expect("8 bytes"), 42);
        assert!(index_of_key(b"short").is_err());
    }
}
