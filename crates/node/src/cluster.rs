//! Clustering glue: writes forwarded to the leader, membership changes,
//! and the local write path the node-to-node RPC calls.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use hookraft_api::context::{AdminError, AdminFuture, ClusterAdmin, Member};
use hookraft_api::routes::internal::{LocalWrite as LocalWriteTrait, LocalWriteError, LocalWriteFuture};
use hookraft_core::clock::Clock;
use hookraft_core::command::Command;
use hookraft_core::ids::NodeId;
use hookraft_delivery::batcher::{ProposeError, ProposeFuture, Proposer};
use hookraft_raft::http_network::{ForwardError, forward_command};
use hookraft_raft::rpc::Committed;

use crate::log_writer::LogWriter;
use hookraft_raft::{Raft, StateHandle};
use openraft::error::{ClientWriteError, RaftError};

/// How long a write forwarded to the leader may take.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Tries of one proposal across leader changes before giving up with 503.
const PROPOSE_TRIES_MAX: u32 = 4;
/// Pause between tries while the cluster elects a leader.
const LEADER_WAIT: Duration = Duration::from_millis(150);
/// How long adding a node (catching up as a learner) may take.
const ADD_NODE_TIMEOUT: Duration = Duration::from_secs(120);

/// Where a local write ended.
pub enum LocalWrite {
    Applied(Committed),
    NotLeader { leader: Option<(NodeId, String)> },
    Failed(ProposeError),
}

/// Commits on the local Raft if it leads; says who leads otherwise.
pub async fn write_locally(raft: &Raft, command: Command) -> LocalWrite {
    match raft.client_write(command).await {
        Ok(written) => LocalWrite::Applied(Committed { response: written.data, log_index: written.log_id.index }),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            LocalWrite::NotLeader { leader: f.leader_id.zip(f.leader_node.map(|n| n.addr)) }
        }
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
            LocalWrite::Failed(ProposeError::Other(e.to_string()))
        }
        Err(RaftError::Fatal(fatal)) => {
            tracing::error!(%fatal, "raft stopped");
            LocalWrite::Failed(ProposeError::ShuttingDown)
        }
    }
}

/// The node's [`Proposer`]: commits locally when leader, forwards to the
/// leader otherwise, and retries across an election. Answers `NoLeader`
/// (503 at the API) when no leader can be reached; never reports success
/// for a write that did not commit.
pub struct ClusterProposer {
    pub raft: Raft,
    pub writer: LogWriter,
    pub client: reqwest::Client,
    pub cluster_secret: Option<String>,
}

impl Proposer for ClusterProposer {
    fn propose(&self, command: Command) -> ProposeFuture<'_> {
        Box::pin(async move {
            let mut last = ProposeError::NoLeader;
            for attempt in 0..PROPOSE_TRIES_MAX {
                if attempt > 0 {
                    tokio::time::sleep(LEADER_WAIT).await;
                }
                match self.writer.write(command.clone()).await {
                    LocalWrite::Applied(committed) => return Ok(committed.response),
                    LocalWrite::Failed(error) => return Err(error),
                    LocalWrite::NotLeader { leader: None } => last = ProposeError::NoLeader,
                    LocalWrite::NotLeader { leader: Some((_, addr)) } => {
                        let secret = self.cluster_secret.as_deref();
                        match forward_command(&self.client, &addr, secret, &command, FORWARD_TIMEOUT).await {
                            Ok(committed) => {
                                // Read-your-writes: the caller reads this node's replica next.
                                let wait = self.raft.wait(Some(FORWARD_TIMEOUT));
                                let applied = Some(committed.log_index);
                                if let Err(error) =
                                    wait.applied_index_at_least(applied, "forwarded write applied").await
                                {
                                    tracing::warn!(%error, "forwarded write committed but not yet applied here");
                                }
                                return Ok(committed.response);
                            }
                            Err(ForwardError::Rejected(detail)) => return Err(ProposeError::Other(detail)),
                            Err(error) => {
                                tracing::debug!(%error, %addr, "forward to leader failed");
                                last = ProposeError::NoLeader;
                            }
                        }
                    }
                }
            }
            Err(last)
        })
    }
}

