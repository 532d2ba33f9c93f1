//! Dead-lettering and replay: exhausted attempts, 410 Gone, single and bulk
//! replay after the endpoint is fixed.

use std::collections::BTreeSet;

use hookraft_tests::{
    DEADLINE, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestNode, assert_problem, attempts, entries_of_kind,
    eventually, list_deliveries, register_endpoint, send_event, timeline_kinds, wait_delivery_state,
};
use serde_json::{Value, json};

fn retry(attempts_max: u32) -> Value {
    json!({"attempts_max": attempts_max, "base_ms": 50, "cap_ms": 200, "max_age_s": 3600})
}

fn position(kinds: &[String], kind: &str) -> usize {
    kinds.iter().rposition(|k| k == kind).unwrap_or_else(|| panic!("no {kind} in the timeline {kinds:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_500_is_dead_lettered_after_attempts_max_and_replay_after_fixing_the_url_delivers() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("broken", Reply::status(500));
    let node = TestNode::start().await;
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("broken"), "retry": retry(3)})).await;
    let accepted = send_event(&node, &json!({"type": "t", "payload": {"n": 1}})).await;
    let delivery_id = accepted.delivery_for(&endpoint_id);

    let dead = wait_delivery_state(&node, &delivery_id, "dead", DEADLINE).await;
    assert_eq!(dead["attempt_count"], 3, "{dead:#}");
    assert_eq!(attempts(&dead).len(), 3, "{dead:#}");
    assert!(attempts(&dead).iter().all(|a| a["status_code"] == 500), "{dead:#}");
    let dead_entries = entries_of_kind(&dead, "dead");
    assert_eq!(dead_entries.len(), 1, "{dead:#}");
    assert!(dead_entries[0]["reason"].as_str().is_some_and(|r| !r.is_empty()), "{dead:#}");
    assert_eq!(receiver.count("broken"), 3);

    let dead_letters = list_deliveries(&node, &format!("state=dead&endpoint_id={endpoint_id}")).await;
    let ids: Vec<&str> = dead_letters.iter().filter_map(|d| d["id"].as_str()).collect();
    assert_eq!(ids, [delivery_id.as_str()], "the dead-letter queue of the endpoint");
    assert!(dead_letters.iter().all(|d| d["state"] == "dead"));

    let (status, _, patched) =
        node.patch_json(&format!("/v1/endpoints/{endpoint_id}"), &json!({"url": receiver.url("fixed")})).await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["url"], receiver.url("fixed"));
    let (status, _, replay) = node.post_empty(&format!("/v1/deliveries/{delivery_id}/replay")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{replay}");
    assert_eq!(replay["id"], delivery_id.as_str());
    assert_eq!(replay["state"], "pending");

    let delivered = wait_delivery_state(&node, &delivery_id, "delivered", DEADLINE).await;
    let kinds = timeline_kinds(&delivered);
    assert!(position(&kinds, "dead") < position(&kinds, "replayed"), "{kinds:?}");
    assert!(position(&kinds, "replayed") < position(&kinds, "delivered"), "{kinds:?}");
    let fixed = receiver.requests("fixed");
    assert_eq!(fixed.len(), 1);
    assert_eq!(fixed[0].webhook_id(), Some(accepted.event_id.as_str()), "replay keeps the webhook-id");
    assert_eq!(receiver.count("broken"), 3, "nothing more went to the old url");
    assert!(list_deliveries(&node, &format!("state=dead&endpoint_id={endpoint_id}")).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_of_dead_deliveries_after_fix_delivers_all_and_a_future_window_replays_none() {
    const EVENTS: usize = 4;
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("down", Reply::status(500));
    let node = TestNode::start().await;
    // One attempt each keeps the consecutive failures under the breaker's threshold.
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("down"), "retry": retry(1)})).await;
    let mut delivery_ids = Vec::new();
    let mut event_ids = BTreeSet::new();
    for n in 0..EVENTS {
        let accepted = send_event(&node, &json!({"type": "t", "payload": {"n": n}})).await;
        delivery_ids.push(accepted.delivery_for(&endpoint_id));
        event_ids.insert(accepted.event_id);
    }
    for id in &delivery_ids {
        wait_delivery_state(&node, id, "dead", DEADLINE).await;
    }
    assert_eq!(list_deliveries(&node, &format!("state=dead&endpoint_id={endpoint_id}")).await.len(), EVENTS);

    let (status, _, patched) =
        node.patch_json(&format!("/v1/endpoints/{endpoint_id}"), &json!({"url": receiver.url("up")})).await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    let replay_path = format!("/v1/endpoints/{endpoint_id}/replay");
    for window in [
        json!({"state": "dead", "since": "2999-01-01T00:00:00.000Z"}),
        json!({"state": "dead", "until": "2000-01-01T00:00:00.000Z"}),
    ] {
        let (status, _, answer) = node.post_json(&replay_path, &window).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{window}: {answer}");
        assert_eq!(answer["replayed"], 0, "{window} matches no delivery: {answer}");
    }
    let bad_cursor = node.post_json(&replay_path, &json!({"state": "dead", "cursor": "evt_not-a-delivery"})).await;
    assert_problem(&bad_cursor, StatusCode::BAD_REQUEST, "bulk replay with a cursor that is no delivery id");
    let (status, _, answer) = node.post_json(&replay_path, &json!({"state": "dead"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["replayed"], EVENTS, "{answer}");
    assert!(answer["next_cursor"].is_null(), "all replayed in one call: {answer}");

    for id in &delivery_ids {
        let delivered = wait_delivery_state(&node, id, "delivered", DEADLINE).await;
        assert!(timeline_kinds(&delivered).iter().any(|k| k == "replayed"), "{delivered:#}");
    }
    assert_eq!(receiver.distinct_webhook_ids("up"), event_ids);
    assert!(list_deliveries(&node, &format!("state=dead&endpoint_id={endpoint_id}")).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_410_dead_letters_and_disables_the_endpoint_until_it_is_enabled_again() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("gone", Reply::status(410));
    let node = TestNode::start().await;
    let (gone_id, _) = register_endpoint(&node, &json!({"url": receiver.url("gone"), "retry": retry(5)})).await;
    let (control_id, _) = register_endpoint(&node, &json!({"url": receiver.url("control"), "retry": retry(5)})).await;

    let first = send_event(&node, &json!({"type": "t", "payload": {"n": 1}})).await;
    assert_eq!(first.endpoint_ids(), BTreeSet::from([gone_id.clone(), control_id.clone()]));
    let gone_delivery = first.delivery_for(&gone_id);
    let dead = wait_delivery_state(&node, &gone_delivery, "dead", DEADLINE).await;
    assert_eq!(dead["attempt_count"], 1, "410 is not retried: {dead:#}");
    let dead_entries = entries_of_kind(&dead, "dead");
    assert!(dead_entries.first().is_some_and(|e| e["reason"].as_str().is_some_and(|r| !r.is_empty())), "{dead:#}");
    let (status, _, endpoint) = node.get_json(&format!("/v1/endpoints/{gone_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(endpoint["disabled"], true, "{endpoint}");
    assert!(endpoint["disabled_reason"].is_string(), "{endpoint}");

    let second = send_event(&node, &json!({"type": "t", "payload": {"n": 2}})).await;
    assert_eq!(second.endpoint_ids(), BTreeSet::from([control_id.clone()]), "a disabled endpoint gets no delivery");
    wait_delivery_state(&node, &second.delivery_for(&control_id), "delivered", DEADLINE).await;
    assert_eq!(receiver.count("gone"), 1);

    let replay_one = format!("/v1/deliveries/{gone_delivery}/replay");
    assert_problem(&node.post_empty(&replay_one).await, StatusCode::CONFLICT, "replay to a disabled endpoint");
    let replay_bulk = format!("/v1/endpoints/{gone_id}/replay");
    let response = node.post_json(&replay_bulk, &json!({"state": "dead"})).await;
    assert_problem(&response, StatusCode::CONFLICT, "bulk replay to a disabled endpoint");

    receiver.set_default("gone", Reply::ok());
    let (status, _, enabled) = node.patch_json(&format!("/v1/endpoints/{gone_id}"), &json!({"disabled": false})).await;
    assert_eq!(status, StatusCode::OK, "{enabled}");
    assert_eq!(enabled["disabled"], false, "{enabled}");
    let (status, _, replay) = node.post_empty(&replay_one).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{replay}");
    wait_delivery_state(&node, &gone_delivery, "delivered", DEADLINE).await;
    eventually(DEADLINE, POLL_INTERVAL, "the replayed request at the receiver", async || receiver.count("gone") == 2)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_delivery_that_is_still_queued_is_409() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("busy", Reply::status(503));
    let node = TestNode::start().await;
    let slow_retry = json!({"attempts_max": 100, "base_ms": 10_000, "cap_ms": 60_000, "max_age_s": 3600});
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("busy"), "retry": slow_retry})).await;
    let accepted = send_event(&node, &json!({"type": "t", "payload": {}})).await;
    let delivery_id = accepted.delivery_for(&endpoint_id);

    let response = node.post_empty(&format!("/v1/deliveries/{delivery_id}/replay")).await;
    assert_problem(&response, StatusCode::CONFLICT, "replay of a queued delivery");
    let (status, _, answer) = node.post_json(&format!("/v1/endpoints/{endpoint_id}/replay"), &json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["replayed"], 0, "bulk replay takes only dead deliveries: {answer}");
}
