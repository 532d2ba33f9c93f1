//! Inbound traffic: the operator creates one or two sources (Stripe, with
//! an entity key and a version, and sometimes GitHub or Standard Webhooks)
//! and one or two endpoints that receive from them; a provider posts
//! signed events to `POST /in/{source}` through random nodes during the
//! faults, retrying each on other nodes until one answers 200 (a 404 from
//! a node that has not applied the source yet, a 429 over a rate limit,
//! a 503 under faults), and posts
//! some of them again later (the same provider event id, the same bytes),
//! sometimes from two nodes at once.
//!
//! Requests are signed here as each provider signs them, with the `hmac`
//! and `sha2` crates, independently of hookraft's verification. Every
//! choice comes from a generator of its own, so the rest of the workload
//! draws what it drew before. The ledger keeps every provider event posted
//! and every 200 answer (the event it named); an acknowledged event joins
//! the producers' (`Ledger::acked`, with its payload) for the checkers
//! that hold events and receivers to what was posted.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use hookraft_core::signing::Secret;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::time::Instant;

use crate::clock::EPOCH_MS;
use crate::cluster::{Cluster, call, call_raw, elapsed_ms};
use crate::receivers::{Behavior, Receivers};
use crate::trace::Trace;
use crate::workload::{Ledger, SimEndpoint, draw_ordering, endpoint_body, pick_node_with};

/// Mixed into the workload's seed for the provider's generator.
pub const INBOUND_SEED_SALT: u64 = 0x696e_626f_756e_6421;
/// Chance in a thousand, per step, that the provider posts a new event.
const NEW_PER_MILLE: u32 = 40;
/// Chance in a thousand, per step, that it posts a recent one again.
const REPEAT_PER_MILLE: u32 = 15;
/// Chance in a hundred that a repeat goes to two nodes at once.
const CONCURRENT_PERCENT: u32 = 35;
/// Recent provider events a repeat is drawn from.
const RECENT_MAX: usize = 16;
/// Nodes one post tries before the provider gives up on it.
const TRIES_MAX: u32 = 20;
/// Wait between two tries of one post.
const RETRY_MS: u64 = 300;
/// The rate limit a second source has on each node, half the time.
const RATE_LIMIT_PER_S: u32 = 2;
/// Entities the Stripe events are about (`cus_1`…): few, so one entity's
/// versions are in flight together and the stale guard has work.
const ENTITIES: usize = 3;

const STRIPE_TYPES: [&str; 3] = ["customer.updated", "invoice.paid", "charge.refunded"];
const GITHUB_TYPES: [&str; 2] = ["push", "pull_request"];
const STANDARD_TYPES: [&str; 2] = ["user.created", "user.updated"];

/// How a source's provider signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Stripe,
    Github,
    StandardWebhooks,
}

impl Scheme {
    fn name(self) -> &'static str {
        match self {
            Scheme::Stripe => "stripe",
            Scheme::Github => "github",
            Scheme::StandardWebhooks => "standard-webhooks",
        }
    }
}

/// A source the operator created, and the secret its provider signs with.
#[derive(Clone)]
pub struct SimSource {
    pub id: String,
    pub scheme: Scheme,
    secret: String,
}

impl std::fmt::Debug for SimSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SimSource({} {}, <secret redacted>)", self.id, self.scheme.name())
    }
}

/// One provider event: every post of it sends these bytes.
#[derive(Debug, Clone)]
pub struct ProviderEvent {
    pub source: usize,
    pub provider_id: String,
    pub event_type: String,
    pub body: String,
    /// The entity it is about (Stripe's), also its ordering key.
    pub entity_key: Option<String>,
}

/// What the ledger knows of one provider event.
#[derive(Debug, Clone, Default)]
pub struct InboundPost {
    pub event_type: String,
    pub body: String,
    /// Posts begun: the first and every repeat, each tried until answered.
    pub posts: u32,
    /// The event id each 200 answer named, in the order answered.
    pub answers: Vec<String>,
    /// Each answer that created the event: its id and the deliveries it counted.
    pub created: Vec<(String, u64)>,
    /// Answers a well-signed request must never get (400, 401, 403, 413).
    pub refused: Vec<u16>,
    /// Posts that ran out of tries.
    pub gave_up: u32,
}

/// The provider and the operator's side of inbound traffic.
pub struct Provider {
    rng: StdRng,
    pub sources: Vec<SimSource>,
    /// Endpoints receiving from the sources (never producers' events).
    pub endpoints: Vec<SimEndpoint>,
    recent: VecDeque<ProviderEvent>,
    next: u64,
    /// Each entity's last version.
    versions: [i64; ENTITIES],
    /// True time's origin: the provider signs with true time.
    origin: Option<Instant>,
    trace: Trace,
}

