//! "Accepted means durable": every event answered 202 survives `kill -9` and
//! is delivered after a restart on the same data directory, whether it was
//! posted alone or in a batch.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use hookraft_tests::{
    Accepted, NodeOptions, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestNode, eventually, list_deliveries,
    register_endpoint, send_event, wait_for,
};
use serde_json::{Value, json};

const EVENTS: usize = 200;
/// Concurrent producers while ingesting.
const PRODUCERS: usize = 16;
/// Delivering 200 events after a restart may wait out a breaker cooldown.
const RECOVERY_DEADLINE: Duration = Duration::from_secs(180);

/// A node with one endpoint that answers 503 until the crash, so every
/// accepted event is still pending when the node is killed.
async fn node_with_a_failing_endpoint(options: NodeOptions) -> (ScriptedReceiver, TestNode, String) {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("durable", Reply::status(503));
    let node = TestNode::start_with(options).await;
    let retry = json!({"attempts_max": 100, "base_ms": 200, "cap_ms": 1000, "max_age_s": 3600});
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("durable"), "retry": retry})).await;
    (receiver, node, endpoint_id)
}

/// `kill -9`, restart, let the endpoint recover, and assert that exactly the
/// `accepted` events arrive and the node lists exactly their deliveries.
async fn kill_restart_and_expect(
    receiver: &ScriptedReceiver,
    node: &mut TestNode,
    endpoint_id: &str,
    accepted: &[Accepted],
) {
    let event_ids: BTreeSet<String> = accepted.iter().map(|a| a.event_id.clone()).collect();
    let delivery_ids: BTreeSet<String> = accepted.iter().map(|a| a.delivery_for(endpoint_id)).collect();
    assert_eq!(event_ids.len(), EVENTS, "every event acknowledged with its own id");
    assert_eq!(delivery_ids.len(), EVENTS);

    node.kill9().await;
    node.restart().await;
    receiver.set_default("durable", Reply::ok());

    eventually(RECOVERY_DEADLINE, POLL_INTERVAL, "all 200 acknowledged events at the receiver", async || {
        receiver.distinct_webhook_ids("durable").is_superset(&event_ids)
    })
    .await;
    assert_eq!(receiver.distinct_webhook_ids("durable"), event_ids, "the receiver saw only acknowledged events");

    let query = format!("endpoint_id={endpoint_id}");
    let deliveries = wait_for(RECOVERY_DEADLINE, POLL_INTERVAL, "every delivery to report delivered", async || {
        let deliveries = list_deliveries(node, &query).await;
        let undelivered = deliveries.iter().filter(|d| d["state"] != "delivered").count();
        if undelivered == 0 { Ok(deliveries) } else { Err(format!("{undelivered} not delivered yet")) }
    })
    .await;
    let listed: BTreeSet<String> = deliveries.iter().filter_map(|d| d["id"].as_str().map(str::to_owned)).collect();
    assert_eq!(listed, delivery_ids, "the node lists exactly the acknowledged deliveries");
}

/// Posts [`EVENTS`] single events from [`PRODUCERS`] producers at once.
async fn post_events_one_at_a_time(node: &TestNode) -> Vec<Accepted> {
    futures::stream::iter(0..EVENTS)
        .map(|n| async move { send_event(node, &json!({"type": "t", "payload": {"n": n}})).await })
        .buffer_unordered(PRODUCERS)
        .collect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_200_acknowledged_events_are_delivered_after_kill_9_and_restart() {
    let (receiver, mut node, endpoint_id) = node_with_a_failing_endpoint(NodeOptions::default()).await;
    let accepted = post_events_one_at_a_time(&node).await;
    kill_restart_and_expect(&receiver, &mut node, &endpoint_id, &accepted).await;
}

/// The same with Raft and the deliveries on runtimes of their own: the
/// flag moves tasks between threads, not what is durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_delivery_threads_all_200_acknowledged_events_are_delivered_after_kill_9_and_restart() {
    let options = NodeOptions::default().arg("--delivery-threads=1");
    let (receiver, mut node, endpoint_id) = node_with_a_failing_endpoint(options).await;
    let accepted = post_events_one_at_a_time(&node).await;
    kill_restart_and_expect(&receiver, &mut node, &endpoint_id, &accepted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_of_four_accepted_batches_of_50_is_delivered_after_kill_9_and_restart() {
    let (receiver, mut node, endpoint_id) = node_with_a_failing_endpoint(NodeOptions::default()).await;
    let mut accepted = Vec::with_capacity(EVENTS);
    for batch in 0..4 {
        let events: Vec<Value> = (0..50).map(|n| json!({"type": "t", "payload": {"batch": batch, "n": n}})).collect();
        let (status, _, body) = node.post_json("/v1/events/batch", &json!({"events": events})).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let results = body["events"].as_array().unwrap_or_else(|| panic!("no events array in {body}"));
        assert_eq!(results.len(), 50, "{body}");
        accepted.extend(results.iter().map(Accepted::from_body));
    }
    kill_restart_and_expect(&receiver, &mut node, &endpoint_id, &accepted).await;
}
