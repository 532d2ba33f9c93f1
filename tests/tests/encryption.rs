//! Payload encryption end to end: nothing readable on disk, tampering
//! caught and never sent, a missing key deferred rather than lost, and a
//! key rotation with its rewrap across a three-node cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hookraft_core::command::{Command, NewEvent};
use hookraft_core::entropy::EntropyRng;
use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::payload::{Keyring, KeyringFile, Payload};
use hookraft_raft::rpc;
use hookraft_tests::at_rest::{
    Pattern, file_named, files_containing, hex, hmac_sha256, keyring_in, keyring_text, write_keyring,
};
use hookraft_tests::link::signed_post;
use hookraft_tests::{
    ClusterOptions, DEADLINE, NodeOptions, POLL_INTERVAL, Reply, ScriptedReceiver, StatusCode, TestCluster, TestNode,
    eventually, get_delivery, register_endpoint, send_event, unix_now_s, verify_request, wait_delivery_state, wait_for,
};
use serde_json::{Value, json};

/// Appears in every payload of these tests, and must appear in no file.
const MARKER: &str = "4111-1111-1111-1111 Ada Lovelace";

fn with_keyring(path: &Path) -> NodeOptions {
    NodeOptions::default().arg("--keyring").arg(path)
}

fn payload(n: usize) -> Value {
    json!({"card": MARKER, "n": n})
}

/// A node with a one-key keyring (`k1`) that snapshots every 20 entries,
/// and a receiver whose `hook` answers 200.
async fn sealed_node() -> (tempfile::TempDir, PathBuf, ScriptedReceiver, TestNode) {
    let (keys, keyring) = keyring_in("k1", &[("k1", 1)]);
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("hook", Reply::ok());
    let node = TestNode::start_with(with_keyring(&keyring).arg("--snapshot-every").arg("20")).await;
    (keys, keyring, receiver, node)
}

async fn metrics(node: &TestNode) -> String {
    let response = node.client().get(node.url("/metrics")).send().await.expect("metrics answer");
    response.text().await.expect("metrics text")
}

