//! Scripted receivers: the simulated customer endpoints, behind the node's
//! webhook `Transport` seam. Each endpoint URL `http://sim/<name>` names a
//! receiver with a [`Behavior`]. Every request is recorded with its sender,
//! shard, token, body, ordering headers and whether its signature verified,
//! for the checkers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookraft_core::signing::{OrderingHeaders, Secret, verify, verify_ordering};
use hookraft_delivery::transport::{SendError, SendFuture, SendOrigin, Transport, WebhookRequest, WebhookResponse};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use crate::clock::EPOCH_MS;
use crate::trace::Trace;

/// How a receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// 200 after a few milliseconds.
    Healthy,
    /// 200 after `ms`; a timeout if that is longer than the attempt's.
    Slow { ms: u64 },
    /// 503 with a chance of `fail_ppm` in a million, else 200.
    Flaky { fail_ppm: u32 },
    /// Refuses connections until true time `until_ms`, then healthy.
    DownUntil { until_ms: u64 },
    /// 410 Gone.
    Gone,
    /// Processes the request and answers 200, but only after the sender's
    /// attempt timed out: the receiver has it, the sender records a failure.
    LateAfterTimeout,
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct SendRecord {
    /// True time it arrived (ms since the run started).
    pub at_ms: u64,
    pub receiver: String,
    pub origin: SendOrigin,
    pub event_id: String,
    pub delivery_id: String,
    /// The receiver's answer, if it gave one (refused connections: none).
    pub answered: Option<u16>,
    /// True time the answer left the receiver (`at_ms` when it gave none).
    pub answered_at_ms: u64,
    /// Whether the answer reached the sender before its attempt timed out.
    pub in_time: bool,
    pub signature_valid: bool,
    /// The body as the receiver got it.
    pub body: Arc<[u8]>,
    /// The `webhook-sequence` header, if the request had one.
    pub sequence: Option<String>,
    /// The `webhook-ordering-key` header, if the request had one.
    pub ordering_key: Option<String>,
}

struct Inner {
    /// Nodes whose process is stalled: their sends wait until they wake.
    stalled: std::collections::BTreeSet<u64>,
    behaviors: BTreeMap<String, Behavior>,
    secrets: BTreeMap<String, Vec<Secret>>,
    sends: Vec<SendRecord>,
    rng: StdRng,
}

/// Every receiver of a run. Cheap to clone; is the nodes' `Transport`.
#[derive(Clone)]
pub struct Receivers {
    inner: Arc<Mutex<Inner>>,
    origin: Instant,
    trace: Trace,
}

