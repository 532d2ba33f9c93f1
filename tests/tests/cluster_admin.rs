//! Cluster administration (docs/API.md, "Cluster administration"): moving a
//! shard, draining a node, adding and removing nodes.

#![allow(clippy::disallowed_methods, reason = "an end-to-end test measures real time")]

use std::time::{Duration, Instant};

use hookraft_tests::cluster::SHARD_COUNT;
use hookraft_tests::{
    ClusterOptions, POLL_INTERVAL, ScriptedReceiver, StatusCode, TestCluster, assert_problem, attempts, eventually,
    register_endpoint, send_event, wait_delivery_state,
};
use serde_json::{Value, json};

/// Waits for delivery and replication on a loaded two-core machine.
const DEADLINE: Duration = Duration::from_secs(90);

fn retry_quick() -> Value {
    json!({"attempts_max": 50, "base_ms": 100, "cap_ms": 1000, "max_age_s": 3600})
}

/// `(node_id, fencing_token)` of the attempt that succeeded.
fn successful_sender(delivery: &Value) -> (u64, u64) {
    let attempt = attempts(delivery)
        .into_iter()
        .rev()
        .find(|a| a["status_code"].as_u64().is_some_and(|code| (200..300).contains(&code)))
        .unwrap_or_else(|| panic!("no successful attempt on {delivery:#}"));
    let field = |name: &str| attempt[name].as_u64().unwrap_or_else(|| panic!("no `{name}` in {attempt}"));
    (field("node_id"), field("fencing_token"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_move_hands_a_shard_to_the_named_node_under_a_higher_token_and_that_node_delivers() {
    let receiver = ScriptedReceiver::start().await;
    let cluster = TestCluster::start_with(ClusterOptions::default().with_admin_token()).await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let followers = cluster.followers().await;
    let body = json!({"url": receiver.url("moved"), "retry": retry_quick()});
    let (endpoint_id, _) = register_endpoint(cluster.node(leader), &body).await;
    let shard = TestCluster::shard_of_endpoint(&endpoint_id);
    let (owner, token_before) = cluster.owner_of_shard(shard).await;
    let owner = owner.expect("the shard is owned");
    let target = cluster.ids().into_iter().find(|id| *id != owner).expect("another node");

    // Any node answers admin routes; ask a follower so the change is forwarded.
    let via = cluster.node(followers[0]);
    let moved_at = Instant::now();
    let (status, _, answer) =
        via.post_json(&format!("/v1/cluster/shards/{shard}/move"), &json!({"node_id": target})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "moving shard {shard} to node {target} answered {answer}");
    assert_eq!(answer["shard"], shard, "{answer}");
    assert_eq!(answer["owner"], target, "{answer}");
    let token = answer["token"].as_u64().unwrap_or_else(|| panic!("no token in {answer}"));
    assert!(token > token_before, "the move took a higher token: {token} after {token_before}");

    let seen = cluster
        .wait_view(leader, DEADLINE, "the shard map to show the move", |v| {
            let grant = v.shard(shard);
            if grant.owner == Some(target) && grant.token >= token { Ok(grant) } else { Err(format!("{grant:?}")) }
        })
        .await;
    println!(
        "shard {shard} moved from node {owner} (token {token_before}) to node {target} (token {}) in {:?}",
        seen.token,
        moved_at.elapsed()
    );

    let event =
        send_event(cluster.node(leader), &json!({"type": "t", "payload": {}, "endpoint_ids": [endpoint_id]})).await;
    let delivery =
        wait_delivery_state(cluster.node(leader), &event.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let (sender, sent_token) = successful_sender(&delivery);
    assert_eq!(sender, target, "the new owner sent the event: {delivery:#}");
    assert!(sent_token >= token, "sent under the new grant's token {token}: {delivery:#}");
    println!("delivered by node {sender} under token {sent_token}, {:?} after the move", moved_at.elapsed());

    let unknown_shard =
        via.post_json(&format!("/v1/cluster/shards/{SHARD_COUNT}/move"), &json!({"node_id": target})).await;
    assert_problem(&unknown_shard, StatusCode::NOT_FOUND, "moving a shard that does not exist");
    let unknown_node = via.post_json(&format!("/v1/cluster/shards/{shard}/move"), &json!({"node_id": 99})).await;
    assert_problem(&unknown_node, StatusCode::NOT_FOUND, "moving a shard to a node that does not exist");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drained_node_gives_up_every_shard_yet_still_accepts_ingest_and_serves_reads() {
    let receiver = ScriptedReceiver::start().await;
    let cluster = TestCluster::start_with(ClusterOptions::default().with_admin_token()).await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let body = json!({"url": receiver.url("drain"), "retry": retry_quick()});
    let (endpoint_id, _, shard, drained) = cluster.register_endpoint_owned_by(leader, &body, |o| o != leader).await;
    let event = |n: u32| json!({"type": "t", "payload": {"n": n}, "endpoint_ids": [endpoint_id]});
    let first = send_event(cluster.node(leader), &event(1)).await;
    let delivery =
        wait_delivery_state(cluster.node(leader), &first.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let (sender, token_before) = successful_sender(&delivery);
    assert_eq!(sender, drained, "the owner sent before the drain: {delivery:#}");

    let drain_path = format!("/v1/cluster/nodes/{drained}/drain");
    let drained_at = Instant::now();
    let (status, _, answer) = cluster.node(leader).post_empty(&drain_path).await;
    assert_eq!(status, StatusCode::ACCEPTED, "draining node {drained} answered {answer}");
    assert_eq!(answer["id"], drained, "{answer}");
    assert_eq!(answer["draining"], true, "{answer}");
    let view = cluster
        .wait_view(leader, DEADLINE, "the drained node to own no shard", |v| {
            let node = v.node(drained).ok_or("drained node not listed")?;
            if node.draining && node.shards_owned == 0 && v.shards_of(drained).is_empty() && v.unowned() == 0 {
                Ok(v.clone())
            } else {
                Err(format!("draining {}, {} shards, {} unowned", node.draining, node.shards_owned, v.unowned()))
            }
        })
        .await;
    println!("node {drained} drained in {:?}; shard map now {:?}", drained_at.elapsed(), view.distribution());
    assert!(view.shard(shard).token > token_before, "shard {shard} moved under a higher token: {view:?}");

    let node = cluster.node(drained);
    let second = send_event(node, &event(2)).await;
    let delivery = wait_delivery_state(node, &second.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let (sender, token_after) = successful_sender(&delivery);
    assert_ne!(sender, drained, "a drained node sends nothing: {delivery:#}");
    assert!(token_after > token_before, "sent under the new grant: {token_after} after {token_before}");
    let (status, _, read) = node.get_json(&format!("/v1/events/{}", second.event_id)).await;
    assert_eq!(status, StatusCode::OK, "the drained node serves reads: {read}");
    eventually(DEADLINE, POLL_INTERVAL, "the event at the receiver", async || {
        !receiver.requests_for_event("drain", &second.event_id).is_empty()
    })
    .await;

    let (status, _, answer) = cluster.node(leader).delete(&drain_path).await;
    assert!(status.is_success(), "undoing the drain answered {status} {answer}");
    cluster
        .wait_view(leader, DEADLINE, "the node to stop draining", |v| match v.node(drained) {
            Some(n) if !n.draining => Ok(()),
            other => Err(format!("{other:?}")),
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_voter_that_would_leave_no_live_majority_is_refused_with_409_and_removing_the_dead_one_works() {
    let receiver = ScriptedReceiver::start().await;
    let mut cluster = TestCluster::start_with(ClusterOptions::default().with_admin_token()).await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let followers = cluster.followers().await;
    let (dead, live_follower) = (followers[0], followers[1]);
    cluster.kill9(dead).await;
    cluster
        .wait_view(leader, DEADLINE, "the killed node to be reported not live", |v| {
            if v.node(dead).is_some_and(|n| !n.live) { Ok(()) } else { Err("still live".into()) }
        })
        .await;

    let node = cluster.node(leader);
    for victim in [live_follower, leader] {
        let refused = node.delete(&format!("/v1/cluster/nodes/{victim}")).await;
        let context = format!("removing live voter {victim} while node {dead} is down");
        assert_problem(&refused, StatusCode::CONFLICT, &context);
    }
    let unknown = node.delete("/v1/cluster/nodes/99").await;
    assert_problem(&unknown, StatusCode::NOT_FOUND, "removing a node that does not exist");

    let removed_at = Instant::now();
    let (status, _, answer) = node.delete(&format!("/v1/cluster/nodes/{dead}")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "removing dead voter {dead} answered {answer}");
    let view = cluster
        .wait_view(leader, DEADLINE, "the removed node to be no voter and own no shard", |v| {
            let voter = v.node(dead).and_then(|n| n.voter).unwrap_or(false);
            if voter || !v.shards_of(dead).is_empty() || v.unowned() > 0 {
                return Err(format!("voter {voter}, {} shards, {} unowned", v.shards_of(dead).len(), v.unowned()));
            }
            Ok(v.clone())
        })
        .await;
    println!("node {dead} removed in {:?}; shard map now {:?}", removed_at.elapsed(), view.distribution());

    let (endpoint_id, _) =
        register_endpoint(node, &json!({"url": receiver.url("after"), "retry": retry_quick()})).await;
    let event = send_event(cluster.node(live_follower), &json!({"type": "t", "payload": {}})).await;
    wait_delivery_state(node, &event.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_fourth_node_catches_up_becomes_a_voter_and_takes_shards() {
    let receiver = ScriptedReceiver::start().await;
    let mut cluster = TestCluster::start_with(ClusterOptions::default().with_admin_token()).await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let (endpoint_id, _) =
        register_endpoint(cluster.node(leader), &json!({"url": receiver.url("grow"), "retry": retry_quick()})).await;
    let before = send_event(cluster.node(leader), &json!({"type": "t", "payload": {"n": 1}})).await;

    cluster.launch_joining_node(4);
    let added_at = Instant::now();
    let add = json!({"id": 4, "addr": cluster.addr(4)});
    let (status, _, answer) = cluster.node(leader).post_json("/v1/cluster/nodes", &add).await;
    assert_eq!(status, StatusCode::ACCEPTED, "adding node 4 answered {answer}");
    cluster.node_mut(4).wait_until_ready().await;
    let view = cluster
        .wait_view(leader, DEADLINE, "node 4 to be a live voter owning shards", |v| match v.node(4) {
            Some(n) if n.live && n.voter == Some(true) && n.shards_owned > 0 => Ok(v.clone()),
            other => Err(format!("{other:?}")),
        })
        .await;
    println!("node 4 joined as a voter with shards in {:?}; shard map {:?}", added_at.elapsed(), view.distribution());

    let node4 = cluster.node(4);
    let path = format!("/v1/events/{}", before.event_id);
    eventually(DEADLINE, POLL_INTERVAL, "node 4 to serve an event from before it joined", async || {
        node4.get_json(&path).await.0 == StatusCode::OK
    })
    .await;
    let event = send_event(node4, &json!({"type": "t", "payload": {"n": 2}})).await;
    wait_delivery_state(node4, &event.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_node_that_cannot_catch_up_stays_a_learner_until_its_removal_cancels_the_add() {
    let cluster = TestCluster::start_with(ClusterOptions::default().with_admin_token()).await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let node = cluster.node(leader);
    // It proves it holds the secret, then takes no entry: the learner never
    // receives one.
    let (addr, _peer) = hookraft_tests::link::hello_only_peer(cluster.cluster_secret(), 7).await;
    let add = json!({"id": 7, "addr": addr});
    let asked_at = Instant::now();
    let (status, _, answer) = node.post_json("/v1/cluster/nodes", &add).await;
    assert_eq!(status, StatusCode::ACCEPTED, "the add answers once the learner is in: {answer}");
    let answered_in = asked_at.elapsed();
    assert!(answered_in < Duration::from_secs(30), "the add waited {answered_in:?} for a catch-up");
    let (status, _, again) = node.post_json("/v1/cluster/nodes", &add).await;
    assert_eq!(status, StatusCode::ACCEPTED, "posting the same add again is harmless: {again}");

    // The learner shows, on every node, as a member that does not vote;
    // the leader says nothing reached it.
    for id in cluster.ids() {
        let learner = cluster
            .wait_view(id, DEADLINE, "the learner to show", |v| v.node(7).cloned().ok_or_else(|| "absent".to_string()))
            .await;
        assert!(learner.member && learner.voter == Some(false), "node {id} shows {learner:?}");
        assert_eq!(learner.entries_behind, None, "nothing was replicated to it ({learner:?})");
    }
    let voters = |v: &hookraft_tests::cluster::ClusterView| v.nodes.iter().filter(|n| n.voter == Some(true)).count();
    assert_eq!(voters(&cluster.view(leader).await), 3, "the learner was not promoted");
    let caught_up = cluster.view(leader).await;
    for voter in caught_up.nodes.iter().filter(|n| n.voter == Some(true) && n.id != leader) {
        assert!(voter.entries_behind.is_some(), "the leader reports how far follower {} is: {voter:?}", voter.id);
    }

    let (status, _, answer) = node.delete("/v1/cluster/nodes/7").await;
    assert_eq!(status, StatusCode::ACCEPTED, "removing the learner answered {answer}");
    cluster
        .wait_view(leader, DEADLINE, "the learner to leave the membership", |v| match v.node(7) {
            Some(n) if n.member => Err(format!("{n:?}")),
            _ => Ok(()),
        })
        .await;
    let gone = node.delete("/v1/cluster/nodes/7").await;
    assert_problem(&gone, StatusCode::NOT_FOUND, "removing the learner again");
    assert_eq!(voters(&cluster.view(leader).await), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_leader_leaves_the_others_a_leader_and_the_removed_node_names_none() {
    let receiver = ScriptedReceiver::start().await;
    let cluster = TestCluster::start_with(ClusterOptions::default().with_admin_token()).await;
    cluster.wait_settled().await;
    let removed = cluster.leader_id().await;
    let stay = cluster.followers().await;

    // Asked of a follower, forwarded to the leader, which removes itself.
    let (status, _, answer) = cluster.node(stay[0]).delete(&format!("/v1/cluster/nodes/{removed}")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "removing the leader, node {removed}, answered {answer}");

    let new_leader = cluster
        .wait_view(stay[0], DEADLINE, "the remaining nodes to elect a leader among themselves", |v| match v.leader_id {
            Some(l) if stay.contains(&l) && v.node(removed).and_then(|n| n.voter) != Some(true) => Ok(l),
            other => Err(format!("leader {other:?}")),
        })
        .await;
    cluster
        .wait_view(stay[1], DEADLINE, "the other remaining node to name the same leader", |v| {
            if v.leader_id == Some(new_leader) { Ok(()) } else { Err(format!("leader {:?}", v.leader_id)) }
        })
        .await;
    cluster
        .wait_view(removed, DEADLINE, "the removed node to stop naming itself leader", |v| {
            if v.leader_id == Some(removed) { Err("it still names itself".into()) } else { Ok(()) }
        })
        .await;
    eventually(DEADLINE, POLL_INTERVAL, "the removed node to report itself not ready", async || {
        cluster.node(removed).get_json("/readyz").await.0 != StatusCode::OK
    })
    .await;
    cluster
        .wait_view(new_leader, DEADLINE, "the removed node's shards to move to the others", |v| {
            if v.shards_of(removed).is_empty() && v.unowned() == 0 {
                Ok(())
            } else {
                Err(format!("{} shards on the removed node, {} unowned", v.shards_of(removed).len(), v.unowned()))
            }
        })
        .await;

    // Its removal could not forget it (it had no leader any more to commit
    // that); the new leader does once its liveness has expired.
    cluster
        .wait_view(new_leader, DEADLINE, "the new leader to forget the removed node", |v| match v.node(removed) {
            None => Ok(()),
            Some(n) => Err(format!("still listed: {n:?}")),
        })
        .await;

    let node = cluster.node(stay[1]);
    let (endpoint_id, _) = register_endpoint(node, &json!({"url": receiver.url("kept"), "retry": retry_quick()})).await;
    let event = send_event(node, &json!({"type": "t", "payload": {}})).await;
    let delivery = wait_delivery_state(node, &event.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let (sender, _) = successful_sender(&delivery);
    assert!(stay.contains(&sender), "sent by a remaining node, not {sender}: {delivery:#}");
}
