//! Snapshots: what their bytes hold, and where the current one is kept.
//!
//! A snapshot's payload is a bincode [`SnapshotPayload`]: the last applied
//! log id, the last membership and the [`ClusterState`], its history
//! encoded apart (only counted). The payload is a versioned enum (a shipped
//! variant is frozen). The current snapshot lives in the disk's
//! [`StateStore`]: the payload and the snapshot's metadata, committed with
//! the history's records, and sent to followers as the store's export
//! stream. Earlier versions kept it whole in one file, `hookraft-snapshot`
//! (the payload, then its metadata, the metadata's length and a magic
//! trailer), and before that in a sled tree: a node finds such a snapshot
//! as it opens, commits it to the store, and empties the file.
//!
//! This module must not decide when to snapshot (openraft does) nor touch
//! the live state (the state machine does).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::background::{self, Pace, Priority};
use crate::codec::{decode, encode, encode_into};
use crate::disk::{Batch, Disk, FileSlot, KvTree};
use crate::state_store::{PinnedExport, StateStore};
use hookraft_core::state::history_store::{Flush, HistoryStore};
use hookraft_core::state::{ClusterStateV1, ClusterStateV2, ClusterStateV3, ClusterStateV4};

use crate::{ClusterState, Error, LogId, SnapshotMeta, StoredMembership};

pub(crate) const SNAPSHOT_FILE: &str = "hookraft-snapshot";
/// Ends every snapshot file: names the layout, so a truncated or foreign
/// file is refused instead of misread.
const FILE_MAGIC: &[u8; 8] = b"hksnap01";
/// Where earlier versions kept the snapshot, and the keys they used.
const LEGACY_TREE: &str = "raft_snapshot";
const LEGACY_KEY_META: &[u8] = b"current_meta";
const LEGACY_KEY_DATA: &[u8] = b"current_data";

/// What a snapshot's bytes decode to.
#[derive(Debug, Deserialize)]
pub(crate) enum SnapshotPayload {
    /// Before ordered delivery: the state holds no ordered keys.
    V1 { last_applied: Option<LogId>, last_membership: StoredMembership, state: ClusterStateV1 },
    /// The state ends with its ordered keys' queues.
    V2 { last_applied: Option<LogId>, last_membership: StoredMembership, state: ClusterStateV2 },
    /// Then with its inbound sources and the stale guard's versions.
    V3 { last_applied: Option<LogId>, last_membership: StoredMembership, state: ClusterStateV3 },
    /// Then with the history of finished events, whole.
    V4 { last_applied: Option<LogId>, last_membership: StoredMembership, state: ClusterStateV4 },
    /// Then with the numbered deliveries per ordered key, and the history
    /// whole or, kept in the state store, only counted.
    V5 { last_applied: Option<LogId>, last_membership: StoredMembership, state: ClusterState },
}

/// The borrowed twin of [`SnapshotPayload`], so a snapshot is encoded
/// straight from the live state without a copy. Same variants, same order.
#[derive(Serialize)]
enum SnapshotPayloadRef<'a> {
    /// Never written now; here so `V5` keeps its position.
    #[allow(dead_code)]
    V1,
    #[allow(dead_code)]
    V2,
    #[allow(dead_code)]
    V3,
    #[allow(dead_code)]
    V4,
    V5 {
        last_applied: &'a Option<LogId>,
        last_membership: &'a StoredMembership,
        state: &'a ClusterState,
    },
}

/// Encodes a snapshot of `state` as of `last_applied`, whole in memory (a
/// node streams it to its file instead: [`write_snapshot`]).
#[cfg(test)]
pub(crate) fn encode_payload(
    last_applied: &Option<LogId>,
    last_membership: &StoredMembership,
    state: &ClusterState,
) -> Result<Vec<u8>, Error> {
    encode("snapshot", &SnapshotPayloadRef::V5 { last_applied, last_membership, state })
}

