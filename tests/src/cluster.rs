//! [`TestCluster`]: three real `hookraft serve` processes forming one cluster
//! on loopback.
//!
//! The cluster picks its ports first (every node is told its peers), starts
//! every node with `--node-id`, `--listen`, `--advertise`, `--peers`, a shared
//! `--cluster-secret`, `--lease-ms` and `--allow-private-targets`, then waits
//! until every node answers `/readyz` with 200 and every node's
//! `GET /v1/cluster` names the same leader. Nodes can be killed (`kill -9`),
//! restarted on the same port and data, paused (`SIGSTOP`) and resumed.
//!
//! Status polls use a short per-request timeout and skip nodes that are
//! killed or paused, so a poll never stalls on a node the test took down.
//! [`shard_of_endpoint`] recomputes the endpoint → shard hash (ARCHITECTURE §5) so a
//! test can pick endpoints by the node that owns them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use crate::api::str_field;
use crate::node::{NodeOptions, TestNode};
use crate::poll::wait_for;

/// Shards endpoints are spread over (ARCHITECTURE §5).
pub const SHARD_COUNT: u16 = 64;
/// Lease the tests run with unless told otherwise: short, so failovers are quick.
pub const LEASE_MS_DEFAULT: u64 = 2_000;
/// How long past a node's expired liveness the leader waits before moving its
/// shards (the clock-drift margin of ARCHITECTURE §5).
pub const LIVENESS_MARGIN: Duration = Duration::from_secs(1);
/// How long forming a cluster, electing a leader or settling the shard map may
/// take. Generous: two cores, three nodes per test, tests in parallel.
pub const CLUSTER_DEADLINE: Duration = Duration::from_secs(90);
/// Pause between two polls of the cluster status.
const STATUS_POLL: Duration = Duration::from_millis(100);
/// Per-request timeout of status probes, so a dying node cannot stall a poll.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// FNV-1a 64 of the endpoint id's bytes, modulo [`SHARD_COUNT`]: the shard an
/// endpoint lives in, computed exactly as the nodes do.
pub fn shard_of_endpoint(endpoint_id: &str) -> u16 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in endpoint_id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    u16::try_from(hash % u64::from(SHARD_COUNT)).expect("a value below 64 fits in u16")
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of nodes, ids `1..=size`.
    pub size: u64,
    /// `--lease-ms` of every node.
    pub lease_ms: u64,
    /// `--cluster-secret` shared by every node.
    pub cluster_secret: String,
    /// Options every node starts from (token, env, binary); port and cluster
    /// flags are added per node.
    pub node: NodeOptions,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            size: 3,
            lease_ms: LEASE_MS_DEFAULT,
            cluster_secret: unique_cluster_secret(),
            node: NodeOptions::default(),
        }
    }
}

/// A cluster secret no other test cluster shares. Tests run in parallel and
/// a killed node's port can be taken by another test's node before the
/// first test restarts it: with one secret for all, the first cluster's
/// leader then replicated into the other cluster's node, whose Raft gave
/// up on the foreign log. With a secret each, that node answers 401.
fn unique_cluster_secret() -> String {
    static CLUSTERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("e2e-cluster-secret-of-test-run-{}-{n}", std::process::id())
}

/// The admin token of [`ClusterOptions::with_admin_token`].
pub const ADMIN_TOKEN: &str = "e2e-admin-token-5f0c9d1e";

impl ClusterOptions {
    /// Starts every node with [`ADMIN_TOKEN`], which membership changes
    /// need; the helpers send it (and every `/v1` call then needs a token).
    pub fn with_admin_token(mut self) -> Self {
        self.node = self.node.admin_token(ADMIN_TOKEN);
        self
    }

    pub fn lease_ms(mut self, lease_ms: u64) -> Self {
        self.lease_ms = lease_ms;
        self
    }
}

