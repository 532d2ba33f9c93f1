//! Reading the past: `GET /v1/events` with its filters and cursor, and
//! `POST /v1/events/{id}/replay`.

use hookraft_tests::{
    DEADLINE, Reply, ScriptedReceiver, StatusCode, TestNode, assert_problem, fast_retry, register_endpoint, send_event,
    wait_delivery_state,
};
use serde_json::{Value, json};

fn ids(page: &Value) -> Vec<String> {
    page["data"].as_array().expect("data").iter().map(|e| e["id"].as_str().expect("id").to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_listed_by_type_time_endpoint_and_state_page_by_page_and_replayed_whole() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("down", Reply::status(500));
    let node = TestNode::start().await;
    let (up, _) = register_endpoint(&node, &json!({"url": receiver.url("up")})).await;
    let (down, _) = register_endpoint(
        &node,
        &json!({"url": receiver.url("down"), "event_types": ["order.failed"], "retry": fast_retry()}),
    )
    .await;
    let paid = send_event(&node, &json!({"type": "order.paid", "payload": {"n": 1}})).await;
    let failed = send_event(&node, &json!({"type": "order.failed", "payload": {"n": 2}})).await;
    let later = send_event(&node, &json!({"type": "order.paid", "payload": {"n": 3}})).await;
    for event in [&paid, &later] {
        wait_delivery_state(&node, &event.delivery_for(&up), "delivered", DEADLINE).await;
    }
    let dead = wait_delivery_state(&node, &failed.delivery_for(&down), "dead", DEADLINE).await;
    wait_delivery_state(&node, &failed.delivery_for(&up), "delivered", DEADLINE).await;

    let (status, _, all) = node.get_json("/v1/events").await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(ids(&all), vec![paid.event_id.clone(), failed.event_id.clone(), later.event_id.clone()]);
    assert!(all["data"][0].get("payload").is_none(), "a listing carries no payload");
    assert_eq!(all["data"][0]["deliveries"][0]["state"], "delivered");
    let (_, _, typed) = node.get_json("/v1/events?type=order.paid").await;
    assert_eq!(ids(&typed), vec![paid.event_id.clone(), later.event_id.clone()]);
    let (_, _, with_dead) = node.get_json("/v1/events?state=dead").await;
    assert_eq!(ids(&with_dead), vec![failed.event_id.clone()]);
    let (_, _, to_down) = node.get_json(&format!("/v1/events?endpoint_id={down}")).await;
    assert_eq!(ids(&to_down), vec![failed.event_id.clone()]);
    let (_, _, none_yet) = node.get_json("/v1/events?until=2000-01-01T00:00:00Z").await;
    assert_eq!(ids(&none_yet), Vec::<String>::new());

    // One at a time, following the cursor.
    let mut seen = Vec::new();
    let mut path = "/v1/events?limit=1".to_string();
    loop {
        let (_, _, page) = node.get_json(&path).await;
        seen.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/events?limit=1&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, ids(&all));

    // Replay the whole event: the dead delivery goes again, the delivered one is skipped.
    let (status, _, answer) = node.post_empty(&format!("/v1/events/{}/replay", failed.event_id)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["replayed"], json!([dead["id"]]), "{answer}");
    assert_eq!(answer["skipped"][0]["reason"], "delivered", "{answer}");
    wait_delivery_state(&node, &failed.delivery_for(&down), "dead", DEADLINE).await;
    let before = receiver.count("up");
    let everything = json!({"include_delivered": true});
    let (status, _, answer) = node.post_json(&format!("/v1/events/{}/replay", paid.event_id), &everything).await;
    assert_eq!((status, answer["replayed"].as_array().map(Vec::len)), (StatusCode::ACCEPTED, Some(1)), "{answer}");
    wait_delivery_state(&node, &paid.delivery_for(&up), "delivered", DEADLINE).await;
    let sent_again = async || receiver.count("up") > before;
    hookraft_tests::eventually(DEADLINE, hookraft_tests::POLL_INTERVAL, "the replayed event sent again", sent_again)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_listing_and_replay_requests_are_refused_with_problems() {
    let node = TestNode::start().await;
    for query in ["state=lost", "since=yesterday", "endpoint_id=nope", "limit=0", "limit=1001", "cursor=x", "colour=1"]
    {
        let response = node.get_json(&format!("/v1/events?{query}")).await;
        assert_problem(&response, StatusCode::BAD_REQUEST, query);
    }
    let missing = node.post_empty("/v1/events/evt_01ARZ3NDEKTSV4RRFFQ69G5FAV/replay").await;
    assert_problem(&missing, StatusCode::NOT_FOUND, "unknown event");
    let event = send_event(&node, &json!({"type": "t", "payload": {}})).await;
    let bad = node.post_json(&format!("/v1/events/{}/replay", event.event_id), &json!({"all": true})).await;
    assert_problem(&bad, StatusCode::UNPROCESSABLE_ENTITY, "unknown field");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoints_stats_count_its_attempts_by_class_and_window() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint, _) =
        register_endpoint(&node, &json!({"url": receiver.url("hook"), "retry": fast_retry(), "max_in_flight": 1}))
            .await;
    for n in 0..3 {
        receiver.push("hook", Reply::status(503)); // each event's first attempt
        let event = send_event(&node, &json!({"type": "t", "payload": {"n": n}})).await;
        wait_delivery_state(&node, &event.delivery_for(&endpoint), "delivered", DEADLINE).await;
    }
    let (status, _, stats) = node.get_json(&format!("/v1/endpoints/{endpoint}/stats")).await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    for window in ["5m", "1h", "24h"] {
        let counts = &stats["windows"][window];
        assert_eq!(counts["attempts"], 6, "{window}: {stats}");
        assert_eq!(counts["successes"], 3, "{window}: {stats}");
        assert_eq!(counts["failures"]["server_5xx"], 3, "{window}: {stats}");
        assert_eq!(counts["success_rate"], 0.5, "{window}: {stats}");
        assert!(counts["latency_ms"]["p99"].is_u64(), "{window}: {stats}");
    }
    let missing = node.get_json("/v1/endpoints/ep_01ARZ3NDEKTSV4RRFFQ69G5FAV/stats").await;
    assert_problem(&missing, StatusCode::NOT_FOUND, "unknown endpoint");
}
