//! The load generator: `connections` keep-alive clients post events as fast
//! as the nodes accept them, spread round robin over the nodes, and record
//! each accepted event's id and ingest latency. With `per_request` above 1
//! each request is a `POST /v1/events/batch` of that many events, and every
//! event of it gets the request's latency.
//!
//! With a `rate` the load is open: event `i` is due `i / rate` seconds after
//! the start, and a request is sent when its first event is due (or when a
//! connection is free, if later). Its latency then counts from when it was
//! due, not from when it was sent, so a node that falls behind shows it in
//! the latency instead of silently slowing the generator down (the closed
//! loop's "coordinated omission"); so does the end-to-end latency, whose
//! payload carries the time the event was due.
//!
//! Each connection is a plain keep-alive HTTP/1.1 client over `httparse`
//! ([`Connection`]) rather than reqwest: the generator stands in for
//! producers on other machines, and whatever it spends of the cores it
//! shares with the node is taken from the figures.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::http1::{self, Unframed, Unread};

/// Per-request timeout of the ingest clients.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Failed requests printed at most, per connection.
const FAILURES_PRINTED_MAX: usize = 3;

/// What to post.
pub struct Load {
    /// `http://host:port/v1/events` of every node.
    pub urls: Vec<String>,
    pub events: usize,
    pub connections: usize,
    /// Events per request: 1 posts to `/v1/events`, more to `/v1/events/batch`.
    pub per_request: usize,
    /// Bytes of each payload (at least the `{"t":…}` prefix).
    pub payload_bytes: usize,
    /// The event type of event `i`.
    pub event_type: fn(usize) -> String,
    /// The ordering key of event `i`, when events carry one.
    pub ordering_key: Option<fn(usize) -> String>,
    /// When the run started: payloads carry their send time relative to it.
    pub origin: Instant,
    /// Events per second offered, spread evenly; `None` posts as fast as
    /// the nodes accept.
    pub rate: Option<f64>,
}

/// When event `first` is due, after the load's start, at `rate` events/s.
pub fn due_after(first: usize, rate: f64) -> Duration {
    Duration::from_secs_f64(first as f64 / rate)
}

/// One accepted event.
pub struct Accepted {
    /// Which event of the run (0..events).
    pub index: usize,
    pub event_id: String,
    pub latency: Duration,
    /// When it was due (sent, for a closed load), since the origin.
    pub due: Duration,
}

/// Live counters, read by the progress line.
#[derive(Default)]
pub struct Progress {
    pub accepted: AtomicU64,
    pub failed: AtomicU64,
    /// Requests refused by a full budget (503 `ingest-budget-full`), the
    /// first and last of them (ns since the origin, 0 before the first).
    pub refused_requests: AtomicU64,
    pub first_refusal_ns: AtomicU64,
    pub last_refusal_ns: AtomicU64,
    /// Latencies (µs) of the requests answered since the progress line last
    /// took them: where in a run the slow ones fell.
    pub recent_latencies_us: std::sync::Mutex<Vec<u64>>,
}