impl Provider {
    pub fn new(seed: u64, trace: Trace) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed ^ INBOUND_SEED_SALT),
            sources: Vec::new(),
            endpoints: Vec::new(),
            recent: VecDeque::new(),
            next: 0,
            versions: [0; ENTITIES],
            origin: None,
            trace,
        }
    }

    /// The operator creates the sources and the endpoints that receive
    /// from them, through the leader: a Stripe source, sometimes a second
    /// one; the first endpoint receives from every source, a second (if
    /// any) from the first only, perhaps of a few types.
    pub async fn setup(
        &mut self,
        cluster: &Cluster,
        receivers: &Receivers,
        origin: Instant,
        down_until_ms: u64,
    ) -> anyhow::Result<()> {
        self.origin = Some(origin);
        let mut schemes = vec![Scheme::Stripe];
        match self.rng.random_range(0..3) {
            0 => {}
            1 => schemes.push(Scheme::Github),
            _ => schemes.push(Scheme::StandardWebhooks),
        }
        for scheme in schemes {
            let secret = self.secret_for(scheme);
            let mut body = json!({"scheme": scheme.name(), "secret": secret});
            if scheme == Scheme::Stripe {
                body["entity_key"] = json!("/data/object/id");
                body["version"] = json!("/data/object/version");
            } else if self.rng.random_bool(0.5) {
                // Low enough that bursts and concurrent repeats get 429s,
                // which the provider retries like any failure.
                body["rate_limit_per_s"] = json!(RATE_LIMIT_PER_S);
            }
            let answer = call_leader(cluster, "/v1/sources", body).await?;
            let id = answer["id"].as_str().ok_or_else(|| anyhow::anyhow!("create source: {answer}"))?.to_string();
            self.trace.record(format!("provider source {id} {}", scheme.name()));
            self.sources.push(SimSource { id, scheme, secret });
        }
        let count = self.rng.random_range(1..=2);
        for i in 0..count {
            let behavior = match self.rng.random_range(0..8) {
                0 => Behavior::Slow { ms: 300 },
                1 => Behavior::Flaky { fail_ppm: 300_000 },
                2 => Behavior::DownUntil { until_ms: down_until_ms },
                3 => Behavior::LateAfterTimeout,
                _ => Behavior::Healthy,
            };
            let name = format!("in{i}");
            let mut key = [0u8; 32];
            rand::Rng::fill_bytes(&mut self.rng, &mut key);
            let secret = Secret::from_key(key.to_vec()).map_err(|e| anyhow::anyhow!("{e}"))?;
            receivers.set(&name, behavior, secret.clone());
            let sources: Vec<String> = if i == 0 {
                self.sources.iter().map(|s| s.id.clone()).collect()
            } else {
                vec![self.sources[0].id.clone()]
            };
            let types: Vec<String> = if i > 0 && self.rng.random_bool(0.5) {
                STRIPE_TYPES[..2].iter().map(|t| t.to_string()).collect()
            } else {
                Vec::new()
            };
            let ordering = draw_ordering(&mut self.rng);
            let mut body = endpoint_body(&name, &secret, &types, ordering);
            body["sources"] = json!(sources);
            let answer = call_leader(cluster, "/v1/endpoints", body).await?;
            let id = answer["id"].as_str().ok_or_else(|| anyhow::anyhow!("register endpoint: {answer}"))?;
            self.trace.record(format!("provider endpoint {id} {name} {behavior:?} {sources:?} ordering {ordering:?}"));
            self.endpoints.push(SimEndpoint {
                id: id.to_string(),
                receiver: name,
                event_types: types,
                ordering,
                sources,
            });
        }
        Ok(())
    }

    /// A secret as the scheme's providers show it.
    fn secret_for(&mut self, scheme: Scheme) -> String {
        let mut key = [0u8; 24];
        rand::Rng::fill_bytes(&mut self.rng, &mut key);
        match scheme {
            Scheme::Stripe => format!("whsec_{}", hex(&key[..16])),
            Scheme::Github => hex(&key[..20]),
            Scheme::StandardWebhooks => format!("whsec_{}", BASE64.encode(key)),
        }
    }

    /// One step: perhaps a new provider event, perhaps a repeat.
    pub fn step(&mut self, cluster: &Cluster, ledger: &Arc<Mutex<Ledger>>) {
        if self.sources.is_empty() {
            return;
        }
        let roll = self.rng.random_range(0..1_000);
        if roll < NEW_PER_MILLE {
            let event = self.new_event();
            self.post(cluster, &event, ledger, "post");
            if self.recent.len() == RECENT_MAX {
                self.recent.pop_front();
            }
            self.recent.push_back(event);
        } else if roll < NEW_PER_MILLE + REPEAT_PER_MILLE && !self.recent.is_empty() {
            let event = self.recent[self.rng.random_range(0..self.recent.len())].clone();
            self.post(cluster, &event, ledger, "repeat");
            if self.rng.random_range(0..100) < CONCURRENT_PERCENT {
                self.post(cluster, &event, ledger, "repeat-concurrent");
            }
        }
    }

    /// The next provider event, of a source the generator picks.
    fn new_event(&mut self) -> ProviderEvent {
        self.next += 1;
        let n = self.next;
        let source = self.rng.random_range(0..self.sources.len());
        let note = "naïve café ☕";
        match self.sources[source].scheme {
            Scheme::Stripe => {
                let entity = self.rng.random_range(0..ENTITIES);
                self.versions[entity] += 1;
                let event_type = STRIPE_TYPES[self.rng.random_range(0..STRIPE_TYPES.len())].to_string();
                let provider_id = format!("evt_sim{n}");
                let entity_key = format!("cus_{}", entity + 1);
                let object = json!({"id": entity_key, "version": self.versions[entity]});
                let body = json!({"id": provider_id, "type": event_type, "data": {"object": object}, "note": note});
                ProviderEvent { source, provider_id, event_type, body: body.to_string(), entity_key: Some(entity_key) }
            }
            Scheme::Github => {
                let guid: u128 = self.rng.random();
                let provider_id =
                    format!("{:08x}-{:04x}-{:012x}", guid >> 96, (guid >> 80) & 0xffff, guid & 0xffff_ffff_ffff);
                let event_type = GITHUB_TYPES[self.rng.random_range(0..GITHUB_TYPES.len())].to_string();
                let body = json!({"action": "opened", "number": n, "note": note}).to_string();
                ProviderEvent { source, provider_id, event_type, body, entity_key: None }
            }
            Scheme::StandardWebhooks => {
                let provider_id = format!("msg_sim{n}");
                let event_type = STANDARD_TYPES[self.rng.random_range(0..STANDARD_TYPES.len())].to_string();
                let body = json!({"type": event_type, "data": {"n": n}, "note": note}).to_string();
                ProviderEvent { source, provider_id, event_type, body, entity_key: None }
            }
        }
    }

    /// Posts `event` in the background through random nodes until one
    /// answers 200.
    fn post(&mut self, cluster: &Cluster, event: &ProviderEvent, ledger: &Arc<Mutex<Ledger>>, what: &str) {
        let order: Vec<Option<axum::Router>> =
            (0..TRIES_MAX).map(|_| pick_node_with(&mut self.rng, cluster).and_then(|id| cluster.router(id))).collect();
        let source = self.sources[event.source].clone();
        {
            let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
            ledger.in_flight += 1;
            ledger.posted.insert(event.body.clone());
            if let Some(key) = &event.entity_key {
                // A source's entity keys are ordered apart from any other
                // source's: the ordering key names the source.
                ledger.ordering_keys.insert(event.body.clone(), format!("{}:{key}", source.id));
            }
            let post = ledger.inbound.entry((source.id.clone(), event.provider_id.clone())).or_default();
            post.event_type.clone_from(&event.event_type);
            post.body.clone_from(&event.body);
            post.posts += 1;
        }
        self.trace.record(format!("provider {what} {} {}", source.id, event.provider_id));
        let (ledger, trace, event) = (ledger.clone(), self.trace.clone(), event.clone());
        let origin = self.origin.unwrap_or_else(Instant::now);
        tokio::spawn(async move {
            deliver(order, &source, &event, origin, &ledger, &trace).await;
            ledger.lock().unwrap_or_else(|p| p.into_inner()).in_flight -= 1;
        });
    }
}

