//! `hookraft keys` against a running node: a key rotation end to end.
//! The keyring file is edited with the command line, the node restarted on
//! it, and `hookraft keys rewrap` reseals what the node retains.

use std::path::Path;
use std::process::Output;

use hookraft_tests::{
    DEADLINE, NodeOptions, ScriptedReceiver, StatusCode, TestNode, fast_retry, locate_hookraft_binary,
    register_endpoint, send_event, wait_delivery_state,
};
use serde_json::{Value, json};

const TOKEN: &str = "keys-cli-admin-token-2b7e";
const EVENTS: usize = 4;

/// Runs `hookraft keys <args>` with none of the caller's `HOOKRAFT_*` settings.
async fn hookraft_keys(args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(locate_hookraft_binary());
    command.arg("keys").args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HOOKRAFT_") {
            command.env_remove(name);
        }
    }
    command.output().await.expect("run hookraft keys")
}

/// Runs `hookraft keys <args>`, asserts it succeeded, returns stdout.
async fn keys_ok(args: &[&str]) -> String {
    let out = hookraft_keys(args).await;
    assert!(out.status.success(), "hookraft keys {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `hookraft keys rewrap` on `node`, with `extra` flags.
async fn rewrap(node: &TestNode, extra: &[&str]) -> Output {
    let url = node.url("");
    let mut args = vec!["rewrap", "--node", url.as_str(), "--token", TOKEN];
    args.extend_from_slice(extra);
    hookraft_keys(&args).await
}

/// `hookraft keys status` on `node`, parsed.
async fn status(node: &TestNode) -> Value {
    let url = node.url("");
    let text = keys_ok(&["status", "--node", &url, "--token", TOKEN]).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("status printed no JSON ({e}): {text}"))
}

/// Each event's `key_id` and payload as `GET /v1/events/{id}` shows them.
async fn stored(node: &TestNode, events: &[(String, Value)]) -> Vec<(Value, Value)> {
    let mut seen = Vec::new();
    for (id, _) in events {
        let (code, _, event) = node.get_json(&format!("/v1/events/{id}")).await;
        assert_eq!(code, StatusCode::OK, "reading event {id} answered {event}");
        seen.push((event["key_id"].clone(), event["payload"].clone()));
    }
    seen
}

fn keyring_arg(path: &Path) -> String {
    path.to_str().expect("a UTF-8 temporary path").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_generated_and_activated_by_the_cli_reseals_every_payload_after_a_restart_and_a_rewrap() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ring = keyring_arg(&dir.path().join("keyring"));
    keys_ok(&["generate", "--keyring", &ring]).await;

    let receiver = ScriptedReceiver::start().await;
    let options = NodeOptions::default().admin_token(TOKEN).arg("--keyring").arg(&ring);
    let mut node = TestNode::start_with(options).await;
    let (endpoint_id, _) = register_endpoint(&node, &json!({"url": receiver.url("keys"), "retry": fast_retry()})).await;
    let mut events = Vec::new();
    for n in 0..EVENTS {
        let payload = json!({"n": n, "note": "sealed ✓"});
        let accepted = send_event(&node, &json!({"type": "rotation.test", "payload": payload})).await;
        wait_delivery_state(&node, &accepted.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
        events.push((accepted.event_id, payload));
    }
    let bodies: Vec<Value> = receiver.requests("keys").iter().map(|r| r.body_json()).collect();
    assert_eq!(bodies, events.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(), "receivers get the clear JSON");
    for (key, _) in stored(&node, &events).await {
        assert_eq!(key, "k1", "sealed under the keyring's only key");
    }
    let before = status(&node).await;
    assert_eq!(before["encryption"], true, "{before}");
    assert_eq!(before["active_key_id"], "k1", "{before}");

    // Rotation: a new active key in the file, the node restarted on it.
    let generated = keys_ok(&["generate", "--keyring", &ring]).await;
    assert!(generated.contains("k2"), "{generated}");
    node.restart().await;
    let after = status(&node).await;
    assert_eq!(after["active_key_id"], "k2", "{after}");
    assert_eq!(after["key_ids"], json!(["k1", "k2"]), "{after}");

    let dry = rewrap(&node, &["--dry-run"]).await;
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{text}{}", String::from_utf8_lossy(&dry.stderr));
    assert!(text.contains(&format!("examined:   {EVENTS}\nrewrapped:  0\n")), "a dry run changes nothing: {text}");
    assert!(text.contains(&format!("  k1  {EVENTS}\n")), "{text}");
    assert!(text.contains("secrets by key:\n  k1  1\n"), "the endpoint's signing secret: {text}");
    for (key, _) in stored(&node, &events).await {
        assert_eq!(key, "k1", "still under k1 after a dry run");
    }

    let done = rewrap(&node, &[]).await;
    let text = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{text}{}", String::from_utf8_lossy(&done.stderr));
    assert!(text.contains(&format!("rewrapped:  {EVENTS}\n")) && text.contains("failed:     0\n"), "{text}");
    assert!(text.contains("secrets:    1 examined, 1 rewrapped, 0 skipped, 0 failed\n"), "{text}");

    let check = rewrap(&node, &["--dry-run"]).await;
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{text}");
    assert!(text.contains(&format!("payloads by key:\n  k2  {EVENTS}  (active)\n")), "all under k2: {text}");
    assert!(text.contains("secrets by key:\n  k2  1  (active)\n"), "{text}");
    for ((key, payload), (_, sent)) in stored(&node, &events).await.into_iter().zip(&events) {
        assert_eq!(key, "k2", "resealed under the new active key");
        assert_eq!(&payload, sent, "the payload opens to what was sent");
    }

    // A keyring that lost the key the payloads are under: the rewrap
    // reports each payload it cannot open and fails.
    keys_ok(&["generate", "--keyring", &ring]).await;
    keys_ok(&["remove", "k1", "--keyring", &ring]).await;
    keys_ok(&["remove", "k2", "--keyring", &ring]).await;
    assert_eq!(keys_ok(&["list", "--keyring", &ring]).await, "k3  (active)\n");
    node.restart().await;
    let failed = rewrap(&node, &[]).await;
    let (text, errors) = (String::from_utf8_lossy(&failed.stdout), String::from_utf8_lossy(&failed.stderr));
    assert!(!failed.status.success(), "payloads that cannot be opened fail the rewrap: {text}");
    assert!(text.contains(&format!("failed:     {EVENTS}\n")), "{text}");
    for (id, _) in &events {
        assert!(text.contains(&format!("  {id}: key k2 is not in this node's keyring")), "{id} listed: {text}");
    }
    assert!(text.contains("secrets:    1 examined, 0 rewrapped, 0 skipped, 1 failed\n"), "{text}");
    let failed = EVENTS + 1;
    assert!(errors.contains(&format!("{failed} payloads or secrets could not be opened")), "{errors}");
    let missing = status(&node).await;
    assert_eq!(missing["key_ids"], json!(["k3"]), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrap_on_a_node_without_a_keyring_fails_with_the_nodes_reason_and_a_dry_run_counts_clear_payloads() {
    let node = TestNode::start_with(NodeOptions::default().admin_token(TOKEN)).await;
    send_event(&node, &json!({"type": "clear.test", "payload": {"n": 1}})).await;
    let refused = rewrap(&node, &[]).await;
    assert!(!refused.status.success(), "a node with no keyring cannot rewrap");
    let errors = String::from_utf8_lossy(&refused.stderr);
    assert!(errors.contains("409") && errors.contains("no keyring"), "{errors}");

    let dry = rewrap(&node, &["--dry-run"]).await;
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{text}{}", String::from_utf8_lossy(&dry.stderr));
    assert!(text.contains("  clear  1  (stored in clear)\n"), "{text}");

    let unauthorized = hookraft_keys(&["status", "--node", &node.url("")]).await;
    assert!(!unauthorized.status.success(), "status needs the admin token");
    assert!(String::from_utf8_lossy(&unauthorized.stderr).contains("401"), "{unauthorized:?}");
}
