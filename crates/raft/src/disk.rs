//! The storage seam: [`Disk`] and [`KvTree`], the few operations the log
//! store and the state machine need from a disk, and [`SledDisk`], the
//! production implementation over one sled database.
//!
//! A disk is a set of named trees of ordered byte keys. Writes are visible
//! to reads at once but are **durable only after a [`KvTree::flush`]**,
//! which covers every tree of the disk (as sled's flush covers its whole
//! database). A [`Batch`] is atomic: after a crash all of it or none of it
//! is there. The in-memory twin with crash semantics is
//! [`crate::mem_disk::MemDisk`].
//!
//! This module must not know what the stores keep in the trees: it moves
//! bytes, and decoding them is the stores' business.

use std::future::Future;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use crate::Error;
use crate::group_commit::GroupCommit;
use crate::history_store::HISTORY_CACHE_BYTES_DEFAULT;
use crate::state_store::{RedbStateStore, StateStore};

/// The file in a sled 0.34 database directory that holds its pages.
const SLED_DATA_FILE: &str = "db";
/// Where sled keeps values too large for its log, a file each.
const SLED_BLOBS_DIR: &str = "blobs";

/// sled's page cache size: the log's hot tail (snapshots are files beside
/// it). Reads of recent entries are served by the log store's own cache, so
/// this needs to hold little more than the pages being written.
pub const SLED_CACHE_CAPACITY_BYTES: u64 = 16 * 1024 * 1024;

/// sled's segment (and IO buffer) size for a new database. sled writes a
/// value larger than a quarter of a segment to a blob file of its own,
/// which the group commit must find, sync, and sync the directory after
/// (DESIGN-NOTES 33): with sled's default 512 KiB segments that was every
/// log entry over about 128 KiB, some twenty a second under load, each
/// adding two syncs to a commit and a listing of `blobs/` to the flushes
/// around it (entries of 131 to 516 KB, median 193 KB, at 30,000 events/s
/// with deliveries). 2 MiB segments keep entries up to about 512 KiB in
/// the log; 8 MiB ones measured no better and kept 20 MiB more resident.
pub const SLED_SEGMENT_BYTES: usize = 2 << 20;
/// sled's default segment size, which databases created before
/// [`SLED_SEGMENT_BYTES`] keep: sled refuses to change it on reopening.
const SLED_SEGMENT_BYTES_DEFAULT: usize = 512 << 10;

/// A key and its value, both owned.
pub type KeyValue = (Vec<u8>, Vec<u8>);

/// The future of [`KvTree::flush`].
pub type FlushFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// A disk: a set of named trees sharing one durability point, and the
/// state machine's store beside them.
pub trait Disk: Send + Sync {
    /// The tree called `name`, created empty if it does not exist yet.
    fn open_tree(&self, name: &str) -> Result<Arc<dyn KvTree>, Error>;

    /// The store of the state machine's snapshot: the history and the
    /// state it goes with ([`crate::state_store`]). Durable per commit,
    /// independently of the trees' [`KvTree::flush`].
    fn open_state_store(&self) -> Result<Arc<dyn StateStore>, Error>;

    /// Names this disk in errors, e.g. `sled database at /var/lib/x`.
    fn describe(&self) -> String;
}

/// One ordered map of byte keys to byte values on a [`Disk`].
///
/// Every method returns a `Result`: a disk can fail (or, for a
/// [`crate::mem_disk::MemDisk`], have crashed under a handle opened before).
pub trait KvTree: Send + Sync {
    /// The value under `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error>;

    /// Sets `key` to `value` (not yet durable; see [`KvTree::flush`]).
    fn insert(&self, key: &[u8], value: Vec<u8>) -> Result<(), Error>;

    /// At most `limit` pairs with keys in `(start, end)`, in key order. An
    /// empty or reversed range yields nothing.
    fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Vec<KeyValue>, Error>;

    /// The pair with the greatest key.
    fn last(&self) -> Result<Option<KeyValue>, Error>;

    /// Removes every key in `(start, end)`, atomically.
    fn remove_range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Result<(), Error>;

    /// Applies every write of `batch`, atomically.
    fn apply_batch(&self, batch: Batch) -> Result<(), Error>;

    /// The durability point: once this resolves, every write made before the
    /// call, to any tree of this disk, survives a crash.
    fn flush(&self) -> FlushFuture<'_>;

    /// Whether its writes can hold a thread for long (a tree on a disk):
    /// then long runs of them that nothing waits for belong on a thread of
    /// their own. A tree in memory answers false.
    fn blocks(&self) -> bool;
}

/// One write of a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp {
    Insert { key: Vec<u8>, value: Vec<u8> },
    Remove { key: Vec<u8> },
}

/// Writes applied together by [`KvTree::apply_batch`], in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<BatchOp>,
}