/// Posts through the leader; its answer's body, which must be a success.
async fn call_leader(cluster: &Cluster, path: &str, body: Value) -> anyhow::Result<Value> {
    let leader = cluster.leader().ok_or_else(|| anyhow::anyhow!("no leader for {path}"))?;
    let router = cluster.router(leader).ok_or_else(|| anyhow::anyhow!("leader has no router"))?;
    let answer =
        call(router, "POST", path, Some(body), None).await.ok_or_else(|| anyhow::anyhow!("{path}: no answer"))?;
    if !answer.status.is_success() {
        anyhow::bail!("{path} answered {}: {}", answer.status, answer.body);
    }
    Ok(answer.body)
}

/// Tries `order`'s nodes in turn, signing each try anew, until one
/// answers 200 (or refuses what no retry changes); records the answers.
async fn deliver(
    order: Vec<Option<axum::Router>>,
    source: &SimSource,
    event: &ProviderEvent,
    origin: Instant,
    ledger: &Mutex<Ledger>,
    trace: &Trace,
) {
    let path = format!("/in/{}", source.id);
    let slot = (source.id.clone(), event.provider_id.clone());
    for router in order.into_iter().flatten() {
        let now_s = (EPOCH_MS + elapsed_ms(origin)) / 1_000;
        let headers = signed_headers(source, event, now_s);
        let answer = call_raw(router, "POST", &path, Some(event.body.clone()), &headers).await;
        let status = answer.as_ref().map(|a| a.status.as_u16());
        match answer {
            Some(a) if a.status.as_u16() == 200 => {
                let id = a.body["event_id"].as_str().unwrap_or_default().to_string();
                let duplicate = a.body["duplicate"].as_bool() == Some(true);
                trace.record(format!(
                    "provider answered {} {id}{}",
                    event.provider_id,
                    if duplicate { " dup" } else { "" }
                ));
                let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(post) = ledger.inbound.get_mut(&slot) {
                    post.answers.push(id.clone());
                    if let Some(n) = a.body["deliveries"].as_u64() {
                        post.created.push((id.clone(), n));
                    }
                }
                ledger.acked.entry(id.clone()).or_default();
                ledger.payloads.insert(id, event.body.clone());
                return;
            }
            Some(_) if matches!(status, Some(400 | 401 | 403 | 413)) => {
                trace.record(format!("provider refused {} {status:?}", event.provider_id));
                if let Some(post) = ledger.lock().unwrap_or_else(|p| p.into_inner()).inbound.get_mut(&slot) {
                    post.refused.push(status.unwrap_or_default());
                }
                return;
            }
            _ => {
                trace.record(format!("provider retry {} after {status:?}", event.provider_id));
                tokio::time::sleep(Duration::from_millis(RETRY_MS)).await;
            }
        }
    }
    trace.record(format!("provider gave up {}", event.provider_id));
    if let Some(post) = ledger.lock().unwrap_or_else(|p| p.into_inner()).inbound.get_mut(&slot) {
        post.gave_up += 1;
    }
}

