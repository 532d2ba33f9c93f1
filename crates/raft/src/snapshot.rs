//! Snapshots: what their bytes hold, and where the current one is kept.
//!
//! A snapshot's bytes are a bincode [`SnapshotPayload`]: the last applied log
//! id, the last membership and the whole [`ClusterState`]. They travel to
//! followers unchanged, so the payload is a versioned enum (a shipped variant
//! is frozen). The current snapshot lives in the disk's tree
//! `raft_snapshot`: its metadata and its bytes, written together in one
//! atomic batch and flushed.
//!
//! This module must not decide when to snapshot (openraft does) nor touch
//! the live state (the state machine does).

use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::disk::{Batch, Disk, KvTree};
use crate::{ClusterState, Error, LogId, SnapshotMeta, StoredMembership};

const SNAPSHOT_TREE: &str = "raft_snapshot";
const KEY_META: &[u8] = b"current_meta";
const KEY_DATA: &[u8] = b"current_data";

/// What a snapshot's bytes decode to.
#[derive(Debug, Deserialize)]
pub(crate) enum SnapshotPayload {
    V1 { last_applied: Option<LogId>, last_membership: StoredMembership, state: ClusterState },
}

/// The borrowed twin of [`SnapshotPayload`], so a snapshot is encoded
/// straight from the live state without a copy. Same variants, same order.
#[derive(Serialize)]
enum SnapshotPayloadRef<'a> {
    V1 { last_applied: &'a Option<LogId>, last_membership: &'a StoredMembership, state: &'a ClusterState },
}

/// Encodes a snapshot of `state` as of `last_applied`.
pub(crate) fn encode_payload(
    last_applied: &Option<LogId>,
    last_membership: &StoredMembership,
    state: &ClusterState,
) -> Result<Vec<u8>, Error> {
    encode("snapshot", &SnapshotPayloadRef::V1 { last_applied, last_membership, state })
}

/// Decodes a snapshot's bytes and checks they say what `meta` says.
pub(crate) fn decode_payload(
    meta: &SnapshotMeta,
    data: &[u8],
) -> Result<(Option<LogId>, StoredMembership, ClusterState), Error> {
    let SnapshotPayload::V1 { last_applied, last_membership, state } = decode("snapshot", data)?;
    if last_applied != meta.last_log_id || last_membership != meta.last_membership {
        return Err(Error::Corrupt(format!(
            "snapshot {} holds state as of {last_applied:?} with membership {last_membership:?}, \
             but its metadata says {:?} with {:?}",
            meta.snapshot_id, meta.last_log_id, meta.last_membership
        )));
    }
    Ok((last_applied, last_membership, state))
}

/// The durable home of the current snapshot. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SnapshotStore {
    tree: Arc<dyn KvTree>,
    /// Serializes compare-and-replace, so a snapshot built concurrently with
    /// an install never overwrites a newer one. Held only across the disk's
    /// synchronous calls, never across an await.
    replace: Arc<Mutex<()>>,
}

impl SnapshotStore {
    pub(crate) fn open(disk: &dyn Disk) -> Result<Self, Error> {
        Ok(Self { tree: disk.open_tree(SNAPSHOT_TREE)?, replace: Arc::new(Mutex::new(())) })
    }

    /// The current snapshot's metadata and bytes, if one was saved.
    pub(crate) fn load(&self) -> Result<Option<(SnapshotMeta, Vec<u8>)>, Error> {
        let Some(meta_bytes) = self.tree.get(KEY_META)? else {
            return Ok(None);
        };
        let meta: SnapshotMeta = decode("snapshot metadata", &meta_bytes)?;
        let data = self
            .tree
            .get(KEY_DATA)?
            .ok_or_else(|| Error::Corrupt(format!("snapshot {} has metadata but no data", meta.snapshot_id)))?;
        Ok(Some((meta, data)))
    }

    /// Makes `meta` and `data` the current snapshot and flushes, unless the
    /// stored one is already newer (then nothing is written). Returns whether
    /// it was stored.
    pub(crate) async fn save(&self, meta: &SnapshotMeta, data: &[u8]) -> Result<bool, Error> {
        let meta_bytes = encode("snapshot metadata", meta)?;
        {
            let _replacing = self.replace.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(current) = self.tree.get(KEY_META)? {
                let current: SnapshotMeta = decode("snapshot metadata", &current)?;
                if current.last_log_id.map(|id| id.index) > meta.last_log_id.map(|id| id.index) {
                    tracing::debug!(kept = %current, dropped = %meta, "a newer snapshot is already stored");
                    return Ok(false);
                }
            }
            let mut batch = Batch::default();
            batch.insert(KEY_META, meta_bytes);
            batch.insert(KEY_DATA, data.to_vec());
            self.tree.apply_batch(batch)?;
        }
        self.tree.flush().await?;
        Ok(true)
    }
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
}