impl Progress {
    /// Counts a request a full budget refused, and when.
    pub fn refused(&self, origin: Instant) {
        let at_ns = u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let _ = self.first_refusal_ns.compare_exchange(0, at_ns, Ordering::Relaxed, Ordering::Relaxed);
        self.last_refusal_ns.fetch_max(at_ns, Ordering::Relaxed);
        self.refused_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes one answered request's latency for the progress line.
    pub fn answered(&self, latency: Duration) {
        let mut recent = self.recent_latencies_us.lock().unwrap_or_else(|e| e.into_inner());
        recent.push(crate::report::micros(latency));
    }

    /// Takes the latencies recorded since the last call, sorted.
    pub fn take_recent_latencies(&self) -> Vec<u64> {
        let mut taken = std::mem::take(&mut *self.recent_latencies_us.lock().unwrap_or_else(|e| e.into_inner()));
        taken.sort_unstable();
        taken
    }
}

#[derive(Deserialize)]
struct AcceptedBody {
    id: String,
}

#[derive(Deserialize)]
struct BatchBody {
    events: Vec<BatchResult>,
}

#[derive(Deserialize)]
struct BatchResult {
    status: u16,
    id: Option<String>,
}

/// The event ids of a 202 answer, in the order the events were sent.
fn accepted_ids(body: &[u8], batch: bool, count: usize) -> Result<Vec<String>, String> {
    if !batch {
        let body: AcceptedBody = serde_json::from_slice(body).map_err(|e| format!("unreadable 202 body: {e}"))?;
        return Ok(vec![body.id]);
    }
    let body: BatchBody = serde_json::from_slice(body).map_err(|e| format!("unreadable 202 body: {e}"))?;
    if body.events.len() != count {
        return Err(format!("{} results for {count} events", body.events.len()));
    }
    body.events
        .into_iter()
        .map(|r| match (r.status, r.id) {
            (202, Some(id)) => Ok(id),
            (status, _) => Err(format!("an event of the batch answered {status}")),
        })
        .collect()
}

/// Posts every event; returns the accepted ones and the number of requests
/// that failed or were not answered 202.
pub async fn run(load: Arc<Load>, progress: Arc<Progress>) -> Result<(Vec<Accepted>, u64)> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(load.connections);
    for connection in 0..load.connections {
        let batch = load.per_request > 1;
        let url = &load.urls[connection % load.urls.len()];
        let url = if batch { format!("{url}/batch") } else { url.clone() };
        let client = Connection::to(&url).with_context(|| format!("cannot post to {url}"))?;
        let (load, next, progress) = (load.clone(), next.clone(), progress.clone());
        tasks.push(tokio::spawn(async move { connection_loop(client, &load, start, &next, &progress).await }));
    }
    let mut accepted = Vec::with_capacity(load.events);
    let mut failures = 0;
    for task in tasks {
        let (mut part, failed) = task.await.context("an ingest task panicked")?;
        accepted.append(&mut part);
        failures += failed;
    }
    accepted.sort_unstable_by_key(|a| a.index);
    Ok((accepted, failures))
}

async fn connection_loop(
    mut client: Connection,
    load: &Load,
    start: tokio::time::Instant,
    next: &AtomicUsize,
    progress: &Progress,
) -> (Vec<Accepted>, u64) {
    let batch = load.per_request > 1;
    let mut accepted = Vec::with_capacity(load.events / load.connections + 1);
    let mut failures = 0u64;
    loop {
        let first = next.fetch_add(load.per_request, Ordering::Relaxed);
        if first >= load.events {
            return (accepted, failures);
        }
        let indexes = first..(first + load.per_request).min(load.events);
        let due = match load.rate {
            Some(rate) => {
                let due = start + due_after(first, rate);
                tokio::time::sleep_until(due).await;
                due.into_std()
            }
            None => Instant::now(),
        };
        // Of an open load, when it was due: end-to-end latency then counts
        // from there too, like the ingest latency.
        let sent_ns = u64::try_from(due.saturating_duration_since(load.origin).as_nanos()).unwrap_or(u64::MAX);
        let bodies = indexes.clone().map(|i| {
            let key = load.ordering_key.map(|key| key(i));
            event_body(&(load.event_type)(i), key.as_deref(), sent_ns, load.payload_bytes)
        });
        let body =
            if batch { format!("{{\"events\":[{}]}}", bodies.collect::<Vec<_>>().join(",")) } else { bodies.collect() };
        let why = match client.post(body.as_bytes()).await {
            Ok((202, answer)) => match accepted_ids(&answer, batch, indexes.len()) {
                Ok(ids) => {
                    let latency = due.elapsed();
                    progress.accepted.fetch_add(ids.len() as u64, Ordering::Relaxed);
                    progress.answered(latency);
                    let due = due.saturating_duration_since(load.origin);
                    accepted.extend(indexes.zip(ids).map(|(index, event_id)| Accepted {
                        index,
                        event_id,
                        latency,
                        due,
                    }));
                    continue;
                }
                Err(why) => why,
            },
            Ok((503, answer)) if is_budget_refusal(&answer) => {
                progress.refused(load.origin);
                // Counted, not printed: at a budget's cap most requests are.
                failures += indexes.len() as u64;
                progress.failed.fetch_add(indexes.len() as u64, Ordering::Relaxed);
                continue;
            }
            Ok((status, answer)) => format!("{status} {}", String::from_utf8_lossy(&answer)),
            Err(error) => error,
        };
        failures += indexes.len() as u64;
        progress.failed.fetch_add(indexes.len() as u64, Ordering::Relaxed);
        if failures as usize <= FAILURES_PRINTED_MAX * load.per_request {
            eprintln!("events {indexes:?} not accepted: {why}");
        }
    }
}

