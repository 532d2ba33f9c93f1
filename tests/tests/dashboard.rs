//! The operator dashboard's server side: `/ui` and its files served from
//! the binary without a token and with strict headers, `/` redirecting
//! there, nothing served that holds the token; and the routes it reads,
//! `GET /v1/stats` (the cluster's flows per minute) and `GET
//! /v1/stats/endpoints` (every endpoint's health), with their bad inputs.
//! The pages themselves are driven in a real browser by tests/browser/.

use hookraft_tests::{
    DEADLINE, NodeOptions, Reply, ScriptedReceiver, StatusCode, TestNode, assert_problem, eventually,
    register_endpoint, send_event, wait_delivery_state,
};
use reqwest::Method;
use serde_json::{Value, json};

const TOKEN: &str = "dashboard-test-token-4f1d";

/// A client that does not follow redirects, so a redirect can be seen.
fn plain_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().expect("a client")
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// The files `/ui` loads: the page's own links and every module's imports.
async fn files_of_the_page(client: &reqwest::Client, node: &TestNode, page: &str) -> Vec<String> {
    let mut files: Vec<String> =
        page.split(['"', '\'']).filter(|part| part.starts_with("/ui/") && part.len() > 4).map(str::to_string).collect();
    let mut i = 0;
    while i < files.len() {
        if files[i].ends_with(".js") {
            let body = client.get(node.url(&files[i])).send().await.expect("get").text().await.expect("text");
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let name = line.rsplit("'./").next().and_then(|r| r.split('\'').next()).unwrap_or_default();
                let path = format!("/ui/{name}");
                if !files.contains(&path) {
                    files.push(path);
                }
            }
        }
        i += 1;
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_is_served_without_a_token_with_strict_headers_and_never_holds_the_token() {
    let node = TestNode::start_with(NodeOptions::default().api_token(TOKEN)).await;
    let client = plain_client();

    let root = client.get(node.url("/")).send().await.expect("GET /");
    assert!(root.status().is_redirection(), "{}", root.status());
    assert_eq!(header(&root, "location"), "/ui");
    let slash = client.get(node.url("/ui/")).send().await.expect("GET /ui/");
    assert_eq!((slash.status().is_redirection(), header(&slash, "location")), (true, "/ui"));

    let page = client.get(node.url("/ui")).send().await.expect("GET /ui");
    assert_eq!(page.status(), StatusCode::OK, "no token needed");
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    let csp = header(&page, "content-security-policy").to_string();
    for directive in ["default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'"] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(header(&page, "x-content-type-options"), "nosniff");
    assert_eq!(header(&page, "x-frame-options"), "DENY");
    assert_eq!(header(&page, "cache-control"), "no-cache");
    let etag = header(&page, "etag").to_string();
    assert!(etag.starts_with('"') && etag.len() == 18, "{etag}");
    let html = page.text().await.expect("the page");
    assert!(html.contains("<script type=\"module\" src=\"/ui/app.js\">"), "{html}");
    assert!(!html.contains(TOKEN));

    // A browser that holds this version is told so, without the body.
    let again = client.get(node.url("/ui")).header("if-none-match", &etag).send().await.expect("GET /ui");
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header(&again, "etag"), etag);

    let files = files_of_the_page(&client, &node, &html).await;
    assert!(files.len() >= 10, "{files:?}");
    for file in &files {
        let response = client.get(node.url(file)).send().await.expect("GET a file");
        assert_eq!(response.status(), StatusCode::OK, "{file}");
        let expected = match file.rsplit('.').next() {
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("svg") => "image/svg+xml",
            other => panic!("{file}: unexpected kind {other:?}"),
        };
        assert_eq!(header(&response, "content-type"), expected, "{file}");
        assert_eq!(header(&response, "x-content-type-options"), "nosniff", "{file}");
        assert!(header(&response, "content-security-policy").contains("default-src 'self'"), "{file}");
        let body = response.text().await.expect("a file's text");
        assert!(!body.contains(TOKEN), "{file} holds the token");
    }

    // Unknown files are problems, with the same headers; nothing escapes /ui.
    for path in ["/ui/nope.js", "/ui/deliveries", "/ui/..%2fCargo.toml", "/ui/app.js/x"] {
        let response = node.send(node.client().request(Method::GET, node.url(path))).await;
        assert_problem(&response, StatusCode::NOT_FOUND, path);
        let csp = response.1.get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
    }
    // The data stays behind the token.
    for path in ["/v1/stats", "/v1/stats/endpoints", "/v1/cluster"] {
        let response = node.send(node.client().request(Method::GET, node.url(path))).await;
        assert_problem(&response, StatusCode::UNAUTHORIZED, path);
    }
}

