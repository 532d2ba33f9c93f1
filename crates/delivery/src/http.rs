//! The production [`Transport`]: webhooks over HTTP(S) with reqwest.
//!
//! One shared [`reqwest::Client`] serves every endpoint of the node. It never
//! follows redirects (a 3xx is the endpoint's answer, recorded as such), never
//! retries on its own (the endpoint actor owns retries), ignores proxy
//! environment variables (a proxy would resolve names itself and bypass the
//! guard below), and bounds every attempt by the request's timeout.
//!
//! The SSRF guard has two halves. When private targets are not allowed, the
//! client resolves names through [`GuardedResolver`], which drops forbidden
//! addresses ([`crate::ssrf::is_forbidden_ip`]) and fails when none is left;
//! reqwest connects to exactly the addresses it returned, so a name cannot be
//! re-bound to a private address between check and connect. Literal-IP URLs
//! skip DNS, so [`crate::ssrf::check_target`] checks every URL before
//! sending.
//!
//! This module decides nothing about retries or outcomes: it reports what the
//! endpoint answered, or why nothing came back.

use std::error::Error as StdError;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::error::DeliveryError;
use crate::ssrf::check_target;
use crate::transport::bytes_body::Body;
use crate::transport::{SendError, SendFuture, Transport, WebhookRequest, WebhookResponse};

mod resolver;

pub use resolver::{GuardedResolver, RefusedByGuard};

/// How long establishing a TCP connection may take, within the attempt's own
/// timeout. An endpoint that does not accept in 5 s is down for our purposes.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle connections kept per host: no bound of their own. Many endpoints
/// often share one host (a SaaS receiving for many customers), each with up
/// to its concurrency cap in flight; a pool smaller than their sum closes
/// connections as each burst ends and opens new ones for the next (measured:
/// 19,000 sockets in TIME-WAIT within seconds with 32, 14,000 with 256 in
/// `hookraft-bench --scenario fan-out`, 50 endpoints of 10 each, where
/// connecting took 28% of the node's CPU). Bounding the idle connections
/// does not bound the open ones: those are the attempts in flight, which
/// the endpoints' caps bound; an idle connection closes after
/// [`POOL_IDLE_TIMEOUT`].
pub const POOL_IDLE_PER_HOST_MAX: usize = usize::MAX;
/// How long an idle pooled connection is kept before it is closed (the
/// pool looks once per this period, so one closes 30 to 60 s after its
/// last use). Each holds about 20 KiB of buffers: after a burst to 100
/// endpoints at 64 in flight each, 6,400 idle connections held 130 MiB,
/// which a 60 s timeout kept for up to two minutes.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a response body we read and keep for the timeline.
pub const BODY_EXCERPT_BYTES_MAX: usize = 1024;
/// Longest `Retry-After` value we keep; valid ones (seconds or an HTTP date)
/// are under 30 bytes, so a longer one is garbage cut short.
pub const RETRY_AFTER_BYTES_MAX: usize = 128;
/// Sent on every request so receivers can tell where webhooks come from.
pub const USER_AGENT: &str = concat!("hookraft/", env!("CARGO_PKG_VERSION"));

/// Sends webhooks with one shared reqwest client.
#[derive(Debug, Clone)]
pub struct HttpTransport {
    /// Shared by all endpoints: pooled connections, one TLS configuration.
    client: reqwest::Client,
    /// When false, the SSRF guard refuses private, loopback and reserved
    /// targets (ARCHITECTURE §6.3, `--allow-private-targets`).
    allow_private: bool,
}

impl HttpTransport {
    /// Builds the shared client; `allow_private` switches the SSRF guard off.
    pub fn new(allow_private: bool) -> Result<Self, DeliveryError> {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(POOL_IDLE_PER_HOST_MAX)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .user_agent(USER_AGENT)
            .tcp_nodelay(true);
        if !allow_private {
            builder = builder.dns_resolver(GuardedResolver);
        }
        let client = builder.build().map_err(DeliveryError::ClientBuild)?;
        Ok(Self { client, allow_private })
    }

