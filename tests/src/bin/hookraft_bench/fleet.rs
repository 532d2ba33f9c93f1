//! The receiver fleet: one HTTP/1.1 server on loopback standing in for every
//! customer endpoint of a scenario, counting what arrives per endpoint and
//! `webhook-id`, and measuring end-to-end latency.
//!
//! An endpoint is the path `/{behaviour}/{index}`:
//! - `ok`: answers 200 at once;
//! - `hang`: holds the request for [`HANG_FOR`], far past any attempt timeout;
//! - `fail`: answers 500;
//! - `down`: answers 503 until [`Fleet::bring_up`], then 200;
//! - `flaky`: answers 503 to the first attempt (`webhook-attempt: 1`) of
//!   one delivery in ten, chosen by a hash of its `webhook-id`
//!   ([`fails_first_attempt`]), and 200 to everything else, so every retry
//!   succeeds.
//!
//! Every payload the load generator sends starts with `{"t":<ns>` (when it
//! was posted, in nanoseconds since the fleet's origin), so the first 2xx
//! arrival of each `(endpoint, webhook-id)` yields one end-to-end latency
//! sample.
//!
//! A request to `ok`, `down` or `flaky` that carries `webhook-ordering-key`
//! and `webhook-sequence` also goes to the [`OrderLedger`]: it checks each
//! key's order and takes the waits behind keys (`ordered.rs`).
//!
//! The server is a small keep-alive loop over `httparse` rather than a web
//! framework: the fleet shares the machine's cores with the node it measures,
//! and every microsecond it spends on a webhook is one the node does not get.
//! It understands what a webhook sender sends (`POST` with a
//! `content-length`), answers anything else with a 4xx and closes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::http1::{self, Unframed, Unread};
use crate::ordered::{Arrival, OrderLedger};

/// How long a `hang` endpoint holds a request.
pub const HANG_FOR: Duration = Duration::from_secs(120);

/// What the fleet saw, shared with its handlers.
pub struct Fleet {
    origin: Instant,
    down: AtomicBool,
    /// Requests answered 2xx at `ok`, `down` and `flaky` endpoints,
    /// duplicates included.
    pub received: AtomicU64,
    /// Requests that arrived at `hang` and `fail` endpoints.
    pub received_unhealthy: AtomicU64,
    /// First attempts a `flaky` endpoint answered 503.
    pub first_attempts_refused: AtomicU64,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    /// 2xx arrivals per (endpoint index, webhook-id) at `ok`, `down` and
    /// `flaky` endpoints.
    per_delivery: HashMap<(u32, Box<str>), u32>,
    /// Send time (since the origin) and end-to-end latency of each first
    /// arrival, in microseconds.
    latencies_us: Vec<(u64, u64)>,
    /// When the latest first arrival came, since the origin.
    last_first_arrival: Duration,
    /// Requests that carried an ordering key and a sequence.
    order: OrderLedger,
}

