//! TLS on the node's port and its peer links (`--tls-cert`, `--tls-key`,
//! `--tls-ca`): clients that trust the cluster's CA speak HTTPS to any
//! node, the nodes elect, forward writes and replicate over HTTPS, and
//! nothing is served in clear on that port.

use std::time::Duration;

use hookraft_tests::{
    ClusterOptions, NodeOptions, POLL_INTERVAL, ScriptedReceiver, StatusCode, TestCluster, TestNode, eventually,
    register_endpoint, send_event, wait_delivery_state,
};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(90);

fn retry_quick() -> serde_json::Value {
    json!({"attempts_max": 50, "base_ms": 100, "cap_ms": 1000, "max_age_s": 3600})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_node_serves_https_only_and_to_clients_that_trust_its_ca() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start_with(NodeOptions::default().tls()).await;
    assert!(node.url("/").starts_with("https://"));
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("tls"), "retry": retry_quick()})).await;
    let event = send_event(&node, &json!({"type": "t", "payload": {"over": "tls"}})).await;
    wait_delivery_state(&node, &event.delivery_for(&endpoint_id), "delivered", DEADLINE).await;

    // In clear, the port answers nothing a client could read as HTTP.
    let plain = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build().unwrap();
    let clear_url = node.url("/readyz").replacen("https://", "http://", 1);
    if let Ok(response) = plain.get(&clear_url).send().await {
        assert_ne!(response.status(), StatusCode::OK, "plain HTTP must not be served");
    }
    // A client that does not trust the cluster's CA refuses the certificate.
    let untrusting = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build().unwrap();
    let refused = untrusting.get(node.url("/readyz")).send().await;
    assert!(refused.is_err(), "the test CA is in no system store: {refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster_elects_forwards_and_replicates_over_tls() {
    let receiver = ScriptedReceiver::start().await;
    let options = ClusterOptions { node: NodeOptions::default().tls(), ..ClusterOptions::default() };
    let cluster = TestCluster::start_with(options).await;
    let view = cluster.wait_settled().await;
    assert_eq!(view.unowned(), 0, "every shard owned: {view:?}");
    let followers = cluster.followers().await;
    let (endpoint_id, _) =
        register_endpoint(cluster.node(followers[0]), &json!({"url": receiver.url("all"), "retry": retry_quick()}))
            .await;
    let mut events = Vec::new();
    for id in cluster.ids() {
        events.push(send_event(cluster.node(id), &json!({"type": "t", "payload": {"via": id}})).await);
    }
    let expected: std::collections::BTreeSet<String> = events.iter().map(|e| e.event_id.clone()).collect();
    eventually(DEADLINE, POLL_INTERVAL, "every event at the receiver", async || {
        receiver.distinct_webhook_ids("all").is_superset(&expected)
    })
    .await;
    for event in &events {
        for id in cluster.ids() {
            let (status, _, read) = cluster.node(id).get_json(&format!("/v1/events/{}", event.event_id)).await;
            assert_eq!(status, StatusCode::OK, "node {id} replicated {}: {read}", event.event_id);
        }
        wait_delivery_state(cluster.node(followers[1]), &event.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    }
}