/// `GET /v1/cluster` as one node sees it.
#[derive(Debug, Clone, Deserialize)]
pub struct ClusterView {
    pub node_id: u64,
    pub leader_id: Option<u64>,
    #[serde(default)]
    pub term: u64,
    pub nodes: Vec<NodeView>,
    pub shards: Vec<ShardView>,
    #[serde(default)]
    pub outcomes_rejected_stale: u64,
}

/// One entry of `nodes`.
#[derive(Debug, Clone, Deserialize)]
pub struct NodeView {
    pub id: u64,
    #[serde(default)]
    pub addr: Option<String>,
    #[serde(default)]
    pub voter: Option<bool>,
    #[serde(default)]
    pub member: bool,
    #[serde(default)]
    pub entries_behind: Option<u64>,
    pub live: bool,
    pub draining: bool,
    pub shards_owned: usize,
}

/// One entry of `shards`.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct ShardView {
    pub shard: u16,
    pub owner: Option<u64>,
    pub token: u64,
}

impl ClusterView {
    /// The grant of `shard`; panics when the map lacks it.
    pub fn shard(&self, shard: u16) -> ShardView {
        *self.shards.iter().find(|s| s.shard == shard).unwrap_or_else(|| panic!("shard {shard} missing from {self:?}"))
    }

    pub fn owner_of(&self, shard: u16) -> Option<u64> {
        self.shard(shard).owner
    }

    pub fn node(&self, id: u64) -> Option<&NodeView> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Shards whose owner is `id`, ascending.
    pub fn shards_of(&self, id: u64) -> Vec<u16> {
        self.shards.iter().filter(|s| s.owner == Some(id)).map(|s| s.shard).collect()
    }

    /// Nodes owning at least one shard.
    pub fn owners(&self) -> BTreeSet<u64> {
        self.shards.iter().filter_map(|s| s.owner).collect()
    }

    pub fn unowned(&self) -> usize {
        self.shards.iter().filter(|s| s.owner.is_none()).count()
    }

    /// `owner → number of shards`, for printing.
    pub fn distribution(&self) -> BTreeMap<u64, usize> {
        let mut counts = BTreeMap::new();
        for owner in self.shards.iter().filter_map(|s| s.owner) {
            *counts.entry(owner).or_insert(0) += 1;
        }
        counts
    }

    /// Ids of the nodes reported live.
    pub fn live(&self) -> BTreeSet<u64> {
        self.nodes.iter().filter(|n| n.live).map(|n| n.id).collect()
    }
}

/// A running cluster; every node is killed when it is dropped (and prints its
/// log tail when the test panicked).
pub struct TestCluster {
    nodes: BTreeMap<u64, TestNode>,
    ports: BTreeMap<u64, u16>,
    /// Nodes paused with SIGSTOP: status polls skip them.
    stopped: BTreeSet<u64>,
    options: ClusterOptions,
}

impl TestCluster {
    /// Three nodes, lease 2 s, waited until they agree on a leader.
    pub async fn start() -> Self {
        Self::start_with(ClusterOptions::default()).await
    }

    pub async fn start_with(options: ClusterOptions) -> Self {
        assert!(options.size >= 1, "a cluster needs a node");
        let ids: Vec<u64> = (1..=options.size).collect();
        let ports: BTreeMap<u64, u16> = ids.iter().copied().zip(distinct_free_ports(ids.len())).collect();
        let mut cluster = Self { nodes: BTreeMap::new(), ports, stopped: BTreeSet::new(), options };
        let peers = cluster.peers_arg(&ids);
        for &id in &ids {
            let node = TestNode::launch(cluster.node_options(id, &peers));
            cluster.nodes.insert(id, node);
        }
        futures::future::join_all(cluster.nodes.values_mut().map(TestNode::wait_until_ready)).await;
        cluster.leader_id().await;
        cluster
    }

    /// The cluster secret its nodes share.
    pub fn cluster_secret(&self) -> &str {
        &self.options.cluster_secret
    }

    /// `1=127.0.0.1:P1,2=127.0.0.1:P2,...` over `ids`.
    pub fn peers_arg(&self, ids: &[u64]) -> String {
        ids.iter().map(|id| format!("{id}={}", self.addr(*id))).collect::<Vec<_>>().join(",")
    }

