//! What an inbox remembers, behind [`Store`], and the in-memory store.
//!
//! Two kinds of entry, each stamped with the time it was recorded:
//! - a **seen id**: an event the service processed (dedupe);
//! - a **key's newest version**: the highest version applied for one key
//!   (stale guard).
//!
//! A store only keeps and drops entries; which entries count (the window) and
//! what they mean is [`crate::Inbox`]'s. A store must record a [`Record`]
//! atomically (the id and its key's version together, or neither) and
//! durably before `commit` returns, if it claims durability at all.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use crate::Error;

/// A key and a version in that key's order. Versions only compare within one
/// key: a sequence number, an entity's revision, a timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyVersion {
    pub key: String,
    pub version: u64,
}

impl KeyVersion {
    pub fn new(key: impl Into<String>, version: u64) -> Self {
        Self { key: key.into(), version }
    }
}

/// The newest version applied for a key, and when it was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub version: u64,
    pub at_s: u64,
}

/// What committing one processed delivery records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The event id, seen from now on.
    pub id: String,
    /// The key's new newest version, when the delivery had one. The key is
    /// the store's: [`crate::Inbox`] prefixes it with where it came from
    /// (`s:` a sequence header, `k:` the caller's), so the two never mix.
    pub key_version: Option<KeyVersion>,
}

/// Where an inbox keeps seen ids and keys' newest versions.
pub trait Store: Send + Sync {
    /// When `id` was recorded, if it is (still) stored.
    fn seen_at(&self, id: &str) -> Result<Option<u64>, Error>;

    /// The newest version recorded for `key`, if it is (still) stored.
    fn applied(&self, key: &str) -> Result<Option<Applied>, Error>;

    /// Records `record` at `now_s`, atomically: the id as seen, and the key's
    /// newest version set to the record's (replacing what was there; the
    /// inbox never commits a version below a live entry's).
    fn commit(&self, record: &Record, now_s: u64) -> Result<(), Error>;

    /// Removes at most `entries_max` entries recorded before `before_s`,
    /// oldest first, and says how many it removed. It must not interleave
    /// with a `commit` of the same entry (an expired id or key recorded
    /// again), or the entry just recorded could go.
    fn prune(&self, before_s: u64, entries_max: usize) -> Result<usize, Error>;
}

impl<S: Store + ?Sized> Store for Arc<S> {
    fn seen_at(&self, id: &str) -> Result<Option<u64>, Error> {
        (**self).seen_at(id)
    }
    fn applied(&self, key: &str) -> Result<Option<Applied>, Error> {
        (**self).applied(key)
    }
    fn commit(&self, record: &Record, now_s: u64) -> Result<(), Error> {
        (**self).commit(record, now_s)
    }
    fn prune(&self, before_s: u64, entries_max: usize) -> Result<usize, Error> {
        (**self).prune(before_s, entries_max)
    }
}

impl<S: Store + ?Sized> Store for Box<S> {
    fn seen_at(&self, id: &str) -> Result<Option<u64>, Error> {
        (**self).seen_at(id)
    }
    fn applied(&self, key: &str) -> Result<Option<Applied>, Error> {
        (**self).applied(key)
    }
    fn commit(&self, record: &Record, now_s: u64) -> Result<(), Error> {
        (**self).commit(record, now_s)
    }
    fn prune(&self, before_s: u64, entries_max: usize) -> Result<usize, Error> {
        (**self).prune(before_s, entries_max)
    }
}

/// Which kind of entry an index row points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Id,
    Key,
}

/// A store in memory: for tests, and for a receiver that may forget on restart.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    seen: HashMap<String, u64>,
    keys: HashMap<String, Applied>,
    /// Every entry by the time it was recorded, for pruning oldest first.
    by_time: BTreeSet<(u64, Kind, String)>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries held (seen ids plus keys), stale or not.
    pub fn len(&self) -> usize {
        let memory = self.lock();
        memory.seen.len() + memory.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        // Every change below leaves the maps consistent before it can panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Store for MemoryStore {
    fn seen_at(&self, id: &str) -> Result<Option<u64>, Error> {
        Ok(self.lock().seen.get(id).copied())
    }

    fn applied(&self, key: &str) -> Result<Option<Applied>, Error> {
        Ok(self.lock().keys.get(key).copied())
    }

    fn commit(&self, record: &Record, now_s: u64) -> Result<(), Error> {
        let mut memory = self.lock();
        if let Some(old_s) = memory.seen.insert(record.id.clone(), now_s) {
            memory.by_time.remove(&(old_s, Kind::Id, record.id.clone()));
        }
        memory.by_time.insert((now_s, Kind::Id, record.id.clone()));
        if let Some(KeyVersion { key, version }) = &record.key_version {
            if let Some(old) = memory.keys.insert(key.clone(), Applied { version: *version, at_s: now_s }) {
                memory.by_time.remove(&(old.at_s, Kind::Key, key.clone()));
            }
            memory.by_time.insert((now_s, Kind::Key, key.clone()));
        }
        Ok(())
    }

    fn prune(&self, before_s: u64, entries_max: usize) -> Result<usize, Error> {
        let mut memory = self.lock();
        let due: Vec<(u64, Kind, String)> =
            memory.by_time.iter().take_while(|(at_s, _, _)| *at_s < before_s).take(entries_max).cloned().collect();
        for entry in &due {
            memory.by_time.remove(entry);
            let (_, kind, name) = entry;
            match kind {
                Kind::Id => memory.seen.remove(name).map(drop),
                Kind::Key => memory.keys.remove(name).map(drop),
            };
        }
        Ok(due.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, key_version: Option<(&str, u64)>) -> Record {
        Record { id: id.into(), key_version: key_version.map(|(key, version)| KeyVersion::new(key, version)) }
    }

    #[test]
    fn a_committed_record_is_seen_with_its_key_version() {
        let store = MemoryStore::new();
        store.commit(&record("evt_1", Some(("s:k", 3))), 100).expect("commits");
        assert_eq!(store.seen_at("evt_1").expect("reads"), Some(100));
        assert_eq!(store.applied("s:k").expect("reads"), Some(Applied { version: 3, at_s: 100 }));
        assert_eq!(store.seen_at("evt_2").expect("reads"), None);
        assert_eq!(store.applied("s:other").expect("reads"), None);
    }

    #[test]
    fn prune_removes_only_entries_before_the_cutoff_and_at_most_the_bound() {
        let store = MemoryStore::new();
        for i in 0..10 {
            store.commit(&record(&format!("evt_{i}"), None), 100 + i).expect("commits");
        }
        assert_eq!(store.prune(105, 3).expect("prunes"), 3);
        assert_eq!(store.len(), 7);
        assert_eq!(store.prune(105, 3).expect("prunes"), 2);
        assert_eq!(store.prune(105, 3).expect("prunes"), 0);
        assert_eq!(store.seen_at("evt_4").expect("reads"), None);
        assert_eq!(store.seen_at("evt_5").expect("reads"), Some(105));
    }

    #[test]
    fn a_key_recorded_again_is_pruned_by_its_newest_time_only() {
        let store = MemoryStore::new();
        store.commit(&record("evt_1", Some(("s:k", 1))), 100).expect("commits");
        store.commit(&record("evt_2", Some(("s:k", 2))), 200).expect("commits");
        assert_eq!(store.prune(150, 10).expect("prunes"), 1, "evt_1 only; the key moved to 200");
        assert_eq!(store.applied("s:k").expect("reads"), Some(Applied { version: 2, at_s: 200 }));
        assert_eq!(store.prune(201, 10).expect("prunes"), 2);
        assert!(store.is_empty());
    }
}
