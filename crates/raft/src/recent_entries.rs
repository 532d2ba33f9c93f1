//! [`RecentEntries`]: log entries kept decoded in memory.
//!
//! A leader reads back every entry it appends to replicate it, and re-reads
//! the same entries on every heartbeat while a follower does not answer
//! (openraft resends the follower's unmatched range, up to
//! `max_payload_entries`, each time). Decoding them from the disk each time
//! was most of a simulated run's CPU. This keeps the entries last appended or
//! read, by index.
//!
//! Invariant: every cached entry equals the disk's entry at its index.
//! Appends and reads add entries; truncation and purge remove them with the
//! disk's. A read from the disk races with truncation (the disk read is not
//! under the cache's lock), so every change that can replace or remove an
//! entry bumps a generation, and a read's entries are cached only if the
//! generation did not move while it read.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use crate::Entry;

/// How many entries the cache keeps at most.
pub const RECENT_ENTRIES_MAX: usize = 4096;
/// How many encoded bytes of entries the cache keeps at most. Decoded, they
/// take about twice that. A leader reads an entry back within milliseconds
/// of appending it; 4 MiB is over a second of ingest at full speed, and a
/// follower further behind is read from the disk.
pub const RECENT_BYTES_MAX: usize = 4 << 20;

/// Decoded entries by index, with their encoded sizes; the lowest indexes
/// are dropped first when a bound is passed.
#[derive(Debug, Default)]
pub struct RecentEntries {
    entries: BTreeMap<u64, (Arc<Entry>, usize)>,
    bytes: usize,
    /// One past the highest index ever appended: an append below it
    /// replaces entries.
    appended_end: u64,
    generation: u64,
}

impl RecentEntries {
    /// Adds entries just written to the disk, each with its encoded size.
    pub fn appended(&mut self, entries: impl IntoIterator<Item = (Arc<Entry>, usize)>) {
        for (entry, size) in entries {
            let index = entry.log_id.index;
            if index < self.appended_end {
                self.generation += 1;
            }
            self.appended_end = index + 1;
            self.insert(entry, size);
        }
        self.shrink();
    }

    /// The generation to hand back to [`Self::read_from_disk`].
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Adds entries read from the disk, unless the log changed since
    /// `generation` was taken.
    pub fn read_from_disk(&mut self, generation: u64, entries: impl IntoIterator<Item = (Arc<Entry>, usize)>) {
        if generation != self.generation {
            return;
        }
        for (entry, size) in entries {
            self.insert(entry, size);
        }
        self.shrink();
    }

    /// Forgets every entry at `index` and after (the log was truncated there).
    pub fn truncated(&mut self, index: u64) {
        self.generation += 1;
        self.appended_end = self.appended_end.min(index);
        for (_, (_, size)) in self.entries.split_off(&index) {
            self.bytes -= size;
        }
    }

    /// Forgets every entry up to and including `index` (the log was purged).
    pub fn purged(&mut self, index: u64) {
        self.generation += 1;
        let kept = match index.checked_add(1) {
            Some(next) => self.entries.split_off(&next),
            None => BTreeMap::new(),
        };
        for (_, (_, size)) in std::mem::replace(&mut self.entries, kept) {
            self.bytes -= size;
        }
    }

    /// The cached run of consecutive entries from `start`, stopping before
    /// `end` and after `limit` of them; `None` unless `start` is cached. With
    /// `whole`, also `None` unless the run reaches `end` (or `limit`).
    pub fn read(&self, start: u64, end: Option<u64>, limit: usize, whole: bool) -> Option<Vec<Arc<Entry>>> {
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let mut run = Vec::new();
        for (&index, (entry, _)) in self.entries.range((Bound::Included(start), upper)) {
            if run.len() == limit || index != start + run.len() as u64 {
                break;
            }
            run.push(Arc::clone(entry));
        }
        if run.is_empty() {
            return None;
        }
        let reached = start + run.len() as u64;
        if whole && run.len() < limit && end.is_none_or(|end| reached < end) {
            return None;
        }
        Some(run)
    }

    fn insert(&mut self, entry: Arc<Entry>, size: usize) {
        self.bytes += size;
        if let Some((_, old)) = self.entries.insert(entry.log_id.index, (entry, size)) {
            self.bytes -= old;
        }
    }

    fn shrink(&mut self) {
        while self.entries.len() > RECENT_ENTRIES_MAX || (self.bytes > RECENT_BYTES_MAX && self.entries.len() > 1) {
            if let Some((_, (_, size))) = self.entries.pop_first() {
                self.bytes -= size;
            }
        }
    }

