//! The statistics an operator looks at first, and the dashboard draws:
//! the cluster's flows per minute (`GET /v1/stats`), every endpoint's
//! health (`GET /v1/stats/endpoints`), and the work and last failure an
//! endpoint's own stats carry too (`GET /v1/endpoints/{id}/stats`).

use hookraft_core::ids::{DeliveryId, EndpointId};
use hookraft_core::state::stats::{Counts, LastError};
use hookraft_core::state::throughput::Tally;
use serde::Serialize;
use utoipa::ToSchema;

use super::Timestamp;
use super::endpoints::BreakerView;

/// The cluster's flows in one minute, or summed over the hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct TallyView {
    /// Events committed (producers', inbound and operational ones).
    pub accepted: u64,
    /// Deliveries that ended delivered.
    pub delivered: u64,
    /// Failed attempts after which a retry was scheduled.
    pub retried: u64,
    /// Deliveries that became dead.
    pub dead: u64,
}

pub fn tally(t: &Tally) -> TallyView {
    TallyView { accepted: t.accepted, delivered: t.delivered, retried: t.retried, dead: t.dead }
}

/// One minute's flows, stamped with the minute's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct MinuteView {
    pub at: Timestamp,
    pub accepted: u64,
    pub delivered: u64,
    pub retried: u64,
    pub dead: u64,
}

pub fn minute(start_ms: u64, t: &Tally) -> MinuteView {
    MinuteView {
        at: Timestamp::from_ms(start_ms),
        accepted: t.accepted,
        delivered: t.delivered,
        retried: t.retried,
        dead: t.dead,
    }
}

/// The last hour, minute by minute, and what the cluster holds now.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatsOverview {
    /// The answering node.
    pub node_id: u64,
    /// 60 minutes, oldest first, the last one the current minute; a quiet minute is all zeros.
    pub minutes: Vec<MinuteView>,
    /// The minutes summed.
    pub last_hour: TallyView,
    /// Deliveries not yet delivered or dead.
    pub queue_depth: u64,
    /// Dead deliveries held.
    pub dead: usize,
    /// Endpoints registered.
    pub endpoints: usize,
}

/// The p50 and p99 latency of an hour: the upper bound of the histogram
/// bucket each falls in; `null` without attempts or past the last bound (30 s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct HourLatency {
    #[schema(required = true)]
    pub p50: Option<u64>,
    #[schema(required = true)]
    pub p99: Option<u64>,
}

/// An endpoint's attempts over the last hour.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct HourCounts {
    pub attempts: u64,
    /// `null` without attempts.
    #[schema(required = true)]
    pub success_rate: Option<f64>,
    pub latency_ms: HourLatency,
}

pub fn hour(counts: &Counts) -> HourCounts {
    HourCounts {
        attempts: counts.attempts,
        success_rate: success_rate(counts),
        latency_ms: HourLatency { p50: counts.latency_quantile_ms(0.5), p99: counts.latency_quantile_ms(0.99) },
    }
}

/// Successes over attempts; `None` without attempts.
pub fn success_rate(counts: &Counts) -> Option<f64> {
    (counts.attempts > 0).then(|| counts.successes as f64 / counts.attempts as f64)
}

/// An endpoint's last attempt that did not succeed, as a timeline's
/// `attempt` entry shows one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LastErrorView {
    pub at: Timestamp,
    #[schema(value_type = String)]
    pub delivery_id: DeliveryId,
    /// `null` when nothing answered (see `error`).
    #[schema(required = true)]
    pub status_code: Option<u16>,
    #[schema(required = true)]
    pub error: Option<String>,
    pub latency_ms: u64,
    /// The node that made the attempt.
    pub node_id: u64,
    /// The receiver's answer, cut to 1 KiB.
    #[schema(required = true)]
    pub response_body: Option<String>,
}

pub fn last_error(last: &LastError) -> LastErrorView {
    let a = &last.attempt;
    LastErrorView {
        at: Timestamp::from_ms(last.at_ms),
        delivery_id: last.delivery_id,
        status_code: a.status_code,
        error: a.error.clone(),
        latency_ms: a.latency_ms,
        node_id: a.node_id,
        response_body: a.response_excerpt.clone(),
    }
}

/// An endpoint's work: attempts under way on the answering node,
/// deliveries queued (pending or retrying) and dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    pub in_flight: usize,
    pub queue_depth: usize,
    pub dead: usize,
}

/// One endpoint's health: its state, breaker and disabled reason, success
/// rate and latency over the last hour, work under way, queued and dead,
/// and its last failed attempt. No secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointHealth {
    #[schema(value_type = String)]
    pub endpoint_id: EndpointId,
    pub url: String,
    #[schema(required = true)]
    pub description: Option<String>,
    pub disabled: bool,
    #[schema(required = true)]
    pub disabled_reason: Option<String>,
    pub breaker: BreakerView,
    /// The first failure since the last success.
    #[schema(required = true)]
    pub failing_since: Option<Timestamp>,
    pub last_hour: HourCounts,
    /// The owner of the endpoint's shard, the node that sends for it; `null` while the shard moves.
    #[schema(required = true)]
    pub sender_node_id: Option<u64>,
    /// `null` when no failed attempt was counted.
    #[schema(required = true)]
    pub last_error: Option<LastErrorView>,
    /// Attempts under way on the answering node: the real figure on `sender_node_id`, 0 elsewhere.
    pub in_flight: usize,
    /// Deliveries pending or retrying.
    pub queue_depth: usize,
    /// Dead deliveries held.
    pub dead: usize,
}

/// A page of endpoints' health, in id order.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointHealthPage {
    /// The answering node.
    pub node_id: u64,
    pub data: Vec<EndpointHealth>,
    /// Pass back as `cursor`; `null`: the end.
    #[schema(value_type = Option<String>, required = true)]
    pub next_cursor: Option<EndpointId>,
}
