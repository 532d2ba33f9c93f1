//! Clustering glue: writes forwarded to the leader, membership changes,
//! and the local write path the node-to-node RPC calls.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use hookraft_api::context::{AdminError, AdminFuture, ClusterAdmin, Member};
use hookraft_api::routes::internal::{LocalWrite, LocalWriteError, LocalWriteFuture};
use hookraft_core::clock::Clock;
use hookraft_core::command::{Command, Response};
use hookraft_core::ids::NodeId;
use hookraft_core::propose::{ProposeError, ProposeFuture, Proposer};
use hookraft_core::redact::SecretString;
use hookraft_raft::http_network::{ForwardError, LinkSender, forward_command};
use hookraft_raft::rpc::Committed;

use crate::log_writer::{LogWriter, Written};
use hookraft_raft::{Raft, StateHandle};

/// How long a write forwarded to the leader may take.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one proposal keeps trying across elections before the API
/// answers 503: longer than an election takes, shorter than a client's patience.
pub const PROPOSE_DEADLINE: Duration = Duration::from_secs(5);
/// Longest pause between tries while the cluster elects a leader.
const LEADER_WAIT: Duration = Duration::from_millis(200);
/// How long an admin call the leader answers for this node may take.
const VIA_LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a membership change (adding a learner, removing a node) may
/// take to commit. openraft's `change_membership` can wait forever when
/// leadership moves during the change (found by the simulator, seed
/// 90071), and without a majority nothing commits; an admin call must answer.
const MEMBERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_secs(20);

/// A boxed future for [`PeerClient::forward`].
pub type ForwardFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Committed, ForwardError>> + Send + 'a>>;

/// A boxed future for [`PeerClient::prove`].
pub type ProveFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>;

/// How a node hands a write to the leader: HTTP between processes, an
/// in-memory network in the simulator.
pub trait PeerClient: Send + Sync + 'static {
    /// Asks node `target`, reachable at `addr`, to commit `command`.
    fn forward<'a>(
        &'a self,
        target: NodeId,
        addr: &'a str,
        command: &'a Command,
        timeout: Duration,
    ) -> ForwardFuture<'a>;

    /// Whether node `target` at `addr` proves it holds the cluster secret
    /// (`hookraft_raft::link`): asked before a node is added, so that the
    /// cluster sends nothing to an address that cannot.
    fn prove<'a>(&'a self, target: NodeId, addr: &'a str) -> ProveFuture<'a>;
}

/// [`PeerClient`] over the node-to-node HTTP RPC.
pub struct HttpPeers {
    pub client: reqwest::Client,
    /// Signs every call; `None` on a node without a shared cluster secret.
    pub link: Option<Arc<LinkSender>>,
    /// Call peers over HTTPS.
    pub https: bool,
}

impl PeerClient for HttpPeers {
    fn forward<'a>(
        &'a self,
        target: NodeId,
        addr: &'a str,
        command: &'a Command,
        timeout: Duration,
    ) -> ForwardFuture<'a> {
        Box::pin(async move {
            let base = hookraft_raft::http_network::peer_base(addr, self.https);
            let signer = self.link.as_deref().map(|link| (link, target));
            forward_command(&self.client, &base, signer, command, timeout).await
        })
    }

    fn prove<'a>(&'a self, target: NodeId, addr: &'a str) -> ProveFuture<'a> {
        Box::pin(async move {
            let link = self.link.as_ref().ok_or("this node has no shared cluster secret")?;
            let base = hookraft_raft::http_network::peer_base(addr, self.https);
            link.prove(&self.client, target, &base).await
        })
    }
}

/// The node's [`Proposer`]: commits locally when leader, forwards to the
/// leader otherwise, and retries across an election. Answers `NoLeader`
/// (503 at the API) when no leader can be reached; never reports success
/// for a write that did not commit.
pub struct ClusterProposer {
    pub raft: Raft,
    pub writer: LogWriter,
    pub peers: Arc<dyn PeerClient>,
}