    fn node_options(&self, id: u64, peers: &str) -> NodeOptions {
        let port = self.ports[&id];
        let mut options = self.options.node.clone().port(port);
        options.allow_private_targets = true;
        options.args([
            "--node-id".to_owned(),
            id.to_string(),
            "--advertise".to_owned(),
            self.addr(id),
            "--peers".to_owned(),
            peers.to_owned(),
            "--cluster-secret".to_owned(),
            self.options.cluster_secret.clone(),
            "--lease-ms".to_owned(),
            self.options.lease_ms.to_string(),
        ])
    }

    /// Starts node `id` (not yet a member) on a fresh port with `--peers`
    /// listing every node plus itself, without waiting for readiness: it is
    /// ready only once an admin adds it (`POST /v1/cluster/nodes`).
    pub fn launch_joining_node(&mut self, id: u64) -> &mut TestNode {
        assert!(!self.nodes.contains_key(&id), "node {id} already exists");
        self.ports.insert(id, distinct_free_ports(1)[0]);
        let ids: Vec<u64> = self.ports.keys().copied().collect();
        let peers = self.peers_arg(&ids);
        let node = TestNode::launch(self.node_options(id, &peers));
        self.nodes.entry(id).or_insert(node)
    }

    /// The lease every node runs with.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.options.lease_ms)
    }

    /// Lease plus liveness margin: how long after a node stops heartbeating
    /// the leader may move its shards, at the earliest.
    pub fn failover_bound(&self) -> Duration {
        self.lease() + LIVENESS_MARGIN
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// `127.0.0.1:<port>` of node `id`.
    pub fn addr(&self, id: u64) -> String {
        format!("127.0.0.1:{}", self.ports[&id])
    }

    /// `(id, http://127.0.0.1:<port>)` of every node, for tasks that need owned URLs.
    pub fn base_urls(&self) -> Vec<(u64, String)> {
        let scheme = if self.options.node.tls { "https" } else { "http" };
        self.ports.iter().map(|(id, port)| (*id, format!("{scheme}://127.0.0.1:{port}"))).collect()
    }

    pub fn node(&self, id: u64) -> &TestNode {
        self.nodes.get(&id).unwrap_or_else(|| panic!("no node {id} in the cluster"))
    }

    pub fn node_mut(&mut self, id: u64) -> &mut TestNode {
        self.nodes.get_mut(&id).unwrap_or_else(|| panic!("no node {id} in the cluster"))
    }

    /// Nodes that run and are not paused: the ones a poll may ask.
    pub fn responsive_ids(&self) -> Vec<u64> {
        self.nodes.iter().filter(|(id, n)| n.is_running() && !self.stopped.contains(id)).map(|(id, _)| *id).collect()
    }

    /// `kill -9` node `id`.
    pub async fn kill9(&mut self, id: u64) {
        self.stopped.remove(&id);
        self.node_mut(id).kill9().await;
    }

    /// Starts node `id` again on its port and data directory and waits for its `/readyz`.
    pub async fn restart(&mut self, id: u64) {
        self.stopped.remove(&id);
        self.node_mut(id).restart().await;
    }

    /// Pauses node `id` with SIGSTOP.
    pub fn sigstop(&mut self, id: u64) {
        self.node(id).sigstop();
        self.stopped.insert(id);
    }

    /// Resumes node `id` with SIGCONT.
    pub fn sigcont(&mut self, id: u64) {
        self.node(id).sigcont();
        self.stopped.remove(&id);
    }

    /// `GET /v1/cluster` on node `id` under a short timeout.
    pub async fn try_view(&self, id: u64) -> Result<ClusterView, String> {
        let node = self.node(id);
        let request = node.request(Method::GET, "/v1/cluster").timeout(PROBE_TIMEOUT);
        let (status, _, body) = node.try_send(request).await.map_err(|e| format!("node {id}: {e}"))?;
        if status != StatusCode::OK {
            return Err(format!("node {id}: GET /v1/cluster answered {status}: {body}"));
        }
        serde_json::from_value(body.clone())
            .map_err(|e| format!("node {id}: unexpected /v1/cluster shape ({e}): {body}"))
    }

    /// `GET /v1/cluster` on node `id`, retried until it answers 200.
    pub async fn view(&self, id: u64) -> ClusterView {
        let what = format!("GET /v1/cluster on node {id}");
        wait_for(CLUSTER_DEADLINE, STATUS_POLL, &what, async || self.try_view(id).await).await
    }

    /// The leader's view, once the responsive nodes agree on a leader.
    pub async fn leader_view(&self) -> ClusterView {
        let leader = self.leader_id().await;
        self.view(leader).await
    }

    /// Waits until every responsive node names the same leader, itself
    /// responsive, and returns its id.
    pub async fn leader_id(&self) -> u64 {
        self.wait_for_leader_where("every responsive node to name the same leader", |_| true).await
    }

    /// The leader's node.
    pub async fn leader(&self) -> &TestNode {
        let id = self.leader_id().await;
        self.node(id)
    }

    /// Responsive nodes other than the leader.
    pub async fn followers(&self) -> Vec<u64> {
        let leader = self.leader_id().await;
        self.responsive_ids().into_iter().filter(|id| *id != leader).collect()
    }

    /// Waits until the responsive nodes agree on a leader other than
    /// `excluding` and returns it.
    pub async fn wait_for_new_leader(&self, excluding: u64) -> u64 {
        let what = format!("the responsive nodes to agree on a leader other than node {excluding}");
        self.wait_for_leader_where(&what, |leader| leader != excluding).await
    }

    async fn wait_for_leader_where(&self, what: &str, accept: impl Fn(u64) -> bool) -> u64 {
        wait_for(CLUSTER_DEADLINE, STATUS_POLL, what, async || {
            let ids = self.responsive_ids();
            let mut leaders = BTreeMap::new();
            for &id in &ids {
                let view = self.try_view(id).await?;
                leaders.insert(id, view.leader_id);
            }
            let named: BTreeSet<Option<u64>> = leaders.values().copied().collect();
            match named.into_iter().collect::<Vec<_>>().as_slice() {
                [Some(leader)] if ids.contains(leader) && accept(*leader) => Ok(*leader),
                _ => Err(format!("leader per node: {leaders:?}")),
            }
        })
        .await
    }

    /// `(owner, token)` of `shard` as the leader sees it now.
    pub async fn owner_of_shard(&self, shard: u16) -> (Option<u64>, u64) {
        let grant = self.leader_view().await.shard(shard);
        (grant.owner, grant.token)
    }

    /// The shard of `endpoint_id` (see [`shard_of_endpoint`]).
    pub fn shard_of_endpoint(endpoint_id: &str) -> u16 {
        shard_of_endpoint(endpoint_id)
    }

    /// Polls node `id`'s view until `check` returns `Ok`.
    pub async fn wait_view<T>(
        &self,
        id: u64,
        deadline: Duration,
        what: &str,
        check: impl Fn(&ClusterView) -> Result<T, String>,
    ) -> T {
        wait_for(deadline, STATUS_POLL, what, async || {
            let view = self.try_view(id).await?;
            check(&view).map_err(|why| format!("{why}; view: {view:?}"))
        })
        .await
    }

    /// Waits until the leader sees every responsive node live, every shard
    /// owned by a responsive node, and every responsive node that is not
    /// draining owning at least one shard (a fresh cluster first grants
    /// everything to the first live node, then spreads). Returns the
    /// leader's view.
    pub async fn wait_settled(&self) -> ClusterView {
        let leader = self.leader_id().await;
        let responsive: BTreeSet<u64> = self.responsive_ids().into_iter().collect();
        self.wait_view(leader, CLUSTER_DEADLINE, "a settled shard map", |view| {
            let live = view.live();
            if !responsive.is_subset(&live) {
                return Err(format!("live {live:?}, responsive {responsive:?}"));
            }
            let owners = view.owners();
            if view.unowned() > 0 || !owners.is_subset(&responsive) {
                return Err(format!("{} shards unowned, owners {owners:?}", view.unowned()));
            }
            let idle: Vec<u64> = responsive
                .iter()
                .copied()
                .filter(|id| !owners.contains(id) && view.node(*id).is_some_and(|n| !n.draining))
                .collect();
            if !idle.is_empty() {
                return Err(format!("nodes {idle:?} own no shard yet: {:?}", view.distribution()));
            }
            Ok(view.clone())
        })
        .await
    }

    /// Registers endpoints through `via` (with `body`, a `POST /v1/endpoints`
    /// body) until one lands in a shard whose current owner satisfies `want`;
    /// deletes the others. Returns `(endpoint id, secret, shard, owner)`.
    pub async fn register_endpoint_owned_by(
        &self,
        via: u64,
        body: &Value,
        want: impl Fn(u64) -> bool,
    ) -> (String, String, u16, u64) {
        let node = self.node(via);
        let view = self.leader_view().await;
        for _ in 0..(SHARD_COUNT * 4) {
            let (status, _, created) = node.post_json("/v1/endpoints", body).await;
            assert_eq!(status, StatusCode::CREATED, "registering {body} on node {via} answered {created}");
            let id = str_field(&created, "id");
            let shard = shard_of_endpoint(&id);
            match view.owner_of(shard) {
                Some(owner) if want(owner) => return (id, str_field(&created, "secret"), shard, owner),
                _ => {
                    let (status, _, answer) = node.delete(&format!("/v1/endpoints/{id}")).await;
                    assert_eq!(status, StatusCode::NO_CONTENT, "deleting {id} answered {answer}");
                }
            }
        }
        panic!("no endpoint landed on a wanted owner; shard map {:?}", view.distribution())
    }

    /// Sum of a Prometheus metric (every label set) on node `id`; `None`
    /// when the node does not export it.
    pub async fn metric(&self, id: u64, name: &str) -> Option<f64> {
        self.node(id).metric(name, PROBE_TIMEOUT).await
    }

    /// The last `lines` lines of every node's log, labelled.
    pub fn log_tails(&self, lines: usize) -> String {
        self.nodes
            .iter()
            .map(|(id, node)| format!("---- node {id} ({}) ----\n{}", self.addr(*id), node.log_tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Sum of the samples of `name` in Prometheus text (`name 3` or `name{...} 3`).
pub fn parse_metric(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        let value = rest.rsplit(' ').find(|part| !part.is_empty()).and_then(|v| v.parse::<f64>().ok());
        if let Some(value) = value {
            found = Some(found.unwrap_or(0.0) + value);
        }
    }
    found
}

/// `count` distinct ports that were free a moment ago (all bound at once so
/// they differ, then released).
fn distinct_free_ports(count: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> =
        (0..count).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port")).collect();
    listeners.iter().map(|l| l.local_addr().expect("read the bound address").port()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookraft_core::ids::EndpointId;

    #[test]
    fn shard_of_endpoint_matches_the_core_hash() {
        for text in ["ep_01JDZ7Q4S8M3X2V5K9T0B6N1RC", "ep_00000000000000000000000000", "ep_7ZZZZZZZZZZZZZZZZZZZZZZZZZ"]
        {
            let id = EndpointId::parse(text).expect("a valid endpoint id");
            // Ids are canonical (lower case) once parsed; the API answers that form.
            assert_eq!(shard_of_endpoint(&id.as_str()), id.shard(), "{text}");
        }
        assert!(shard_of_endpoint("anything") < SHARD_COUNT);
    }

    #[test]
    fn parse_metric_sums_label_sets_and_ignores_prefix_matches() {
        let text = "# TYPE x counter\nx_total 2\nx_total{node=\"1\"} 3\nx_total_other 40\n";
        assert_eq!(parse_metric(text, "x_total"), Some(5.0));
        assert_eq!(parse_metric(text, "absent"), None);
    }
}
