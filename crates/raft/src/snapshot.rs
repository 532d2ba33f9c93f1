//! Snapshots: what their bytes hold, and where the current one is kept.
//!
//! A snapshot's bytes are a bincode [`SnapshotPayload`]: the last applied log
//! id, the last membership and the whole [`ClusterState`]. They travel to
//! followers unchanged, so the payload is a versioned enum (a shipped variant
//! is frozen). The current snapshot lives in one file of the disk,
//! `hookraft-snapshot`: the payload, then its metadata, the metadata's length
//! and a magic trailer, replaced whole and atomically. (It lived in a sled
//! tree before; sled keeps every value of its trees in memory, so the state
//! was resident twice. A snapshot left in that tree by an earlier version is
//! still read, until the first file replaces it.)
//!
//! This module must not decide when to snapshot (openraft does) nor touch
//! the live state (the state machine does).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::background::{self, Pace};
use crate::codec::{decode, encode, encode_into};
use crate::disk::{Batch, Disk, FileSlot, KvTree, NewFile};
use hookraft_core::state::{ClusterStateV1, ClusterStateV2, ClusterStateV3};

use crate::{ClusterState, Error, LogId, SnapshotMeta, StoredMembership};

const SNAPSHOT_FILE: &str = "hookraft-snapshot";
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
    /// Then with the history of finished events.
    V4 { last_applied: Option<LogId>, last_membership: StoredMembership, state: ClusterState },
}

/// The borrowed twin of [`SnapshotPayload`], so a snapshot is encoded
/// straight from the live state without a copy. Same variants, same order.
#[derive(Serialize)]
enum SnapshotPayloadRef<'a> {
    /// Never written now; here so `V4` keeps its position.
    #[allow(dead_code)]
    V1,
    #[allow(dead_code)]
    V2,
    #[allow(dead_code)]
    V3,
    V4 {
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
    encode("snapshot", &SnapshotPayloadRef::V4 { last_applied, last_membership, state })
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
        SnapshotPayload::V4 { last_applied, last_membership, state } => (last_applied, last_membership, state),
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
fn trailer(meta: &SnapshotMeta) -> Result<Vec<u8>, Error> {
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

/// The durable home of the current snapshot. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SnapshotStore {
    file: Arc<dyn FileSlot>,
    legacy: Arc<dyn KvTree>,
    /// The last log index of the stored snapshot (`None` inside: none, or one
    /// of the empty log). Held across a whole compare-and-replace, so a
    /// snapshot built concurrently with an install never overwrites a newer one.
    stored: Arc<tokio::sync::Mutex<Option<u64>>>,
}

impl SnapshotStore {
    /// Opens the store and loads the current snapshot, if there is one.
    pub(crate) fn open(disk: &dyn Disk) -> Result<(Self, Option<StoredSnapshot>), Error> {
        let mut store =
            Self { file: disk.open_file(SNAPSHOT_FILE)?, legacy: disk.open_tree(LEGACY_TREE)?, stored: Arc::default() };
        let current = store.load()?;
        store.stored = Arc::new(tokio::sync::Mutex::new(current.as_ref().and_then(|(meta, _)| index_of(meta))));
        Ok((store, current))
    }

    /// Runs `work` (long work on snapshots: encoding, decoding, reading the
    /// file, freeing a state) on a blocking thread when the file is on a
    /// disk, in place when it is in memory, which keeps a simulation on its
    /// one thread (see [`FileSlot::blocks`]).
    pub(crate) async fn off_runtime<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if self.file.blocks() {
            tokio::task::spawn_blocking(work)
                .await
                .unwrap_or_else(|e| Err(Error::Corrupt(format!("work on a blocking thread failed: {e}"))))
        } else {
            work()
        }
    }

    /// Like [`Self::off_runtime`], but on a thread of its own at a lower
    /// priority, handed a [`Pace`] that rests ([`crate::background`]): a
    /// snapshot's encoding, which nothing waits for but the next snapshot.
    /// In memory `work` runs in place, with a pace that never rests.
    pub(crate) async fn in_background<T: Send + 'static>(
        &self,
        work: impl FnOnce(Pace) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        if !self.file.blocks() {
            return work(Pace::off());
        }
        background::run("hookraft-snapshot", move || work(Pace::on())).await
    }

    /// The current snapshot's metadata and payload, if one was saved.
    pub(crate) fn load(&self) -> Result<Option<StoredSnapshot>, Error> {
        if let Some(contents) = self.file.read()? {
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

    /// Makes `meta` and `payload` the current snapshot, durably, unless the
    /// stored one is already newer (then nothing is written). Returns whether
    /// it was stored, and hands the payload back.
    pub(crate) async fn save(&self, meta: &SnapshotMeta, mut payload: Vec<u8>) -> Result<(bool, Vec<u8>), Error> {
        let mut save = self.begin_save().await;
        if save.holds_newer_than(&meta.last_log_id) {
            tracing::debug!(dropped = %meta, "a newer snapshot is already stored");
            return Ok((false, payload));
        }
        let payload_len = payload.len();
        payload.extend_from_slice(&trailer(meta)?);
        let mut contents = self.file.replace(payload).await?;
        contents.truncate(payload_len);
        save.stored(index_of(meta))?;
        Ok((true, contents))
    }

    /// Removes a snapshot an earlier version left in its tree, if any.
    fn forget_legacy(&self) -> Result<(), Error> {
        if self.legacy.get(LEGACY_KEY_META)?.is_some() {
            // The file takes precedence from now on; the next flush of the
            // log makes the removal durable, and until then it is harmless.
            let mut batch = Batch::default();
            batch.remove(LEGACY_KEY_META);
            batch.remove(LEGACY_KEY_DATA);
            self.legacy.apply_batch(batch)?;
        }
        Ok(())
    }
}

/// One streamed save in progress: while it lives no other save or install
/// runs, so what it finds stored stays so.
pub(crate) struct SnapshotSave<'a> {
    store: &'a SnapshotStore,
    stored: tokio::sync::MutexGuard<'a, Option<u64>>,
}

