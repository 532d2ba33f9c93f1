//! Group commit for [`crate::disk::SledDisk`]: one fsync at a time, shared by
//! every caller that was waiting for it.
//!
//! Two reasons, one mechanism:
//! - **Safety.** sled 0.34's `flush_async` loses wake-ups when several are
//!   polled at once (sled issues #1241, #1308; fixed on sled's main branch,
//!   never released): the log store, the vote and the snapshot store flush
//!   concurrently, and a lost wake-up hangs Raft on that node for good. Here
//!   sled's synchronous `flush` runs on a blocking thread, never two at once.
//! - **Speed.** A caller whose writes were already covered by a flush that
//!   started after they were made returns without an fsync of its own, so N
//!   concurrent callers cost about two fsyncs, not N.
//!
//! - **Durability.** sled 0.34's flush writes its buffers with `pwrite` and
//!   `sync_file_range` on Linux, which pushes the pages to the device but
//!   neither flushes the device's write cache nor persists the file's
//!   grown size: a process crash loses nothing, a power loss could. After
//!   each sled flush, the database file is `fdatasync`ed here as well.
//!
//! - **Blobs.** sled 0.34 writes a value larger than a quarter of a
//!   segment (about 128 KiB: a log entry of a few hundred events under
//!   load) to a file of its own under `blobs/`, and never syncs that file.
//!   Before each sled flush, the blob files not yet synced are synced here,
//!   and the directory with them, so the entry a flushed pointer names is
//!   on the device too. The directory is listed only when its modification
//!   time says a file may have been added since the last listing (see
//!   [`BlobFiles::sync_new`]): a node draining a backlog flushes about a
//!   thousand times a second, and listing a hundred files each time cost
//!   4% of its CPU.
//!
//! The rule that makes sharing sound: a flush covers every write made before
//! it *started*. Each caller takes a ticket after its writes; a flush
//! records the newest ticket issued before it started, and a caller is done
//! once a finished flush recorded a ticket at least its own.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::Error;

/// Serializes and shares the flushes of one sled database.
#[derive(Clone)]
pub(crate) struct GroupCommit {
    inner: Arc<Inner>,
}

struct Inner {
    db: sled::Db,
    /// sled's data file, synced after each of its flushes.
    data_file: std::fs::File,
    /// sled's blob files, synced before each of its flushes.
    blobs: std::sync::Mutex<BlobFiles>,
    /// The newest ticket handed out; a ticket is taken after the caller's writes.
    tickets_issued: AtomicU64,
    /// Held while a flush runs; holds the newest ticket a finished flush covered.
    covered: tokio::sync::Mutex<u64>,
}

impl GroupCommit {
    /// `blobs_dir` is sled's `blobs/` directory.
    pub(crate) fn new(db: sled::Db, data_file: std::fs::File, blobs_dir: PathBuf) -> Self {
        Self {
            inner: Arc::new(Inner {
                db,
                data_file,
                blobs: std::sync::Mutex::new(BlobFiles::new(blobs_dir)),
                tickets_issued: AtomicU64::new(0),
                covered: tokio::sync::Mutex::new(0),
            }),
        }
    }

    /// Resolves once every write made before the call is durable.
    pub(crate) async fn flush(&self) -> Result<(), Error> {
        let ticket = self.inner.tickets_issued.fetch_add(1, Ordering::SeqCst) + 1;
        let mut covered = self.inner.covered.lock().await;
        if *covered >= ticket {
            // A flush that started after our writes finished while we waited.
            return Ok(());
        }
        // Every ticket up to here was taken after its writes, so the flush
        // that starts now covers them all.
        let starting_at = self.inner.tickets_issued.load(Ordering::SeqCst);
        debug_assert!(starting_at >= ticket);
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || -> Result<(), Error> {
            // Only this thread syncs (the flush lock is held), so the lock
            // is never contended.
            inner
                .blobs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .sync_new()
                .map_err(|e| Error::Sync(format!("syncing sled's blob files: {e}")))?;
            inner.db.flush()?;
            inner.data_file.sync_data().map_err(|e| Error::Sync(e.to_string()))
        })
        .await
        .map_err(|e| Error::Corrupt(format!("the flush thread failed: {e}")))??;
        *covered = starting_at;
        Ok(())
    }
}

/// How much older than a listing the directory's modification time must
/// be for an unchanged time to prove that no file was added since. File
/// systems stamp a directory from a coarse clock (one tick of the kernel,
/// 1 to 10 ms, behind the precise one), so a file added in the same tick as
/// the stamp, after the listing, can leave the time unchanged; a listing
/// that began this long after the stamp did so in a later tick.
const DIR_TIME_SETTLED: Duration = Duration::from_millis(100);

/// sled's `blobs/` directory and which of its files are synced.
struct BlobFiles {
    dir: PathBuf,
    /// Names synced and still present at the last pass. A set, not the
    /// highest name: two writers may create their blobs out of order.
    synced: HashSet<std::ffi::OsString>,
    /// The directory's modification time, read just before the last
    /// listing, when that listing began at least [`DIR_TIME_SETTLED`] after
    /// it: while the directory still shows this time, nothing was added.
    settled: Option<SystemTime>,
}

impl BlobFiles {
    fn new(dir: PathBuf) -> Self {
        Self { dir, synced: HashSet::new(), settled: None }
    }

