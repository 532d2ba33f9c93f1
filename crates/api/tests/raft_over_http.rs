//! Real openraft nodes, each with a sled store and the internal routes on
//! a loopback listener, talking through `HttpNetwork`: a three-node cluster
//! elects a leader, replicates, commits forwarded writes, streams a
//! snapshot in chunks to a new learner, and keeps committing with one
//! follower down. Plus the cluster secret check.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use hookraft_api::routes::internal::{self, InternalRpc, LocalWrite, LocalWriteError, LocalWriteFuture};
use hookraft_core::{Command, Response};
use hookraft_raft::rpc::{self, CLUSTER_SECRET_HEADER, Committed};
use hookraft_raft::{
    ForwardError, HttpNetwork, NodeId, Raft, StateHandle, Vote, forward_command, open_sled, raft_config, rpc_client,
};
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Config};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How long any awaited condition may take on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(60);
/// Pause between two looks at a polled condition.
const POLL_PAUSE: Duration = Duration::from_millis(20);
const SECRET: &str = "test-cluster-secret";
/// Small chunks, so the snapshot sent to the learner takes several requests.
const SNAPSHOT_CHUNK_BYTES: u64 = 64;
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Commits on the local Raft, as the node crate does.
struct LeaderWrite {
    raft: Raft,
}

impl LocalWrite for LeaderWrite {
    fn write(&self, command: Command) -> LocalWriteFuture<'_> {
        Box::pin(async move {
            match tokio::time::timeout(WRITE_TIMEOUT, self.raft.client_write(command.into())).await {
                Ok(Ok(written)) => Ok(Committed { response: written.data, log_index: written.log_id.index }),
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                    Err(LocalWriteError::NotLeader { leader: forward.leader_id })
                }
                Ok(Err(error)) => Err(LocalWriteError::Failed(error.to_string())),
                Err(_) => Err(LocalWriteError::Failed("timed out".into())),
            }
        })
    }
}

struct TestNode {
    id: NodeId,
    addr: SocketAddr,
    raft: Raft,
    state: StateHandle,
    /// Snapshot chunk requests this node received.
    snapshot_chunks: Arc<AtomicUsize>,
    server: JoinHandle<()>,
    _dir: TempDir,
}

impl TestNode {
    async fn start(id: NodeId) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log_store, state_machine, state) = open_sled(dir.path(), None).expect("open sled");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let network = HttpNetwork::new(Some(SECRET.into())).expect("network");
        let raft = Raft::new(id, Arc::new(test_config()), network, log_store, state_machine).await.expect("raft");
        let rpc = Arc::new(InternalRpc {
            raft: raft.clone(),
            cluster_secret: SECRET.into(),
            local_write: Arc::new(LeaderWrite { raft: raft.clone() }),
        });
        let snapshot_chunks = Arc::new(AtomicUsize::new(0));
        let counter = snapshot_chunks.clone();
        let app = internal::router(rpc).layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            if request.uri().path() == rpc::SNAPSHOT_PATH {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            next.run(request)
        }));
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        Self { id, addr, raft, state, snapshot_chunks, server, _dir: dir }
    }

    fn node(&self) -> BasicNode {
        BasicNode::new(self.addr.to_string())
    }

    async fn stop(self) {
        self.raft.shutdown().await.expect("shutdown");
        self.server.abort();
    }
}

fn test_config() -> Config {
    Config { snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES, ..raft_config() }.validate().expect("valid config")
}

/// Polls `condition` until it holds, or panics naming `what`.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let polling = async {
        while !condition() {
            tokio::time::sleep(POLL_PAUSE).await;
        }
    };
    tokio::time::timeout(DEADLINE, polling).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// The leader all `nodes` agree on.
async fn agreed_leader(nodes: &[&TestNode]) -> NodeId {
    let mut leader = None;
    eventually("one leader all nodes agree on", || {
        let seen: Vec<_> = nodes.iter().map(|n| n.raft.metrics().borrow().current_leader).collect();
        leader = seen[0];
        leader.is_some() && seen.iter().all(|l| *l == leader)
    })
    .await;
    leader.expect("checked above")
}

/// Commits `command` on whichever node leads, retrying across an election.
async fn write(nodes: &[&TestNode], command: Command) -> Response {
    let attempts = async {
        loop {
            let leader = agreed_leader(nodes).await;
            let node = nodes.iter().find(|n| n.id == leader).expect("the leader is one of the nodes");
            match node.raft.client_write(command.clone().into()).await {
                Ok(written) => return written.data,
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => tokio::time::sleep(POLL_PAUSE).await,
                Err(error) => panic!("write failed: {error}"),
            }
        }
    };
    tokio::time::timeout(DEADLINE, attempts).await.expect("write commits")
}

fn grant(shard: u16, node: NodeId) -> Command {
    Command::AssignShards { now_ms: 1, grants: vec![(shard, node)] }
}

