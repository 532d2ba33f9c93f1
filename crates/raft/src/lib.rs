//! hookraft-raft: the Raft layer of a hookraft node — openraft's type config,
//! the durable log, and the state machine around [`ClusterState`].
//!
//! A tour:
//! - this file: [`TypeConfig`], aliases for openraft's generic types, and
//!   [`open_sled`], which opens one sled database and returns the log store,
//!   the state machine and a read handle on the replicated state.
//! - [`log_store`]: [`SledLogStore`], the Raft log, vote and committed id in
//!   sled. Appends and votes are fsynced before openraft is told they are done.
//! - [`state_machine`]: [`StateMachineStore`], which applies committed
//!   [`Command`]s to an in-memory [`ClusterState`], builds and installs
//!   snapshots (persisted in sled), and calls an [`ApplyObserver`] after each
//!   command; [`StateHandle`] is the rest of the node's read-only view.
//! - `snapshot` (private): what a snapshot's bytes hold (a versioned
//!   payload) and the sled tree that keeps the current one.
//! - [`network`]: [`SingleNodeNetwork`], the network of a one-member cluster,
//!   and [`raft_config`], the openraft timing and snapshot settings.
//! - [`http_network`]: [`HttpNetwork`], the network of a clustered node (Raft
//!   RPCs over HTTP), and [`forward_command`], a follower's way to hand a
//!   client write to the leader.
//! - [`rpc`]: the wire protocol both ends of node-to-node RPC share: paths,
//!   the secret header, and the reply enums ([`RaftReply`], [`ProposeReply`]).
//! - [`error`]: [`Error`], this crate's one error enum.
//! - `codec` (private): the bincode encoding of everything this crate persists.
//!
//! This crate owns the durability contract of DESIGN §1 ("accepted means
//! durable"): an entry is reported as appended only after sled has fsynced it.
//! It must not decide anything about the domain: every state change goes
//! through [`ClusterState::apply`] in `hookraft-core`.

pub mod error;
pub mod http_network;
pub mod log_store;
pub mod network;
pub mod rpc;
pub mod state_machine;

mod codec;
mod snapshot;

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

pub use hookraft_core::{ClusterState, Command, Response};

pub use error::Error;
pub use http_network::{ForwardError, HttpNetwork, HttpNetworkError, HttpPeer, forward_command, rpc_client};
pub use log_store::SledLogStore;
pub use network::{SingleNodeNetwork, UnreachablePeer, raft_config};
pub use rpc::{ProposeReply, RaftReply};
pub use state_machine::{ApplyObserver, StateHandle, StateMachineStore, StateRef, snapshot_id};

openraft::declare_raft_types!(
    /// openraft's type parameters for hookraft: commands in, responses out,
    /// nodes named by `u64` with a [`openraft::BasicNode`] address, snapshots
    /// as in-memory byte buffers, the tokio runtime.
    pub TypeConfig:
        D = hookraft_core::Command,
        R = hookraft_core::Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
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

/// sled's page cache size. The log's hot tail and the snapshot fit easily;
/// sled evicts the rest.
pub const SLED_CACHE_CAPACITY_BYTES: u64 = 64 * 1024 * 1024;

/// Opens (or creates) the Raft store in the directory `path`: one sled
/// database holding the log, the vote and the last snapshot.
///
/// The state machine starts from the persisted snapshot, if any; openraft
/// then re-applies the committed log after it. `observer` is called after
/// each applied command (see [`ApplyObserver`]).
///
/// The returned stores share the database: drop all of them (and the `Raft`
/// that owns them) before opening the same path again, or the open fails
/// on sled's file lock.
pub fn open_sled(
    path: &Path,
    observer: Option<Arc<dyn ApplyObserver>>,
) -> Result<(SledLogStore, StateMachineStore, StateHandle), Error> {
    let db = sled::Config::new()
        .path(path)
        .cache_capacity(SLED_CACHE_CAPACITY_BYTES)
        // We fsync explicitly where openraft requires it; a timer would only
        // add background IO.
        .flush_every_ms(None)
        .open()
        .map_err(|source| Error::Open { path: path.to_path_buf(), source })?;
    let log_store = SledLogStore::open(&db, path)?;
    let (state_machine, handle) = StateMachineStore::open(&db, observer)?;
    Ok((log_store, state_machine, handle))
}
