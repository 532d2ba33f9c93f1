//! What the HTTP layer needs from its node, as one shared value. The node
//! crate builds it; the API never reaches into Raft or the actors directly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hookraft_core::clock::Clock;
use hookraft_core::command::{IngestResult, NewEvent};
use hookraft_core::entropy::{Entropy, EntropyRng};
use hookraft_core::ids::NodeId;
use hookraft_core::propose::{ProposeError, Proposer};
use hookraft_core::redact::SecretString;
use hookraft_delivery::context::InFlightRegistry;
use hookraft_delivery::metrics::{DeliveryMetrics, LifecycleMetrics};
use hookraft_delivery::payloads::PayloadKeys;
use hookraft_raft::StateHandle;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::admission::Admission;

/// A boxed future for [`Ingest::submit`].
pub type IngestFuture<'a> = Pin<Box<dyn Future<Output = Result<IngestResult, ProposeError>> + Send + 'a>>;
/// A boxed future for [`Ingest::submit_batch`].
pub type IngestBatchFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<IngestResult>, ProposeError>> + Send + 'a>>;

/// Commits events through the node's ingest batcher; each future resolves
/// once its events are committed and applied (never before).
pub trait Ingest: Send + Sync + 'static {
    fn submit(&self, event: NewEvent) -> IngestFuture<'_>;
    /// Commits `events` in one log entry, all of them or none, and answers
    /// one result per event, in their order.
    fn submit_batch(&self, events: Vec<NewEvent>) -> IngestBatchFuture<'_>;
}

/// The node's view of the Raft cluster.
pub trait ClusterView: Send + Sync + 'static {
    fn leader_id(&self) -> Option<NodeId>;
    fn term(&self) -> u64;
    /// Has a leader and applied state, and can take writes.
    fn ready(&self) -> bool;
    /// Times the leader changed since this node started.
    fn leader_changes(&self) -> u64;
    /// Whether this node's lease is valid now.
    fn lease_valid(&self) -> bool;
    /// Heartbeats that renewed the lease, and times it lapsed.
    fn lease_renewals(&self) -> u64;
    fn lease_expiries(&self) -> u64;
    /// This node's log and its current snapshot, for `/metrics`.
    fn log_figures(&self) -> LogFigures;
}

/// How far this node's replica has applied the log, what its current
/// snapshot covers and how large it is: what an operator needs to see that
/// snapshots keep up with the log (the `snapshot built` log line names only
/// the snapshots this node built, not one installed from a leader).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogFigures {
    /// The last log index applied to this replica (0 before the first).
    pub applied_index: u64,
    /// The last log index the current snapshot covers (0 without one).
    pub snapshot_index: u64,
    /// Bytes of the current snapshot's payload, built here or installed.
    pub snapshot_bytes: u64,
    /// Encoded bytes of the log entries past the current snapshot.
    pub log_bytes_since_snapshot: u64,
}

/// A failure of a membership change.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unavailable(String),
}

/// A boxed future for [`ClusterAdmin`].
pub type AdminFuture<'a> = Pin<Box<dyn Future<Output = Result<(), AdminError>> + Send + 'a>>;

/// One member of the Raft membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: NodeId,
    pub addr: String,
    pub voter: bool,
    /// Log entries this member's replica is behind the leader's log, as
    /// the leader knows it: `None` on a follower, or before anything was
    /// replicated to it.
    pub entries_behind: Option<u64>,
}

/// Membership changes, which go through openraft rather than a command.
pub trait ClusterAdmin: Send + Sync + 'static {
    /// Current members, voters and learners.
    fn members(&self) -> Vec<Member>;
    /// Adds a node as a learner, then promotes it to voter once it caught
    /// up. `bearer` is the caller's token, for a follower to pass the
    /// change on to the leader.
    fn add_node(&self, id: NodeId, addr: String, bearer: Option<SecretString>) -> AdminFuture<'_>;
    /// Removes a node from the voters (refusing to leave no live majority).
    fn remove_node(&self, id: NodeId, bearer: Option<SecretString>) -> AdminFuture<'_>;
}

