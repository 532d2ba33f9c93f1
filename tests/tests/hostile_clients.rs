//! Clients that open connections and hold them: half a request head, or
//! nothing at all. A node closes what one address holds beyond
//! `--connections-per-address`, keeps connections from the cluster's nodes
//! apart from the public ones, and closes a connection that sends no whole
//! head within its header timeout; meanwhile it answers everyone else and
//! its cluster keeps committing.
//!
//! The flooding clients bind addresses of 127.0.0.0/8 other than 127.0.0.1
//! (Linux routes all of it to loopback); the test nodes listen on 127.0.0.1,
//! the address their peers and the helpers' client connect from.

#![allow(clippy::disallowed_methods, reason = "an end-to-end test measures real time")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hookraft_tests::{
    NodeOptions, POLL_INTERVAL, StatusCode, TestCluster, TestNode, eventually, fast_retry, register_endpoint,
    send_event,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// What a flooding client sends of a request before it stops.
const HALF_HEAD: &[u8] = b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-";
/// The node's header read timeout (`hookraft_node::listener::HEADER_READ_TIMEOUT`).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(20);
/// The node's default `--connections-per-address`.
const CONNECTIONS_PER_ADDRESS_DEFAULT: usize = 256;
/// The node's public pool (`hookraft_node::listener::CONNECTIONS_MAX`).
const CONNECTIONS_MAX: usize = 4_096;
/// How long something the node should do at once may take on a loaded
/// two-core machine.
const PROMPT: Duration = Duration::from_secs(15);
/// Longest one health probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection from `from` to the node on `127.0.0.1:port`.
async fn connect_from(from: &str, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket.bind(SocketAddr::new(from.parse().expect("an IP address"), 0)).expect("bind the client's address");
    socket.connect(SocketAddr::from(([127, 0, 0, 1], port))).await.expect("connect")
}

/// `count` connections from `from`, each of which sends half a request
/// head (or, with `idle_every_other`, every second one nothing).
async fn flood(from: &str, port: u16, count: usize, idle_every_other: bool) -> Vec<TcpStream> {
    let mut streams = Vec::with_capacity(count);
    for i in 0..count {
        let mut stream = connect_from(from, port).await;
        if !(idle_every_other && i % 2 == 1) {
            // The node may already have closed it (over the cap).
            let _ = stream.write_all(HALF_HEAD).await;
        }
        streams.push(stream);
    }
    streams
}

/// Whether the node closed `stream` (end of stream or reset); `false`
/// when nothing comes within a moment.
async fn is_closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 256];
    matches!(tokio::time::timeout(Duration::from_millis(5), stream.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

async fn count_closed(streams: &mut [TcpStream]) -> usize {
    let mut closed = 0;
    for stream in streams {
        closed += usize::from(is_closed(stream).await);
    }
    closed
}

/// Waits until at least `least` of `streams` are closed.
async fn wait_closed(streams: &mut [TcpStream], least: usize, what: &str) {
    eventually(PROMPT, POLL_INTERVAL, what, async || count_closed(streams).await >= least).await;
}

/// `GET /healthz` answers 200 within [`PROBE_TIMEOUT`].
async fn assert_healthy(node: &TestNode) {
    let probe = node.client().get(node.url("/healthz")).timeout(PROBE_TIMEOUT);
    let started = Instant::now();
    let (status, _, body) = node.send(probe).await;
    assert_eq!(status, StatusCode::OK, "GET /healthz: {body}");
    println!("/healthz answered in {:?}", started.elapsed());
}

fn endpoint() -> serde_json::Value {
    json!({"url": "http://127.0.0.1:9/hook", "retry": fast_retry()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holding_half_sent_requests_leaves_the_node_serving_others() {
    let node = TestNode::start_with(NodeOptions::default().args(["--connections-per-address", "64"])).await;
    let mut held = flood("127.0.0.2", node.port(), 200, false).await;
    wait_closed(&mut held, 200 - 64, "the connections of 127.0.0.2 over its cap of 64 to be closed").await;

    assert_healthy(&node).await;
    register_endpoint(&node, &endpoint()).await;
    let accepted = send_event(&node, &json!({"type": "t", "payload": {"from": "127.0.0.1"}})).await;
    assert_eq!(accepted.deliveries.len(), 1, "{:?}", accepted.body);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_commits_while_one_node_is_flooded_past_its_caps() {
    let cluster = TestCluster::start().await;
    cluster.wait_settled().await;
    let flooded = cluster.leader_id().await;
    let other = cluster.followers().await[0];
    let port = cluster.node(flooded).port();

    // One address over its cap, in idle and half-sent connections.
    let mut over_cap = flood("127.0.0.2", port, CONNECTIONS_PER_ADDRESS_DEFAULT + 100, true).await;
    wait_closed(&mut over_cap, 100, "the connections of 127.0.0.2 over its cap to be closed").await;
    // Seventeen more addresses, each at its cap: more than the public pool holds.
    let mut public = Vec::new();
    for last in 3..=19 {
        public.extend(flood(&format!("127.0.0.{last}"), port, CONNECTIONS_PER_ADDRESS_DEFAULT, true).await);
    }
    assert!(public.len() + CONNECTIONS_PER_ADDRESS_DEFAULT > CONNECTIONS_MAX);
    println!("node {flooded} (the leader) was sent {} flooding connections", over_cap.len() + public.len());

    // Writes through another node reach the flooded leader over node RPC;
    // the helpers' client on 127.0.0.1 shares its address with the nodes.
    let started = Instant::now();
    register_endpoint(cluster.node(other), &endpoint()).await;
    send_event(cluster.node(other), &json!({"type": "t", "payload": {"via": other}})).await;
    send_event(cluster.node(flooded), &json!({"type": "t", "payload": {"via": flooded}})).await;
    assert_healthy(cluster.node(flooded)).await;
    println!("committed through both nodes in {:?}", started.elapsed());
    // The public pool was full: connections waited for a permit in vain.
    eventually(PROMPT, POLL_INTERVAL, "the flooded node to log a refusal for its full pool", async || {
        let log = cluster.node(flooded).log_tail(usize::MAX);
        log.contains("every connection permit is taken") || log.contains("no connection permit came free")
    })
    .await;
    drop((over_cap, public));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_heads_and_idle_connections_are_closed_after_the_header_timeout() {
    let node = TestNode::start().await;
    let started = Instant::now();
    let mut streams = flood("127.0.0.2", node.port(), 3, false).await;
    let mut idle = connect_from("127.0.0.2", node.port()).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.expect("write");
    let mut answer = [0u8; 512];
    let read = tokio::time::timeout(PROMPT, idle.read(&mut answer)).await.expect("answered").expect("read");
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..read]));
    streams.push(idle);

    let closed_by = HEADER_READ_TIMEOUT + PROMPT;
    eventually(closed_by, POLL_INTERVAL, "the node to close the half-sent and idle connections", async || {
        count_closed(&mut streams).await == streams.len()
    })
    .await;
    let after = started.elapsed();
    println!("closed after {after:?}");
    assert!(after >= HEADER_READ_TIMEOUT - Duration::from_secs(1), "closed before the header timeout: {after:?}");
}
