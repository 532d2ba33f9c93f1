//! Snapshots: what their bytes hold, and where the current one is kept.
//!
//! A snapshot's payload is a bincode [`SnapshotPayload`]: the last applied
//! log id, the last membership and the [`ClusterState`], its history
//! encoded apart (only counted). It has one layout, pinned by a golden file
//! (`tests/golden/snapshot.bin`, checked below): until a first release a
//! change of layout updates the file. The current snapshot lives in the
//! disk's [`StateStore`]: the payload and the snapshot's metadata,
//! committed with the history's records, and sent to followers as the
//! store's export stream.
//!
//! This module must not decide when to snapshot (openraft does) nor touch
//! the live state (the state machine does).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::background::{self, Pace, Priority};
use crate::codec::{decode, encode, encode_into};
use crate::disk::Disk;
use crate::state_store::{PinnedExport, StateStore};
use hookraft_core::state::history_store::{Flush, HistoryStore};

use crate::{ClusterState, Error, LogId, SnapshotMeta, StoredMembership};

/// What a snapshot's bytes decode to.
#[derive(Debug, Deserialize)]
pub(crate) struct SnapshotPayload {
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    state: ClusterState,
}

/// The borrowed twin of [`SnapshotPayload`], so a snapshot is encoded
/// straight from the live state without a copy. Same fields, same order.
#[derive(Serialize)]
struct SnapshotPayloadRef<'a> {
    last_applied: &'a Option<LogId>,
    last_membership: &'a StoredMembership,
    state: &'a ClusterState,
}

/// Encodes a snapshot of `state` as of `last_applied`, whole in memory (a
/// node streams it to its file instead: [`write_snapshot`]).
#[cfg(test)]
pub(crate) fn encode_payload(
    last_applied: &Option<LogId>,
    last_membership: &StoredMembership,
    state: &ClusterState,
) -> Result<Vec<u8>, Error> {
    encode("snapshot", &SnapshotPayloadRef { last_applied, last_membership, state })
}

/// Decodes a snapshot's bytes and checks they say what `meta` says.
pub(crate) fn decode_payload(
    meta: &SnapshotMeta,
    data: &[u8],
) -> Result<(Option<LogId>, StoredMembership, ClusterState), Error> {
    // The derived indexes and usage counters are rebuilt as the state decodes.
    let SnapshotPayload { last_applied, last_membership, state } = decode("snapshot", data)?;
    if last_applied != meta.last_log_id || last_membership != meta.last_membership {
        return Err(Error::Corrupt(format!(
            "snapshot {} holds state as of {last_applied:?} with membership {last_membership:?}, \
             but its metadata says {:?} with {:?}",
            meta.snapshot_id, meta.last_log_id, meta.last_membership
        )));
    }
    Ok((last_applied, last_membership, state))
}

/// A stored snapshot: its metadata and its payload.
pub(crate) type StoredSnapshot = (SnapshotMeta, Vec<u8>);

/// The durable home of the current snapshot: the [`StateStore`]. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SnapshotStore {
    store: Arc<dyn StateStore>,
    /// The last log index of the stored snapshot (`None` inside: none, or one
    /// of the empty log). Held across a whole build or install, so a
    /// snapshot built concurrently with an install never overwrites a newer one.
    stored: Arc<tokio::sync::Mutex<Option<u64>>>,
}

impl SnapshotStore {
    /// Opens the store and finds the current snapshot, if there is one.
    pub(crate) fn open(disk: &dyn Disk) -> Result<(Self, Option<StoredSnapshot>), Error> {
        let mut store = Self { store: disk.open_state_store()?, stored: Arc::default() };
        let found = store.load()?;
        let index = found.as_ref().and_then(|(meta, _)| index_of(meta));
        store.stored = Arc::new(tokio::sync::Mutex::new(index));
        Ok((store, found))
    }

    /// The last log index of the stored snapshot, unless a save is under
    /// way (then `None`, which bounds less than any index).
    pub(crate) fn stored_index_now(&self) -> Option<u64> {
        self.stored.try_lock().ok().and_then(|stored| *stored)
    }

    /// The history as of the store's last commit.
    pub(crate) fn history(&self) -> Result<Arc<dyn HistoryStore>, Error> {
        self.store.history()
    }

