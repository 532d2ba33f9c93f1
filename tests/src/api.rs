//! Helpers over the HTTP API of `docs/API.md`.
//!
//! They assert the status the API promises for the happy path, so a test
//! reads as the scenario it checks. Anything about error paths is asserted in
//! the tests themselves (with [`assert_problem`]).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hookraft_core::signing::{Secret, VerifyError, verify};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::node::{JsonResponse, TestNode};
use crate::poll::{POLL_INTERVAL, wait_for};
use crate::receiver::RecordedRequest;

/// Most pages [`list_deliveries`] follows: a bound, not an expectation.
const LIST_PAGES_MAX: usize = 1_000;

/// A fast retry policy: 3 attempts, 50 ms base, 200 ms cap.
pub fn fast_retry() -> Value {
    json!({"attempts_max": 3, "base_ms": 50, "cap_ms": 200, "max_age_s": 3600})
}

/// `POST /v1/endpoints`; asserts 201 and returns `(id, secret)`.
pub async fn register_endpoint(node: &TestNode, body: &Value) -> (String, String) {
    let (status, _, created) = node.post_json("/v1/endpoints", body).await;
    assert_eq!(status, StatusCode::CREATED, "registering {body} answered {created}");
    let id = str_field(&created, "id");
    let secret = str_field(&created, "secret");
    assert!(id.starts_with("ep_"), "endpoint id {id} lacks the ep_ prefix");
    assert!(secret.starts_with("whsec_"), "secret {secret} lacks the whsec_ prefix");
    (id, secret)
}

/// The `202` answer to `POST /v1/events`.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub event_id: String,
    /// `(delivery id, endpoint id)` in the order answered.
    pub deliveries: Vec<(String, String)>,
    pub body: Value,
}

impl Accepted {
    /// Reads an event answer (`202` or an idempotent `200`).
    pub fn from_body(body: &Value) -> Self {
        let event_id = str_field(body, "id");
        assert!(event_id.starts_with("evt_"), "event id {event_id} lacks the evt_ prefix");
        let deliveries = body["deliveries"]
            .as_array()
            .unwrap_or_else(|| panic!("event answer without a deliveries array: {body}"))
            .iter()
            .map(|d| (str_field(d, "id"), str_field(d, "endpoint_id")))
            .collect();
        Self { event_id, deliveries, body: body.clone() }
    }

    pub fn delivery_ids(&self) -> Vec<String> {
        self.deliveries.iter().map(|(id, _)| id.clone()).collect()
    }

    pub fn endpoint_ids(&self) -> BTreeSet<String> {
        self.deliveries.iter().map(|(_, endpoint)| endpoint.clone()).collect()
    }

    /// The delivery to `endpoint_id`; panics when the event has none.
    pub fn delivery_for(&self, endpoint_id: &str) -> String {
        self.deliveries
            .iter()
            .find(|(_, endpoint)| endpoint == endpoint_id)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("event {} has no delivery to {endpoint_id}: {}", self.event_id, self.body))
    }
}

/// `POST /v1/events` with `body`; asserts 202.
pub async fn send_event(node: &TestNode, body: &Value) -> Accepted {
    let (status, _, answer) = node.post_json("/v1/events", body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "sending {body} answered {answer}");
    Accepted::from_body(&answer)
}

/// `GET /v1/deliveries/{id}`; asserts 200.
pub async fn get_delivery(node: &TestNode, id: &str) -> Value {
    let (status, _, delivery) = node.get_json(&format!("/v1/deliveries/{id}")).await;
    assert_eq!(status, StatusCode::OK, "reading delivery {id} answered {delivery}");
    delivery
}

/// Polls the delivery until its `state` is `state` and returns it. Fails at
/// once when it reaches the other terminal state (`delivered` vs `dead`).
pub async fn wait_delivery_state(node: &TestNode, id: &str, state: &str, deadline: Duration) -> Value {
    let what = format!("delivery {id} to be {state}");
    wait_for(deadline, POLL_INTERVAL, &what, async || {
        let delivery = get_delivery(node, id).await;
        let current = delivery["state"].as_str().unwrap_or("<none>");
        if current == state {
            return Ok(delivery);
        }
        let terminal = ["delivered", "dead"];
        if terminal.contains(&state) && terminal.contains(&current) {
            panic!("delivery {id} ended {current} while waiting for {state}: {delivery:#}");
        }
        Err(format!("{delivery:#}"))
    })
    .await
}

