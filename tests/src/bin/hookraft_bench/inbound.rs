//! The inbound scenario's provider: a Stripe-signed source, and the load
//! generator's requests to `POST /in/{source}` instead of `/v1/events`.
//!
//! Each event is one provider request: a body
//! `{"t":<sent ns>,"id":"evt_…","type":"bench.N","pad":"…"}` (the fleet
//! reads the send time at its head, as for a producer's payload), signed
//! `Stripe-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of "{t}.{body}">`
//! with a fresh `t` per request. The key's HMAC pads are computed once
//! ([`StripeSigner`]); each request costs one HMAC of its body.
//!
//! A provider retries: `retry_percent` of the events ([`retried`]) are
//! posted again, the same body under a fresh signature, after their first
//! post was answered and the connection sent [`REPEAT_LAG_REQUESTS`]
//! more. Each repeat must be answered `{"duplicate": true}` with the first
//! answer's event id; one answered as a new event is a provider event
//! accepted twice. Repeats carry no send time of their own for the fleet:
//! they make no delivery.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use hmac::{Hmac, KeyInit, Mac};
use hookraft_tests::TestNode;
use serde::Deserialize;
use serde_json::json;
use sha2::Sha256;

use crate::load::{Accepted, Connection, Load, Progress, due_after, is_budget_refusal};

/// The source's signing secret: the bench is both the provider and the node's operator.
pub const STRIPE_SECRET: &str = "whsec_hookraft_bench_provider_secret";
/// Requests a connection sends between an event's first post and its repeat.
const REPEAT_LAG_REQUESTS: usize = 8;
/// Failed requests printed at most, per connection.
const FAILURES_PRINTED_MAX: usize = 3;

/// Signs bodies as Stripe does, the key's pads computed once.
#[derive(Clone)]
pub struct StripeSigner {
    keyed: Hmac<Sha256>,
}

impl std::fmt::Debug for StripeSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StripeSigner { key: <redacted> }")
    }
}

impl StripeSigner {
    pub fn new(secret: &str) -> Self {
        let keyed = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
        Self { keyed }
    }

