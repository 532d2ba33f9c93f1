//! Standard Webhooks signing as a receiver sees it: headers, body, signature,
//! and the double signature during a secret rotation.

use hookraft_tests::{
    DEADLINE, POLL_INTERVAL, ScriptedReceiver, StatusCode, TestNode, eventually, fast_retry, register_endpoint,
    send_event, str_field, verify_request, wait_delivery_state,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_carries_standard_webhooks_headers_and_a_signature_that_verifies_with_the_secret() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint_id, secret) =
        register_endpoint(&node, &json!({"url": receiver.url("signed"), "retry": fast_retry()})).await;
    let payload = json!({"order": {"id": 42, "items": ["a", "b"]}, "note": "ünïcode ✓"});
    let accepted = send_event(&node, &json!({"type": "order.created", "payload": payload})).await;
    let delivery_id = accepted.delivery_for(&endpoint_id);
    wait_delivery_state(&node, &delivery_id, "delivered", DEADLINE).await;

    let requests = receiver.requests("signed");
    assert_eq!(requests.len(), 1, "one 200 answer means one request");
    let request = &requests[0];
    assert_eq!(request.webhook_id(), Some(accepted.event_id.as_str()), "webhook-id is the event id");
    assert_eq!(request.header("hookraft-delivery-id"), Some(delivery_id.as_str()));
    assert_eq!(request.header("webhook-attempt"), Some("1"));
    let content_type = request.header("content-type").unwrap_or("");
    assert!(content_type.starts_with("application/json"), "content-type {content_type:?}");
    assert_eq!(request.body_json(), payload, "the body is the event's payload");
    let signature = request.header("webhook-signature").expect("a webhook-signature header");
    assert_eq!(signature.split(' ').count(), 1, "one secret, one signature: {signature}");
    assert!(signature.starts_with("v1,"), "{signature}");
    verify_request(request, &[&secret]).expect("the signature verifies with the registered secret");

    let other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    assert!(verify_request(request, &[other]).is_err(), "another secret must not verify");
    let mut tampered = request.clone();
    tampered.body = axum::body::Bytes::from(format!("{} ", String::from_utf8_lossy(&request.body)));
    assert!(verify_request(&tampered, &[&secret]).is_err(), "a changed body must not verify");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_secret_rotation_next_delivery_has_two_signatures_each_verifying_alone() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint_id, old_secret) =
        register_endpoint(&node, &json!({"url": receiver.url("rotating"), "retry": fast_retry()})).await;

    let first = send_event(&node, &json!({"type": "t", "payload": {"n": 1}})).await;
    wait_delivery_state(&node, &first.delivery_for(&endpoint_id), "delivered", DEADLINE).await;

    let path = format!("/v1/endpoints/{endpoint_id}/rotate-secret");
    let (status, _, rotated) = node.post_json(&path, &json!({"grace_period_s": 3600})).await;
    assert_eq!(status, StatusCode::OK, "rotate-secret answered {rotated}");
    let new_secret = str_field(&rotated, "secret");
    assert!(new_secret.starts_with("whsec_"));
    assert_ne!(new_secret, old_secret, "rotation yields a new secret");
    assert!(rotated["previous_secret_expires_at"].is_string(), "{rotated}");

    let second = send_event(&node, &json!({"type": "t", "payload": {"n": 2}})).await;
    wait_delivery_state(&node, &second.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    eventually(DEADLINE, POLL_INTERVAL, "the second event at the receiver", async || {
        !receiver.requests_for_event("rotating", &second.event_id).is_empty()
    })
    .await;
    let request = receiver.requests_for_event("rotating", &second.event_id).remove(0);
    let signature = request.header("webhook-signature").expect("a webhook-signature header");
    let entries: Vec<&str> = signature.split(' ').collect();
    assert_eq!(entries.len(), 2, "one signature per valid secret: {signature}");
    assert!(entries.iter().all(|entry| entry.starts_with("v1,")), "{signature}");
    verify_request(&request, &[&old_secret]).expect("verifies with the old secret alone");
    verify_request(&request, &[&new_secret]).expect("verifies with the new secret alone");
}
