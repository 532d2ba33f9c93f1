//! [`MemDisk`]: an in-memory [`Disk`] that loses unflushed writes on a
//! crash, for deterministic simulation (ARCHITECTURE §8.1, STACK trap 5).
//!
//! Every write lands in the live view at once (reads see it) and is also
//! remembered as unflushed; [`KvTree::flush`] moves the unflushed writes into
//! the durable view. [`MemDisk::crash`] throws the unflushed writes away, as
//! a power loss or `kill -9` would: a node reopening the disk afterwards sees
//! exactly what was flushed. Handles opened before a crash are dead: every
//! call on them fails with [`Error::DiskCrashed`], so a not-quite-stopped
//! node cannot write into its successor's disk.
//!
//! Each commit of the state store ([`Disk::open_state_store`]) is durable
//! when it completes, as the production store syncs it itself; a crash
//! never undoes one.
//!
//! A disk can be made slow ([`MemDisk::set_flush_delay`]): each flush then
//! waits that long on tokio's clock (virtual in the simulator) before its
//! writes become durable, as an fsync on a busy or failing device would.
//!
//! Ordered maps only, no threads, no randomness: the same calls give the
//! same disk. This module must not create anything of sled's.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::Error;
use crate::disk::{Batch, BatchOp, Disk, FlushFuture, KeyValue, KvTree, is_empty_range};
use crate::state_store::{MemCommit, MemStateStore, StateStore};

/// One tree's contents.
type TreeMap = BTreeMap<Vec<u8>, Vec<u8>>;

/// An in-memory disk with crash semantics. Cheap to clone: clones are
/// handles on the same disk, so the simulator keeps one to crash it while
/// the node's stores hold others.
#[derive(Clone, Default)]
pub struct MemDisk {
    inner: Arc<Mutex<MemState>>,
    /// How long each flush takes, in ms (0: at once).
    flush_delay_ms: Arc<AtomicU64>,
    /// Whether every read of the history store fails (a disk gone bad).
    history_fails: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for MemDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("MemDisk")
            .field("trees", &state.live.len())
            .field("unflushed_writes", &state.unflushed_writes())
            .field("crashes", &state.crashes)
            .finish()
    }
}

#[derive(Default)]
struct MemState {
    /// What reads see: the durable view plus every unflushed write.
    live: BTreeMap<String, TreeMap>,
    /// What survives a crash.
    durable: BTreeMap<String, TreeMap>,
    /// Keys written since the last flush, per tree, with their latest value
    /// (`None`: removed). Bounded by the number of keys written, since a
    /// rewrite replaces the earlier entry.
    unflushed: BTreeMap<String, BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
    /// Crashes so far; a tree handle opened in an earlier epoch is dead.
    crashes: u64,
    /// The state store's last commit; each commit is durable at once.
    state_store: Arc<Mutex<MemCommit>>,
}

impl MemState {
    fn unflushed_writes(&self) -> usize {
        self.unflushed.values().map(BTreeMap::len).sum()
    }

    /// Applies one write to the live view and remembers it as unflushed.
    fn write(&mut self, tree: &str, key: Vec<u8>, value: Option<Vec<u8>>) {
        let live = self.live.entry(tree.to_owned()).or_default();
        match &value {
            Some(value) => live.insert(key.clone(), value.clone()),
            None => live.remove(&key),
        };
        self.unflushed.entry(tree.to_owned()).or_default().insert(key, value);
    }

    fn flush(&mut self) {
        for (tree, writes) in std::mem::take(&mut self.unflushed) {
            let durable = self.durable.entry(tree).or_default();
            for (key, value) in writes {
                match value {
                    Some(value) => durable.insert(key, value),
                    None => durable.remove(&key),
                };
            }
        }
    }
}

impl MemDisk {
    /// A new, empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a power loss: drops every write not yet flushed and kills
    /// every tree handle opened so far (their calls fail with
    /// [`Error::DiskCrashed`]). Reopen the stores on this disk to restart.
    pub fn crash(&self) {
        let mut state = self.lock();
        let lost = state.unflushed_writes();
        state.unflushed.clear();
        state.live = state.durable.clone();
        state.crashes += 1;
        tracing::debug!(lost_writes = lost, crashes = state.crashes, "in-memory disk crashed");
    }

    /// Makes every later flush take `delay` before its writes are durable
    /// (a slow disk); `Duration::ZERO` makes it answer at once again.
    pub fn set_flush_delay(&self, delay: Duration) {
        self.flush_delay_ms.store(delay.as_millis() as u64, Ordering::Relaxed);
    }

