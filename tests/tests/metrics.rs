//! `/metrics` (docs/METRICS.md): well-formed in both text formats, the
//! derived lifecycle series count a delivery, a retry and a dead letter
//! exactly, once in a cluster, and the per-endpoint series stay within
//! their top-N bound however many endpoints there are.

use std::collections::BTreeSet;
use std::time::Duration;

use hookraft_tests::exposition::{self, Exposition, Format};
use hookraft_tests::{
    DEADLINE, NodeOptions, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestCluster, TestNode,
    locate_hookraft_binary, register_endpoint, send_event, shard_of_endpoint, wait_delivery_state, wait_for,
};
use serde_json::{Value, json};

/// Waits for delivery and replication in a cluster on a loaded two-core machine.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(90);

const OPEN_METRICS: &str = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";

/// `/metrics` in `format`, checked; panics with the text when malformed.
async fn scrape(node: &TestNode, format: Format) -> Exposition {
    let mut request = node.client().get(node.url("/metrics"));
    if format == Format::OpenMetrics {
        request = request.header("accept", OPEN_METRICS);
    }
    let response = request.send().await.expect("metrics answer");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().expect("ascii").to_owned();
    let expected = match format {
        Format::Prometheus => "text/plain; version=0.0.4",
        Format::OpenMetrics => "application/openmetrics-text; version=1.0.0",
    };
    assert!(content_type.starts_with(expected), "{content_type}");
    let text = response.text().await.expect("metrics text");
    exposition::parse(&text, format).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

fn retry(attempts_max: u32) -> Value {
    json!({"attempts_max": attempts_max, "base_ms": 50, "cap_ms": 100, "max_age_s": 3600})
}

/// The endpoint label values of a per-endpoint family.
fn endpoint_labels(scraped: &Exposition, name: &str) -> BTreeSet<String> {
    scraped.find(name, &[]).filter_map(|s| s.label("endpoint")).map(str::to_owned).collect()
}

fn value(scraped: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    scraped.value(name, labels).unwrap_or_else(|| panic!("no {name}{labels:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_a_retry_and_a_dead_letter_show_in_the_derived_series() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("ok", Reply::ok());
    receiver.push("flaky", Reply::status(503));
    receiver.set_default("flaky", Reply::ok());
    receiver.set_default("broken", Reply::status(500));
    let node = TestNode::start().await;
    let mut endpoints = Vec::new();
    for (path, attempts_max) in [("ok", 3), ("flaky", 3), ("broken", 1)] {
        let body = json!({"url": receiver.url(path), "retry": retry(attempts_max)});
        endpoints.push(register_endpoint(&node, &body).await.0);
    }
    // Before anything happened, every derived family is there, at zero.
    let before = scrape(&node, Format::Prometheus).await;
    assert_eq!(value(&before, "hookraft_delivery_retries_total", &[]), 0.0);
    assert_eq!(value(&before, "hookraft_dead_letters_total", &[]), 0.0);
    assert_eq!(before.find("hookraft_delivery_state_duration_seconds_count", &[]).count(), 5);

    let accepted = send_event(&node, &json!({"type": "order.created", "payload": {"n": 1}})).await;
    let [ok, flaky, broken] = [0, 1, 2].map(|i| accepted.delivery_for(&endpoints[i]));
    wait_delivery_state(&node, &ok, "delivered", DEADLINE).await;
    wait_delivery_state(&node, &flaky, "delivered", DEADLINE).await;
    wait_delivery_state(&node, &broken, "dead", DEADLINE).await;

    // Applied already (the API reads the same state), but polled anyway.
    let scraped = wait_for(DEADLINE, POLL_INTERVAL, "the derived series to count every outcome", async || {
        let scraped = scrape(&node, Format::Prometheus).await;
        let delivered = scraped.value("hookraft_delivery_time_to_delivered_seconds_count", &[]);
        if delivered == Some(2.0) { Ok(scraped) } else { Err(format!("{delivered:?} delivered")) }
    })
    .await;
    assert_eq!(value(&scraped, "hookraft_delivery_retries_total", &[]), 1.0, "flaky's one retry");
    assert_eq!(value(&scraped, "hookraft_delivery_time_to_first_attempt_seconds_count", &[]), 3.0);
    assert_eq!(value(&scraped, "hookraft_dead_letters_total", &[("reason", "attempts_exhausted")]), 1.0);
    assert_eq!(value(&scraped, "hookraft_dead_letters_total", &[]), 1.0, "no other reason");
    let left = |state| value(&scraped, "hookraft_delivery_state_duration_seconds_count", &[("state", state)]);
    assert_eq!((left("pending"), left("retrying"), left("dead")), (3.0, 1.0, 0.0));
    assert_eq!(value(&scraped, "hookraft_delivery_ignored_stale_total", &[]), 0.0);
    assert_eq!(value(&scraped, "hookraft_outcomes_sent_stale_total", &[]), 0.0);
    // What the actors decided agrees with what the log recorded.
    assert_eq!(value(&scraped, "hookraft_deliveries_total", &[("outcome", "retried")]), 1.0);
    assert_eq!(value(&scraped, "hookraft_deliveries_total", &[("outcome", "dead")]), 1.0);
    assert_eq!(value(&scraped, "hookraft_attempts_total", &[]), 4.0);
    assert_eq!(value(&scraped, "hookraft_attempt_latency_seconds_count", &[]), 4.0);

    // Each endpoint has its series, beside `other` (empty here).
    let labels = endpoint_labels(&scraped, "hookraft_endpoint_attempts_last_hour");
    let expected: BTreeSet<String> = endpoints.iter().cloned().chain(["other".to_string()]).collect();
    assert_eq!(labels, expected);
    let attempts_of =
        |i: usize| value(&scraped, "hookraft_endpoint_attempts_last_hour", &[("endpoint", &endpoints[i])]);
    assert_eq!((attempts_of(0), attempts_of(1), attempts_of(2)), (1.0, 2.0, 1.0));
    let failures = value(&scraped, "hookraft_endpoint_failures_last_hour", &[("endpoint", &endpoints[1])]);
    assert_eq!(failures, 1.0, "flaky's 503");
    assert_eq!(value(&scraped, "hookraft_endpoint_pending", &[]), 0.0);

    // The OpenMetrics rendering holds the same samples.
    let open = scrape(&node, Format::OpenMetrics).await;
    assert_eq!(value(&open, "hookraft_delivery_retries_total", &[]), 1.0);
    assert_eq!(open.family("hookraft_delivery_retries").map(|f| f.kind.as_str()), Some("counter"));
    assert_eq!(open.family("hookraft_delivery_state_duration_seconds").map(|f| f.kind.as_str()), Some("histogram"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_endpoints_than_the_top_bound_are_summed_as_other() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("hook", Reply::ok());
    let node = TestNode::start_with(NodeOptions::default().args(["--metrics-top-endpoints", "2"])).await;
    let mut endpoints = Vec::new();
    for _ in 0..5 {
        endpoints.push(register_endpoint(&node, &json!({"url": receiver.url("hook")})).await.0);
    }
    // Endpoint 0 gets three events, endpoint 1 two, the others one each
    // (one event goes to every endpoint).
    let aimed = |targets: &[usize]| {
        let ids: Vec<&str> = targets.iter().map(|i| endpoints[*i].as_str()).collect();
        json!({"type": "t", "payload": {}, "endpoint_ids": ids})
    };
    let mut deliveries = Vec::new();
    for body in [json!({"type": "t", "payload": {}}), aimed(&[0, 1]), aimed(&[0])] {
        let accepted = send_event(&node, &body).await;
        deliveries.extend(accepted.deliveries.into_iter().map(|(delivery, _)| delivery));
    }
    for delivery in &deliveries {
        wait_delivery_state(&node, delivery, "delivered", DEADLINE).await;
    }
    let scraped = wait_for(DEADLINE, POLL_INTERVAL, "every attempt in the endpoint series", async || {
        let scraped = scrape(&node, Format::Prometheus).await;
        let sum = scraped.value("hookraft_endpoint_attempts_last_hour", &[]);
        if sum == Some(8.0) { Ok(scraped) } else { Err(format!("{sum:?} attempts")) }
    })
    .await;
    for family in
        ["hookraft_endpoint_attempts_last_hour", "hookraft_endpoint_failures_last_hour", "hookraft_endpoint_pending"]
    {
        let labels = endpoint_labels(&scraped, family);
        let expected: BTreeSet<String> =
            [endpoints[0].clone(), endpoints[1].clone(), "other".to_string()].into_iter().collect();
        assert_eq!(labels, expected, "{family}: the top two and other");
    }
    assert_eq!(value(&scraped, "hookraft_endpoint_attempts_last_hour", &[("endpoint", &endpoints[0])]), 3.0);
    assert_eq!(value(&scraped, "hookraft_endpoint_attempts_last_hour", &[("endpoint", "other")]), 3.0);
}

/// The snapshot gauges follow the snapshots the node builds: none at
/// first, then one that covers applied entries, and the log past it. The
/// delivered events are history, kept in the history store: the
/// snapshot's state stays small while the history grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_gauges_follow_the_snapshots_built() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("hook", Reply::ok());
    let node = TestNode::start_with(NodeOptions::default().args(["--snapshot-every", "10"])).await;
    register_endpoint(&node, &json!({"url": receiver.url("hook")})).await;
    let snapshot_after = async |events: usize, at_least_index: f64| {
        for n in 0..events {
            send_event(&node, &json!({"type": "t", "payload": {"n": n, "pad": "x".repeat(500)}})).await;
        }
        wait_for(DEADLINE, POLL_INTERVAL, "a snapshot past the events", async || {
            let scraped = scrape(&node, Format::Prometheus).await;
            let index = value(&scraped, "hookraft_snapshot_index", &[]);
            if index >= at_least_index { Ok(scraped) } else { Err(format!("snapshot at {index}")) }
        })
        .await
    };
    let first = snapshot_after(20, 10.0).await;
    let (index, bytes) = (value(&first, "hookraft_snapshot_index", &[]), value(&first, "hookraft_snapshot_bytes", &[]));
    assert!(index <= value(&first, "hookraft_raft_applied_index", &[]), "a snapshot covers applied entries only");
    let history = value(&first, "hookraft_history_bytes", &[]);
    assert!(bytes > 0.0, "the snapshot holds the state: {bytes} bytes");
    assert!(value(&first, "hookraft_raft_log_since_snapshot_bytes", &[]) >= 0.0);
    assert_eq!(first.family("hookraft_snapshot_bytes").map(|f| f.kind.as_str()), Some("gauge"));
    let later = snapshot_after(40, index + 30.0).await;
    let grown = value(&later, "hookraft_history_bytes", &[]);
    assert!(grown > history + 30.0 * 500.0, "history of {history} bytes, then {grown} with 40 events more");
    let state = value(&later, "hookraft_snapshot_bytes", &[]);
    assert!(state < grown / 4.0, "the snapshot's state ({state} bytes) leaves the history ({grown}) to the store");
}

#[test]
fn a_top_bound_past_the_maximum_is_refused_at_start() {
    let output = std::process::Command::new(locate_hookraft_binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--metrics-top-endpoints", "101"])
        .output()
        .expect("run hookraft");
    assert!(!output.status.success(), "a node started with 101 top endpoints");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--metrics-top-endpoints"), "{stderr}");
}

/// Each change of a delivery is counted by the node that owns its shard
/// only: summed over the cluster, every delivery counts once (not once per
/// replica), and each endpoint's series shows on its owner alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_cluster_each_delivery_is_counted_once_by_its_owner() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("hook", Reply::ok());
    let cluster = TestCluster::start().await;
    let view = cluster.wait_settled().await;
    let leader = cluster.leader().await;
    let mut endpoints = Vec::new();
    for _ in 0..6 {
        endpoints.push(register_endpoint(leader, &json!({"url": receiver.url("hook")})).await.0);
    }
    let accepted = send_event(leader, &json!({"type": "t", "payload": {}})).await;
    for (delivery, _) in &accepted.deliveries {
        wait_delivery_state(leader, delivery, "delivered", CLUSTER_DEADLINE).await;
    }
    // Every node applies every outcome; each counts only its own shards'.
    let counted = wait_for(CLUSTER_DEADLINE, POLL_INTERVAL, "six deliveries counted across the nodes", async || {
        let mut per_node = Vec::new();
        for id in cluster.ids() {
            let scraped = scrape(cluster.node(id), Format::Prometheus).await;
            let delivered = scraped.value("hookraft_delivery_time_to_delivered_seconds_count", &[]).unwrap_or(0.0);
            per_node.push((id, delivered, scraped));
        }
        let total: f64 = per_node.iter().map(|(_, delivered, _)| delivered).sum();
        if total >= 6.0 { Ok(per_node) } else { Err(format!("{total} counted")) }
    })
    .await;
    let total: f64 = counted.iter().map(|(_, delivered, _)| delivered).sum();
    assert_eq!(total, 6.0, "each delivery once, not once per replica");
    let owner = |endpoint: &str| view.owner_of(shard_of_endpoint(endpoint)).expect("owned");
    for (id, delivered, scraped) in &counted {
        let owned: Vec<&String> = endpoints.iter().filter(|e| owner(e) == *id).collect();
        assert_eq!(*delivered, owned.len() as f64, "node {id} counts the deliveries of its shards");
        let labels = endpoint_labels(scraped, "hookraft_endpoint_attempts_last_hour");
        let expected: BTreeSet<String> = owned.into_iter().cloned().chain(["other".to_string()]).collect();
        assert_eq!(labels, expected, "node {id} shows the endpoints it owns");
    }
}
