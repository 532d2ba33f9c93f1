//! Snapshots by the log's size and by the history held in memory, not
//! only by the log's length.
//!
//! openraft builds a snapshot every `SnapshotPolicy::LogsSinceLast` entries.
//! hookraft's entries vary from a heartbeat of a few dozen bytes to an ingest
//! batch of a thousand events, so a count alone lets the log between two
//! snapshots grow to hundreds of megabytes, and the disk keeps what the log
//! holds in memory (sled keeps its trees' values resident): a backlog of
//! pending deliveries was costing its whole log a second time.
//!
//! [`LogSizes`] keeps each stored entry's encoded size; the log store updates
//! it under the same calls that change the log, and wakes
//! [`snapshot_when_log_grows`] once the log holds more than
//! [`SNAPSHOT_LOG_BYTES_MIN`]. That task asks openraft for a snapshot when the
//! entries past the last snapshot hold more than [`snapshot_due_bytes`]: the
//! larger of the minimum and a quarter of the last snapshot. The quarter
//! bounds the write amplification (each byte of log costs at most four bytes
//! of snapshot written) while the memory the log holds stays a fraction of
//! the state's.
//!
//! The same task watches the finished history the state holds in memory
//! ([`HistoryWatch`], set by every apply): what finished since the last
//! snapshot stays in memory until a snapshot writes it to the history
//! store, and the log's threshold alone let it stay there for as long as
//! the log took to grow by 64 MiB: after a burst, minutes at a low rate,
//! with a burst's worth of records held (design note 65). A snapshot is
//! also due once the history held passes [`snapshot_due_bytes`] of
//! [`SNAPSHOT_HISTORY_BYTES_MIN`], the same quarter of the last snapshot
//! bounding how often the work in memory is written for it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, watch};

use crate::Raft;

/// Encoded bytes of log past the last snapshot that always justify a new one.
pub const SNAPSHOT_LOG_BYTES_MIN: u64 = 64 << 20;
/// Encoded bytes of finished history held in memory that always justify a
/// snapshot (which moves them to the history store).
pub const SNAPSHOT_HISTORY_BYTES_MIN: u64 = 32 << 20;
/// Finished history held in memory past which snapshots fell behind: a
/// snapshot then commits at its caller's priority, unpaced, rather than
/// at a low priority resting as long as it works (design note 65).
pub const SNAPSHOT_CATCH_UP_BYTES: u64 = 4 * SNAPSHOT_HISTORY_BYTES_MIN;
/// The log past the last snapshot may hold this fraction (1/N) of the last
/// snapshot's size before the next one, when that is more than the minimum.
pub const SNAPSHOT_LOG_FRACTION_DIVISOR: u64 = 4;

/// Encoded bytes past the last snapshot at which a new snapshot is due:
/// `min_bytes`, or a fraction of the last snapshot when that is more.
pub fn snapshot_due_bytes(min_bytes: u64, last_snapshot_bytes: u64) -> u64 {
    min_bytes.max(last_snapshot_bytes / SNAPSHOT_LOG_FRACTION_DIVISOR)
}

/// The encoded size of every entry the log holds, oldest first.
#[derive(Debug, Default)]
pub struct LogSizes {
    /// (index, encoded bytes), indexes strictly increasing.
    entries: VecDeque<(u64, u64)>,
    total: u64,
}

impl LogSizes {
    /// Records an entry written at `index`, replacing any at or after it.
    pub fn appended(&mut self, index: u64, bytes: u64) {
        self.truncated(index);
        self.entries.push_back((index, bytes));
        self.total += bytes;
    }

    /// Forgets every entry from `index` on.
    pub fn truncated(&mut self, index: u64) {
        while let Some(&(last, bytes)) = self.entries.back() {
            if last < index {
                break;
            }
            self.entries.pop_back();
            self.total -= bytes;
        }
    }

    /// Forgets every entry up to and including `index`; returns the first
    /// and last index it forgot (the log has no holes, so every index
    /// between them too), or `None` if it held none.
    pub fn purged(&mut self, index: u64) -> Option<(u64, u64)> {
        let mut span: Option<(u64, u64)> = None;
        while let Some(&(first, bytes)) = self.entries.front() {
            if first > index {
                break;
            }
            self.entries.pop_front();
            self.total -= bytes;
            span = Some((span.map_or(first, |(from, _)| from), first));
        }
        span
    }

    /// How many entries from `start` on a read may return within
    /// `budget` bytes: at least one, at most `limit`; `limit` when the
    /// sizes do not know `start`.
    pub fn entries_within(&self, start: u64, limit: usize, budget: u64) -> usize {
        let at = self.entries.partition_point(|&(index, _)| index < start);
        if self.entries.get(at).is_none_or(|&(index, _)| index != start) {
            return limit;
        }
        let mut bytes = 0u64;
        let fitting = self.entries.range(at..).take(limit).take_while(|&&(_, size)| {
            bytes = bytes.saturating_add(size);
            bytes <= budget
        });
        fitting.count().clamp(1, limit.max(1))
    }