fn last_hour(stats: &Value, field: &str) -> u64 {
    stats["last_hour"][field].as_u64().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_the_clusters_flows_per_minute_and_each_endpoints_health() {
    let receiver = ScriptedReceiver::start().await;
    receiver.set_default("down", Reply::status(503));
    let node = TestNode::start().await;
    let retry = json!({"attempts_max": 2, "base_ms": 50, "cap_ms": 100});
    let (down, _) =
        register_endpoint(&node, &json!({"url": receiver.url("down"), "retry": retry, "event_types": ["a"]})).await;
    let (up, _) = register_endpoint(&node, &json!({"url": receiver.url("up"), "event_types": ["b"]})).await;
    let dead = send_event(&node, &json!({"type": "a", "payload": {"n": 1}})).await;
    let mut delivered = Vec::new();
    for n in 0..3 {
        delivered.push(send_event(&node, &json!({"type": "b", "payload": {"n": n}})).await);
    }
    wait_delivery_state(&node, &dead.delivery_for(&down), "dead", DEADLINE).await;
    for event in &delivered {
        wait_delivery_state(&node, &event.delivery_for(&up), "delivered", DEADLINE).await;
    }

    let (status, _, stats) = node.get_json("/v1/stats").await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(stats["minutes"].as_array().map(Vec::len), Some(60), "{stats}");
    let summed: u64 =
        stats["minutes"].as_array().into_iter().flatten().map(|m| m["accepted"].as_u64().unwrap_or(0)).sum();
    assert_eq!((last_hour(&stats, "accepted"), summed), (4, 4), "{stats}");
    assert_eq!(last_hour(&stats, "delivered"), 3, "{stats}");
    assert_eq!(last_hour(&stats, "retried"), 1, "one failed attempt retried, then dead: {stats}");
    assert_eq!(last_hour(&stats, "dead"), 1, "{stats}");
    assert_eq!((stats["dead"].as_u64(), stats["queue_depth"].as_u64()), (Some(1), Some(0)), "{stats}");

    let (_, _, page) = node.get_json("/v1/stats/endpoints").await;
    let rows = page["data"].as_array().cloned().unwrap_or_default();
    let row =
        |id: &str| rows.iter().find(|r| r["endpoint_id"] == id).cloned().unwrap_or_else(|| panic!("{id}: {page}"));
    let down_row = row(&down);
    assert_eq!((down_row["dead"].as_u64(), down_row["queue_depth"].as_u64()), (Some(1), Some(0)), "{down_row}");
    assert_eq!(down_row["last_error"]["status_code"], 503, "{down_row}");
    assert_eq!(down_row["last_error"]["delivery_id"], json!(dead.delivery_for(&down)), "{down_row}");
    assert_eq!(
        (down_row["last_hour"]["attempts"].as_u64(), &down_row["last_hour"]["success_rate"]),
        (Some(2), &json!(0.0))
    );
    assert_eq!(down_row["breaker"]["state"], "closed", "{down_row}");
    assert_eq!(down_row["sender_node_id"], 1, "{down_row}");
    let up_row = row(&up);
    assert_eq!((&up_row["last_error"], &up_row["last_hour"]["success_rate"]), (&json!(null), &json!(1.0)), "{up_row}");
    assert!(up_row.get("secret").is_none(), "no secret in the health listing: {up_row}");

    let (_, _, one) = node.get_json(&format!("/v1/endpoints/{down}/stats")).await;
    assert_eq!(
        (one["dead"].as_u64(), one["in_flight"].as_u64(), one["queue_depth"].as_u64()),
        (Some(1), Some(0), Some(0))
    );
    assert_eq!(one["last_error"]["status_code"], 503, "{one}");

    // Paged in endpoint id order.
    let (_, _, first) = node.get_json("/v1/stats/endpoints?limit=1").await;
    let cursor = first["next_cursor"].as_str().map(str::to_string).unwrap_or_else(|| panic!("{first}"));
    let (_, _, second) = node.get_json(&format!("/v1/stats/endpoints?limit=1&cursor={cursor}")).await;
    assert_eq!((second["data"].as_array().map(Vec::len), &second["next_cursor"]), (Some(1), &json!(null)), "{second}");
    assert_ne!(first["data"][0]["endpoint_id"], second["data"][0]["endpoint_id"]);
    for bad in ["limit=0", "limit=1001", "limit=x", "cursor=nope", "colour=red"] {
        let response = node.get_json(&format!("/v1/stats/endpoints?{bad}")).await;
        assert_problem(&response, StatusCode::BAD_REQUEST, bad);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_listed_by_event_type_and_time_newest_first_when_asked() {
    let receiver = ScriptedReceiver::start().await;
    let node = TestNode::start().await;
    let (endpoint, _) = register_endpoint(&node, &json!({"url": receiver.url("all")})).await;
    let mut ids = Vec::new();
    for t in ["x", "y", "x"] {
        ids.push(send_event(&node, &json!({"type": t, "payload": {}})).await.delivery_for(&endpoint));
    }
    let listed = async |query: &str| -> Vec<String> {
        let (status, _, page) = node.get_json(&format!("/v1/deliveries?{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}: {page}");
        page["data"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| d["id"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(listed("type=x").await, [ids[0].clone(), ids[2].clone()]);
    assert_eq!(listed("type=x&order=newest").await, [ids[2].clone(), ids[0].clone()]);
    assert_eq!(listed("order=newest&limit=2").await, [ids[2].clone(), ids[1].clone()]);
    assert_eq!(listed(&format!("order=newest&cursor={}", ids[1])).await, [ids[0].clone()]);
    assert!(listed("since=2999-01-01T00:00:00Z").await.is_empty());
    assert_eq!(listed("until=2999-01-01T00:00:00Z&since=2000-01-01T00:00:00Z").await.len(), 3);
    let (_, _, page) = node.get_json("/v1/deliveries?type=y").await;
    assert_eq!(page["data"][0]["event_type"], "y", "rows name their event's type: {page}");
    for bad in ["order=sideways", "since=yesterday", "until=2026-13-01T00:00:00Z"] {
        let response = node.get_json(&format!("/v1/deliveries?{bad}")).await;
        assert_problem(&response, StatusCode::BAD_REQUEST, bad);
    }
    let all_delivered = async || {
        let (_, _, page) = node.get_json("/v1/deliveries?state=delivered").await;
        page["data"].as_array().map(Vec::len) == Some(3)
    };
    eventually(DEADLINE, hookraft_tests::POLL_INTERVAL, "every delivery delivered", all_delivered).await;
}