/// Decodes a snapshot's bytes and checks they say what `meta` says.
pub(crate) fn decode_payload(
    meta: &SnapshotMeta,
    data: &[u8],
) -> Result<(Option<LogId>, StoredMembership, ClusterState), Error> {
    // The derived indexes and usage counters are rebuilt as the state decodes.
    let (last_applied, last_membership, state) = match decode("snapshot", data)? {
        SnapshotPayload::V1 { last_applied, last_membership, state } => (last_applied, last_membership, state.0),
        SnapshotPayload::V2 { last_applied, last_membership, state } => (last_applied, last_membership, state.0),
        SnapshotPayload::V3 { last_applied, last_membership, state } => (last_applied, last_membership, state.0),
        SnapshotPayload::V4 { last_applied, last_membership, state } => (last_applied, last_membership, state.0),
        SnapshotPayload::V5 { last_applied, last_membership, state } => (last_applied, last_membership, state),
    };
    if last_applied != meta.last_log_id || last_membership != meta.last_membership {
        return Err(Error::Corrupt(format!(
            "snapshot {} holds state as of {last_applied:?} with membership {last_membership:?}, \
             but its metadata says {:?} with {:?}",
            meta.snapshot_id, meta.last_log_id, meta.last_membership
        )));
    }
    Ok((last_applied, last_membership, state))
}

/// What follows the payload in the file: the metadata, its length, the magic.
#[cfg(test)]
pub(crate) fn trailer(meta: &SnapshotMeta) -> Result<Vec<u8>, Error> {
    let meta_bytes = encode("snapshot metadata", meta)?;
    let mut trailer = Vec::with_capacity(meta_bytes.len() + 4 + FILE_MAGIC.len());
    trailer.extend_from_slice(&meta_bytes);
    trailer.extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
    trailer.extend_from_slice(FILE_MAGIC);
    Ok(trailer)
}

/// Splits a snapshot file into its metadata and (in place) its payload.
fn split_file(mut contents: Vec<u8>) -> Result<StoredSnapshot, Error> {
    let corrupt = |why: &str| Error::Corrupt(format!("the snapshot file {SNAPSHOT_FILE} {why}"));
    let Some(body_len) = contents.len().checked_sub(FILE_MAGIC.len() + 4) else {
        return Err(corrupt("is too short"));
    };
    if &contents[body_len + 4..] != FILE_MAGIC {
        return Err(corrupt("does not end with the snapshot trailer"));
    }
    let meta_len = u32::from_le_bytes(contents[body_len..body_len + 4].try_into().expect("four bytes")) as usize;
    let Some(payload_len) = body_len.checked_sub(meta_len) else {
        return Err(corrupt("claims more metadata than it holds"));
    };
    let meta: SnapshotMeta = decode("snapshot metadata", &contents[payload_len..body_len])?;
    contents.truncate(payload_len);
    Ok((meta, contents))
}

/// A stored snapshot: its metadata and its payload.
pub(crate) type StoredSnapshot = (SnapshotMeta, Vec<u8>);

/// The snapshot a node finds as it opens.
#[derive(Debug, PartialEq)]
pub(crate) enum Found {
    /// The state store's last commit (its history is in the store).
    InStore(StoredSnapshot),
    /// A snapshot an earlier version wrote to its file or tree, its
    /// history whole: to be committed to the state store before use.
    Legacy(StoredSnapshot),
}

impl Found {
    fn meta(&self) -> &SnapshotMeta {
        match self {
            Found::InStore((meta, _)) | Found::Legacy((meta, _)) => meta,
        }
    }
}

/// The durable home of the current snapshot: the [`StateStore`], and the
/// file and tree where earlier versions kept it, read once. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SnapshotStore {
    store: Arc<dyn StateStore>,
    file: Arc<dyn FileSlot>,
    legacy: Arc<dyn KvTree>,
    /// The last log index of the stored snapshot (`None` inside: none, or one
    /// of the empty log). Held across a whole build or install, so a
    /// snapshot built concurrently with an install never overwrites a newer one.
    stored: Arc<tokio::sync::Mutex<Option<u64>>>,
}