/// A snapshot written to its file but not yet made current.
pub(crate) struct WrittenSnapshot {
    file: Box<dyn NewFile>,
    index: Option<u64>,
    /// The payload's bytes, without the trailer.
    payload_bytes: u64,
}

impl SnapshotStore {
    /// Starts a save that encodes the state straight into the file (see
    /// [`write_snapshot`]), so a snapshot is never held in memory whole.
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

    /// Starts the new version of the file, for [`write_snapshot`].
    pub(crate) fn begin_file(&self) -> Result<Box<dyn NewFile>, Error> {
        self.store.file.begin_replace()
    }

    /// Makes `written` the current snapshot, durably; returns its payload's size.
    pub(crate) async fn commit(mut self, written: WrittenSnapshot) -> Result<u64, Error> {
        written.file.commit().await?;
        self.stored(written.index)?;
        Ok(written.payload_bytes)
    }

    /// Records that the snapshot up to `index` is now the durable one.
    fn stored(&mut self, index: Option<u64>) -> Result<(), Error> {
        *self.stored = index;
        self.store.forget_legacy()
    }
}

/// Whether a stored snapshot up to index `stored` is newer than one as of
/// `last_applied`.
pub(crate) fn stored_is_newer(stored: Option<u64>, last_applied: &Option<LogId>) -> bool {
    stored > last_applied.map(|id| id.index)
}

