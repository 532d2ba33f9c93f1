//! `hookraft receiver`: a demo endpoint that verifies and prints deliveries.
//!
//! A newcomer runs it next to `hookraft serve`, registers
//! `http://127.0.0.1:9000/` as an endpoint with the same secret, and watches
//! one line per delivery: verified (with the attempt number) or rejected (with
//! the reason). `--status 503` makes it refuse valid requests, to watch
//! retries and the circuit breaker at work.
//!
//! The verdict ([`check_request`]) is a pure function of the headers, body,
//! secrets and current time; this module's shell only reads the clock, serves
//! HTTP and prints. It verifies with `hookraft_core::signing` exactly as a real
//! receiver would, and keeps no state between requests.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use hookraft_core::signing::{self, Secret};

/// How much of a body a printed line shows, in characters.
pub const BODY_PREVIEW_CHARS_MAX: usize = 200;

/// Flags of `hookraft receiver`.
#[derive(clap::Args, Debug)]
pub struct ReceiverArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,

    /// Signing secret of the endpoint (`whsec_...`). Repeat the flag (or
    /// separate with commas in the environment variable) to accept several,
    /// as during a secret rotation.
    #[arg(
        long = "secret",
        value_name = "WHSEC",
        env = "HOOKRAFT_RECEIVER_SECRET",
        hide_env_values = true,
        value_delimiter = ',',
        required = true,
        value_parser = parse_secret,
    )]
    pub secrets: Vec<Secret>,

    /// HTTP status to answer valid requests with; try 500 or 503 to watch
    /// retries, 410 to watch the endpoint get disabled.
    #[arg(long, default_value_t = 204, value_parser = clap::value_parser!(u16).range(200..=599))]
    pub status: u16,

    /// Print only rejected requests, not verified ones (for load tests).
    #[arg(long)]
    pub quiet: bool,
}

fn parse_secret(text: &str) -> Result<Secret, String> {
    Secret::parse(text.trim()).map_err(|e| e.to_string())
}

/// What the receiver concluded about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Verified { request: Seen },
    Rejected { reason: String, request: Seen },
}

/// The parts of a request that a printed line shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub id: Option<String>,
    pub attempt: Option<String>,
    pub timestamp: Option<String>,
    pub bytes: usize,
    /// The first [`BODY_PREVIEW_CHARS_MAX`] characters, control characters
    /// turned into spaces so the line stays one line.
    pub body_preview: String,
}

impl Verdict {
    /// The single line printed for this request.
    pub fn line(&self) -> String {
        let (head, seen) = match self {
            Verdict::Verified { request } => ("verified".to_string(), request),
            Verdict::Rejected { reason, request } => (format!("REJECTED {reason}"), request),
        };
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        format!(
            "{head} {} attempt={} ts={} bytes={} body={}",
            dash(&seen.id),
            dash(&seen.attempt),
            dash(&seen.timestamp),
            seen.bytes,
            seen.body_preview
        )
    }

    pub fn is_verified(&self) -> bool {
        matches!(self, Verdict::Verified { .. })
    }
}

/// Verifies one request's Standard Webhooks signature. Pure: the time comes
/// in as `now_s` (unix seconds).
pub fn check_request(secrets: &[Secret], headers: &HeaderMap, body: &[u8], now_s: u64) -> Verdict {
    let header = |name: &str| headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let request = Seen {
        id: header("webhook-id"),
        attempt: header("webhook-attempt"),
        timestamp: header("webhook-timestamp"),
        bytes: body.len(),
        body_preview: preview(body),
    };
    let signature = header("webhook-signature");
    let (Some(id), Some(timestamp), Some(signature)) = (&request.id, &request.timestamp, &signature) else {
        let missing: Vec<&str> = [
            ("webhook-id", request.id.is_none()),
            ("webhook-timestamp", request.timestamp.is_none()),
            ("webhook-signature", signature.is_none()),
        ]
        .into_iter()
        .filter_map(|(name, absent)| absent.then_some(name))
        .collect();
        let reason = format!("missing header {}", missing.join(", "));
        return Verdict::Rejected { reason, request };
    };
    let secrets: Vec<&Secret> = secrets.iter().collect();
    match signing::verify(&secrets, id, timestamp, signature, body, now_s) {
        Ok(()) => Verdict::Verified { request },
        Err(e) => Verdict::Rejected { reason: e.to_string(), request },
    }
}