impl SnapshotStore {
    /// Opens the store and finds the current snapshot, if there is one.
    pub(crate) fn open(disk: &dyn Disk) -> Result<(Self, Option<Found>), Error> {
        let mut store = Self {
            store: disk.open_state_store()?,
            file: disk.open_file(SNAPSHOT_FILE)?,
            legacy: disk.open_tree(LEGACY_TREE)?,
            stored: Arc::default(),
        };
        let found = match store.load()? {
            Some(current) => Some(Found::InStore(current)),
            None => store.load_legacy()?.map(Found::Legacy),
        };
        let index = found.as_ref().and_then(|found| index_of(found.meta()));
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

    /// The snapshot an earlier version left in its file or tree, if any.
    fn load_legacy(&self) -> Result<Option<StoredSnapshot>, Error> {
        // An empty file is one this version emptied.
        if let Some(contents) = self.file.read()?.filter(|c| !c.is_empty()) {
            return split_file(contents).map(Some);
        }
        let Some(meta_bytes) = self.legacy.get(LEGACY_KEY_META)? else {
            return Ok(None);
        };
        let meta: SnapshotMeta = decode("snapshot metadata", &meta_bytes)?;
        let data = self
            .legacy
            .get(LEGACY_KEY_DATA)?
            .ok_or_else(|| Error::Corrupt(format!("snapshot {} has metadata but no data", meta.snapshot_id)))?;
        Ok(Some((meta, data)))
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
        let payload = SnapshotPayloadRef::V5 { last_applied, last_membership, state };
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

    /// Removes the snapshot an earlier version left in its tree, if any,
    /// and empties its file, once the state store holds a commit.
    fn forget_legacy(&self) -> Result<(), Error> {
        if self.legacy.get(LEGACY_KEY_META)?.is_some() {
            // The store takes precedence from now on; the next flush of the
            // log makes the removal durable, and until then it is harmless.
            let mut batch = Batch::default();
            batch.remove(LEGACY_KEY_META);
            batch.remove(LEGACY_KEY_DATA);
            self.legacy.apply_batch(batch)?;
        }
        Ok(())
    }
}

/// One build or install in progress: while it lives no other one runs,
/// so what it finds stored stays so.
pub(crate) struct SnapshotSave<'a> {
    store: &'a SnapshotStore,
    stored: tokio::sync::MutexGuard<'a, Option<u64>>,
}

impl SnapshotStore {
    /// Starts a build or an install.
    pub(crate) async fn begin_save(&self) -> SnapshotSave<'_> {
        SnapshotSave { store: self, stored: self.stored.lock().await }
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

