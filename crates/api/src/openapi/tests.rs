//! The document against the router and the problem table.

use std::collections::BTreeSet;

use serde_json::Value;

use super::*;
use crate::problem::PROBLEM_TYPES;

/// Every route a node serves. A route added with `routes!` shows up in the
/// document by itself; this list makes adding one a visible change here
/// and in docs/API.md.
const ROUTES: [(&str, &str); 49] = [
    ("get", "/"),
    ("get", "/docs"),
    ("get", "/healthz"),
    ("post", "/in/{source_id}"),
    ("post", "/internal/hello"),
    ("post", "/internal/propose"),
    ("post", "/internal/raft/append"),
    ("post", "/internal/raft/snapshot"),
    ("post", "/internal/raft/vote"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/readyz"),
    ("get", "/ui"),
    ("get", "/ui/"),
    ("get", "/ui/{file}"),
    ("get", "/v1/cluster"),
    ("post", "/v1/cluster/nodes"),
    ("delete", "/v1/cluster/nodes/{id}"),
    ("delete", "/v1/cluster/nodes/{id}/drain"),
    ("post", "/v1/cluster/nodes/{id}/drain"),
    ("get", "/v1/cluster/payloads/keys"),
    ("post", "/v1/cluster/payloads/rewrap"),
    ("post", "/v1/cluster/shards/{shard}/move"),
    ("get", "/v1/deliveries"),
    ("get", "/v1/deliveries/{id}"),
    ("post", "/v1/deliveries/{id}/replay"),
    ("get", "/v1/endpoints"),
    ("post", "/v1/endpoints"),
    ("delete", "/v1/endpoints/{id}"),
    ("get", "/v1/endpoints/{id}"),
    ("patch", "/v1/endpoints/{id}"),
    ("get", "/v1/endpoints/{id}/blocked-keys"),
    ("post", "/v1/endpoints/{id}/blocked-keys/skip"),
    ("post", "/v1/endpoints/{id}/replay"),
    ("post", "/v1/endpoints/{id}/rotate-secret"),
    ("get", "/v1/endpoints/{id}/stats"),
    ("get", "/v1/events"),
    ("post", "/v1/events"),
    ("post", "/v1/events/batch"),
    ("get", "/v1/events/{id}"),
    ("post", "/v1/events/{id}/replay"),
    ("get", "/v1/sources"),
    ("post", "/v1/sources"),
    ("delete", "/v1/sources/{id}"),
    ("get", "/v1/sources/{id}"),
    ("patch", "/v1/sources/{id}"),
    ("post", "/v1/sources/{id}/rotate-secret"),
    ("get", "/v1/stats"),
    ("get", "/v1/stats/endpoints"),
];

const METHODS: [&str; 8] = ["get", "put", "post", "patch", "delete", "head", "options", "trace"];

fn json() -> Value {
    serde_json::from_str(document_json()).expect("the document is JSON")
}

/// `(method, path, operation)` of every operation.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                out.push((method.to_string(), path.clone(), op.clone()));
            }
        }
    }
    out
}

#[test]
fn the_document_is_openapi_3_1_json() {
    let doc = json();
    let version = doc["openapi"].as_str().expect("openapi");
    assert!(version.starts_with("3.1."), "{version}");
    assert_eq!(doc["info"]["title"], "hookraft HTTP API");
    assert!(doc["info"]["version"].is_string());
    assert!(doc["paths"].as_object().is_some_and(|p| !p.is_empty()));
    // Served as built: the cached text and a fresh build agree.
    assert_eq!(serde_json::to_value(document()).expect("serializes"), doc);
}

#[test]
fn the_document_lists_every_route_the_node_serves_and_no_other() {
    let documented: BTreeSet<(String, String)> = operations(&json()).into_iter().map(|(m, p, _)| (m, p)).collect();
    let expected: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented, expected);
    // The node-to-node client calls the paths `hookraft_raft::rpc` names.
    use hookraft_raft::rpc;
    for path in
        [rpc::APPEND_PATH, rpc::VOTE_PATH, rpc::SNAPSHOT_PATH, rpc::PROPOSE_PATH, hookraft_raft::link::HELLO_PATH]
    {
        assert!(documented.contains(&("post".to_string(), path.to_string())), "{path}");
    }
}

