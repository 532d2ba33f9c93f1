//! The delivery side's metrics, as `prometheus-client` metrics: one
//! instance per node (no global registry), registered in the node's
//! registry by the API (`hookraft_api::metrics`), which renders `/metrics`.
//!
//! [`DeliveryMetrics`] is what this node's endpoint actors do, counted as
//! they do it. [`LifecycleMetrics`] adds up what the applies tallied for
//! this node (`hookraft_core::state::tally`), fed by the node's apply
//! observer.

use std::sync::Mutex;

use hookraft_core::state::tally::Tally;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upper bounds (s) of the attempt latency histogram's buckets.
pub const LATENCY_BUCKETS_S: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// What an endpoint actor decided after an attempt (`hookraft_deliveries_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decided {
    Delivered,
    Retried,
    Dead,
    Gone,
    /// Not sent: its payload could not be opened (deferred).
    NotSent,
    /// Not sent: a newer version of its entity key was delivered first.
    IgnoredStale,
}

impl Decided {
    pub const ALL: [Decided; 6] =
        [Decided::Delivered, Decided::Retried, Decided::Dead, Decided::Gone, Decided::NotSent, Decided::IgnoredStale];

    pub fn as_str(self) -> &'static str {
        match self {
            Decided::Delivered => "delivered",
            Decided::Retried => "retried",
            Decided::Dead => "dead",
            Decided::Gone => "gone",
            Decided::NotSent => "not_sent",
            Decided::IgnoredStale => "ignored_stale",
        }
    }
}

impl EncodeLabelValue for Decided {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: Decided,
}

/// The state a circuit breaker moved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerTo {
    Open,
    HalfOpen,
    Closed,
}

impl BreakerTo {
    pub const ALL: [BreakerTo; 3] = [BreakerTo::Open, BreakerTo::HalfOpen, BreakerTo::Closed];

    pub fn as_str(self) -> &'static str {
        match self {
            BreakerTo::Open => "open",
            BreakerTo::HalfOpen => "half_open",
            BreakerTo::Closed => "closed",
        }
    }
}