impl Batch {
    /// Adds a write of `value` under `key`.
    pub fn insert(&mut self, key: &[u8], value: Vec<u8>) {
        self.ops.push(BatchOp::Insert { key: key.to_vec(), value });
    }

    /// Adds a removal of `key`.
    pub fn remove(&mut self, key: &[u8]) {
        self.ops.push(BatchOp::Remove { key: key.to_vec() });
    }

    /// The writes, in the order they were added.
    pub fn ops(&self) -> &[BatchOp] {
        &self.ops
    }

    /// Takes the writes out, in the order they were added.
    pub fn into_ops(self) -> Vec<BatchOp> {
        self.ops
    }
}

/// Whether no key can lie in `(start, end)`. `BTreeMap::range` panics on
/// exactly the ranges this calls empty, so implementations check first.
pub(crate) fn is_empty_range(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => s >= e,
        _ => false,
    }
}

/// The production disk: one sled database.
#[derive(Clone)]
pub struct SledDisk {
    db: sled::Db,
    /// Every tree's flush goes through it: one fsync at a time, shared.
    group_commit: GroupCommit,
    /// Only names the disk in errors.
    path: PathBuf,
    /// The page cache of the state store beside the database.
    history_cache_bytes: usize,
}

impl SledDisk {
    /// Opens (or creates) the sled database in the directory `path`. Fails
    /// while another `SledDisk` of this process or another holds it, after
    /// waiting up to [`LOCK_RELEASE_GRACE`] for a holder that is going away.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let config = |segment_bytes: usize| {
            sled::Config::new()
                .path(path)
                .cache_capacity(SLED_CACHE_CAPACITY_BYTES)
                .segment_size(segment_bytes)
                // The stores flush explicitly where openraft requires it; a
                // timer would only add background IO.
                .flush_every_ms(None)
        };
        let db = open_when_released(path, LOCK_RELEASE_GRACE, LOCK_RETRY_PAUSE, || {
            match config(SLED_SEGMENT_BYTES).open() {
                // A database made with sled's default segments keeps them
                // (sled says so as `Unsupported`; anything else it refuses
                // is refused again below, and that error is reported).
                Err(sled::Error::Unsupported(_)) => config(SLED_SEGMENT_BYTES_DEFAULT).open(),
                opened => opened,
            }
        })
        .map_err(|source| Error::Open { path: path.to_path_buf(), source })?;
        // sled keeps its pages in `<path>/db`; the handle is only synced.
        let data_path = path.join(SLED_DATA_FILE);
        let data_file = std::fs::File::open(&data_path)
            .map_err(|e| Error::Sync(format!("cannot open {}: {e}", data_path.display())))?;
        let group_commit = GroupCommit::new(db.clone(), data_file, path.join(SLED_BLOBS_DIR));
        Ok(Self { group_commit, db, path: path.to_path_buf(), history_cache_bytes: HISTORY_CACHE_BYTES_DEFAULT })
    }

    /// The state store this disk opens ([`Disk::open_state_store`]) keeps
    /// a page cache of `bytes` (else [`HISTORY_CACHE_BYTES_DEFAULT`]).
    #[must_use]
    pub fn with_history_cache(mut self, bytes: usize) -> Self {
        self.history_cache_bytes = bytes;
        self
    }
}

/// How long [`SledDisk::open`] waits for sled's file lock. When the last
/// handle on a database is dropped, sled's IO threads still hold the data
/// file (and its lock) for a moment after the write they report done, so
/// the same process reopening the directory at once (a restart in place,
/// a test) can find it locked by a database that is already gone.
pub const LOCK_RELEASE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);
pub(crate) const LOCK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// Whether `error` is sled 0.34 refusing to open a database whose data file
/// another handle has locked. sled reports it only as text; should the text
/// change, opening fails at once as it did before this wait.
fn is_lock_held(error: &sled::Error) -> bool {
    matches!(error, sled::Error::Io(io)
        if io.kind() == std::io::ErrorKind::Other && io.to_string().starts_with("could not acquire lock"))
}

/// Calls `open` until it succeeds, fails for another reason than a held
/// lock, or `grace` has passed since the first failure (measured as the sum
/// of the pauses, so no clock is read).
pub(crate) fn open_when_released<T>(
    path: &Path,
    grace: std::time::Duration,
    pause: std::time::Duration,
    mut open: impl FnMut() -> Result<T, sled::Error>,
) -> Result<T, sled::Error> {
    let mut waited = std::time::Duration::ZERO;
    loop {
        match open() {
            Err(error) if is_lock_held(&error) && waited < grace => {
                tracing::debug!(path = %path.display(), ?waited, "sled's file lock is still held; waiting for its release");
                std::thread::sleep(pause);
                waited += pause;
            }
            result => return result,
        }
    }
}

