//! The scenarios: which endpoints exist, what each event is and where it
//! must arrive. Pure descriptions; `hookraft_bench.rs` runs them.

use serde_json::{Value, json};

/// The scenarios of `--scenario`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// 100 healthy endpoints, one event type each.
    Throughput,
    /// 99 healthy endpoints, one that hangs past its timeout, one that answers 500.
    Isolation,
    /// One endpoint that is down (503) while the backlog builds, then comes back.
    Backlog,
    /// 50 endpoints subscribed to every type: each event makes 50 deliveries.
    FanOut,
    /// The throughput scenario's 100 endpoints, but no event matches any of
    /// them: the cost of accepting an event alone, without its delivery.
    IngestOnly,
    /// The throughput scenario's 100 endpoints and event types, delivering
    /// in order per key (`ordering: per_key`) with a fast retry policy;
    /// event `i` carries the ordering key `key-{i % 1000}` (so each
    /// endpoint has 10 keys), and the fleet refuses one first attempt in
    /// ten (503, by `webhook-id`).
    Ordered,
    /// The ordered scenario's endpoints, events (keys included) and refused
    /// first attempts, without ordering: its twin for comparison.
    UnorderedRetries,
    /// The throughput scenario's endpoints and event types, the endpoints
    /// subscribed to one Stripe source (`sources`), each event a signed
    /// provider request to `POST /in/{source}` instead of `/v1/events`,
    /// and `--provider-retry-percent` of them posted again, to be answered
    /// as duplicates.
    Inbound,
    /// The throughput scenario's endpoints and events, offered at a fixed
    /// `--rate` (200 events/s unless given) for a fixed `--duration`
    /// (10 minutes unless given): latency per 10-second window, the node's
    /// memory and snapshots over time (`soak.rs`).
    Soak,
    /// The throughput scenario's endpoints and events: `--history`
    /// finished deliveries preloaded in batches, then a steady `--rate`
    /// for `--duration` while old events and deliveries are read, the
    /// node's memory against a node without them (`history.rs`).
    History,
}

/// Healthy endpoints of the throughput and isolation scenarios.
const HEALTHY_ENDPOINTS: u32 = 100;
/// Endpoints of the fan-out scenario.
const FAN_OUT_ENDPOINTS: u32 = 50;
/// Attempt timeout of the isolation scenario's hanging endpoint.
pub const HANG_TIMEOUT_MS: u64 = 5_000;
/// Ordering keys of the ordered scenarios, spread round robin over the events.
const ORDERING_KEYS: usize = 1_000;

