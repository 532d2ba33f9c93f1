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
//! The rule that makes sharing sound: a flush covers every write made before
//! it *started*. Each caller takes a ticket after its writes; a flush
//! records the newest ticket issued before it started, and a caller is done
//! once a finished flush recorded a ticket at least its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// The newest ticket handed out; a ticket is taken after the caller's writes.
    tickets_issued: AtomicU64,
    /// Held while a flush runs; holds the newest ticket a finished flush covered.
    covered: tokio::sync::Mutex<u64>,
}

impl GroupCommit {
    pub(crate) fn new(db: sled::Db, data_file: std::fs::File) -> Self {
        Self {
            inner: Arc::new(Inner {
                db,
                data_file,
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
            inner.db.flush()?;
            inner.data_file.sync_data().map_err(|e| Error::Sync(e.to_string()))
        })
        .await
        .map_err(|e| Error::Corrupt(format!("the flush thread failed: {e}")))??;
        *covered = starting_at;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_hundred_concurrent_flushes_all_finish_and_none_hangs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = sled::Config::new().path(dir.path()).flush_every_ms(None).open().expect("opens");
        let data_file = std::fs::File::open(dir.path().join("db")).expect("sled's data file");
        let group = GroupCommit::new(db.clone(), data_file);
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
        let mut attempts = 0;
        let reopened = loop {
            match sled::Config::new().path(dir.path()).open() {
                Ok(db) => break db,
                Err(error) if attempts < 100 => {
                    attempts += 1;
                    eprintln!("reopen attempt {attempts}: {error}");
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(error) => panic!("the database did not reopen within 5 s: {error}"),
            }
        };
        assert_eq!(reopened.len(), 200);
    }
}
