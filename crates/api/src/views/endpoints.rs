//! Endpoints as callers see them, and the answers of the endpoint routes.

use hookraft_core::breaker::BreakerStatus;
use hookraft_core::ids::{DeliveryId, EndpointId, SourceId};
use hookraft_core::model::{Endpoint, Ordering};
use hookraft_core::ordering::OnDead;
use hookraft_core::retry::RetryPolicy;
use serde::Serialize;
use utoipa::ToSchema;

use super::Timestamp;

/// An endpoint's retry policy.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetryView {
    /// Attempts in one delivery cycle before the delivery is dead-lettered.
    pub attempts_max: u32,
    /// Backoff base: the first retry waits up to this long.
    pub base_ms: u64,
    /// Backoff ceiling.
    pub cap_ms: u64,
    /// Age of a delivery's cycle after which it is dead-lettered instead of retried.
    pub max_age_s: u64,
    /// The longest wait a receiver's `Retry-After` may set (0 ignores the header).
    pub retry_after_max_ms: u64,
}

pub fn retry(policy: &RetryPolicy) -> RetryView {
    RetryView {
        attempts_max: policy.attempts_max,
        base_ms: policy.base_ms,
        cap_ms: policy.cap_ms,
        max_age_s: policy.max_age_s,
        retry_after_max_ms: policy.retry_after_max_ms,
    }
}

/// A circuit breaker's state.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BreakerView {
    pub state: BreakerState,
    /// Until when an open breaker holds attempts back.
    #[schema(required = true)]
    pub open_until: Option<Timestamp>,
}

/// Whether the events of one `ordering_key` reach the endpoint one at a time, in order.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderingView {
    None,
    PerKey,
}

/// What a dead delivery does to its key's order (ordered endpoints only).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnDeadView {
    Block,
    Skip,
}

/// An endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointView {
    #[schema(value_type = String, example = "ep_01jd5m3k4r8v2w6x9y0z1a2b3c")]
    pub id: EndpointId,
    pub url: String,
    /// The current signing secret, `whsec_<base64>`; left out for a token
    /// of the read scope, and when it is sealed under a key this node's
    /// keyring lacks (`/readyz` names it).
    #[schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[schema(required = true)]
    pub description: Option<String>,
    /// `null`: every event type.
    #[schema(required = true)]
    pub event_types: Option<Vec<String>>,
    pub max_in_flight: u32,
    /// `null`: unlimited.
    #[schema(required = true)]
    pub rate_limit_per_s: Option<u32>,
    pub timeout_ms: u32,
    pub retry: RetryView,
    pub disabled: bool,
    #[schema(required = true)]
    pub disabled_reason: Option<String>,
    pub breaker: BreakerView,
    pub ordering: OrderingView,
    /// `null` unless `ordering` is `per_key`.
    #[schema(required = true)]
    pub on_dead: Option<OnDeadView>,
    /// The inbound sources it receives from (`hookraft` for operational
    /// events); empty: the producers' events.
    pub sources: Vec<String>,
    /// Seconds every attempt may fail before the endpoint is disabled; 0 never.
    pub disable_after_s: u64,
    /// The first failure since the last success.
    #[schema(required = true)]
    pub failing_since: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// An endpoint's circuit breaker: its state, and until when it stays open.
pub fn breaker(e: &Endpoint) -> BreakerView {
    let state = match e.breaker.status() {
        BreakerStatus::Closed => BreakerState::Closed,
        BreakerStatus::Open => BreakerState::Open,
        BreakerStatus::HalfOpen => BreakerState::HalfOpen,
    };
    BreakerView { state, open_until: Timestamp::from_opt_ms(e.breaker.open_until_ms()) }
}

/// `e`'s view; `secret` is its current secret opened, when it is shown.
pub fn endpoint(e: &Endpoint, secret: Option<String>) -> EndpointView {
    EndpointView {
        id: e.id,
        url: e.url.clone(),
        secret,
        description: e.description.clone(),
        event_types: e.event_types.clone(),
        max_in_flight: e.max_in_flight,
        rate_limit_per_s: e.rate_limit_per_s,
        timeout_ms: e.timeout_ms,
        retry: retry(&e.retry),
        disabled: e.disabled,
        disabled_reason: e.disabled_reason.clone(),
        breaker: breaker(e),
        ordering: match e.ordering {
            Ordering::None => OrderingView::None,
            Ordering::PerKey { .. } => OrderingView::PerKey,
        },
        on_dead: e.ordering.on_dead().map(|d| match d {
            OnDead::Block => OnDeadView::Block,
            OnDead::Skip => OnDeadView::Skip,
        }),
        sources: e
            .sources
            .iter()
            .map(|s| {
                if *s == SourceId::OPERATIONAL {
                    crate::routes::endpoints::OPERATIONAL_SOURCE_NAME.to_string()
                } else {
                    s.to_string()
                }
            })
            .collect(),
        disable_after_s: e.disable_after_s,
        failing_since: Timestamp::from_opt_ms(e.failing_since_ms),
        created_at: Timestamp::from_ms(e.created_at_ms),
        updated_at: Timestamp::from_ms(e.updated_at_ms),
    }
}

