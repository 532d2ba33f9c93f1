//! `hookraft receiver`: a demo endpoint that verifies and prints deliveries,
//! and, with `--state-dir` or `--forward-to`, a receiver that passes each
//! event on exactly once and in order.
//!
//! A newcomer runs it next to `hookraft serve`, registers
//! `http://127.0.0.1:9000/` as an endpoint with the same secret, and watches
//! one line per delivery: verified (with the attempt number) or rejected (with
//! the reason). `--status 503` makes it refuse valid requests, to watch
//! retries and the circuit breaker at work. Without the two flags below it
//! keeps no state between requests.
//!
//! With `--state-dir DIR` (durable) or `--forward-to URL` alone (in memory)
//! it runs a `hookraft-receiver` inbox: each event is `delivered` once (and
//! POSTed to the URL first, when given), a `duplicate` or `stale` one is
//! answered 2xx and not passed on, and a forward that fails is answered
//! 502/503 and not recorded, so hookraft retries it.
//!
//! The verdicts ([`verdict`]) are pure functions of the headers, body,
//! secrets, inbox and current time; this module's shell only reads the
//! clock, serves HTTP, forwards and prints.

mod forward;
mod verdict;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use hookraft_core::signing::Secret;
use hookraft_receiver::{Config, Inbox, MemoryStore, SledStore, Store};

use self::forward::Forwarder;
pub use self::verdict::{Seen, Verdict, check_request};

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
    /// retries, 410 to watch the endpoint get disabled. With --state-dir or
    /// --forward-to it must be a 2xx.
    #[arg(long, default_value_t = 204, value_parser = clap::value_parser!(u16).range(200..=599))]
    pub status: u16,

    /// Print only rejected (and failed) requests, not the others (for load tests).
    #[arg(long)]
    pub quiet: bool,

    /// Remember delivered event ids and each ordering key's newest sequence
    /// in this directory for a week, across restarts: a duplicate or an
    /// older sequence is answered 2xx and not passed on. One endpoint per
    /// directory (sequences are numbered per endpoint).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// POST each new, in-order event (body and webhook headers) to this URL
    /// before answering; if it does not answer 2xx, hookraft is answered
    /// 502/503 and retries. Without --state-dir, what was delivered is
    /// remembered in memory only.
    #[arg(long, value_name = "URL")]
    pub forward_to: Option<reqwest::Url>,
}

fn parse_secret(text: &str) -> Result<Secret, String> {
    Secret::parse(text.trim()).map_err(|e| e.to_string())
}

/// What every request handler needs; read-only.
struct Receiver {
    secrets: Vec<Secret>,
    /// Answer to valid (or handled) requests.
    status: StatusCode,
    quiet: bool,
    /// Deduplicates and keeps keys in order; `None` for the stateless demo.
    inbox: Option<Arc<Inbox<Box<dyn Store>>>>,
    forward: Option<Forwarder>,
    /// Only named in the start-up line.
    state_dir: Option<PathBuf>,
}

impl Receiver {
    fn new(args: ReceiverArgs) -> anyhow::Result<Self> {
        let status = StatusCode::from_u16(args.status).with_context(|| format!("invalid --status {}", args.status))?;
        let stateful = args.state_dir.is_some() || args.forward_to.is_some();
        if stateful && !status.is_success() {
            anyhow::bail!(
                "--status {} would refuse every event that --state-dir or --forward-to handles; give a 2xx",
                args.status
            );
        }
        let store: Option<Box<dyn Store>> = match &args.state_dir {
            Some(dir) => Some(Box::new(
                SledStore::open(dir).with_context(|| format!("opening the receiver state in {}", dir.display()))?,
            )),
            None if stateful => Some(Box::new(MemoryStore::new())),
            None => None,
        };
        let inbox = store.map(|store| Arc::new(Inbox::new(args.secrets.clone(), store, Config::default())));
        let forward = args.forward_to.map(Forwarder::new).transpose()?;
        Ok(Self { secrets: args.secrets, status, quiet: args.quiet, inbox, forward, state_dir: args.state_dir })
    }

