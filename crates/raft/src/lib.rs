//! hookraft-raft: the Raft layer of a hookraft node — openraft's type config,
//! the durable log, and the state machine around [`ClusterState`].
//!
//! A tour:
//! - this file: [`TypeConfig`], aliases for openraft's generic types, and
//!   [`open`], which opens the stores on a [`Backend`] (a sled directory in
//!   production, a [`MemDisk`] in simulation) and returns the log store, the
//!   state machine and a read handle on the replicated state.
//! - [`disk`]: the storage seam — [`Disk`] and [`KvTree`], the few
//!   operations the stores need, and [`SledDisk`], their sled implementation.
//! - [`mem_disk`]: [`MemDisk`], the in-memory disk that loses unflushed
//!   writes on [`MemDisk::crash`].
//! - [`runtime`]: [`SeededRuntime`], openraft's tokio runtime with a
//!   per-thread generator that [`seed_thread_rng`] makes deterministic.
//! - [`log_store`]: [`LogStore`], the Raft log, vote and committed id.
//!   Appends and votes are flushed before openraft is told they are done.
//! - [`log_size`]: the stored entries' sizes, and the task that asks for a
//!   snapshot when the log past the last one grows large.
//! - [`state_machine`]: [`StateMachineStore`], which applies committed
//!   [`Command`]s to an in-memory [`ClusterState`], builds and installs
//!   snapshots (persisted on the disk), and calls an [`ApplyObserver`] after
//!   each command; [`StateHandle`] is the rest of the node's read-only view.
//! - `snapshot` (private): what a snapshot's bytes hold (a versioned
//!   payload) and the tree that keeps the current one.
//! - [`network`]: [`SingleNodeNetwork`], the network of a one-member cluster,
//!   and [`raft_config`], the openraft timing and snapshot settings.
//! - [`http_network`]: [`HttpNetwork`], the network of a clustered node (Raft
//!   RPCs over HTTP), and [`forward_command`], a follower's way to hand a
//!   client write to the leader.
//! - [`rpc`]: the wire protocol both ends of node-to-node RPC share: paths,
//!   the secret header, and the reply enums ([`RaftReply`], [`ProposeReply`]).
//! - [`history_store`]: [`RedbHistory`], the finished history on disk (one
//!   redb file behind core's `HistoryStore`), its point-in-time
//!   [`HistoryView`], and the stream a snapshot sends it as.
//! - [`state_store`]: [`StateStore`], where the state machine keeps its
//!   snapshot: the history and, in the same commit, the state it goes with
//!   (a redb file on disk, a [`MemStateStore`] in simulation).
//! - [`error`]: [`Error`], this crate's one error enum.
//! - [`background`]: threads for work nothing waits for soon (a snapshot's
//!   encoding, a purge's removal), at a lower priority (nice 10) and paced.
//! - `codec` (private): the bincode encoding of everything this crate persists.
//! - `group_commit` (private): sled's flushes, one at a time and shared by
//!   every caller waiting (never sled's `flush_async`, which can hang).
//!
//! This crate owns the durability contract of ARCHITECTURE §1 ("accepted means
//! durable"): an entry is reported as appended only after the disk has
//! flushed it (an fsync on sled).
//! It must not decide anything about the domain: every state change goes
//! through [`ClusterState::apply`] in `hookraft-core`.

pub mod disk;
pub mod error;
pub mod history_store;
pub mod http_network;
pub mod link;
pub mod log_command;
pub mod log_size;
pub mod log_store;
pub mod mem_disk;
pub mod network;
pub mod recent_entries;
pub mod rpc;
pub mod runtime;
mod state_handle;
pub mod state_machine;
pub mod state_store;

pub mod background;
mod codec;
mod durable;
#[cfg(test)]
mod golden;
mod group_commit;
mod snapshot;
pub mod snapshot_data;
mod snapshot_hold;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use hookraft_core::{ClusterState, Command, Response};

pub use disk::{Batch, BatchOp, Disk, KvTree, SLED_CACHE_CAPACITY_BYTES, SledDisk};
pub use error::Error;
pub use history_store::{HISTORY_CACHE_BYTES_DEFAULT, HistoryView, RedbHistory};
pub use http_network::{
    ForwardError, HttpNetwork, HttpNetworkError, HttpPeer, LinkSender, forward_command, rpc_client,
};
pub use log_command::LogCommand;
pub use log_store::{LogStore, SledLogStore};
pub use mem_disk::MemDisk;
pub use network::{
    SNAPSHOT_EVERY_ENTRIES, SingleNodeNetwork, UnreachablePeer, raft_config, raft_config_snapshotting_every,
};
pub use rpc::{ProposeReply, RaftReply};
pub use runtime::{SeededRuntime, SeededThreadRng, seed_thread_rng};
pub use snapshot_data::{SnapshotData, Spool};
pub use snapshot_hold::SnapshotHold;
pub use state_handle::{StateHandle, StateRef};
pub use state_machine::{ApplyObserver, StateMachineStore, snapshot_id};
pub use state_store::{MemStateStore, RedbStateStore, StateStore, StoredState};