    /// The `Stripe-Signature` value of `body` sent at `t` (unix seconds).
    pub fn header(&self, t: u64, body: &[u8]) -> String {
        let t = t.to_string();
        let mut mac = self.keyed.clone();
        mac.update(t.as_bytes());
        mac.update(b".");
        mac.update(body);
        let tag = mac.finalize().into_bytes();
        let mut value = String::with_capacity(t.len() + 6 + 2 * tag.len());
        value.push_str("t=");
        value.push_str(&t);
        value.push_str(",v1=");
        for byte in tag {
            value.push(char::from(HEX[usize::from(byte >> 4)]));
            value.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        value
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The provider's event id of event `index`: `evt_` and 24 characters, as Stripe's.
pub fn provider_event_id(index: usize) -> String {
    format!("evt_{index:024}")
}

/// `{"t":<sent_ns>,"id":"evt_…","type":…,"pad":"xxx…"}`, `body_bytes` long
/// (or just its fields when that is longer).
pub fn provider_body(index: usize, event_type: &str, sent_ns: u64, body_bytes: usize) -> String {
    let head =
        format!("{{\"t\":{sent_ns},\"id\":\"{}\",\"type\":\"{event_type}\",\"pad\":\"", provider_event_id(index));
    let pad = body_bytes.saturating_sub(head.len() + 2);
    format!("{head}{}\"}}", "x".repeat(pad))
}

/// Whether the provider posts event `index` a second time: exactly
/// `percent` of every 100 consecutive events, spread over them (7 and 100
/// share no factor, so `7 i mod 100` takes every value once per 100).
pub fn retried(index: usize, percent: u32) -> bool {
    (index % 100 * 7) % 100 < percent as usize
}

/// What `POST /in/{source}` answered 200.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Created(String),
    Duplicate(String),
}

fn read_answer(body: &[u8]) -> Result<Answer, String> {
    #[derive(Deserialize)]
    struct Body {
        event_id: String,
        #[serde(default)]
        duplicate: bool,
    }
    let body: Body = serde_json::from_slice(body).map_err(|e| format!("unreadable 200 body: {e}"))?;
    Ok(if body.duplicate { Answer::Duplicate(body.event_id) } else { Answer::Created(body.event_id) })
}

/// Creates the Stripe source on `node`; returns its id.
pub async fn create_source(node: &TestNode) -> Result<String> {
    let body = json!({"scheme": "stripe", "secret": STRIPE_SECRET, "description": "hookraft-bench provider"});
    let (status, _, created) = node.post_json("/v1/sources", &body).await;
    ensure!(status.as_u16() == 201, "creating the source answered {status} {created}");
    created["id"].as_str().map(str::to_owned).context("the created source has no id")
}

/// What became of the repeats, and how long they took.
#[derive(Debug, Default)]
pub struct Repeats {
    pub posted: u64,
    /// Answered `duplicate: true` with the first answer's event id: (due, latency).
    pub answered: Vec<(Duration, Duration)>,
    /// Answered as a new event, or as the duplicate of another one.
    pub created_anew: u64,
    /// Not answered 200.
    pub not_answered: u64,
}

impl Repeats {
    fn merge(&mut self, mut other: Repeats) {
        self.posted += other.posted;
        self.answered.append(&mut other.answered);
        self.created_anew += other.created_anew;
        self.not_answered += other.not_answered;
    }
}

/// An event accepted once, to be posted again.
struct Pending {
    body: String,
    event_id: String,
}

/// Posts every event once, and the retried ones again; returns the accepted
/// events, the first posts not accepted, and the repeats.
pub async fn run(
    load: Arc<Load>,
    signer: StripeSigner,
    retry_percent: u32,
    progress: Arc<Progress>,
) -> Result<(Vec<Accepted>, u64, Repeats)> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(load.connections);
    for connection in 0..load.connections {
        let url = &load.urls[connection % load.urls.len()];
        let client = Connection::to(url).with_context(|| format!("cannot post to {url}"))?;
        let provider = Provider { load: load.clone(), signer: signer.clone(), retry_percent, start };
        let (next, progress) = (next.clone(), progress.clone());
        tasks.push(tokio::spawn(async move { provider.connection_loop(client, &next, &progress).await }));
    }
    let (mut accepted, mut failures, mut repeats) = (Vec::with_capacity(load.events), 0, Repeats::default());
    for task in tasks {
        let (mut part, failed, part_repeats) = task.await.context("an ingress task panicked")?;
        accepted.append(&mut part);
        failures += failed;
        repeats.merge(part_repeats);
    }
    accepted.sort_unstable_by_key(|a| a.index);
    Ok((accepted, failures, repeats))
}

/// One connection's provider.
struct Provider {
    load: Arc<Load>,
    signer: StripeSigner,
    retry_percent: u32,
    start: tokio::time::Instant,
}

impl Provider {
    async fn connection_loop(
        &self,
        mut client: Connection,
        next: &AtomicUsize,
        progress: &Progress,
    ) -> (Vec<Accepted>, u64, Repeats) {
        let load = &*self.load;
        let mut accepted = Vec::with_capacity(load.events / load.connections + 1);
        let (mut failures, mut repeats) = (0u64, Repeats::default());
        // Bounded: a connection queues a repeat only while it holds fewer than the lag.
        let mut pending: VecDeque<Pending> = VecDeque::with_capacity(REPEAT_LAG_REQUESTS + 1);
        let mut drained = false;
        loop {
            if pending.len() > REPEAT_LAG_REQUESTS || (drained && !pending.is_empty()) {
                if let Some(repeat) = pending.pop_front() {
                    self.repeat(&mut client, repeat, &mut repeats, progress).await;
                }
                continue;
            }
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= load.events {
                drained = true;
                if pending.is_empty() {
                    return (accepted, failures, repeats);
                }
                continue;
            }
            match self.first_post(&mut client, index, progress).await {
                Ok((event, body)) => {
                    if retried(index, self.retry_percent) {
                        pending.push_back(Pending { body, event_id: event.event_id.clone() });
                    }
                    accepted.push(event);
                }
                Err(why) => {
                    failures += 1;
                    progress.failed.fetch_add(1, Ordering::Relaxed);
                    if failures as usize <= FAILURES_PRINTED_MAX && !why.is_empty() {
                        eprintln!("provider event {index} not accepted: {why}");
                    }
                }
            }
        }
    }

