//! The receiver served over HTTP: stateless, and with `--state-dir` and
//! `--forward-to` against a small local service.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};

use axum::http::HeaderValue;
use hookraft_core::signing;

use super::*;

fn secret(byte: u8) -> Secret {
    Secret::from_key(vec![byte; 32]).expect("valid key length")
}

fn args(listen: SocketAddr, secret: &Secret) -> ReceiverArgs {
    ReceiverArgs { listen, secrets: vec![secret.clone()], status: 204, quiet: true, state_dir: None, forward_to: None }
}

/// A receiver served on port 0 until `stop` is sent.
struct Running {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start(configure: impl FnOnce(ReceiverArgs) -> ReceiverArgs, secret: &Secret) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, configure(args(addr, secret)), async {
        let _ = stopped.await;
    }));
    Running { addr, stop, server }
}

impl Running {
    async fn stop(self) {
        self.stop.send(()).expect("server still running");
        self.server.await.expect("server task").expect("clean shutdown");
    }
}

/// POSTs a request signed now, ordered when `ordering` is given; the status.
async fn send(addr: SocketAddr, secret: &Secret, id: &str, ordering: Option<(&str, u32)>, body: &str) -> u16 {
    let ts = now_s();
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/hooks"))
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signing::sign(secret, id, ts, body.as_bytes()))
        .header("webhook-attempt", "1")
        .body(body.to_owned());
    if let Some((key, sequence)) = ordering {
        let place = signing::OrderingHeaders { epoch_ms: 1_000, sequence, key };
        request = request
            .header("webhook-ordering-key", key)
            .header("webhook-sequence", sequence.to_string())
            .header("webhook-ordering-epoch", "1000")
            .header("webhook-ordering-signature", signing::ordering_signature_header(&[secret], id, ts, &place));
    }
    request.send().await.expect("answer").status().as_u16()
}

#[tokio::test]
async fn server_answers_the_configured_status_when_valid_and_401_when_not() {
    let key = secret(1);
    let running = start(|a| ReceiverArgs { status: 503, ..a }, &key).await;
    let addr = running.addr;
    assert_eq!(send(addr, &key, "evt_9", None, "{\"hello\":1}").await, 503);
    // Stateless: the same event again gets the same answer.
    assert_eq!(send(addr, &key, "evt_9", None, "{\"hello\":1}").await, 503);
    let client = reqwest::Client::new();
    let invalid = client.post(format!("http://{addr}/")).body("{}").send().await.expect("answer");
    assert_eq!(invalid.status().as_u16(), 401);
    let get = client.get(format!("http://{addr}/")).send().await.expect("answer");
    assert_eq!(get.status().as_u16(), 405);
    running.stop().await;
}

/// The local service behind `--forward-to`: records what it took, answers
/// `status`.
#[derive(Default)]
struct Service {
    taken: Mutex<Vec<(String, Option<String>, String)>>,
    status: AtomicU16,
}

async fn service(State(service): State<Arc<Service>>, headers: HeaderMap, body: String) -> StatusCode {
    let status = StatusCode::from_u16(service.status.load(Ordering::SeqCst)).expect("a valid status");
    if status.is_success() {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let id = header("webhook-id").unwrap_or_default();
        service.taken.lock().expect("not poisoned").push((id, header("webhook-sequence"), body));
    }
    status
}