impl Receivers {
    pub fn new(seed: u64, origin: Instant, trace: Trace) -> Self {
        let inner = Inner {
            stalled: Default::default(),
            behaviors: BTreeMap::new(),
            secrets: BTreeMap::new(),
            sends: Vec::new(),
            rng: StdRng::seed_from_u64(seed),
        };
        Self { inner: Arc::new(Mutex::new(inner)), origin, trace }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds (or changes) a receiver; `secret` is what its endpoint signs with.
    pub fn set(&self, name: &str, behavior: Behavior, secret: Secret) {
        let mut inner = self.lock();
        inner.behaviors.insert(name.to_string(), behavior);
        inner.secrets.entry(name.to_string()).or_default().push(secret);
    }

    /// Stalls (or wakes) node `id`: a stalled node's requests leave only
    /// when it wakes, as a stopped process's would.
    pub fn set_stalled(&self, id: u64, stalled: bool) {
        let mut inner = self.lock();
        if stalled {
            inner.stalled.insert(id);
        } else {
            inner.stalled.remove(&id);
        }
    }

    pub fn set_behavior(&self, name: &str, behavior: Behavior) {
        self.lock().behaviors.insert(name.to_string(), behavior);
    }

    pub fn behavior(&self, name: &str) -> Option<Behavior> {
        self.lock().behaviors.get(name).copied()
    }

    pub fn url(name: &str) -> String {
        format!("http://sim/{name}")
    }

    /// Every request received so far.
    pub fn sends(&self) -> Vec<SendRecord> {
        self.lock().sends.clone()
    }

    fn header<'a>(request: &'a WebhookRequest, name: &str) -> &'a str {
        Self::header_if(request, name).unwrap_or("")
    }

    fn header_if<'a>(request: &'a WebhookRequest, name: &str) -> Option<&'a str> {
        request.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// Whether an ordered request's ordering headers carry a signature that
    /// verifies (an unordered one has nothing to sign).
    fn ordering_signed(request: &WebhookRequest, secrets: &[&Secret]) -> bool {
        let (Some(key), Some(sequence), Some(epoch)) = (
            Self::header_if(request, "webhook-ordering-key"),
            Self::header_if(request, "webhook-sequence").and_then(|s| s.parse().ok()),
            Self::header_if(request, "webhook-ordering-epoch").and_then(|s| s.parse().ok()),
        ) else {
            return Self::header_if(request, "webhook-sequence").is_none();
        };
        let Ok(timestamp_s) = Self::header(request, "webhook-timestamp").parse::<u64>() else { return false };
        let place = OrderingHeaders { epoch_ms: epoch, sequence, key };
        let signature = Self::header(request, "webhook-ordering-signature");
        verify_ordering(secrets, Self::header(request, "webhook-id"), timestamp_s, &place, signature).is_ok()
    }

    async fn handle(&self, request: WebhookRequest) -> Result<WebhookResponse, SendError> {
        while self.lock().stalled.contains(&request.origin.node_id) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let name = request.url.as_str().strip_prefix("http://sim/").unwrap_or("").to_string();
        let now_ms = self.origin.elapsed().as_millis() as u64;
        let (behavior, valid, roll) = {
            let mut inner = self.lock();
            let behavior = inner.behaviors.get(&name).copied();
            let secrets: Vec<&Secret> = inner.secrets.get(&name).map(|s| s.iter().collect()).unwrap_or_default();
            let valid = verify(
                &secrets,
                Self::header(&request, "webhook-id"),
                Self::header(&request, "webhook-timestamp"),
                Self::header(&request, "webhook-signature"),
                &request.body,
                (EPOCH_MS + now_ms) / 1_000,
            )
            .is_ok()
                && Self::ordering_signed(&request, &secrets);
            let roll = inner.rng.random_range(0..1_000_000u32);
            (behavior, valid, roll)
        };
        let Some(behavior) = behavior else { return Err(SendError::Connect(format!("no receiver {name}"))) };
        let (answer, delay_ms) = match behavior {
            Behavior::Healthy => (Some(200), 2),
            Behavior::Slow { ms } => (Some(200), ms),
            Behavior::Flaky { fail_ppm } => (Some(if roll < fail_ppm { 503 } else { 200 }), 2),
            Behavior::DownUntil { until_ms } if now_ms < until_ms => (None, 0),
            Behavior::DownUntil { .. } => (Some(200), 2),
            Behavior::Gone => (Some(410), 2),
            Behavior::LateAfterTimeout => (Some(200), request.timeout.as_millis() as u64 + 50),
        };
        let in_time = answer.is_some() && Duration::from_millis(delay_ms) < request.timeout;
        let record = SendRecord {
            at_ms: now_ms,
            receiver: name.clone(),
            origin: request.origin,
            event_id: Self::header(&request, "webhook-id").to_string(),
            delivery_id: Self::header(&request, "hookraft-delivery-id").to_string(),
            answered: answer,
            answered_at_ms: now_ms + if answer.is_some() { delay_ms } else { 0 },
            in_time,
            signature_valid: valid,
            body: request.body.clone(),
            sequence: Self::header_if(&request, "webhook-sequence").map(str::to_owned),
            ordering_key: Self::header_if(&request, "webhook-ordering-key").map(str::to_owned),
        };
        let ordered = match (&record.ordering_key, &record.sequence) {
            (Some(key), Some(sequence)) => format!(" {key}#{sequence}"),
            _ => String::new(),
        };
        self.trace.record(format!(
            "send {} n{} s{} t{} {}{ordered} -> {:?}{}",
            record.delivery_id,
            record.origin.node_id,
            record.origin.shard,
            record.origin.token,
            name,
            answer,
            if in_time { "" } else { " late" }
        ));
        self.lock().sends.push(record);
        let Some(status) = answer else { return Err(SendError::Connect("connection refused".into())) };
        if !in_time {
            tokio::time::sleep(request.timeout).await;
            return Err(SendError::Timeout);
        }
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        Ok(WebhookResponse { status, retry_after: None, body_excerpt: String::new() })
    }
}

impl Transport for Receivers {
    fn send(&self, request: WebhookRequest) -> SendFuture<'_> {
        Box::pin(self.handle(request))
    }
}
