//! A node whose history store fails its reads: reads that meet the
//! failure answer 503 instead of what they read, and an apply that meets
//! it stops Raft on the node, which `NodeHandle::raft_stopped` reports.
//! Nothing panics.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use hookraft_node::{Io, Node, NodeConfig, NodeHandle, Runtimes, Storage};
use hookraft_raft::MemDisk;
use serde_json::{Value, json};
use tower::ServiceExt;

const DEADLINE: Duration = Duration::from_secs(60);

async fn call(node: &NodeHandle, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let response = node.router.clone().oneshot(request.body(body).expect("request")).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let polling = async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(DEADLINE, polling).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_history_store_answers_503_and_stops_raft_on_the_node_without_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = MemDisk::new();
    let mut io = Io::production(dir.path().join("data"), true, 1, None, Runtimes::default(), None).expect("io");
    io.storage = Storage::Memory(disk.clone());
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let mut config = NodeConfig::single(listen);
    config.allow_private_targets = true;
    let node = Node::start(config, io, None).await.expect("node starts");
    eventually("readiness", async || call(&node, "GET", "/readyz", None).await.0 == StatusCode::OK).await;

    // An event whose one delivery ends dead at once: finished, it goes to
    // the history, and a snapshot moves it into the store.
    let retry = json!({"attempts_max": 1, "base_ms": 10, "cap_ms": 10, "max_age_s": 60});
    let (status, endpoint) =
        call(&node, "POST", "/v1/endpoints", Some(json!({"url": "http://127.0.0.1:9/h", "retry": retry}))).await;
    assert_eq!(status, StatusCode::CREATED, "{endpoint}");
    let (status, event) = call(&node, "POST", "/v1/events", Some(json!({"type": "t", "payload": {}}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{event}");
    let event_id = event["id"].as_str().expect("id").to_owned();
    let delivery_id = event["deliveries"][0]["id"].as_str().expect("a delivery").to_owned();
    let delivery_path = format!("/v1/deliveries/{delivery_id}");
    eventually("the delivery to end dead", async || {
        call(&node, "GET", &delivery_path, None).await.1["state"] == "dead"
    })
    .await;
    let applied = node.raft().metrics().borrow().last_applied.map(|id| id.index).expect("applied");
    node.raft().trigger().snapshot().await.expect("snapshot triggered");
    node.raft()
        .wait(Some(DEADLINE))
        .metrics(|m| m.snapshot.is_some_and(|s| s.index >= applied), "the snapshot")
        .await
        .expect("a snapshot");
    let event_path = format!("/v1/events/{event_id}");
    assert_eq!(call(&node, "GET", &event_path, None).await.0, StatusCode::OK, "read from the store");

    disk.fail_history_reads(true);
    let (status, problem) = call(&node, "GET", &event_path, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("history store")), "{problem}");
    let (status, _) = call(&node, "GET", &delivery_path, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    // A replay makes the apply take the delivery back from the store.
    let stopped = node.raft_stopped();
    let (status, answer) = call(&node, "POST", &format!("{delivery_path}/replay"), None).await;
    assert!(status.is_server_error(), "the replay did not commit: {status} {answer}");
    let why = tokio::time::timeout(DEADLINE, stopped).await.expect("raft stops");
    assert!(why.contains("history store"), "{why}");
    node.crash().await;
}
