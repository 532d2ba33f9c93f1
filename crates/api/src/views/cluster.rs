//! The cluster and its administration, and the payload keys, as callers
//! see them.

use std::collections::BTreeMap;

use hookraft_core::ids::EventId;
use serde::Serialize;
use utoipa::ToSchema;

use super::Timestamp;

/// A node, as the membership and the replicated state know it.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeView {
    /// A node id.
    pub id: u64,
    /// Its address, when it is a member.
    #[schema(required = true)]
    pub addr: Option<String>,
    pub voter: bool,
    pub member: bool,
    /// Its lease is valid now.
    pub live: bool,
    pub draining: bool,
    #[schema(required = true)]
    pub last_heartbeat_at: Option<Timestamp>,
    pub shards_owned: usize,
    /// Log entries its replica is behind the leader's log: given by the
    /// leader only (`null` elsewhere, or before anything reached it). A
    /// node added as a learner becomes a voter once this is small.
    #[schema(required = true)]
    pub entries_behind: Option<u64>,
}

/// A shard's grant.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShardView {
    pub shard: u16,
    /// `null` while unowned (never granted, or revoked and waiting).
    #[schema(required = true)]
    pub owner: Option<u64>,
    /// The fencing token of its latest grant or revocation.
    pub token: u64,
    /// While revoked: the node it is to go to (an operator's move), if any.
    #[schema(required = true)]
    pub next_owner: Option<u64>,
}

/// The cluster, as the answering node sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClusterStatus {
    /// The answering node.
    pub node_id: u64,
    #[schema(required = true)]
    pub leader_id: Option<u64>,
    pub term: u64,
    pub nodes: Vec<NodeView>,
    pub shards: Vec<ShardView>,
    /// Outcomes refused for a stale fencing token.
    pub outcomes_rejected_stale: u64,
}

/// A shard move under way: revoked now, granted to `owner` once safe.
#[derive(Debug, Serialize, ToSchema)]
pub struct ShardMoved {
    pub shard: u16,
    pub owner: u64,
    /// The revocation's fencing token.
    #[schema(required = true)]
    pub token: Option<u64>,
    /// Always `true`: the grant follows once the current owner's lease must have lapsed.
    pub pending: bool,
}

/// A node's draining flag, as set.
#[derive(Debug, Serialize, ToSchema)]
pub struct Draining {
    /// A node id.
    pub id: u64,
    pub draining: bool,
}

/// A node added as a learner (a voter once it has caught up).
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeAdded {
    /// A node id.
    pub id: u64,
    pub addr: String,
}

/// A node removed from the voters.
#[derive(Debug, Serialize, ToSchema)]
pub struct NodeRemoved {
    /// A node id.
    pub id: u64,
    /// Always `true`.
    pub removed: bool,
}

/// A key payloads named that this node's keyring lacks.
#[derive(Debug, Serialize, ToSchema)]
pub struct MissingKey {
    pub key_id: String,
    /// Opens that failed for it since the node started.
    pub failed_opens: u64,
}

/// This node's payload keys (ids only, never key material).
#[derive(Debug, Serialize, ToSchema)]
pub struct PayloadKeys {
    /// Whether this node has a keyring.
    pub encryption: bool,
    /// The key new payloads are sealed under; `null` without a keyring.
    #[schema(required = true)]
    pub active_key_id: Option<String>,
    pub key_ids: Vec<String>,
    pub missing_keys: Vec<MissingKey>,
}

/// A payload this node could not open during a rewrap.
#[derive(Debug, Serialize, ToSchema)]
pub struct RewrapFailure {
    #[schema(value_type = String)]
    pub event_id: EventId,
    pub error: String,
}

/// What one rewrap call did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Rewrapped {
    pub dry_run: bool,
    #[schema(required = true)]
    pub active_key_id: Option<String>,
    /// Events this call looked at.
    pub examined: u64,
    /// Payloads sealed again under `active_key_id` and committed.
    pub rewrapped: u64,
    /// Payloads changed between the read and the commit; left as they were.
    pub skipped: u64,
    /// Payloads this node could not open; left as they were.
    pub failed: u64,
    /// The first 20 failures.
    pub failures: Vec<RewrapFailure>,
    /// The payloads examined, by the key they are under after the call (`clear` for none).
    pub by_key: BTreeMap<String, u64>,
    /// Where the next call starts (pass it back as `after`); `null` when done.
    #[schema(value_type = Option<String>, required = true)]
    pub next_after: Option<EventId>,
    /// Endpoint signing secrets and provider secrets, every one of them:
    /// looked at by a call without `after` only (`null` otherwise).
    #[schema(required = true)]
    pub secrets: Option<SecretsRewrapped>,
}

/// What a rewrap did to the stored secrets.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct SecretsRewrapped {
    /// Secrets looked at (current and retired ones).
    pub examined: u64,
    /// Secrets sealed again under `active_key_id` and committed.
    pub rewrapped: u64,
    /// Secrets changed between the read and the commit; left as they were.
    pub skipped: u64,
    /// Secrets this node could not open; left as they were.
    pub failed: u64,
    /// The secrets examined, by the key they are under after the call (`clear` for none).
    pub by_key: BTreeMap<String, u64>,
}