    async fn send_checked(&self, request: WebhookRequest) -> Result<WebhookResponse, SendError> {
        // Refused when the endpoint was registered; kept from its parse.
        let parsed = request.url.parsed().map_err(|e| SendError::InvalidUrl(e.to_string()))?;
        check_target(parsed, self.allow_private).map_err(|e| {
            if e.is_forbidden_destination() {
                SendError::RefusedTarget(e.to_string())
            } else {
                SendError::InvalidUrl(e.to_string())
            }
        })?;
        let url = parsed.clone();
        let headers = header_map(request.headers)?;
        let timeout = request.timeout;
        let body = reqwest::Body::from(Bytes::from_owner(SharedPayload(request.body)));
        let attempt = self.client.post(url).headers(headers).body(body).send();
        // One timer for the whole attempt: connect, request, headers and
        // the excerpt of the body (reqwest's per-request timeout would be a
        // second timer per attempt bounding the same thing).
        match tokio::time::timeout(timeout, async { read_answer(attempt.await?).await }).await {
            Ok(result) => result.map_err(classify),
            Err(_elapsed) => Err(SendError::Timeout),
        }
    }
}

impl Transport for HttpTransport {
    fn send(&self, request: WebhookRequest) -> SendFuture<'_> {
        Box::pin(self.send_checked(request))
    }
}

/// An event's payload lent to a request body: every attempt to every
/// endpoint sends the one copy the state holds.
struct SharedPayload(Body);

impl AsRef<[u8]> for SharedPayload {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// The request's headers, with `content-type: application/json` unless the
/// caller set one. Names are static and values are moved, not copied: this
/// runs once per attempt.
fn header_map(headers: Vec<(&'static str, String)>) -> Result<HeaderMap, SendError> {
    let mut map = HeaderMap::with_capacity(headers.len() + 1);
    for (name, value) in headers {
        let name = static_header_name(name)?;
        let value =
            HeaderValue::try_from(value).map_err(|_| SendError::Other(format!("invalid value for header {name}")))?;
        map.append(name, value);
    }
    if !map.contains_key(CONTENT_TYPE) {
        map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    Ok(map)
}

/// `name` as a header name, without copying it. `HeaderName::from_static`
/// panics on anything but a valid lowercase name; this accepts lowercase
/// letters, digits and `-` (every name hookraft sends) and reports the rest
/// instead.
fn static_header_name(name: &'static str) -> Result<HeaderName, SendError> {
    let plain = !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if plain {
        Ok(HeaderName::from_static(name))
    } else {
        Err(SendError::Other(format!("invalid header name {name:?}")))
    }
}

/// Status, `Retry-After` and the first KiB of the body. Reading stops at
/// [`BODY_EXCERPT_BYTES_MAX`]; dropping the response then closes the
/// connection instead of draining an unbounded body.
async fn read_answer(mut response: reqwest::Response) -> Result<WebhookResponse, reqwest::Error> {
    let status = response.status().as_u16();
    let retry_after = response.headers().get(RETRY_AFTER).map(|value| {
        let raw = &value.as_bytes()[..value.len().min(RETRY_AFTER_BYTES_MAX)];
        String::from_utf8_lossy(raw).into_owned()
    });
    let mut body = Vec::with_capacity(BODY_EXCERPT_BYTES_MAX);
    while body.len() < BODY_EXCERPT_BYTES_MAX {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = BODY_EXCERPT_BYTES_MAX - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() => return Err(e),
            Err(e) => {
                // The endpoint answered; a body cut short does not undo that.
                tracing::debug!(status, error = %error_chain(&e), "response body ended abnormally");
                break;
            }
        }
    }
    assert!(body.len() <= BODY_EXCERPT_BYTES_MAX);
    let truncated = body.len() == BODY_EXCERPT_BYTES_MAX;
    Ok(WebhookResponse { status, retry_after, body_excerpt: body_excerpt(&body, truncated) })
}

/// Lossy UTF-8 of at most [`BODY_EXCERPT_BYTES_MAX`] bytes, cut at a character
/// boundary: when the body was `truncated`, a trailing partial character is
/// dropped rather than shown as U+FFFD.
fn body_excerpt(bytes: &[u8], truncated: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut chunks = bytes.utf8_chunks().peekable();
    while let Some(chunk) = chunks.next() {
        push_bounded(&mut out, chunk.valid());
        let partial_at_cut = truncated && chunks.peek().is_none();
        if chunk.invalid().is_empty() || partial_at_cut {
            continue;
        }
        push_bounded(&mut out, "\u{FFFD}");
    }
    assert!(out.len() <= BODY_EXCERPT_BYTES_MAX);
    out
}

/// Appends as much of `text` as fits in the excerpt, whole characters only.
fn push_bounded(out: &mut String, text: &str) {
    let room = BODY_EXCERPT_BYTES_MAX.saturating_sub(out.len());
    out.push_str(&text[..text.floor_char_boundary(room)]);
}

/// Maps a reqwest failure to the transport's terms.
fn classify(error: reqwest::Error) -> SendError {
    if let Some(refused) = find_source::<RefusedByGuard>(&error) {
        return SendError::RefusedTarget(refused.to_string());
    }
    if error.is_connect() {
        // Includes our 5 s connect timeout: the endpoint was unreachable.
        return SendError::Connect(error_chain(&error));
    }
    if error.is_timeout() {
        return SendError::Timeout;
    }
    SendError::Other(error_chain(&error))
}

/// The first error of type `E` in `error`'s source chain.
fn find_source<'a, E: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}

/// "outer: inner: root cause", without the URL reqwest adds (the delivery
/// already names its endpoint).
fn error_chain(error: &reqwest::Error) -> String {
    let mut text = String::from("error sending request");
    let mut current = error.source();
    while let Some(e) = current {
        text.push_str(": ");
        text.push_str(&e.to_string());
        current = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::transport::bytes_body::Body;
    use axum::Router;
    use axum::http::{HeaderMap as AxumHeaders, StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::post;

    const BIG_BODY_BYTES: usize = 10 * 1024;

    #[test]
    fn header_map_keeps_names_and_values_and_adds_json_content_type_when_missing() {
        let map = header_map(vec![("webhook-id", "msg_1".into()), ("webhook-attempt", "2".into())]).unwrap();
        assert_eq!(map.get("webhook-id").unwrap(), "msg_1");
        assert_eq!(map.get("webhook-attempt").unwrap(), "2");
        assert_eq!(map.get(CONTENT_TYPE).unwrap(), "application/json");
        let own = header_map(vec![("content-type", "text/plain".into())]).unwrap();
        assert_eq!(own.get_all(CONTENT_TYPE).iter().collect::<Vec<_>>(), ["text/plain"]);
    }

    #[test]
    fn header_map_refuses_bad_names_and_values_instead_of_panicking() {
        for name in ["", "Webhook-Id", "bad name", "x\n"] {
            assert!(matches!(header_map(vec![(name, "v".into())]), Err(SendError::Other(_))), "{name:?}");
        }
        assert!(matches!(header_map(vec![("webhook-id", "a\r\nb".into())]), Err(SendError::Other(_))));
    }

    async fn serve_test_app() -> SocketAddr {
        let app = Router::new()
            .route("/big", post(|| async { "a".repeat(BIG_BODY_BYTES) }))
            .route("/euro", post(|| async { "€".repeat(BIG_BODY_BYTES) }))
            .route("/small", post(|| async { "ok" }))
            .route("/redirect", post(|| async { (StatusCode::FOUND, [(header::LOCATION, "/small")]) }))
            .route(
                "/slow",
                post(|| async {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    "late"
                }),
            )
            .route(
                "/busy",
                post(|| async { (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "120")], "busy") }),
            )
            .route("/echo", post(echo));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind test server");
        let addr = listener.local_addr().expect("local addr");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("test server") });
        addr
    }

