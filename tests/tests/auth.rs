//! The API token: every `/v1/...` route needs it; health routes never do.

use hookraft_tests::{NodeOptions, StatusCode, TestNode, assert_problem, fast_retry};
use reqwest::Method;
use serde_json::json;

const TOKEN: &str = "producer-token-0b5e2f";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_wrong_bearer_token_is_401_and_the_right_token_succeeds() {
    let node = TestNode::start_with(NodeOptions::default().api_token(TOKEN)).await;
    let endpoint = json!({"url": "http://127.0.0.1:9/hook", "retry": fast_retry()});

    let anonymous = [
        node.client().get(node.url("/v1/endpoints")),
        node.client().post(node.url("/v1/endpoints")).json(&endpoint),
        node.client().get(node.url("/v1/endpoints")).bearer_auth("wrong"),
        node.client().post(node.url("/v1/endpoints")).json(&endpoint).bearer_auth("wrong"),
        node.client().get(node.url("/v1/endpoints")).header("authorization", TOKEN),
        node.client()
            .post(node.url("/v1/events"))
            .json(&json!({"type": "t", "payload": {}}))
            .bearer_auth("producer-token-0b5e2fx"),
        node.client().get(node.url("/v1/cluster")),
    ];
    for (i, request) in anonymous.into_iter().enumerate() {
        assert_problem(&node.send(request).await, StatusCode::UNAUTHORIZED, &format!("request #{i} without the token"));
    }

    let (status, _, list) = node.get_json("/v1/endpoints").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["data"].as_array().map(Vec::len), Some(0), "the refused POSTs created nothing: {list}");
    let (status, _, created) = node.post_json("/v1/endpoints", &endpoint).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, _, cluster) = node.get_json("/v1/cluster").await;
    assert_eq!(status, StatusCode::OK, "{cluster}");
    let (status, _, list) = node.send(node.request(Method::GET, "/v1/endpoints")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_need_no_token() {
    let node = TestNode::start_with(NodeOptions::default().api_token(TOKEN)).await;
    for path in ["/healthz", "/readyz", "/metrics"] {
        let (status, _, body) = node.send(node.client().get(node.url(path))).await;
        assert_eq!(status, StatusCode::OK, "GET {path} without a token: {body}");
    }
}
