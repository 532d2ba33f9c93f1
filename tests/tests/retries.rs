//! Retries: failures then success, `Retry-After`, timeouts, connection errors
//! and redirects, as seen on the timeline and at the receiver.

#![allow(clippy::disallowed_methods, reason = "an end-to-end test measures real time")]

use std::time::{Duration, Instant};

use hookraft_tests::node::free_loopback_port;
use hookraft_tests::{
    DEADLINE, POLL_INTERVAL, Reply, ScriptedReceiver, TestNode, attempts, entries_of_kind, eventually, get_delivery,
    register_endpoint, send_event, timeline_kinds, wait_delivery_state, wait_for,
};
use serde_json::{Value, json};

fn retry(attempts_max: u32, base_ms: u64, cap_ms: u64) -> Value {
    json!({"attempts_max": attempts_max, "base_ms": base_ms, "cap_ms": cap_ms, "max_age_s": 3600})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_503_503_200_end_delivered_after_three_recorded_attempts() {
    let receiver = ScriptedReceiver::start().await;
    receiver.push("flaky", Reply::status(503));
    receiver.push("flaky", Reply::status(503));
    let node = TestNode::start().await;
    let (endpoint_id, _) =
        register_endpoint(&node, &json!({"url": receiver.url("flaky"), "retry": retry(5, 50, 200)})).await;
    let accepted = send_event(&node, &json!({"type": "t", "payload": {"k": "v"}})).await;
    let delivery_id = accepted.delivery_for(&endpoint_id);

    let delivery = wait_delivery_state(&node, &delivery_id, "delivered", DEADLINE).await;
    assert_eq!(delivery["attempt_count"], 3, "{delivery:#}");
    assert_eq!(delivery["event_id"], accepted.event_id.as_str());
    assert_eq!(delivery["endpoint_id"], endpoint_id.as_str());
    let attempts = attempts(&delivery);
    let codes: Vec<&Value> = attempts.iter().map(|a| &a["status_code"]).collect();
    assert_eq!(codes, [&json!(503), &json!(503), &json!(200)], "{delivery:#}");
    for attempt in &attempts {
        assert!(attempt["node_id"].is_u64(), "attempt without node_id: {attempt}");
        assert!(attempt["fencing_token"].is_u64(), "attempt without fencing_token: {attempt}");
        assert!(attempt["latency_ms"].is_u64(), "attempt without latency_ms: {attempt}");
        assert!(attempt["error"].is_null(), "an HTTP answer is not an error: {attempt}");
    }
    assert_eq!(entries_of_kind(&delivery, "retry_scheduled").len(), 2, "{delivery:#}");
    for scheduled in entries_of_kind(&delivery, "retry_scheduled") {
        assert!(scheduled["next_attempt_at"].is_string(), "{scheduled}");
        assert_eq!(scheduled["rule"], "backoff", "{scheduled}");
    }
    let kinds = timeline_kinds(&delivery);
    assert_eq!(kinds.first().map(String::as_str), Some("received"), "{kinds:?}");
    let main: Vec<&str> =
        kinds.iter().map(String::as_str).filter(|k| ["attempt", "retry_scheduled", "delivered"].contains(k)).collect();
    assert_eq!(
        main,
        ["attempt", "retry_scheduled", "attempt", "retry_scheduled", "attempt", "delivered"],
        "timeline order"
    );

    let requests = receiver.requests("flaky");
    assert_eq!(requests.len(), 3);
    let numbers: Vec<Option<&str>> = requests.iter().map(|r| r.header("webhook-attempt")).collect();
    assert_eq!(numbers, [Some("1"), Some("2"), Some("3")]);
    assert!(requests.iter().all(|r| r.webhook_id() == Some(accepted.event_id.as_str())), "stable webhook-id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_2_seconds_delays_the_second_attempt_by_at_least_2_seconds_past_a_1_second_cap() {
    let receiver = ScriptedReceiver::start().await;
    receiver.push("slow-down", Reply::status(503).header("Retry-After", "2"));
    let node = TestNode::start().await;
    // Retry-After is a floor: cap_ms bounds the backoff, not the receiver's wish.
    let body = json!({"url": receiver.url("slow-down"), "retry": retry(5, 50, 1_000)});
    let (endpoint_id, _) = register_endpoint(&node, &body).await;
    let accepted = send_event(&node, &json!({"type": "t", "payload": {}})).await;

    eventually(DEADLINE, POLL_INTERVAL, "a second attempt", async || receiver.count("slow-down") >= 2).await;
    let requests = receiver.requests("slow-down");
    let gap = requests[1].received_at.duration_since(requests[0].received_at);
    assert!(gap >= Duration::from_millis(1_900), "second attempt came {gap:?} after the first, despite Retry-After: 2");
    let delivery = wait_delivery_state(&node, &accepted.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let scheduled = entries_of_kind(&delivery, "retry_scheduled");
    assert_eq!(scheduled.len(), 1, "{delivery:#}");
    assert_eq!(scheduled[0]["rule"], "retry_after", "{delivery:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_without_retry_after_is_retried_under_the_throttled_rule() {
    let receiver = ScriptedReceiver::start().await;
    receiver.push("busy", Reply::status(429));
    let node = TestNode::start().await;
    let body = json!({"url": receiver.url("busy"), "retry": retry(5, 50, 200)});
    let (endpoint_id, _) = register_endpoint(&node, &body).await;
    let accepted = send_event(&node, &json!({"type": "t", "payload": {}})).await;

    let delivery = wait_delivery_state(&node, &accepted.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let scheduled = entries_of_kind(&delivery, "retry_scheduled");
    assert_eq!(scheduled.len(), 1, "{delivery:#}");
    assert_eq!(scheduled[0]["rule"], "throttled", "{delivery:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_longer_than_timeout_ms_is_recorded_as_a_timeout_well_before_the_reply() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("sleepy", Reply::ok().delay_ms(5_000));
    let node = TestNode::start().await;
    let body = json!({"url": receiver.url("sleepy"), "timeout_ms": 500, "retry": retry(1, 50, 200)});
    let (endpoint_id, _) = register_endpoint(&node, &body).await;
    let sent_at = Instant::now();
    let accepted = send_event(&node, &json!({"type": "t", "payload": {}})).await;
    let delivery_id = accepted.delivery_for(&endpoint_id);

    let attempt = wait_for(DEADLINE, POLL_INTERVAL, "the first attempt on the timeline", async || {
        let delivery = get_delivery(&node, &delivery_id).await;
        attempts(&delivery).into_iter().next().ok_or_else(|| format!("{delivery:#}"))
    })
    .await;
    let recorded_after = sent_at.elapsed();
    assert_eq!(attempt["error"], "timeout", "{attempt}");
    assert!(attempt["status_code"].is_null(), "{attempt}");
    let latency_ms = attempt["latency_ms"].as_u64().expect("latency_ms");
    assert!(latency_ms < 3_000, "latency {latency_ms} ms for a 500 ms timeout");
    assert!(recorded_after < Duration::from_millis(4_000), "timeout recorded only after {recorded_after:?}");
    wait_delivery_state(&node, &delivery_id, "dead", DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_recorded_as_an_error_and_dead_lettered_after_attempts_max() {
    let node = TestNode::start().await;
    let url = format!("http://127.0.0.1:{}/nobody-listens", free_loopback_port());
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": url, "retry": retry(2, 50, 200)})).await;
    let accepted = send_event(&node, &json!({"type": "t", "payload": {}})).await;

    let delivery = wait_delivery_state(&node, &accepted.delivery_for(&endpoint_id), "dead", DEADLINE).await;
    let attempts = attempts(&delivery);
    assert_eq!(attempts.len(), 2, "{delivery:#}");
    for attempt in &attempts {
        assert!(attempt["status_code"].is_null(), "{attempt}");
        assert!(attempt["error"].as_str().is_some_and(|e| !e.is_empty()), "{attempt}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_302_is_a_failed_attempt_and_is_not_followed() {
    let receiver = ScriptedReceiver::start().await;
    let elsewhere = receiver.url("elsewhere");
    receiver.push("moved", Reply::status(302).header("Location", &elsewhere));
    let node = TestNode::start().await;
    let (endpoint_id, _) =
        register_endpoint(&node, &json!({"url": receiver.url("moved"), "retry": retry(5, 50, 200)})).await;
    let accepted = send_event(&node, &json!({"type": "t", "payload": {}})).await;

    let delivery = wait_delivery_state(&node, &accepted.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let codes: Vec<Value> = attempts(&delivery).iter().map(|a| a["status_code"].clone()).collect();
    assert_eq!(codes, [json!(302), json!(200)], "{delivery:#}");
    assert_eq!(receiver.count("elsewhere"), 0, "the redirect must not be followed");
    assert_eq!(receiver.count("moved"), 2);
}