/// `routes!` registers a handler with the router and the document at once;
/// axum's own `.route(...)` would serve a route the document never sees.
#[test]
fn no_route_is_registered_outside_the_document() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![src.join("lib.rs")];
    for dir in [src.join("routes"), src.join("openapi")] {
        for entry in std::fs::read_dir(dir).expect("source directory") {
            files.push(entry.expect("entry").path());
        }
    }
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source file");
        for needle in [".route(", ".route_service(", ".nest("] {
            let found =
                text.lines().any(|line| line.trim_start().starts_with(needle) || line.contains(&format!("){needle}")));
            assert!(!found, "{} registers a route with `{needle}`: use `.routes(routes!(...))`", file.display());
        }
    }
}

#[test]
fn every_operation_is_described_with_its_answers() {
    let doc = json();
    let mut ids = BTreeSet::new();
    for (method, path, op) in operations(&doc) {
        let at = format!("{method} {path}");
        assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()), "{at}: no summary");
        assert!(op["tags"][0].is_string(), "{at}: no tag");
        assert!(ids.insert(op["operationId"].as_str().expect("operationId").to_string()), "{at}: id taken");
        let responses = op["responses"].as_object().expect("responses");
        // A redirect (`/`, `/ui/`) succeeds with its 303.
        assert!(responses.keys().any(|s| s.starts_with('2') || s.starts_with('3')), "{at}: no success response");
        for (status, response) in responses {
            let code: u16 = status.parse().unwrap_or_else(|_| panic!("{at}: status {status}"));
            // `/readyz` answers its 503 in plain text, for load balancers.
            if code >= 400 && path != "/readyz" {
                let name = response["$ref"].as_str().and_then(|r| r.strip_prefix("#/components/responses/"));
                let name = name.unwrap_or_else(|| panic!("{at}: {status} is not a problem response"));
                let problem = &doc["components"]["responses"][name];
                assert!(problem.is_object(), "{at}: no response {name}");
                let examples =
                    problem["content"][problems::PROBLEM_CONTENT_TYPE]["examples"].as_object().expect("examples");
                for example in examples.values() {
                    assert_eq!(example["value"]["status"], code, "{at}: {name} answers {status}");
                }
            }
        }
    }
}

#[test]
fn every_problem_type_is_documented_with_its_status() {
    let doc = json();
    let schema = &doc["components"]["schemas"]["Problem"];
    let required: BTreeSet<&str> =
        schema["required"].as_array().expect("required").iter().filter_map(Value::as_str).collect();
    assert_eq!(required, BTreeSet::from(["type", "title", "status", "detail"]));
    let described = schema["properties"]["type"]["description"].as_str().expect("type's description");
    let mut in_responses = BTreeSet::new();
    for response in doc["components"]["responses"].as_object().expect("responses").values() {
        for example in
            response["content"][problems::PROBLEM_CONTENT_TYPE]["examples"].as_object().expect("examples").values()
        {
            let value = &example["value"];
            in_responses
                .insert((value["type"].as_str().expect("type").to_string(), value["status"].as_u64().expect("status")));
        }
    }
    let used: BTreeSet<String> = operations(&doc)
        .iter()
        .flat_map(|(_, _, op)| op["responses"].as_object().expect("responses").values().cloned().collect::<Vec<_>>())
        .filter_map(|r| r["$ref"].as_str().map(str::to_string))
        .collect();
    for (slug, status, _, _) in PROBLEM_TYPES {
        assert!(described.contains(&format!("`{slug}`")), "{slug} is not named in Problem.type");
        if slug == "internal" || slug == "method-not-allowed" {
            // A bug, and a method the document does not list: never an
            // answer an operation promises.
            continue;
        }
        let uri = format!("{}{slug}", crate::problem::TYPE_BASE);
        assert!(in_responses.contains(&(uri, u64::from(status))), "{slug} ({status}) is in no problem response");
    }
    for name in doc["components"]["responses"].as_object().expect("responses").keys() {
        assert!(used.contains(&format!("#/components/responses/{name}")), "no operation answers {name}");
    }
}