fn preview(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .chars()
        .take(BODY_PREVIEW_CHARS_MAX)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// What every request handler needs; read-only.
struct Receiver {
    secrets: Vec<Secret>,
    /// Answer to valid requests.
    status: StatusCode,
    quiet: bool,
}

/// Binds `--listen` and serves until Ctrl-C.
pub async fn run(args: ReceiverArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("could not listen on {}", args.listen))?;
    let local = listener.local_addr().context("reading the bound address")?;
    eprintln!(
        "hookraft receiver on http://{local}/ with {} secret(s); valid requests get {}, invalid ones 401",
        args.secrets.len(),
        args.status
    );
    let shutdown = async {
        // If Ctrl-C cannot be watched, run until killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    serve(listener, args, shutdown).await
}

/// Serves on `listener` until `shutdown` completes; tests bind port 0.
pub async fn serve(
    listener: tokio::net::TcpListener,
    args: ReceiverArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let status = StatusCode::from_u16(args.status).with_context(|| format!("invalid --status {}", args.status))?;
    let receiver = Arc::new(Receiver { secrets: args.secrets, status, quiet: args.quiet });
    let app = Router::new().fallback(handle).with_state(receiver);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await.context("receiver server failed")
}

async fn handle(State(receiver): State<Arc<Receiver>>, method: Method, headers: HeaderMap, body: Bytes) -> StatusCode {
    if method != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED;
    }
    let verdict = check_request(&receiver.secrets, &headers, &body, now_s());
    if !(receiver.quiet && verdict.is_verified()) {
        // A closed stdout (e.g. `| head`) must not take the receiver down.
        let _ = writeln!(std::io::stdout().lock(), "{}", verdict.line());
    }
    if verdict.is_verified() { receiver.status } else { StatusCode::UNAUTHORIZED }
}