    /// Runs `work` (long work on snapshots: encoding, decoding, exporting,
    /// freeing a state) on a blocking thread when the store is on a disk,
    /// in place when it is in memory, which keeps a simulation on its one
    /// thread (see [`StateStore::blocks`]).
    pub(crate) async fn off_runtime<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if self.store.blocks() {
            tokio::task::spawn_blocking(work)
                .await
                .unwrap_or_else(|e| Err(Error::Corrupt(format!("work on a blocking thread failed: {e}"))))
        } else {
            work()
        }
    }

    /// Like [`Self::off_runtime`], but on a thread of its own: at
    /// [`Priority::Low`] a lower priority, handed a [`Pace`] that rests
    /// ([`crate::background`]): a snapshot's encoding, which nothing waits
    /// for but the next snapshot; at [`Priority::Callers`] the caller's,
    /// with a pace that never rests: a snapshot that fell behind what
    /// finishes, which the memory waits for. In memory `work` runs in
    /// place, with a pace that never rests.
    pub(crate) async fn in_background<T: Send + 'static>(
        &self,
        priority: Priority,
        work: impl FnOnce(Pace) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if !self.store.blocks() {
            return work(Pace::off());
        }
        let pace = match priority {
            Priority::Low => Pace::on,
            Priority::Callers => Pace::off,
        };
        background::run_at("hookraft-snapshot", priority, move || work(pace())).await
    }

    /// The state store's last commit: the snapshot's metadata and payload.
    pub(crate) fn load(&self) -> Result<Option<StoredSnapshot>, Error> {
        let Some(stored) = self.store.load()? else { return Ok(None) };
        Ok(Some((decode("snapshot metadata", &stored.meta)?, stored.state)))
    }

    /// Commits a snapshot of `state` as of `meta` with the history's
    /// `flush`, durably; returns the encoded state's bytes. Synchronous,
    /// for a background thread: `state` is a clone whose history was
    /// sealed with `flush` (its encoding counts the records, the flush
    /// writes them).
    pub(crate) fn commit(
        &self,
        flush: &Flush,
        meta: &SnapshotMeta,
        state: &ClusterState,
        pace: &mut Pace,
    ) -> Result<u64, Error> {
        let meta_bytes = encode("snapshot metadata", meta)?;
        let last_applied = &meta.last_log_id;
        let last_membership = &meta.last_membership;
        let payload = SnapshotPayloadRef { last_applied, last_membership, state };
        let mut encode_state = |out: &mut dyn std::io::Write| {
            encode_into("snapshot", &payload, &mut PacedWriter::new(out, pace)).map(drop)
        };
        self.store.commit(flush, &meta_bytes, &mut encode_state)
    }

    /// The last commit, pinned for an export later, and its metadata.
    pub(crate) fn pin_export(&self) -> Result<Option<(SnapshotMeta, PinnedExport)>, Error> {
        let Some(pinned) = self.store.pin_export()? else { return Ok(None) };
        Ok(Some((decode("snapshot metadata", &pinned.meta)?, pinned)))
    }

    /// Whether the store is on a disk (see [`StateStore::blocks`]).
    pub(crate) fn blocks(&self) -> bool {
        self.store.blocks()
    }

    /// Replaces the store by a stream another node exported.
    pub(crate) fn import(&self, input: &mut dyn std::io::Read) -> Result<(), Error> {
        self.store.import(input)
    }

    /// A spool for a snapshot on its way (see [`StateStore::spool`]).
    pub(crate) fn spool(&self) -> Result<crate::Spool, Error> {
        self.store.spool()
    }
}

/// One build or install in progress: while it lives no other one runs,
/// so what it finds stored stays so.
pub(crate) struct SnapshotSave<'a> {
    stored: tokio::sync::MutexGuard<'a, Option<u64>>,
}

impl SnapshotStore {
    /// Starts a build or an install.
    pub(crate) async fn begin_save(&self) -> SnapshotSave<'_> {
        SnapshotSave { stored: self.stored.lock().await }
    }
}

impl SnapshotSave<'_> {
    /// Whether the stored snapshot is newer than one as of `last_applied`:
    /// then there is nothing to save.
    pub(crate) fn holds_newer_than(&self, last_applied: &Option<LogId>) -> bool {
        stored_is_newer(*self.stored, last_applied)
    }

    /// The last log index of the stored snapshot; no other save changes it
    /// while this one lives.
    pub(crate) fn stored_index(&self) -> Option<u64> {
        *self.stored
    }

    /// Records that the snapshot as of `meta` is now the durable one.
    pub(crate) fn stored(&mut self, meta: &SnapshotMeta) {
        *self.stored = index_of(meta);
    }
}

/// Whether a stored snapshot up to index `stored` is newer than one as of
/// `last_applied`.
pub(crate) fn stored_is_newer(stored: Option<u64>, last_applied: &Option<LogId>) -> bool {
    stored > last_applied.map(|id| id.index)
}

/// Bytes written between two calls of [`Pace::breathe`]: about 0.2 ms of
/// encoding, below [`crate::background::PACE_SLICE`].
const PACE_EVERY_BYTES: usize = 16 << 10;

/// A writer that lets its thread rest, by its [`Pace`], as it writes.
struct PacedWriter<'a> {
    inner: &'a mut dyn std::io::Write,
    pace: &'a mut Pace,
    since_breath: usize,
}