impl ClusterProposer {
    /// The leader this node knows of, with its address.
    fn leader(&self) -> Option<(NodeId, Option<String>)> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let leader = hookraft_raft::known_leader(&m)?;
        Some((leader, m.membership_config.membership().get_node(&leader).map(|n| n.addr.clone())))
    }

    fn is_self(&self, id: NodeId) -> bool {
        self.raft.metrics().borrow().id == id
    }

    /// Resolves when this node's view of the leader differs from `from`.
    async fn leader_changed(&self, from: Option<NodeId>) {
        let mut metrics = self.raft.metrics();
        while hookraft_raft::known_leader(&metrics.borrow_and_update()) == from {
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Forwards to the leader; gives up early if another leader is elected
    /// meanwhile (a paused or cut-off leader still accepts connections).
    async fn forward(&self, leader: NodeId, addr: &str, command: &Command) -> Option<Result<Response, ProposeError>> {
        let forwarded = tokio::select! {
            result = self.peers.forward(leader, addr, command, FORWARD_TIMEOUT) => result,
            () = self.leader_changed(Some(leader)) => return None,
        };
        match forwarded {
            Ok(committed) => {
                // Read-your-writes: the caller reads this node's replica next.
                let wait = self.raft.wait(Some(FORWARD_TIMEOUT));
                // Until then the write is not reported done: callers (a
                // heartbeat extending this node's lease, above all) rely on
                // this replica having applied everything up to it.
                match wait.applied_index_at_least(Some(committed.log_index), "forwarded write").await {
                    Ok(_) => Some(Ok(committed.response)),
                    Err(error) => {
                        tracing::warn!(%error, "forwarded write committed but not applied here in time");
                        Some(Err(ProposeError::Other("committed, but not yet applied on this node".into())))
                    }
                }
            }
            Err(ForwardError::Rejected(detail)) => Some(Err(ProposeError::Other(detail))),
            Err(error) => {
                tracing::debug!(%error, %addr, "forward to leader failed");
                None
            }
        }
    }
}

impl Proposer for ClusterProposer {
    /// Commits locally when leading, forwards to the leader otherwise, and
    /// keeps trying across an election until [`PROPOSE_DEADLINE`]. A forward
    /// that failed or timed out may still have committed; retrying it is
    /// within at-least-once (ingest is exactly-once with an idempotency key).
    fn propose(&self, command: Command) -> ProposeFuture<'_> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + PROPOSE_DEADLINE;
            loop {
                if self.raft.metrics().borrow().running_state.is_err() {
                    return Err(ProposeError::ShuttingDown);
                }
                let leader = self.leader();
                let attempt = match &leader {
                    Some((id, _)) if self.is_self(*id) => match self.writer.write(command.clone()).await {
                        Written::Applied(committed) => return Ok(committed.response),
                        Written::Failed(error) => return Err(error),
                        Written::NotLeader { .. } => None,
                    },
                    Some((id, Some(addr))) => self.forward(*id, addr, &command).await,
                    Some((_, None)) | None => None,
                };
                if let Some(result) = attempt {
                    return result;
                }
                // Wait for a (different) leader, a little, then try again.
                let before = leader.map(|(id, _)| id);
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                if remaining.is_zero() {
                    return Err(ProposeError::NoLeader);
                }
                let pause = remaining.min(LEADER_WAIT);
                let _ = tokio::time::timeout(pause, self.leader_changed(before)).await;
            }
        })
    }
}

/// Why a node without a shared cluster secret takes no members.
pub const NO_SHARED_SECRET: &str = "this node was started without a cluster secret, so it keeps one of its own \
     that no other node knows, and a new node could not talk to it: restart it with --cluster-secret (or \
     HOOKRAFT_CLUSTER_SECRET) and start the new node with the same secret, then add it";

