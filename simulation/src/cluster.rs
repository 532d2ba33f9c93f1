//! The simulated nodes: started through the same `Node::start` as
//! production, with a simulated `Io` (virtual clock with skew and drift,
//! seeded generators, the simulated network, scripted receivers, an
//! in-memory disk that loses unflushed writes on a crash).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hookraft_core::ids::NodeId;
use hookraft_core::payload::Keyring;
use hookraft_core::state::ClusterState;
use hookraft_node::auth::{Credential, Scope, Tokens};
use hookraft_node::{Io, Node, NodeConfig, NodeHandle, Runtimes, SeededEntropy, Storage};
use hookraft_raft::{ApplyObserver, MemDisk};
use serde_json::Value;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::clock::SimClock;
use crate::net::SimNet;
use crate::receivers::Receivers;

/// Lease of simulated nodes: short, so faults cost little virtual time.
pub const LEASE_MS: u64 = 2_000;
/// Simulated nodes snapshot every this many entries (production: 20,000),
/// so a run builds, installs and purges snapshots several times, and a
/// restarted node replays a short log.
pub const SNAPSHOT_EVERY_ENTRIES: u64 = 400;
/// Simulated nodes forget finished events after this long (production: a
/// week), so the leader prunes several times in a run, under its faults,
/// and the checkers see events go.
pub const RETENTION_MS: u64 = 15_000;

/// One simulated node: its disk outlives its process.
pub struct SimNode {
    pub id: NodeId,
    pub disk: MemDisk,
    pub clock: SimClock,
    pub seed: u64,
    pub handle: Option<NodeHandle>,
    pub restarts: u32,
}

/// The nodes of a run and what they share.
pub struct Cluster {
    pub nodes: BTreeMap<NodeId, SimNode>,
    pub net: SimNet,
    pub receivers: Receivers,
    pub tap: Arc<dyn ApplyObserver>,
    /// The payload keyring a node gets when it starts; `None`: payloads in
    /// clear. Changing it (a key rotation) reaches the nodes started later.
    pub keyring: Option<Arc<Keyring>>,
    peers: BTreeMap<NodeId, String>,
}

/// A JSON answer from a node's API.
pub struct ApiAnswer {
    pub status: StatusCode,
    pub body: Value,
}

impl Cluster {
    pub fn new(nodes: Vec<SimNode>, net: SimNet, receivers: Receivers, tap: Arc<dyn ApplyObserver>) -> Self {
        let peers = nodes.iter().map(|n| (n.id, format!("node{}:8080", n.id))).collect();
        Self { nodes: nodes.into_iter().map(|n| (n.id, n)).collect(), net, receivers, tap, keyring: None, peers }
    }

    /// Starts (or restarts) node `id` on its disk.
    pub async fn start(&mut self, id: NodeId) -> anyhow::Result<()> {
        let node = self.nodes.get_mut(&id).ok_or_else(|| anyhow::anyhow!("no node {id}"))?;
        let mut config = NodeConfig::single(format!("10.0.0.{id}:8080").parse()?);
        config.node_id = id;
        config.advertise = Some(self.peers[&id].clone());
        config.peers = self.peers.clone();
        config.allow_private_targets = true;
        // Shared, as in any real cluster: a node without one takes no members.
        config.cluster_secret = Some("simulated-cluster-secret".into());
        // Membership changes need an admin token; every call carries it.
        let admin = Credential::new("admin-token", Scope::Admin, &SIM_ADMIN_TOKEN.into())
            .map_err(|e| anyhow::anyhow!("the simulator's admin token: {e}"))?;
        config.tokens = Arc::new(Tokens::new(vec![admin]));
        config.lease_ms = LEASE_MS;
        config.snapshot_every_entries = SNAPSHOT_EVERY_ENTRIES;
        config.retention_ms = Some(RETENTION_MS);
        config.keyring = self.keyring.clone();
        let io = Io {
            clock: Arc::new(node.clock.clone()),
            seed: node.seed.wrapping_add(u64::from(node.restarts)),
            entropy: Arc::new(SeededEntropy::new(node.seed.rotate_left(17) ^ u64::from(node.restarts))),
            transport: Arc::new(self.receivers.clone()),
            storage: Storage::Memory(node.disk.clone()),
            network: self.net.factory(id),
            peers: self.net.peers(id),
            apply_tap: Some(self.tap.clone()),
            // One thread for everything, so a seed replays exactly.
            runtimes: Runtimes::default(),
            tls: None,
        };
        let handle = Node::start(config, io, None).await?;
        self.net.attach(id, handle.raft().clone(), handle.local_write.clone());
        node.handle = Some(handle);
        Ok(())
    }

