//! The chaos run's webhook receiver: counts every delivery per `webhook-id`
//! after checking its signature, notes when each repeated one arrived (to
//! tell which fault it followed), and answers 204 at once.
//!
//! It listens on all interfaces so node containers reach it through the
//! docker bridge gateway. The counts sit behind a `std::sync::Mutex` that is
//! never held across an await.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use hookraft_core::signing::{Secret, verify};

/// What the receiver has seen so far.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Verified deliveries per event id (`webhook-id`).
    pub per_event: BTreeMap<String, u32>,
    /// When each delivery beyond an event's first arrived, since the run's
    /// origin, and the path it came to (which names the endpoint).
    pub repeats: Vec<(Duration, String)>,
    /// Requests whose signature did not verify, with the first reasons.
    pub invalid: u64,
    pub invalid_examples: Vec<String>,
}

/// How many invalid requests are kept as examples for the report.
const INVALID_EXAMPLES_MAX: usize = 5;

struct Inner {
    secret: Secret,
    origin: Instant,
    seen: Mutex<Seen>,
}

#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Inner>,
    pub addr: SocketAddr,
}

impl Receiver {
    /// Binds `0.0.0.0:port` (0 picks a free port) and serves in the background;
    /// arrival times count from `origin`.
    pub async fn start(port: u16, secret: Secret, origin: Instant) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .with_context(|| format!("binding 0.0.0.0:{port}"))?;
        let addr = listener.local_addr().context("reading the receiver's address")?;
        let inner = Arc::new(Inner { secret, origin, seen: Mutex::new(Seen::default()) });
        let app = Router::new().fallback(handle).with_state(inner.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("hookraft-chaos: receiver stopped: {e}");
            }
        });
        Ok(Self { inner, addr })
    }

    pub fn snapshot(&self) -> Seen {
        self.inner.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many of `ids` have been delivered at least once.
    pub fn delivered_among<'a>(&self, ids: impl Iterator<Item = &'a String>) -> usize {
        let seen = self.inner.seen.lock().unwrap_or_else(|p| p.into_inner());
        ids.filter(|id| seen.per_event.contains_key(*id)).count()
    }
}

async fn handle(State(inner): State<Arc<Inner>>, uri: Uri, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let id = header("webhook-id");
    let checked =
        verify(&[&inner.secret], id, header("webhook-timestamp"), header("webhook-signature"), &body, now_s());
    let mut seen = inner.seen.lock().unwrap_or_else(|p| p.into_inner());
    match checked {
        Ok(()) if !id.is_empty() => {
            let count = seen.per_event.entry(id.to_string()).or_default();
            *count += 1;
            if *count > 1 {
                seen.repeats.push((inner.origin.elapsed(), uri.path().to_string()));
            }
            StatusCode::NO_CONTENT
        }
        outcome => {
            seen.invalid += 1;
            if seen.invalid_examples.len() < INVALID_EXAMPLES_MAX {
                let reason = outcome.err().map_or("empty webhook-id".to_string(), |e| e.to_string());
                seen.invalid_examples.push(format!("{id:?}: {reason}"));
            }
            StatusCode::UNAUTHORIZED
        }
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
