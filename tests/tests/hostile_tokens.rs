//! The hostile-client suite, tokens and trust: each probe an outside
//! review found, with the refusal it now gets (docs/SECURITY.md).
//!
//! - A producer's token adds a member → 403; an admin token adding an
//!   address that cannot prove it holds the cluster secret → 409, and that
//!   address is sent a hello and nothing else (never the secret).
//! - A membership address with a scheme or userinfo → 422.
//! - A node with peers and no admin token refuses membership changes.
//! - Empty and short secrets and tokens are refused at start.
//! - A cross-site content type (`text/plain; a=+json`) → 415.
//! - A rebinding `Host` on a node without a token → 403.
//! - A read token reads without secrets and changes nothing; a token of
//!   the tokens file is revoked by SIGHUP without a restart.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookraft_tests::{
    ClusterOptions, NodeOptions, POLL_INTERVAL, StatusCode, TestCluster, TestNode, assert_problem, eventually,
    fast_retry, locate_hookraft_binary,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const API_TOKEN: &str = "producer-token-4e1b7c";
const ADMIN_TOKEN: &str = "operator-token-9a3d52";
const DEADLINE: Duration = Duration::from_secs(60);

/// A listener that records what each connection sends and answers `200`
/// with an unsigned body: a forged member.
async fn forged_listener() -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65_536];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    log.lock().unwrap().extend_from_slice(&buf[..n]);
                    if socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_token_cannot_add_a_member_and_a_forged_member_learns_nothing() {
    let node = NodeOptions::default().api_token(API_TOKEN).admin_token(ADMIN_TOKEN);
    let cluster = TestCluster::start_with(ClusterOptions { node, ..ClusterOptions::default() }).await;
    let leader = cluster.leader_id().await;
    let (forged, seen) = forged_listener().await;
    let add = json!({"id": 99, "addr": forged});
    for id in cluster.ids() {
        let node = cluster.node(id);
        let as_producer = node.client().post(node.url("/v1/cluster/nodes")).bearer_auth(API_TOKEN).json(&add);
        let answer = node.send(as_producer).await;
        assert_problem(&answer, StatusCode::FORBIDDEN, &format!("node {id}: a producer's token adding a member"));
        let detail = answer.2["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("admin"), "the problem names the scope needed: {detail}");
    }
    assert!(seen.lock().unwrap().is_empty(), "nothing reached the forged address");

    // With the admin token (asked of a follower, so the leader gets it
    // passed on): the address must prove it holds the secret first.
    let follower = cluster.followers().await[0];
    let answer = cluster.node(follower).post_json("/v1/cluster/nodes", &add).await;
    assert_problem(&answer, StatusCode::CONFLICT, "a member that cannot prove it holds the secret");
    let sent = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    assert!(sent.starts_with("POST /internal/hello "), "only a hello: {sent}");
    assert_eq!(sent.matches("POST ").count(), 1, "one request, no log: {sent}");
    assert!(!sent.contains(cluster.cluster_secret()), "the secret travelled: {sent}");
    assert!(!sent.contains("x-hookraft-cluster-secret"), "{sent}");

    for addr in [format!("http://{forged}"), format!("user:pw@{forged}"), format!("{forged}/internal"), "node".into()] {
        let answer = cluster.node(leader).post_json("/v1/cluster/nodes", &json!({"id": 98, "addr": addr})).await;
        assert_problem(&answer, StatusCode::UNPROCESSABLE_ENTITY, &format!("member address {addr}"));
    }
    let view = cluster.view(leader).await;
    assert_eq!(view.nodes.iter().filter(|n| n.member).count(), 3, "the membership is unchanged: {view:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_peers_and_no_admin_token_refuses_membership_changes() {
    let options = NodeOptions::default().api_token(API_TOKEN);
    let cluster = TestCluster::start_with(ClusterOptions { node: options, ..ClusterOptions::default() }).await;
    let leader = cluster.leader_id().await;
    let node = cluster.node(leader);
    let answer = node.post_json("/v1/cluster/nodes", &json!({"id": 4, "addr": "127.0.0.1:9"})).await;
    assert_problem(&answer, StatusCode::FORBIDDEN, "membership without an admin token");
    let detail = answer.2["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("--admin-token"), "the problem says what to set: {detail}");
    assert_problem(&node.delete("/v1/cluster/nodes/3").await, StatusCode::FORBIDDEN, "removal without one");
    // The producer's routes work as before.
    let (status, _, body) = node.get_json("/v1/endpoints").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Runs `hookraft serve` with `args` and returns its exit and its output;
/// it must exit on its own (a refusal at start).
async fn serve_refused(args: &[&str]) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = tokio::process::Command::new(locate_hookraft_binary());
    command.arg("serve").arg("--listen").arg("127.0.0.1:0").arg("--data-dir").arg(dir.path().join("data")).args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("HOOKRAFT_") {
            command.env_remove(key);
        }
    }
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE, command.output()).await.expect("refused at once").expect("runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_or_short_secrets_and_tokens_are_refused_at_start() {
    let peers = "1=127.0.0.1:1,2=127.0.0.1:2";
    let cases: [(&[&str], &str); 6] = [
        (&["--peers", peers, "--cluster-secret", ""], "--cluster-secret is empty"),
        (&["--peers", peers, "--cluster-secret", "short-cluster-secret"], "fewer than the 32"),
        (&["--cluster-secret", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"], "distinct"),
        (&["--api-token", ""], "--api-token"),
        (&["--admin-token", "admin-123"], "--admin-token"),
        (&["--read-token", "read token with spaces"], "--read-token"),
    ];
    for (args, expected) in cases {
        let (success, text) = serve_refused(args).await;
        assert!(!success, "{args:?} started");
        assert!(text.contains(expected), "{args:?}: {text}");
        for arg in args.iter().filter(|a| a.len() > 8 && !a.starts_with('-') && !a.contains('=')) {
            assert!(!text.contains(arg), "the refusal quotes the secret {arg}: {text}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_content_type_is_refused_and_nothing_is_committed() {
    let node = TestNode::start_with(NodeOptions::default().api_token(API_TOKEN)).await;
    let event = r#"{"type": "order.created", "payload": {"n": 1}}"#;
    for content_type in [
        "text/plain; a=+json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=application/json",
    ] {
        let request =
            node.request(reqwest::Method::POST, "/v1/events").header("content-type", content_type).body(event);
        assert_problem(&node.send(request).await, StatusCode::UNSUPPORTED_MEDIA_TYPE, content_type);
    }
    let (status, _, list) = node.get_json("/v1/events").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["data"].as_array().map(Vec::len), Some(0), "nothing was committed: {list}");
    let request = node
        .request(reqwest::Method::POST, "/v1/events")
        .header("content-type", "application/json; charset=utf-8")
        .body(event);
    assert_eq!(node.send(request).await.0, StatusCode::ACCEPTED, "JSON itself is taken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_token_answers_only_loopback_hosts() {
    let node = TestNode::start().await;
    for host in ["evil.example", "evil.example:8080", "10.0.0.1", "127.0.0.1.evil.example"] {
        for path in ["/v1/endpoints", "/healthz", "/ui/"] {
            let request = node.client().get(node.url(path)).header("host", host);
            assert_problem(&node.send(request).await, StatusCode::FORBIDDEN, &format!("GET {path} as Host {host}"));
        }
    }
    let port = node.port();
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), "[::1]".to_owned()] {
        let request = node.client().get(node.url("/v1/endpoints")).header("host", &host);
        assert_eq!(node.send(request).await.0, StatusCode::OK, "Host {host}");
    }
    // With a token, names are the operator's business (a load balancer's).
    let guarded = TestNode::start_with(NodeOptions::default().api_token(API_TOKEN)).await;
    let request = guarded.request(reqwest::Method::GET, "/v1/endpoints").header("host", "hookraft.internal.example");
    assert_eq!(guarded.send(request).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_reads_without_secrets_and_a_revoked_file_token_is_refused_after_sighup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tokens");
    let billing = "billing-service-token-5e7d01";
    let grafana = "grafana-readonly-token-b2c9";
    let write = |text: &str| {
        std::fs::write(&file, text).expect("write tokens");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    write(&format!("# services\nbilling api {billing}\ngrafana read {grafana}\n"));
    let node =
        TestNode::start_with(NodeOptions::default().admin_token(ADMIN_TOKEN).arg("--tokens-file").arg(&file)).await;
    let as_billing =
        |method: reqwest::Method, path: &str| node.client().request(method, node.url(path)).bearer_auth(billing);
    let as_grafana =
        |method: reqwest::Method, path: &str| node.client().request(method, node.url(path)).bearer_auth(grafana);

    let endpoint = json!({"url": "http://127.0.0.1:9/hook", "retry": fast_retry()});
    let (status, _, created) = node.send(as_billing(reqwest::Method::POST, "/v1/endpoints").json(&endpoint)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    assert!(created["secret"].as_str().is_some_and(|s| s.starts_with("whsec_")), "{created}");

    let (status, _, read) = node.send(as_grafana(reqwest::Method::GET, &format!("/v1/endpoints/{id}"))).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert!(read.get("secret").is_none(), "a reader sees no signing secret: {read}");
    let (_, _, list) = node.send(as_grafana(reqwest::Method::GET, "/v1/endpoints")).await;
    assert!(list["data"][0].get("secret").is_none(), "{list}");
    let refused = node.send(as_grafana(reqwest::Method::POST, "/v1/endpoints").json(&endpoint)).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "a reader creating an endpoint");
    let refused = node.send(as_billing(reqwest::Method::POST, "/v1/cluster/nodes/1/drain")).await;
    assert_problem(&refused, StatusCode::FORBIDDEN, "a producer draining a node");

    // Revoke billing's token: the file without it, then SIGHUP.
    write(&format!("grafana read {grafana}\n"));
    let pid = node.pid().expect("running");
    let status = std::process::Command::new("kill").arg("-HUP").arg(pid.to_string()).status().expect("kill");
    assert!(status.success());
    eventually(DEADLINE, POLL_INTERVAL, "the revoked token to be refused", async || {
        node.send(as_billing(reqwest::Method::GET, "/v1/endpoints")).await.0 == StatusCode::UNAUTHORIZED
    })
    .await;
    assert_eq!(node.send(as_grafana(reqwest::Method::GET, "/v1/endpoints")).await.0, StatusCode::OK);
    // A file that no longer parses leaves the tokens as they were.
    write("grafana owner nonsense\n");
    std::process::Command::new("kill").arg("-HUP").arg(pid.to_string()).status().expect("kill");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(node.send(as_grafana(reqwest::Method::GET, "/v1/endpoints")).await.0, StatusCode::OK);
    let (status, _, body) = node.post_json("/v1/endpoints", &endpoint).await;
    assert_eq!(status, StatusCode::CREATED, "the admin token of the flags stays: {body}");
}