impl Disk for SledDisk {
    fn open_tree(&self, name: &str) -> Result<Arc<dyn KvTree>, Error> {
        Ok(Arc::new(SledTree { tree: self.db.open_tree(name)?, group_commit: self.group_commit.clone() }))
    }

    /// One redb file in the database's directory.
    fn open_state_store(&self) -> Result<Arc<dyn StateStore>, Error> {
        Ok(Arc::new(RedbStateStore::open(&self.path, self.history_cache_bytes)?))
    }

    fn describe(&self) -> String {
        format!("sled database at {}", self.path.display())
    }
}

/// A tree of a [`SledDisk`].
struct SledTree {
    tree: sled::Tree,
    group_commit: GroupCommit,
}

impl KvTree for SledTree {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.tree.get(key)?.map(|value| value.to_vec()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> Result<(), Error> {
        self.tree.insert(key, value)?;
        Ok(())
    }

    fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Vec<KeyValue>, Error> {
        if is_empty_range(start, end) {
            return Ok(Vec::new());
        }
        let mut pairs = Vec::new();
        for item in self.tree.range::<&[u8], _>((start, end)).take(limit) {
            let (key, value) = item?;
            pairs.push((key.to_vec(), value.to_vec()));
        }
        Ok(pairs)
    }

    fn last(&self) -> Result<Option<KeyValue>, Error> {
        Ok(self.tree.last()?.map(|(key, value)| (key.to_vec(), value.to_vec())))
    }

    fn remove_range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Result<(), Error> {
        if is_empty_range(start, end) {
            return Ok(());
        }
        let mut batch = Batch::default();
        for item in self.tree.range::<&[u8], _>((start, end)) {
            let (key, _) = item?;
            batch.remove(&key);
        }
        self.apply_batch(batch)
    }

    fn apply_batch(&self, batch: Batch) -> Result<(), Error> {
        let mut ops = batch.into_ops();
        // No write, or one, is atomic on its own. sled's batch is not free:
        // it seals the current log buffer and then a second one holding its
        // manifest, and each sealed buffer is one more `pwrite` handed to
        // sled's IO thread pool, which wakes all seven of its threads for
        // it. A leader appends one entry at a time.
        if ops.len() <= 1 {
            return match ops.pop() {
                None => Ok(()),
                Some(BatchOp::Insert { key, value }) => self.tree.insert(key, value).map(drop),
                Some(BatchOp::Remove { key }) => self.tree.remove(key).map(drop),
            }
            .map_err(Error::from);
        }
        let mut sled_batch = sled::Batch::default();
        for op in ops {
            match op {
                BatchOp::Insert { key, value } => sled_batch.insert(key, value),
                BatchOp::Remove { key } => sled_batch.remove(key),
            }
        }
        self.tree.apply_batch(sled_batch)?;
        Ok(())
    }

    fn flush(&self) -> FlushFuture<'_> {
        // sled's pages are shared by every tree of the database: this flushes
        // all of them, as the trait promises. Never sled's `flush_async`: see
        // `group_commit` for the hang it has.
        Box::pin(self.group_commit.flush())
    }

    fn blocks(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_ranges_are_exactly_those_btreemap_refuses() {
        use Bound::{Excluded, Included, Unbounded};
        let (a, b): (&[u8], &[u8]) = (b"a", b"b");
        assert!(!is_empty_range(Included(a), Included(a)));
        assert!(is_empty_range(Included(a), Excluded(a)));
        assert!(is_empty_range(Excluded(a), Excluded(a)));
        assert!(is_empty_range(Included(b), Included(a)));
        assert!(!is_empty_range(Excluded(a), Excluded(b)));
        assert!(!is_empty_range(Unbounded, Excluded(a)));
        assert!(!is_empty_range(Excluded(b), Unbounded));
    }

    fn lock_error() -> sled::Error {
        sled::Error::Io(std::io::Error::other("could not acquire lock on \"x/db\": WouldBlock"))
    }

    #[test]
    fn a_held_lock_is_waited_for_and_any_other_error_is_not() {
        let pause = std::time::Duration::from_millis(1);
        let grace = std::time::Duration::from_millis(50);
        let mut calls = 0;
        let opened = open_when_released(Path::new("x"), grace, pause, || {
            calls += 1;
            if calls < 3 { Err(lock_error()) } else { Ok(calls) }
        });
        assert_eq!(opened.expect("opens once released"), 3);

        let mut calls = 0;
        let refused = open_when_released(Path::new("x"), grace, pause, || -> Result<(), _> {
            calls += 1;
            Err(sled::Error::Io(std::io::Error::from(std::io::ErrorKind::PermissionDenied)))
        });
        assert!(refused.is_err());
        assert_eq!(calls, 1, "an error other than the lock is returned at once");

        let mut calls = 0;
        let held = open_when_released(Path::new("x"), grace, pause, || -> Result<(), _> {
            calls += 1;
            Err(lock_error())
        });
        assert!(held.is_err_and(|e| is_lock_held(&e)), "a lock held past the grace fails with the lock error");
        assert_eq!(calls, 51, "one try per pause until the grace is spent, and one at its end");
    }

    #[test]
    fn sleds_own_lock_error_is_recognised_and_a_database_held_open_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = SledDisk::open(dir.path()).expect("opens");
        let pause = std::time::Duration::from_millis(10);
        let second = open_when_released(dir.path(), std::time::Duration::from_millis(30), pause, || {
            sled::Config::new().path(dir.path()).segment_size(SLED_SEGMENT_BYTES).open()
        });
        assert!(second.is_err_and(|e| is_lock_held(&e)), "sled's lock error is the one recognised");
        drop(held);
    }