/// Whether a 503's body is the problem of a full ingest budget.
pub fn is_budget_refusal(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Problem {
        r#type: String,
    }
    serde_json::from_slice::<Problem>(body).is_ok_and(|p| p.r#type.ends_with("/ingest-budget-full"))
}

/// Response headers read at most; hookraft answers with a handful.
const ANSWER_HEADERS_MAX: usize = 32;
/// The largest answer head and body the generator reads.
const ANSWER_HEAD_BYTES_MAX: usize = 16 * 1024;
const ANSWER_BODY_BYTES_MAX: usize = 16 << 20;

/// A keep-alive HTTP/1.1 connection posting JSON to one URL, opened on
/// first use and again after any failure or a `connection: close`.
pub struct Connection {
    /// `host:port`.
    addr: String,
    /// Path (and query) of every request.
    path: String,
    stream: Option<TcpStream>,
    /// Bytes read and not yet used.
    buf: Vec<u8>,
}

impl Connection {
    /// A connection to a plain `http://host:port/path` URL.
    pub fn to(url: &str) -> Result<Self> {
        let rest = url.strip_prefix("http://").context("only http:// URLs")?;
        let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        anyhow::ensure!(!addr.is_empty(), "no host in {url}");
        let path = if path.is_empty() { "/" } else { path };
        Ok(Self { addr: addr.to_owned(), path: path.to_owned(), stream: None, buf: Vec::with_capacity(8 * 1024) })
    }

    /// Posts `body` as JSON; returns the answer's status and body, or why
    /// there was none within [`REQUEST_TIMEOUT`] (the connection is then
    /// dropped, and the next post opens a new one).
    pub async fn post(&mut self, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
        self.post_with(body, "").await
    }

    /// Posts `body` as JSON with `headers` (whole `name: value\r\n` lines)
    /// beside the usual ones, as [`Connection::post`] does.
    pub async fn post_with(&mut self, body: &[u8], headers: &str) -> Result<(u16, Vec<u8>), String> {
        let exchanged = tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(body, headers)).await;
        let answered = exchanged.unwrap_or_else(|_| Err(format!("no answer within {} s", REQUEST_TIMEOUT.as_secs())));
        if answered.is_err() {
            // The stream went with the failed exchange; so do its bytes.
            self.buf.clear();
        }
        answered
    }

    /// One request and its answer. The stream is taken for the exchange and
    /// put back only when it ends well and the node keeps it open.
    async fn exchange(&mut self, body: &[u8], headers: &str) -> Result<(u16, Vec<u8>), String> {
        let mut stream = match self.stream.take() {
            Some(stream) => stream,
            None => {
                let stream = TcpStream::connect(&self.addr).await.map_err(|e| format!("connect {}: {e}", self.addr))?;
                let _ = stream.set_nodelay(true);
                stream
            }
        };
        let request = request_bytes(&self.path, &self.addr, headers, body);
        stream.write_all(&request).await.map_err(|e| format!("send: {e}"))?;
        let head =
            http1::read_message(&mut stream, &mut self.buf, parse_answer).await.map_err(|unread| match unread {
                Unread::Refused(why) => why,
                Unread::Closed => "the node closed the connection before answering".into(),
                Unread::Failed(e) => format!("receive: {e}"),
            })?;
        let end = head.len + head.body_len;
        let answer = self.buf[head.len..end].to_vec();
        self.buf.drain(..end);
        if !head.close {
            self.stream = Some(stream);
        }
        Ok((head.status, answer))
    }
}

