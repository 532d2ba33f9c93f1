//! Node-to-node RPC is never open: every `/internal/*` request must be
//! signed with the key of the cluster secret (`hookraft_raft::link`),
//! addressed to the node, and new; everything else is refused before any
//! handler decodes the body. Also on a single node started without
//! `--cluster-secret` (which keeps a secret of its own in its data dir),
//! and such a node takes no new members.

use std::os::unix::fs::PermissionsExt;

use hookraft_core::command::Command;
use hookraft_raft::link::{self, LINK_HEADER, LinkKey};
use hookraft_raft::rpc;
use hookraft_tests::link::{signed_post, stamp};
use hookraft_tests::{NodeOptions, StatusCode, TestNode, assert_problem};
use serde_json::json;

const INTERNAL_PATHS: [&str; 5] =
    [rpc::APPEND_PATH, rpc::VOTE_PATH, rpc::SNAPSHOT_PATH, rpc::PROPOSE_PATH, link::HELLO_PATH];
const ADMIN_TOKEN: &str = "node-rpc-admin-token-31f7";

/// A well-formed forwarded command that, committed, would be visible in
/// `GET /v1/cluster`: node 1 draining.
fn forged_command() -> Vec<u8> {
    rpc::encode("forwarded command", &Command::SetDraining { node_id: 1, draining: true, now_ms: 1 }).unwrap()
}

async fn draining(node: &TestNode) -> bool {
    let (status, _, cluster) = node.get_json("/v1/cluster").await;
    assert_eq!(status, StatusCode::OK, "{cluster}");
    cluster["nodes"].as_array().unwrap().iter().any(|n| n["id"] == 1 && n["draining"] == true)
}

/// Every way of getting the signature wrong with `secret` the right one.
async fn assert_forgeries_refused(node: &TestNode, secret: &str) {
    let bodies: [(&str, Vec<u8>); 3] =
        [("a forged command", forged_command()), ("garbage", vec![0xff; 64]), ("nothing", Vec::new())];
    let mut near = secret.to_owned();
    near.pop();
    near.push('#');
    for path in INTERNAL_PATHS {
        for (what, body) in &bodies {
            let unsigned = node.client().post(node.url(path)).body(body.clone());
            let wrong_key = signed_post(node, 1, &near, path, body.clone());
            let empty_key = signed_post(node, 1, "", path, body.clone());
            let elsewhere = signed_post(node, 2, secret, path, body.clone());
            // The raw secret as a header value is not a signature.
            let raw = node.client().post(node.url(path)).header(LINK_HEADER, secret).body(body.clone());
            let cases = [
                ("unsigned", unsigned),
                ("another key", wrong_key),
                ("an empty key", empty_key),
                ("node 2's", elsewhere),
                ("the raw secret", raw),
            ];
            for (how, request) in cases {
                assert_problem(
                    &node.send(request).await,
                    StatusCode::UNAUTHORIZED,
                    &format!("POST {path} with {what}, {how}"),
                );
            }
        }
    }
    // A request signed for another route's body, and a replay.
    let header = LinkKey::derive(secret).sign_request(&stamp(1), rpc::PROPOSE_PATH, b"other");
    let moved = node.client().post(node.url(rpc::PROPOSE_PATH)).header(LINK_HEADER, header).body(forged_command());
    assert_problem(&node.send(moved).await, StatusCode::UNAUTHORIZED, "a signature over another body");
    assert!(!draining(node).await, "no forged command reached the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_rpc_is_401_and_commits_nothing_on_a_single_node() {
    let node = TestNode::start().await;
    let secret_file = node.data_dir().join("cluster-secret");
    let secret = std::fs::read_to_string(&secret_file).expect("a node without --cluster-secret keeps its own");
    let secret = secret.trim();
    assert_eq!(secret.len(), 64, "32 random bytes as hex");
    let mode = std::fs::metadata(&secret_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "readable by the node's user only");
    let dir_mode = std::fs::metadata(node.data_dir()).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700, "the data dir is the node's user's only");
    assert_forgeries_refused(&node, secret).await;

    // The gate is the signature and nothing else: signed, the same command
    // commits, and the reply is signed back; the same request again is a replay.
    let body = forged_command();
    let sent = stamp(1);
    let header = LinkKey::derive(secret).sign_request(&sent, rpc::PROPOSE_PATH, &body);
    let request =
        node.client().post(node.url(rpc::PROPOSE_PATH)).header(LINK_HEADER, header.clone()).body(body.clone());
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let signature = response.headers().get(link::LINK_REPLY_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let reply = response.bytes().await.unwrap();
    assert_eq!(LinkKey::derive(secret).verify_reply(signature.as_deref(), &sent, 200, &reply), Ok(()));
    assert!(draining(&node).await, "the signed command committed");
    let again = node.client().post(node.url(rpc::PROPOSE_PATH)).header(LINK_HEADER, header).body(body);
    assert_problem(&node.send(again).await, StatusCode::UNAUTHORIZED, "a replayed request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_shared_secret_refuses_new_members_and_keeps_its_secret_across_restarts() {
    let mut node = TestNode::start_with(NodeOptions::default().admin_token(ADMIN_TOKEN)).await;
    let before = std::fs::read_to_string(node.data_dir().join("cluster-secret")).unwrap();
    let (status, _, body) = node.post_json("/v1/cluster/nodes", &json!({"id": 2, "addr": "127.0.0.1:9"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("--cluster-secret"), "the problem says what to set: {detail}");
    node.restart().await;
    let after = std::fs::read_to_string(node.data_dir().join("cluster-secret")).unwrap();
    assert_eq!(before, after, "a restart keeps the node's own secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_cluster_secret_takes_only_signatures_of_that_secret() {
    let shared = "a-shared-cluster-secret-of-enough-length";
    let node = TestNode::start_with(NodeOptions::default().args(["--cluster-secret", shared])).await;
    assert!(!node.data_dir().join("cluster-secret").exists(), "a configured secret is not written to disk");
    assert_forgeries_refused(&node, shared).await;
    let request = signed_post(&node, 1, shared, rpc::PROPOSE_PATH, forged_command());
    assert_eq!(node.client().execute(request.build().unwrap()).await.unwrap().status(), StatusCode::OK);
    assert!(draining(&node).await);
}
