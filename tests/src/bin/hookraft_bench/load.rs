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
//! loop's "coordinated omission").

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Deserialize;

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
    /// Latencies (µs) of the requests answered since the progress line last
    /// took them: where in a run the slow ones fell.
    pub recent_latencies_us: std::sync::Mutex<Vec<u64>>,
}

impl Progress {
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
        let client =
            reqwest::Client::builder().no_proxy().timeout(REQUEST_TIMEOUT).pool_max_idle_per_host(1).build()?;
        let (load, next, progress) = (load.clone(), next.clone(), progress.clone());
        tasks.push(tokio::spawn(
            async move { connection_loop(connection, client, &load, start, &next, &progress).await },
        ));
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
    connection: usize,
    client: reqwest::Client,
    load: &Load,
    start: tokio::time::Instant,
    next: &AtomicUsize,
    progress: &Progress,
) -> (Vec<Accepted>, u64) {
    let batch = load.per_request > 1;
    let url = &load.urls[connection % load.urls.len()];
    let url = if batch { format!("{url}/batch") } else { url.clone() };
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
        let sent_ns = u64::try_from(load.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let bodies = indexes.clone().map(|i| event_body(&(load.event_type)(i), sent_ns, load.payload_bytes));
        let body =
            if batch { format!("{{\"events\":[{}]}}", bodies.collect::<Vec<_>>().join(",")) } else { bodies.collect() };
        let sent = client.post(&url).header("content-type", "application/json").body(body).send().await;
        let why = match sent {
            Ok(response) if response.status() == reqwest::StatusCode::ACCEPTED => {
                let read = response.bytes().await.map_err(|e| format!("unreadable 202 body: {e}"));
                match read.and_then(|body| accepted_ids(&body, batch, indexes.len())) {
                    Ok(ids) => {
                        let latency = due.elapsed();
                        progress.accepted.fetch_add(ids.len() as u64, Ordering::Relaxed);
                        progress
                            .recent_latencies_us
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(crate::report::micros(latency));
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
                }
            }
            Ok(response) => {
                let status = response.status();
                format!("{status} {}", response.text().await.unwrap_or_default())
            }
            Err(error) => error.to_string(),
        };
        failures += indexes.len() as u64;
        progress.failed.fetch_add(indexes.len() as u64, Ordering::Relaxed);
        if failures as usize <= FAILURES_PRINTED_MAX * load.per_request {
            eprintln!("events {indexes:?} not accepted: {why}");
        }
    }
}

/// `{"type":…,"payload":{"t":<sent_ns>,"pad":"xxx…"}}` whose payload is
/// `payload_bytes` long (or just the prefix when that is longer).
pub fn event_body(event_type: &str, sent_ns: u64, payload_bytes: usize) -> String {
    let head = format!("{{\"t\":{sent_ns},\"pad\":\"");
    let pad = payload_bytes.saturating_sub(head.len() + 2);
    format!("{{\"type\":\"{event_type}\",\"payload\":{head}{}\"}}}}", "x".repeat(pad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_body_is_json_with_a_payload_of_the_asked_size() {
        let body = event_body("bench.3", 123_456_789, 200);
        let value: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(value["type"], "bench.3");
        assert_eq!(value["payload"]["t"], 123_456_789);
        assert_eq!(serde_json::to_string(&value["payload"]).expect("encodes").len(), 200);
    }

    #[test]
    fn an_open_load_spaces_events_evenly_from_its_start() {
        assert_eq!(due_after(0, 30_000.0), Duration::ZERO);
        assert_eq!(due_after(30_000, 30_000.0), Duration::from_secs(1));
        assert_eq!(due_after(10, 1_000.0), Duration::from_millis(10));
        assert!(due_after(3, 30_000.0) < due_after(4, 30_000.0));
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