/// Membership changes through openraft, from the leader. A follower passes
/// the change on to the leader's admin API.
pub struct MembershipAdmin {
    pub raft: Raft,
    pub state: StateHandle,
    pub clock: Arc<dyn Clock>,
    /// Built on the first forward to the leader: building one loads the
    /// system's root certificates, which every node start (and every
    /// simulated one) would otherwise pay for nothing.
    pub client: std::sync::OnceLock<reqwest::Client>,
    /// False when the node runs on a secret of its own: no other node knows
    /// it, so none can join.
    pub shared_cluster_secret: bool,
    /// `Some` when the nodes speak HTTPS: the authority trusted for them
    /// (empty: the system's roots).
    pub peer_tls: Option<Vec<reqwest::Certificate>>,
    /// The learners this node, leading, makes voters once caught up.
    pub promotions: crate::promote::Promotions,
    /// Asks a node to be added to prove it holds the cluster secret.
    pub peers: Arc<dyn PeerClient>,
}

impl MembershipAdmin {
    fn client(&self) -> Result<&reqwest::Client, AdminError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let builder = match &self.peer_tls {
            Some(roots) if !roots.is_empty() => reqwest::Client::builder().tls_certs_only(roots.clone()),
            _ => reqwest::Client::builder(),
        };
        let client = builder
            .no_proxy()
            .retry(reqwest::retry::never())
            .connect_timeout(Duration::from_secs(1))
            // Below the listener's header timeout, which closes idle connections.
            .pool_idle_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| AdminError::Unavailable(format!("cannot build an HTTP client: {e}")))?;
        Ok(self.client.get_or_init(|| client))
    }

    fn leader(&self) -> Result<(NodeId, Option<String>, bool), AdminError> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let leader = hookraft_raft::known_leader(&m)
            .ok_or_else(|| AdminError::Unavailable("no leader; retry shortly".into()))?;
        let addr = m.membership_config.membership().get_node(&leader).map(|n| n.addr.clone());
        Ok((leader, addr, leader == m.id))
    }

    /// Sends the same admin request to the leader, with the caller's token.
    async fn via_leader(
        &self,
        method: reqwest::Method,
        path: String,
        body: Option<serde_json::Value>,
        bearer: Option<SecretString>,
    ) -> Result<(), AdminError> {
        let (leader, addr, _) = self.leader()?;
        let addr = addr.ok_or_else(|| AdminError::Unavailable(format!("leader {leader} has no address")))?;
        let base = hookraft_raft::http_network::peer_base(&addr, self.peer_tls.is_some());
        let mut request = self.client()?.request(method, format!("{base}{path}")).timeout(VIA_LEADER_TIMEOUT);
        if let Some(token) = &bearer {
            request = request.bearer_auth(token.expose());
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.map_err(|e| AdminError::Unavailable(format!("leader unreachable: {e}")))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let detail = response.text().await.unwrap_or_default();
        Err(match status.as_u16() {
            404 => AdminError::NotFound(detail),
            409 => AdminError::Conflict(detail),
            401 | 403 => AdminError::Unavailable(format!("the leader refused the token ({status}): {detail}")),
            _ => AdminError::Unavailable(format!("leader answered {status}: {detail}")),
        })
    }

    /// Removes learner `id` (an add not yet promoted), or says there is none.
    async fn remove_learner(&self, id: NodeId) -> Result<(), AdminError> {
        if self.raft.metrics().borrow().membership_config.membership().get_node(&id).is_none() {
            return Err(AdminError::NotFound(format!("node {id} is not a member")));
        }
        let change = openraft::ChangeMembers::RemoveNodes(BTreeSet::from([id]));
        tokio::time::timeout(MEMBERSHIP_CHANGE_TIMEOUT, self.raft.change_membership(change, false))
            .await
            .map_err(|_| AdminError::Unavailable(format!("removing learner {id} did not commit in time")))?
            .map_err(|e| AdminError::Conflict(e.to_string()))?;
        Ok(())
    }

    fn voters(&self) -> BTreeSet<NodeId> {
        self.raft.metrics().borrow().membership_config.membership().voter_ids().collect()
    }
}

