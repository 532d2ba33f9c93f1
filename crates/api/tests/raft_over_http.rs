//! Real openraft nodes, each with a sled store and the internal routes on
//! a loopback listener, talking through `HttpNetwork`: a three-node cluster
//! elects a leader, replicates, commits forwarded writes, streams a
//! snapshot in chunks to a new learner, and keeps committing with one
//! follower down. Plus the link signature's checks.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use hookraft_api::routes::internal::{self, InternalRpc, LocalWrite, LocalWriteError, LocalWriteFuture};
use hookraft_core::clock::Clock;
use hookraft_core::{Command, Response};
use hookraft_raft::http_network::peer_base;
use hookraft_raft::link::{self, LinkKey, Stamp};
use hookraft_raft::rpc::{self, Committed};
use hookraft_raft::{
    ForwardError, HttpNetwork, LinkSender, NodeId, Raft, StateHandle, Vote, forward_command, open_sled, raft_config,
    rpc_client,
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
const SECRET: &str = "test-cluster-secret-of-32-chars-or-more";

/// The machine's wall clock (the node crate's `SystemClock` is not a
/// dependency here).
struct WallClock;

impl Clock for WallClock {
    #[allow(clippy::disallowed_methods)] // a test's stand-in for the node's clock
    fn wall_ms(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        0
    }
}

/// Node `id`'s signer for `secret`.
fn sender(secret: &str, id: NodeId) -> Arc<LinkSender> {
    Arc::new(LinkSender::new(secret, id, 0x5eed_0000 + id, Arc::new(WallClock)))
}
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
        let network = HttpNetwork::new(Some(sender(SECRET, id))).expect("network");
        let raft = Raft::new(id, Arc::new(test_config()), network, log_store, state_machine).await.expect("raft");
        let rpc = Arc::new(InternalRpc {
            raft: raft.clone(),
            node_id: id,
            link_key: LinkKey::derive(SECRET),
            replay: Default::default(),
            clock: Arc::new(WallClock),
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
    let leader_addr = peer_base(&leader.addr.to_string(), false);
    let link = sender(SECRET, follower.id);
    let to_leader = Some((&*link, leader_id));
    let forwarded = forward_command(&client, &leader_addr, to_leader, &grant(7, follower.id), WRITE_TIMEOUT).await;
    assert_eq!(forwarded.map(|c| c.response), Ok(Response::ShardsAssigned { tokens: vec![(7, 6)] }));
    converge("the forwarded grant reached every node", leader, &all).await;
    assert_eq!(follower.state.read().shards[7].owner, Some(follower.id));

    // A follower answers a forwarded write with the leader's id.
    let follower_addr = peer_base(&follower.addr.to_string(), false);
    let to_follower =
        forward_command(&client, &follower_addr, Some((&*link, follower.id)), &grant(8, 1), WRITE_TIMEOUT).await;
    assert_eq!(to_follower, Err(ForwardError::NotLeader { leader: Some(leader_id) }));
    let stranger = sender("another-cluster-secret-of-32-chars-x", follower.id);
    let wrong_secret =
        forward_command(&client, &leader_addr, Some((&*stranger, leader_id)), &grant(8, 1), WRITE_TIMEOUT).await;
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
async fn internal_routes_refuse_unsigned_forged_misaddressed_stale_or_replayed_requests_and_bad_bodies() {
    let node = TestNode::start(1).await;
    let client = rpc_client().expect("client");
    let url = format!("http://{}{}", node.addr, rpc::VOTE_PATH);
    let request = rpc::VoteRequest { vote: Vote::new(1, 2), last_log_id: None };
    let body = rpc::encode("vote", &request).expect("encode");
    let now = WallClock.wall_ms();
    let mut seq = 0;
    let mut stamp = |to: NodeId, time_ms: u64| {
        seq += 1;
        Stamp { from: 2, to, time_ms, boot: 0xb007, seq }
    };
    let key = LinkKey::derive(SECRET);
    let send = |header: Option<String>, body: Vec<u8>| {
        let mut builder = client.post(&url).timeout(WRITE_TIMEOUT).body(body);
        if let Some(header) = header {
            builder = builder.header(link::LINK_HEADER, header);
        }
        builder.send()
    };
    let status = |r: Result<reqwest::Response, reqwest::Error>| r.expect("answered").status().as_u16();

    assert_eq!(status(send(None, body.clone()).await), 401, "unsigned");
    let forged =
        LinkKey::derive("a-guess-at-the-cluster-secret-xxxx").sign_request(&stamp(1, now), rpc::VOTE_PATH, &body);
    assert_eq!(status(send(Some(forged), body.clone()).await), 401, "another key");
    let elsewhere = key.sign_request(&stamp(3, now), rpc::VOTE_PATH, &body);
    assert_eq!(status(send(Some(elsewhere), body.clone()).await), 401, "addressed to node 3");
    let stale = key.sign_request(&stamp(1, now - 2 * link::LINK_SKEW_MS), rpc::VOTE_PATH, &body);
    assert_eq!(status(send(Some(stale), body.clone()).await), 401, "two windows old");
    let other_path = key.sign_request(&stamp(1, now), rpc::APPEND_PATH, &body);
    assert_eq!(status(send(Some(other_path), body.clone()).await), 401, "signed for another route");
    let garbage = vec![0xff; 3];
    let signed = key.sign_request(&stamp(1, now), rpc::VOTE_PATH, &garbage);
    assert_eq!(status(send(Some(signed), garbage).await), 400, "garbage body");
    // Bigger than the public API's 1 MiB limit, under the internal 64 MiB one.
    let large = vec![0xff; 2 * 1024 * 1024];
    let signed = key.sign_request(&stamp(1, now), rpc::VOTE_PATH, &large);
    assert_eq!(status(send(Some(signed), large).await), 400, "large garbage body");

    let good = stamp(1, now);
    let header = key.sign_request(&good, rpc::VOTE_PATH, &body);
    let answered = send(Some(header.clone()), body.clone()).await.expect("answered");
    assert_eq!(answered.status().as_u16(), 200);
    let signature = answered.headers().get(link::LINK_REPLY_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let bytes = answered.bytes().await.expect("body");
    assert_eq!(key.verify_reply(signature.as_deref(), &good, 200, &bytes), Ok(()), "the reply is signed");
    let reply: hookraft_raft::RaftReply<rpc::VoteReply> = rpc::decode("vote reply", &bytes).expect("decodes");
    assert!(matches!(reply, hookraft_raft::RaftReply::Ok(ref v) if v.vote_granted), "{reply:?}");
    assert_eq!(status(send(Some(header), body).await), 401, "the same request again is a replay");
    node.stop().await;
}
