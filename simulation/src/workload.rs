//! The workload: producers ingesting through random nodes (each event with
//! an idempotency key, one at a time or a few in a batch, retried on other
//! nodes until acknowledged), and an operator registering and changing
//! endpoints, replaying dead letters and skipping the dead deliveries that
//! block an ordered key.
//! Some endpoints deliver in order per key (`"ordering": "per_key"`, dead
//! heads blocking their key or skipped), and most events carry one of a
//! handful of ordering keys; the choices of ordering come from a generator
//! of their own, so the rest of the workload draws what it drew before.
//! A provider posts signed events to inbound sources besides
//! ([`crate::provider`], with a generator of its own too).
//! The ledger remembers every acknowledged event, the deliveries the
//! acknowledgement named and the payload posted for it: what the "no
//! acknowledged event is lost" checker owes, and what receivers must get.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use hookraft_core::ids::NodeId;
use hookraft_core::ordering::OnDead;
use hookraft_core::signing::Secret;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use crate::cluster::{Cluster, call};
use crate::provider::{InboundPost, Provider};
use crate::receivers::{Behavior, Receivers};
use crate::trace::Trace;

/// Attempts to get one event acknowledged before the producer gives up on it.
const INGEST_TRIES_MAX: u32 = 20;
/// Chance in a hundred that a post is a batch (`POST /v1/events/batch`).
const BATCH_PERCENT: u32 = 25;
/// Events in one batch.
const BATCH_EVENTS: std::ops::RangeInclusive<usize> = 2..=4;

/// An endpoint the workload registered.
#[derive(Debug, Clone)]
pub struct SimEndpoint {
    pub id: String,
    pub receiver: String,
    pub event_types: Vec<String>,
    /// `Some`: ordered per key, and what a dead head does.
    pub ordering: Option<OnDead>,
    /// The inbound sources it receives from; empty: the producers' events.
    pub sources: Vec<String>,
}

/// What the workload knows for the checkers.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// Acknowledged event id → (delivery id, endpoint id) named in the answer.
    pub acked: BTreeMap<String, Vec<(String, String)>>,
    /// Acknowledged event id → the JSON text of the payload posted for it.
    pub payloads: BTreeMap<String, String>,
    /// The JSON text of every payload posted, acknowledged or not (each
    /// holds its event's number, so no two are the same).
    pub posted: BTreeSet<String>,
    /// The idempotency keys of every batch posted, acknowledged or not.
    pub batches: Vec<Vec<String>>,
    /// The JSON text of every payload posted with an `ordering_key` → that
    /// key, acknowledged or not.
    pub ordering_keys: BTreeMap<String, String>,
    pub offered: u64,
    pub gave_up: u64,
    pub requests: u64,
    /// Producers (and the provider) still trying to get an event
    /// acknowledged: the run is not settled while one may yet add to `acked`.
    pub in_flight: u64,
    /// Every provider event posted to a source, by (source id, provider
    /// event id); one acknowledged is also in `acked` and `payloads`.
    pub inbound: BTreeMap<(String, String), InboundPost>,
}

/// The workload of one run.
pub struct Workload {
    rng: StdRng,
    /// Every choice about ordering: endpoints' modes, events' keys, skips.
    order_rng: StdRng,
    /// Chance in a hundred, per step, that a producer posts an event.
    pub post_percent: u32,
    pub endpoints: Vec<SimEndpoint>,
    /// Endpoints the operator asked to delete. The request may have failed
    /// (a partition, a crashed node), so their receivers heal like the rest.
    pub deleted: Vec<SimEndpoint>,
    pub ledger: Arc<Mutex<Ledger>>,
    /// Inbound traffic: its sources, its endpoints, the provider.
    pub provider: Provider,
    next_key: u64,
    /// Steps taken: the time of the workload, for keys used in turns.
    steps: u64,
    trace: Trace,
}

const TYPES: [&str; 3] = ["order.created", "order.paid", "user.deleted"];

