//! The load generator: `connections` keep-alive clients post events as fast
//! as the nodes accept them, spread round robin over the nodes, and record
//! each accepted event's id and ingest latency.

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
    /// Bytes of each payload (at least the `{"t":…}` prefix).
    pub payload_bytes: usize,
    /// The event type of event `i`.
    pub event_type: fn(usize) -> String,
    /// When the run started: payloads carry their send time relative to it.
    pub origin: Instant,
}

/// One accepted event.
pub struct Accepted {
    /// Which event of the run (0..events).
    pub index: usize,
    pub event_id: String,
    pub latency: Duration,
}

/// Live counters, read by the progress line.
#[derive(Default)]
pub struct Progress {
    pub accepted: AtomicU64,
    pub failed: AtomicU64,
}

#[derive(Deserialize)]
struct AcceptedBody {
    id: String,
}

/// Posts every event; returns the accepted ones and the number of requests
/// that failed or were not answered 202.
pub async fn run(load: Arc<Load>, progress: Arc<Progress>) -> Result<(Vec<Accepted>, u64)> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(load.connections);
    for connection in 0..load.connections {
        let client =
            reqwest::Client::builder().no_proxy().timeout(REQUEST_TIMEOUT).pool_max_idle_per_host(1).build()?;
        let (load, next, progress) = (load.clone(), next.clone(), progress.clone());
        tasks.push(tokio::spawn(async move { connection_loop(connection, client, &load, &next, &progress).await }));
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
    next: &AtomicUsize,
    progress: &Progress,
) -> (Vec<Accepted>, u64) {
    let url = &load.urls[connection % load.urls.len()];
    let mut accepted = Vec::with_capacity(load.events / load.connections + 1);
    let mut failures = 0u64;
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= load.events {
            return (accepted, failures);
        }
        let sent_ns = u64::try_from(load.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let body = event_body(&(load.event_type)(index), sent_ns, load.payload_bytes);
        let started = Instant::now();
        let sent = client.post(url).header("content-type", "application/json").body(body).send().await;
        let why = match sent {
            Ok(response) if response.status() == reqwest::StatusCode::ACCEPTED => {
                match response.json::<AcceptedBody>().await {
                    Ok(body) => {
                        accepted.push(Accepted { index, event_id: body.id, latency: started.elapsed() });
                        progress.accepted.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(error) => format!("unreadable 202 body: {error}"),
                }
            }
            Ok(response) => {
                let status = response.status();
                format!("{status} {}", response.text().await.unwrap_or_default())
            }
            Err(error) => error.to_string(),
        };
        failures += 1;
        progress.failed.fetch_add(1, Ordering::Relaxed);
        if failures as usize <= FAILURES_PRINTED_MAX {
            eprintln!("event {index} not accepted: {why}");
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
}