    /// How many files sled keeps in the database's `blobs/` directory.
    fn blob_files(dir: &Path) -> usize {
        std::fs::read_dir(dir.join(SLED_BLOBS_DIR)).map(|d| d.count()).unwrap_or(0)
    }

    /// A log entry the size of a large one under load.
    const LARGE_ENTRY: usize = 400 << 10;

    /// Writes a [`LARGE_ENTRY`] under `key` and flushes it.
    async fn write_large(tree: &dyn KvTree, key: &[u8]) {
        let mut batch = Batch::default();
        batch.insert(key, vec![7u8; LARGE_ENTRY]);
        tree.apply_batch(batch).expect("writes");
        tree.flush().await.expect("flushes");
    }

    #[tokio::test]
    async fn a_new_database_keeps_a_log_entry_of_400_kib_in_its_log_not_in_a_blob_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = SledDisk::open(dir.path()).expect("opens");
        let tree = disk.open_tree("log").expect("tree");
        write_large(&*tree, b"entry").await;
        assert_eq!(blob_files(dir.path()), 0, "400 KiB is below the blob threshold of 2 MiB segments");
        assert_eq!(tree.get(b"entry").expect("reads").map(|v| v.len()), Some(LARGE_ENTRY));
    }

    #[tokio::test]
    async fn a_database_made_with_sleds_default_segments_opens_and_keeps_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let old = sled::Config::new().path(dir.path()).open().expect("sled's defaults");
            old.open_tree("log").expect("tree").insert(b"kept", b"yes".to_vec()).expect("inserts");
            old.flush().expect("flushes");
        }
        let disk = SledDisk::open(dir.path()).expect("an older database opens");
        let tree = disk.open_tree("log").expect("tree");
        assert_eq!(tree.get(b"kept").expect("reads"), Some(b"yes".to_vec()));
        // Its segments are still 512 KiB: a value of 400 KiB goes to a blob file.
        write_large(&*tree, b"large").await;
        assert_eq!(blob_files(dir.path()), 1, "the older database kept sled's default segments");
        drop(tree);
        drop(disk);
        let reopened = SledDisk::open(dir.path()).expect("reopens");
        let tree = reopened.open_tree("log").expect("tree");
        assert_eq!(tree.get(b"large").expect("reads").map(|v| v.len()), Some(LARGE_ENTRY));
    }

    #[test]
    fn a_database_released_while_waiting_is_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = SledDisk::open(dir.path()).expect("opens");
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(held);
        });
        SledDisk::open(dir.path()).expect("opens once the holder lets go");
        releaser.join().expect("releaser");
    }

    #[tokio::test]
    async fn batches_of_one_write_and_of_several_apply_in_order_and_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let disk = SledDisk::open(dir.path()).expect("opens");
            let tree = disk.open_tree("t").expect("tree");
            let mut one = Batch::default();
            one.insert(b"a", b"1".to_vec());
            tree.apply_batch(one).expect("one insert");
            let mut several = Batch::default();
            several.insert(b"b", b"2".to_vec());
            several.insert(b"c", b"3".to_vec());
            several.remove(b"b");
            tree.apply_batch(several).expect("several");
            let mut one_removal = Batch::default();
            one_removal.remove(b"a");
            tree.apply_batch(one_removal).expect("one removal");
            let mut overwrite = Batch::default();
            overwrite.insert(b"c", b"4".to_vec());
            tree.apply_batch(overwrite).expect("one overwrite");
            tree.flush().await.expect("flushes");
        }
        let disk = SledDisk::open(dir.path()).expect("reopens");
        let tree = disk.open_tree("t").expect("tree");
        let all = tree.range(Bound::Unbounded, Bound::Unbounded, usize::MAX).expect("reads");
        assert_eq!(all, vec![(b"c".to_vec(), b"4".to_vec())]);
    }
}