    /// Posts event `index` for the first time; returns it accepted with its
    /// body, or why not (empty for a budget's refusal, counted but not printed).
    async fn first_post(
        &self,
        client: &mut Connection,
        index: usize,
        progress: &Progress,
    ) -> Result<(Accepted, String), String> {
        let load = &*self.load;
        let due = match load.rate {
            Some(rate) => {
                let due = self.start + due_after(index, rate);
                tokio::time::sleep_until(due).await;
                due.into_std()
            }
            None => Instant::now(),
        };
        let sent_ns = u64::try_from(load.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let body = provider_body(index, &(load.event_type)(index), sent_ns, load.payload_bytes);
        match self.post(client, &body).await {
            Ok((200, answer)) => match read_answer(&answer)? {
                Answer::Created(event_id) => {
                    let latency = due.elapsed();
                    progress.accepted.fetch_add(1, Ordering::Relaxed);
                    progress.answered(latency);
                    let due = due.saturating_duration_since(load.origin);
                    Ok((Accepted { index, event_id, latency, due }, body))
                }
                Answer::Duplicate(event_id) => Err(format!("a first post answered as a duplicate of {event_id}")),
            },
            Ok((503, answer)) if is_budget_refusal(&answer) => {
                progress.refused(load.origin);
                Err(String::new())
            }
            Ok((status, answer)) => Err(format!("{status} {}", String::from_utf8_lossy(&answer))),
            Err(error) => Err(error),
        }
    }

    /// Posts an accepted event again, as a provider that missed the answer does.
    async fn repeat(&self, client: &mut Connection, repeat: Pending, repeats: &mut Repeats, progress: &Progress) {
        repeats.posted += 1;
        let sent = Instant::now();
        match self.post(client, &repeat.body).await {
            Ok((200, answer)) => match read_answer(&answer) {
                Ok(Answer::Duplicate(id)) if id == repeat.event_id => {
                    let latency = sent.elapsed();
                    progress.answered(latency);
                    repeats.answered.push((sent.saturating_duration_since(self.load.origin), latency));
                }
                other => {
                    repeats.created_anew += 1;
                    eprintln!("a repeat of {} was answered {other:?}", repeat.event_id);
                }
            },
            other => {
                repeats.not_answered += 1;
                if repeats.not_answered as usize <= FAILURES_PRINTED_MAX {
                    eprintln!("a repeat of {} was not answered 200: {other:?}", repeat.event_id);
                }
            }
        }
    }

    /// Posts `body` signed with the current unix second.
    async fn post(&self, client: &mut Connection, body: &str) -> Result<(u16, Vec<u8>), String> {
        let now_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let signature = self.signer.header(now_s, body.as_bytes());
        client.post_with(body.as_bytes(), &format!("stripe-signature: {signature}\r\n")).await
    }
}

#[cfg(test)]
mod tests {
    use hookraft_core::inbound::verify::verify;
    use hookraft_core::inbound::{ProviderSecret, Scheme};

    use super::*;

    #[test]
    fn a_signed_body_verifies_as_stripe_only_with_its_secret_and_unchanged() {
        let body = provider_body(7, "bench.7", 123, 200);
        let header = StripeSigner::new(STRIPE_SECRET).header(1_800_000_000, body.as_bytes());
        assert!(header.starts_with("t=1800000000,v1=") && header.len() == "t=1800000000,v1=".len() + 64);
        let check = |secret: &str, body: &str| {
            let secret = ProviderSecret::parse(&Scheme::Stripe, secret).expect("a stripe secret");
            let lookup = |name: &str| (name == "stripe-signature").then_some(header.as_str());
            verify(&Scheme::Stripe, &[&secret], lookup, body.as_bytes(), 1_800_000_010)
        };
        assert!(check(STRIPE_SECRET, &body).is_ok());
        assert!(check("whsec_another_provider_secret", &body).is_err());
        assert!(check(STRIPE_SECRET, &body.replace("bench.7", "bench.8")).is_err());
        assert!(!format!("{:?}", StripeSigner::new(STRIPE_SECRET)).contains(STRIPE_SECRET));
    }

    #[test]
    fn a_provider_body_starts_with_its_send_time_and_names_its_event() {
        let body = provider_body(42, "bench.42", 987_654_321, 200);
        assert!(body.starts_with("{\"t\":987654321,"), "{body}");
        assert_eq!(body.len(), 200);
        let value: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!((&value["id"], &value["type"]), (&json!("evt_000000000000000000000042"), &json!("bench.42")));
        assert_eq!(provider_event_id(42).len(), 28);
        let short = provider_body(1, "bench.1", 1, 10);
        assert!(serde_json::from_str::<serde_json::Value>(&short).is_ok() && short.len() > 10);
    }

    #[test]
    fn the_retried_share_is_exact_per_hundred_events_and_spread() {
        for percent in [0, 1, 10, 25, 100] {
            let count = (0..10_000).filter(|&i| retried(i, percent)).count();
            assert_eq!(count, 100 * percent as usize, "{percent}%");
        }
        let first: Vec<usize> = (0..100).filter(|&i| retried(i, 10)).collect();
        assert_eq!(first.len(), 10);
        assert!(first.windows(2).all(|w| w[1] - w[0] < 30), "not bunched: {first:?}");
    }

    #[test]
    fn answers_tell_a_new_event_from_a_duplicate_and_refuse_what_names_none() {
        assert_eq!(read_answer(br#"{"event_id":"evt_1","deliveries":1}"#), Ok(Answer::Created("evt_1".into())));
        assert_eq!(read_answer(br#"{"event_id":"evt_1","duplicate":true}"#), Ok(Answer::Duplicate("evt_1".into())));
        assert!(read_answer(br#"{"deliveries":1}"#).is_err());
        assert!(read_answer(b"not json").is_err());
    }
}