/// The `authorization` line every request of this process carries, once
/// [`authorize_all`] set it: for deployments whose nodes have a token.
static AUTHORIZATION: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();

/// Sends `token` as the bearer token of every request from now on.
pub fn authorize_all(token: &str) {
    let _ = AUTHORIZATION.set((token.to_owned(), format!("authorization: Bearer {token}\r\n")));
}

/// The token [`authorize_all`] set, for the requests made with reqwest.
pub fn bearer_token() -> Option<&'static str> {
    AUTHORIZATION.get().map(|(token, _)| token.as_str())
}

/// A JSON `POST` of `body` to `path` at `addr`, with `headers` (whole
/// `name: value\r\n` lines) after the usual ones.
fn request_bytes(path: &str, addr: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut request = Vec::with_capacity(160 + headers.len() + body.len());
    let authorization = AUTHORIZATION.get().map_or("", |(_, line)| line.as_str());
    // Writing into a Vec cannot fail.
    let _ = write!(
        request,
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{authorization}{headers}\r\n",
        body.len()
    );
    request.extend_from_slice(body);
    request
}

/// A complete answer head.
#[derive(Debug, PartialEq, Eq)]
struct AnswerHead {
    /// Bytes of the head; the body follows.
    len: usize,
    status: u16,
    body_len: usize,
    /// The node will close the connection after this answer.
    close: bool,
}

impl http1::Head for AnswerHead {
    fn message_len(&self) -> usize {
        self.len + self.body_len
    }
}

/// Reads an answer head: `None` while incomplete, an error for what this
/// client does not read (a chunked or unsized body, an oversized head).
fn parse_answer(bytes: &[u8]) -> Result<Option<AnswerHead>, String> {
    let mut headers = [httparse::EMPTY_HEADER; ANSWER_HEADERS_MAX];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() > ANSWER_HEAD_BYTES_MAX => {
            return Err("an answer head over 16 KiB".into());
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("an answer that is not HTTP/1.1: {e}")),
    };
    let status = response.code.ok_or("an answer without a status")?;
    let framing = http1::framing(response.headers).map_err(|unframed| match unframed {
        Unframed::Chunked => "a chunked answer (this client reads sized bodies only)".to_owned(),
        Unframed::BadLength => "an unreadable content-length".to_owned(),
    })?;
    if status < 200 {
        // Never asked for (no `expect: 100-continue` is sent).
        return Err(format!("an interim {status} answer"));
    }
    // A status without a body may leave the length out.
    let body_len = match framing.body_len {
        Some(n) if n > ANSWER_BODY_BYTES_MAX => return Err(format!("an answer body of {n} bytes")),
        Some(n) => n,
        None if status == 204 || status == 304 => 0,
        None => return Err(format!("a {status} answer without a content-length")),
    };
    Ok(Some(AnswerHead { len, status, body_len, close: framing.close }))
}