    /// Bytes of every entry held.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes of the entries after `index` (all of them for `None`).
    pub fn bytes_after(&self, index: Option<u64>) -> u64 {
        let Some(index) = index else { return self.total };
        // Entries are in index order: sum from the newest back.
        self.entries.iter().rev().take_while(|(i, _)| *i > index).map(|(_, bytes)| bytes).sum()
    }
}

/// Wakes the snapshot task once a size it watches reaches the task's
/// minimum for it (set by the task as it starts).
#[derive(Debug, Clone)]
struct Wake {
    grown: Arc<Notify>,
    from_bytes: Arc<AtomicU64>,
}

impl Wake {
    fn from(bytes: u64) -> Self {
        Self { grown: Arc::default(), from_bytes: Arc::new(AtomicU64::new(bytes)) }
    }

    /// Wakes the task if `bytes` reached the minimum.
    fn if_reached(&self, bytes: u64) {
        if bytes >= self.from_bytes.load(Ordering::Relaxed) {
            self.grown.notify_one();
        }
    }
}

/// The log store's sizes, shared with the task that acts on them.
#[derive(Debug, Clone)]
pub struct LogSizeWatch {
    sizes: Arc<Mutex<LogSizes>>,
    wake: Wake,
}

impl Default for LogSizeWatch {
    fn default() -> Self {
        Self { sizes: Arc::default(), wake: Wake::from(SNAPSHOT_LOG_BYTES_MIN) }
    }
}

impl LogSizeWatch {
    /// The sizes, for the log store to update.
    pub(crate) fn lock(&self) -> MutexGuard<'_, LogSizes> {
        self.sizes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Called by the log store after an append: wakes the task once the log
    /// is large enough for a snapshot to be worth considering.
    pub(crate) fn after_append(&self, total: u64) {
        self.wake.if_reached(total);
    }

    /// Bytes of the entries after `index`.
    pub fn bytes_after(&self, index: Option<u64>) -> u64 {
        self.lock().bytes_after(index)
    }
}

/// The finished history the state holds in memory, as the last apply left
/// it: shared by the state machine, which sets it, with the task that acts
/// on it.
#[derive(Debug, Clone)]
pub struct HistoryWatch {
    held_bytes: Arc<AtomicU64>,
    wake: Wake,
}

impl Default for HistoryWatch {
    fn default() -> Self {
        Self { held_bytes: Arc::default(), wake: Wake::from(SNAPSHOT_HISTORY_BYTES_MIN) }
    }
}

impl HistoryWatch {
    /// Called by the state machine after an apply with the history's bytes
    /// in memory: wakes the task once they are worth a snapshot.
    pub(crate) fn applied(&self, held_bytes: u64) {
        self.held_bytes.store(held_bytes, Ordering::Relaxed);
        self.wake.if_reached(held_bytes);
    }

    /// Encoded bytes of finished history in memory after the last apply.
    pub fn held_bytes(&self) -> u64 {
        self.held_bytes.load(Ordering::Relaxed)
    }
}

/// What makes a snapshot due whatever the last one's size: bytes of log
/// past it, bytes of finished history held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotMinimums {
    pub log_bytes: u64,
    pub history_bytes: u64,
}

impl SnapshotMinimums {
    /// Production's: [`SNAPSHOT_LOG_BYTES_MIN`], [`SNAPSHOT_HISTORY_BYTES_MIN`].
    pub const DEFAULT: Self = Self { log_bytes: SNAPSHOT_LOG_BYTES_MIN, history_bytes: SNAPSHOT_HISTORY_BYTES_MIN };
}

/// What a snapshot is due for, if anything: the log past the last one, or
/// the history held in memory, each against [`snapshot_due_bytes`] of its
/// minimum and the last snapshot's size.
pub fn snapshot_due_for(
    log_bytes_since: u64,
    history_held_bytes: u64,
    min: SnapshotMinimums,
    last_snapshot_bytes: u64,
) -> Option<&'static str> {
    if log_bytes_since >= snapshot_due_bytes(min.log_bytes, last_snapshot_bytes) {
        Some("log")
    } else if history_held_bytes >= snapshot_due_bytes(min.history_bytes, last_snapshot_bytes) {
        Some("history")
    } else {
        None
    }
}

