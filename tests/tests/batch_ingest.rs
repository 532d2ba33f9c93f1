//! `POST /v1/events/batch`: many events in one request, committed in one log
//! entry together, answered one result each; one bad event rejects the
//! batch and commits nothing. (That accepted batches survive `kill -9` is
//! in `crash_safety.rs`.)

use std::collections::BTreeSet;

use hookraft_tests::{
    Accepted, DEADLINE, ScriptedReceiver, StatusCode, TestNode, assert_problem, fast_retry, list_deliveries,
    register_endpoint, str_field, wait_delivery_state,
};
use serde_json::{Value, json};

/// The results of a batch answer, asserting it is a 202 with one per event.
fn results(status: StatusCode, body: &Value, events: usize) -> Vec<Value> {
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let results = body["events"].as_array().unwrap_or_else(|| panic!("no events array in {body}")).clone();
    assert_eq!(results.len(), events, "one result per event: {body}");
    results
}

fn accepted(result: &Value, status: u16) -> Accepted {
    assert_eq!(result["status"], status, "{result}");
    Accepted::from_body(result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_accepted_whole_and_each_event_reaches_its_subscribers() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let orders = json!({"url": receiver.url("orders"), "event_types": ["order.paid"], "retry": fast_retry()});
    let (orders_id, _) = register_endpoint(&node, &orders).await;
    let users = json!({"url": receiver.url("users"), "event_types": ["user.created"], "retry": fast_retry()});
    let (users_id, _) = register_endpoint(&node, &users).await;

    let batch = json!({"events": [
        {"type": "order.paid", "payload": {"order": 1}},
        {"type": "user.created", "payload": {"user": "ada"}},
        {"type": "order.paid", "payload": {"order": 2}},
        {"type": "anything", "payload": {"direct": true}, "endpoint_ids": [users_id]},
        {"type": "nobody.listens", "payload": [1, 2, 3]},
    ]});
    let (status, _, body) = node.post_json("/v1/events/batch", &batch).await;
    let results = results(status, &body, 5);
    let events: Vec<Accepted> = results.iter().map(|r| accepted(r, 202)).collect();
    let ids: BTreeSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
    assert_eq!(ids.len(), 5, "every event has its own id: {body}");
    assert_eq!(str_field(&results[1], "type"), "user.created", "results keep the order of the events");
    let targets: Vec<BTreeSet<String>> = events.iter().map(Accepted::endpoint_ids).collect();
    let just = |id: &str| BTreeSet::from([id.to_string()]);
    assert_eq!(targets, [just(&orders_id), just(&users_id), just(&orders_id), just(&users_id), BTreeSet::new()]);

    for (event, endpoint) in [(&events[0], &orders_id), (&events[1], &users_id), (&events[2], &orders_id)] {
        wait_delivery_state(&node, &event.delivery_for(endpoint), "delivered", DEADLINE).await;
    }
    wait_delivery_state(&node, &events[3].delivery_for(&users_id), "delivered", DEADLINE).await;
    let payload_of = |name, event: &Accepted| receiver.requests_for_event(name, &event.event_id)[0].body_json();
    assert_eq!(payload_of("orders", &events[2]), json!({"order": 2}), "each payload arrives unchanged");
    assert_eq!(payload_of("users", &events[1]), json!({"user": "ada"}));
    assert_eq!(receiver.count("orders"), 2);
    assert_eq!(receiver.count("users"), 2);
    let (status, _, stored) = node.get_json(&format!("/v1/events/{}", events[4].event_id)).await;
    assert_eq!(status, StatusCode::OK, "{stored}");
    assert_eq!(stored["payload"], json!([1, 2, 3]), "an event without subscribers is still stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_in_a_batch_replay_earlier_events_within_and_across_batches() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint_id, _) =
        register_endpoint(&node, &json!({"url": receiver.url("keyed"), "retry": fast_retry()})).await;

    let first = json!({"events": [
        {"type": "t", "payload": {"n": 1}, "idempotency_key": "k-1"},
        {"type": "t", "payload": {"n": 2}, "idempotency_key": "k-2"},
        {"type": "t", "payload": {"n": 1}, "idempotency_key": "k-1"},
    ]});
    let (status, _, body) = node.post_json("/v1/events/batch", &first).await;
    let first = results(status, &body, 3);
    let (one, two) = (accepted(&first[0], 202), accepted(&first[1], 202));
    let repeated = accepted(&first[2], 200);
    assert_eq!(repeated.event_id, one.event_id, "a key repeated within the batch names the first event");
    assert_eq!(repeated.delivery_ids(), one.delivery_ids());

    // A retried batch: the keyed events replay, the new one is created.
    let retried = json!({"events": [
        {"type": "t", "payload": {"n": 2}, "idempotency_key": "k-2"},
        {"type": "t", "payload": {"n": 3}, "idempotency_key": "k-3"},
    ]});
    let (status, _, body) = node.post_json("/v1/events/batch", &retried).await;
    let retried = results(status, &body, 2);
    assert_eq!(accepted(&retried[0], 200).event_id, two.event_id);
    let three = accepted(&retried[1], 202);

    // The single-event route shares the keys.
    let event = json!({"type": "t", "payload": {}});
    let (status, _, body) = node.post_json_with_headers("/v1/events", &event, &[("Idempotency-Key", "k-3")]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(Accepted::from_body(&body).event_id, three.event_id);

    let expected: BTreeSet<String> = [&one, &two, &three].iter().map(|a| a.event_id.clone()).collect();
    for event in [&one, &two, &three] {
        wait_delivery_state(&node, &event.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    }
    assert_eq!(list_deliveries(&node, &format!("endpoint_id={endpoint_id}")).await.len(), 3, "one delivery per key");
    assert_eq!(receiver.distinct_webhook_ids("keyed"), expected);
    assert_eq!(receiver.count("keyed"), 3, "each keyed event was sent once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_batch_replays_events_whose_endpoint_was_deleted_since() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("gone"), "retry": fast_retry()})).await;
    let batch = json!({"events": [
        {"type": "t", "payload": {"n": 1}, "endpoint_ids": [endpoint_id], "idempotency_key": "retry-1"},
    ]});
    let (status, _, body) = node.post_json("/v1/events/batch", &batch).await;
    let first = accepted(&results(status, &body, 1)[0], 202);
    let (status, _, answer) = node.delete(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");

    // The producer never saw the first answer and sends the same batch again.
    let (status, _, body) = node.post_json("/v1/events/batch", &batch).await;
    let replayed = accepted(&results(status, &body, 1)[0], 200);
    assert_eq!(replayed.event_id, first.event_id, "the committed event, not a refusal for the deleted endpoint");
    // Without a key the same event is new, and its endpoint is gone.
    let unkeyed = json!({"events": [{"type": "t", "payload": {}, "endpoint_ids": [endpoint_id]}]});
    let response = node.post_json("/v1/events/batch", &unkeyed).await;
    assert_problem(&response, StatusCode::UNPROCESSABLE_ENTITY, "an unknown endpoint without a key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_event_rejects_the_batch_naming_it_and_commits_nothing() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("x"), "retry": fast_retry()})).await;
    let good = json!({"type": "t", "payload": {"fine": true}});
    let with = |bad: Value| json!({"events": [good, good, bad]});
    let ghost = format!("ep_{}", "0".repeat(26));
    let too_many: Vec<Value> = (0..1_001).map(|_| good.clone()).collect();
    let cases = [
        ("no events", json!({"events": []}), None),
        ("over 1,000 events", json!({"events": too_many}), None),
        ("events missing", json!({}), None),
        ("events not a list", json!({"events": good}), None),
        ("an unknown field", json!({"events": [good], "extra": 1}), None),
        ("an empty type", with(json!({"type": "", "payload": {}})), Some("events[2]")),
        ("a missing payload", with(json!({"type": "t"})), None),
        ("an unknown endpoint", with(json!({"type": "t", "payload": {}, "endpoint_ids": [ghost]})), Some("events[2]")),
        (
            "a malformed endpoint id",
            with(json!({"type": "t", "payload": {}, "endpoint_ids": ["nope"]})),
            Some("events[2]"),
        ),
        (
            "an empty idempotency key",
            with(json!({"type": "t", "payload": {}, "idempotency_key": ""})),
            Some("events[2]"),
        ),
        (
            "a key over 256 chars",
            with(json!({"type": "t", "payload": {}, "idempotency_key": "k".repeat(257)})),
            Some("events[2]"),
        ),
    ];
    for (what, body, names) in &cases {
        let response = node.post_json("/v1/events/batch", body).await;
        assert_problem(&response, StatusCode::UNPROCESSABLE_ENTITY, what);
        if let Some(names) = names {
            let detail = response.2["detail"].as_str().unwrap_or_default();
            assert!(detail.starts_with(names), "{what}: the problem names the event: {detail}");
        }
    }
    let not_json = node.request(reqwest::Method::POST, "/v1/events/batch").header("content-type", "application/json");
    assert_problem(&node.send(not_json.body("{\"events\": [")).await, StatusCode::BAD_REQUEST, "truncated JSON");
    let plain = node.request(reqwest::Method::POST, "/v1/events/batch").header("content-type", "text/plain");
    assert_problem(&node.send(plain.body("{}")).await, StatusCode::UNSUPPORTED_MEDIA_TYPE, "not sent as JSON");

    assert!(list_deliveries(&node, &format!("endpoint_id={endpoint_id}")).await.is_empty(), "nothing was committed");
    // The node still takes a good batch after all that.
    let (status, _, body) = node.post_json("/v1/events/batch", &json!({"events": [good]})).await;
    let event = accepted(&results(status, &body, 1)[0], 202);
    wait_delivery_state(&node, &event.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    assert_eq!(receiver.count("x"), 1, "only the good batch reached the receiver");
}
