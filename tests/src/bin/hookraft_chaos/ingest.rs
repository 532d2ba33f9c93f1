//! Continuous ingest: a steady rate of events spread over every node, each
//! with its own `Idempotency-Key`, retried on another node with the same key
//! until a node accepts it (`202`, or `200` for an idempotent replay). Every
//! other event goes through `POST /v1/events/batch` (a batch of one, its key
//! in the body), so the batch route meets the same faults.
//!
//! What it records is what the report needs: every accepted event (its id
//! and when the answer came), every failed attempt (when, on which node,
//! why), and events that were refused outright or given up on.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::time::MissedTickBehavior;

/// Most failed attempts whose time is kept; more are only counted.
const FAILURES_RECORDED_MAX: usize = 500_000;
/// Most attempts for one event, whatever its deadline.
const ATTEMPTS_PER_EVENT_MAX: u32 = 10_000;
/// Pause before trying the next node after a failure.
const NEXT_NODE_PAUSE: Duration = Duration::from_millis(10);
/// Backoff after every node failed once: doubles from the base up to the cap.
const ROUND_BACKOFF_BASE: Duration = Duration::from_millis(50);
const ROUND_BACKOFF_CAP: Duration = Duration::from_millis(1_000);
/// Most refused events whose answers are kept for the report.
const REJECTIONS_KEPT_MAX: usize = 20;

/// How the load is shaped.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Base URLs of the nodes, as seen from this host.
    pub nodes: Vec<String>,
    pub token: String,
    pub rate_per_s: f64,
    /// Events being posted at once; a tick that finds no room is skipped.
    pub in_flight_max: usize,
    pub request_timeout: Duration,
    /// How long one event is retried before it is given up.
    pub give_up_after: Duration,
    /// Event `seq` goes to `endpoints[seq % len]`.
    pub endpoints: Vec<String>,
    /// Makes idempotency keys unique across runs against one deployment.
    pub run_id: String,
}

/// One accepted event.
#[derive(Debug, Clone)]
pub struct Accept {
    pub seq: u64,
    pub event_id: String,
    /// When the accepting answer arrived, since the run's origin.
    pub at: Duration,
}

/// One failed attempt.
#[derive(Debug, Clone)]
pub struct Failure {
    pub at: Duration,
    pub node: usize,
    pub reason: String,
}

/// Everything ingest recorded; shared with the scheduler's tasks.
#[derive(Debug)]
pub struct IngestLog {
    pub origin: Instant,
    pub accepted: Mutex<Vec<Accept>>,
    pub failures: Mutex<Vec<Failure>>,
    pub failures_total: AtomicU64,
    pub rejected: Mutex<Vec<String>>,
    pub rejected_total: AtomicU64,
    pub gave_up: AtomicU64,
    /// Ticks skipped because `in_flight_max` events were already in flight.
    pub skipped: AtomicU64,
    pub offered: AtomicU64,
}

impl IngestLog {
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            accepted: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
            failures_total: AtomicU64::new(0),
            rejected: Mutex::new(Vec::new()),
            rejected_total: AtomicU64::new(0),
            gave_up: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            offered: AtomicU64::new(0),
        }
    }

    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn accept(&self, seq: u64, event_id: String) {
        let at = self.now();
        self.accepted.lock().unwrap_or_else(|p| p.into_inner()).push(Accept { seq, event_id, at });
    }

    fn fail(&self, node: usize, reason: String) {
        let at = self.now();
        self.failures_total.fetch_add(1, Ordering::Relaxed);
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() < FAILURES_RECORDED_MAX {
            failures.push(Failure { at, node, reason });
        }
    }

    fn reject(&self, what: String) {
        self.rejected_total.fetch_add(1, Ordering::Relaxed);
        let mut rejected = self.rejected.lock().unwrap_or_else(|p| p.into_inner());
        if rejected.len() < REJECTIONS_KEPT_MAX {
            rejected.push(what);
        }
    }

    pub fn accepted_count(&self) -> usize {
        self.accepted.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Posts events at `config.rate_per_s` until `stop` is set, then waits for
/// the events in flight (each bounded by `give_up_after`).
pub async fn run(config: Arc<IngestConfig>, log: Arc<IngestLog>, stop: Arc<AtomicBool>) {
    let client = match reqwest::Client::builder()
        .timeout(config.request_timeout)
        .connect_timeout(config.request_timeout)
        .pool_max_idle_per_host(config.in_flight_max)
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            log.reject(format!("cannot build the HTTP client: {e}"));
            return;
        }
    };
    let permits = Arc::new(Semaphore::new(config.in_flight_max));
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / config.rate_per_s));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut seq: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        log.offered.fetch_add(1, Ordering::Relaxed);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            log.skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let (config, log, client) = (config.clone(), log.clone(), client.clone());
        tokio::spawn(async move {
            post_until_accepted(&config, &log, &client, seq).await;
            drop(permit);
        });
        seq += 1;
    }
    // Every permit back means every event task has finished.
    let all = u32::try_from(config.in_flight_max).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
}

