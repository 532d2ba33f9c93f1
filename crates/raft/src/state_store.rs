//! [`StateStore`]: where the state machine's snapshot lives — the finished
//! history's records and, in the same commit, the encoded state they go
//! with and the log position it was applied to (design note 61, step 2).
//!
//! A snapshot is one [`StateStore::commit`]: the history's changes since
//! the last one (a [`Flush`]), the state encoded with its history apart
//! (only what the history counts), and the snapshot's metadata, durable
//! together or not at all. So the store never holds history the stored
//! state has not applied, nor lacks history it has, and a snapshot writes
//! what changed since the last plus the work in memory, not the whole
//! retained history.
//!
//! A snapshot leaves for another node as [`StateStore::pin_export`]'s stream
//! and arrives through [`StateStore::import`], which replaces the whole
//! store at once.
//!
//! Two stores: [`RedbStateStore`], one redb file beside the log
//! ([`RedbHistory`]), and [`MemStateStore`], in memory for the simulator,
//! kept by its [`crate::MemDisk`] across crashes (a commit is one step, so
//! a crash sees all of it or none of it).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::state::IdRange;
use hookraft_core::state::history_store::{FailingStore, Flush, HistoryStore, MemStore, StoreCounts, StoreError};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::disk::{LOCK_RELEASE_GRACE, LOCK_RETRY_PAUSE};
use crate::history_store::RedbHistory;
use crate::snapshot_data::Spool;

/// Writes the encoded state into the writer a commit hands it.
pub type EncodeState<'a> = &'a mut dyn FnMut(&mut dyn Write) -> Result<(), Error>;

/// What a store's last commit holds beside the history: the snapshot's
/// metadata and the encoded state, as the state machine gave them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredState {
    pub meta: Vec<u8>,
    pub state: Vec<u8>,
}

/// The durable home of the state machine's snapshot. See the module's
/// comment. Every method may block on a disk ([`StateStore::blocks`]).
pub trait StateStore: Send + Sync {
    /// The history as of the last commit, for the state to read its
    /// records through. After an [`import`](Self::import) it is a new one.
    fn history(&self) -> Result<Arc<dyn HistoryStore>, Error>;

    /// The last commit's metadata and state; `None` before the first.
    fn load(&self) -> Result<Option<StoredState>, Error>;

    /// Applies `flush`, replaces the state by what `encode` writes and the
    /// metadata by `meta`, in one durable commit. Returns the state's bytes.
    fn commit(&self, flush: &Flush, meta: &[u8], encode: EncodeState<'_>) -> Result<u64, Error>;

    /// The last commit, pinned (`None` before the first): its metadata
    /// now, its stream whenever [`PinnedExport::write_to`] is called, the
    /// same commit however many come meanwhile.
    fn pin_export(&self) -> Result<Option<PinnedExport>, Error>;

    /// Replaces the whole store by a stream [`PinnedExport::write_to`] wrote,
    /// atomically: after an error the store is as it was.
    fn import(&self, input: &mut dyn Read) -> Result<(), Error>;

    /// Where a snapshot waits on its way to or from another node: an
    /// unlinked file beside the store, or a buffer for a store in memory
    /// (see [`crate::snapshot_data`]).
    fn spool(&self) -> Result<Spool, Error>;

    /// Whether its calls can hold a thread for long (a file on a disk):
    /// then they run on blocking threads. A store in memory answers false.
    fn blocks(&self) -> bool;
}

/// Writes a pinned commit's stream; returns the bytes written.
type WriteStream = Box<dyn FnOnce(&mut dyn Write) -> Result<u64, Error> + Send + Sync>;

/// One commit of a [`StateStore`], held for an export: its metadata, and
/// what writes its stream.
pub struct PinnedExport {
    pub meta: Vec<u8>,
    write: WriteStream,
}

impl PinnedExport {
    pub fn new(
        meta: Vec<u8>,
        write: impl FnOnce(&mut dyn Write) -> Result<u64, Error> + Send + Sync + 'static,
    ) -> Self {
        Self { meta, write: Box::new(write) }
    }

    /// Writes the commit's stream to `out`; returns the bytes written.
    pub fn write_to(self, out: &mut dyn Write) -> Result<u64, Error> {
        (self.write)(out)
    }
}

impl std::fmt::Debug for PinnedExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedExport").field("meta_bytes", &self.meta.len()).finish_non_exhaustive()
    }
}

