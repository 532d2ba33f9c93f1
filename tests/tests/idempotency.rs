//! `Idempotency-Key` on `POST /v1/events`: a repeated key creates nothing.

use hookraft_tests::{
    Accepted, DEADLINE, ScriptedReceiver, StatusCode, TestNode, fast_retry, list_deliveries, register_endpoint,
    wait_delivery_state,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_idempotency_key_answers_200_replay_with_the_same_ids_and_delivers_once() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("once"), "retry": fast_retry()})).await;
    let event = json!({"type": "order.paid", "payload": {"order": 7}});
    let key = [("Idempotency-Key", "order-7-paid")];

    let (status, headers, first) = node.post_json_with_headers("/v1/events", &event, &key).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let replay_header = headers.get("idempotent-replay").and_then(|v| v.to_str().ok());
    assert_ne!(replay_header, Some("true"), "a first request is no replay");
    let first = Accepted::from_body(&first);
    let (status, headers, second) = node.post_json_with_headers("/v1/events", &event, &key).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(headers.get("idempotent-replay").and_then(|v| v.to_str().ok()), Some("true"));
    let second = Accepted::from_body(&second);
    assert_eq!(second.event_id, first.event_id);
    assert_eq!(second.delivery_ids(), first.delivery_ids());

    wait_delivery_state(&node, &first.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    assert_eq!(list_deliveries(&node, &format!("endpoint_id={endpoint_id}")).await.len(), 1, "one delivery");
    assert_eq!(receiver.count("once"), 1, "the receiver got exactly one request");
    let (status, _, stored) = node.get_json(&format!("/v1/events/{}", first.event_id)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(stored["idempotency_key"], "order-7-paid", "{stored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_one_idempotency_key_create_one_event() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("race"), "retry": fast_retry()})).await;
    let event = json!({"type": "t", "payload": {"race": true}});
    let key = [("Idempotency-Key", "racing-key")];

    let (a, b) = tokio::join!(
        node.post_json_with_headers("/v1/events", &event, &key),
        node.post_json_with_headers("/v1/events", &event, &key)
    );
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::ACCEPTED], "one creates, one replays: {} / {}", a.2, b.2);
    let (a, b) = (Accepted::from_body(&a.2), Accepted::from_body(&b.2));
    assert_eq!(a.event_id, b.event_id);
    assert_eq!(a.delivery_ids(), b.delivery_ids());
    wait_delivery_state(&node, &a.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    assert_eq!(list_deliveries(&node, &format!("endpoint_id={endpoint_id}")).await.len(), 1);
    assert_eq!(receiver.count("race"), 1);
}