/// Unix seconds from the system clock.
// The demo receiver is a binary at the edge, outside any node's `Io`; like a
// real receiver it checks timestamps against its own wall clock.
#[allow(clippy::disallowed_methods)]
fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const NOW_S: u64 = 1_700_000_000;

    fn secret(byte: u8) -> Secret {
        Secret::from_key(vec![byte; 32]).expect("valid key length")
    }

    fn signed_headers(secret: &Secret, id: &str, ts: u64, body: &[u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let signature = signing::sign(secret, id, ts, body);
        for (name, value) in
            [("webhook-id", id.to_string()), ("webhook-timestamp", ts.to_string()), ("webhook-signature", signature)]
        {
            headers.insert(name, HeaderValue::from_str(&value).expect("ascii header"));
        }
        headers
    }

    #[test]
    fn correctly_signed_request_is_verified_and_printed_with_its_attempt() {
        let key = secret(1);
        let body = br#"{"type":"order.paid"}"#;
        let mut headers = signed_headers(&key, "evt_1", NOW_S, body);
        headers.insert("webhook-attempt", HeaderValue::from_static("3"));
        let verdict = check_request(&[key], &headers, body, NOW_S + 10);
        assert!(verdict.is_verified(), "{verdict:?}");
        assert_eq!(
            verdict.line(),
            format!("verified evt_1 attempt=3 ts={NOW_S} bytes=21 body={{\"type\":\"order.paid\"}}")
        );
    }

    #[test]
    fn request_signed_with_the_old_secret_is_verified_during_rotation() {
        let (old, new) = (secret(1), secret(2));
        let headers = signed_headers(&old, "evt_1", NOW_S, b"{}");
        assert!(check_request(&[new, old], &headers, b"{}", NOW_S).is_verified());
    }

    #[test]
    fn tampered_body_is_rejected_with_the_reason() {
        let key = secret(1);
        let headers = signed_headers(&key, "evt_1", NOW_S, b"{\"a\":1}");
        let verdict = check_request(&[key], &headers, b"{\"a\":2}", NOW_S);
        assert!(!verdict.is_verified());
        assert!(
            verdict.line().starts_with("REJECTED no v1 signature in the header matches evt_1 attempt=- "),
            "{}",
            verdict.line()
        );
    }

    #[test]
    fn stale_timestamp_is_rejected() {
        let key = secret(1);
        let headers = signed_headers(&key, "evt_1", NOW_S, b"{}");
        let verdict = check_request(&[key], &headers, b"{}", NOW_S + 3600);
        assert!(matches!(verdict, Verdict::Rejected { ref reason, .. } if reason.contains("5 minutes")), "{verdict:?}");
    }

    #[test]
    fn missing_headers_are_named_in_the_rejection() {
        let verdict = check_request(&[secret(1)], &HeaderMap::new(), b"", NOW_S);
        let Verdict::Rejected { reason, .. } = verdict else { panic!("expected a rejection") };
        assert_eq!(reason, "missing header webhook-id, webhook-timestamp, webhook-signature");
    }

    #[test]
    fn long_multiline_body_is_previewed_on_one_line_in_200_characters() {
        let body = format!("line one\nline two{}", "x".repeat(500));
        let verdict = check_request(&[secret(1)], &HeaderMap::new(), body.as_bytes(), NOW_S);
        let Verdict::Rejected { request, .. } = verdict else { panic!("expected a rejection") };
        assert_eq!(request.body_preview.chars().count(), BODY_PREVIEW_CHARS_MAX);
        assert!(request.body_preview.starts_with("line one line two"));
        assert_eq!(request.bytes, body.len());
    }

    #[tokio::test]
    async fn server_answers_the_configured_status_when_valid_and_401_when_not() {
        let key = secret(1);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let args = ReceiverArgs { listen: addr, secrets: vec![key.clone()], status: 503, quiet: true };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, args, async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::new();
        let body = b"{\"hello\":1}";
        let ts = now_s();
        let mut valid = client.post(format!("http://{addr}/any/path")).body(body.to_vec());
        for (name, value) in &signed_headers(&key, "evt_9", ts, body) {
            valid = valid.header(name.as_str(), value.to_str().expect("ascii"));
        }
        assert_eq!(valid.send().await.expect("answer").status().as_u16(), 503);
        let invalid = client.post(format!("http://{addr}/")).body("{}").send().await.expect("answer");
        assert_eq!(invalid.status().as_u16(), 401);
        let get = client.get(format!("http://{addr}/")).send().await.expect("answer");
        assert_eq!(get.status().as_u16(), 405);
        stop.send(()).expect("server still running");
        server.await.expect("server task").expect("clean shutdown");
    }

    #[test]
    fn flags_parse_repeated_secrets_and_defaults() {
        use clap::Parser;
        #[derive(clap::Parser, Debug)]
        struct Cli {
            #[command(flatten)]
            args: ReceiverArgs,
        }
        let a = secret(1).to_whsec();
        let b = secret(2).to_whsec();
        let cli = Cli::try_parse_from(["receiver", "--secret", &a, "--secret", &b]).expect("parses");
        assert_eq!(cli.args.secrets, vec![secret(1), secret(2)]);
        assert_eq!(cli.args.status, 204);
        assert_eq!(cli.args.listen, "127.0.0.1:9000".parse::<SocketAddr>().expect("addr"));
        assert!(Cli::try_parse_from(["receiver", "--secret", "nope"]).is_err());
        assert!(Cli::try_parse_from(["receiver", "--secret", &a, "--status", "99"]).is_err());
    }

    mod hostile {
        use axum::body::Body;
        use axum::http::{HeaderName, Request};
        use proptest::prelude::*;
        use tower::ServiceExt;

        use super::*;

        /// Bytes a header value may carry: visible ASCII, space, tab and obs-text.
        fn header_value() -> impl Strategy<Value = Vec<u8>> {
            let byte = prop_oneof![0x20u8..=0x7e, 0x80u8..=0xff, Just(b'\t')];
            prop_oneof![
                proptest::collection::vec(byte, 0..120),
                "[0-9 ]{0,12}".prop_map(String::into_bytes),
                "(v1,[A-Za-z0-9+/=]{0,44} ?){0,20}".prop_map(String::into_bytes),
            ]
        }

        fn request_headers() -> impl Strategy<Value = HeaderMap> {
            let names =
                prop::sample::select(vec!["webhook-id", "webhook-timestamp", "webhook-signature", "webhook-attempt"]);
            proptest::collection::vec((names, header_value()), 0..6).prop_map(|pairs| {
                let mut headers = HeaderMap::new();
                for (name, value) in pairs {
                    let value = HeaderValue::from_bytes(&value).expect("the strategy makes valid header bytes");
                    headers.append(HeaderName::from_static(name), value);
                }
                headers
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn a_forged_request_is_rejected_with_a_reason_on_one_line(
                headers in request_headers(),
                body in proptest::collection::vec(any::<u8>(), 0..300),
                now_s in any::<u64>(),
            ) {
                let verdict = check_request(&[secret(1)], &headers, &body, now_s);
                let Verdict::Rejected { reason, request } = &verdict else {
                    return Err(TestCaseError::fail(format!("a forged request verified: {verdict:?}")));
                };
                prop_assert!(!reason.is_empty());
                prop_assert_eq!(request.bytes, body.len());
                let line = verdict.line();
                prop_assert!(!line.contains('\n') && !line.contains('\r'), "{line:?}");
            }

            #[test]
            fn the_receiver_answers_a_forged_request_401_and_any_other_method_405(
                headers in request_headers(),
                body in proptest::collection::vec(any::<u8>(), 0..300),
                post in any::<bool>(),
            ) {
                let receiver = Arc::new(Receiver { secrets: vec![secret(1)], status: StatusCode::NO_CONTENT, quiet: true });
                let app = Router::new().fallback(handle).with_state(receiver);
                let mut request = Request::builder().method(if post { "POST" } else { "PUT" }).uri("/any");
                for (name, value) in &headers {
                    request = request.header(name, value);
                }
                let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
                let response = runtime
                    .block_on(app.oneshot(request.body(Body::from(body)).expect("request")))
                    .expect("infallible");
                let expected = if post { StatusCode::UNAUTHORIZED } else { StatusCode::METHOD_NOT_ALLOWED };
                prop_assert_eq!(response.status(), expected);
            }
        }
    }
}