    /// Answers with the headers and body it received, one `name=value` a line.
    async fn echo(headers: AxumHeaders, body: String) -> impl IntoResponse {
        let mut text = String::new();
        for name in ["webhook-id", "content-type", "user-agent"] {
            let value = headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("-");
            text.push_str(&format!("{name}={value}\n"));
        }
        text.push_str(&format!("body={body}"));
        text
    }

    fn request(url: String, timeout: Duration) -> WebhookRequest {
        WebhookRequest {
            url: url.into(),
            headers: vec![("webhook-id", "evt_1".into())],
            body: Body::from(r#"{"hello":"world"}"#.as_bytes()),
            timeout,
            origin: Default::default(),
        }
    }

    async fn send(allow_private: bool, url: String, timeout: Duration) -> Result<WebhookResponse, SendError> {
        let transport = HttpTransport::new(allow_private).expect("client builds");
        transport.send(request(url, timeout)).await
    }

    #[tokio::test]
    async fn ten_kib_body_is_cut_to_a_one_kib_excerpt() {
        let addr = serve_test_app().await;
        let answer = send(true, format!("http://{addr}/big"), Duration::from_secs(5)).await.expect("answer");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body_excerpt.len(), BODY_EXCERPT_BYTES_MAX);
        assert!(answer.body_excerpt.bytes().all(|b| b == b'a'));
        assert_eq!(answer.retry_after, None);
    }