    /// Kills node `id`: its process stops at once and its disk loses what
    /// was not flushed.
    pub async fn crash(&mut self, id: NodeId) {
        self.net.detach(id);
        if let Some(node) = self.nodes.get_mut(&id) {
            if let Some(handle) = node.handle.take() {
                handle.crash().await;
            }
            node.disk.crash();
            node.restarts += 1;
        }
    }

    pub fn is_up(&self, id: NodeId) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.handle.is_some())
    }

    pub fn up(&self) -> Vec<NodeId> {
        self.nodes.values().filter(|n| n.handle.is_some()).map(|n| n.id).collect()
    }

    /// The leader as the running members see it, if they agree on one that
    /// runs. A node removed from the membership keeps its last view (a
    /// removed leader still names itself) and has no say.
    pub fn leader(&self) -> Option<NodeId> {
        let mut seen = None;
        for node in self.nodes.values() {
            let Some(handle) = &node.handle else { continue };
            let Some(named) = leader_named_by(node.id, handle.raft()) else { continue };
            let leader = named?;
            if seen.is_some_and(|s| s != leader) {
                return None;
            }
            seen = Some(leader);
        }
        seen.filter(|l| self.is_up(*l))
    }

    /// A copy of node `id`'s replicated state and its last applied index.
    pub fn state(&self, id: NodeId) -> Option<(ClusterState, u64)> {
        self.with_state(id, |state, applied| (state.clone(), applied))
    }

    /// Looks at node `id`'s replicated state and last applied index without
    /// copying it (the driver polls it every few hundred virtual ms).
    pub fn with_state<R>(&self, id: NodeId, look: impl FnOnce(&ClusterState, u64) -> R) -> Option<R> {
        let handle = self.nodes.get(&id)?.handle.as_ref()?;
        let state = handle.state.read();
        let applied = state.last_applied().map(|l| l.index).unwrap_or(0);
        Some(look(&state, applied))
    }

    /// The address node `id` advertises to its peers.
    pub fn peer_addr(&self, id: NodeId) -> Option<&str> {
        self.peers.get(&id).map(String::as_str)
    }

    /// Every running node's Raft handle and API, for tasks that must find
    /// the leader while the driver goes on.
    pub fn handles(&self) -> Vec<(NodeId, hookraft_raft::Raft, axum::Router)> {
        self.nodes
            .values()
            .filter_map(|n| n.handle.as_ref().map(|h| (n.id, h.raft().clone(), h.router.clone())))
            .collect()
    }

    /// Node `id`'s HTTP API, callable without a socket (see [`call`]).
    pub fn router(&self, id: NodeId) -> Option<axum::Router> {
        Some(self.nodes.get(&id)?.handle.as_ref()?.router.clone())
    }
}

/// The leader node `id` names (`Some(None)`: none), or `None` when `id`
/// is not in the membership it knows: a node removed from it keeps its
/// last view (a removed leader still names itself) and has no say.
fn leader_named_by(id: NodeId, raft: &hookraft_raft::Raft) -> Option<Option<NodeId>> {
    let metrics = raft.metrics();
    let m = metrics.borrow();
    m.membership_config.membership().nodes().any(|(member, _)| *member == id).then_some(m.current_leader)
}

/// Whether node `id` leads by its own account, as a member of the
/// membership it knows.
pub fn leads(id: NodeId, raft: &hookraft_raft::Raft) -> bool {
    leader_named_by(id, raft) == Some(Some(id))
}

/// The admin token of every simulated node, sent on every call.
pub const SIM_ADMIN_TOKEN: &str = "simulated-admin-token-7c2f";

/// Calls a node's HTTP API through its router.
pub async fn call(
    router: axum::Router,
    method: &str,
    path: &str,
    body: Option<Value>,
    key: Option<&str>,
) -> Option<ApiAnswer> {
    let headers: Vec<(&str, String)> = key.map(|key| ("idempotency-key", key.to_string())).into_iter().collect();
    call_raw(router, method, path, body.map(|b| b.to_string()), &headers).await
}

/// Calls a node's HTTP API with `body` as exactly these bytes (JSON) and
/// `headers` besides: what a signed request needs.
pub async fn call_raw(
    router: axum::Router,
    method: &str,
    path: &str,
    body: Option<String>,
    headers: &[(&str, String)],
) -> Option<ApiAnswer> {
    let mut request =
        Request::builder().method(method).uri(path).header("authorization", format!("Bearer {SIM_ADMIN_TOKEN}"));
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let body = body.map(Body::from).unwrap_or_else(Body::empty);
    let response = router.oneshot(request.body(body).ok()?).await.ok()?;
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 4 * 1024 * 1024).await.ok()?;
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Some(ApiAnswer { status, body })
}

/// Milliseconds of true time since `origin`.
pub fn elapsed_ms(origin: Instant) -> u64 {
    origin.elapsed().as_millis() as u64
}