    /// Makes every later read of the history store fail (`true`), as a
    /// disk gone bad would, or answer again (`false`).
    pub fn fail_history_reads(&self, fail: bool) {
        self.history_fails.store(fail, Ordering::Relaxed);
    }

    /// Writes made since the last flush: what a crash now would lose.
    pub fn unflushed_writes(&self) -> usize {
        self.lock().unflushed_writes()
    }

    /// How many times [`MemDisk::crash`] was called.
    pub fn crashes(&self) -> u64 {
        self.lock().crashes
    }

    /// The lock is held only for map operations that do not panic (ranges
    /// are checked first), so a poisoned lock still guards a whole state.
    fn lock(&self) -> MutexGuard<'_, MemState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MemDisk {
    fn handle(&self, kind: &'static str, name: &str) -> Handle {
        Handle { disk: self.clone(), kind, name: name.to_owned(), epoch: self.crashes() }
    }
}

/// A tree's or a file's handle on a [`MemDisk`], alive until the disk's
/// next crash.
#[derive(Clone)]
struct Handle {
    disk: MemDisk,
    /// `tree` or `file`: names the handle in errors.
    kind: &'static str,
    name: String,
    /// The disk's crash count when this handle was opened.
    epoch: u64,
}

impl Handle {
    /// The disk's state, if this handle has not outlived a crash.
    fn state(&self) -> Result<MutexGuard<'_, MemState>, Error> {
        let state = self.disk.lock();
        if state.crashes != self.epoch {
            return Err(Error::DiskCrashed { handle: format!("{} {}", self.kind, self.name) });
        }
        Ok(state)
    }

    /// Waits out the disk's flush delay, if it is slow. A crash meanwhile
    /// kills this handle, so what the caller writes next fails instead.
    async fn wait_flush_delay(&self) {
        let delay_ms = self.disk.flush_delay_ms.load(Ordering::Relaxed);
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
    }
}

impl Disk for MemDisk {
    fn open_tree(&self, name: &str) -> Result<Arc<dyn KvTree>, Error> {
        Ok(Arc::new(MemTree(self.handle("tree", name))))
    }

    fn open_state_store(&self) -> Result<Arc<dyn StateStore>, Error> {
        let handle = self.handle("store", "state");
        let commit = self.lock().state_store.clone();
        let fails = self.history_fails.clone();
        Ok(Arc::new(MemStateStore::new(commit, move || handle.state().map(drop), fails)))
    }

    fn describe(&self) -> String {
        "in-memory disk".to_owned()
    }
}

/// A tree of a [`MemDisk`].
struct MemTree(Handle);

impl KvTree for MemTree {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let state = self.0.state()?;
        Ok(state.live.get(&self.0.name).and_then(|tree| tree.get(key)).cloned())
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> Result<(), Error> {
        self.0.state()?.write(&self.0.name, key.to_vec(), Some(value));
        Ok(())
    }

    fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Result<Vec<KeyValue>, Error> {
        let state = self.0.state()?;
        let Some(tree) = state.live.get(&self.0.name) else {
            return Ok(Vec::new());
        };
        if is_empty_range(start, end) {
            return Ok(Vec::new());
        }
        Ok(tree.range::<[u8], _>((start, end)).take(limit).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    fn last(&self) -> Result<Option<KeyValue>, Error> {
        let state = self.0.state()?;
        Ok(state.live.get(&self.0.name).and_then(|tree| tree.last_key_value()).map(|(k, v)| (k.clone(), v.clone())))
    }

    fn remove_range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Result<(), Error> {
        let mut state = self.0.state()?;
        if is_empty_range(start, end) {
            return Ok(());
        }
        let keys: Vec<Vec<u8>> = match state.live.get(&self.0.name) {
            Some(tree) => tree.range::<[u8], _>((start, end)).map(|(k, _)| k.clone()).collect(),
            None => return Ok(()),
        };
        for key in keys {
            state.write(&self.0.name, key, None);
        }
        Ok(())
    }

    fn apply_batch(&self, batch: Batch) -> Result<(), Error> {
        // Atomic for free: a crash drops all unflushed writes or none.
        let mut state = self.0.state()?;
        for op in batch.into_ops() {
            match op {
                BatchOp::Insert { key, value } => state.write(&self.0.name, key, Some(value)),
                BatchOp::Remove { key } => state.write(&self.0.name, key, None),
            }
        }
        Ok(())
    }

    fn flush(&self) -> FlushFuture<'_> {
        Box::pin(async move {
            // A crash during the delay leaves the writes unflushed.
            self.0.wait_flush_delay().await;
            self.0.state()?.flush();
            Ok(())
        })
    }

    fn blocks(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flush(tree: &dyn KvTree) {
        // The memory flush completes on its first poll; no runtime needed.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match tree.flush().as_mut().poll(&mut cx) {
            std::task::Poll::Ready(result) => result.expect("flush"),
            std::task::Poll::Pending => panic!("a memory flush never waits"),
        }
    }

    fn keys(tree: &dyn KvTree) -> Vec<Vec<u8>> {
        tree.range(Bound::Unbounded, Bound::Unbounded, usize::MAX).expect("range").into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn crash_keeps_flushed_writes_and_drops_the_rest() {
        let disk = MemDisk::new();
        let tree = disk.open_tree("t").expect("open");
        let other = disk.open_tree("u").expect("open");
        tree.insert(b"a", b"1".to_vec()).expect("insert");
        tree.insert(b"b", b"2".to_vec()).expect("insert");
        flush(other.as_ref()); // a flush through one tree covers the whole disk
        tree.insert(b"a", b"changed".to_vec()).expect("insert");
        tree.remove_range(Bound::Included(b"b"), Bound::Unbounded).expect("remove");
        tree.insert(b"c", b"3".to_vec()).expect("insert");
        assert_eq!(keys(tree.as_ref()), vec![b"a".to_vec(), b"c".to_vec()], "reads see unflushed writes");
        assert_eq!(disk.unflushed_writes(), 3);

        disk.crash();
        assert!(matches!(tree.get(b"a"), Err(Error::DiskCrashed { .. })), "old handles are dead");
        let tree = disk.open_tree("t").expect("reopen");
        assert_eq!(tree.get(b"a").expect("get"), Some(b"1".to_vec()));
        assert_eq!(keys(tree.as_ref()), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!((disk.unflushed_writes(), disk.crashes()), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_flush_is_durable_only_when_it_completes() {
        let disk = MemDisk::new();
        disk.set_flush_delay(Duration::from_millis(300));
        let tree = disk.open_tree("t").expect("open");
        tree.insert(b"a", vec![1]).expect("insert");
        let started = tokio::time::Instant::now();
        tree.flush().await.expect("flush");
        assert_eq!(started.elapsed(), Duration::from_millis(300));
        assert_eq!(disk.unflushed_writes(), 0);

        // A crash during a slow flush loses its writes and fails the flush.
        tree.insert(b"b", vec![2]).expect("insert");
        let flushing = tokio::spawn({
            let disk = disk.clone();
            async move { disk.open_tree("t").expect("open").flush().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        disk.crash();
        assert!(matches!(flushing.await.expect("join"), Err(Error::DiskCrashed { .. })));
        let tree = disk.open_tree("t").expect("reopen");
        assert_eq!(tree.get(b"b").expect("get"), None);
        assert_eq!(tree.get(b"a").expect("get"), Some(vec![1]));
    }

    #[test]
    fn after_a_flush_the_live_view_is_the_durable_view() {
        let disk = MemDisk::new();
        let tree = disk.open_tree("t").expect("open");
        tree.insert(b"a", vec![1]).expect("insert");
        tree.remove_range(Bound::Unbounded, Bound::Unbounded).expect("remove");
        tree.insert(b"b", vec![2]).expect("insert");
        flush(tree.as_ref());
        let state = disk.lock();
        assert!(state.live == state.durable && state.unflushed.is_empty());
    }

    #[test]
    fn range_last_and_batch_behave_like_an_ordered_map() {
        let disk = MemDisk::new();
        let tree = disk.open_tree("t").expect("open");
        assert_eq!(tree.last().expect("last"), None);
        let mut batch = Batch::default();
        for k in [3u8, 1, 2, 5] {
            batch.insert(&[k], vec![k]);
        }
        batch.remove(&[5]);
        tree.apply_batch(batch).expect("batch");
        assert_eq!(tree.last().expect("last"), Some((vec![3], vec![3])));
        let middle = tree.range(Bound::Excluded(&[1][..]), Bound::Unbounded, 1).expect("range");
        assert_eq!(middle, vec![(vec![2], vec![2])]);
        assert!(tree.range(Bound::Excluded(&[2][..]), Bound::Excluded(&[2][..]), 9).expect("range").is_empty());
        assert!(
            disk.open_tree("other")
                .expect("open")
                .range(Bound::Unbounded, Bound::Unbounded, 9)
                .expect("range")
                .is_empty()
        );
    }
}