/// The ordering keys events carry: a handful, so each key's queue holds
/// several deliveries at once under load and faults.
const ORDERING_KEYS: [&str; 5] = ["acct-1", "acct-2", "acct-3", "acct-4", "acct-5"];
/// Chance in a hundred that an event carries an ordering key.
const KEYED_PERCENT: u32 = 70;
/// Chance in a hundred that a keyed event carries the key of the turn
/// instead: two keys used by turns of [`TURN_STEPS`], each idle longer
/// than the retention while the other is used, so retention forgets it and
/// it starts again from sequence 1.
const TURN_KEY_PERCENT: u32 = 20;
/// Steps of one turn: 20 s.
const TURN_STEPS: u64 = 1_000;
/// Attempts of an ordered endpoint's delivery before it is dead, and how
/// long it may fail: little, so heads die under faults (an open breaker
/// spaces attempts out) and keys block (`block`) or go on (`skip`).
const ORDERED_ATTEMPTS_MAX: u32 = 4;
const ORDERED_MAX_AGE_S: u64 = 10;
/// Mixed into the workload's seed for its ordering generator.
const ORDER_SEED_SALT: u64 = 0x6f72_6465_7265_6421;

/// The payload of the `n`th event: its number makes it unique, and the
/// text outside ASCII shows a body altered on its way (re-encoded, escaped).
fn payload(n: u64) -> Value {
    json!({"n": n, "note": "naïve café ☕"})
}

/// One request a producer keeps sending until it is answered.
struct Post {
    path: &'static str,
    body: Value,
    /// The `Idempotency-Key` header (a batch carries its keys in the body).
    key: Option<String>,
    /// The key, or a batch's keys, for the trace.
    label: String,
    /// The JSON text of each event's payload, in the order posted.
    payloads: Vec<String>,
    /// Each event's ordering key, in the same order.
    ordering_keys: Vec<Option<&'static str>>,
}

/// The range a seed draws its load from, in percent per step.
pub const POST_PERCENT_DRAWN: std::ops::RangeInclusive<u32> = 5..=40;
/// The highest load: the operator keeps the remaining steps.
pub const POST_PERCENT_MAX: u32 = 97;

