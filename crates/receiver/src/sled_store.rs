//! The durable default store: one sled tree in a directory of its own.
//!
//! Layout (one tree, so a commit is one atomic batch):
//! - `i` + id → `[1, at_s]`: a seen id;
//! - `k` + key → `[1, at_s, version]`: a key's newest version;
//! - `t` + at_s + `i`|`k` + name → empty: the time index that pruning walks
//!   oldest first, so a prune step reads only what it removes.
//!
//! Numbers are big-endian u64; every value starts with its format version
//! (1), and a value of another version is reported, never guessed at.
//!
//! A commit returns once sled flushed it and its data file was synced:
//! sled 0.34's flush survives a process crash but does not flush the
//! device's cache, so the file is `fdatasync`ed after it (as hookraft's own
//! log does). This store must not be opened by two processes at once; sled
//! locks the directory.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::Error;
use crate::store::{Applied, KeyVersion, Record, Store};

/// sled's page cache: the inbox's working set is the recent ids and keys.
const CACHE_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// How long [`SledStore::open`] waits for a just-dropped handle of this
/// process to release sled's file lock (sled's threads hold it a moment).
const LOCK_RELEASE_GRACE_MS: u64 = 2_000;
const LOCK_RETRY_PAUSE_MS: u64 = 20;
/// sled 0.34's data file inside its directory.
const DATA_FILE: &str = "db";
/// The format version every value starts with.
const FORMAT_V1: u8 = 1;

const ID: u8 = b'i';
const KEY: u8 = b'k';
const TIME: u8 = b't';

/// A [`Store`] in a sled database.
pub struct SledStore {
    tree: sled::Db,
    /// Held while a commit or a prune reads and writes entries: a prune
    /// must not remove an entry that a commit is recording again.
    writes: Mutex<()>,
    /// sled's data file, synced after each flush; the lock also keeps
    /// flushes one at a time.
    data_file: Mutex<std::fs::File>,
    path: PathBuf,
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore").field("path", &self.path).finish_non_exhaustive()
    }
}

impl SledStore {
    /// Opens (or creates) the store in the directory `path`.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let open = || {
            sled::Config::new()
                .path(path)
                .cache_capacity(CACHE_BYTES_MAX)
                // Commits flush themselves; a timer would only add IO.
                .flush_every_ms(None)
                .open()
        };
        let db = open_when_released(open).map_err(|source| Error::Open { path: path.to_path_buf(), source })?;
        let data_file = std::fs::File::open(path.join(DATA_FILE))?;
        Ok(Self { tree: db, writes: Mutex::new(()), data_file: Mutex::new(data_file), path: path.to_path_buf() })
    }

    /// Entries held (seen ids plus keys), stale or not.
    pub fn len(&self) -> usize {
        self.tree.scan_prefix([ID]).count() + self.tree.scan_prefix([KEY]).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn flush(&self) -> Result<(), Error> {
        let data_file = self.data_file.lock().unwrap_or_else(PoisonError::into_inner);
        self.tree.flush()?;
        data_file.sync_data()?;
        Ok(())
    }
}

/// Calls `open` until it succeeds, fails for another reason than sled's
/// file lock, or the grace has passed (counted in pauses: no clock read).
fn open_when_released(open: impl Fn() -> sled::Result<sled::Db>) -> sled::Result<sled::Db> {
    let mut waited_ms = 0;
    loop {
        match open() {
            Err(sled::Error::Io(io))
                if io.to_string().starts_with("could not acquire lock") && waited_ms < LOCK_RELEASE_GRACE_MS =>
            {
                std::thread::sleep(Duration::from_millis(LOCK_RETRY_PAUSE_MS));
                waited_ms += LOCK_RETRY_PAUSE_MS;
            }
            result => return result,
        }
    }
}

fn entry_key(kind: u8, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + name.len());
    key.push(kind);
    key.extend_from_slice(name.as_bytes());
    key
}

fn index_key(at_s: u64, kind: u8, name: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(10 + name.len());
    key.push(TIME);
    key.extend_from_slice(&at_s.to_be_bytes());
    key.push(kind);
    key.extend_from_slice(name.as_bytes());
    key
}

/// `(at_s, kind, name)` of a time index key.
fn parse_index_key(key: &[u8]) -> Result<(u64, u8, String), Error> {
    let corrupt = || Error::Corrupt(format!("time index key of {} bytes", key.len()));
    let rest = key.strip_prefix(&[TIME]).ok_or_else(corrupt)?;
    let (at, rest) = rest.split_first_chunk::<8>().ok_or_else(corrupt)?;
    let (&kind, name) = rest.split_first().ok_or_else(corrupt)?;
    let name = String::from_utf8(name.to_vec()).map_err(|_| corrupt())?;
    Ok((u64::from_be_bytes(*at), kind, name))
}

/// The numbers of a value: `[FORMAT_V1, n0, n1, ...]`.
fn encode(numbers: &[u64]) -> Vec<u8> {
    let mut value = Vec::with_capacity(1 + 8 * numbers.len());
    value.push(FORMAT_V1);
    for n in numbers {
        value.extend_from_slice(&n.to_be_bytes());
    }
    value
}

