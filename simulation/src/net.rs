//! The simulated network between nodes: openraft's RPCs and forwarded
//! writes travel through one [`SimNet`] that delays, drops, duplicates and
//! reorders them, and can cut any directed link (partitions, one-way links,
//! isolated or crashed nodes). Decisions come from the run's seeded
//! generator; delays are virtual time. Every message is recorded in the trace.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookraft_api::routes::internal::{LocalWrite, LocalWriteError};
use hookraft_core::command::Command;
use hookraft_core::ids::NodeId;
use hookraft_node::cluster::{ForwardFuture, PeerClient};
use hookraft_raft::http_network::ForwardError;
use hookraft_raft::{Raft, TypeConfig};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, RaftNetwork, RaftNetworkFactory};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::trace::Trace;

/// How messages behave on healthy links.
#[derive(Debug, Clone, Copy)]
pub struct LinkModel {
    pub delay_ms_min: u64,
    pub delay_ms_max: u64,
    /// Chance in a million that a message is lost.
    pub drop_ppm: u32,
    /// Chance in a million that a message is delivered twice.
    pub duplicate_ppm: u32,
}

impl Default for LinkModel {
    fn default() -> Self {
        Self { delay_ms_min: 1, delay_ms_max: 5, drop_ppm: 0, duplicate_ppm: 0 }
    }
}

/// A node as the network reaches it.
#[derive(Clone)]
struct Endpoint {
    raft: Raft,
    local_write: Arc<dyn LocalWrite>,
}

struct NetState {
    nodes: BTreeMap<NodeId, Endpoint>,
    /// Directed links that lose everything: (from, to).
    cut: BTreeSet<(NodeId, NodeId)>,
    model: LinkModel,
    rng: StdRng,
}

/// The network of one simulated cluster. Cheap to clone.
#[derive(Clone)]
pub struct SimNet {
    state: Arc<Mutex<NetState>>,
    trace: Trace,
}

/// What the network decided for one request and its reply. A lost
/// message is never reported: the caller learns of it only at its deadline,
/// as over a real network where packets vanish.
enum Fate {
    /// The request arrives after `delay` (twice, with `duplicate`); the
    /// reply comes back unless `reply_lost` (the link back is cut or drops
    /// it), in which case the request still takes effect.
    Deliver { delay: Duration, duplicate: bool, reply_lost: bool },
    /// The request never arrives.
    Lose,
}

impl SimNet {
    pub fn new(seed: u64, trace: Trace) -> Self {
        let state = NetState {
            nodes: BTreeMap::new(),
            cut: BTreeSet::new(),
            model: LinkModel::default(),
            rng: StdRng::seed_from_u64(seed),
        };
        Self { state: Arc::new(Mutex::new(state)), trace }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes a started node reachable.
    pub fn attach(&self, id: NodeId, raft: Raft, local_write: Arc<dyn LocalWrite>) {
        self.lock().nodes.insert(id, Endpoint { raft, local_write });
    }

    /// A crashed node is unreachable until attached again.
    pub fn detach(&self, id: NodeId) {
        self.lock().nodes.remove(&id);
    }

    pub fn set_model(&self, model: LinkModel) {
        self.lock().model = model;
    }

    /// Cuts (or heals) the directed link `from → to`.
    pub fn set_cut(&self, from: NodeId, to: NodeId, cut: bool) {
        let mut state = self.lock();
        if cut {
            state.cut.insert((from, to));
        } else {
            state.cut.remove(&(from, to));
        }
    }

    /// Heals every link.
    pub fn heal(&self) {
        self.lock().cut.clear();
    }

    /// The factory openraft uses on node `me`.
    pub fn factory(&self, me: NodeId) -> SimNetFactory {
        SimNetFactory { me, net: self.clone() }
    }

    /// The peer client node `me` forwards writes with.
    pub fn peers(&self, me: NodeId) -> Arc<dyn PeerClient> {
        Arc::new(SimPeers { me, net: self.clone() })
    }

    /// Decides the fate of a message and finds its target.
    fn route(&self, from: NodeId, to: NodeId, kind: &str) -> Result<(Endpoint, Fate), String> {
        let mut state = self.lock();
        let target = state.nodes.get(&to).cloned();
        let model = state.model;
        let delay = Duration::from_millis(state.rng.random_range(model.delay_ms_min..=model.delay_ms_max));
        let mut dropped = |link| state.cut.contains(&link) || state.rng.random_range(0..1_000_000) < model.drop_ppm;
        let request_lost = dropped((from, to));
        let reply_lost = dropped((to, from));
        let duplicate = state.rng.random_range(0..1_000_000) < model.duplicate_ppm;
        drop(state);
        let Some(target) = target else {
            self.trace.record(format!("net {from}->{to} {kind} unreachable"));
            return Err(format!("node {to} is down"));
        };
        let fate = if request_lost { Fate::Lose } else { Fate::Deliver { delay, duplicate, reply_lost } };
        let label = match &fate {
            Fate::Lose => "lost",
            Fate::Deliver { reply_lost: true, .. } => "noreply",
            Fate::Deliver { duplicate: true, .. } => "dup",
            Fate::Deliver { .. } => "ok",
        };
        self.trace.record(format!("net {from}->{to} {kind} {label} {}ms", delay.as_millis()));
        Ok((target, fate))
    }
}

fn unreachable<E: std::error::Error>(why: String) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(why)))
}

