//! The history on disk survives `kill -9` at its two dangerous moments, and
//! every replica ends with the same history (issue 34):
//!
//! - while a node applies outcomes that finish many events at once (and
//!   snapshots move them into its history store every few entries);
//! - while a new node installs a snapshot streamed from the leader (the
//!   store it imports is half written when the node dies).
//!
//! Replicas are compared through the API: each node answers reads from its
//! own state, so listing every delivery on each node and comparing their
//! states and timelines compares what each replica holds.
//!
//! And a node whose history outgrows its cache (`--history-cache`) reads
//! every old event back from the store; a cache too small is refused.
#![allow(clippy::disallowed_methods, reason = "an end-to-end test waits in real time")]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use hookraft_tests::{
    ClusterOptions, NodeOptions, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestCluster, TestNode, eventually,
    list_deliveries, locate_hookraft_binary, register_endpoint, send_event, wait_for,
};
use reqwest::Method;
use serde_json::{Value, json};

/// Snapshots this often, so finished events move to the history store
/// while the test runs and a joining node is sent a snapshot, not the log.
const SNAPSHOT_EVERY: &str = "20";
const DEADLINE: Duration = Duration::from_secs(180);
/// Concurrent producers.
const PRODUCERS: usize = 8;
/// How long one read of a node's `/metrics` may take.
const METRICS_TIMEOUT: Duration = Duration::from_secs(3);

fn cluster_options() -> ClusterOptions {
    let node = NodeOptions::default().args(["--snapshot-every", SNAPSHOT_EVERY]);
    ClusterOptions { node, ..Default::default() }.with_admin_token()
}

fn retry() -> Value {
    json!({"attempts_max": 100, "base_ms": 100, "cap_ms": 500, "max_age_s": 3600})
}

/// Posts `count` events, one per request, each carrying `padding` bytes;
/// returns their ids.
async fn post_events(node: &TestNode, count: usize, padding: usize) -> Vec<String> {
    let filler = "x".repeat(padding);
    futures::stream::iter(0..count)
        .map(|n| {
            let body = json!({"type": "history.crash", "payload": {"n": n, "filler": filler}});
            async move { send_event(node, &body).await.event_id }
        })
        .buffer_unordered(PRODUCERS)
        .collect()
        .await
}

/// What a node holds of every delivery, as it lists them (state, attempt
/// count, times), by delivery id.
async fn history_of(node: &TestNode) -> BTreeMap<String, Value> {
    list_deliveries(node, "").await.into_iter().map(|d| (d["id"].as_str().expect("an id").to_owned(), d)).collect()
}

/// Waits until every node lists the same history as `reference`'s,
/// with `expected` deliveries, all delivered; returns it.
async fn wait_identical(cluster: &TestCluster, reference: u64, expected: usize) -> BTreeMap<String, Value> {
    wait_for(DEADLINE, POLL_INTERVAL, "every replica to hold the same finished history", async || {
        let wanted = history_of(cluster.node(reference)).await;
        let undelivered = wanted.values().filter(|d| d["state"] != "delivered").count();
        if wanted.len() != expected || undelivered > 0 {
            return Err(format!("node {reference} lists {} deliveries, {undelivered} not delivered", wanted.len()));
        }
        for id in cluster.ids() {
            let held = history_of(cluster.node(id)).await;
            if held != wanted {
                let differing = wanted.iter().filter(|(k, v)| held.get(*k) != Some(v)).count();
                return Err(format!("node {id} differs on {differing} deliveries and lists {}", held.len()));
            }
        }
        Ok(wanted)
    })
    .await
}