/// Asks `raft` for a snapshot whenever the log past its last snapshot, or
/// the finished history held in memory, is due one ([`snapshot_due_for`]
/// of `min`, production's being [`SnapshotMinimums::DEFAULT`], and of
/// `snapshot_bytes`, the last snapshot's size kept by the state machine),
/// once per snapshot. Ends when `stop` turns true or Raft stops.
pub async fn snapshot_when_log_grows(
    raft: Raft,
    log: LogSizeWatch,
    history: HistoryWatch,
    snapshot_bytes: Arc<AtomicU64>,
    min: SnapshotMinimums,
    mut stop: watch::Receiver<bool>,
) {
    log.wake.from_bytes.store(min.log_bytes, Ordering::Relaxed);
    history.wake.from_bytes.store(min.history_bytes, Ordering::Relaxed);
    // The snapshot index at which a snapshot was last asked for: another is
    // asked for only after that one (or any later one) was built.
    let mut asked_after: Option<Option<u64>> = None;
    loop {
        tokio::select! {
            () = log.wake.grown.notified() => {}
            () = history.wake.grown.notified() => {}
            _ = stop.wait_for(|stopped| *stopped) => return,
        }
        let snapshot_index = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow();
            if metrics.running_state.is_err() {
                return;
            }
            metrics.snapshot.map(|id| id.index)
        };
        if asked_after == Some(snapshot_index) {
            continue;
        }
        let (log_bytes, history_bytes) = (log.bytes_after(snapshot_index), history.held_bytes());
        let Some(due_for) = snapshot_due_for(log_bytes, history_bytes, min, snapshot_bytes.load(Ordering::Relaxed))
        else {
            continue;
        };
        tracing::info!(due_for, log_bytes, history_bytes, "building a snapshot");
        if raft.trigger().snapshot().await.is_err() {
            return;
        }
        asked_after = Some(snapshot_index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_takes_as_many_entries_as_fit_its_budget_and_at_least_one() {
        let mut sizes = LogSizes::default();
        for index in 10..20 {
            sizes.appended(index, 1_000);
        }
        assert_eq!(sizes.entries_within(10, 1024, 3_500), 3);
        assert_eq!(sizes.entries_within(18, 1024, 1_000_000), 2, "to the end of the log");
        assert_eq!(sizes.entries_within(10, 4, 1_000_000), 4, "the count's limit");
        assert_eq!(sizes.entries_within(12, 1024, 10), 1, "one entry over the budget still goes");
        assert_eq!(sizes.entries_within(5, 7, 10), 7, "an index it does not know: the limit");
        assert_eq!(sizes.entries_within(25, 7, 10), 7);
    }

    #[test]
    fn a_snapshot_is_due_for_the_log_or_for_the_history_each_against_its_minimum() {
        let min = SnapshotMinimums { log_bytes: 100, history_bytes: 50 };
        assert_eq!(snapshot_due_for(99, 49, min, 0), None);
        assert_eq!(snapshot_due_for(100, 0, min, 0), Some("log"));
        assert_eq!(snapshot_due_for(0, 50, min, 0), Some("history"));
        assert_eq!(snapshot_due_for(100, 50, min, 0), Some("log"), "the log first when both are");
        // A large last snapshot raises both: a quarter of 1,000.
        assert_eq!(snapshot_due_for(200, 200, min, 1_000), None);
        assert_eq!(snapshot_due_for(0, 250, min, 1_000), Some("history"));
    }

    #[test]
    fn tracks_appends_truncation_and_purges() {
        let mut sizes = LogSizes::default();
        for index in 1..=5 {
            sizes.appended(index, index * 10);
        }
        assert_eq!(sizes.total(), 150);
        assert_eq!(sizes.bytes_after(Some(3)), 90);
        assert_eq!(sizes.bytes_after(None), 150);
        assert_eq!(sizes.bytes_after(Some(9)), 0);
        sizes.truncated(4);
        assert_eq!(sizes.total(), 60);
        assert_eq!(sizes.purged(0), None);
        assert_eq!(sizes.purged(1), Some((1, 1)));
        assert_eq!((sizes.total(), sizes.bytes_after(Some(0))), (50, 50));
        // An append over existing entries replaces them and what follows.
        sizes.appended(3, 7);
        assert_eq!(sizes.total(), 27);
        assert_eq!(sizes.purged(100), Some((2, 3)));
        assert_eq!(sizes.total(), 0);
        sizes.truncated(0);
        assert_eq!(sizes.total(), 0);
    }

    #[test]
    fn a_snapshot_is_due_at_the_minimum_or_a_quarter_of_the_last_one() {
        let min = SNAPSHOT_LOG_BYTES_MIN;
        assert_eq!(snapshot_due_bytes(min, 0), min);
        assert_eq!(snapshot_due_bytes(min, min), min);
        assert_eq!(snapshot_due_bytes(min, 1 << 30), 1 << 28);
    }
}
