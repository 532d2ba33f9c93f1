//! Ordered delivery per key, end to end: each key's events arrive in
//! sequence order through retries, a dead head blocks its key until it is
//! skipped or replayed, and bad settings are refused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use hookraft_tests::{
    ClusterOptions, DEADLINE, POLL_INTERVAL, StatusCode, TestCluster, TestNode, assert_problem, eventually,
    get_delivery, register_endpoint, send_event, shard_of_endpoint, wait_delivery_state,
};
use serde_json::{Value, json};

/// One request as the receiver saw it: key, sequence, attempt, event
/// number (from the payload), and the status it answered.
#[derive(Debug, Clone)]
struct Seen {
    key: String,
    sequence: u64,
    n: u64,
    answered: u16,
}

/// A receiver that fails the first attempt of every third event (by the
/// event's number `n`), and every attempt of the numbers in `always_fail`.
#[derive(Clone, Default)]
struct Receiver {
    seen: Arc<Mutex<Vec<Seen>>>,
    always_fail: Arc<Mutex<Vec<u64>>>,
}

impl Receiver {
    async fn start(&self) -> String {
        let app = axum::Router::new().route("/hook", axum::routing::post(answer)).with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/hook")
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn answer(State(receiver): State<Receiver>, headers: HeaderMap, body: String) -> AxumStatus {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let n = serde_json::from_str::<Value>(&body).ok().and_then(|b| b["n"].as_u64()).unwrap_or(0);
    let attempt: u64 = header("webhook-attempt").parse().unwrap_or(0);
    let fail = (attempt == 1 && n.is_multiple_of(3)) || receiver.always_fail.lock().unwrap().contains(&n);
    let answered = if fail { 503 } else { 200 };
    receiver.seen.lock().unwrap().push(Seen {
        key: header("webhook-ordering-key"),
        sequence: header("webhook-sequence").parse().unwrap_or(0),
        n,
        answered,
    });
    AxumStatus::from_u16(answered).unwrap()
}

fn patient_retry() -> Value {
    json!({"attempts_max": 20, "base_ms": 20, "cap_ms": 100, "max_age_s": 3600})
}

/// Each key's requests, in arrival order, ask for exactly the key's lowest
/// sequence not yet answered 2xx: never a later one while an earlier one
/// is unsettled, never one twice after a success.
fn assert_in_order(seen: &[Seen], keys: &[&str], per_key: u64) {
    let mut next: BTreeMap<&str, u64> = keys.iter().map(|k| (*k, 1)).collect();
    for request in seen {
        let expected = next.get_mut(request.key.as_str()).unwrap_or_else(|| panic!("unknown key in {request:?}"));
        assert_eq!(request.sequence, *expected, "key {} out of order: {request:?} in {seen:#?}", request.key);
        if request.answered == 200 {
            *expected += 1;
        }
    }
    for (key, next) in next {
        assert_eq!(next, per_key + 1, "key {key}: every event delivered once in order");
    }
}

async fn post(node: &TestNode, n: u64, key: &str) -> String {
    let body = json!({"type": "subscription.updated", "payload": {"n": n}, "ordering_key": key});
    send_event(node, &body).await.delivery_ids()[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_keys_events_arrive_in_sequence_through_retries_while_keys_go_in_parallel() {
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let node = TestNode::start().await;
    let body = json!({"url": url, "ordering": "per_key", "retry": patient_retry(), "max_in_flight": 4});
    let (endpoint_id, _) = register_endpoint(&node, &body).await;
    let keys = ["cus_a", "cus_b", "cus_c"];
    let mut last = Vec::new();
    for n in 1..=30u64 {
        last.push(post(&node, n, keys[(n % 3) as usize]).await);
    }
    for delivery in &last {
        wait_delivery_state(&node, delivery, "delivered", DEADLINE).await;
    }
    let seen = receiver.seen();
    assert_in_order(&seen, &keys, 10);
    assert!(seen.iter().any(|s| s.answered == 503), "some first attempts failed and were retried");

    let delivery = get_delivery(&node, &last[4]).await;
    assert_eq!(delivery["ordering_key"], keys[5 % 3], "{delivery}");
    assert_eq!(delivery["sequence"], 2, "{delivery}");
    let (_, _, endpoint) = node.get_json(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert_eq!((endpoint["ordering"].clone(), endpoint["on_dead"].clone()), (json!("per_key"), json!("block")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_head_blocks_its_key_until_skipped_or_replayed_and_other_keys_go_on() {
    let receiver = Receiver::default();
    receiver.always_fail.lock().unwrap().extend([1, 4]);
    let url = receiver.start().await;
    let node = TestNode::start().await;
    let retry = json!({"attempts_max": 2, "base_ms": 20, "cap_ms": 50, "max_age_s": 3600});
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": url, "ordering": "per_key", "retry": retry})).await;
    let first = post(&node, 1, "k").await;
    let second = post(&node, 2, "k").await;
    let other = post(&node, 7, "other").await;
    wait_delivery_state(&node, &first, "dead", DEADLINE).await;
    wait_delivery_state(&node, &other, "delivered", DEADLINE).await;

    let (status, _, blocked) = node.get_json(&format!("/v1/endpoints/{endpoint_id}/blocked-keys")).await;
    assert_eq!(status, StatusCode::OK, "{blocked}");
    assert_eq!(blocked["data"], json!([{"ordering_key": "k", "delivery_id": first, "sequence": 1}]));
    // The event behind the dead head is held: not one request for it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!receiver.seen().iter().any(|s| s.n == 2), "sent past a dead head");
    assert_eq!(get_delivery(&node, &second).await["state"], "pending");

    let skip = format!("/v1/endpoints/{endpoint_id}/blocked-keys/skip");
    let (status, _, skipped) = node.post_json(&skip, &json!({"ordering_key": "k"})).await;
    assert_eq!(status, StatusCode::OK, "{skipped}");
    assert_eq!(skipped, json!({"skipped": first, "next": second}));
    wait_delivery_state(&node, &second, "delivered", DEADLINE).await;
    let kinds: Vec<Value> =
        get_delivery(&node, &first).await["timeline"].as_array().unwrap().iter().map(|e| e["kind"].clone()).collect();
    assert_eq!(kinds.last(), Some(&json!("skipped")), "{kinds:?}");
    let response = node.post_json(&skip, &json!({"ordering_key": "k"})).await;
    assert_problem(&response, StatusCode::CONFLICT, "nothing blocks k now");

    // A replayed dead head goes first again, and its key resumes behind it.
    let third = post(&node, 4, "k").await; // always fails: dead, blocks
    let fourth = post(&node, 5, "k").await;
    wait_delivery_state(&node, &third, "dead", DEADLINE).await;
    receiver.always_fail.lock().unwrap().clear();
    let (status, _, body) = node.post_empty(&format!("/v1/deliveries/{third}/replay")).await;
    assert!(status.is_success(), "{body}");
    wait_delivery_state(&node, &fourth, "delivered", DEADLINE).await;
    let order: Vec<(u64, u16)> =
        receiver.seen().iter().filter(|s| s.key == "k").map(|s| (s.sequence, s.answered)).collect();
    assert_eq!(order.last(), Some(&(4, 200)), "the fourth went last: {order:?}");
    assert!(order.contains(&(3, 200)), "the replayed third was delivered before it: {order:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ordering_settings_and_keys_are_refused_with_a_422_and_commit_nothing() {
    let node = TestNode::start().await;
    for (body, why) in [
        (json!({"url": "http://127.0.0.1:9/h", "ordering": "sideways"}), "ordering must be"),
        (json!({"url": "http://127.0.0.1:9/h", "on_dead": "skip"}), "on_dead applies only"),
        (json!({"url": "http://127.0.0.1:9/h", "ordering": "per_key", "on_dead": "later"}), "on_dead must be"),
    ] {
        let (status, _, problem) = node.post_json("/v1/endpoints", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        assert!(problem["detail"].as_str().is_some_and(|d| d.contains(why)), "{problem}");
    }
    let (_, _, list) = node.get_json("/v1/endpoints").await;
    assert_eq!(list["data"], json!([]), "nothing was registered");
    for key in ["", "tab\there", &"k".repeat(257)] {
        let body = json!({"type": "t", "payload": {}, "ordering_key": key});
        let (status, _, problem) = node.post_json("/v1/events", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{key:?}: {problem}");
    }
    let (status, _, _) = node
        .post_json("/v1/endpoints/ep_00000000000000000000000000/blocked-keys/skip", &json!({"ordering_key": "k"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_holds_across_a_shard_move_and_a_leader_kill_on_three_nodes() {
    let receiver = Receiver::default();
    let url = receiver.start().await;
    let mut cluster = TestCluster::start_with(ClusterOptions::default()).await;
    let body = json!({"url": url, "ordering": "per_key", "retry": patient_retry(), "max_in_flight": 4});
    let (endpoint_id, _) = register_endpoint(cluster.node(1), &body).await;
    let keys = ["a", "b", "c"];
    let mut deliveries = Vec::new();
    for n in 1..=12u64 {
        deliveries.push(post(cluster.node(1 + n % 3), n, keys[(n % 3) as usize]).await);
    }
    // Move the endpoint's shard to another node mid-stream.
    let shard = shard_of_endpoint(&endpoint_id);
    let owner = cluster.owner_of_shard(shard).await.0.unwrap_or(1);
    let to = if owner == 3 { 1 } else { owner + 1 };
    let (status, _, moved) =
        cluster.node(to).post_json(&format!("/v1/cluster/shards/{shard}/move"), &json!({"node_id": to})).await;
    assert!(status.is_success(), "{moved}");
    for n in 13..=24u64 {
        deliveries.push(post(cluster.node(1 + n % 3), n, keys[(n % 3) as usize]).await);
    }
    let leader = cluster.leader_id().await;
    cluster.kill9(leader).await;
    let alive = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    eventually(DEADLINE, POLL_INTERVAL, "a new leader", async || {
        cluster.node(alive).get_json("/readyz").await.0 == StatusCode::OK
    })
    .await;
    for n in 25..=30u64 {
        let node = cluster.ids().into_iter().map(|id| 1 + (id + n) % 3).find(|id| *id != leader).unwrap();
        deliveries.push(post(cluster.node(node), n, keys[(n % 3) as usize]).await);
    }
    cluster.restart(leader).await;
    for delivery in &deliveries {
        wait_delivery_state(cluster.node(alive), delivery, "delivered", DEADLINE).await;
    }
    // A stale owner may send a request twice; its outcome cannot move a
    // key on, so after a success a repeat can only be of that same
    // sequence. Collapse those repeats, then check the order.
    let mut seen = receiver.seen();
    seen.dedup_by(|b, a| a.key == b.key && a.sequence == b.sequence && a.answered == 200 && b.answered == 200);
    let mut per_key: BTreeMap<String, Vec<&Seen>> = BTreeMap::new();
    for s in &seen {
        per_key.entry(s.key.clone()).or_default().push(s);
    }
    for (key, requests) in per_key {
        let delivered: Vec<u64> = requests.iter().filter(|s| s.answered == 200).map(|s| s.sequence).collect();
        let mut unique = delivered.clone();
        unique.dedup();
        assert_eq!(unique, (1..=10).collect::<Vec<_>>(), "key {key}: delivered in sequence: {requests:#?}");
    }
}

/// The ordering headers of each request a receiver saw, as sent.
#[derive(Clone, Default)]
struct Headers(Arc<Mutex<Vec<BTreeMap<String, String>>>>);

async fn record_headers(State(seen): State<Headers>, headers: HeaderMap) -> AxumStatus {
    let named =
        |name: &str| (name.to_string(), headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string());
    let names = [
        "webhook-id",
        "webhook-timestamp",
        "webhook-sequence",
        "webhook-ordering-key",
        "webhook-ordering-epoch",
        "webhook-ordering-signature",
    ];
    seen.0.lock().unwrap().push(names.iter().map(|n| named(n)).collect());
    AxumStatus::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_forgotten_by_retention_starts_again_at_one_under_a_later_signed_epoch() {
    use hookraft_core::signing::{OrderingHeaders, Secret, verify_ordering};
    let seen = Headers::default();
    let app = axum::Router::new().route("/hook", axum::routing::post(record_headers)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let node = TestNode::start_with(hookraft_tests::NodeOptions::default().args(["--retention", "2s"])).await;
    let (_, secret) =
        register_endpoint(&node, &json!({"url": url, "ordering": "per_key", "retry": patient_retry()})).await;
    let secret = Secret::parse(&secret).expect("a whsec secret");

    let first = send_event(&node, &json!({"type": "t", "payload": {"n": 1}, "ordering_key": "k"})).await;
    eventually(DEADLINE, POLL_INTERVAL, "the first run's event to be delivered", async || {
        seen.0.lock().unwrap().len() == 1
    })
    .await;
    // Retention forgets the event, and with its last delivery the key.
    let path = format!("/v1/events/{}", first.event_id);
    eventually(DEADLINE, POLL_INTERVAL, "retention to forget the event", async || {
        node.get_json(&path).await.0 == StatusCode::NOT_FOUND
    })
    .await;
    send_event(&node, &json!({"type": "t", "payload": {"n": 2}, "ordering_key": "k"})).await;
    eventually(DEADLINE, POLL_INTERVAL, "the second run's event to be delivered", async || {
        seen.0.lock().unwrap().len() == 2
    })
    .await;

    let requests = seen.0.lock().unwrap().clone();
    let mut epochs = Vec::new();
    for request in &requests {
        assert_eq!(
            (request["webhook-sequence"].as_str(), request["webhook-ordering-key"].as_str()),
            ("1", "k"),
            "{request:?}"
        );
        let epoch: u64 = request["webhook-ordering-epoch"].parse().expect("an epoch in ms");
        let place = OrderingHeaders { epoch_ms: epoch, sequence: 1, key: "k" };
        let timestamp: u64 = request["webhook-timestamp"].parse().expect("a timestamp");
        let signature = &request["webhook-ordering-signature"];
        assert_eq!(verify_ordering(&[&secret], &request["webhook-id"], timestamp, &place, signature), Ok(()));
        // The same headers with the sequence raised are not what was signed.
        let forged = OrderingHeaders { sequence: 2, ..place };
        assert!(verify_ordering(&[&secret], &request["webhook-id"], timestamp, &forged, signature).is_err());
        epochs.push(epoch);
    }
    assert!(epochs[1] > epochs[0], "the new run's epoch is later: {epochs:?}");
}