impl Fleet {
    /// Starts the fleet on `127.0.0.1:0`, with room for `expected` first
    /// arrivals; returns it and its base URL.
    ///
    /// The room is taken up front because growing it happens under the lock
    /// every handler takes: the map of 229,376 arrivals doubling held every
    /// handler, and with them the runtime the load generator shares, for
    /// tens of milliseconds, which the ingest latency of that second showed
    /// as if the node had stalled.
    pub async fn start(origin: Instant, expected: usize) -> Result<(Arc<Fleet>, String)> {
        let seen = Seen {
            per_delivery: HashMap::with_capacity(expected),
            latencies_us: Vec::with_capacity(expected),
            order: OrderLedger::with_capacity(expected),
            ..Seen::default()
        };
        let fleet = Arc::new(Fleet {
            origin,
            down: AtomicBool::new(true),
            received: AtomicU64::new(0),
            received_unhealthy: AtomicU64::new(0),
            first_attempts_refused: AtomicU64::new(0),
            seen: Mutex::new(seen),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.context("bind the receiver fleet")?;
        let addr = listener.local_addr()?;
        let serving = fleet.clone();
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(serve_connection(serving.clone(), stream));
                    }
                    Err(error) => {
                        // Out of descriptors, say: the senders retry.
                        eprintln!("receiver fleet cannot accept: {error}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
        Ok((fleet, format!("http://{addr}")))
    }

    /// `down` endpoints answer 200 from now on.
    pub fn bring_up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many of `expected` (endpoint, event id) pairs have arrived.
    pub fn arrived_among<'a>(&self, expected: impl IntoIterator<Item = (u32, &'a str)>) -> usize {
        let seen = self.seen();
        expected
            .into_iter()
            .filter(|(endpoint, id)| seen.per_delivery.contains_key(&(*endpoint, Box::from(*id))))
            .count()
    }

    /// Distinct (endpoint, event) pairs that arrived. Cheap: polled while waiting.
    pub fn distinct(&self) -> usize {
        self.seen().per_delivery.len()
    }

    /// Arrivals beyond the first of one (endpoint, event); walks every pair.
    pub fn duplicates(&self) -> u64 {
        self.seen().per_delivery.values().map(|&n| u64::from(n.saturating_sub(1))).sum()
    }

    /// The latency samples of events sent at `from` (since the origin) or
    /// later, sorted, in microseconds.
    pub fn latencies_us_sent_from(&self, from: Duration) -> Vec<u64> {
        let from = crate::report::micros(from);
        let mut samples: Vec<u64> =
            self.seen().latencies_us.iter().filter(|&&(sent, _)| sent >= from).map(|&(_, latency)| latency).collect();
        samples.sort_unstable();
        samples
    }

    /// Every first arrival's send time (since the origin) and end-to-end
    /// latency, in microseconds, in arrival order.
    pub fn latency_samples_us(&self) -> Vec<(u64, u64)> {
        self.seen().latencies_us.clone()
    }

    /// When the latest first arrival came, since the origin.
    pub fn last_first_arrival(&self) -> Duration {
        self.seen().last_first_arrival
    }

    /// Arrivals of an ordered delivery before its key's previous sequence
    /// was answered 2xx.
    pub fn out_of_order(&self) -> u64 {
        self.seen().order.out_of_order()
    }

    /// The waits behind keys of ordered deliveries, sorted, in
    /// microseconds: all, and those held behind their key's previous delivery.
    pub fn key_waits_us(&self) -> (Vec<u64>, Vec<u64>) {
        self.seen().order.waits_us()
    }

    /// Records a request to a healthy endpoint, answered 2xx when `delivered`.
    fn record(&self, endpoint: u32, request: &Request<'_>, delivered: bool) {
        let now = self.origin.elapsed();
        let mut seen = self.seen();
        if let Some((key, sequence)) = request.ordering {
            seen.order.arrive(Arrival {
                endpoint,
                key,
                sequence,
                attempt: request.attempt,
                posted: sent_ns(request.body).map(Duration::from_nanos),
                at: now,
                delivered,
            });
        }
        if !delivered {
            return;
        }
        let (webhook_id, body) = (request.webhook_id, request.body);
        let count = seen.per_delivery.entry((endpoint, Box::from(webhook_id))).or_insert(0);
        *count += 1;
        if *count == 1 {
            if let Some(sent_ns) = sent_ns(body) {
                let latency = now.saturating_sub(Duration::from_nanos(sent_ns));
                let sent_us = sent_ns / 1_000;
                seen.latencies_us.push((sent_us, crate::report::micros(latency)));
            }
            seen.last_first_arrival = seen.last_first_arrival.max(now);
        }
    }

    /// Counts a request to `endpoint` and says what to answer.
    fn answer(&self, endpoint: Option<(Behaviour, u32)>, request: &Request<'_>) -> Answer {
        let Some((behaviour, index)) = endpoint else { return Answer::Now(NOT_FOUND) };
        match behaviour {
            Behaviour::Down if self.down.load(Ordering::SeqCst) => {
                if request.ordering.is_some() {
                    self.record(index, request, false);
                }
                Answer::Now(UNAVAILABLE)
            }
            Behaviour::Flaky if fails_first_attempt(request.webhook_id, request.attempt) => {
                self.first_attempts_refused.fetch_add(1, Ordering::Relaxed);
                if request.ordering.is_some() {
                    self.record(index, request, false);
                }
                Answer::Now(UNAVAILABLE)
            }
            Behaviour::Ok | Behaviour::Down | Behaviour::Flaky => {
                self.received.fetch_add(1, Ordering::Relaxed);
                self.record(index, request, true);
                Answer::Now(OK)
            }
            Behaviour::Hang => {
                self.received_unhealthy.fetch_add(1, Ordering::Relaxed);
                Answer::Hang
            }
            Behaviour::Fail => {
                self.received_unhealthy.fetch_add(1, Ordering::Relaxed);
                Answer::Now(SERVER_ERROR)
            }
        }
    }
}

/// What an endpoint's path asks of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    Ok,
    Hang,
    Fail,
    Down,
    Flaky,
}