impl ClusterAdmin for MembershipAdmin {
    fn members(&self) -> Vec<Member> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let matched = |id: &NodeId| m.replication.as_ref().map(|r| r.get(id).copied().flatten().map(|log| log.index));
        membership
            .nodes()
            .map(|(id, node)| Member {
                id: *id,
                addr: node.addr.clone(),
                voter: voters.contains(id),
                entries_behind: matched(id)
                    .and_then(|matched| crate::promote::entries_behind(m.last_log_index, matched)),
            })
            .collect()
    }

    fn add_node(&self, id: NodeId, addr: String, bearer: Option<SecretString>) -> AdminFuture<'_> {
        Box::pin(async move {
            if !self.shared_cluster_secret {
                return Err(AdminError::Conflict(NO_SHARED_SECRET.into()));
            }
            let (_, _, leading) = self.leader()?;
            if !leading {
                let body = serde_json::json!({ "id": id, "addr": addr });
                return self.via_leader(reqwest::Method::POST, "/v1/cluster/nodes".into(), Some(body), bearer).await;
            }
            // Nothing of the cluster goes to an address that cannot prove
            // it holds the secret (a forged or mistyped member).
            if let Err(why) = self.peers.prove(id, &addr).await {
                return Err(AdminError::Conflict(format!(
                    "node {id} at {addr} did not prove it holds the cluster secret, so nothing was sent to it \
                     ({why}); start it with the cluster's --cluster-secret and --node-id {id}, then add it again"
                )));
            }
            // The learner is added (replication to it set up) and the
            // answer goes at once; it becomes a voter in the background
            // once it caught up (`promote.rs`): installing a long history
            // can take minutes.
            let node = openraft::BasicNode::new(addr);
            tokio::time::timeout(MEMBERSHIP_CHANGE_TIMEOUT, self.raft.add_learner(id, node, false))
                .await
                .map_err(|_| AdminError::Unavailable(format!("adding learner {id} did not commit in time")))?
                .map_err(|e| AdminError::Conflict(e.to_string()))?;
            self.promotions.start(self.raft.clone(), id);
            Ok(())
        })
    }

    fn remove_node(&self, id: NodeId, bearer: Option<SecretString>) -> AdminFuture<'_> {
        Box::pin(async move {
            let (_, _, leading) = self.leader()?;
            if !leading {
                let path = format!("/v1/cluster/nodes/{id}");
                return self.via_leader(reqwest::Method::DELETE, path, None, bearer).await;
            }
            let mut voters = self.voters();
            if !voters.remove(&id) {
                return self.remove_learner(id).await;
            }
            let now_ms = self.clock.wall_ms();
            let live = {
                let state = self.state.read();
                voters.iter().filter(|v| state.nodes.get(v).is_some_and(|n| n.live_until_ms > now_ms)).count()
            };
            if voters.is_empty() || live < voters.len() / 2 + 1 {
                return Err(AdminError::Conflict(format!(
                    "removing node {id} would leave {live} live of {} voters, no majority",
                    voters.len()
                )));
            }
            let change = self.raft.change_membership(voters, false);
            tokio::time::timeout(MEMBERSHIP_CHANGE_TIMEOUT, change)
                .await
                .map_err(|_| {
                    AdminError::Unavailable(format!(
                        "removing node {id} did not commit within {} s; it may still: see GET /v1/cluster",
                        MEMBERSHIP_CHANGE_TIMEOUT.as_secs()
                    ))
                })?
                .map_err(|e| AdminError::Conflict(e.to_string()))?;
            Ok(())
        })
    }
}

/// The write path of `/internal/propose`: commit here if leading, else say who leads.
pub struct RaftLocalWrite {
    pub writer: LogWriter,
}

impl LocalWrite for RaftLocalWrite {
    fn write(&self, command: Command) -> LocalWriteFuture<'_> {
        Box::pin(async move {
            match self.writer.write(command).await {
                Written::Applied(committed) => Ok(committed),
                Written::NotLeader { leader } => Err(LocalWriteError::NotLeader { leader: leader.map(|(id, _)| id) }),
                Written::Failed(error) => Err(LocalWriteError::Failed(error.to_string())),
            }
        })
    }
}
