//! Node-to-node RPC is never open: every `/internal/*` request without the
//! cluster secret is refused before anything reads its body, also on a
//! single node started without `--cluster-secret` (which keeps a secret of
//! its own in its data dir), and such a node takes no new members.

use std::os::unix::fs::PermissionsExt;

use hookraft_core::command::Command;
use hookraft_raft::rpc::{self, CLUSTER_SECRET_HEADER};
use hookraft_tests::{NodeOptions, StatusCode, TestNode, assert_problem};
use serde_json::json;

const INTERNAL_PATHS: [&str; 4] = [rpc::APPEND_PATH, rpc::VOTE_PATH, rpc::SNAPSHOT_PATH, rpc::PROPOSE_PATH];

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_rpc_without_the_secret_is_401_and_commits_nothing_on_a_single_node() {
    let node = TestNode::start().await;
    let secret_file = node.data_dir().join("cluster-secret");
    let secret = std::fs::read_to_string(&secret_file).expect("a node without --cluster-secret keeps its own");
    let secret = secret.trim();
    assert_eq!(secret.len(), 64, "32 random bytes as hex");
    let mode = std::fs::metadata(&secret_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "readable by the node's user only");

    let bodies: [(&str, Vec<u8>); 3] =
        [("a forged command", forged_command()), ("garbage", vec![0xff; 64]), ("nothing", Vec::new())];
    let wrong_secrets: [Option<&str>; 4] = [None, Some(""), Some("guess"), Some(&secret[..63])];
    for path in INTERNAL_PATHS {
        for (what, body) in &bodies {
            for wrong in wrong_secrets {
                let mut request = node.client().post(node.url(path)).body(body.clone());
                if let Some(wrong) = wrong {
                    request = request.header(CLUSTER_SECRET_HEADER, wrong);
                }
                let response = node.send(request).await;
                assert_problem(
                    &response,
                    StatusCode::UNAUTHORIZED,
                    &format!("POST {path} with {what}, secret {wrong:?}"),
                );
            }
        }
    }
    assert!(!draining(&node).await, "no forged command reached the log");

    // The gate is the secret and nothing else: with it the same command commits.
    let request =
        node.client().post(node.url(rpc::PROPOSE_PATH)).header(CLUSTER_SECRET_HEADER, secret).body(forged_command());
    let response = node.client().execute(request.build().unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(draining(&node).await, "the command with the node's secret committed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_shared_secret_refuses_new_members_and_keeps_its_secret_across_restarts() {
    let mut node = TestNode::start().await;
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
async fn a_node_with_a_cluster_secret_takes_only_that_secret() {
    let shared = "a-shared-cluster-secret-of-enough-length";
    let node = TestNode::start_with(NodeOptions::default().args(["--cluster-secret", shared])).await;
    assert!(!node.data_dir().join("cluster-secret").exists(), "a configured secret is not written to disk");
    for wrong in [None, Some("a-shared-cluster-secret-of-enough-lengtH")] {
        let mut request = node.client().post(node.url(rpc::PROPOSE_PATH)).body(forged_command());
        if let Some(wrong) = wrong {
            request = request.header(CLUSTER_SECRET_HEADER, wrong);
        }
        assert_problem(&node.send(request).await, StatusCode::UNAUTHORIZED, &format!("secret {wrong:?}"));
    }
    assert!(!draining(&node).await);
    let request =
        node.client().post(node.url(rpc::PROPOSE_PATH)).header(CLUSTER_SECRET_HEADER, shared).body(forged_command());
    assert_eq!(node.client().execute(request.build().unwrap()).await.unwrap().status(), StatusCode::OK);
    assert!(draining(&node).await);
}