impl<'a> PacedWriter<'a> {
    fn new(inner: &'a mut dyn std::io::Write, pace: &'a mut Pace) -> Self {
        Self { inner, pace, since_breath: 0 }
    }
}

impl std::io::Write for PacedWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.since_breath += written;
        if self.since_breath >= PACE_EVERY_BYTES {
            self.since_breath = 0;
            self.pace.breathe();
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn index_of(meta: &SnapshotMeta) -> Option<u64> {
    meta.last_log_id.map(|id| id.index)
}

#[cfg(test)]
mod golden;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_decodes_what_the_borrowed_twin_encodes() {
        let mut state = ClusterState::default();
        state.apply(&hookraft_core::Command::AssignShards { now_ms: 1, grants: vec![(3, 9)] });
        let last_applied = Some(LogId::new(openraft::CommittedLeaderId::new(2, 1), 7));
        let membership = StoredMembership::default();
        let data = encode_payload(&last_applied, &membership, &state).expect("encodes");
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership.clone(),
            snapshot_id: "2-7-1".into(),
        };
        let (applied, members, decoded) = decode_payload(&meta, &data).expect("decodes");
        assert_eq!((applied, members, decoded), (last_applied, membership, state));
    }

    #[test]
    fn payload_that_contradicts_its_metadata_is_corrupt() {
        let state = ClusterState::default();
        let data = encode_payload(&None, &StoredMembership::default(), &state).expect("encodes");
        let meta = SnapshotMeta {
            last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 3)),
            last_membership: StoredMembership::default(),
            snapshot_id: "1-3-1".into(),
        };
        assert!(matches!(decode_payload(&meta, &data), Err(Error::Corrupt(_))));
    }

    fn meta_at(index: u64) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: format!("1-{index}-1"),
        }
    }

    /// A slow file: each write takes a millisecond.
    struct SlowFile(Vec<u8>);

    impl std::io::Write for SlowFile {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(std::time::Duration::from_millis(1));
            self.0.extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_paced_writer_passes_every_byte_and_rests_only_when_its_pace_does() {
        let bytes: Vec<u8> = (0..(PACE_EVERY_BYTES * 4)).map(|i| i as u8).collect();
        for (mut pace, rests) in [(Pace::on(), true), (Pace::off(), false)] {
            let mut file = SlowFile(Vec::new());
            let mut writer = PacedWriter::new(&mut file, &mut pace);
            for piece in bytes.chunks(PACE_EVERY_BYTES / 2) {
                std::io::Write::write_all(&mut writer, piece).expect("writes");
            }
            assert_eq!(file.0, bytes);
            assert_eq!(pace.rested() > std::time::Duration::ZERO, rests, "{pace:?}");
        }
    }

    #[tokio::test]
    async fn background_work_on_a_disk_runs_on_the_snapshot_thread_and_in_memory_in_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = crate::SledDisk::open(dir.path()).expect("opens");
        let (store, _) = SnapshotStore::open(&disk).expect("opens");
        let thread = |_| Ok(std::thread::current().name().map(str::to_owned));
        assert_eq!(
            store.in_background(Priority::Low, thread).await.expect("runs").as_deref(),
            Some("hookraft-snapshot")
        );
        let (in_memory, _) = SnapshotStore::open(&crate::MemDisk::new()).expect("opens");
        let caller = std::thread::current().name().map(str::to_owned);
        assert_eq!(in_memory.in_background(Priority::Low, thread).await.expect("runs"), caller);
    }

    fn commit_at(store: &SnapshotStore, index: u64, state: &ClusterState) -> Vec<u8> {
        store.commit(&Flush::default(), &meta_at(index), state, &mut Pace::off()).expect("commits");
        let (meta, payload) = store.load().expect("loads").expect("a snapshot is stored");
        assert_eq!(meta, meta_at(index));
        payload
    }

    #[tokio::test]
    async fn the_store_keeps_the_committed_snapshot_across_a_crash() {
        let disk = crate::MemDisk::new();
        let (store, current) = SnapshotStore::open(&disk).expect("opens");
        assert!(current.is_none());
        let mut state = ClusterState::default();
        state.apply(&hookraft_core::Command::AssignShards { now_ms: 1, grants: vec![(3, 9)] });
        let payload = commit_at(&store, 5, &state);
        let mut save = store.begin_save().await;
        save.stored(&meta_at(5));
        assert!(save.holds_newer_than(&Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 3))));
        drop(save);
        disk.crash();
        let (store, current) = SnapshotStore::open(&disk).expect("reopens");
        assert_eq!(current, Some((meta_at(5), payload.clone())));
        let (_, _, decoded) = decode_payload(&meta_at(5), &payload).expect("decodes");
        assert_eq!(decoded, state);
        assert_eq!(store.begin_save().await.stored_index(), Some(5), "a reopened store knows its index");
    }
}
