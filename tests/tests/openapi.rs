//! The OpenAPI document and the reference page, from a running node: served
//! without a token while `/v1` still needs one, and every route they list
//! is one the node serves.

use hookraft_tests::{NodeOptions, StatusCode, TestNode, assert_problem};
use reqwest::Method;
use serde_json::json;

const TOKEN: &str = "openapi-test-token-1c4d";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_and_the_reference_page_need_no_token_and_v1_still_does() {
    let node = TestNode::start_with(NodeOptions::default().api_token(TOKEN)).await;

    let (status, headers, doc) = node.send(node.client().get(node.url("/openapi.json"))).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(headers["content-type"], "application/json");
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1.")), "{}", doc["openapi"]);
    assert!(doc["paths"]["/v1/endpoints"]["post"].is_object());

    let (status, headers, page) = node.send(node.client().get(node.url("/docs"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let policy = headers["content-security-policy"].to_str().expect("ascii");
    assert!(policy.starts_with("default-src 'none'"), "{policy}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let page = page.as_str().expect("the page is text");
    assert!(page.contains("<code>POST /v1/endpoints</code>") && page.contains("/openapi.json"), "{page}");
    assert!(!page.contains("<script"), "the page runs no script");

    assert_problem(
        &node.send(node.client().get(node.url("/v1/endpoints"))).await,
        StatusCode::UNAUTHORIZED,
        "GET /v1/endpoints without the token",
    );
    let (status, _, body) = node.get_json("/v1/endpoints").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Each documented operation, called with placeholder path parameters and a
/// body the node refuses (so nothing changes), reaches a handler: no
/// fallback 404 (`no such route`) and no 405. Redirects are not followed:
/// a redirect's own status is what the document lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_is_served() {
    let node = TestNode::start_with(NodeOptions::default().api_token(TOKEN)).await;
    let (_, _, doc) = node.send(node.client().get(node.url("/openapi.json"))).await;
    let paths = doc["paths"].as_object().expect("paths");
    let client =
        reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build().expect("a client");
    let mut called = 0;
    for (path, item) in paths {
        let concrete = placeholders(path);
        for (method, operation) in item.as_object().expect("path item") {
            let method: Method = method.to_uppercase().parse().expect("a method");
            let mut request = client.request(method.clone(), node.url(&concrete)).bearer_auth(TOKEN);
            if operation["requestBody"]["content"]["application/json"].is_object() {
                // An unknown field: every JSON body of the API refuses it.
                request = request.json(&json!({"probe_refused_field": true}));
            }
            let (status, _, body) = node.send(request).await;
            let at = format!("{method} {concrete}");
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{at}: {body}");
            let detail = body["detail"].as_str().unwrap_or_default();
            assert!(!detail.starts_with("no such route"), "{at}: {body}");
            let documented = operation["responses"].as_object().expect("responses");
            assert!(documented.contains_key(status.as_str()), "{at} answered {status}, not in the document: {body}");
            called += 1;
        }
    }
    assert!(called >= 48, "{called} operations called");
}

/// `path` with each `{parameter}` replaced by a value that names nothing.
fn placeholders(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
        out.push_str(if &rest[open..close] == "{shard}" { "999" } else { "nothing-here" });
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[test]
fn placeholders_replace_every_parameter() {
    assert_eq!(placeholders("/v1/endpoints/{id}/replay"), "/v1/endpoints/nothing-here/replay");
    assert_eq!(placeholders("/v1/cluster/shards/{shard}/move"), "/v1/cluster/shards/999/move");
    assert_eq!(placeholders("/healthz"), "/healthz");
}
