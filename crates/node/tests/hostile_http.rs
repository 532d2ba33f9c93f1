//! The public API fed arbitrary bodies through a real node's router (no
//! socket): events, event batches, endpoint creation and endpoint PATCH.
//! Every answer must be below 500, and every refusal an
//! `application/problem+json` document that says what is wrong.

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use hookraft_node::{Io, Node, NodeConfig, NodeHandle, Runtimes};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use tower::ServiceExt;

/// Cases per property: enough to reach the refusal paths, few enough for a
/// debug build on a shared machine.
const CASES: u32 = 256;

/// A single node on a fresh store, answering only through its router.
struct Subject {
    runtime: tokio::runtime::Runtime,
    node: Option<NodeHandle>,
    _dir: tempfile::TempDir,
}

impl Subject {
    fn start() -> Self {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let listen: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let io = Io::production(dir.path().join("data"), false, 1, None, Runtimes::default(), None).expect("io");
        let node = runtime.block_on(Node::start(NodeConfig::single(listen), io, None)).expect("node starts");
        let subject = Self { runtime, node: Some(node), _dir: dir };
        for _ in 0..600 {
            if subject.call("GET", "/readyz", None, Body::empty()).0 == StatusCode::OK {
                return subject;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the node never became ready");
    }

    /// One request; the status, the content type and the body (parsed when
    /// it is JSON, else null).
    fn call(&self, method: &str, path: &str, content_type: Option<&str>, body: Body) -> (StatusCode, String, Value) {
        let router = self.node.as_ref().expect("running").router.clone();
        self.runtime.block_on(async move {
            let mut request = Request::builder().method(method).uri(path);
            if let Some(content_type) = content_type {
                request = request.header(header::CONTENT_TYPE, content_type);
            }
            let response = router.oneshot(request.body(body).expect("request")).await.expect("infallible");
            let status = response.status();
            let content_type = response
                .headers()
                .get(header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            let bytes = axum::body::to_bytes(response.into_body(), 8 * 1024 * 1024).await.expect("body");
            (status, content_type, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
        })
    }

    /// Sends `body` as JSON and checks the answer is not a server error,
    /// and that a refusal is a problem document.
    fn check(&self, method: &str, path: &str, body: Vec<u8>) -> Result<StatusCode, TestCaseError> {
        let (status, content_type, answer) = self.call(method, path, Some("application/json"), Body::from(body));
        prop_assert!(status.as_u16() < 500, "{} {} answered {}: {}", method, path, status, answer);
        if status.is_client_error() {
            prop_assert_eq!(content_type.as_str(), "application/problem+json", "{} {}: {}", method, path, answer);
            prop_assert_eq!(answer["status"].as_u64(), Some(u64::from(status.as_u16())), "{}", answer);
            prop_assert!(answer["detail"].as_str().is_some_and(|d| !d.is_empty()), "{}", answer);
        }
        Ok(status)
    }
}

impl Drop for Subject {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            self.runtime.block_on(node.shutdown());
        }
    }
}

fn runner() -> TestRunner {
    TestRunner::new(Config { cases: CASES, failure_persistence: None, ..Config::default() })
}

/// Field names the routes read, so generated objects often hit a real field.
const FIELDS: &[&str] = &[
    "type",
    "payload",
    "idempotency_key",
    "endpoint_ids",
    "events",
    "url",
    "secret",
    "description",
    "event_types",
    "max_in_flight",
    "rate_limit_per_s",
    "timeout_ms",
    "retry",
    "attempts_max",
    "base_ms",
    "cap_ms",
    "max_age_s",
    "retry_after_max_ms",
    "disabled",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![3 => prop::sample::select(FIELDS).prop_map(String::from), 1 => ".{0,12}"]
}

/// Any JSON value, a few levels deep, with numbers at the edges of their types.
fn json_value() -> impl Strategy<Value = Value> {
    let edges = vec![0u64, 1, u64::from(u32::MAX), u64::from(u32::MAX) + 1, u64::MAX];
    let texts = vec!["https://example.com/h", "http://127.0.0.1/", "ftp://x", "http://[::1]/", "whsec_AAAA", ""];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(edges).prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,64}".prop_map(Value::from),
        prop::sample::select(texts).prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A valid body with one field replaced by anything, or removed.
fn near(valid: Value) -> impl Strategy<Value = Value> {
    (prop::sample::select(FIELDS), prop::option::of(json_value())).prop_map(move |(field, value)| {
        let mut body = valid.clone();
        match value {
            Some(value) => body[field] = value,
            None => drop(body.as_object_mut().expect("an object").remove(field)),
        }
        body
    })
}

/// Bytes: arbitrary, JSON of any shape, near-valid JSON, or valid JSON cut
/// short or with a byte changed.
fn body(valid: Value) -> impl Strategy<Value = Vec<u8>> {
    let text = prop_oneof![json_value(), near(valid.clone())].prop_map(|v| v.to_string().into_bytes());
    let damaged = (Just(valid.to_string().into_bytes()), any::<prop::sample::Index>(), any::<u8>(), any::<bool>())
        .prop_map(|(mut bytes, at, byte, cut)| {
            let i = at.index(bytes.len());
            if cut {
                bytes.truncate(i);
            } else {
                bytes[i] = byte;
            }
            bytes
        });
    prop_oneof![2 => prop::collection::vec(any::<u8>(), 0..512), 4 => text, 2 => damaged]
}

#[test]
fn event_and_batch_bodies_of_any_shape_get_a_4xx_problem_or_are_accepted() {
    let subject = Subject::start();
    // A single event's idempotency key travels in a header; a batch item's in the body.
    let event = json!({"type": "order.created", "payload": {"order": 1}});
    let status = subject.check("POST", "/v1/events", event.to_string().into_bytes()).expect("valid event");
    assert_eq!(status, StatusCode::ACCEPTED);
    runner()
        .run(&body(event), |bytes| {
            subject.check("POST", "/v1/events", bytes)?;
            Ok(())
        })
        .expect("events");
    let batch =
        json!({"events": [{"type": "a", "payload": {}}, {"type": "b", "payload": [1], "idempotency_key": "b"}]});
    runner()
        .run(&body(batch), |bytes| {
            subject.check("POST", "/v1/events/batch", bytes)?;
            Ok(())
        })
        .expect("batches");
}

#[test]
fn endpoint_bodies_of_any_shape_get_a_4xx_problem_or_are_accepted() {
    let subject = Subject::start();
    let valid = json!({
        "url": "https://example.com/hooks",
        "event_types": ["never.sent"],
        "retry": {"attempts_max": 3, "base_ms": 1000, "cap_ms": 60000, "max_age_s": 3600, "retry_after_max_ms": 60000},
    });
    let created = subject.call("POST", "/v1/endpoints", Some("application/json"), Body::from(valid.to_string()));
    assert_eq!(created.0, StatusCode::CREATED, "{}", created.2);
    assert_eq!(created.2["retry"]["retry_after_max_ms"], 60000, "{}", created.2);
    let id = created.2["id"].as_str().expect("an id").to_string();
    runner()
        .run(&body(valid.clone()), |bytes| {
            subject.check("POST", "/v1/endpoints", bytes)?;
            Ok(())
        })
        .expect("creations");
    let patch = json!({"description": "d", "max_in_flight": 2, "retry": {"retry_after_max_ms": 0}});
    let path = format!("/v1/endpoints/{id}");
    runner()
        .run(&body(patch), |bytes| {
            subject.check("PATCH", &path, bytes)?;
            Ok(())
        })
        .expect("patches");
    // Whatever the patches did, the endpoint still reads back.
    let (status, _, endpoint) = subject.call("GET", &path, None, Body::empty());
    assert_eq!(status, StatusCode::OK, "{endpoint}");
}

#[test]
fn a_retry_after_max_ms_out_of_range_is_a_422_that_names_the_field() {
    let subject = Subject::start();
    let body = json!({"url": "https://example.com/h", "retry": {"retry_after_max_ms": 604_800_001u64}});
    let (status, _, problem) =
        subject.call("POST", "/v1/endpoints", Some("application/json"), Body::from(body.to_string()));
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["detail"], "retry.retry_after_max_ms must be between 0 and 604800000 (7 days)");
}