    /// Cached entries (for tests and metrics).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId};

    fn entry(index: u64, term: u64) -> (Arc<Entry>, usize) {
        let log_id = LogId::new(CommittedLeaderId::new(term, 1), index);
        (Arc::new(Entry { log_id, payload: openraft::EntryPayload::Blank }), 10)
    }

    fn ids(entries: Option<Vec<Arc<Entry>>>) -> Option<Vec<(u64, u64)>> {
        entries.map(|v| v.iter().map(|e| (e.log_id.index, e.log_id.leader_id.term)).collect())
    }

    #[test]
    fn reads_only_cached_runs_and_whole_reads_need_the_whole_range() {
        let mut cache = RecentEntries::default();
        cache.appended((5..10).map(|i| entry(i, 1)));
        assert_eq!(ids(cache.read(6, Some(8), usize::MAX, true)), Some(vec![(6, 1), (7, 1)]));
        assert_eq!(ids(cache.read(8, None, usize::MAX, false)), Some(vec![(8, 1), (9, 1)]));
        assert_eq!(ids(cache.read(8, Some(20), 1, true)), Some(vec![(8, 1)]), "the limit is reached");
        assert_eq!(cache.read(8, Some(20), usize::MAX, true), None, "indexes 10.. are not cached");
        assert_eq!(cache.read(4, Some(6), usize::MAX, false), None, "index 4 is not cached");
        assert_eq!(cache.read(10, None, usize::MAX, false), None);
    }

    #[test]
    fn a_run_stops_at_a_gap() {
        let mut cache = RecentEntries::default();
        cache.appended((20..23).map(|i| entry(i, 2)));
        let generation = cache.generation();
        cache.read_from_disk(generation, (10..13).map(|i| entry(i, 1)));
        assert_eq!(ids(cache.read(11, None, usize::MAX, false)), Some(vec![(11, 1), (12, 1)]));
        assert_eq!(cache.read(11, Some(21), usize::MAX, true), None);
        assert_eq!(cache.read(13, None, usize::MAX, false), None);
    }

    #[test]
    fn truncate_then_append_replaces_the_tail() {
        let mut cache = RecentEntries::default();
        cache.appended((1..6).map(|i| entry(i, 1)));
        cache.truncated(4);
        assert_eq!(cache.len(), 3);
        cache.appended((4..6).map(|i| entry(i, 2)));
        assert_eq!(ids(cache.read(3, None, usize::MAX, false)), Some(vec![(3, 1), (4, 2), (5, 2)]));
    }

    #[test]
    fn a_disk_read_that_raced_a_change_is_not_cached() {
        let mut cache = RecentEntries::default();
        cache.appended((1..6).map(|i| entry(i, 1)));
        for change in [
            (|c: &mut RecentEntries| c.truncated(3)) as fn(&mut RecentEntries),
            |c| c.purged(1),
            |c| c.appended([entry(2, 7)]),
        ] {
            let generation = cache.generation();
            change(&mut cache);
            cache.read_from_disk(generation, [entry(0, 9)]);
            assert_eq!(cache.read(0, None, usize::MAX, false), None);
        }
        let generation = cache.generation();
        cache.appended([entry(3, 7)]);
        cache.read_from_disk(generation, [entry(0, 9)]);
        assert!(cache.read(0, None, 1, false).is_some(), "an append past the end replaces nothing");
    }

    #[test]
    fn purge_drops_the_front_and_the_bounds_hold() {
        let mut cache = RecentEntries::default();
        cache.appended((1..6).map(|i| entry(i, 1)));
        cache.purged(2);
        assert_eq!(cache.read(2, None, usize::MAX, false), None);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.bytes, 30);
        cache.purged(100);
        assert!(cache.is_empty());
        cache.appended((0..RECENT_ENTRIES_MAX as u64 + 10).map(|i| entry(i, 1)));
        assert_eq!(cache.len(), RECENT_ENTRIES_MAX);
        assert_eq!(cache.read(9, None, 1, false), None, "the lowest indexes went first");
        assert!(cache.read(10, None, 1, false).is_some());
        let mut big = RecentEntries::default();
        big.appended((0..3).map(|i| (entry(i, 1).0, RECENT_BYTES_MAX / 2 + 1)));
        assert_eq!(big.len(), 1, "kept within the byte bound, but never emptied by it");
        assert_eq!(big.bytes, RECENT_BYTES_MAX / 2 + 1);
    }
}