fn timed_out<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::new(std::io::ErrorKind::TimedOut, "rpc timed out")))
}

/// Sends one RPC through the network: delay, loss, duplicate, deadline.
macro_rules! rpc {
    ($self:ident, $kind:literal, $option:ident, $rpc:ident, |$raft:ident, $req:ident| $call:expr) => {{
        let (target, fate) = $self.net.route($self.from, $self.to, $kind).map_err(unreachable)?;
        let deadline = $option.hard_ttl();
        match fate {
            Fate::Lose => {
                tokio::time::sleep(deadline).await;
                Err(timed_out())
            }
            Fate::Deliver { delay, duplicate, reply_lost } => {
                if duplicate {
                    let $raft = target.raft.clone();
                    let $req = $rpc.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay * 2).await;
                        let _ = $call;
                    });
                }
                let $raft = target.raft;
                let $req = $rpc;
                let answer = async move {
                    tokio::time::sleep(delay).await;
                    $call
                };
                if reply_lost {
                    tokio::spawn(answer);
                    tokio::time::sleep(deadline).await;
                    return Err(timed_out());
                }
                match tokio::time::timeout(deadline, answer).await {
                    Err(_) => Err(timed_out()),
                    Ok(Ok(reply)) => Ok(reply),
                    Ok(Err(error)) => Err(unreachable(error.to_string())),
                }
            }
        }
    }};
}

/// Makes openraft clients for node `me`.
#[derive(Clone)]
pub struct SimNetFactory {
    me: NodeId,
    net: SimNet,
}

impl RaftNetworkFactory<TypeConfig> for SimNetFactory {
    type Network = SimPeer;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> SimPeer {
        SimPeer { from: self.me, to: target, net: self.net.clone() }
    }
}

/// openraft's client from one node to another.
pub struct SimPeer {
    from: NodeId,
    to: NodeId,
    net: SimNet,
}

impl RaftNetwork<TypeConfig> for SimPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        rpc!(self, "append", option, rpc, |raft, req| raft.append_entries(req).await)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        rpc!(self, "snapshot", option, rpc, |raft, req| raft.install_snapshot(req).await)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        rpc!(self, "vote", option, rpc, |raft, req| raft.vote(req).await)
    }
}

/// Forwarded writes of node `me`.
struct SimPeers {
    me: NodeId,
    net: SimNet,
}

impl PeerClient for SimPeers {
    fn forward<'a>(
        &'a self,
        target: NodeId,
        _addr: &'a str,
        command: &'a Command,
        timeout: Duration,
    ) -> ForwardFuture<'a> {
        Box::pin(async move {
            let (endpoint, fate) = self.net.route(self.me, target, "propose").map_err(ForwardError::Unreachable)?;
            let (delay, reply_lost) = match fate {
                Fate::Lose => {
                    tokio::time::sleep(timeout).await;
                    return Err(ForwardError::Unreachable("timed out".into()));
                }
                Fate::Deliver { delay, reply_lost, .. } => (delay, reply_lost),
            };
            let command = command.clone();
            let write = async move {
                tokio::time::sleep(delay).await;
                endpoint.local_write.write(command).await
            };
            if reply_lost {
                // The write goes ahead; only its answer is lost.
                tokio::spawn(write);
                tokio::time::sleep(timeout).await;
                return Err(ForwardError::Unreachable("timed out".into()));
            }
            match tokio::time::timeout(timeout, write).await {
                Err(_) => Err(ForwardError::Unreachable("timed out".into())),
                Ok(Ok(committed)) => Ok(committed),
                Ok(Err(LocalWriteError::NotLeader { leader: Some(leader) })) => {
                    Err(ForwardError::NotLeader { leader: Some(leader) })
                }
                Ok(Err(LocalWriteError::NotLeader { leader: None })) => Err(ForwardError::NoLeader),
                Ok(Err(LocalWriteError::Failed(why))) => Err(ForwardError::Rejected(why)),
            }
        })
    }

    /// The simulated network carries no secrets: every simulated node was
    /// started with the cluster's, so each proves it.
    fn prove<'a>(&'a self, _target: NodeId, _addr: &'a str) -> hookraft_node::cluster::ProveFuture<'a> {
        Box::pin(async { Ok(()) })
    }
}
