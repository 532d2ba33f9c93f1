//! The Raft network of a single-member cluster, and openraft's config.
//!
//! [`SingleNodeNetwork`] has no peers, so every RPC fails as
//! [`Unreachable`]: the raft crate's own tests run a one-member Raft on it.
//! Nodes use the node-to-node HTTP transport (`http_network`) even with one
//! member, every call with an explicit timeout (ARCHITECTURE §2).
//!
//! [`raft_config`] holds the timing and snapshot settings every node uses.

use std::future::Future;

use openraft::error::{
    Fatal, InstallSnapshotError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, SnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, OptionalSend, RaftNetwork, RaftNetworkFactory, SnapshotPolicy};

use crate::{Error, NodeId, Snapshot, TypeConfig, Vote};

/// Leader heartbeat period.
pub const HEARTBEAT_INTERVAL_MS: u64 = 250;
/// A follower that hears no leader for a random time in
/// `[ELECTION_TIMEOUT_MIN_MS, ELECTION_TIMEOUT_MAX_MS)` starts an election.
///
/// openraft also makes `ELECTION_TIMEOUT_MAX_MS` the leader lease: a
/// follower refuses to vote until that long after it last heard the leader.
/// After a leader dies, the first candidate (timing out before the max) is
/// therefore refused, and the second try wins: the outage is about two
/// timeouts, 2.0–2.8 s here (it was 2–4 s with a 2 s max). The heartbeat
/// stays 250 ms because openraft uses it as the replication timeout.
pub const ELECTION_TIMEOUT_MIN_MS: u64 = 1000;
pub const ELECTION_TIMEOUT_MAX_MS: u64 = 1400;
/// Build a snapshot once this many entries were applied since the last one.
pub const SNAPSHOT_EVERY_ENTRIES: u64 = 20_000;
/// Entries kept in the log behind a snapshot, so a briefly lagging follower
/// catches up from the log instead of a whole snapshot.
pub const LOG_KEPT_BEHIND_SNAPSHOT_ENTRIES: u64 = 1000;
/// How long one snapshot chunk may take to send and store (fsync included).
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 5_000;
/// Entries deleted per purge.
pub const PURGE_BATCH_ENTRIES: u64 = 256;

/// openraft's config for a hookraft node, validated.
pub fn raft_config() -> Config {
    raft_config_snapshotting_every(SNAPSHOT_EVERY_ENTRIES)
}

/// [`raft_config`] with a snapshot every `entries` applied entries, keeping
/// at most a quarter of that behind it. The simulator snapshots far more
/// often than production so its short runs install and purge too.
pub fn raft_config_snapshotting_every(entries: u64) -> Config {
    let entries = entries.max(4);
    Config {
        cluster_name: "hookraft".into(),
        heartbeat_interval: HEARTBEAT_INTERVAL_MS,
        election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(entries),
        max_in_snapshot_log_to_keep: LOG_KEPT_BEHIND_SNAPSHOT_ENTRIES.min(entries / 4),
        purge_batch_size: PURGE_BATCH_ENTRIES,
        install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
        ..Config::default()
    }
    .validate()
    .expect("the constant raft config is valid")
}

/// The network factory of a single-member cluster: its clients reach no
/// one (tests of this crate; nodes use `http_network`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleNodeNetwork;

/// A client of [`SingleNodeNetwork`]: every RPC fails as [`Unreachable`].
#[derive(Debug, Clone, Copy)]
pub struct UnreachablePeer {
    target: NodeId,
}

impl UnreachablePeer {
    fn unreachable(&self) -> Unreachable {
        Unreachable::new(&Error::NoTransport { target: self.target })
    }
}

impl RaftNetworkFactory<TypeConfig> for SingleNodeNetwork {
    type Network = UnreachablePeer;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> UnreachablePeer {
        UnreachablePeer { target }
    }
}

impl RaftNetwork<TypeConfig> for UnreachablePeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(self.unreachable().into())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        Err(self.unreachable().into())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(self.unreachable().into())
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        Err(self.unreachable().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raft_config_leaves_room_for_late_heartbeats_and_keeps_a_log_tail() {
        let config = raft_config();
        // A follower must miss several heartbeats before it calls an election,
        // or a briefly busy leader (2 cores, fsync) would be deposed.
        assert!(config.election_timeout_min >= 4 * config.heartbeat_interval, "{config:?}");
        assert!(config.election_timeout_max > config.election_timeout_min);
        assert_eq!(config.snapshot_policy, SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY_ENTRIES));
        assert!(config.max_in_snapshot_log_to_keep > 0 && config.install_snapshot_timeout >= 1_000);
        assert_eq!(config.max_in_snapshot_log_to_keep, LOG_KEPT_BEHIND_SNAPSHOT_ENTRIES);
        let often = raft_config_snapshotting_every(200);
        assert_eq!(often.snapshot_policy, SnapshotPolicy::LogsSinceLast(200));
        assert_eq!(often.max_in_snapshot_log_to_keep, 50);
    }

    #[tokio::test]
    async fn single_node_network_client_reports_every_rpc_unreachable() {
        let mut client = SingleNodeNetwork.new_client(2, &BasicNode::default()).await;
        let rpc = VoteRequest { vote: Vote::new(1, 1), last_log_id: None };
        let err = client.vote(rpc, RPCOption::new(std::time::Duration::from_millis(10))).await.expect_err("no peers");
        assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
        assert!(err.to_string().contains("node 2"), "{err}");
    }
}