/// Every endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointList {
    pub data: Vec<EndpointView>,
}

/// The answer to a secret rotation.
#[derive(Debug, Serialize, ToSchema)]
pub struct RotatedSecret {
    /// The new signing secret.
    pub secret: String,
    /// Until when the previous secret still signs.
    pub previous_secret_expires_at: Timestamp,
}

/// What one bulk-replay call replayed, and where the next goes on.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkReplayed {
    pub replayed: usize,
    /// Pass back as `cursor`; `null`: every dead delivery in the window was replayed.
    #[schema(value_type = Option<String>, required = true)]
    pub next_cursor: Option<DeliveryId>,
}

/// An ordering key a dead delivery blocks.
#[derive(Debug, Serialize, ToSchema)]
pub struct BlockedKey {
    pub ordering_key: String,
    #[schema(value_type = String)]
    pub delivery_id: DeliveryId,
    pub sequence: u64,
}

/// A page of blocked keys, in key order.
#[derive(Debug, Serialize, ToSchema)]
pub struct BlockedKeys {
    pub data: Vec<BlockedKey>,
    /// Pass back as `cursor`; `null`: the end.
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

/// The answer to skipping a blocked key.
#[derive(Debug, Serialize, ToSchema)]
pub struct Skipped {
    /// The dead delivery that blocked the key; it stays dead.
    #[schema(value_type = String)]
    pub skipped: DeliveryId,
    /// The key's next delivery, now free to go.
    #[schema(value_type = Option<String>, required = true)]
    pub next: Option<DeliveryId>,
}

/// Failed attempts by kind.
#[derive(Debug, Serialize, ToSchema)]
pub struct FailureCounts {
    pub client_4xx: u64,
    pub server_5xx: u64,
    pub timeout: u64,
    pub connect: u64,
    pub other: u64,
}

/// Latency quantiles: the upper bound of the histogram bucket each falls
/// in; `null` without attempts or past the last bound (30 s).
#[derive(Debug, Serialize, ToSchema)]
pub struct LatencyQuantiles {
    #[schema(required = true)]
    pub p50: Option<u64>,
    #[schema(required = true)]
    pub p90: Option<u64>,
    #[schema(required = true)]
    pub p99: Option<u64>,
}

/// An endpoint's attempts in one window.
#[derive(Debug, Serialize, ToSchema)]
pub struct WindowCounts {
    pub attempts: u64,
    pub successes: u64,
    /// `null` without attempts.
    #[schema(required = true)]
    pub success_rate: Option<f64>,
    pub failures: FailureCounts,
    pub latency_ms: LatencyQuantiles,
}

/// The windows of an endpoint's stats.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatsWindows {
    #[serde(rename = "5m")]
    pub five_minutes: WindowCounts,
    #[serde(rename = "1h")]
    pub one_hour: WindowCounts,
    #[serde(rename = "24h")]
    pub one_day: WindowCounts,
}

/// An endpoint's recent attempts as the answering node counted them, with
/// its work and its last failure as `GET /v1/stats/endpoints` shows them.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointStats {
    #[schema(value_type = String)]
    pub endpoint_id: EndpointId,
    /// The answering node.
    pub node_id: u64,
    pub windows: StatsWindows,
    /// The owner of the endpoint's shard, the node that sends for it; `null` while the shard moves.
    #[schema(required = true)]
    pub sender_node_id: Option<u64>,
    /// `null` when no failed attempt was counted.
    #[schema(required = true)]
    pub last_error: Option<super::stats::LastErrorView>,
    /// Attempts under way on the answering node: the real figure on `sender_node_id`, 0 elsewhere.
    pub in_flight: usize,
    /// Deliveries pending or retrying.
    pub queue_depth: usize,
    /// Dead deliveries held.
    pub dead: usize,
}
