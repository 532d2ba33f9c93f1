//! A three-node cluster: it forms with one leader and every shard owned,
//! accepts events (one at a time and in batches) on every node, and a
//! restarted node catches up.
//!
//! Each test starts its own cluster and receiver and prints what it measured
//! (`cargo test -p hookraft-tests --test cluster -- --nocapture`).

#![allow(clippy::disallowed_methods, reason = "an end-to-end test measures real time")]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use hookraft_tests::cluster::SHARD_COUNT;
use hookraft_tests::{
    Accepted, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestCluster, eventually, register_endpoint,
    send_event, wait_delivery_state,
};
use serde_json::json;

/// Waits for delivery and replication on a loaded two-core machine.
const DEADLINE: Duration = Duration::from_secs(90);

fn retry_quick() -> serde_json::Value {
    json!({"attempts_max": 50, "base_ms": 100, "cap_ms": 1000, "max_age_s": 3600})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_one_cluster_with_one_leader_and_all_64_shards_owned_across_nodes() {
    let started = Instant::now();
    let cluster = TestCluster::start().await;
    let leader = cluster.leader_id().await;
    let formed_after = started.elapsed();
    let settled = cluster.wait_settled().await;
    let settled_after = started.elapsed();
    println!(
        "cluster formed (leader {leader}, term {}) after {formed_after:?}; shard map settled after {settled_after:?}: {:?}",
        settled.term,
        settled.distribution()
    );

    for id in cluster.ids() {
        let view = cluster.view(id).await;
        assert_eq!(view.node_id, id, "node {id} reports its own id: {view:?}");
        assert_eq!(view.leader_id, Some(leader), "node {id} names leader {leader}: {view:?}");
        let ids: BTreeSet<u64> = view.nodes.iter().map(|n| n.id).collect();
        assert_eq!(ids, BTreeSet::from([1, 2, 3]), "node {id} lists three nodes: {view:?}");
        assert_eq!(view.shards.len(), usize::from(SHARD_COUNT), "node {id}: {view:?}");
    }

    let view = cluster.wait_settled().await;
    for node in &view.nodes {
        assert!(node.live, "node {} is live: {view:?}", node.id);
        assert!(!node.draining, "node {} is not draining: {view:?}", node.id);
        assert_eq!(node.voter, Some(true), "node {} is a voter: {view:?}", node.id);
        assert_eq!(
            node.addr.as_deref(),
            Some(cluster.addr(node.id).as_str()),
            "node {} advertises its address",
            node.id
        );
        assert_eq!(node.shards_owned, view.shards_of(node.id).len(), "node {} shards_owned matches the map", node.id);
    }
    assert_eq!(view.unowned(), 0, "every shard is owned: {view:?}");
    assert!(view.owners().len() > 1, "shards spread over more than one node: {:?}", view.distribution());
    let shards: BTreeSet<u16> = view.shards.iter().map(|s| s.shard).collect();
    assert_eq!(shards, (0..SHARD_COUNT).collect(), "shards 0..64 each listed once");
    let tokens: BTreeSet<u64> = view.shards.iter().map(|s| s.token).collect();
    assert_eq!(tokens.len(), view.shards.len(), "each grant took its own fencing token: {view:?}");
    assert!(view.shards.iter().all(|s| s.token >= 1), "granted shards carry a token: {view:?}");
    assert!(view.term >= 1, "a leader was elected in some term: {view:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_posted_to_each_of_the_three_nodes_are_accepted_and_delivered() {
    let receiver = ScriptedReceiver::start().await;
    let cluster = TestCluster::start().await;
    cluster.wait_settled().await;
    let followers = cluster.followers().await;
    // Registering through a follower exercises forwarding of writes other than events.
    let (endpoint_id, _) =
        register_endpoint(cluster.node(followers[0]), &json!({"url": receiver.url("all"), "retry": retry_quick()}))
            .await;

    let mut accepted = Vec::new();
    for id in cluster.ids() {
        let sent_at = Instant::now();
        let event = send_event(cluster.node(id), &json!({"type": "t", "payload": {"via": id}})).await;
        println!("node {id} accepted {} in {:?}", event.event_id, sent_at.elapsed());
        accepted.push((id, sent_at, event));
    }

    // A batch posted to a follower is forwarded and committed as one entry.
    let batch =
        json!({"events": [{"type": "t", "payload": {"via": "batch"}}, {"type": "t", "payload": {"via": "batch"}}]});
    let (status, _, answer) = cluster.node(followers[1]).post_json("/v1/events/batch", &batch).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let batched: Vec<Accepted> = answer["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events array in {answer}"))
        .iter()
        .map(Accepted::from_body)
        .collect();
    assert_eq!(batched.len(), 2, "{answer}");

    let mut expected: BTreeSet<String> = accepted.iter().map(|(_, _, a)| a.event_id.clone()).collect();
    expected.extend(batched.iter().map(|a| a.event_id.clone()));
    eventually(DEADLINE, POLL_INTERVAL, "every event at the receiver", async || {
        receiver.distinct_webhook_ids("all").is_superset(&expected)
    })
    .await;
    for (via, sent_at, event) in &accepted {
        let request = receiver.requests_for_event("all", &event.event_id)[0].clone();
        println!(
            "event via node {via} reached the receiver {:?} after it was sent",
            request.received_at.saturating_duration_since(*sent_at)
        );
        assert_eq!(request.body_json(), json!({"via": via}), "the payload arrives unchanged");
        let delivery_id = event.delivery_for(&endpoint_id);
        for id in cluster.ids() {
            let delivery = wait_delivery_state(cluster.node(id), &delivery_id, "delivered", DEADLINE).await;
            assert_eq!(delivery["event_id"], event.event_id.as_str(), "node {id}: {delivery:#}");
        }
        for id in cluster.ids() {
            let (status, _, read) = cluster.node(id).get_json(&format!("/v1/events/{}", event.event_id)).await;
            assert_eq!(status, StatusCode::OK, "node {id} reads event {}: {read}", event.event_id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_restarted_after_kill_9_catches_up_on_events_ingested_while_it_was_down() {
    const EVENTS: usize = 30;
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("catch-up", Reply::ok());
    let mut cluster = TestCluster::start().await;
    cluster.wait_settled().await;
    let (endpoint_id, _) =
        register_endpoint(cluster.leader().await, &json!({"url": receiver.url("catch-up"), "retry": retry_quick()}))
            .await;
    let down = cluster.followers().await[0];
    cluster.kill9(down).await;
    println!("killed follower {down}");

    let survivors = cluster.responsive_ids();
    let mut event_ids = Vec::with_capacity(EVENTS);
    for n in 0..EVENTS {
        let via = survivors[n % survivors.len()];
        let event = send_event(cluster.node(via), &json!({"type": "t", "payload": {"n": n}})).await;
        event_ids.push(event.event_id);
    }

    let restarted_at = Instant::now();
    cluster.restart(down).await;
    println!("node {down} ready {:?} after the restart began", restarted_at.elapsed());
    let node = cluster.node(down);
    for event_id in &event_ids {
        let what = format!("event {event_id} readable on restarted node {down}");
        eventually(DEADLINE, POLL_INTERVAL, &what, async || {
            let request = node.request(reqwest::Method::GET, &format!("/v1/events/{event_id}"));
            matches!(node.try_send(request).await, Ok((StatusCode::OK, _, _)))
        })
        .await;
    }
    println!("node {down} served all {EVENTS} events {:?} after the restart began", restarted_at.elapsed());
    let (status, _, read) = node.get_json(&format!("/v1/events/{}", event_ids[0])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read["payload"], json!({"n": 0}), "the caught-up copy has the payload: {read}");
    assert_eq!(read["deliveries"][0]["endpoint_id"], endpoint_id.as_str(), "{read}");

    let expected: BTreeSet<String> = event_ids.iter().cloned().collect();
    eventually(DEADLINE, POLL_INTERVAL, "every event at the receiver", async || {
        receiver.distinct_webhook_ids("catch-up").is_superset(&expected)
    })
    .await;
}