/// What the fleet reads of one webhook request.
#[derive(Debug, Clone, Copy)]
struct Request<'a> {
    webhook_id: &'a str,
    /// `webhook-attempt`, when present and a number.
    attempt: Option<u32>,
    /// `webhook-ordering-key` and `webhook-sequence`, when both are present
    /// and the sequence is a number.
    ordering: Option<(&'a str, u64)>,
    body: &'a [u8],
}

/// Whether a `flaky` endpoint refuses this attempt: the first attempt of
/// one delivery in ten, by a hash (FNV-1a) of its `webhook-id`. Every
/// later attempt, and one without a readable `webhook-attempt`, succeeds.
fn fails_first_attempt(webhook_id: &str, attempt: Option<u32>) -> bool {
    let hash = webhook_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3));
    attempt == Some(1) && hash % 10 == 0
}

/// The endpoint a path names: `/{behaviour}/{index}`.
fn route(path: &str) -> Option<(Behaviour, u32)> {
    let (behaviour, index) = path.strip_prefix('/')?.split_once('/')?;
    let behaviour = match behaviour {
        "ok" => Behaviour::Ok,
        "hang" => Behaviour::Hang,
        "fail" => Behaviour::Fail,
        "down" => Behaviour::Down,
        "flaky" => Behaviour::Flaky,
        _ => return None,
    };
    Some((behaviour, index.parse().ok()?))
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
const NOT_FOUND: &[u8] = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
const SERVER_ERROR: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n";
const UNAVAILABLE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";
// Answers to what the fleet does not take; each closes the connection.
const BAD_REQUEST: &[u8] = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
const NOT_POST: &[u8] = b"HTTP/1.1 405 Method Not Allowed\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
const LENGTH_REQUIRED: &[u8] = b"HTTP/1.1 411 Length Required\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
const TOO_LARGE: &[u8] = b"HTTP/1.1 413 Content Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
const HEAD_TOO_LARGE: &[u8] =
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// The largest request head and body the fleet reads.
const HEAD_BYTES_MAX: usize = 16 * 1024;
const BODY_BYTES_MAX: usize = 4 << 20;
/// Headers parsed per request; a sender's webhook carries about ten.
const HEADERS_MAX: usize = 32;

/// What to send back for one request.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Now(&'static [u8]),
    /// Hold the connection for [`HANG_FOR`], then answer 200.
    Hang,
}

/// A complete request head, by offsets into the bytes it was parsed from.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    /// Bytes of the head; the body follows.
    len: usize,
    body_len: usize,
    endpoint: Option<(Behaviour, u32)>,
    /// Where the `webhook-id` value lies (empty when absent).
    webhook_id: std::ops::Range<usize>,
    /// `webhook-attempt` and `webhook-sequence`, when present and numbers.
    attempt: Option<u32>,
    sequence: Option<u64>,
    /// Where the `webhook-ordering-key` value lies (empty when absent).
    ordering_key: std::ops::Range<usize>,
    /// The sender asked to close after the answer.
    close: bool,
}

impl http1::Head for Head {
    fn message_len(&self) -> usize {
        self.len + self.body_len
    }
}