impl Workload {
    /// A workload posting with `post_percent` chance per step, or, when
    /// `None`, a chance the seed draws: runs differ in load as they differ
    /// in faults (swarm testing), so a sweep covers quiet and busy clusters
    /// and costs less than one where every run is at the peak.
    pub fn new(seed: u64, post_percent: Option<u32>, trace: Trace) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let post_percent = post_percent.unwrap_or_else(|| rng.random_range(POST_PERCENT_DRAWN)).min(POST_PERCENT_MAX);
        trace.record(format!("workload posts with {post_percent}% per step"));
        Self {
            rng,
            order_rng: StdRng::seed_from_u64(seed ^ ORDER_SEED_SALT),
            post_percent,
            endpoints: Vec::new(),
            deleted: Vec::new(),
            ledger: Arc::default(),
            provider: Provider::new(seed, trace.clone()),
            next_key: 0,
            steps: 0,
            trace,
        }
    }

    fn pick_node(&mut self, cluster: &Cluster) -> Option<NodeId> {
        pick_node_with(&mut self.rng, cluster)
    }

    /// Registers `count` endpoints through the leader, each with its own
    /// receiver; most healthy, the rest slow, flaky, down for a while, late
    /// or gone, as the seed decides.
    pub async fn register(
        &mut self,
        cluster: &Cluster,
        receivers: &Receivers,
        count: usize,
        down_until_ms: u64,
    ) -> anyhow::Result<()> {
        for i in 0..count {
            let leader = cluster.leader().ok_or_else(|| anyhow::anyhow!("no leader to register endpoints"))?;
            let behavior = match self.rng.random_range(0..10) {
                0 => Behavior::Slow { ms: 300 },
                1 => Behavior::Flaky { fail_ppm: 300_000 },
                2 => Behavior::DownUntil { until_ms: down_until_ms },
                3 => Behavior::LateAfterTimeout,
                4 if i > 0 => Behavior::Gone,
                _ => Behavior::Healthy,
            };
            let name = format!("r{i}");
            let mut key = [0u8; 32];
            rand::Rng::fill_bytes(&mut self.rng, &mut key);
            let secret = Secret::from_key(key.to_vec()).map_err(|e| anyhow::anyhow!("{e}"))?;
            receivers.set(&name, behavior, secret.clone());
            let types: Vec<String> =
                TYPES.iter().filter(|_| self.rng.random_bool(0.6)).map(|t| t.to_string()).collect();
            let ordering = draw_ordering(&mut self.order_rng);
            let body = endpoint_body(&name, &secret, &types, ordering);
            let router = cluster.router(leader).ok_or_else(|| anyhow::anyhow!("leader has no router"))?;
            let answer = call(router, "POST", "/v1/endpoints", Some(body), None)
                .await
                .ok_or_else(|| anyhow::anyhow!("register endpoint: no answer"))?;
            let id = answer.body["id"].as_str().ok_or_else(|| anyhow::anyhow!("register endpoint: {}", answer.body))?;
            self.trace.record(format!("workload endpoint {id} {name} {behavior:?} ordering {ordering:?}"));
            let endpoint =
                SimEndpoint { id: id.to_string(), receiver: name, event_types: types, ordering, sources: Vec::new() };
            self.endpoints.push(endpoint);
        }
        Ok(())
    }

    /// One step of the producers and the operator, at most a few requests.
    pub fn step(&mut self, cluster: &Cluster) {
        self.steps += 1;
        self.provider.step(cluster, &self.ledger);
        if self.endpoints.is_empty() {
            return;
        }
        let roll = self.rng.random_range(0..100);
        if roll < self.post_percent {
            self.post_event(cluster);
        } else if roll == 96 {
            self.skip_blocked(cluster);
        } else if roll == 97 {
            self.replay_dead(cluster);
        } else if roll == 98 {
            self.change_endpoint(cluster);
        } else if roll == 99 && self.rng.random_bool(0.1) && self.endpoints.len() > 3 {
            self.delete_endpoint(cluster);
        }
    }

    fn post_event(&mut self, cluster: &Cluster) {
        if self.rng.random_range(0..100) < BATCH_PERCENT {
            return self.post_batch(cluster);
        }
        self.next_key += 1;
        let key = format!("k{}", self.next_key);
        let payload = payload(self.next_key);
        let payloads = vec![payload.to_string()];
        let mut body = if self.rng.random_bool(0.5) {
            let targets: Vec<&str> =
                self.endpoints.iter().filter(|_| self.rng.random_bool(0.4)).map(|e| e.id.as_str()).collect();
            let targets = if targets.is_empty() { vec![self.endpoints[0].id.as_str()] } else { targets };
            json!({"type": "direct", "payload": payload, "endpoint_ids": targets})
        } else {
            let event_type = TYPES[self.rng.random_range(0..TYPES.len())];
            json!({"type": event_type, "payload": payload})
        };
        let ordering_keys = vec![self.ordering_key()];
        if let Some(ordering_key) = &ordering_keys[0] {
            body["ordering_key"] = json!(ordering_key);
        }
        let post = Post { path: "/v1/events", body, key: Some(key.clone()), label: key, payloads, ordering_keys };
        self.produce_in_background(cluster, post, 1);
    }

    /// A few events of the subscribed types in one request, each with its
    /// own key (no explicit targets: an endpoint deleted meanwhile would
    /// leave one of them out on purpose, which the batch checker would
    /// have to tell apart from a split batch).
    fn post_batch(&mut self, cluster: &Cluster) {
        let count = self.rng.random_range(BATCH_EVENTS);
        let mut keys = Vec::with_capacity(count);
        let mut events = Vec::with_capacity(count);
        let mut payloads = Vec::with_capacity(count);
        let mut ordering_keys = Vec::with_capacity(count);
        for _ in 0..count {
            self.next_key += 1;
            let key = format!("k{}", self.next_key);
            let event_type = TYPES[self.rng.random_range(0..TYPES.len())];
            let payload = payload(self.next_key);
            payloads.push(payload.to_string());
            let mut event = json!({"type": event_type, "payload": payload, "idempotency_key": key});
            let ordering_key = self.ordering_key();
            if let Some(ordering_key) = &ordering_key {
                event["ordering_key"] = json!(ordering_key);
            }
            ordering_keys.push(ordering_key);
            events.push(event);
            keys.push(key);
        }
        let label = keys.join(",");
        self.ledger.lock().unwrap_or_else(|p| p.into_inner()).batches.push(keys);
        let body = json!({"events": events});
        let post = Post { path: "/v1/events/batch", body, key: None, label, payloads, ordering_keys };
        self.produce_in_background(cluster, post, count as u64);
    }

    fn produce_in_background(&mut self, cluster: &Cluster, post: Post, events: u64) {
        let order: Vec<Option<axum::Router>> =
            (0..INGEST_TRIES_MAX).map(|_| self.pick_node(cluster).and_then(|id| cluster.router(id))).collect();
        let ledger = self.ledger.clone();
        let trace = self.trace.clone();
        {
            let mut counts = ledger.lock().unwrap_or_else(|p| p.into_inner());
            counts.offered += events;
            counts.in_flight += 1;
            counts.posted.extend(post.payloads.iter().cloned());
            for (payload, key) in post.payloads.iter().zip(&post.ordering_keys) {
                if let Some(key) = key {
                    counts.ordering_keys.insert(payload.clone(), key.to_string());
                }
            }
        }
        tokio::spawn(async move {
            Self::produce(order, &post, &ledger, &trace).await;
            ledger.lock().unwrap_or_else(|p| p.into_inner()).in_flight -= 1;
        });
    }

    /// Tries `order`'s nodes in turn until one acknowledges or refuses the
    /// post, recording every acknowledged event in the ledger.
    async fn produce(order: Vec<Option<axum::Router>>, post: &Post, ledger: &Mutex<Ledger>, trace: &Trace) {
        for router in order.into_iter().flatten() {
            ledger.lock().unwrap_or_else(|p| p.into_inner()).requests += 1;
            let answer = call(router, "POST", post.path, Some(post.body.clone()), post.key.as_deref()).await;
            match answer {
                Some(a) if a.status.is_success() => {
                    // A batch answers one result per event, in the order
                    // posted; a single post, the event.
                    let results = match a.body["events"].as_array() {
                        Some(results) => results.iter().collect(),
                        None => vec![&a.body],
                    };
                    let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
                    for (result, payload) in results.into_iter().zip(&post.payloads) {
                        let Some(id) = result["id"].as_str() else { continue };
                        let deliveries: Vec<(String, String)> = result["deliveries"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|d| {
                                let field = |f: &str| d[f].as_str().unwrap_or_default().to_string();
                                (field("id"), field("endpoint_id"))
                            })
                            .collect();
                        trace.record(format!("workload acked {} {id} {}", post.label, deliveries.len()));
                        ledger.acked.insert(id.to_string(), deliveries);
                        ledger.payloads.insert(id.to_string(), payload.clone());
                    }
                    return;
                }
                Some(a) if a.status.is_client_error() => {
                    trace.record(format!("workload refused {} {}", post.label, a.status));
                    return;
                }
                _ => tokio::time::sleep(std::time::Duration::from_millis(300)).await,
            }
        }
        trace.record(format!("workload gave up {}", post.label));
        ledger.lock().unwrap_or_else(|p| p.into_inner()).gave_up += 1;
    }

    /// The ordering key of the next event, if it gets one.
    fn ordering_key(&mut self) -> Option<&'static str> {
        if self.order_rng.random_range(0..100) >= KEYED_PERCENT {
            return None;
        }
        if self.order_rng.random_range(0..100) < TURN_KEY_PERCENT {
            return Some(if (self.steps / TURN_STEPS).is_multiple_of(2) { "turn-a" } else { "turn-b" });
        }
        Some(ORDERING_KEYS[self.order_rng.random_range(0..ORDERING_KEYS.len())])
    }

    /// The operator looks at the keys a dead head blocks on one endpoint
    /// that blocks (`on_dead: block`) and skips the first.
    fn skip_blocked(&mut self, cluster: &Cluster) {
        let blocking: Vec<&SimEndpoint> = self.endpoints.iter().filter(|e| e.ordering == Some(OnDead::Block)).collect();
        if blocking.is_empty() {
            return;
        }
        let endpoint = blocking[self.order_rng.random_range(0..blocking.len())].id.clone();
        let Some(router) = pick_node_with(&mut self.order_rng, cluster).and_then(|id| cluster.router(id)) else {
            return;
        };
        let trace = self.trace.clone();
        tokio::spawn(async move { skip_blocked_keys(router, &endpoint, 1, &trace).await });
    }

    /// After healing: the operator skips every key blocked by a dead head
    /// on the endpoints that block, through `via`, so what waits behind
    /// them goes (the run settles only once every delivery is over). The
    /// endpoints it asked to delete too: the request may have failed.
    pub fn unblock(&self, via: Option<axum::Router>) {
        let Some(router) = via else { return };
        for endpoint in self.all_endpoints().filter(|e| e.ordering == Some(OnDead::Block)) {
            let (router, endpoint, trace) = (router.clone(), endpoint.id.clone(), self.trace.clone());
            tokio::spawn(async move { skip_blocked_keys(router, &endpoint, usize::MAX, &trace).await });
        }
    }

    /// Every endpoint registered: the producers', those the operator asked
    /// to delete, and those receiving from inbound sources.
    pub fn all_endpoints(&self) -> impl Iterator<Item = &SimEndpoint> {
        self.endpoints.iter().chain(&self.deleted).chain(&self.provider.endpoints)
    }

    fn replay_dead(&mut self, cluster: &Cluster) {
        let endpoint = self.endpoints[self.rng.random_range(0..self.endpoints.len())].id.clone();
        let Some(router) = self.pick_node(cluster).and_then(|id| cluster.router(id)) else { return };
        self.trace.record(format!("workload replay {endpoint}"));
        tokio::spawn(async move {
            let _ = call(router, "POST", &format!("/v1/endpoints/{endpoint}/replay"), Some(json!({})), None).await;
        });
    }

    /// Deletes an endpoint (never the first): its queued deliveries end
    /// dead-lettered, and later events no longer name it.
    fn delete_endpoint(&mut self, cluster: &Cluster) {
        let index = self.rng.random_range(1..self.endpoints.len());
        let Some(router) = self.pick_node(cluster).and_then(|id| cluster.router(id)) else { return };
        let endpoint = self.endpoints.remove(index);
        self.trace.record(format!("workload delete {}", endpoint.id));
        let trace = self.trace.clone();
        let id = endpoint.id.clone();
        self.deleted.push(endpoint);
        tokio::spawn(async move {
            let answer = call(router, "DELETE", &format!("/v1/endpoints/{id}"), None, None).await;
            trace.record(format!("workload deleted {id}: {:?}", answer.map(|a| a.status.as_u16())));
        });
    }

    fn change_endpoint(&mut self, cluster: &Cluster) {
        let endpoint = self.endpoints[self.rng.random_range(0..self.endpoints.len())].id.clone();
        let Some(router) = self.pick_node(cluster).and_then(|id| cluster.router(id)) else { return };
        let max_in_flight = self.rng.random_range(1..8);
        self.trace.record(format!("workload patch {endpoint} max_in_flight={max_in_flight}"));
        tokio::spawn(async move {
            let body = json!({"max_in_flight": max_in_flight});
            let _ = call(router, "PATCH", &format!("/v1/endpoints/{endpoint}"), Some(body), None).await;
        });
    }
}