/// `{"type":…,"payload":{"t":<sent_ns>,"pad":"xxx…"}}` whose payload is
/// `payload_bytes` long (or just the prefix when that is longer), with
/// `"ordering_key":…` after the type when given.
pub fn event_body(event_type: &str, ordering_key: Option<&str>, sent_ns: u64, payload_bytes: usize) -> String {
    let head = format!("{{\"t\":{sent_ns},\"pad\":\"");
    let pad = payload_bytes.saturating_sub(head.len() + 2);
    let key = ordering_key.map(|key| format!(",\"ordering_key\":\"{key}\"")).unwrap_or_default();
    format!("{{\"type\":\"{event_type}\"{key},\"payload\":{head}{}\"}}}}", "x".repeat(pad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_budget_problem_is_a_budget_refusal() {
        let full = br#"{"type":"https://hookraft.dev/problems/ingest-budget-full","title":"Ingest budget full","status":503,"detail":"..."}"#;
        assert!(is_budget_refusal(full));
        let no_leader = br#"{"type":"https://hookraft.dev/problems/unavailable","status":503,"detail":"no leader"}"#;
        assert!(!is_budget_refusal(no_leader));
        assert!(!is_budget_refusal(b"not json"));
    }

    #[test]
    fn event_body_is_json_with_a_payload_of_the_asked_size() {
        let body = event_body("bench.3", None, 123_456_789, 200);
        let value: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(value["type"], "bench.3");
        assert_eq!(value["payload"]["t"], 123_456_789);
        assert_eq!(serde_json::to_string(&value["payload"]).expect("encodes").len(), 200);
        assert!(value.get("ordering_key").is_none());
        let keyed: serde_json::Value =
            serde_json::from_str(&event_body("bench.3", Some("key-7"), 1, 200)).expect("json");
        assert_eq!(
            (&keyed["ordering_key"], &keyed["payload"]["t"]),
            (&serde_json::json!("key-7"), &serde_json::json!(1))
        );
        assert_eq!(serde_json::to_string(&keyed["payload"]).expect("encodes").len(), 200);
    }

    #[test]
    fn a_request_carries_its_extra_headers_before_its_sized_body() {
        let bytes = request_bytes("/in/src_1", "127.0.0.1:9", "stripe-signature: t=1,v1=ab\r\n", b"{\"t\":1}");
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut request = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(len)) = request.parse(&bytes) else { panic!("a whole head") };
        assert_eq!((request.method, request.path), (Some("POST"), Some("/in/src_1")));
        let value = |name: &str| request.headers.iter().find(|h| h.name == name).map(|h| h.value.to_vec());
        assert_eq!(value("stripe-signature"), Some(b"t=1,v1=ab".to_vec()));
        assert_eq!(value("content-length"), Some(b"7".to_vec()));
        assert_eq!(&bytes[len..], b"{\"t\":1}");
        let plain = request_bytes("/v1/events", "h:1", "", b"{}");
        assert!(plain.ends_with(b"content-length: 2\r\n\r\n{}"), "{}", String::from_utf8_lossy(&plain));
    }

    #[test]
    fn an_open_load_spaces_events_evenly_from_its_start() {
        assert_eq!(due_after(0, 30_000.0), Duration::ZERO);
        assert_eq!(due_after(30_000, 30_000.0), Duration::from_secs(1));
        assert_eq!(due_after(10, 1_000.0), Duration::from_millis(10));
        assert!(due_after(3, 30_000.0) < due_after(4, 30_000.0));
    }

    #[test]
    fn answer_heads_give_status_length_and_close_or_say_what_is_not_read() {
        let ok =
            b"HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"id\":\"e1\"}";
        let head = parse_answer(ok).expect("readable").expect("complete");
        assert_eq!(head, AnswerHead { len: ok.len() - 11, status: 202, body_len: 11, close: false });
        let closing =
            parse_answer(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\ncontent-length: 0\r\n\r\n");
        assert_eq!(closing.expect("readable").map(|h| (h.status, h.close)), Some((503, true)));
        assert_eq!(parse_answer(b"HTTP/1.1 204 No Content\r\n\r\n").expect("readable").map(|h| h.body_len), Some(0));
        assert_eq!(parse_answer(b"HTTP/1.1 202 Acc"), Ok(None));
        for bad in [
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\n",
            b"SMTP ready\r\n\r\n",
        ] {
            assert!(parse_answer(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(Connection::to("https://x/v1").is_err() && Connection::to("http:///v1").is_err());
        let c = Connection::to("http://127.0.0.1:9/v1/events/batch").expect("a plain URL");
        assert_eq!((c.addr.as_str(), c.path.as_str()), ("127.0.0.1:9", "/v1/events/batch"));
    }

    /// A request the stand-in node read: its head's length, body length and
    /// whether it asked to close.
    struct EchoRequest {
        len: usize,
        body_len: usize,
        close: bool,
    }

    impl http1::Head for EchoRequest {
        fn message_len(&self) -> usize {
            self.len + self.body_len
        }
    }

    fn parse_echo(bytes: &[u8]) -> Result<Option<EchoRequest>, ()> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut request = httparse::Request::new(&mut headers);
        let Ok(httparse::Status::Complete(len)) = request.parse(bytes) else { return Ok(None) };
        let body_len = http1::framing(request.headers).ok().and_then(|f| f.body_len).expect("a length");
        Ok(Some(EchoRequest { len, body_len, close: request.path == Some("/close") }))
    }

    /// A node stand-in: answers every request 202 with its body echoed as
    /// `{"id":…}`, and closes after a request to `/close`; counts connections.
    async fn echo_server() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    while let Ok(request) = http1::read_message(&mut stream, &mut buf, parse_echo).await {
                        let end = request.len + request.body_len;
                        let answer = format!("{{\"id\":\"{}\"}}", String::from_utf8_lossy(&buf[request.len..end]));
                        buf.drain(..end);
                        let connection = if request.close { "connection: close\r\n" } else { "" };
                        let head =
                            format!("HTTP/1.1 202 Accepted\r\n{connection}content-length: {}\r\n\r\n", answer.len());
                        if stream.write_all(format!("{head}{answer}").as_bytes()).await.is_err() || request.close {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    #[tokio::test]
    async fn a_connection_is_kept_alive_and_opened_again_after_a_close() {
        let (url, connections) = echo_server().await;
        let mut client = Connection::to(&format!("{url}/v1/events")).expect("a plain URL");
        for body in ["a", "bb", "ccc"] {
            assert_eq!(client.post(body.as_bytes()).await, Ok((202, format!("{{\"id\":\"{body}\"}}").into_bytes())));
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1, "three posts over one connection");
        let mut closing = Connection::to(&format!("{url}/close")).expect("a plain URL");
        assert_eq!(closing.post(b"x").await.map(|(status, _)| status), Ok(202));
        assert_eq!(closing.post(b"y").await.map(|(status, _)| status), Ok(202));
        assert_eq!(connections.load(Ordering::SeqCst), 3, "a new connection after each close");
        let mut nowhere = Connection::to("http://127.0.0.1:1/v1/events").expect("a plain URL");
        assert!(nowhere.post(b"z").await.is_err_and(|why| why.starts_with("connect")));
    }

    #[test]
    fn a_batch_answer_gives_the_ids_in_order_and_any_event_not_created_fails_it() {
        let ok = br#"{"events":[{"status":202,"id":"evt_a","deliveries":[]},{"status":202,"id":"evt_b"}]}"#;
        assert_eq!(accepted_ids(ok, true, 2), Ok(vec!["evt_a".to_string(), "evt_b".to_string()]));
        assert!(accepted_ids(ok, true, 3).is_err(), "a result missing");
        let rejected = br#"{"events":[{"status":202,"id":"evt_a"},{"status":422,"detail":"no endpoint"}]}"#;
        assert!(accepted_ids(rejected, true, 2).is_err());
        assert_eq!(accepted_ids(br#"{"id":"evt_c","type":"t"}"#, false, 1), Ok(vec!["evt_c".to_string()]));
    }
}