#[test]
fn each_route_asks_for_the_credential_of_where_it_is() {
    let doc = json();
    for (method, path, op) in operations(&doc) {
        let at = format!("{method} {path}");
        let scheme = op["security"][0].as_object().and_then(|s| s.keys().next().cloned());
        match credential_of(&path) {
            Some(expected) => {
                assert_eq!(scheme.as_deref(), Some(expected), "{at}");
                assert_eq!(op["responses"]["401"]["$ref"], "#/components/responses/Unauthorized", "{at}");
                assert!(doc["components"]["securitySchemes"][expected].is_object(), "{at}");
            }
            None => {
                assert_eq!(scheme, None, "{at} needs no credential");
                assert_ne!(op["responses"]["401"]["$ref"], "#/components/responses/Unauthorized", "{at}");
            }
        }
    }
    assert_eq!(credential_of("/v1/cluster"), Some(API_TOKEN), "the cluster's state takes the API token");
    assert_eq!(credential_of("/v1/cluster/nodes"), Some(ADMIN_TOKEN));
    assert_eq!(credential_of("/openapi.json"), None);
}

#[test]
fn a_json_body_comes_with_the_problems_of_reading_it() {
    for (method, path, op) in operations(&json()) {
        if op["requestBody"]["content"]["application/json"].is_object() {
            for status in ["400", "413", "415"] {
                assert!(op["responses"][status].is_object(), "{method} {path} lacks {status}");
            }
        }
    }
}

#[test]
fn every_reference_resolves() {
    fn walk(doc: &Value, value: &Value, at: &str) {
        match value {
            Value::Object(map) => {
                if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                    let pointer = reference.strip_prefix('#').unwrap_or_else(|| panic!("{at}: {reference}"));
                    assert!(doc.pointer(pointer).is_some(), "{at}: {reference} resolves to nothing");
                }
                for (key, inner) in map {
                    walk(doc, inner, &format!("{at}/{key}"));
                }
            }
            Value::Array(items) => items.iter().for_each(|inner| walk(doc, inner, at)),
            _ => {}
        }
    }
    let doc = json();
    walk(&doc, &doc, "");
}

#[test]
fn the_reference_page_shows_every_operation() {
    let doc = json();
    let page = page::render(&doc);
    assert!(page.starts_with("<!doctype html>"));
    for (method, path, _) in operations(&doc) {
        let shown = format!("<code>{} {}</code>", method.to_uppercase(), page::esc(&path));
        assert!(page.contains(&shown), "{shown}");
    }
    assert!(!page.contains("<script"), "the page runs no script");
}

/// Two request types of one name would share one schema, the second
/// silently describing the first's route.
#[test]
fn same_named_request_types_keep_their_own_schemas() {
    let doc = json();
    let body =
        |path: &str| doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].clone();
    assert_eq!(body("/v1/endpoints/{id}/rotate-secret"), "#/components/schemas/RotateEndpointSecret");
    assert_eq!(body("/v1/sources/{id}/rotate-secret"), "#/components/schemas/RotateSourceSecret");
    assert_eq!(doc["components"]["schemas"]["RotateSourceSecret"]["required"], serde_json::json!(["secret"]));
    assert!(doc["components"]["schemas"].get("RotateSecret").is_none());
}

/// The document names the dashboard's files as the node serves them, and
/// its redirects as redirects.
#[test]
fn the_dashboard_is_documented_as_served() {
    let doc = json();
    let files: Vec<&str> = crate::routes::ui::ASSETS.iter().map(|a| a.path).collect();
    assert_eq!(doc["components"]["schemas"]["AssetName"]["enum"], serde_json::json!(files));
    let file = &doc["paths"]["/ui/{file}"]["get"]["responses"];
    let types: BTreeSet<&str> =
        file["200"]["content"].as_object().expect("content").keys().map(String::as_str).collect();
    assert_eq!(types, BTreeSet::from(["text/javascript", "text/css", "image/svg+xml"]));
    assert!(file["304"].is_object() && file["404"].is_object());
    assert!(doc["paths"]["/ui"]["get"]["responses"]["200"]["content"]["text/html"].is_object());
    for path in ["/", "/ui/"] {
        let responses = doc["paths"][path]["get"]["responses"].as_object().expect("responses");
        assert_eq!(responses.keys().collect::<Vec<_>>(), ["303"], "{path}");
        assert!(responses["303"]["headers"]["Location"].is_object(), "{path}");
    }
}