    /// What the start-up line says the receiver does.
    fn describe(&self) -> String {
        let done = self.status.as_u16();
        if self.inbox.is_none() {
            return format!("valid requests get {done}, invalid ones 401");
        }
        let forward = self.forward.as_ref().map(|f| format!("forwarded to {} and ", f.url())).unwrap_or_default();
        let kept = match &self.state_dir {
            Some(dir) => format!("in {}", dir.display()),
            None => "in memory".to_string(),
        };
        format!("new events are {forward}recorded {kept}; they, duplicates and stale ones get {done}, invalid ones 401")
    }
}

/// Binds `--listen` and serves until Ctrl-C.
pub async fn run(args: ReceiverArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("could not listen on {}", args.listen))?;
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
    let local = listener.local_addr().context("reading the bound address")?;
    let secrets = args.secrets.len();
    let receiver = Arc::new(Receiver::new(args)?);
    eprintln!("hookraft receiver on http://{local}/ with {secrets} secret(s); {}", receiver.describe());
    let app = Router::new().fallback(handle).with_state(receiver);
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await.context("receiver server failed")
}

async fn handle(State(receiver): State<Arc<Receiver>>, method: Method, headers: HeaderMap, body: Bytes) -> StatusCode {
    if method != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED;
    }
    let verdict = match &receiver.inbox {
        None => check_request(&receiver.secrets, &headers, &body, now_s()),
        Some(inbox) => receive(inbox, receiver.forward.as_ref(), &headers, body).await,
    };
    if !receiver.quiet || verdict.is_problem() {
        // A closed stdout (e.g. `| head`) must not take the receiver down.
        let _ = writeln!(std::io::stdout().lock(), "{}", verdict.line());
    }
    verdict.status(receiver.status)
}

/// Begins the event in the inbox, forwards it when it is new and in order,
/// and records it once the forward succeeded. The store's reads and its
/// fsync run on blocking threads.
async fn receive(
    inbox: &Arc<Inbox<Box<dyn Store>>>,
    forward: Option<&Forwarder>,
    headers: &HeaderMap,
    body: Bytes,
) -> Verdict {
    let request = Seen::read(headers, &body);
    let failed = |reason: String, status, request| Verdict::Failed { reason, status, request };
    let begun = {
        let (inbox, request, body) = (Arc::clone(inbox), request.clone(), body.clone());
        tokio::task::spawn_blocking(move || inbox.begin(&request.request(&body, true), now_s(), |_| None)).await
    };
    let ticket = match begun {
        Ok(Ok(hookraft_receiver::Verdict::Accepted(ticket))) => ticket,
        Ok(Ok(other)) => return verdict::from_inbox(&other, request).expect("only an accepted verdict maps to None"),
        Ok(Err(error)) => return failed(format!("state: {error}"), StatusCode::SERVICE_UNAVAILABLE, request),
        Err(join) => return failed(format!("state: {join}"), StatusCode::SERVICE_UNAVAILABLE, request),
    };
    if let Some(forward) = forward
        && let Err(error) = forward.send(headers, body).await
    {
        // The ticket is dropped unrecorded: hookraft's retry forwards again.
        return failed(error.reason(), error.status(), request);
    }
    let inbox = Arc::clone(inbox);
    match tokio::task::spawn_blocking(move || inbox.commit(ticket, now_s())).await {
        Ok(Ok(())) => Verdict::Delivered { request },
        // Forwarded but not recorded: the retry forwards it again (at least once).
        Ok(Err(error)) => failed(format!("state: {error}"), StatusCode::SERVICE_UNAVAILABLE, request),
        Err(join) => failed(format!("state: {join}"), StatusCode::SERVICE_UNAVAILABLE, request),
    }
}

/// Unix seconds from the system clock.
// The demo receiver is a binary at the edge, outside any node's `Io`; like a
// real receiver it checks timestamps against its own wall clock.
#[allow(clippy::disallowed_methods)]
fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests;