/// Encodes a snapshot of `state` into `file` (from [`SnapshotSave::begin_file`]),
/// not yet current: synchronous, so the caller can hold the state's lock.
pub(crate) fn write_snapshot(
    mut file: Box<dyn NewFile>,
    meta: &SnapshotMeta,
    last_membership: &StoredMembership,
    state: &ClusterState,
    pace: &mut Pace,
) -> Result<WrittenSnapshot, Error> {
    let last_applied = &meta.last_log_id;
    let payload = SnapshotPayloadRef::V4 { last_applied, last_membership, state };
    let payload_bytes = encode_into("snapshot", &payload, &mut PacedWriter::new(&mut *file, pace))? as u64;
    let io = |source| Error::File { what: "write", path: SNAPSHOT_FILE.into(), source };
    std::io::Write::write_all(&mut *file, &trailer(meta)?).map_err(io)?;
    Ok(WrittenSnapshot { file, index: index_of(meta), payload_bytes })
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
        // an empty map, one zero byte), the inbound state (no source, no
        // version: two empty maps, two zero bytes), then the history (no
        // event, no delivery: two more).
        assert_eq!((data[0], &data[data.len() - 5..]), (3, &[0u8, 0, 0, 0, 0][..]), "V4, ending empty");
        // A snapshot of the third layout: variant V3, without the history.
        let mut third_layout = data.clone();
        third_layout[0] = 2;
        third_layout.truncate(data.len() - 2);
        let (applied, members, decoded) = decode_payload(&meta, &third_layout).expect("decodes");
        assert_eq!((applied, members, decoded), (last_applied, membership.clone(), state.clone()));
        // Of the second layout: variant V2, without the inbound state.
        let mut second_layout = third_layout;
        second_layout[0] = 1;
        second_layout.truncate(data.len() - 4);
        let (applied, members, decoded) = decode_payload(&meta, &second_layout).expect("decodes");
        assert_eq!((applied, members, decoded), (last_applied, membership.clone(), state.clone()));
        // Of the first layout: variant V1, without the ordered keys either.
        let mut first_layout = second_layout;
        first_layout[0] = 0;
        first_layout.pop();
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
        assert_eq!(store.in_background(thread).await.expect("runs").as_deref(), Some("hookraft-snapshot"));
        let (in_memory, _) = SnapshotStore::open(&crate::MemDisk::new()).expect("opens");
        let caller = std::thread::current().name().map(str::to_owned);
        assert_eq!(in_memory.in_background(thread).await.expect("runs"), caller);
    }

    #[tokio::test]
    async fn the_store_keeps_the_newest_snapshot_and_reopens_to_it() {
        let disk = crate::MemDisk::new();
        let (store, current) = SnapshotStore::open(&disk).expect("opens");
        assert!(current.is_none());
        let (stored, back) = store.save(&meta_at(5), b"five".to_vec()).await.expect("saves");
        assert!(stored);
        assert_eq!(back, b"five", "the payload comes back without its trailer");
        let (stored, _) = store.save(&meta_at(3), b"three".to_vec()).await.expect("saves");
        assert!(!stored, "an older snapshot does not replace a newer one");
        disk.crash();
        let (_, current) = SnapshotStore::open(&disk).expect("reopens");
        assert_eq!(current, Some((meta_at(5), b"five".to_vec())));
    }

    #[tokio::test]
    async fn a_snapshot_left_in_the_old_tree_is_read_until_a_file_replaces_it() {
        let disk = crate::MemDisk::new();
        let tree = disk.open_tree(LEGACY_TREE).expect("tree");
        tree.insert(LEGACY_KEY_META, encode("meta", &meta_at(4)).expect("encodes")).expect("writes");
        tree.insert(LEGACY_KEY_DATA, b"old".to_vec()).expect("writes");
        let (store, current) = SnapshotStore::open(&disk).expect("opens");
        assert_eq!(current, Some((meta_at(4), b"old".to_vec())));
        let (stored, _) = store.save(&meta_at(2), b"older".to_vec()).await.expect("saves");
        assert!(!stored, "the legacy snapshot counts as the stored one");
        store.save(&meta_at(9), b"new".to_vec()).await.expect("saves");
        assert_eq!(tree.get(LEGACY_KEY_DATA).expect("reads"), None, "the old copy is dropped");
        assert_eq!(store.load().expect("loads"), Some((meta_at(9), b"new".to_vec())));
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
