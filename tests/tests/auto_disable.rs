//! Auto-disable: an endpoint that fails every attempt for its
//! `disable_after_s` is disabled with a reason, its pending deliveries end
//! dead and stay replayable, and one call enables it again.

use hookraft_tests::{
    DEADLINE, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestNode, assert_problem, eventually,
    register_endpoint, send_event, wait_delivery_state,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_for_its_limit_is_disabled_and_comes_back_with_one_call() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("flaky", Reply::status(500));
    let node = TestNode::start().await;
    let retry = json!({"attempts_max": 100, "base_ms": 100, "cap_ms": 300, "max_age_s": 3600});
    let body = json!({"url": receiver.url("flaky"), "retry": retry, "disable_after_s": 2});
    let (endpoint, _) = register_endpoint(&node, &body).await;
    let events: Vec<_> = post_events(&node, 3).await;

    let disabled = async || {
        let (_, _, view) = node.get_json(&format!("/v1/endpoints/{endpoint}")).await;
        view["disabled"] == true
    };
    eventually(DEADLINE, POLL_INTERVAL, "the endpoint disabled after 2 s of failures", disabled).await;
    let (_, _, view) = node.get_json(&format!("/v1/endpoints/{endpoint}")).await;
    let reason = view["disabled_reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.starts_with("every attempt failed for "), "{view}");
    assert!(view["failing_since"].is_string(), "{view}");
    for event in &events {
        let dead = wait_delivery_state(&node, &event.delivery_for(&endpoint), "dead", DEADLINE).await;
        let last = dead["timeline"].as_array().and_then(|t| t.last().cloned()).unwrap_or_default();
        assert!(last["reason"].as_str().unwrap_or_default().contains(&reason), "{dead:#}");
    }

    // The receiver is fixed; one call enables the endpoint, a bulk replay sends the rest.
    receiver.set_default("flaky", Reply::ok());
    let (status, _, view) = node.patch_json(&format!("/v1/endpoints/{endpoint}"), &json!({"disabled": false})).await;
    assert_eq!((status, &view["failing_since"]), (StatusCode::OK, &json!(null)), "{view}");
    let (status, _, answer) = node.post_empty(&format!("/v1/endpoints/{endpoint}/replay")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    for event in &events {
        wait_delivery_state(&node, &event.delivery_for(&endpoint), "delivered", DEADLINE).await;
    }
}

async fn post_events(node: &TestNode, n: u64) -> Vec<hookraft_tests::Accepted> {
    let mut accepted = Vec::new();
    for i in 0..n {
        accepted.push(send_event(node, &json!({"type": "t", "payload": {"n": i}})).await);
    }
    accepted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_disable_is_five_days_unless_asked_and_bounded() {
    let node = TestNode::start().await;
    let (endpoint, _) = register_endpoint(&node, &json!({"url": "http://127.0.0.1:9/"})).await;
    let (_, _, view) = node.get_json(&format!("/v1/endpoints/{endpoint}")).await;
    assert_eq!(view["disable_after_s"], 432_000);
    let response = node.patch_json(&format!("/v1/endpoints/{endpoint}"), &json!({"disable_after_s": 1u64 << 40})).await;
    assert_problem(&response, StatusCode::UNPROCESSABLE_ENTITY, "too long");
    let (status, _, view) = node.patch_json(&format!("/v1/endpoints/{endpoint}"), &json!({"disable_after_s": 0})).await;
    assert_eq!((status, &view["disable_after_s"]), (StatusCode::OK, &json!(0)), "{view}");
}