// --- on disk ------------------------------------------------------------------

/// The file of a node's [`RedbStateStore`], beside its log.
pub const STATE_STORE_FILE: &str = "hookraft-history.redb";
/// Where an import is written before it takes the store's place.
const IMPORT_FILE: &str = "hookraft-history.redb.import";
/// How a spool file's name starts; it is unlinked as soon as it is open.
const SPOOL_PREFIX: &str = "hookraft-snapshot-spool.";

/// The state store in one redb file ([`RedbHistory`]).
pub struct RedbStateStore {
    dir: PathBuf,
    /// redb's page cache, of the file open and of each import.
    cache_bytes: usize,
    /// Replaced whole by an import; states attached before go on reading
    /// the file they were attached to until they are dropped.
    current: RwLock<Arc<RedbHistory>>,
}

impl RedbStateStore {
    /// Opens the store in the directory `dir`, creating it on the first
    /// open. An import a crash cut short is removed. The file stays open,
    /// and locked, while any state attached to it lives (a clone of one
    /// too): a process reopening the directory drops those first.
    /// `cache_bytes` bounds redb's page cache.
    pub fn open(dir: &Path, cache_bytes: usize) -> Result<Self, Error> {
        remove_leftover_import(dir)?;
        remove_leftover_spools(dir)?;
        // As sled's lock, redb's outlives a store dropped a moment ago (by
        // a node stopping in this process): wait for it as sled's is.
        let mut waited = std::time::Duration::ZERO;
        let history = loop {
            match RedbHistory::open(&dir.join(STATE_STORE_FILE), cache_bytes) {
                Err(Error::Redb(redb::Error::DatabaseAlreadyOpen)) if waited < LOCK_RELEASE_GRACE => {
                    std::thread::sleep(LOCK_RETRY_PAUSE);
                    waited += LOCK_RETRY_PAUSE;
                }
                opened => break opened?,
            }
        };
        Ok(Self { dir: dir.to_path_buf(), cache_bytes, current: RwLock::new(Arc::new(history)) })
    }

    fn current(&self) -> Arc<RedbHistory> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// Removes what an import a crash or an error cut short left in `dir`;
/// returns where an import writes.
fn remove_leftover_import(dir: &Path) -> Result<PathBuf, Error> {
    let path = dir.join(IMPORT_FILE);
    if path.exists() {
        std::fs::remove_file(&path).map_err(|source| Error::File { what: "remove", path: path.clone(), source })?;
    }
    Ok(path)
}

/// Removes the spool files a crash left between creating and unlinking
/// one.
fn remove_leftover_spools(dir: &Path) -> Result<(), Error> {
    let listed =
        std::fs::read_dir(dir).map_err(|source| Error::File { what: "list", path: dir.to_path_buf(), source })?;
    for entry in listed.flatten() {
        if entry.file_name().to_string_lossy().starts_with(SPOOL_PREFIX) {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|source| Error::File { what: "remove", path, source })?;
        }
    }
    Ok(())
}

impl StateStore for RedbStateStore {
    fn history(&self) -> Result<Arc<dyn HistoryStore>, Error> {
        Ok(self.current())
    }

    fn load(&self) -> Result<Option<StoredState>, Error> {
        let view = self.current().view()?;
        let Some(meta) = view.applied()? else { return Ok(None) };
        Ok(Some(StoredState { meta, state: view.state()? }))
    }

    fn commit(&self, flush: &Flush, meta: &[u8], encode: EncodeState<'_>) -> Result<u64, Error> {
        self.current().flush_with(flush, meta, encode).map(|(_, state_bytes)| state_bytes)
    }

    fn pin_export(&self) -> Result<Option<PinnedExport>, Error> {
        // A read transaction: the commit stays as it is until the view is
        // dropped (the file grows meanwhile by what later commits free).
        let view = self.current().view()?;
        let Some(meta) = view.applied()? else { return Ok(None) };
        Ok(Some(PinnedExport::new(meta, move |out| view.export(out))))
    }