/// Reads a request head: `None` while incomplete, or the answer that
/// refuses it.
fn parse_head(bytes: &[u8]) -> Result<Option<Head>, &'static [u8]> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() > HEAD_BYTES_MAX => return Err(HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HEAD_TOO_LARGE),
        Err(_) => return Err(BAD_REQUEST),
    };
    if request.method != Some("POST") {
        return Err(NOT_POST);
    }
    let framing = match http1::framing(request.headers) {
        Ok(framing) => framing,
        // A sender that knows its body's length says so; no chunked bodies here.
        Err(Unframed::Chunked) => return Err(LENGTH_REQUIRED),
        Err(Unframed::BadLength) => return Err(BAD_REQUEST),
    };
    let Some(body_len) = framing.body_len else { return Err(LENGTH_REQUIRED) };
    if body_len > BODY_BYTES_MAX {
        return Err(TOO_LARGE);
    }
    let (mut webhook_id, mut ordering_key, mut attempt, mut sequence) = (0..0, 0..0, None, None);
    for header in request.headers.iter() {
        let at = header.value.as_ptr() as usize - bytes.as_ptr() as usize;
        let value = at..at + header.value.len();
        let number = || std::str::from_utf8(header.value).ok()?.parse().ok();
        if header.name.eq_ignore_ascii_case("webhook-id") {
            webhook_id = value;
        } else if header.name.eq_ignore_ascii_case("webhook-attempt") {
            attempt = number().and_then(|n: u64| u32::try_from(n).ok());
        } else if header.name.eq_ignore_ascii_case("webhook-sequence") {
            sequence = number();
        } else if header.name.eq_ignore_ascii_case("webhook-ordering-key") {
            ordering_key = value;
        }
    }
    let endpoint = request.path.and_then(route);
    Ok(Some(Head { len, body_len, endpoint, webhook_id, attempt, sequence, ordering_key, close: framing.close }))
}

/// Serves one keep-alive connection until the sender closes it, asks to,
/// or sends what the fleet refuses.
async fn serve_connection(fleet: Arc<Fleet>, mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let head = match http1::read_message(&mut stream, &mut buf, parse_head).await {
            Ok(head) => head,
            Err(Unread::Refused(answer)) => {
                let _ = stream.write_all(answer).await;
                return;
            }
            Err(Unread::Closed | Unread::Failed(_)) => return,
        };
        let end = head.len + head.body_len;
        let text = |range: &std::ops::Range<usize>| std::str::from_utf8(&buf[range.clone()]).unwrap_or_default();
        let key = text(&head.ordering_key);
        let request = Request {
            webhook_id: text(&head.webhook_id),
            attempt: head.attempt,
            ordering: head.sequence.filter(|_| !key.is_empty()).map(|sequence| (key, sequence)),
            body: &buf[head.len..end],
        };
        let answer = fleet.answer(head.endpoint, &request);
        buf.drain(..end);
        let written = match answer {
            Answer::Now(bytes) => stream.write_all(bytes).await,
            Answer::Hang => {
                tokio::time::sleep(HANG_FOR).await;
                stream.write_all(OK).await
            }
        };
        if written.is_err() || head.close {
            return;
        }
    }
}