/// Waits until every node in `nodes` holds the same state as `reference`.
async fn converge(what: &str, reference: &TestNode, nodes: &[&TestNode]) {
    eventually(what, || {
        // A copy, not a held guard: `nodes` may include `reference`, and a
        // second read of a state already read on this thread asserts.
        let (applied, expected) = {
            let guard = reference.state.read();
            (guard.last_applied(), (*guard).clone())
        };
        nodes.iter().all(|n| {
            let state = n.state.read();
            state.last_applied() == applied && *state == expected
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_over_http_replicate_forward_and_stream_a_snapshot_to_a_new_learner() {
    let (n1, n2, n3) = (TestNode::start(1).await, TestNode::start(2).await, TestNode::start(3).await);
    let members: BTreeMap<NodeId, BasicNode> = [&n1, &n2, &n3].iter().map(|n| (n.id, n.node())).collect();
    n1.raft.initialize(members).await.expect("initialize");
    let all = [&n1, &n2, &n3];
    let leader_id = agreed_leader(&all).await;

    for shard in 0..5 {
        write(&all, grant(shard, 1)).await;
    }
    let leader = *all.iter().find(|n| n.id == leader_id).expect("leader");
    converge("all three nodes applied five grants", leader, &all).await;
    assert_eq!(n1.state.read().last_token, 5);

    // A follower forwards a write to the leader's /internal/propose.
    let follower = *all.iter().find(|n| n.id != leader_id).expect("a follower");
    let client = rpc_client().expect("client");
    let leader_addr = leader.addr.to_string();
    let forwarded = forward_command(&client, &leader_addr, Some(SECRET), &grant(7, follower.id), WRITE_TIMEOUT).await;
    assert_eq!(forwarded.map(|c| c.response), Ok(Response::ShardsAssigned { tokens: vec![(7, 6)] }));
    converge("the forwarded grant reached every node", leader, &all).await;
    assert_eq!(follower.state.read().shards[7].owner, Some(follower.id));

    // A follower answers a forwarded write with the leader's id.
    let to_follower =
        forward_command(&client, &follower.addr.to_string(), Some(SECRET), &grant(8, 1), WRITE_TIMEOUT).await;
    assert_eq!(to_follower, Err(ForwardError::NotLeader { leader: Some(leader_id) }));
    let wrong_secret = forward_command(&client, &leader_addr, Some("nope"), &grant(8, 1), WRITE_TIMEOUT).await;
    assert!(matches!(wrong_secret, Err(ForwardError::Rejected(_))), "{wrong_secret:?}");

    // Snapshot, purge the log it covers: a new node can only catch up by snapshot.
    let last = leader.state.last_applied().expect("applied entries");
    leader.raft.trigger().snapshot().await.expect("trigger snapshot");
    leader
        .raft
        .wait(Some(DEADLINE))
        .metrics(|m| m.snapshot.is_some_and(|s| s.index >= last.index), "snapshot built")
        .await
        .expect("snapshot built");
    leader.raft.trigger().purge_log(last.index).await.expect("trigger purge");
    leader
        .raft
        .wait(Some(DEADLINE))
        .metrics(|m| m.purged.is_some_and(|p| p.index >= last.index), "log purged")
        .await
        .expect("log purged");

    let n4 = TestNode::start(4).await;
    tokio::time::timeout(DEADLINE, leader.raft.add_learner(4, n4.node(), true))
        .await
        .expect("add_learner in time")
        .expect("add learner");
    converge("the learner caught up", leader, &[&n4]).await;
    assert!(n4.raft.metrics().borrow().snapshot.is_some_and(|s| s.index >= last.index), "installed a snapshot");
    let chunks = n4.snapshot_chunks.load(Ordering::SeqCst);
    assert!(chunks > 1, "the snapshot came in several chunks, got {chunks}");

    // One follower down: the other two voters still commit, the learner follows.
    let mut voters: Vec<TestNode> = vec![n1, n2, n3];
    let down = voters.iter().position(|n| n.id != leader_id).expect("a follower");
    voters.remove(down).stop().await;
    let alive: Vec<&TestNode> = voters.iter().collect();
    let token = match write(&alive, grant(9, leader_id)).await {
        Response::ShardsAssigned { tokens } => tokens[0].1,
        other => panic!("unexpected response {other:?}"),
    };
    assert_eq!(token, 7);
    let leader = *alive.iter().find(|n| n.id == agreed_leader_now(&alive)).expect("leader");
    converge("the surviving nodes and the learner applied the last grant", leader, &[alive[0], alive[1], &n4]).await;

    n4.stop().await;
    for node in voters {
        node.stop().await;
    }
}

fn agreed_leader_now(nodes: &[&TestNode]) -> NodeId {
    nodes[0].raft.metrics().borrow().current_leader.expect("a leader")
}

#[tokio::test]
async fn internal_routes_refuse_a_missing_or_wrong_secret_and_bad_bodies() {
    let node = TestNode::start(1).await;
    let client = rpc_client().expect("client");
    let url = format!("http://{}{}", node.addr, rpc::VOTE_PATH);
    let request = rpc::VoteRequest { vote: Vote::new(1, 2), last_log_id: None };
    let body = rpc::encode("vote", &request).expect("encode");
    let send = |secret: Option<&'static str>, body: Vec<u8>| {
        let mut builder = client.post(&url).timeout(WRITE_TIMEOUT).body(body);
        if let Some(secret) = secret {
            builder = builder.header(CLUSTER_SECRET_HEADER, secret);
        }
        builder.send()
    };

    let status = |r: Result<reqwest::Response, reqwest::Error>| r.expect("answered").status().as_u16();
    assert_eq!(status(send(None, body.clone()).await), 401, "no secret");
    assert_eq!(status(send(Some("wrong"), body.clone()).await), 401, "wrong secret");
    assert_eq!(status(send(Some(SECRET), vec![0xff; 3]).await), 400, "garbage body");
    // Bigger than the public API's 1 MiB limit, under the internal 64 MiB one.
    assert_eq!(status(send(Some(SECRET), vec![0xff; 2 * 1024 * 1024]).await), 400, "large garbage body");

    let answered = send(Some(SECRET), body).await.expect("answered");
    assert_eq!(answered.status().as_u16(), 200);
    let bytes = answered.bytes().await.expect("body");
    let reply: hookraft_raft::RaftReply<rpc::VoteReply> = rpc::decode("vote reply", &bytes).expect("decodes");
    assert!(matches!(reply, hookraft_raft::RaftReply::Ok(ref v) if v.vote_granted), "{reply:?}");
    node.stop().await;
}