    /// Syncs every blob file not synced before, then the directory when
    /// there were any; returns how many. Files sled removed meanwhile are
    /// forgotten. Skips the listing when the directory's modification time
    /// is the settled one of the last listing.
    fn sync_new(&mut self) -> std::io::Result<usize> {
        let modified = match std::fs::metadata(&self.dir).and_then(|m| m.modified()) {
            Ok(modified) => modified,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        if self.settled == Some(modified) {
            return Ok(0);
        }
        // The file system stamps the directory from the wall clock, so that
        // is the clock to compare with; this runs on real disks only, never
        // in the simulator.
        #[allow(clippy::disallowed_methods)]
        let listing_at = SystemTime::now();
        let synced_now = self.list_and_sync()?;
        self.settled = listing_at.duration_since(modified).is_ok_and(|age| age >= DIR_TIME_SETTLED).then_some(modified);
        Ok(synced_now)
    }

    fn list_and_sync(&mut self) -> std::io::Result<usize> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut present = HashSet::with_capacity(self.synced.len());
        let mut synced_now = 0;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if !self.synced.contains(&name) {
                match std::fs::File::open(entry.path()) {
                    Ok(file) => file.sync_data()?,
                    // Collected by sled since the listing.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                synced_now += 1;
            }
            present.insert(name);
        }
        if synced_now > 0 {
            std::fs::File::open(&self.dir)?.sync_all()?;
        }
        self.synced = present;
        Ok(synced_now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sled database in a temporary directory, flushed only by its group.
    fn open() -> (tempfile::TempDir, sled::Db, GroupCommit) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = sled::Config::new().path(dir.path()).flush_every_ms(None).open().expect("opens");
        let data_file = std::fs::File::open(dir.path().join("db")).expect("sled's data file");
        let group = GroupCommit::new(db.clone(), data_file, dir.path().join("blobs"));
        (dir, db, group)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_value_sled_keeps_in_a_blob_file_has_its_file_synced_by_the_flush() {
        let (dir, db, group) = open();
        db.insert(b"small", vec![1; 64]).expect("insert");
        group.flush().await.expect("flush");
        assert!(group.inner.blobs.lock().expect("lock").synced.is_empty(), "a small value is not a blob");

        db.insert(b"large", vec![2; 1 << 20]).expect("insert");
        let blobs: Vec<_> = std::fs::read_dir(dir.path().join("blobs")).expect("blobs/").collect();
        assert_eq!(blobs.len(), 1, "sled keeps a 1 MiB value in a file of its own");
        group.flush().await.expect("flush");
        assert_eq!(group.inner.blobs.lock().expect("lock").synced.len(), 1);
        // Synced once: the next pass finds nothing new.
        assert_eq!(group.inner.blobs.lock().expect("lock").sync_new().expect("sync"), 0);
        drop((group, db));
    }

    /// Sets the directory's modification time, as adding a file would.
    fn stamp_dir(dir: &std::path::Path, at: SystemTime) {
        std::fs::File::open(dir).expect("open the directory").set_modified(at).expect("set its time");
    }

    #[test]
    fn an_unchanged_settled_directory_is_not_listed_again_and_a_change_is_seen() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut blobs = BlobFiles::new(dir.path().to_path_buf());
        std::fs::write(dir.path().join("1"), b"one").expect("write");
        let long_ago = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        stamp_dir(dir.path(), long_ago);
        assert_eq!(blobs.sync_new().expect("sync"), 1);
        assert_eq!(blobs.settled, Some(long_ago), "listed well after the last change");

        // A file whose arrival leaves the time as it was is not looked for:
        // the pass did not list the directory.
        std::fs::write(dir.path().join("2"), b"two").expect("write");
        stamp_dir(dir.path(), long_ago);
        assert_eq!(blobs.sync_new().expect("sync"), 0);

        // Any change of the time makes the next pass list again.
        stamp_dir(dir.path(), long_ago + Duration::from_secs(1));
        assert_eq!(blobs.sync_new().expect("sync"), 1);
        assert_eq!(blobs.synced.len(), 2);
    }

    #[test]
    fn a_directory_changed_just_before_its_listing_is_listed_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut blobs = BlobFiles::new(dir.path().to_path_buf());
        std::fs::write(dir.path().join("1"), b"one").expect("write");
        // Changed now: a file added later in the same clock tick would not
        // change the time, so the time proves nothing yet.
        assert_eq!(blobs.sync_new().expect("sync"), 1);
        assert_eq!(blobs.settled, None);
        let modified = std::fs::metadata(dir.path()).and_then(|m| m.modified()).expect("time");
        std::fs::write(dir.path().join("2"), b"two").expect("write");
        stamp_dir(dir.path(), modified);
        assert_eq!(blobs.sync_new().expect("sync"), 1, "listed again although the time did not change");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_hundred_concurrent_flushes_all_finish_and_none_hangs() {
        let (dir, db, group) = open();
        let mut tasks = Vec::new();
        for i in 0u32..200 {
            let (group, db) = (group.clone(), db.clone());
            tasks.push(tokio::spawn(async move {
                db.insert(i.to_be_bytes(), vec![1; 64]).expect("insert");
                group.flush().await.expect("flush");
            }));
        }
        let all = async {
            for task in tasks {
                task.await.expect("task");
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(60), all).await.expect("no flush may hang");
        // Covered tickets never run ahead of the tickets handed out.
        let covered = *group.inner.covered.lock().await;
        assert!(covered >= 1 && covered <= group.inner.tickets_issued.load(Ordering::SeqCst));
        drop((group, db));
        // sled's IO threads drop their handles on the database just after
        // they report a write done, so the file lock may outlive `db` by a
        // moment.
        let reopened = crate::disk::open_when_released(
            dir.path(),
            std::time::Duration::from_secs(5),
            std::time::Duration::from_millis(50),
            || sled::Config::new().path(dir.path()).open(),
        )
        .expect("the database reopens within 5 s");
        assert_eq!(reopened.len(), 200);
    }
}