/// Metrics of the API itself (`crate::metrics` registers them). Cloning
/// shares them.
#[derive(Debug, Clone)]
pub struct ApiMetrics {
    pub events_accepted_total: Counter,
    pub events_rejected_total: Counter,
    pub events_idempotent_replays_total: Counter,
    pub ingest_unavailable_total: Counter,
    /// From a post's admission to its events committed and applied.
    pub commit_latency: Histogram,
    /// Provider requests committed as new events.
    pub inbound_accepted_total: Counter,
    /// Provider requests for an event id already committed.
    pub inbound_duplicates_total: Counter,
    /// Provider requests whose signature did not hold.
    pub inbound_bad_signature_total: Counter,
    /// Provider requests refused by an allowlist, a rate limit or a disabled source.
    pub inbound_refused_total: Counter,
    /// Provider requests refused otherwise (unknown source, bad body, full budget).
    pub inbound_rejected_total: Counter,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self {
            events_accepted_total: Counter::default(),
            events_rejected_total: Counter::default(),
            events_idempotent_replays_total: Counter::default(),
            ingest_unavailable_total: Counter::default(),
            commit_latency: Histogram::new(crate::metrics::COMMIT_LATENCY_BUCKETS_S),
            inbound_accepted_total: Counter::default(),
            inbound_duplicates_total: Counter::default(),
            inbound_bad_signature_total: Counter::default(),
            inbound_refused_total: Counter::default(),
            inbound_rejected_total: Counter::default(),
        }
    }
}

impl ApiMetrics {
    /// Records one commit of a post's events that took `ms`.
    pub fn observe_commit_ms(&self, ms: u64) {
        self.commit_latency.observe(ms as f64 / 1_000.0);
    }
}

/// Shared by every request handler.
pub struct ApiContext {
    pub node_id: NodeId,
    pub state: StateHandle,
    pub proposer: Arc<dyn Proposer>,
    pub ingest: Arc<dyn Ingest>,
    pub cluster: Arc<dyn ClusterView>,
    pub admin: Arc<dyn ClusterAdmin>,
    pub clock: Arc<dyn Clock>,
    /// For ids and generated secrets: the node's `Io` entropy (the OS's in
    /// production).
    pub entropy: Arc<dyn Entropy>,
    pub in_flight: Arc<InFlightRegistry>,
    pub delivery_metrics: Arc<DeliveryMetrics>,
    pub metrics: ApiMetrics,
    /// What the applies tallied for this node (`hookraft_core::state::tally`).
    pub lifecycle: Arc<LifecycleMetrics>,
    /// The node's one registry, which `/metrics` renders: every metric
    /// above, and a collector of what is read at each scrape
    /// (`crate::metrics::registry`).
    pub registry: Registry,
    /// How many endpoints get series of their own in `/metrics`; the rest
    /// are summed as `endpoint="other"` (at most
    /// [`crate::metrics::TOP_ENDPOINTS_MAX`]).
    pub metrics_top_endpoints: usize,
    /// The bearer tokens `/v1` takes, with their scopes (`crate::auth`).
    pub tokens: Arc<crate::auth::Tokens>,
    pub allow_private_targets: bool,
    /// How long a rotated-out secret keeps signing by default.
    pub secret_grace_ms: u64,
    /// The budgets that refuse ingest this node cannot absorb.
    pub admission: Admission,
    /// Seals payloads on ingest and opens them for `GET /v1/events/{id}`;
    /// shared with the endpoint actors.
    pub payloads: Arc<PayloadKeys>,
    /// The sources' rate limits on this node.
    pub inbound: crate::routes::inbound::InboundGate,
}

impl ApiContext {
    /// Runs `f` with the node's entropy as a generator.
    pub fn with_rng<T>(&self, f: impl FnOnce(&mut EntropyRng<'_>) -> T) -> T {
        f(&mut EntropyRng(self.entropy.as_ref()))
    }
}
