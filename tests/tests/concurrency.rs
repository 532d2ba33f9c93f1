//! The per-endpoint concurrency cap, measured at the receiver.

use std::collections::BTreeSet;

use futures::future::join_all;
use hookraft_tests::{
    DEADLINE, POLL_INTERVAL, Reply, ScriptedReceiver, TestNode, eventually, fast_retry, list_deliveries,
    register_endpoint, send_event,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_3_keeps_at_most_3_requests_open_and_delivers_all_30() {
    const EVENTS: usize = 30;
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("capped", Reply::ok().delay_ms(300));
    let node = TestNode::start().await;
    let body = json!({"url": receiver.url("capped"), "max_in_flight": 3, "retry": fast_retry()});
    let (endpoint_id, _) = register_endpoint(&node, &body).await;

    let node_ref = &node;
    let sends =
        (0..EVENTS).map(|n| async move { send_event(node_ref, &json!({"type": "t", "payload": {"n": n}})).await });
    let accepted = join_all(sends).await;
    let event_ids: BTreeSet<String> = accepted.iter().map(|a| a.event_id.clone()).collect();
    assert_eq!(event_ids.len(), EVENTS);

    let query = format!("endpoint_id={endpoint_id}&state=delivered");
    eventually(DEADLINE, POLL_INTERVAL, "all 30 deliveries delivered", async || {
        list_deliveries(&node, &query).await.len() == EVENTS
    })
    .await;
    assert_eq!(receiver.distinct_webhook_ids("capped"), event_ids);
    let peak = receiver.max_concurrency("capped");
    assert!(peak <= 3, "{peak} requests were open at once with max_in_flight 3");
    assert!(peak > 1, "requests never overlapped (peak {peak}): the cap is not used for concurrency");
}
