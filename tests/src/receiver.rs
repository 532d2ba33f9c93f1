//! [`ScriptedReceiver`]: an in-process webhook receiver with scripted replies.
//!
//! It serves `POST /hooks/{name}` on `127.0.0.1:<ephemeral port>`. Each name
//! has a script, a queue of [`Reply`]s consumed one per request, and a default
//! reply used once the script is empty (200 unless set). Scripts and defaults
//! can change while the test runs.
//!
//! It records every request (name, headers, body, arrival time) and, per
//! name, how many requests are open at once: a request counts from arrival
//! until its reply is handed to the server, or until the client gives up and
//! the handler is dropped (a guard decrements in both cases).
//!
//! State sits behind a `std::sync::Mutex` that is never held across an await.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
use tokio::task::JoinHandle;

/// One scripted answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    /// Waited before answering.
    pub delay_ms: u64,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    /// An immediate answer with `status` and no extra headers.
    pub fn status(status: u16) -> Self {
        Self { status, delay_ms: 0, headers: Vec::new() }
    }

    /// An immediate 200.
    pub fn ok() -> Self {
        Self::status(200)
    }

    pub fn delay_ms(mut self, delay_ms: u64) -> Self {
        self.delay_ms = delay_ms;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// A request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub name: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When the handler started (after the body was read).
    pub received_at: Instant,
}

impl RecordedRequest {
    /// A header as text; `None` when absent or not visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The `webhook-id` header, i.e. the event id.
    pub fn webhook_id(&self) -> Option<&str> {
        self.header("webhook-id")
    }

    /// The body parsed as JSON; panics when it is not JSON.
    pub fn body_json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|error| {
            panic!("webhook body is not JSON ({error}): {}", String::from_utf8_lossy(&self.body))
        })
    }
}

#[derive(Debug)]
struct PathState {
    script: VecDeque<Reply>,
    default: Reply,
    requests: Vec<RecordedRequest>,
    in_flight: usize,
    in_flight_max: usize,
}

impl Default for PathState {
    fn default() -> Self {
        Self { script: VecDeque::new(), default: Reply::ok(), requests: Vec::new(), in_flight: 0, in_flight_max: 0 }
    }
}

#[derive(Debug, Default)]
struct Shared {
    paths: Mutex<BTreeMap<String, PathState>>,
}

impl Shared {
    fn paths(&self) -> MutexGuard<'_, BTreeMap<String, PathState>> {
        self.paths.lock().expect("receiver state lock poisoned")
    }
}

/// Decrements a path's open-request count when the handler ends or is dropped.
struct InFlightGuard {
    shared: Arc<Shared>,
    name: String,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if let Some(path) = self.shared.paths().get_mut(&self.name) {
            path.in_flight -= 1;
        }
    }
}

/// The receiver; its server task stops when it is dropped.
pub struct ScriptedReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl ScriptedReceiver {
    /// Binds `127.0.0.1:0` and starts serving.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new().route("/hooks/{name}", post(handle)).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
        let addr = listener.local_addr().expect("read the receiver's address");
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("scripted receiver stopped: {error}");
            }
        });
        Self { addr, shared, server }
    }

    /// `http://127.0.0.1:<port>/hooks/<name>`.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/hooks/{name}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The reply for `name` once its script is used up.
    pub fn set_default(&self, name: &str, reply: Reply) {
        self.shared.paths().entry(name.to_owned()).or_default().default = reply;
    }

    /// Appends one reply to `name`'s script.
    pub fn push(&self, name: &str, reply: Reply) {
        self.shared.paths().entry(name.to_owned()).or_default().script.push_back(reply);
    }

    /// Every request to `name` so far, in arrival order.
    pub fn requests(&self, name: &str) -> Vec<RecordedRequest> {
        self.shared.paths().get(name).map(|path| path.requests.clone()).unwrap_or_default()
    }

    /// Requests to `name` whose `webhook-id` is `event_id`.
    pub fn requests_for_event(&self, name: &str, event_id: &str) -> Vec<RecordedRequest> {
        let mut requests = self.requests(name);
        requests.retain(|request| request.webhook_id() == Some(event_id));
        requests
    }

    pub fn count(&self, name: &str) -> usize {
        self.shared.paths().get(name).map_or(0, |path| path.requests.len())
    }

    /// Requests open at once on `name`, at most, so far.
    pub fn max_concurrency(&self, name: &str) -> usize {
        self.shared.paths().get(name).map_or(0, |path| path.in_flight_max)
    }

    /// The distinct `webhook-id` values seen on `name`.
    pub fn distinct_webhook_ids(&self, name: &str) -> BTreeSet<String> {
        let paths = self.shared.paths();
        let Some(path) = paths.get(name) else { return BTreeSet::new() };
        path.requests.iter().filter_map(|r| r.webhook_id()).map(str::to_owned).collect()
    }
}

impl Drop for ScriptedReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received_at = Instant::now();
    let reply = {
        let mut paths = shared.paths();
        let path = paths.entry(name.clone()).or_default();
        path.requests.push(RecordedRequest { name: name.clone(), headers, body, received_at });
        path.in_flight += 1;
        path.in_flight_max = path.in_flight_max.max(path.in_flight);
        path.script.pop_front().unwrap_or_else(|| path.default.clone())
    };
    let _guard = InFlightGuard { shared, name };
    if reply.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(reply.delay_ms)).await;
    }
    render(&reply)
}

fn render(reply: &Reply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, format!("scripted {}", reply.status)).into_response();
    for (name, value) in &reply.headers {
        let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::from_str(value)) else {
            panic!("scripted reply has an invalid header {name}: {value}");
        };
        response.headers_mut().append(name, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn post(client: &reqwest::Client, url: &str, id: &str) -> u16 {
        let response = client.post(url).header("webhook-id", id).body("{}").send().await.expect("receiver answers");
        response.status().as_u16()
    }

    #[tokio::test]
    async fn script_is_consumed_in_order_then_the_default_answers() {
        let receiver = ScriptedReceiver::start().await;
        receiver.push("p", Reply::status(503).header("Retry-After", "2"));
        receiver.push("p", Reply::status(500));
        receiver.set_default("p", Reply::status(204));
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        let url = receiver.url("p");
        let statuses = [post(&client, &url, "a").await, post(&client, &url, "b").await, post(&client, &url, "a").await];
        assert_eq!(statuses, [503, 500, 204]);
        assert_eq!(receiver.count("p"), 3);
        assert_eq!(receiver.count("other"), 0);
        assert_eq!(receiver.distinct_webhook_ids("p"), BTreeSet::from(["a".to_owned(), "b".to_owned()]));
        assert_eq!(receiver.requests_for_event("p", "a").len(), 2);
        assert_eq!(post(&client, &receiver.url("fresh"), "c").await, 200, "unknown names answer 200");
    }

    #[tokio::test]
    async fn concurrent_delayed_requests_are_counted_as_open_at_once() {
        let receiver = ScriptedReceiver::start().await;
        receiver.set_default("slow", Reply::ok().delay_ms(300));
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        let url = receiver.url("slow");
        let (a, b, c) = tokio::join!(post(&client, &url, "1"), post(&client, &url, "2"), post(&client, &url, "3"));
        assert_eq!([a, b, c], [200, 200, 200]);
        assert_eq!(receiver.max_concurrency("slow"), 3);
        post(&client, &url, "4").await;
        assert_eq!(receiver.max_concurrency("slow"), 3, "the open count went back down");
    }
}
