//! Fan-out: which endpoints an event reaches, by type or by explicit ids.

use std::collections::BTreeSet;

use hookraft_tests::{
    Accepted, DEADLINE, POLL_INTERVAL, ScriptedReceiver, TestNode, eventually, fast_retry, register_endpoint,
    send_event, wait_delivery_state,
};
use serde_json::{Value, json};

struct Subscribers {
    a: String,
    b: String,
    catch_all: String,
}

/// A subscribes to "a", B to "a" and "b", C to every type.
async fn subscribe(node: &TestNode, receiver: &ScriptedReceiver) -> Subscribers {
    let register = async |name: &str, types: Value| {
        let body = json!({"url": receiver.url(name), "event_types": types, "retry": fast_retry()});
        register_endpoint(node, &body).await.0
    };
    let a = register("a", json!(["a"])).await;
    let b = register("b", json!(["a", "b"])).await;
    let catch_all = register("c", Value::Null).await;
    Subscribers { a, b, catch_all }
}

/// Waits until every delivery of `accepted` is delivered and its request seen
/// at the receiver path named in `paths` (by endpoint id).
async fn wait_all_delivered(node: &TestNode, receiver: &ScriptedReceiver, accepted: &Accepted, paths: &[(&str, &str)]) {
    for (delivery_id, endpoint_id) in &accepted.deliveries {
        wait_delivery_state(node, delivery_id, "delivered", DEADLINE).await;
        let (_, path) = paths.iter().find(|(id, _)| id == endpoint_id).expect("a known endpoint");
        let what = format!("event {} at /hooks/{path}", accepted.event_id);
        eventually(DEADLINE, POLL_INTERVAL, &what, async || {
            !receiver.requests_for_event(path, &accepted.event_id).is_empty()
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_a_reaches_a_b_and_catch_all_while_type_b_reaches_only_b_and_catch_all() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let subs = subscribe(&node, &receiver).await;
    let paths = [(subs.a.as_str(), "a"), (subs.b.as_str(), "b"), (subs.catch_all.as_str(), "c")];

    let type_a = send_event(&node, &json!({"type": "a", "payload": {"t": "a"}})).await;
    let expected = BTreeSet::from([subs.a.clone(), subs.b.clone(), subs.catch_all.clone()]);
    assert_eq!(type_a.endpoint_ids(), expected, "{}", type_a.body);
    assert_eq!(type_a.deliveries.len(), 3, "one delivery per endpoint");
    wait_all_delivered(&node, &receiver, &type_a, &paths).await;

    let type_b = send_event(&node, &json!({"type": "b", "payload": {"t": "b"}})).await;
    assert_eq!(type_b.endpoint_ids(), BTreeSet::from([subs.b.clone(), subs.catch_all.clone()]), "{}", type_b.body);
    wait_all_delivered(&node, &receiver, &type_b, &paths).await;
    assert!(receiver.requests_for_event("a", &type_b.event_id).is_empty(), "A is not subscribed to b");
    assert_eq!(receiver.count("a"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_endpoint_ids_deliver_only_to_the_listed_endpoint_whatever_the_type() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let subs = subscribe(&node, &receiver).await;
    let paths = [(subs.a.as_str(), "a"), (subs.b.as_str(), "b"), (subs.catch_all.as_str(), "c")];

    let body = json!({"type": "zzz", "payload": {"explicit": true}, "endpoint_ids": [subs.a]});
    let explicit = send_event(&node, &body).await;
    assert_eq!(explicit.endpoint_ids(), BTreeSet::from([subs.a.clone()]), "{}", explicit.body);
    wait_all_delivered(&node, &receiver, &explicit, &paths).await;
    assert_eq!(receiver.count("b"), 0);
    assert_eq!(receiver.count("c"), 0);
}