/// The `t` of a body starting `{"t":<digits>`.
fn sent_ns(body: &[u8]) -> Option<u64> {
    let digits = body.strip_prefix(b"{\"t\":")?;
    let end = digits.iter().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    #[test]
    fn sent_time_is_read_from_the_start_of_the_payload_only() {
        assert_eq!(sent_ns(br#"{"t":12345,"pad":"x"}"#), Some(12345));
        assert_eq!(sent_ns(br#"{"pad":"x","t":1}"#), None);
        assert_eq!(sent_ns(br#"{"t":"#), None);
    }

    fn head_of(bytes: &[u8]) -> Head {
        match parse_head(bytes) {
            Ok(Some(head)) => head,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
        }
    }

    #[test]
    fn paths_name_a_behaviour_and_an_index() {
        assert_eq!(route("/ok/7"), Some((Behaviour::Ok, 7)));
        assert_eq!(route("/hang/0"), Some((Behaviour::Hang, 0)));
        assert_eq!(route("/fail/3"), Some((Behaviour::Fail, 3)));
        assert_eq!(route("/down/12"), Some((Behaviour::Down, 12)));
        assert_eq!(route("/flaky/5"), Some((Behaviour::Flaky, 5)));
        for path in ["/ok", "/ok/", "/ok/x", "/ok/1/2", "/other/1", "ok/1", "/"] {
            assert_eq!(route(path), None, "{path}");
        }
    }

    #[test]
    fn a_webhook_head_gives_its_length_endpoint_and_id() {
        let request = b"POST /ok/4 HTTP/1.1\r\nhost: x\r\nwebhook-id: msg_1\r\nContent-Length: 5\r\n\r\nhello";
        let head = head_of(request);
        assert_eq!(head.len, request.len() - 5);
        assert_eq!(head.body_len, 5);
        assert_eq!(head.endpoint, Some((Behaviour::Ok, 4)));
        assert_eq!(&request[head.webhook_id], b"msg_1");
        assert_eq!((head.attempt, head.sequence, head.ordering_key.is_empty()), (None, None, true));
        assert!(!head.close);
        let ordered = b"POST /flaky/2 HTTP/1.1\r\nwebhook-id: msg_2\r\nwebhook-attempt: 3\r\n\
            Webhook-Sequence: 17\r\nwebhook-ordering-key: cus_9\r\ncontent-length: 0\r\n\r\n";
        let head = head_of(ordered);
        assert_eq!((head.endpoint, head.attempt, head.sequence), (Some((Behaviour::Flaky, 2)), Some(3), Some(17)));
        assert_eq!(&ordered[head.ordering_key], b"cus_9");
        let unreadable =
            head_of(b"POST /ok/1 HTTP/1.1\r\nwebhook-attempt: x\r\nwebhook-sequence: -1\r\ncontent-length: 0\r\n\r\n");
        assert_eq!((unreadable.attempt, unreadable.sequence), (None, None));
        let closing = head_of(b"POST /nowhere HTTP/1.1\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n");
        assert_eq!((closing.endpoint, closing.close, closing.webhook_id.is_empty()), (None, true, true));
    }

    #[test]
    fn one_first_attempt_in_ten_fails_by_its_id_and_retries_always_succeed() {
        let ids: Vec<String> = (0..20_000).map(|n| format!("evt_01JF{n:022}")).collect();
        let failing = ids.iter().filter(|id| fails_first_attempt(id, Some(1))).count();
        assert!((1_700..=2_300).contains(&failing), "{failing} of 20,000 first attempts fail");
        for id in ids.iter().filter(|id| fails_first_attempt(id, Some(1))) {
            assert!(fails_first_attempt(id, Some(1)), "the same id, the same answer");
            assert!(!fails_first_attempt(id, Some(2)) && !fails_first_attempt(id, None), "{id}: only a first attempt");
        }
    }

    #[test]
    fn incomplete_heads_wait_and_unusable_ones_are_refused() {
        assert_eq!(parse_head(b"POST /ok/1 HTTP/1.1\r\ncontent-len"), Ok(None));
        assert_eq!(parse_head(b""), Ok(None));
        let refused = |bytes: &[u8]| match parse_head(bytes) {
            Err(answer) => String::from_utf8_lossy(answer).split("\r\n").next().unwrap_or_default().to_owned(),
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(b"GET /ok/1 HTTP/1.1\r\n\r\n"), "HTTP/1.1 405 Method Not Allowed");
        assert_eq!(refused(b"POST /ok/1 HTTP/1.1\r\n\r\n"), "HTTP/1.1 411 Length Required");
        assert_eq!(
            refused(b"POST /ok/1 HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"),
            "HTTP/1.1 411 Length Required"
        );
        assert_eq!(refused(b"POST /ok/1 HTTP/1.1\r\ncontent-length: -1\r\n\r\n"), "HTTP/1.1 400 Bad Request");
        assert_eq!(
            refused(b"POST /ok/1 HTTP/1.1\r\ncontent-length: 99999999\r\n\r\n"),
            "HTTP/1.1 413 Content Too Large"
        );
        assert_eq!(refused(b"\x01\x02 nonsense\r\n\r\n"), "HTTP/1.1 400 Bad Request");
        let endless = format!("POST /ok/1 HTTP/1.1\r\nx: {}", "y".repeat(HEAD_BYTES_MAX));
        assert_eq!(refused(endless.as_bytes()), "HTTP/1.1 431 Request Header Fields Too Large");
    }

    #[tokio::test]
    async fn the_fleet_counts_webhooks_from_a_real_client_and_a_split_pipelined_stream() {
        let (fleet, url) = Fleet::start(Instant::now(), 16).await.expect("fleet starts");
        let client = reqwest::Client::new();
        let post = |path: &str, id: &str| {
            client.post(format!("{url}{path}")).header("webhook-id", id).body(r#"{"t":1,"x":2}"#).send()
        };
        assert_eq!(post("/ok/1", "msg_a").await.expect("answered").status(), 200);
        assert_eq!(post("/ok/1", "msg_a").await.expect("answered").status(), 200);
        assert_eq!(post("/fail/2", "msg_b").await.expect("answered").status(), 500);
        assert_eq!(post("/down/3", "msg_c").await.expect("answered").status(), 503);
        fleet.bring_up();
        assert_eq!(post("/down/3", "msg_c").await.expect("answered").status(), 200);
        assert_eq!(post("/nowhere", "msg_d").await.expect("answered").status(), 404);

        // Two requests in one write, the second cut in the middle of its body.
        let mut stream = TcpStream::connect(url.trim_start_matches("http://")).await.expect("connects");
        let one = "POST /ok/5 HTTP/1.1\r\nwebhook-id: msg_e\r\ncontent-length: 4\r\n\r\nabcd";
        let two = "POST /ok/5 HTTP/1.1\r\nwebhook-id: msg_f\r\ncontent-length: 4\r\nconnection: close\r\n\r\nabcd";
        let (first, rest) = two.split_at(two.len() - 2);
        stream.write_all(format!("{one}{first}").as_bytes()).await.expect("writes");
        tokio::time::sleep(Duration::from_millis(20)).await;
        stream.write_all(rest.as_bytes()).await.expect("writes");
        let mut answers = String::new();
        stream.read_to_string(&mut answers).await.expect("the fleet answers both, then closes");
        assert_eq!(answers, format!("{}{}", String::from_utf8_lossy(OK), String::from_utf8_lossy(OK)));

        assert_eq!(fleet.received.load(Ordering::Relaxed), 5, "ok and down-once-up requests, duplicates included");
        assert_eq!(fleet.received_unhealthy.load(Ordering::Relaxed), 1);
        assert_eq!(fleet.distinct(), 4);
        assert_eq!(fleet.duplicates(), 1);
        assert_eq!(fleet.arrived_among([(1, "msg_a"), (3, "msg_c"), (5, "msg_f"), (2, "msg_b")]), 3);
        assert_eq!(fleet.latencies_us_sent_from(Duration::ZERO).len(), 2, "bodies starting with a send time");
    }

    #[tokio::test]
    async fn a_flaky_endpoint_refuses_chosen_first_attempts_and_the_fleet_checks_each_keys_order() {
        let (fleet, url) = Fleet::start(Instant::now(), 16).await.expect("fleet starts");
        let id = |fails: bool| {
            (0..).map(|n| format!("msg_{n}")).find(|id| fails_first_attempt(id, Some(1)) == fails).expect("an id")
        };
        let (failing, passing) = (id(true), id(false));
        let client = reqwest::Client::new();
        let post = |id: &str, attempt: u32, sequence: Option<u64>| {
            let request = client
                .post(format!("{url}/flaky/1"))
                .header("webhook-id", id)
                .header("webhook-attempt", attempt.to_string())
                .body(r#"{"t":1,"x":2}"#);
            let request = match sequence {
                Some(s) => request.header("webhook-sequence", s.to_string()).header("webhook-ordering-key", "k"),
                None => request,
            };
            async move { request.send().await.expect("answered").status().as_u16() }
        };
        assert_eq!(post(&failing, 1, Some(1)).await, 503);
        assert_eq!(post(&passing, 1, Some(2)).await, 200, "sent while sequence 1 was refused");
        assert_eq!(post(&failing, 2, Some(1)).await, 200, "a retry succeeds");
        assert_eq!(post(&failing, 1, None).await, 503, "unordered: refused, but nothing to check");
        assert_eq!(fleet.first_attempts_refused.load(Ordering::Relaxed), 2);
        assert_eq!(fleet.received.load(Ordering::Relaxed), 2, "2xx answers only");
        assert_eq!(fleet.arrived_among([(1, failing.as_str()), (1, passing.as_str())]), 2);
        assert_eq!(fleet.out_of_order(), 1);
        let (waits, held) = fleet.key_waits_us();
        assert_eq!((waits.len(), held.len()), (2, 0), "one wait per sequence, at its first attempt");
    }
}