/// `GET /v1/deliveries?<query>` following `next_cursor` to the end.
/// `query` is e.g. `state=dead&endpoint_id=ep_...` (no `cursor`, no `limit`).
pub async fn list_deliveries(node: &TestNode, query: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..LIST_PAGES_MAX {
        let mut path = if query.is_empty() {
            "/v1/deliveries?limit=1000".to_owned()
        } else {
            format!("/v1/deliveries?{query}&limit=1000")
        };
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, _, page) = node.get_json(&path).await;
        assert_eq!(status, StatusCode::OK, "GET {path} answered {page}");
        let data = page["data"].as_array().unwrap_or_else(|| panic!("GET {path}: no data array in {page}"));
        all.extend(data.iter().cloned());
        match page["next_cursor"].as_str().filter(|next| !next.is_empty()) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return all,
        }
    }
    panic!("GET /v1/deliveries?{query} still had a next_cursor after {LIST_PAGES_MAX} pages")
}

/// The `kind` of each timeline entry, in order.
pub fn timeline_kinds(delivery: &Value) -> Vec<String> {
    timeline(delivery).iter().map(|entry| entry["kind"].as_str().unwrap_or("<no kind>").to_owned()).collect()
}

/// The timeline entries of kind `attempt`, in order.
pub fn attempts(delivery: &Value) -> Vec<Value> {
    entries_of_kind(delivery, "attempt")
}

/// The timeline entries of one kind, in order.
pub fn entries_of_kind(delivery: &Value, kind: &str) -> Vec<Value> {
    timeline(delivery).iter().filter(|entry| entry["kind"] == kind).cloned().collect()
}

fn timeline(delivery: &Value) -> &Vec<Value> {
    delivery["timeline"].as_array().unwrap_or_else(|| panic!("delivery without a timeline array: {delivery:#}"))
}

/// Asserts an RFC 9457 problem: the status, the content type
/// `application/problem+json`, a body with the same `status` and a
/// non-empty `detail`.
pub fn assert_problem(response: &JsonResponse, status: StatusCode, context: &str) {
    let (actual, _, body) = response;
    assert_eq!(*actual, status, "{context}: expected {status}, got {actual} with {body}");
    assert_problem_shape(response, context);
}

/// Like [`assert_problem`] for any 4xx status.
pub fn assert_client_problem(response: &JsonResponse, context: &str) {
    let (actual, _, body) = response;
    assert!(actual.is_client_error(), "{context}: expected a 4xx, got {actual} with {body}");
    assert_problem_shape(response, context);
}

/// The problem document's shape, whatever the status.
fn assert_problem_shape(response: &JsonResponse, context: &str) {
    let (actual, headers, body) = response;
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(
        content_type.starts_with("application/problem+json"),
        "{context}: content-type is {content_type:?}, expected application/problem+json"
    );
    assert_eq!(body["status"].as_u64(), Some(u64::from(actual.as_u16())), "{context}: problem status in {body}");
    let detail = body["detail"].as_str().unwrap_or("");
    assert!(!detail.is_empty(), "{context}: problem without a detail: {body}");
}

/// Checks a received webhook's signature against `secrets` (whsec_ text) at
/// the current time, with the headers the API names.
pub fn verify_request(request: &RecordedRequest, secrets: &[&str]) -> Result<(), VerifyError> {
    let parsed: Vec<Secret> =
        secrets.iter().map(|s| Secret::parse(s).unwrap_or_else(|e| panic!("secret {s} is invalid: {e}"))).collect();
    let refs: Vec<&Secret> = parsed.iter().collect();
    let header = |name: &str| request.header(name).unwrap_or_else(|| panic!("webhook request lacks {name}"));
    verify(
        &refs,
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
        &request.body,
        unix_now_s(),
    )
}

/// Seconds since the Unix epoch, from the system clock.
pub fn unix_now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is after 1970").as_secs()
}

/// A string field; panics with the whole value when missing.
pub fn str_field(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap_or_else(|| panic!("no string `{field}` in {value}")).to_owned()
}
