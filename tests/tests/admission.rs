//! Admission control (`--max-pending`, `--memory-budget`): over a budget,
//! ingest answers 503 with `Retry-After` and a problem naming the budget;
//! what was accepted is still delivered; idempotent replays still answer;
//! ingest is accepted again once the backlog drains, without a restart.

use std::collections::BTreeSet;

use hookraft_tests::{
    Accepted, DEADLINE, NodeOptions, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestNode, assert_problem,
    eventually, register_endpoint, wait_delivery_state,
};
use serde_json::{Value, json};

/// A `/metrics` sample: the line `name value`, labels included in `name`.
async fn metric(node: &TestNode, name: &str) -> Option<u64> {
    let (status, _, body) = node.get_json("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let text = body.as_str().unwrap_or_default().to_owned();
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Asserts `response` is the 503 of a full budget whose detail says `says`.
fn assert_over_budget(response: &(StatusCode, reqwest::header::HeaderMap, Value), says: &[&str], context: &str) {
    assert_problem(response, StatusCode::SERVICE_UNAVAILABLE, context);
    let (_, headers, body) = response;
    assert_eq!(headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("2"), "{context}: {headers:?}");
    assert_eq!(body["type"], "https://hookraft.dev/problems/ingest-budget-full", "{context}: {body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    for words in says {
        assert!(detail.contains(words), "{context}: the detail should say {words:?}: {detail}");
    }
}

fn event(n: usize) -> Value {
    json!({"type": "order.created", "payload": {"order": n}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pending_budget_refuses_ingest_until_the_backlog_drains() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("down", Reply::status(503));
    let node = TestNode::start_with(NodeOptions::default().args(["--max-pending", "10"])).await;
    // Retried often and never given up on while the receiver is down.
    let retry = json!({"attempts_max": 100, "base_ms": 100, "cap_ms": 500, "max_age_s": 3600});
    register_endpoint(&node, &json!({"url": receiver.url("down"), "retry": retry})).await;

    let mut accepted = Vec::new();
    for n in 0..10 {
        let key = format!("order-{n}");
        let (status, _, body) =
            node.post_json_with_headers("/v1/events", &event(n), &[("Idempotency-Key", &key)]).await;
        assert_eq!(status, StatusCode::ACCEPTED, "event {n} fits in the budget: {body}");
        accepted.push(Accepted::from_body(&body));
    }

    // The budget is full: a new event, and a batch, are refused whole.
    let refused = node.post_json_with_headers("/v1/events", &event(10), &[("Idempotency-Key", "order-10")]).await;
    let says = ["pending deliveries", "10 pending", "would add 1", "budget is 10", "--max-pending", "below 9"];
    assert_over_budget(&refused, &says, "a single event over the budget");
    let batch = json!({"events": [
        {"type": "order.created", "payload": {"order": 11}, "idempotency_key": "order-11"},
        {"type": "order.created", "payload": {"order": 12}}]});
    let refused = node.post_json("/v1/events/batch", &batch).await;
    assert_over_budget(&refused, &["pending deliveries", "would add 2"], "a batch over the budget");

    // Replays of accepted keys still answer what was committed.
    let (status, headers, body) =
        node.post_json_with_headers("/v1/events", &event(3), &[("Idempotency-Key", "order-3")]).await;
    assert_eq!(status, StatusCode::OK, "an idempotent replay is not refused: {body}");
    assert_eq!(headers.get("idempotent-replay").and_then(|v| v.to_str().ok()), Some("true"));
    assert_eq!(Accepted::from_body(&body).event_id, accepted[3].event_id);
    let replay = json!({"events": [{"type": "order.created", "payload": {"order": 4}, "idempotency_key": "order-4"}]});
    let (status, _, body) = node.post_json("/v1/events/batch", &replay).await;
    assert_eq!(status, StatusCode::ACCEPTED, "a batch of replays is not refused: {body}");
    assert_eq!(body["events"][0]["status"], 200, "{body}");
    assert_eq!(body["events"][0]["id"].as_str(), Some(accepted[4].event_id.as_str()), "{body}");

    // The headroom shows in the metrics; the node stays ready.
    assert_eq!(metric(&node, "hookraft_pending_deliveries").await, Some(10));
    assert_eq!(metric(&node, "hookraft_pending_budget").await, Some(10));
    assert!(metric(&node, "hookraft_retained_bytes").await.is_some_and(|bytes| bytes > 10 * 200));
    assert_eq!(metric(&node, "hookraft_ingest_refused_total{budget=\"pending\"}").await, Some(2));
    assert_eq!(metric(&node, "hookraft_ingest_refused_total{budget=\"memory\"}").await, Some(0));
    let (status, _, _) = node.get_json("/readyz").await;
    assert_eq!(status, StatusCode::OK, "a full budget is back-pressure, not unreadiness");
    eventually(DEADLINE, POLL_INTERVAL, "delivery to go on while ingest is refused", async || {
        receiver.count("down") > 0
    })
    .await;

    // The receiver comes back: everything accepted is delivered...
    receiver.set_default("down", Reply::ok());
    for a in &accepted {
        wait_delivery_state(&node, &a.delivery_ids()[0], "delivered", DEADLINE).await;
    }
    let expected: BTreeSet<String> = accepted.iter().map(|a| a.event_id.clone()).collect();
    assert!(expected.is_subset(&receiver.distinct_webhook_ids("down")));
    assert_eq!(metric(&node, "hookraft_pending_deliveries").await, Some(0));

    // ...and ingest is accepted again, with no restart. The refused event
    // was never created: its key makes a new event now.
    let (status, _, body) =
        node.post_json_with_headers("/v1/events", &event(10), &[("Idempotency-Key", "order-10")]).await;
    assert_eq!(status, StatusCode::ACCEPTED, "ingest resumes once the backlog drained: {body}");
    let late = Accepted::from_body(&body);
    assert!(!expected.contains(&late.event_id));
    wait_delivery_state(&node, &late.delivery_ids()[0], "delivered", DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_budget_refuses_ingest_until_retention_frees_it() {
    let receiver = ScriptedReceiver::start().await;
    // A pending budget that never binds: only the memory budget is tested.
    let options =
        NodeOptions::default().args(["--memory-budget", "3584", "--max-pending", "1000", "--retention", "2s"]);
    let node = TestNode::start_with(options).await;
    register_endpoint(&node, &json!({"url": receiver.url("ok")})).await;
    let big = |n: usize| json!({"type": "blob", "payload": {"n": n, "blob": "x".repeat(1_000)}});

    // Two events of about 1.4 KB each fit in 3.5 KiB; a third does not,
    // delivered or not: the events are retained until their retention
    // (a finished one kept encoded in the history counts about 1.3 KB).
    let mut accepted = Vec::new();
    for n in 0..2 {
        let (status, _, body) = node.post_json("/v1/events", &big(n)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        accepted.push(Accepted::from_body(&body));
    }
    let refused = node.post_json("/v1/events", &big(2)).await;
    assert_over_budget(&refused, &["memory budget", "3584 bytes", "--memory-budget"], "a third big event");
    assert_eq!(metric(&node, "hookraft_memory_budget_bytes").await, Some(3_584));
    assert_eq!(metric(&node, "hookraft_ingest_refused_total{budget=\"memory\"}").await, Some(1));
    assert_eq!(metric(&node, "hookraft_ingest_refused_total{budget=\"pending\"}").await, Some(0));
    for a in &accepted {
        wait_delivery_state(&node, &a.delivery_ids()[0], "delivered", DEADLINE).await;
    }
    // Once the leader forgets them (past the 2 s retention), there is room.
    let mut resumed = None;
    eventually(DEADLINE, POLL_INTERVAL, "ingest to resume once retention freed the memory", async || {
        let (status, _, body) = node.post_json("/v1/events", &big(2)).await;
        assert!(
            status == StatusCode::ACCEPTED || status == StatusCode::SERVICE_UNAVAILABLE,
            "only back-pressure while waiting: {status} {body}"
        );
        resumed = (status == StatusCode::ACCEPTED).then_some(body);
        resumed.is_some()
    })
    .await;
    let late = Accepted::from_body(&resumed.expect("accepted"));
    wait_delivery_state(&node, &late.delivery_ids()[0], "delivered", DEADLINE).await;
}