openraft::declare_raft_types!(
    /// openraft's type parameters for hookraft: commands in, responses out,
    /// nodes named by `u64` with a [`openraft::BasicNode`] address, snapshots
    /// spooled through files ([`SnapshotData`]), tokio with a seedable generator
    /// ([`SeededRuntime`]).
    pub TypeConfig:
        D = LogCommand,
        R = hookraft_core::Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapshotData,
        AsyncRuntime = SeededRuntime,
);

/// A Raft node id (the same numbers as `hookraft_core::ids::NodeId`).
pub type NodeId = u64;
/// A running Raft node.
pub type Raft = openraft::Raft<TypeConfig>;
/// The position of an entry in the log: (term, leader, index).
pub type LogId = openraft::LogId<NodeId>;
/// One log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// What a log entry carries: blank, membership or a [`Command`].
pub type EntryPayload = openraft::EntryPayload<TypeConfig>;
/// A vote: (term, candidate, committed).
pub type Vote = openraft::Vote<NodeId>;
/// A membership config and the id of the log entry that carried it.
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
/// A snapshot: metadata plus the encoded state.
pub type Snapshot = openraft::Snapshot<TypeConfig>;
/// The log's purged and last ids.
pub type LogState = openraft::storage::LogState<TypeConfig>;
/// openraft's storage error, which every storage trait method returns.
pub type StorageError = openraft::StorageError<NodeId>;
/// openraft's metrics of a running node.
pub type RaftMetrics = openraft::RaftMetrics<NodeId, openraft::BasicNode>;

/// The leader a node's metrics name, unless they name the node itself and
/// it is no voter of its own membership config. openraft 0.9 lets a leader
/// that removed itself from the cluster go on as a leader of no one (its
/// state, its vote and `current_leader` all still say so), and no leader
/// of the new membership ever contacts it to say otherwise: it knows no
/// leader.
pub fn known_leader(metrics: &RaftMetrics) -> Option<NodeId> {
    metrics.current_leader.filter(|&leader| {
        leader != metrics.id
            || (metrics.state == openraft::ServerState::Leader
                && metrics.membership_config.membership().voter_ids().any(|voter| voter == leader))
    })
}

/// Where a node keeps its Raft store.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A sled database in the directory `path` (production), the history
    /// store's redb file beside it with a page cache of
    /// `history_cache_bytes`.
    Sled { path: PathBuf, history_cache_bytes: usize },
    /// An in-memory disk (simulation). Keep a clone to crash it.
    Memory(MemDisk),
}

impl Backend {
    /// A sled database in `path`, the history store's cache at its default
    /// size ([`HISTORY_CACHE_BYTES_DEFAULT`]).
    pub fn sled(path: impl Into<PathBuf>) -> Self {
        Self::Sled { path: path.into(), history_cache_bytes: HISTORY_CACHE_BYTES_DEFAULT }
    }
}

/// Opens (or creates) the Raft store on `backend`: the log, the vote and the
/// last snapshot.
///
/// The state machine starts from the persisted snapshot, if any; openraft
/// then re-applies the committed log after it. `observer` is called after
/// each applied command (see [`ApplyObserver`]).
///
/// On sled, the returned stores share the database: drop all of them (and
/// the `Raft` that owns them) before opening the same path again, or the
/// open fails on sled's file lock. A [`MemDisk`] has no lock: reopen it
/// after [`MemDisk::crash`], which also stops the old stores.
pub fn open(
    backend: &Backend,
    observer: Option<Arc<dyn ApplyObserver>>,
) -> Result<(LogStore, StateMachineStore, StateHandle), Error> {
    match backend {
        Backend::Sled { path, history_cache_bytes } => {
            open_disk(&SledDisk::open(path)?.with_history_cache(*history_cache_bytes), observer)
        }
        Backend::Memory(disk) => open_disk(disk, observer),
    }
}

/// [`open`] on any [`Disk`], e.g. a test's wrapper that injects faults.
pub fn open_disk(
    disk: &dyn Disk,
    observer: Option<Arc<dyn ApplyObserver>>,
) -> Result<(LogStore, StateMachineStore, StateHandle), Error> {
    let hold = SnapshotHold::default();
    let log_store = LogStore::open(disk)?.with_hold(hold.clone());
    let (state_machine, handle) = StateMachineStore::open(disk, observer)?;
    if let Some(snapshot) = handle.last_applied() {
        log_store.purge_what_a_snapshot_replaced(snapshot)?;
    }
    Ok((log_store, state_machine.with_hold(hold), handle))
}

/// [`open`] on a sled database in the directory `path`.
pub fn open_sled(
    path: &Path,
    observer: Option<Arc<dyn ApplyObserver>>,
) -> Result<(LogStore, StateMachineStore, StateHandle), Error> {
    open(&Backend::sled(path), observer)
}