fn decode<const N: usize>(value: &[u8]) -> Result<[u64; N], Error> {
    let corrupt = || Error::Corrupt(format!("a value of {} bytes, format {:?}", value.len(), value.first()));
    let body = value.strip_prefix(&[FORMAT_V1]).ok_or_else(corrupt)?;
    if body.len() != 8 * N {
        return Err(corrupt());
    }
    let mut numbers = [0u64; N];
    for (n, chunk) in numbers.iter_mut().zip(body.chunks_exact(8)) {
        *n = u64::from_be_bytes(chunk.try_into().map_err(|_| corrupt())?);
    }
    Ok(numbers)
}

impl Store for SledStore {
    fn seen_at(&self, id: &str) -> Result<Option<u64>, Error> {
        let Some(value) = self.tree.get(entry_key(ID, id))? else { return Ok(None) };
        let [at_s] = decode::<1>(&value)?;
        Ok(Some(at_s))
    }

    fn applied(&self, key: &str) -> Result<Option<Applied>, Error> {
        let Some(value) = self.tree.get(entry_key(KEY, key))? else { return Ok(None) };
        let [at_s, version] = decode::<2>(&value)?;
        Ok(Some(Applied { version, at_s }))
    }

    fn commit(&self, record: &Record, now_s: u64) -> Result<(), Error> {
        let writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        let mut batch = sled::Batch::default();
        if let Some(old_s) = self.seen_at(&record.id)? {
            batch.remove(index_key(old_s, ID, &record.id));
        }
        batch.insert(entry_key(ID, &record.id), encode(&[now_s]));
        batch.insert(index_key(now_s, ID, &record.id), &[]);
        if let Some(KeyVersion { key, version }) = &record.key_version {
            if let Some(old) = self.applied(key)? {
                batch.remove(index_key(old.at_s, KEY, key));
            }
            batch.insert(entry_key(KEY, key), encode(&[now_s, *version]));
            batch.insert(index_key(now_s, KEY, key), &[]);
        }
        self.tree.apply_batch(batch)?;
        drop(writes);
        self.flush()
    }

    fn prune(&self, before_s: u64, entries_max: usize) -> Result<usize, Error> {
        let _writes = self.writes.lock().unwrap_or_else(PoisonError::into_inner);
        let end = index_key(before_s, 0, "");
        let mut batch = sled::Batch::default();
        let mut removed = 0;
        for row in self.tree.range(vec![TIME]..end).take(entries_max) {
            let (index, _) = row?;
            let (at_s, kind, name) = parse_index_key(&index)?;
            batch.remove(index);
            // The entry goes only if this row is its current time; a row left
            // behind by a re-record (there should be none) goes alone.
            let current_s = match kind {
                ID => self.seen_at(&name)?,
                KEY => self.applied(&name)?.map(|applied| applied.at_s),
                other => return Err(Error::Corrupt(format!("time index kind {other}"))),
            };
            if current_s == Some(at_s) {
                batch.remove(entry_key(kind, &name));
                removed += 1;
            }
        }
        self.tree.apply_batch(batch)?;
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, key_version: Option<(&str, u64)>) -> Record {
        Record { id: id.into(), key_version: key_version.map(|(key, version)| KeyVersion::new(key, version)) }
    }

    #[test]
    fn a_committed_record_survives_closing_and_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStore::open(dir.path()).expect("opens");
        store.commit(&record("evt_1", Some(("s:cus_1", 4))), 100).expect("commits");
        drop(store);
        let store = SledStore::open(dir.path()).expect("reopens");
        assert_eq!(store.seen_at("evt_1").expect("reads"), Some(100));
        assert_eq!(store.applied("s:cus_1").expect("reads"), Some(Applied { version: 4, at_s: 100 }));
        assert_eq!(store.len(), 2);
    }

    #[test]
    fn prune_walks_the_time_index_oldest_first_within_the_bound() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStore::open(dir.path()).expect("opens");
        for i in 0..6u64 {
            store.commit(&record(&format!("evt_{i}"), Some(("k:a", i))), 100 + i).expect("commits");
        }
        // The key moved on with each commit: only its last time counts.
        assert_eq!(store.len(), 7);
        assert_eq!(store.prune(103, 2).expect("prunes"), 2);
        assert_eq!(store.seen_at("evt_0").expect("reads"), None);
        assert_eq!(store.seen_at("evt_2").expect("reads"), Some(102));
        assert_eq!(store.prune(103, 10).expect("prunes"), 1);
        assert_eq!(store.prune(1_000, 10).expect("prunes"), 4, "evt_3..5 and the key");
        assert!(store.is_empty());
        assert_eq!(store.tree.len(), 0, "no index row is left behind");
    }

    #[test]
    fn a_value_of_an_unknown_format_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SledStore::open(dir.path()).expect("opens");
        store.tree.insert(entry_key(ID, "evt_1"), &[2u8, 0, 0]).expect("writes");
        assert!(matches!(store.seen_at("evt_1"), Err(Error::Corrupt(_))));
    }

    #[test]
    fn a_second_open_of_a_held_directory_fails_after_the_grace() {
        let dir = tempfile::tempdir().expect("temp dir");
        let _held = SledStore::open(dir.path()).expect("opens");
        assert!(matches!(SledStore::open(dir.path()), Err(Error::Open { .. })));
    }
}
