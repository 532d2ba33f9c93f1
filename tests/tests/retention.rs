//! `--retention`: an event whose deliveries are all over is forgotten once
//! it is older than the retention (with its deliveries and its idempotency
//! key); an event with a delivery still being retried is kept.

use hookraft_tests::{
    Accepted, DEADLINE, NodeOptions, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestNode, eventually,
    fast_retry, register_endpoint, wait_delivery_state,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_events_are_forgotten_after_the_retention_and_unfinished_ones_are_kept() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("down", Reply::status(503));
    let node = TestNode::start_with(NodeOptions::default().args(["--retention", "2s"])).await;
    let ok = json!({"url": receiver.url("ok"), "event_types": ["done"], "retry": fast_retry()});
    let (ok_endpoint, _) = register_endpoint(&node, &ok).await;
    let slow_retries = json!({"attempts_max": 100, "base_ms": 500, "cap_ms": 500, "max_age_s": 3600});
    let down = json!({"url": receiver.url("down"), "event_types": ["stuck"], "retry": slow_retries});
    let (down_endpoint, _) = register_endpoint(&node, &down).await;

    let key = [("Idempotency-Key", "kept-until-pruned")];
    let (status, _, body) =
        node.post_json_with_headers("/v1/events", &json!({"type": "done", "payload": {"n": 1}}), &key).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let finished = Accepted::from_body(&body);
    let (status, _, body) = node.post_json("/v1/events", &json!({"type": "stuck", "payload": {"n": 2}})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let unfinished = Accepted::from_body(&body);
    let finished_delivery = finished.delivery_for(&ok_endpoint);
    let unfinished_delivery = unfinished.delivery_for(&down_endpoint);
    wait_delivery_state(&node, &finished_delivery, "delivered", DEADLINE).await;

    eventually(DEADLINE, POLL_INTERVAL, "the delivered event to be forgotten", async || {
        node.get_json(&format!("/v1/events/{}", finished.event_id)).await.0 == StatusCode::NOT_FOUND
    })
    .await;
    let (status, _, body) = node.get_json(&format!("/v1/deliveries/{finished_delivery}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "its delivery goes with it: {body}");
    let (status, _, body) = node.post_empty(&format!("/v1/deliveries/{finished_delivery}/replay")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "and can no longer be replayed: {body}");

    // Older than the retention too, but still being retried: kept whole.
    let (status, _, body) = node.get_json(&format!("/v1/events/{}", unfinished.event_id)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, delivery) = node.get_json(&format!("/v1/deliveries/{unfinished_delivery}")).await;
    assert_eq!(status, StatusCode::OK, "{delivery}");
    assert!(["pending", "retrying", "attempting"].contains(&delivery["state"].as_str().unwrap_or("")), "{delivery}");
    assert!(receiver.count("down") >= 2, "the failing endpoint is still being retried");

    // The forgotten event's idempotency key is free again: a new event.
    let (status, _, body) =
        node.post_json_with_headers("/v1/events", &json!({"type": "done", "payload": {"n": 1}}), &key).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_ne!(Accepted::from_body(&body).event_id, finished.event_id);
    assert!(node.log_tail(400).contains("forgot events past their retention"), "the leader logs what it pruned");
}