/// What one attempt's answer means for the event.
enum Answer {
    Accepted(String),
    Retry(String),
    Refused(String),
}

async fn post_until_accepted(config: &IngestConfig, log: &IngestLog, client: &reqwest::Client, seq: u64) {
    let key = format!("chaos-{}-{seq}", config.run_id);
    let endpoint = &config.endpoints[(seq % config.endpoints.len() as u64) as usize];
    let event = json!({
        "type": "chaos.event",
        "payload": {"seq": seq, "run": config.run_id},
        "endpoint_ids": [endpoint],
    });
    let batch = seq % 2 == 1;
    let (path, body) = if batch {
        let mut event = event;
        event["idempotency_key"] = Value::from(key.clone());
        ("/v1/events/batch", json!({"events": [event]}))
    } else {
        ("/v1/events", event)
    };
    let first = Instant::now();
    let nodes = config.nodes.len();
    for attempt in 0..ATTEMPTS_PER_EVENT_MAX {
        let node = (seq as usize + attempt as usize) % nodes;
        let mut request = client.post(format!("{}{path}", config.nodes[node])).bearer_auth(&config.token);
        if !batch {
            request = request.header("Idempotency-Key", &key);
        }
        let sent = request.json(&body).send().await;
        match classify(sent, batch).await {
            Answer::Accepted(id) => return log.accept(seq, id),
            Answer::Refused(why) => return log.reject(format!("event {seq} on node #{}: {why}", node + 1)),
            Answer::Retry(why) => log.fail(node, why),
        }
        if first.elapsed() > config.give_up_after {
            log.gave_up.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let round = attempt as usize / nodes;
        let pause = if (attempt as usize + 1).is_multiple_of(nodes) {
            ROUND_BACKOFF_BASE.saturating_mul(1 << round.min(10)).min(ROUND_BACKOFF_CAP)
        } else {
            NEXT_NODE_PAUSE
        };
        tokio::time::sleep(pause).await;
    }
    log.gave_up.fetch_add(1, Ordering::Relaxed);
}

/// What one answer means; `batch` answers carry the event as their one result.
async fn classify(sent: Result<reqwest::Response, reqwest::Error>, batch: bool) -> Answer {
    let response = match sent {
        Ok(response) => response,
        Err(e) if e.is_timeout() => return Answer::Retry("timeout".into()),
        Err(e) if e.is_connect() => return Answer::Retry("connect".into()),
        Err(e) => return Answer::Retry(format!("transport: {}", root_cause(&e))),
    };
    let status = response.status();
    let text = match response.text().await {
        Ok(text) => text,
        Err(e) => return Answer::Retry(format!("{status}, body unreadable: {e}")),
    };
    match status {
        StatusCode::OK | StatusCode::ACCEPTED => {
            let body = serde_json::from_str::<Value>(&text).unwrap_or_default();
            let event = if batch { &body["events"][0] } else { &body };
            let created = !batch || matches!(event["status"].as_u64(), Some(200 | 202));
            let id = event["id"].as_str().filter(|_| created).map(str::to_string);
            match id {
                Some(id) if id.starts_with("evt_") => Answer::Accepted(id),
                _ => Answer::Refused(format!("{status} without an event id: {text}")),
            }
        }
        // A node that lags behind may not know the endpoint yet; another may.
        StatusCode::UNPROCESSABLE_ENTITY if text.contains("endpoint") => Answer::Retry(format!("{status}")),
        s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT => {
            Answer::Retry(format!("{}", s.as_u16()))
        }
        s => Answer::Refused(format!("{s}: {text}")),
    }
}

/// The innermost error, without the request URL the outer ones repeat.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}