/// Posts events, waits for every delivery, and returns the event ids.
async fn post_and_deliver(node: &TestNode, endpoint_id: &str, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut deliveries = Vec::new();
    for n in 0..count {
        let accepted = send_event(node, &json!({"type": "card.charged", "payload": payload(n)})).await;
        deliveries.push(accepted.delivery_for(endpoint_id));
        ids.push(accepted.event_id);
    }
    for delivery in deliveries {
        wait_delivery_state(node, &delivery, "delivered", DEADLINE).await;
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_is_nowhere_on_disk_after_a_snapshot_and_a_restart_yet_is_delivered_in_clear() {
    let (_keys, _keyring, receiver, mut node) = sealed_node().await;
    let (endpoint_id, secret) = register_endpoint(&node, &json!({"url": receiver.url("hook")})).await;

    let events = post_and_deliver(&node, &endpoint_id, 60).await;
    // Receivers get the producer's JSON, signed over exactly those bytes.
    let requests = receiver.requests("hook");
    assert!(requests.len() >= 60);
    for request in &requests {
        verify_request(request, &[&secret]).expect("signed over the plaintext");
        assert_eq!(request.body_json()["card"], MARKER, "the body is the plaintext");
    }
    // The delivered events are history: a snapshot past their deliveries
    // writes them to the history store on disk, the state beside them.
    assert!(gauge(&node, "hookraft_history_bytes").await > 0.0, "the delivered events are history");
    snapshot_of_all_applied(&node).await;
    assert!(file_named(&node.data_dir(), "hookraft-history.redb"), "the history store is on disk");
    assert_eq!(files_containing(&node.data_dir(), MARKER.as_bytes()), Vec::<PathBuf>::new());

    node.restart().await;
    assert_eq!(files_containing(&node.data_dir(), MARKER.as_bytes()), Vec::<PathBuf>::new());
    let (status, _, event) = node.get_json(&format!("/v1/events/{}", events[7])).await;
    assert_eq!(status, StatusCode::OK, "{event}");
    assert_eq!(event["payload"], payload(7), "opened for an authorised caller after the restart");
    assert_eq!(event["key_id"], "k1");
    assert_eq!(event["payload_error"], Value::Null);
    assert!(node.log_tail(400).contains("payloads are sealed"), "the node says so when it starts");

    // The keys' ids are shown, never their material; nor is it in the log.
    let key = KeyringFile::parse(&keyring_text("k1", &[("k1", 1)])).unwrap().keys[0].1.to_base64();
    let (status, _, keys) = node.get_json("/v1/cluster/payloads/keys").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(keys["active_key_id"], "k1");
    assert_eq!(keys["key_ids"], json!(["k1"]));
    assert!(!keys.to_string().contains(&key) && !node.log_tail(10_000).contains(&key));
}

async fn gauge(node: &TestNode, name: &str) -> f64 {
    let Ok(response) = node.client().get(node.url("/metrics")).send().await else { return 0.0 };
    let text = response.text().await.unwrap_or_default();
    let parsed = hookraft_tests::exposition::parse(&text, hookraft_tests::exposition::Format::Prometheus);
    parsed.ok().and_then(|e| e.value(name, &[])).unwrap_or(0.0)
}

/// Waits for a snapshot that holds everything applied so far.
async fn snapshot_of_all_applied(node: &TestNode) {
    let applied = gauge(node, "hookraft_raft_applied_index").await;
    eventually(DEADLINE, POLL_INTERVAL, "a snapshot of everything applied on disk", async || {
        gauge(node, "hookraft_snapshot_index").await >= applied
    })
    .await;
}

/// An endpoint's signing keys and a provider's secret, as the API is given them.
const ENDPOINT_KEY: &[u8; 32] = b"endpoint signing key, 32 bytes!!";
const ROTATED_KEY: &[u8; 32] = b"the rotated endpoint key, 32 b!!";
const PROVIDER_SECRET: &str = "provider secret that stays sealed";

fn whsec(key: &[u8]) -> String {
    format!("whsec_{}", BASE64.encode(key))
}

/// Posts a GitHub-signed request to `source`'s ingress.
async fn github_post(node: &TestNode, source: &str, delivery: &str) -> (StatusCode, Value) {
    let body = json!({"action": "opened", "n": delivery}).to_string();
    let signature = format!("sha256={}", hex(&hmac_sha256(PROVIDER_SECRET.as_bytes(), &[body.as_bytes()])));
    let request = node.client().post(node.url(&format!("/in/{source}"))).header("content-type", "application/json");
    let request = request
        .header("x-hub-signature-256", signature)
        .header("x-github-delivery", delivery)
        .header("x-github-event", "pull_request");
    let (status, _, answer) = node.send(request.body(body)).await;
    (status, answer)
}

/// Files under the node's data directory that hold any of the test's secrets.
fn secrets_on_disk(node: &TestNode) -> Vec<PathBuf> {
    let texts = [whsec(ENDPOINT_KEY), whsec(ROTATED_KEY)];
    let needles =
        [&ENDPOINT_KEY[..], &ROTATED_KEY[..], PROVIDER_SECRET.as_bytes(), texts[0].as_bytes(), texts[1].as_bytes()];
    needles.iter().flat_map(|needle| files_containing(&node.data_dir(), needle)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_and_provider_secrets_are_sealed_on_disk_and_a_node_missing_their_key_holds_back() {
    let (_keys, keyring, receiver, mut node) = sealed_node().await;
    let body = json!({"url": receiver.url("hook"), "secret": whsec(ENDPOINT_KEY)});
    let (endpoint_id, shown) = register_endpoint(&node, &body).await;
    assert_eq!(shown, whsec(ENDPOINT_KEY), "the secret given is the secret shown");
    let rotate = json!({"secret": whsec(ROTATED_KEY), "grace_period_s": 3600});
    let (status, _, rotated) = node.post_json(&format!("/v1/endpoints/{endpoint_id}/rotate-secret"), &rotate).await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let (status, _, source) =
        node.post_json("/v1/sources", &json!({"scheme": "github", "secret": PROVIDER_SECRET})).await;
    assert_eq!(status, StatusCode::CREATED, "{source}");
    let source = source["id"].as_str().expect("an id").to_string();

    // Both secrets sign during the grace period, opened from their seals.
    post_and_deliver(&node, &endpoint_id, 30).await;
    for request in receiver.requests("hook") {
        verify_request(&request, &[&whsec(ROTATED_KEY)]).expect("signed with the current secret");
        verify_request(&request, &[&whsec(ENDPOINT_KEY)]).expect("and with the retired one");
    }
    assert_eq!(github_post(&node, &source, "gh-1").await.0, StatusCode::OK, "the provider's secret opens");

    // Nowhere on disk, in the log or a snapshot, nor after a restart.
    snapshot_of_all_applied(&node).await;
    assert_eq!(secrets_on_disk(&node), Vec::<PathBuf>::new());
    node.restart().await;
    assert_eq!(secrets_on_disk(&node), Vec::<PathBuf>::new());
    assert_eq!(github_post(&node, &source, "gh-2").await.0, StatusCode::OK);
    let (_, _, read) = node.get_json(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert_eq!(read["secret"], whsec(ROTATED_KEY).as_str(), "{read}");

    // Back without k1, the key they are sealed under: nothing is sent or
    // accepted, nothing is lost, and the node names the key.
    write_keyring(&keyring, "k2", &[("k2", 2)]);
    node.restart().await;
    let (_, _, read) = node.get_json(&format!("/v1/endpoints/{endpoint_id}")).await;
    assert!(read.get("secret").is_none(), "not shown when it cannot be opened: {read}");
    let (status, problem) = github_post(&node, &source, "gh-3").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "the provider sends again later: {problem}");
    assert!(
        problem["detail"].as_str().is_some_and(|d| d.contains("key k1 is not in this node's keyring")),
        "{problem}"
    );
    let before = receiver.count("hook");
    let accepted = send_event(&node, &json!({"type": "card.charged", "payload": payload(99)})).await;
    let delivery_id = accepted.delivery_for(&endpoint_id);
    wait_for(Duration::from_secs(90), POLL_INTERVAL, "an attempt held back for the secret's key", async || {
        let delivery = get_delivery(&node, &delivery_id).await;
        let held = delivery["timeline"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["error"].as_str().is_some_and(|e| e.contains("key k1 is not in this node's keyring")));
        if held { Ok(()) } else { Err(format!("{delivery:#}")) }
    })
    .await;
    assert_eq!(receiver.count("hook"), before, "nothing was sent unsigned or signed wrongly");
    let (_, _, ready) = node.get_json("/readyz").await;
    assert!(ready.as_str().is_some_and(|r| r.contains("key k1 is not in this node's keyring")), "{ready}");

    // k1 back beside k2: delivered, signed as before.
    write_keyring(&keyring, "k2", &[("k1", 1), ("k2", 2)]);
    node.restart().await;
    wait_delivery_state(&node, &delivery_id, "delivered", Duration::from_secs(90)).await;
    let last = receiver.requests_for_event("hook", &accepted.event_id);
    verify_request(last.last().expect("sent"), &[&whsec(ROTATED_KEY)]).expect("signed");
    assert_eq!(github_post(&node, &source, "gh-3").await.0, StatusCode::OK, "the provider's retry is taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_rewrap_request_is_a_clear_4xx_and_changes_nothing() {
    let (_keys, keyring) = keyring_in("k1", &[("k1", 1)]);
    let node = TestNode::start_with(with_keyring(&keyring)).await;
    for (body, why) in [
        (json!({"after": "not-an-id"}), "after"),
        (json!({"dry_run": "yes"}), "expected a boolean"),
        (json!({"max": 5}), "unknown field"),
    ] {
        let (status, _, problem) = node.post_json("/v1/cluster/payloads/rewrap", &body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {problem}");
        assert!(problem["detail"].as_str().is_some_and(|d| d.contains(why)), "{body}: {problem}");
    }
    let request = node.request(reqwest::Method::POST, "/v1/cluster/payloads/rewrap").body("{not json");
    let (status, _, problem) = node.send(request.header("content-type", "application/json")).await;
    assert!(status.is_client_error(), "{problem}");
    // Nothing to rewrap yet: an empty pass.
    let (status, _, report) = node.post_json("/v1/cluster/payloads/rewrap", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!((report["examined"].clone(), report["rewrapped"].clone()), (json!(0), json!(0)));
}

/// The check above bites: without a keyring the same search finds the payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_keyring_payloads_are_stored_in_clear_and_the_node_says_so() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("hook", Reply::ok());
    let node = TestNode::start().await;
    let body = json!({"url": receiver.url("hook"), "secret": whsec(ENDPOINT_KEY)});
    let (endpoint_id, _) = register_endpoint(&node, &body).await;
    let events = post_and_deliver(&node, &endpoint_id, 3).await;
    eventually(DEADLINE, POLL_INTERVAL, "the payload and the signing key in the log", async || {
        !files_containing(&node.data_dir(), MARKER.as_bytes()).is_empty() && !secrets_on_disk(&node).is_empty()
    })
    .await;
    let (_, _, event) = node.get_json(&format!("/v1/events/{}", events[0])).await;
    assert_eq!(event["key_id"], Value::Null, "{event}");
    assert!(node.log_tail(400).contains("payloads are stored in clear"));
    assert!(metrics(&node).await.contains("hookraft_payload_encryption 0"));
}

/// A forged event proposed with the node's own cluster secret, so its
/// payload reaches the log exactly as built here.
async fn propose_event(node: &TestNode, event: NewEvent) {
    let secret = std::fs::read_to_string(node.data_dir().join("cluster-secret")).expect("the node's secret");
    let command = Command::IngestEventsFrom { node_id: 1, now_ms: unix_now_s() * 1_000, events: vec![event] };
    let body = rpc::encode("forwarded command", &command).expect("encodes");
    let request = signed_post(node, 1, secret.trim(), rpc::PROPOSE_PATH, body);
    let response = request.send().await.expect("the node answers");
    assert_eq!(response.status(), StatusCode::OK);
}

fn new_event(endpoint: EndpointId, seed: u8, payload: impl FnOnce(&EventId) -> Payload) -> NewEvent {
    let id = EventId::generate(unix_now_s() * 1_000, &mut EntropyRng(&Pattern(seed)));
    NewEvent {
        id,
        event_type: "card.charged".into(),
        payload: payload(&id),
        idempotency_key: None,
        endpoint_ids: Some(vec![endpoint]),
        ordering_key: None,
        inbound: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_or_misplaced_payload_fails_authentication_is_reported_and_never_sent() {
    let (_keys, keyring_path) = keyring_in("k1", &[("k1", 1)]);
    let ring = Keyring::parse(&keyring_text("k1", &[("k1", 1)])).unwrap();
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("hook", Reply::ok());
    let node = TestNode::start_with(with_keyring(&keyring_path)).await;
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("hook")})).await;
    let endpoint: EndpointId = endpoint_id.parse().unwrap();
    let plaintext = payload(1).to_string();
    let seal = |id: &EventId| ring.seal(&id.as_str(), "card.charged", plaintext.as_bytes(), &Pattern(5));

    // A ciphertext with one bit flipped; and a sound one sealed for another event.
    let tampered = new_event(endpoint, 11, |id| {
        let mut bytes = seal(id).as_bytes().to_vec();
        let last = bytes.len() - 20;
        bytes[last] ^= 0x01;
        Payload::from_stored(bytes.into()).unwrap()
    });
    let other = EventId::generate(1, &mut EntropyRng(&Pattern(99)));
    let misplaced = new_event(endpoint, 12, |_| seal(&other));
    // The control: sealed right, through the same forged path, is delivered.
    let sound = new_event(endpoint, 13, |id| seal(id));
    let (tampered_id, misplaced_id, sound_id) = (tampered.id, misplaced.id, sound.id);
    for event in [tampered, misplaced, sound] {
        propose_event(&node, event).await;
    }

    wait_delivery_state(&node, &DeliveryId::derive(&sound_id, &endpoint).to_string(), "delivered", DEADLINE).await;
    for id in [tampered_id, misplaced_id] {
        let delivery = DeliveryId::derive(&id, &endpoint).to_string();
        let refused = wait_for(DEADLINE, POLL_INTERVAL, "the payload refused on the timeline", async || {
            let delivery = get_delivery(&node, &delivery).await;
            let errors: Vec<String> = delivery["timeline"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["error"].as_str().map(str::to_string))
                .collect();
            if errors.iter().any(|e| e.contains("payload failed authentication under key k1")) {
                Ok(delivery)
            } else {
                Err(format!("{delivery:#}"))
            }
        })
        .await;
        assert_eq!(refused["state"], "retrying", "kept, not dead-lettered: {refused:#}");
        let rules: Vec<&Value> =
            refused["timeline"].as_array().unwrap().iter().filter(|e| e["kind"] == "retry_scheduled").collect();
        assert!(rules.iter().all(|e| e["rule"] == "payload_unavailable"), "{refused:#}");
        let (_, _, event) = node.get_json(&format!("/v1/events/{id}")).await;
        assert_eq!(event["payload"], Value::Null, "{event}");
        assert!(event["payload_error"].as_str().is_some_and(|e| e.contains("failed authentication")), "{event}");
        assert!(receiver.requests_for_event("hook", &id.as_str()).is_empty(), "never sent");
    }
    assert_eq!(receiver.requests_for_event("hook", &sound_id.as_str()).len(), 1);
    let metrics = metrics(&node).await;
    let tampered_line =
        metrics.lines().find(|l| l.starts_with("hookraft_payload_open_failures_total{reason=\"tampered\"}"));
    let count: u64 = tampered_line.and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0);
    assert!(count >= 2, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_missing_a_key_records_it_retries_without_spending_attempts_and_delivers_once_it_is_back() {
    let (_keys, keyring) = keyring_in("k2", &[("k1", 1), ("k2", 2)]);
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("hook", Reply::ok());
    let mut node = TestNode::start_with(with_keyring(&keyring)).await;
    let retry = json!({"attempts_max": 3, "base_ms": 50, "cap_ms": 200, "max_age_s": 3600});
    let (endpoint_id, secret) = register_endpoint(&node, &json!({"url": receiver.url("hook"), "retry": retry})).await;
    // Disabled while the event comes in: its delivery waits, dead-lettered, for a replay.
    let (status, _, body) = node.patch_json(&format!("/v1/endpoints/{endpoint_id}"), &json!({"disabled": true})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let body = json!({"type": "card.charged", "payload": payload(1), "endpoint_ids": [endpoint_id]});
    let accepted = send_event(&node, &body).await;
    let delivery_id = accepted.delivery_for(&endpoint_id);
    wait_delivery_state(&node, &delivery_id, "dead", DEADLINE).await;

    // The node comes back without k2, the key the payload is sealed under.
    write_keyring(&keyring, "k1", &[("k1", 1)]);
    node.restart().await;
    let (status, _, body) = node.patch_json(&format!("/v1/endpoints/{endpoint_id}"), &json!({"disabled": false})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = node.post_empty(&format!("/v1/deliveries/{delivery_id}/replay")).await;
    assert!(status.is_success(), "{body}");

    // More refusals than the policy's 3 attempts, and still not dead: a
    // missing key spends none of them.
    let waiting = wait_for(Duration::from_secs(90), POLL_INTERVAL, "several refused attempts", async || {
        let delivery = get_delivery(&node, &delivery_id).await;
        let refused = delivery["timeline"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["error"].as_str().is_some_and(|e| e.contains("key k2 is not in this node's keyring")))
            .count();
        if refused >= 4 { Ok(delivery) } else { Err(format!("{refused} refused so far: {delivery:#}")) }
    })
    .await;
    assert_eq!(waiting["state"], "retrying", "{waiting:#}");
    assert_eq!(receiver.count("hook"), 0, "nothing was sent");
    let (status, _, ready) = node.get_json("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(ready.as_str().is_some_and(|r| r.contains("key k2 is not in this node's keyring")), "{ready}");
    assert!(metrics(&node).await.contains("hookraft_payload_missing_key{key_id=\"k2\"}"));

    // The operator puts the key back and restarts: delivered, as sent.
    write_keyring(&keyring, "k2", &[("k1", 1), ("k2", 2)]);
    node.restart().await;
    wait_delivery_state(&node, &delivery_id, "delivered", Duration::from_secs(90)).await;
    let requests = receiver.requests("hook");
    assert_eq!(requests.len(), 1);
    verify_request(&requests[0], &[&secret]).expect("signed");
    assert_eq!(requests[0].body_json(), payload(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_and_rewrap_across_three_nodes_keep_every_payload_deliverable_and_readable() {
    let (_keys, keyring) = keyring_in("k1", &[("k1", 1)]);
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("fast", Reply::ok());
    receiver.set_default("late", Reply::status(503));
    let options = ClusterOptions { node: with_keyring(&keyring), ..ClusterOptions::default() };
    let mut cluster = TestCluster::start_with(options).await;
    let patient = json!({"attempts_max": 100, "base_ms": 100, "cap_ms": 500, "max_age_s": 3600});
    let (_, fast_secret) = register_endpoint(cluster.node(1), &json!({"url": receiver.url("fast")})).await;
    let (_, late_secret) =
        register_endpoint(cluster.node(1), &json!({"url": receiver.url("late"), "retry": patient})).await;

    // Before the rotation: through every node, to both endpoints; `late`
    // keeps failing, so its deliveries are pending across the rotation.
    let mut sent: Vec<(String, Value, Vec<String>)> = Vec::new();
    for n in 0..12 {
        let node = cluster.node(1 + (n % 3) as u64);
        let accepted = send_event(node, &json!({"type": "card.charged", "payload": payload(n)})).await;
        sent.push((accepted.event_id.clone(), payload(n), accepted.delivery_ids()));
    }
    for (event, _, _) in &sent {
        let (_, _, body) = cluster.node(2).get_json(&format!("/v1/events/{event}")).await;
        assert_eq!(body["key_id"], "k1", "{body}");
    }

    // Rotation: k2 joins the ring as the active key, one node at a time.
    write_keyring(&keyring, "k2", &[("k1", 1), ("k2", 2)]);
    for id in cluster.ids() {
        cluster.restart(id).await;
    }
    for n in 12..24 {
        let node = cluster.node(1 + (n % 3) as u64);
        let accepted = send_event(node, &json!({"type": "card.charged", "payload": payload(n)})).await;
        let (_, _, body) = node.get_json(&format!("/v1/events/{}", accepted.event_id)).await;
        assert_eq!(body["key_id"], "k2", "new payloads are sealed under the new key at once: {body}");
        sent.push((accepted.event_id.clone(), payload(n), accepted.delivery_ids()));
    }
    receiver.set_default("late", Reply::ok());
    for (_, _, deliveries) in &sent {
        for delivery in deliveries {
            wait_delivery_state(cluster.node(3), delivery, "delivered", DEADLINE).await;
        }
    }
    for (event, body, _) in &sent {
        for name in ["fast", "late"] {
            let got = receiver.requests_for_event(name, event);
            let last = got.last().unwrap_or_else(|| panic!("{name} never got {event}"));
            assert_eq!(last.body_json(), *body, "{name} got {event} as posted");
        }
    }

    // Rewrap: every retained payload under k2, through the log.
    let (status, _, report) = cluster.node(2).post_json("/v1/cluster/payloads/rewrap", &json!({})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["rewrapped"], 12, "the twelve k1 payloads: {report}");
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(report["next_after"], Value::Null, "{report}");
    let secrets = &report["secrets"];
    assert_eq!((secrets["rewrapped"].clone(), secrets["failed"].clone()), (json!(2), json!(0)), "{report}");
    // Every replica agrees, once it has applied the rewrap's entries.
    wait_for(DEADLINE, POLL_INTERVAL, "node 3 to count every payload and secret under k2", async || {
        let (_, _, counts) = cluster.node(3).post_json("/v1/cluster/payloads/rewrap", &json!({"dry_run": true})).await;
        let all_k2 = counts["by_key"] == json!({"k2": 24}) && counts["secrets"]["by_key"] == json!({"k2": 2});
        if all_k2 { Ok(()) } else { Err(counts.to_string()) }
    })
    .await;
    let first = sent[0].2[0].clone();
    let kinds: Vec<(String, Value)> = get_delivery(cluster.node(1), &first).await["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap_or("").to_string(), e["key_id"].clone()))
        .collect();
    assert!(kinds.contains(&("encrypted".into(), json!("k1"))), "{kinds:?}");
    assert!(kinds.contains(&("rewrapped".into(), json!("k2"))), "{kinds:?}");

    // The old key leaves the ring; every retained payload still opens on every node.
    write_keyring(&keyring, "k2", &[("k2", 2)]);
    for id in cluster.ids() {
        cluster.restart(id).await;
    }
    for id in cluster.ids() {
        for (event, body, _) in &sent {
            let (status, _, read) = cluster.node(id).get_json(&format!("/v1/events/{event}")).await;
            assert_eq!(status, StatusCode::OK, "{read}");
            assert_eq!(read["payload"], *body, "node {id}, event {event}: {read}");
            assert_eq!(read["key_id"], "k2");
        }
    }
    // The endpoints' secrets opened under k2 too: a new event is signed as before.
    let accepted = send_event(cluster.node(2), &json!({"type": "card.charged", "payload": payload(24)})).await;
    for delivery in accepted.delivery_ids() {
        wait_delivery_state(cluster.node(2), &delivery, "delivered", DEADLINE).await;
    }
    for (name, secret) in [("fast", &fast_secret), ("late", &late_secret)] {
        let got = receiver.requests_for_event(name, &accepted.event_id);
        verify_request(got.last().expect("sent"), &[secret]).expect("signed with the endpoint's secret");
    }
}