    #[tokio::test]
    async fn multibyte_body_is_cut_at_a_character_boundary() {
        let addr = serve_test_app().await;
        let answer = send(true, format!("http://{addr}/euro"), Duration::from_secs(5)).await.expect("answer");
        // 341 whole three-byte characters fit in 1024 bytes; no U+FFFD.
        assert_eq!(answer.body_excerpt, "€".repeat(341));
    }

    #[tokio::test]
    async fn headers_and_body_reach_the_endpoint_with_json_content_type_and_user_agent() {
        let addr = serve_test_app().await;
        let answer = send(true, format!("http://{addr}/echo"), Duration::from_secs(5)).await.expect("answer");
        assert_eq!(answer.status, 200);
        let expected = format!(
            "webhook-id=evt_1\ncontent-type=application/json\nuser-agent={USER_AGENT}\nbody={{\"hello\":\"world\"}}"
        );
        assert_eq!(answer.body_excerpt, expected);
    }

    #[tokio::test]
    async fn redirect_is_reported_not_followed() {
        let addr = serve_test_app().await;
        let answer = send(true, format!("http://{addr}/redirect"), Duration::from_secs(5)).await.expect("answer");
        assert_eq!(answer.status, 302);
        assert_ne!(answer.body_excerpt, "ok");
    }

    #[tokio::test]
    async fn retry_after_header_is_passed_through_raw() {
        let addr = serve_test_app().await;
        let answer = send(true, format!("http://{addr}/busy"), Duration::from_secs(5)).await.expect("answer");
        assert_eq!(answer.status, 503);
        assert_eq!(answer.retry_after.as_deref(), Some("120"));
        assert_eq!(answer.body_excerpt, "busy");
    }

    #[tokio::test]
    #[allow(clippy::disallowed_methods)] // the test measures real elapsed time
    async fn slow_endpoint_times_out_at_the_request_timeout() {
        let addr = serve_test_app().await;
        let started = std::time::Instant::now();
        let result = send(true, format!("http://{addr}/slow"), Duration::from_millis(300)).await;
        assert_eq!(result, Err(SendError::Timeout));
        assert!(started.elapsed() < Duration::from_millis(1500), "took {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn unparseable_or_non_http_urls_are_invalid_not_sent() {
        for (url, reason) in [("not a url", "not a valid absolute URL"), ("ftp://example.com/h", "http or https")] {
            let result = send(true, url.into(), Duration::from_secs(5)).await;
            let Err(SendError::InvalidUrl(detail)) = &result else { panic!("{url}: {result:?}") };
            assert!(detail.contains(reason), "{url}: {detail}");
        }
    }

    #[tokio::test]
    async fn closed_port_is_a_connect_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        drop(listener);
        let result = send(true, format!("http://{addr}/"), Duration::from_secs(5)).await;
        assert!(matches!(result, Err(SendError::Connect(_))), "{result:?}");
    }

    #[tokio::test]
    async fn loopback_ip_is_refused_when_private_targets_are_not_allowed() {
        let addr = serve_test_app().await;
        let result = send(false, format!("http://{addr}/small"), Duration::from_secs(5)).await;
        assert!(matches!(result, Err(SendError::RefusedTarget(_))), "{result:?}");
        let mapped = format!("http://[::ffff:127.0.0.1]:{}/small", addr.port());
        let result = send(false, mapped, Duration::from_secs(5)).await;
        assert!(matches!(result, Err(SendError::RefusedTarget(_))), "{result:?}");
    }

    #[tokio::test]
    async fn localhost_name_is_refused_when_private_targets_are_not_allowed() {
        let addr = serve_test_app().await;
        let url = format!("http://localhost:{}/small", addr.port());
        let result = send(false, url.clone(), Duration::from_secs(5)).await;
        assert!(matches!(result, Err(SendError::RefusedTarget(_))), "{result:?}");
        let answer = send(true, url, Duration::from_secs(5)).await.expect("allowed when private is allowed");
        assert_eq!(answer.status, 200);
    }