    fn import(&self, input: &mut dyn Read) -> Result<(), Error> {
        let incoming = remove_leftover_import(&self.dir)?;
        let imported = RedbHistory::import(input, &incoming, self.cache_bytes)?;
        if imported.view()?.applied()?.is_none() {
            drop(imported);
            let _ = std::fs::remove_file(&incoming);
            return Err(Error::StreamRefused("it holds no snapshot".into()));
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        RedbHistory::replace(&self.dir.join(STATE_STORE_FILE), &incoming)?;
        *current = Arc::new(imported);
        Ok(())
    }

    fn spool(&self) -> Result<Spool, Error> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("{SPOOL_PREFIX}{}.{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = self.dir.join(name);
        let opened = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path);
        let file = opened.map_err(|source| Error::File { what: "create", path: path.clone(), source })?;
        std::fs::remove_file(&path).map_err(|source| Error::File { what: "remove", path, source })?;
        Ok(Spool::File(file))
    }

    fn blocks(&self) -> bool {
        true
    }
}

// --- in memory ----------------------------------------------------------------

/// A [`MemStateStore`]'s last commit.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct MemCommit {
    history: Arc<MemStore>,
    stored: Option<StoredState>,
}

/// A history store whose reads fail while `fails` is set: the in-memory
/// disk's stand-in for a disk gone bad.
struct Switched {
    store: Arc<dyn HistoryStore>,
    fails: Arc<AtomicBool>,
    gone: FailingStore,
}

impl Switched {
    fn read(&self) -> &dyn HistoryStore {
        if self.fails.load(Ordering::Relaxed) { &self.gone } else { self.store.as_ref() }
    }
}

impl HistoryStore for Switched {
    fn event(&self, id: &EventId) -> Result<Option<Vec<u8>>, StoreError> {
        self.read().event(id)
    }

    fn delivery(&self, id: &DeliveryId) -> Result<Option<Vec<u8>>, StoreError> {
        self.read().delivery(id)
    }

    fn events(
        &self,
        range: IdRange<EventId>,
        newest: bool,
        limit: usize,
    ) -> Result<Vec<(EventId, Vec<u8>)>, StoreError> {
        self.read().events(range, newest, limit)
    }

    fn deliveries(
        &self,
        range: IdRange<DeliveryId>,
        newest: bool,
        limit: usize,
    ) -> Result<Vec<(DeliveryId, Vec<u8>)>, StoreError> {
        self.read().deliveries(range, newest, limit)
    }

    fn dead(
        &self,
        endpoint: &EndpointId,
        range: IdRange<DeliveryId>,
        newest: bool,
        limit: usize,
    ) -> Result<Vec<DeliveryId>, StoreError> {
        self.read().dead(endpoint, range, newest, limit)
    }

    fn received(&self, after: Option<(u64, EventId)>, limit: usize) -> Result<Vec<(u64, EventId)>, StoreError> {
        self.read().received(after, limit)
    }

    fn counts(&self) -> Result<StoreCounts, StoreError> {
        self.store.counts()
    }
}

/// What starts a [`MemStateStore`]'s export stream.
const MEM_STREAM_MAGIC: &[u8; 8] = b"hkmemst1";

/// The state store of a [`crate::MemDisk`]: every commit a new immutable
/// [`MemStore`], so a state attached to an earlier one reads it unchanged.
/// Fails, like the disk's other handles, once the disk crashed after it
/// was opened.
pub struct MemStateStore {
    commit: Arc<Mutex<MemCommit>>,
    /// Whether this handle still belongs to the disk's current life.
    alive: Box<dyn Fn() -> Result<(), Error> + Send + Sync>,
    /// Whether the history's reads fail ([`crate::MemDisk::fail_history_reads`]).
    history_fails: Arc<AtomicBool>,
}

impl MemStateStore {
    pub(crate) fn new(
        commit: Arc<Mutex<MemCommit>>,
        alive: impl Fn() -> Result<(), Error> + Send + Sync + 'static,
        history_fails: Arc<AtomicBool>,
    ) -> Self {
        Self { commit, alive: Box::new(alive), history_fails }
    }