/// The headers a provider of `source`'s scheme sends with `event` at `now_s`.
pub fn signed_headers(source: &SimSource, event: &ProviderEvent, now_s: u64) -> Vec<(&'static str, String)> {
    let body = event.body.as_bytes();
    match source.scheme {
        Scheme::Stripe => {
            let tag = mac(source.secret.as_bytes(), &[now_s.to_string().as_bytes(), b".", body]);
            vec![("stripe-signature", format!("t={now_s},v1={}", hex(&tag)))]
        }
        Scheme::Github => vec![
            ("x-hub-signature-256", format!("sha256={}", hex(&mac(source.secret.as_bytes(), &[body])))),
            ("x-github-delivery", event.provider_id.clone()),
            ("x-github-event", event.event_type.clone()),
        ],
        Scheme::StandardWebhooks => {
            let key = BASE64.decode(source.secret.trim_start_matches("whsec_")).unwrap_or_default();
            let id = event.provider_id.as_bytes();
            let tag = mac(&key, &[id, b".", now_s.to_string().as_bytes(), b".", body]);
            vec![
                ("webhook-id", event.provider_id.clone()),
                ("webhook-timestamp", now_s.to_string()),
                ("webhook-signature", format!("v1,{}", BASE64.encode(tag))),
            ]
        }
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use hookraft_core::inbound::{ProviderSecret, Scheme as CoreScheme, verify::verify};

    use super::*;

    fn event(provider_id: &str) -> ProviderEvent {
        ProviderEvent {
            source: 0,
            provider_id: provider_id.into(),
            event_type: "push".into(),
            body: r#"{"id":"evt_1","note":"naïve café ☕"}"#.into(),
            entity_key: None,
        }
    }

    /// hookraft's verification accepts what the provider signs, and only
    /// with the right secret: the two were written apart.
    #[test]
    fn each_scheme_signs_as_hookraft_verifies_and_a_wrong_secret_fails() {
        let mut provider = Provider::new(7, Trace::new(false));
        let now_s = 1_767_225_600;
        for (scheme, core) in [
            (Scheme::Stripe, CoreScheme::Stripe),
            (Scheme::Github, CoreScheme::Github),
            (Scheme::StandardWebhooks, CoreScheme::StandardWebhooks),
        ] {
            let secret = provider.secret_for(scheme);
            let other = provider.secret_for(scheme);
            let source = SimSource { id: "src_1".into(), scheme, secret: secret.clone() };
            let event = event("evt_1");
            let headers = signed_headers(&source, &event, now_s);
            let header = |name: &str| headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str());
            let good = ProviderSecret::parse(&core, &secret).unwrap();
            let wrong = ProviderSecret::parse(&core, &other).unwrap();
            assert_eq!(verify(&core, &[&good], header, event.body.as_bytes(), now_s), Ok(()), "{scheme:?}");
            assert!(verify(&core, &[&wrong], header, event.body.as_bytes(), now_s).is_err(), "{scheme:?}");
        }
    }
}