async fn start_service() -> (Arc<Service>, reqwest::Url) {
    let state = Arc::new(Service { status: AtomicU16::new(200), ..Service::default() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/events", listener.local_addr().expect("addr")).parse().expect("url");
    let app = Router::new().fallback(service).with_state(Arc::clone(&state));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, url)
}

fn taken_ids(service: &Service) -> Vec<String> {
    service.taken.lock().expect("not poisoned").iter().map(|(id, _, _)| id.clone()).collect()
}

#[tokio::test]
async fn with_state_and_forwarding_each_event_is_passed_on_once_in_order_and_survives_a_restart() {
    let key = secret(1);
    let (service, url) = start_service().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let configure = |a: ReceiverArgs| ReceiverArgs {
        state_dir: Some(dir.path().to_path_buf()),
        forward_to: Some(url.clone()),
        ..a
    };
    let running = start(configure, &key).await;
    let addr = running.addr;

    assert_eq!(send(addr, &key, "evt_1", Some(("cus_1", 1)), "{\"n\":1}").await, 204, "delivered");
    assert_eq!(send(addr, &key, "evt_1", Some(("cus_1", 1)), "{\"n\":1}").await, 204, "duplicate");
    assert_eq!(send(addr, &key, "evt_3", Some(("cus_1", 3)), "{\"n\":3}").await, 204, "delivered");
    assert_eq!(send(addr, &key, "evt_2", Some(("cus_1", 2)), "{\"n\":2}").await, 204, "stale, not retried");
    assert_eq!(taken_ids(&service), ["evt_1", "evt_3"]);
    let (_, sequence, body) = service.taken.lock().expect("not poisoned")[1].clone();
    assert_eq!((sequence.as_deref(), body.as_str()), (Some("3"), "{\"n\":3}"));

    // The service fails: hookraft is told to retry, and nothing is recorded.
    service.status.store(500, Ordering::SeqCst);
    assert_eq!(send(addr, &key, "evt_4", Some(("cus_1", 4)), "{\"n\":4}").await, 502);
    service.status.store(200, Ordering::SeqCst);
    assert_eq!(send(addr, &key, "evt_4", Some(("cus_1", 4)), "{\"n\":4}").await, 204, "the retry");
    assert_eq!(taken_ids(&service), ["evt_1", "evt_3", "evt_4"]);
    running.stop().await;

    let running = start(configure, &key).await;
    for (id, sequence) in [("evt_1", 1), ("evt_4", 4), ("evt_2", 2)] {
        assert_eq!(send(running.addr, &key, id, Some(("cus_1", sequence)), "{}").await, 204, "{id} after restart");
    }
    assert_eq!(send(running.addr, &key, "evt_5", Some(("cus_1", 5)), "{\"n\":5}").await, 204);
    assert_eq!(taken_ids(&service), ["evt_1", "evt_3", "evt_4", "evt_5"]);
    let forged = reqwest::Client::new().post(format!("http://{}/", running.addr)).body("{}").send().await;
    assert_eq!(forged.expect("answer").status().as_u16(), 401);
    running.stop().await;
}

#[tokio::test]
async fn an_unreachable_service_gets_a_503_and_the_event_is_forwarded_once_it_is_back() {
    let key = secret(1);
    // A port nobody listens on any more.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let closed_url: reqwest::Url = format!("http://{}/", closed.local_addr().expect("addr")).parse().expect("url");
    drop(closed);
    let running = start(|a| ReceiverArgs { forward_to: Some(closed_url), ..a }, &key).await;
    assert_eq!(send(running.addr, &key, "evt_1", None, "{}").await, 503);
    running.stop().await;

    // In memory only: what a receiver without --state-dir delivered is
    // forgotten when it stops, and within a run duplicates are still caught.
    let (service, url) = start_service().await;
    let running = start(|a| ReceiverArgs { forward_to: Some(url), ..a }, &key).await;
    assert_eq!(send(running.addr, &key, "evt_1", None, "{}").await, 204);
    assert_eq!(send(running.addr, &key, "evt_1", None, "{}").await, 204);
    assert_eq!(taken_ids(&service), ["evt_1"]);
    running.stop().await;
}

#[tokio::test]
async fn a_state_dir_without_forwarding_answers_duplicates_and_stale_events_without_error() {
    let key = secret(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(|a| ReceiverArgs { state_dir: Some(dir.path().to_path_buf()), status: 200, ..a }, &key).await;
    assert_eq!(send(running.addr, &key, "evt_2", Some(("k", 2)), "{}").await, 200);
    assert_eq!(send(running.addr, &key, "evt_2", Some(("k", 2)), "{}").await, 200);
    assert_eq!(send(running.addr, &key, "evt_1", Some(("k", 1)), "{}").await, 200);
    let half = reqwest::Client::new()
        .post(format!("http://{}/", running.addr))
        .header("webhook-sequence", "3")
        .send()
        .await
        .expect("answer");
    assert_eq!(half.status().as_u16(), 401);
    running.stop().await;
}

#[tokio::test]
async fn a_non_2xx_status_with_state_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let args = ReceiverArgs { status: 503, state_dir: Some(dir.path().to_path_buf()), ..args(addr, &secret(1)) };
    let error = serve(listener, args, async {}).await.expect_err("refused");
    assert!(error.to_string().contains("--status 503"), "{error}");
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
    assert_eq!((cli.args.state_dir, cli.args.forward_to), (None, None));
    assert!(Cli::try_parse_from(["receiver", "--secret", "nope"]).is_err());
    assert!(Cli::try_parse_from(["receiver", "--secret", &a, "--status", "99"]).is_err());
    let cli = Cli::try_parse_from([
        "receiver",
        "--secret",
        &a,
        "--state-dir",
        "state",
        "--forward-to",
        "http://127.0.0.1:3000/hooks",
    ])
    .expect("parses");
    assert_eq!(cli.args.state_dir, Some(PathBuf::from("state")));
    assert_eq!(cli.args.forward_to.map(|u| u.to_string()), Some("http://127.0.0.1:3000/hooks".into()));
    assert!(Cli::try_parse_from(["receiver", "--secret", &a, "--forward-to", "not a url"]).is_err());
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
        fn the_receiver_stateless_or_not_answers_a_forged_request_401_and_any_other_method_405(
            headers in request_headers(),
            body in proptest::collection::vec(any::<u8>(), 0..300),
            post in any::<bool>(),
            stateful in any::<bool>(),
        ) {
            let mut args = args("127.0.0.1:0".parse().expect("addr"), &secret(1));
            if stateful {
                args.forward_to = Some("http://127.0.0.1:9/".parse().expect("url"));
            }
            let receiver = Arc::new(Receiver::new(args).expect("a valid receiver"));
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
