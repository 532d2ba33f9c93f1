//! Auto-disable: an endpoint that fails every attempt for its
//! `disable_after_s` is disabled with a reason, its pending deliveries end
//! dead and stay replayable, and one call enables it again.

use hookraft_tests::{
    DEADLINE, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestNode, assert_problem, eventually,
    register_endpoint, send_event, verify_request, wait_delivery_state,
};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_for_its_limit_is_disabled_and_comes_back_with_one_call() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("flaky", Reply::status(500));
    let node = TestNode::start().await;
    let retry = json!({"attempts_max": 100, "base_ms": 100, "cap_ms": 300, "max_age_s": 3600});
    let body = json!({"url": receiver.url("flaky"), "retry": retry, "disable_after_s": 2});
    let (endpoint, _) = register_endpoint(&node, &body).await;
    // An operator's endpoint for hookraft's own events.
    let ops_body = json!({"url": receiver.url("ops"), "sources": ["hookraft"], "event_types": ["endpoint.disabled", "endpoint.enabled"]});
    let (ops, ops_secret) = register_endpoint(&node, &ops_body).await;
    let (_, _, ops_view) = node.get_json(&format!("/v1/endpoints/{ops}")).await;
    assert_eq!(ops_view["sources"], json!(["hookraft"]));
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

    // The operator's endpoint was told, with signed requests, once each.
    let told = async || receiver.count("ops") >= 2;
    eventually(DEADLINE, POLL_INTERVAL, "endpoint.disabled and endpoint.enabled delivered", told).await;
    let requests = receiver.requests("ops");
    let kinds: Vec<Value> = requests.iter().map(|r| r.body_json()["type"].clone()).collect();
    assert_eq!(
        kinds,
        [json!("endpoint.disabled"), json!("endpoint.enabled")],
        "the producers' events are not sent there"
    );
    let disabled_event = requests[0].body_json();
    assert_eq!(disabled_event["data"]["endpoint_id"], json!(endpoint));
    assert_eq!(disabled_event["data"]["dead_lettered"], json!(3), "{disabled_event}");
    assert!(disabled_event["data"]["reason"].as_str().unwrap_or_default().starts_with("every attempt failed"));
    for request in &requests {
        verify_request(request, &[&ops_secret]).expect("signed like any delivery");
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