/// One endpoint to register: its path on the fleet and its settings.
pub struct EndpointSpec {
    /// `ok/3`, `hang/99`, …: the path on the fleet, and the fleet's index.
    pub behaviour: &'static str,
    pub index: u32,
    pub settings: Value,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Throughput => "throughput",
            Scenario::Isolation => "isolation",
            Scenario::Backlog => "backlog",
            Scenario::FanOut => "fan-out",
            Scenario::IngestOnly => "ingest-only",
            Scenario::Ordered => "ordered",
            Scenario::UnorderedRetries => "unordered-retries",
            Scenario::Inbound => "inbound",
            Scenario::Soak => "soak",
            Scenario::History => "history",
        }
    }

    /// Whether the scenario's endpoints deliver in order per key.
    pub fn ordered(self) -> bool {
        self == Scenario::Ordered
    }

    /// Whether the events are provider requests to a source's ingress.
    pub fn inbound(self) -> bool {
        self == Scenario::Inbound
    }

    /// Whether the fleet refuses some first attempts, so that deliveries retry.
    pub fn retries(self) -> bool {
        matches!(self, Scenario::Ordered | Scenario::UnorderedRetries)
    }

    /// Events posted when `--events` is not given.
    pub fn default_events(self) -> usize {
        match self {
            Scenario::Throughput
            | Scenario::Isolation
            | Scenario::IngestOnly
            | Scenario::Ordered
            | Scenario::UnorderedRetries
            | Scenario::Inbound => 60_000,
            // 10 minutes at 200 events/s; a soak posts `--rate` × `--duration`.
            Scenario::Soak => 120_000,
            // 5 minutes at 1,000 events/s, after the preload (`history.rs`).
            Scenario::History => 300_000,
            Scenario::Backlog => 1_000_000,
            Scenario::FanOut => 2_000,
        }
    }

    pub fn endpoints(self) -> Vec<EndpointSpec> {
        let typed = |behaviour, index: u32, extra: Value| {
            let mut settings = json!({"event_types": [format!("bench.{index}")], "max_in_flight": 64});
            merge(&mut settings, extra);
            EndpointSpec { behaviour, index, settings }
        };
        match self {
            // The inbound scenario's endpoints get their source once it exists.
            Scenario::Throughput | Scenario::IngestOnly | Scenario::Inbound | Scenario::Soak | Scenario::History => {
                (0..HEALTHY_ENDPOINTS).map(|i| typed("ok", i, json!({}))).collect()
            }
            Scenario::Isolation => {
                let mut specs: Vec<EndpointSpec> =
                    (0..HEALTHY_ENDPOINTS - 1).map(|i| typed("ok", i, json!({}))).collect();
                let slow = json!({"timeout_ms": HANG_TIMEOUT_MS, "max_in_flight": 10});
                specs.push(typed("hang", HEALTHY_ENDPOINTS - 1, slow));
                specs.push(typed("fail", HEALTHY_ENDPOINTS, json!({"max_in_flight": 10})));
                specs
            }
            Scenario::Backlog => {
                // Retries stay short so the drain starts soon after the endpoint is back.
                let retry = json!({"attempts_max": 100, "base_ms": 200, "cap_ms": 2_000, "max_age_s": 86_400});
                vec![EndpointSpec {
                    behaviour: "down",
                    index: 0,
                    settings: json!({"max_in_flight": 64, "retry": retry}),
                }]
            }
            Scenario::FanOut => (0..FAN_OUT_ENDPOINTS)
                .map(|i| EndpointSpec { behaviour: "ok", index: i, settings: json!({"max_in_flight": 64}) })
                .collect(),
            Scenario::Ordered | Scenario::UnorderedRetries => {
                // Retries come quickly, so a refused head holds its key for tens of milliseconds.
                let retry = json!({"attempts_max": 20, "base_ms": 20, "cap_ms": 200, "max_age_s": 3_600});
                let ordering = if self.ordered() { "per_key" } else { "none" };
                (0..HEALTHY_ENDPOINTS)
                    .map(|i| typed("flaky", i, json!({"ordering": ordering, "retry": retry})))
                    .collect()
            }
        }
    }

    /// The event type of event `i`.
    pub fn event_type(self) -> fn(usize) -> String {
        match self {
            Scenario::Throughput
            | Scenario::Ordered
            | Scenario::UnorderedRetries
            | Scenario::Inbound
            | Scenario::Soak
            | Scenario::History => |i| format!("bench.{}", i % HEALTHY_ENDPOINTS as usize),
            Scenario::Isolation => |i| format!("bench.{}", i % (HEALTHY_ENDPOINTS as usize + 1)),
            Scenario::Backlog => |_| "bench.0".to_string(),
            Scenario::FanOut => |_| "fan.out".to_string(),
            Scenario::IngestOnly => |i| format!("unrouted.{}", i % HEALTHY_ENDPOINTS as usize),
        }
    }

    /// The ordering key of event `i`, if its events carry one.
    pub fn ordering_key(self) -> Option<fn(usize) -> String> {
        match self {
            Scenario::Ordered | Scenario::UnorderedRetries => Some(|i| format!("key-{}", i % ORDERING_KEYS)),
            _ => None,
        }
    }

    /// The fleet indexes of the healthy endpoints event `i` must reach.
    pub fn healthy_targets(self, i: usize) -> Vec<u32> {
        match self {
            Scenario::Throughput
            | Scenario::Ordered
            | Scenario::UnorderedRetries
            | Scenario::Inbound
            | Scenario::Soak
            | Scenario::History => {
                vec![(i % HEALTHY_ENDPOINTS as usize) as u32]
            }
            Scenario::Isolation => {
                let target = (i % (HEALTHY_ENDPOINTS as usize + 1)) as u32;
                if target < HEALTHY_ENDPOINTS - 1 { vec![target] } else { Vec::new() }
            }
            Scenario::Backlog => vec![0],
            Scenario::FanOut => (0..FAN_OUT_ENDPOINTS).collect(),
            Scenario::IngestOnly => Vec::new(),
        }
    }
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_type_matches_exactly_its_targets_subscriptions() {
        for scenario in [
            Scenario::Throughput,
            Scenario::Isolation,
            Scenario::Backlog,
            Scenario::FanOut,
            Scenario::IngestOnly,
            Scenario::Ordered,
            Scenario::UnorderedRetries,
            Scenario::Inbound,
            Scenario::Soak,
            Scenario::History,
        ] {
            let specs = scenario.endpoints();
            for i in 0..250 {
                let event_type = (scenario.event_type())(i);
                let subscribed: Vec<u32> = specs
                    .iter()
                    .filter(|s| ["ok", "down", "flaky"].contains(&s.behaviour))
                    .filter(|s| match s.settings["event_types"].as_array() {
                        None => true,
                        Some(types) => types.iter().any(|t| t == &Value::from(event_type.clone())),
                    })
                    .map(|s| s.index)
                    .collect();
                assert_eq!(subscribed, scenario.healthy_targets(i), "{} event {i}", scenario.name());
            }
        }
    }

    #[test]
    fn isolation_has_one_hanging_and_one_failing_endpoint_beside_99_healthy() {
        let specs = Scenario::Isolation.endpoints();
        let count = |b| specs.iter().filter(|s| s.behaviour == b).count();
        assert_eq!((count("ok"), count("hang"), count("fail")), (99, 1, 1));
    }

    #[test]
    fn the_ordered_twins_differ_only_in_ordering_and_spread_a_thousand_keys_ten_per_endpoint() {
        let (ordered, unordered) = (Scenario::Ordered.endpoints(), Scenario::UnorderedRetries.endpoints());
        assert_eq!(ordered.len(), 100);
        for (o, u) in ordered.iter().zip(&unordered) {
            assert_eq!((o.behaviour, o.index), ("flaky", u.index));
            assert_eq!((&o.settings["ordering"], &u.settings["ordering"]), (&json!("per_key"), &json!("none")));
            let mut same = o.settings.clone();
            same["ordering"] = json!("none");
            assert_eq!(same, u.settings);
        }
        let key = Scenario::Ordered.ordering_key().expect("keyed events");
        let mut pairs = std::collections::BTreeSet::new();
        for i in 0..10_000 {
            assert_eq!(Some(key(i)), Scenario::UnorderedRetries.ordering_key().map(|k| k(i)));
            pairs.insert((Scenario::Ordered.healthy_targets(i), key(i)));
        }
        assert_eq!(pairs.len(), 1_000, "each key at one endpoint, 10 keys per endpoint");
        assert!(Scenario::Throughput.ordering_key().is_none());
    }
}
