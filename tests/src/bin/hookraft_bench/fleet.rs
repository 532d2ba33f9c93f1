//! The receiver fleet: one axum server on loopback standing in for every
//! customer endpoint of a scenario, counting what arrives per endpoint and
//! `webhook-id`, and measuring end-to-end latency.
//!
//! An endpoint is the path `/{behaviour}/{index}`:
//! - `ok`: answers 200 at once;
//! - `hang`: holds the request for [`HANG_FOR`], far past any attempt timeout;
//! - `fail`: answers 500;
//! - `down`: answers 503 until [`Fleet::bring_up`], then 200.
//!
//! Every payload the load generator sends starts with `{"t":<ns>` (when it
//! was posted, in nanoseconds since the fleet's origin), so the first arrival
//! of each `(endpoint, webhook-id)` yields one end-to-end latency sample.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// How long a `hang` endpoint holds a request.
pub const HANG_FOR: Duration = Duration::from_secs(120);

/// What the fleet saw, shared with its handlers.
pub struct Fleet {
    origin: Instant,
    down: AtomicBool,
    /// Requests that arrived at `ok` and `down` endpoints, duplicates included.
    pub received: AtomicU64,
    /// Requests that arrived at `hang` and `fail` endpoints.
    pub received_unhealthy: AtomicU64,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    /// Arrivals per (endpoint index, webhook-id) at `ok` and `down` endpoints.
    per_delivery: HashMap<(u32, Box<str>), u32>,
    /// Send time (since the origin) and end-to-end latency of each first
    /// arrival, in microseconds.
    latencies_us: Vec<(u64, u64)>,
    /// When the latest first arrival came, since the origin.
    last_first_arrival: Duration,
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
            ..Seen::default()
        };
        let fleet = Arc::new(Fleet {
            origin,
            down: AtomicBool::new(true),
            received: AtomicU64::new(0),
            received_unhealthy: AtomicU64::new(0),
            seen: Mutex::new(seen),
        });
        let app = Router::new().route("/{behaviour}/{index}", post(receive)).with_state(fleet.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("bind the receiver fleet")?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("receiver fleet stopped: {error}");
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

    /// When the latest first arrival came, since the origin.
    pub fn last_first_arrival(&self) -> Duration {
        self.seen().last_first_arrival
    }

    fn record(&self, endpoint: u32, webhook_id: &str, body: &[u8]) {
        let now = self.origin.elapsed();
        let mut seen = self.seen();
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
}

async fn receive(
    State(fleet): State<Arc<Fleet>>,
    Path((behaviour, index)): Path<(String, u32)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let webhook_id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
    match behaviour.as_str() {
        "ok" => {
            fleet.received.fetch_add(1, Ordering::Relaxed);
            fleet.record(index, webhook_id, &body);
            StatusCode::OK
        }
        "down" if fleet.down.load(Ordering::SeqCst) => StatusCode::SERVICE_UNAVAILABLE,
        "down" => {
            fleet.received.fetch_add(1, Ordering::Relaxed);
            fleet.record(index, webhook_id, &body);
            StatusCode::OK
        }
        "hang" => {
            fleet.received_unhealthy.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(HANG_FOR).await;
            StatusCode::OK
        }
        "fail" => {
            fleet.received_unhealthy.fetch_add(1, Ordering::Relaxed);
            StatusCode::INTERNAL_SERVER_ERROR
        }
        _ => StatusCode::NOT_FOUND,
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
    use super::*;

    #[test]
    fn sent_time_is_read_from_the_start_of_the_payload_only() {
        assert_eq!(sent_ns(br#"{"t":12345,"pad":"x"}"#), Some(12345));
        assert_eq!(sent_ns(br#"{"pad":"x","t":1}"#), None);
        assert_eq!(sent_ns(br#"{"t":"#), None);
    }
}