/// Membership changes through openraft, from the leader. A follower passes
/// the change on to the leader's admin API.
pub struct MembershipAdmin {
    pub raft: Raft,
    pub state: StateHandle,
    pub clock: Arc<dyn Clock>,
    pub client: reqwest::Client,
    pub admin_token: Option<String>,
}

impl MembershipAdmin {
    fn leader(&self) -> Result<(NodeId, Option<String>, bool), AdminError> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let leader = m.current_leader.ok_or_else(|| AdminError::Unavailable("no leader; retry shortly".into()))?;
        let addr = m.membership_config.membership().get_node(&leader).map(|n| n.addr.clone());
        Ok((leader, addr, leader == m.id))
    }

    /// Sends the same admin request to the leader.
    async fn via_leader(
        &self,
        method: reqwest::Method,
        path: String,
        body: Option<serde_json::Value>,
    ) -> Result<(), AdminError> {
        let (leader, addr, _) = self.leader()?;
        let addr = addr.ok_or_else(|| AdminError::Unavailable(format!("leader {leader} has no address")))?;
        let mut request = self.client.request(method, format!("http://{addr}{path}")).timeout(ADD_NODE_TIMEOUT);
        if let Some(token) = &self.admin_token {
            request = request.bearer_auth(token);
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
            _ => AdminError::Unavailable(format!("leader answered {status}: {detail}")),
        })
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
        membership
            .nodes()
            .map(|(id, node)| Member { id: *id, addr: node.addr.clone(), voter: voters.contains(id) })
            .collect()
    }

    fn add_node(&self, id: NodeId, addr: String) -> AdminFuture<'_> {
        Box::pin(async move {
            let (_, _, leading) = self.leader()?;
            if !leading {
                let body = serde_json::json!({ "id": id, "addr": addr });
                return self.via_leader(reqwest::Method::POST, "/v1/cluster/nodes".into(), Some(body)).await;
            }
            let node = openraft::BasicNode::new(addr);
            let add = async {
                self.raft.add_learner(id, node, true).await.map_err(|e| AdminError::Conflict(e.to_string()))?;
                let mut voters = self.voters();
                voters.insert(id);
                self.raft.change_membership(voters, false).await.map_err(|e| AdminError::Conflict(e.to_string()))?;
                Ok(())
            };
            tokio::time::timeout(ADD_NODE_TIMEOUT, add)
                .await
                .map_err(|_| AdminError::Unavailable(format!("node {id} did not catch up in time")))?
        })
    }

    fn remove_node(&self, id: NodeId) -> AdminFuture<'_> {
        Box::pin(async move {
            let (_, _, leading) = self.leader()?;
            if !leading {
                return self.via_leader(reqwest::Method::DELETE, format!("/v1/cluster/nodes/{id}"), None).await;
            }
            let mut voters = self.voters();
            if !voters.remove(&id) {
                return Err(AdminError::NotFound(format!("node {id} is not a voter")));
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
            self.raft.change_membership(voters, false).await.map_err(|e| AdminError::Conflict(e.to_string()))?;
            Ok(())
        })
    }
}

/// The write path of `/internal/propose`: commit here if leading, else say who leads.
pub struct RaftLocalWrite {
    pub writer: LogWriter,
}

impl LocalWriteTrait for RaftLocalWrite {
    fn write(&self, command: Command) -> LocalWriteFuture<'_> {
        Box::pin(async move {
            match self.writer.write(command).await {
                LocalWrite::Applied(committed) => Ok(committed),
                LocalWrite::NotLeader { leader } => {
                    Err(LocalWriteError::NotLeader { leader: leader.map(|(id, _)| id) })
                }
                LocalWrite::Failed(error) => Err(LocalWriteError::Failed(error.to_string())),
            }
        })
    }
}