/// An endpoint's ordering, one in three each: none, per key with a dead
/// head blocking its key, per key with a dead head skipped.
pub(crate) fn draw_ordering(rng: &mut StdRng) -> Option<OnDead> {
    match rng.random_range(0..3) {
        0 => None,
        1 => Some(OnDead::Block),
        _ => Some(OnDead::Skip),
    }
}

/// The registration of a simulated endpoint at receiver `name`: short
/// timeouts and fast retries, and for an ordered one few attempts over a
/// short age, so heads die under faults and keys block or go on.
pub(crate) fn endpoint_body(name: &str, secret: &Secret, types: &[String], ordering: Option<OnDead>) -> Value {
    let (attempts_max, max_age_s) =
        if ordering.is_some() { (ORDERED_ATTEMPTS_MAX, ORDERED_MAX_AGE_S) } else { (40, 3_600) };
    let mut body = json!({
        "url": Receivers::url(name),
        "secret": secret.to_whsec(),
        "event_types": if types.is_empty() { Value::Null } else { json!(types) },
        "timeout_ms": 1_000,
        "max_in_flight": 4,
        "retry": {"attempts_max": attempts_max, "base_ms": 100, "cap_ms": 2_000, "max_age_s": max_age_s},
    });
    if let Some(on_dead) = ordering {
        body["ordering"] = json!("per_key");
        body["on_dead"] = json!(if on_dead == OnDead::Block { "block" } else { "skip" });
    }
    body
}

pub(crate) fn pick_node_with(rng: &mut StdRng, cluster: &Cluster) -> Option<NodeId> {
    let up = cluster.up();
    (!up.is_empty()).then(|| up[rng.random_range(0..up.len())])
}

/// Lists the keys of `endpoint` a dead head blocks and skips up to `max`
/// of them, one request each.
async fn skip_blocked_keys(router: axum::Router, endpoint: &str, max: usize, trace: &Trace) {
    let path = format!("/v1/endpoints/{endpoint}/blocked-keys");
    let Some(listed) = call(router.clone(), "GET", &path, None, None).await else { return };
    let keys: Vec<String> = listed.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["ordering_key"].as_str().map(str::to_owned))
        .take(max)
        .collect();
    for key in keys {
        let body = json!({"ordering_key": key});
        let answer = call(router.clone(), "POST", &format!("{path}/skip"), Some(body), None).await;
        trace.record(format!("workload skip {endpoint} {key}: {:?}", answer.map(|a| a.status.as_u16())));
    }
}