/// Every event of `events` reads back whole from `node`.
async fn assert_events_readable(node: &TestNode, events: &[String], padding: usize) {
    for id in events {
        let (status, _, event) = node.get_json(&format!("/v1/events/{id}")).await;
        assert_eq!(status, StatusCode::OK, "event {id}: {event}");
        let filler = event["payload"]["filler"].as_str().unwrap_or_default();
        assert_eq!(filler.len(), padding, "event {id} read back whole");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_node_while_it_applies_outcomes_finishing_many_events_loses_none_and_replicas_agree() {
    const EVENTS: usize = 300;
    const PADDING: usize = 2_000;
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("batch", Reply::status(503));
    let mut cluster = TestCluster::start_with(cluster_options()).await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let (endpoint_id, _) =
        register_endpoint(cluster.node(leader), &json!({"url": receiver.url("batch"), "retry": retry()})).await;
    let events = post_events(cluster.node(leader), EVENTS, PADDING).await;
    let (owner, _) = cluster.owner_of_shard(TestCluster::shard_of_endpoint(&endpoint_id)).await;
    let owner = owner.expect("the endpoint's shard has an owner");
    // Every node applies the owner's outcomes; kill the one that is not the
    // owner nor the leader too, so two replicas die mid-apply.
    let bystander = cluster.ids().into_iter().find(|id| *id != owner && *id != leader);

    // The endpoint recovers: the owner finishes the pending deliveries in
    // batches of outcomes. Both die once the first ones have arrived.
    receiver.set_default("batch", Reply::ok());
    eventually(DEADLINE, Duration::from_millis(2), "the first deliveries to arrive", async || {
        receiver.distinct_webhook_ids("batch").len() >= EVENTS / 10
    })
    .await;
    let mut killed = vec![owner];
    killed.extend(bystander);
    for id in &killed {
        cluster.kill9(*id).await;
    }
    let arrived_at_kill = receiver.distinct_webhook_ids("batch").len();
    for id in &killed {
        cluster.restart(*id).await;
    }

    let history = wait_identical(&cluster, leader, EVENTS).await;
    // Each was attempted; those tried before the endpoint recovered twice
    // or more (the breaker held the others back).
    assert!(history.values().all(|d| d["attempt_count"].as_u64() >= Some(1)));
    assert!(history.values().any(|d| d["attempt_count"].as_u64() >= Some(2)), "failures are in the history");
    let delivered = receiver.distinct_webhook_ids("batch");
    assert_eq!(delivered.len(), EVENTS, "every event arrived");
    assert!(arrived_at_kill < EVENTS, "the kill came while outcomes were still being applied ({arrived_at_kill})");
    for id in cluster.ids() {
        assert_events_readable(cluster.node(id), &events, PADDING).await;
    }
}

/// Past this log index the leader's snapshot lets it purge its log (it
/// purges in batches of 256 entries), so a new node is sent the snapshot.
const PURGED_PAST: f64 = 600.0;

/// Posts small events until `node`'s snapshot covers `index`; returns
/// how many.
async fn push_log_past(node: &TestNode, index: f64) -> usize {
    let mut posted = 0;
    loop {
        let metrics = node.request(Method::GET, "/metrics").send().await.expect("metrics").text().await;
        let covered = hookraft_tests::cluster::parse_metric(&metrics.expect("a body"), "hookraft_snapshot_index");
        if covered.is_some_and(|covered| covered >= index) {
            return posted;
        }
        assert!(posted < 10_000, "the snapshot never covered index {index}: {covered:?}");
        posted += post_events(node, 50, 10).await.len();
    }
}

/// Polls `path` until it exists, on a thread of its own (an import lasts
/// well under a second); `false` once `give_up` passed.
async fn wait_for_file(path: &Path, give_up: Duration) -> bool {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        while started.elapsed() < give_up {
            if path.exists() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    })
    .await
    .expect("the poller ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_while_installing_a_snapshot_restarts_and_ends_with_the_same_history() {
    // 60 MB of history, so an import takes long enough to be caught.
    const EVENTS: usize = 300;
    const PADDING: usize = 200_000;
    let receiver = ScriptedReceiver::start().await;
    let mut cluster = TestCluster::start_with(cluster_options()).await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let (_, _) = register_endpoint(cluster.node(leader), &json!({"url": receiver.url("big"), "retry": retry()})).await;
    let events = post_events(cluster.node(leader), EVENTS, PADDING).await;
    let small = push_log_past(cluster.node(leader), PURGED_PAST).await;
    wait_identical(&cluster, leader, EVENTS + small).await;

    // A fourth node joins: far behind a log the others purged, it is sent
    // the leader's snapshot, and dies while importing it.
    cluster.launch_joining_node(4);
    let import = cluster.node(4).data_dir().join("raft").join("hookraft-history.redb.import");
    let add = json!({"id": 4, "addr": cluster.addr(4)});
    // The add answers once node 4 is a learner; the leader promotes it
    // once it caught up, through its crash.
    let (status, _, answer) = cluster.node(leader).post_json("/v1/cluster/nodes", &add).await;
    assert_eq!(status, StatusCode::ACCEPTED, "adding node 4 answered {answer}");
    assert!(wait_for_file(&import, DEADLINE).await, "node 4 never began importing a snapshot");
    cluster.kill9(4).await;
    assert!(import.exists(), "killed with the import half written");
    cluster.restart(4).await;
    cluster.node_mut(4).wait_until_ready().await;

    let history = wait_identical(&cluster, leader, EVENTS + small).await;
    assert_eq!(history.len(), EVENTS + small);
    assert!(!import.exists(), "the restart removed the cut-short import, and the next one finished");
    assert_events_readable(cluster.node(4), &events, PADDING).await;
    cluster
        .wait_view(leader, DEADLINE, "node 4 to be promoted to a voter", |v| match v.node(4) {
            Some(n) if n.voter == Some(true) => Ok(()),
            other => Err(format!("{other:?}")),
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_the_smallest_history_cache_reads_a_history_four_times_its_size_from_the_store() {
    // 4 MB of payloads against a cache of 1 MiB.
    const EVENTS: usize = 40;
    const PADDING: usize = 100_000;
    let receiver = ScriptedReceiver::start().await;
    let options = NodeOptions::default().args(["--history-cache", "1MiB", "--snapshot-every", "10"]);
    let mut node = TestNode::start_with(options).await;
    assert!(node.log_tail(200).contains("history store cache bytes=1048576"), "{}", node.log_tail(50));
    register_endpoint(&node, &json!({"url": receiver.url("ok"), "retry": retry()})).await;
    let events = post_events(&node, EVENTS, PADDING).await;
    // Delivered, then moved out of memory by a snapshot: what stays in
    // memory is far less than the history, which is all in the store.
    wait_for(DEADLINE, POLL_INTERVAL, "the history to move into the store", async || {
        let history = node.metric("hookraft_history_bytes", METRICS_TIMEOUT).await.unwrap_or(0.0);
        let in_memory = node.metric("hookraft_retained_bytes", METRICS_TIMEOUT).await.unwrap_or(f64::MAX);
        let pending = node.metric("hookraft_pending_deliveries", METRICS_TIMEOUT).await.unwrap_or(f64::MAX);
        let moved = pending == 0.0 && history >= (EVENTS * PADDING) as f64 && in_memory < history / 10.0;
        if moved { Ok(()) } else { Err(format!("history {history} B, in memory {in_memory} B, pending {pending}")) }
    })
    .await;
    assert_events_readable(&node, &events, PADDING).await;
    node.restart().await;
    assert_events_readable(&node, &events, PADDING).await;
}

#[tokio::test]
async fn a_history_cache_under_a_mebibyte_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut command = tokio::process::Command::new(locate_hookraft_binary());
    command.args(["serve", "--listen", "127.0.0.1:0", "--history-cache", "512KiB", "--data-dir"]).arg(dir.path());
    let output = command.output().await.expect("run hookraft serve");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a node started with a 512 KiB history cache: {stderr}");
    assert!(stderr.contains("--history-cache") && stderr.contains("at least 1MiB"), "{stderr}");
    assert!(!dir.path().join("raft").exists(), "refused before it opened a store");
}