    fn last(&self) -> Result<std::sync::MutexGuard<'_, MemCommit>, Error> {
        (self.alive)()?;
        Ok(self.commit.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl StateStore for MemStateStore {
    fn history(&self) -> Result<Arc<dyn HistoryStore>, Error> {
        let store: Arc<dyn HistoryStore> = self.last()?.history.clone();
        let gone = FailingStore("the in-memory disk's history store fails its reads".into());
        Ok(Arc::new(Switched { store, fails: self.history_fails.clone(), gone }))
    }

    fn load(&self) -> Result<Option<StoredState>, Error> {
        Ok(self.last()?.stored.clone())
    }

    fn commit(&self, flush: &Flush, meta: &[u8], encode: EncodeState<'_>) -> Result<u64, Error> {
        let mut state = Vec::new();
        encode(&mut state)?;
        let mut last = self.last()?;
        let mut history = MemStore::clone(&last.history);
        history.apply(flush);
        let bytes = state.len() as u64;
        *last = MemCommit { history: Arc::new(history), stored: Some(StoredState { meta: meta.to_vec(), state }) };
        Ok(bytes)
    }

    fn pin_export(&self) -> Result<Option<PinnedExport>, Error> {
        let last = self.last()?.clone();
        let Some(stored) = &last.stored else { return Ok(None) };
        let meta = stored.meta.clone();
        Ok(Some(PinnedExport::new(meta, move |out| {
            let mut bytes = MEM_STREAM_MAGIC.to_vec();
            bytes.extend(crate::codec::encode("state store", &last)?);
            out.write_all(&bytes).map_err(|source| Error::Stream { what: "write", source })?;
            Ok(bytes.len() as u64)
        })))
    }

    fn import(&self, input: &mut dyn Read) -> Result<(), Error> {
        let mut bytes = Vec::new();
        input.read_to_end(&mut bytes).map_err(|source| Error::Stream { what: "read", source })?;
        let Some(body) = bytes.strip_prefix(MEM_STREAM_MAGIC) else {
            return Err(Error::StreamRefused("it is not an in-memory state store's".into()));
        };
        let commit: MemCommit = crate::codec::decode("state store", body)?;
        if commit.stored.is_none() {
            return Err(Error::StreamRefused("it holds no snapshot".into()));
        }
        *self.last()? = commit;
        Ok(())
    }

    fn spool(&self) -> Result<Spool, Error> {
        (self.alive)()?;
        Ok(Spool::memory())
    }

    fn blocks(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history_store::HISTORY_CACHE_BYTES_DEFAULT;

    fn names(dir: &Path) -> Vec<String> {
        let listed = std::fs::read_dir(dir).expect("lists").flatten();
        listed.map(|entry| entry.file_name().to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn a_spool_has_no_name_and_what_a_crash_left_of_one_is_removed_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = RedbStateStore::open(dir.path(), HISTORY_CACHE_BYTES_DEFAULT).expect("opens");
        let mut spool = store.spool().expect("a spool");
        assert!(matches!(spool, Spool::File(_)));
        spool.write_all(b"chunk").expect("writes");
        assert_eq!(spool.rewind_len().expect("len"), 5);
        assert!(!names(dir.path()).iter().any(|n| n.starts_with(SPOOL_PREFIX)), "unlinked once open");
        drop((spool, store));

        // A crash between creating one and unlinking it.
        let leftover = dir.path().join(format!("{SPOOL_PREFIX}123.0"));
        std::fs::write(&leftover, b"half a snapshot").expect("writes");
        let other = dir.path().join("kept-by-someone-else");
        std::fs::write(&other, b"x").expect("writes");
        drop(RedbStateStore::open(dir.path(), HISTORY_CACHE_BYTES_DEFAULT).expect("reopens"));
        assert!(!leftover.exists(), "the leftover spool is removed");
        assert!(other.exists(), "nothing else is");
    }

    #[test]
    fn a_store_in_memory_spools_into_a_buffer_and_not_after_a_crash() {
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let check = alive.clone();
        let store = MemStateStore::new(
            Arc::default(),
            move || if check.load(Ordering::Relaxed) { Ok(()) } else { Err(Error::Corrupt("crashed".into())) },
            Arc::default(),
        );
        assert!(matches!(store.spool().expect("a spool"), Spool::Memory(_)));
        alive.store(false, Ordering::Relaxed);
        assert!(store.spool().is_err(), "a handle of a crashed disk");
    }
}