impl EncodeLabelValue for BreakerTo {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BreakerLabel {
    pub to: BreakerTo,
}

/// What this node's endpoint actors did. Cloning shares the metrics.
#[derive(Debug, Clone)]
pub struct DeliveryMetrics {
    pub attempts: Counter,
    /// Attempt outcomes by what the actor decided; every label is present
    /// from the start, at 0.
    pub decided: Family<OutcomeLabel, Counter>,
    /// Attempts that were sent, from the request to the answer or failure.
    pub attempt_latency: Histogram,
    pub breaker_transitions: Family<BreakerLabel, Counter>,
    pub breaker_rejections: Counter,
    pub rate_limited: Counter,
    pub lease_refusals: Counter,
    pub actor_restarts: Counter,
    /// Deliveries waiting in this node's endpoint queues.
    pub queue_depth: Gauge,
}

impl Default for DeliveryMetrics {
    fn default() -> Self {
        let metrics = Self {
            attempts: Counter::default(),
            decided: Family::default(),
            attempt_latency: Histogram::new(LATENCY_BUCKETS_S),
            breaker_transitions: Family::default(),
            breaker_rejections: Counter::default(),
            rate_limited: Counter::default(),
            lease_refusals: Counter::default(),
            actor_restarts: Counter::default(),
            queue_depth: Gauge::default(),
        };
        // Every label shows from the start: a series that appears only
        // with its first increment hides that increment from `rate()`.
        for outcome in Decided::ALL {
            let _ = metrics.decided.get_or_create(&OutcomeLabel { outcome });
        }
        for to in BreakerTo::ALL {
            let _ = metrics.breaker_transitions.get_or_create(&BreakerLabel { to });
        }
        metrics
    }
}

impl DeliveryMetrics {
    pub fn decided(&self, outcome: Decided) {
        self.decided.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    pub fn breaker_moved(&self, to: BreakerTo) {
        self.breaker_transitions.get_or_create(&BreakerLabel { to }).inc();
    }

    pub fn observe_latency_ms(&self, latency_ms: u64) {
        self.attempt_latency.observe(latency_ms as f64 / 1_000.0);
    }

    /// Adds these metrics to the node's registry (docs/METRICS.md lists them).
    pub fn register(&self, registry: &mut Registry) {
        registry.register("hookraft_attempts", "Attempts started by this node", self.attempts.clone());
        registry.register(
            "hookraft_deliveries",
            "Attempt outcomes as this node's endpoint actors decided them, by outcome (counted before the \
             log records them; see hookraft_delivery_* for what the log recorded)",
            self.decided.clone(),
        );
        registry.register_with_unit(
            "hookraft_attempt_latency",
            "Duration of the attempts this node sent, from the request to the answer or the failure",
            Unit::Seconds,
            self.attempt_latency.clone(),
        );
        registry.register(
            "hookraft_breaker_transitions",
            "Circuit breaker transitions on this node, by the state moved to",
            self.breaker_transitions.clone(),
        );
        registry.register(
            "hookraft_breaker_rejections",
            "Attempts held back by an open breaker",
            self.breaker_rejections.clone(),
        );
        registry.register("hookraft_rate_limited", "Attempts held back by a rate limit", self.rate_limited.clone());
        registry.register(
            "hookraft_lease_refusals",
            "Sends refused because this node's lease was not valid",
            self.lease_refusals.clone(),
        );
        registry.register(
            "hookraft_actor_restarts",
            "Endpoint actors restarted after a crash",
            self.actor_restarts.clone(),
        );
        registry.register(
            "hookraft_queue_depth",
            "Deliveries queued in this node's endpoint actors",
            self.queue_depth.clone(),
        );
    }
}

/// What the applies since this node started tallied for it (see
/// `hookraft_core::state::tally`): a sum over the cluster counts each
/// change of a delivery once.
#[derive(Debug, Default)]
pub struct LifecycleMetrics {
    tally: Mutex<Tally>,
}

impl LifecycleMetrics {
    /// Adds one apply's tally. Called inside the apply: a merge of a few
    /// fixed arrays under an uncontended lock.
    pub fn record(&self, tally: &Tally) {
        self.lock().merge(tally);
    }

    /// Everything added so far.
    pub fn snapshot(&self) -> Tally {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        // A merge cannot leave the tally half-written in a way that matters.
        self.tally.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(metrics: &DeliveryMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).expect("renders");
        text
    }

    #[test]
    fn every_outcome_and_breaker_label_is_present_from_the_start() {
        let metrics = DeliveryMetrics::default();
        let series = |text: &str, prefix: &str| text.lines().filter(|l| l.starts_with(prefix)).count();
        let text = rendered(&metrics);
        assert_eq!(series(&text, "hookraft_deliveries_total{"), Decided::ALL.len());
        assert_eq!(series(&text, "hookraft_breaker_transitions_total{"), BreakerTo::ALL.len());
        metrics.decided(Decided::Retried);
        metrics.breaker_moved(BreakerTo::HalfOpen);
        let text = rendered(&metrics);
        assert!(text.lines().any(|l| l == "hookraft_deliveries_total{outcome=\"retried\"} 1"), "{text}");
        assert!(text.lines().any(|l| l == "hookraft_breaker_transitions_total{to=\"half_open\"} 1"), "{text}");
        assert_eq!(series(&text, "hookraft_deliveries_total{"), Decided::ALL.len(), "no new series");
    }

    #[test]
    fn lifecycle_tallies_add_up() {
        let metrics = LifecycleMetrics::default();
        let mut tally = Tally { retries: 2, ..Default::default() };
        tally.to_delivered.observe(1_500);
        metrics.record(&tally);
        metrics.record(&tally);
        let total = metrics.snapshot();
        assert_eq!((total.retries, total.to_delivered.count, total.to_delivered.sum_ms), (4, 2, 3_000));
    }
}