    /// Records that the snapshot as of `meta` is now the durable one, and
    /// lets go of what earlier versions kept.
    pub(crate) async fn stored(&mut self, meta: &SnapshotMeta) -> Result<(), Error> {
        *self.stored = index_of(meta);
        self.store.forget_legacy()?;
        if self.store.file.read()?.is_some() {
            self.store.file.replace(Vec::new()).await?;
        }
        Ok(())
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
        assert_eq!((applied, members, decoded), (last_applied, membership.clone(), state.clone()));

        // The current layout ends with the ordered keys' queues (here none:
        // an empty map, one zero byte), the numbered deliveries (another
        // empty map), the inbound state (no source, no version: two empty
        // maps, two zero bytes), then the history, kept whole here (its
        // variant, no event, no delivery: three more).
        assert_eq!((data[0], &data[data.len() - 7..]), (4, &[0u8; 7][..]), "V5, ending empty");
        let before = &data[1..data.len() - 7];
        let layout = |variant: u8, zeros: usize| [&[variant][..], before, &vec![0; zeros]].concat();
        // The fourth layout: variant V4, without the numbered deliveries,
        // its history untagged.
        let (applied, members, decoded) = decode_payload(&meta, &layout(3, 5)).expect("decodes");
        assert_eq!((applied, members, decoded), (last_applied, membership.clone(), state.clone()));
        // The third: variant V3, without the history.
        let (applied, members, decoded) = decode_payload(&meta, &layout(2, 3)).expect("decodes");
        assert_eq!((applied, members, decoded), (last_applied, membership.clone(), state.clone()));
        // The second: variant V2, without the inbound state.
        let (applied, members, decoded) = decode_payload(&meta, &layout(1, 1)).expect("decodes");
        assert_eq!((applied, members, decoded), (last_applied, membership.clone(), state.clone()));
        // The first: variant V1, without the ordered keys either.
        let first_layout = layout(0, 0);
        let (applied, members, decoded) = decode_payload(&meta, &first_layout).expect("decodes");
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
        save.stored(&meta_at(5)).await.expect("records it");
        assert!(save.holds_newer_than(&Some(LogId::new(openraft::CommittedLeaderId::new(1, 1), 3))));
        drop(save);
        disk.crash();
        let (store, current) = SnapshotStore::open(&disk).expect("reopens");
        assert_eq!(current, Some(Found::InStore((meta_at(5), payload.clone()))));
        let (_, _, decoded) = decode_payload(&meta_at(5), &payload).expect("decodes");
        assert_eq!(decoded, state);
        assert_eq!(store.begin_save().await.stored_index(), Some(5), "a reopened store knows its index");
    }

    #[tokio::test]
    async fn a_snapshot_an_earlier_version_left_is_found_until_the_store_holds_one() {
        let disk = crate::MemDisk::new();
        let tree = disk.open_tree(LEGACY_TREE).expect("tree");
        tree.insert(LEGACY_KEY_META, encode("meta", &meta_at(4)).expect("encodes")).expect("writes");
        tree.insert(LEGACY_KEY_DATA, b"old".to_vec()).expect("writes");
        let (store, current) = SnapshotStore::open(&disk).expect("opens");
        assert_eq!(current, Some(Found::Legacy((meta_at(4), b"old".to_vec()))));
        assert_eq!(store.begin_save().await.stored_index(), Some(4), "the legacy snapshot counts as the stored one");

        // A file wins over the tree.
        let mut contents = b"older file".to_vec();
        contents.extend_from_slice(&trailer(&meta_at(6)).expect("encodes"));
        disk.open_file(SNAPSHOT_FILE).expect("file").replace(contents).await.expect("writes");
        let (store, current) = SnapshotStore::open(&disk).expect("opens");
        assert_eq!(current, Some(Found::Legacy((meta_at(6), b"older file".to_vec()))));

        let payload = commit_at(&store, 9, &ClusterState::default());
        store.begin_save().await.stored(&meta_at(9)).await.expect("records it");
        assert_eq!(tree.get(LEGACY_KEY_DATA).expect("reads"), None, "the old copy is dropped");
        assert_eq!(disk.open_file(SNAPSHOT_FILE).expect("file").read().expect("reads"), Some(Vec::new()));
        let (_, current) = SnapshotStore::open(&disk).expect("reopens");
        assert_eq!(current, Some(Found::InStore((meta_at(9), payload))));
    }

    #[test]
    fn a_truncated_or_foreign_file_is_corrupt() {
        let mut contents = b"payload".to_vec();
        contents.extend_from_slice(&trailer(&meta_at(1)).expect("encodes"));
        assert_eq!(split_file(contents.clone()).expect("splits"), (meta_at(1), b"payload".to_vec()));
        assert!(split_file(contents[..contents.len() - 1].to_vec()).is_err());
        assert!(split_file(b"short".to_vec()).is_err());
        let mut lying = b"p".to_vec();
        lying.extend_from_slice(&1_000u32.to_le_bytes());
        lying.extend_from_slice(FILE_MAGIC);
        assert!(split_file(lying).is_err(), "a metadata length past the start");
    }
}