    #[tokio::test]
    async fn resolver_refusal_inside_reqwest_maps_to_refused_target() {
        // Straight through the client, skipping the URL check, so the refusal
        // can only come from the resolver and must survive reqwest's wrapping.
        let addr = serve_test_app().await;
        let transport = HttpTransport::new(false).expect("client builds");
        let url = format!("http://localhost:{}/small", addr.port());
        let error = transport.client.post(url).send().await.expect_err("refused by the resolver");
        assert!(error.is_dns(), "{error:?}");
        let mapped = classify(error);
        assert!(
            matches!(mapped, SendError::RefusedTarget(ref m) if m.starts_with("localhost resolves only to")),
            "{mapped:?}"
        );
    }

    /// More attempts in flight to one host than the old idle-pool bound
    /// (256), in waves, as a fan-out's actors send them: once the first wave
    /// has opened its connections, later waves find them idle and open
    /// (almost) none. With a bound below the wave, each wave reopened at
    /// least the difference (28% of a node's CPU in the fan-out benchmark).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waves_of_attempts_to_one_host_reuse_their_connections() {
        use axum::serve::ListenerExt;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        const WAVE: usize = 300;
        const LATER_WAVES: usize = 2;
        // Long enough that every attempt of a wave has started before any
        // connection is free again: a wave needs WAVE connections at once.
        const HOLD: Duration = Duration::from_secs(2);
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind test server");
        let addr = listener.local_addr().expect("local addr");
        let listener = listener.tap_io(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let app = Router::new()
            .route(
                "/hold",
                post(|| async {
                    tokio::time::sleep(HOLD).await;
                    "ok"
                }),
            )
            .route("/probe", post(|| async { "ok" }));
        tokio::spawn(async move { axum::serve(listener, app).await.expect("test server") });
        let transport = Arc::new(HttpTransport::new(true).expect("client builds"));
        let wave = || {
            let tasks: Vec<_> = (0..WAVE)
                .map(|_| {
                    let transport = transport.clone();
                    let url = format!("http://{addr}/hold");
                    tokio::spawn(async move { transport.send(request(url, Duration::from_secs(30))).await })
                })
                .collect();
            let transport = transport.clone();
            let accepted = accepted.clone();
            async move {
                for task in tasks {
                    assert_eq!(task.await.expect("task").expect("answer").status, 200);
                }
                // Each connection's task hands it back to the pool after its
                // answer was read: wait until one of the wave's is idle there,
                // which a probe served without a new connection shows. A probe
                // asks for its connection to be closed after it, so one that
                // had to open a connection leaves nothing in the pool for the
                // next probe to find, and the one that succeeds uses up one
                // of the wave's. Returns the connections the probes account
                // for: those they opened, and the one they closed.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                let mut opened = 0;
                loop {
                    let before = accepted.load(Ordering::SeqCst);
                    let mut probe = request(format!("http://{addr}/probe"), Duration::from_secs(5));
                    probe.headers.push(("connection", "close".into()));
                    assert_eq!(transport.send(probe).await.expect("probe answered").status, 200);
                    if accepted.load(Ordering::SeqCst) == before {
                        return opened + 1;
                    }
                    opened += 1;
                    assert!(tokio::time::Instant::now() < deadline, "no connection of the wave came back to the pool");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        let probes_first = wave().await;
        let after_first = accepted.load(Ordering::SeqCst);
        assert!(after_first - probes_first >= WAVE - 1, "{after_first} connections for {WAVE} attempts held at once");
        let mut probes_later = 0;
        for _ in 0..LATER_WAVES {
            probes_later += wave().await;
        }
        let reopened = accepted.load(Ordering::SeqCst) - after_first - probes_later;
        assert!(reopened <= WAVE / 10, "{reopened} connections opened by {LATER_WAVES} later waves of {WAVE}");
    }

    #[test]
    fn excerpt_of_invalid_utf8_is_lossy_and_bounded() {
        assert_eq!(body_excerpt(b"ok\xffok", false), "ok\u{FFFD}ok");
        let invalid = vec![0xffu8; BODY_EXCERPT_BYTES_MAX];
        let excerpt = body_excerpt(&invalid, true);
        assert!(excerpt.len() <= BODY_EXCERPT_BYTES_MAX);
        assert!(excerpt.chars().all(|c| c == '\u{FFFD}'));
    }

    #[test]
    fn excerpt_drops_a_partial_character_only_when_truncated() {
        let cut = "ab€".as_bytes()[..4].to_vec();
        assert_eq!(body_excerpt(&cut, true), "ab");
        assert_eq!(body_excerpt(&cut, false), "ab\u{FFFD}");
    }
}
