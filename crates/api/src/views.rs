//! JSON views of the replicated model, as documented in `docs/API.md`. The
//! model is stored with bincode; these are the shapes callers see.

use hookraft_core::breaker::BreakerStatus;
use hookraft_core::clock::format_rfc3339_ms;
use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::lifecycle::Stage;
use hookraft_core::model::{Delivery, DeliveryState, Endpoint, Event, Ordering, TimelineEntry};
use hookraft_core::ordering::OnDead;
use hookraft_core::retry::RetryPolicy;
use serde_json::{Value, json};

use crate::context::ApiContext;

fn ts(ms: u64) -> Value {
    Value::String(format_rfc3339_ms(ms))
}

fn opt_ts(ms: Option<u64>) -> Value {
    ms.map(ts).unwrap_or(Value::Null)
}

pub fn retry(policy: &RetryPolicy) -> Value {
    json!({
        "attempts_max": policy.attempts_max,
        "base_ms": policy.base_ms,
        "cap_ms": policy.cap_ms,
        "max_age_s": policy.max_age_s,
        "retry_after_max_ms": policy.retry_after_max_ms,
    })
}

/// An endpoint's circuit breaker: `closed`, `open` or `half_open`, and
/// until when it stays open.
pub fn breaker(e: &Endpoint) -> Value {
    let state = match e.breaker.status() {
        BreakerStatus::Closed => "closed",
        BreakerStatus::Open => "open",
        BreakerStatus::HalfOpen => "half_open",
    };
    json!({"state": state, "open_until": opt_ts(e.breaker.open_until_ms())})
}

pub fn endpoint(e: &Endpoint) -> Value {
    json!({
        "id": e.id,
        "url": e.url,
        "secret": e.secret.to_whsec(),
        "description": e.description,
        "event_types": e.event_types,
        "max_in_flight": e.max_in_flight,
        "rate_limit_per_s": e.rate_limit_per_s,
        "timeout_ms": e.timeout_ms,
        "retry": retry(&e.retry),
        "disabled": e.disabled,
        "disabled_reason": e.disabled_reason,
        "breaker": breaker(e),
        "ordering": match e.ordering { Ordering::None => "none", Ordering::PerKey { .. } => "per_key" },
        "on_dead": e.ordering.on_dead().map(|d| match d { OnDead::Block => "block", OnDead::Skip => "skip" }),
        "sources": e.sources.iter().map(|s| if *s == hookraft_core::ids::SourceId::OPERATIONAL {
            crate::routes::endpoints::OPERATIONAL_SOURCE_NAME.to_string()
        } else {
            s.to_string()
        }).collect::<Vec<_>>(),
        "disable_after_s": e.disable_after_s,
        "failing_since": opt_ts(e.failing_since_ms),
        "created_at": ts(e.created_at_ms),
        "updated_at": ts(e.updated_at_ms),
    })
}

/// The state an operator should see: `attempting` while this node has an
/// attempt under way.
pub fn effective_state(ctx: &ApiContext, d: &Delivery) -> DeliveryState {
    if !d.state.is_terminal() && ctx.in_flight.contains(&d.id) { DeliveryState::Attempting } else { d.state }
}

/// A delivery; with its timeline, `lifecycle` is what [`lifecycle_entry`]
/// renders (`hookraft_core::lifecycle`).
pub fn delivery(ctx: &ApiContext, d: &Delivery, ordering_key: Option<&str>, lifecycle: Option<&[Stage<'_>]>) -> Value {
    let mut view = json!({
        "id": d.id,
        "event_id": d.event_id,
        "endpoint_id": d.endpoint_id,
        "ordering_key": ordering_key,
        "sequence": (d.sequence != 0).then_some(d.sequence),
        "state": effective_state(ctx, d).as_str(),
        "attempt_count": d.attempt_count,
        "next_attempt_at": opt_ts(d.next_attempt_at_ms.get()),
        "created_at": ts(d.created_at_ms),
        "updated_at": ts(d.updated_at_ms),
    });
    if let Some(stages) = lifecycle {
        view["timeline"] = Value::Array(stages.iter().map(lifecycle_entry).collect());
    }
    view
}

/// Opens `event`'s payload with this node's keys into its `view`; one that
/// cannot be opened stays `null`, with `payload_error` saying why.
pub fn open_payload(ctx: &ApiContext, event: &Event, view: &mut Value) {
    match ctx.payloads.open(event) {
        Ok(json) => view["payload"] = serde_json::from_slice(&json).unwrap_or(Value::Null),
        Err(error) => view["payload_error"] = Value::String(error.to_string()),
    }
}

/// One stage of a delivery's lifecycle: a recorded entry as
/// [`timeline_entry`] renders it, or a derived one.
pub fn lifecycle_entry(stage: &Stage<'_>) -> Value {
    match stage {
        Stage::Received { at_ms, node_id } => json!({"kind": "received", "at": ts(*at_ms), "node_id": node_id}),
        Stage::Encrypted { at_ms, key_id } => json!({"kind": "encrypted", "at": ts(*at_ms), "key_id": key_id}),
        Stage::Rewrapped { at_ms, key_id } => json!({"kind": "rewrapped", "at": ts(*at_ms), "key_id": key_id}),
        Stage::Leased { at_ms, node_id, fencing_token } => json!({
            "kind": "leased", "at": ts(*at_ms), "node_id": node_id, "fencing_token": fencing_token,
        }),
        Stage::Recorded(entry) => timeline_entry(entry),
    }
}

pub fn timeline_entry(entry: &TimelineEntry) -> Value {
    match entry {
        TimelineEntry::Received { at_ms } => json!({"kind": "received", "at": ts(*at_ms)}),
        TimelineEntry::Attempt { at_ms, attempt } => json!({
            "kind": "attempt",
            "at": ts(*at_ms),
            "started_at": ts(attempt.started_at_ms),
            "status_code": attempt.status_code,
            "error": attempt.error,
            "latency_ms": attempt.latency_ms,
            "node_id": attempt.node_id,
            "fencing_token": attempt.fencing_token,
            "response_body": attempt.response_excerpt,
        }),
        TimelineEntry::RetryScheduled { at_ms, next_attempt_at_ms, rule } => json!({
            "kind": "retry_scheduled",
            "at": ts(*at_ms),
            "next_attempt_at": ts(*next_attempt_at_ms),
            "rule": rule.as_str(),
        }),
        // Recorded before the rule was: unknown, so null.
        TimelineEntry::LegacyRetryScheduled { at_ms, next_attempt_at_ms } => json!({
            "kind": "retry_scheduled",
            "at": ts(*at_ms),
            "next_attempt_at": ts(*next_attempt_at_ms),
            "rule": Value::Null,
        }),
        TimelineEntry::Delivered { at_ms } => json!({"kind": "delivered", "at": ts(*at_ms)}),
        TimelineEntry::Dead { at_ms, reason } => json!({"kind": "dead", "at": ts(*at_ms), "reason": reason}),
        TimelineEntry::Replayed { at_ms } => json!({"kind": "replayed", "at": ts(*at_ms)}),
        TimelineEntry::Truncated { at_ms, dropped } => {
            json!({"kind": "truncated", "at": ts(*at_ms), "dropped": dropped})
        }
        // Held in the delivery's `sequence`, never in its history.
        TimelineEntry::Sequenced { at_ms, sequence } => {
            json!({"kind": "sequenced", "at": ts(*at_ms), "sequence": sequence})
        }
        TimelineEntry::Skipped { at_ms } => json!({"kind": "skipped", "at": ts(*at_ms)}),
        TimelineEntry::IgnoredStale { at_ms, newer } => {
            json!({"kind": "ignored_stale", "at": ts(*at_ms), "newer_event_id": newer})
        }
    }
}

/// The answer to an ingest: the event and the short list of its
/// deliveries in their creation states, so a replayed answer equals the
/// first. Borrowed and serialized as is (no JSON tree is built): it is
/// written once per accepted event.
#[derive(Debug, serde::Serialize)]
pub struct IngestAnswer<'a> {
    id: &'a EventId,
    #[serde(rename = "type")]
    event_type: &'a str,
    deliveries: Vec<IngestedDelivery<'a>>,
}

/// One event's result in the answer to `POST /v1/events/batch`: `status`
/// 202 (created) or 200 (an idempotency key seen before) with the event as
/// [`IngestAnswer`] has it, or 422 with a `detail`.
#[derive(Debug, serde::Serialize)]
pub struct BatchAnswer<'a> {
    status: u16,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    event: Option<IngestAnswer<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

impl<'a> BatchAnswer<'a> {
    pub fn event(status: u16, event: IngestAnswer<'a>) -> Self {
        Self { status, event: Some(event), detail: None }
    }

    pub fn rejected(status: u16, detail: String) -> Self {
        Self { status, event: None, detail: Some(detail) }
    }
}

#[derive(Debug, serde::Serialize)]
struct IngestedDelivery<'a> {
    id: &'a DeliveryId,
    endpoint_id: &'a EndpointId,
    state: &'static str,
}

pub fn ingest_answer<'a>(event: &'a Event, deliveries: &[(&'a Delivery, DeliveryState)]) -> IngestAnswer<'a> {
    IngestAnswer {
        id: &event.id,
        event_type: &event.event_type,
        deliveries: deliveries
            .iter()
            .map(|(d, state)| IngestedDelivery { id: &d.id, endpoint_id: &d.endpoint_id, state: state.as_str() })
            .collect(),
    }
}

/// An event, its payload still unopened (`null`): [`open_payload`] fills
/// it in, outside the state's lock.
pub fn event(ctx: &ApiContext, event: &Event, deliveries: &[&Delivery]) -> Value {
    json!({
        "id": event.id,
        "type": event.event_type,
        "payload": Value::Null,
        "payload_error": Value::Null,
        "key_id": event.payload.key_id(),
        "received_at": ts(event.received_at_ms),
        "received_by": event.received_by,
        "ordering_key": event.ordering_key,
        // An inbound event's key is the engine's own, not the producer's.
        "idempotency_key": if event.inbound.is_some() { None } else { event.idempotency_key.as_deref() },
        "inbound": event.inbound.as_deref().map(|i| json!({
            "source_id": i.source_id,
            "provider_event_id": i.provider_event_id,
            "entity_key": i.entity_key,
            "version": i.version.as_ref().map(|v| match v {
                hookraft_core::inbound::Version::Number(n) => json!(n),
                hookraft_core::inbound::Version::Text(t) => json!(t),
            }),
        })),
        "deliveries": deliveries.iter().map(|d| json!({
            "id": d.id, "endpoint_id": d.endpoint_id, "state": effective_state(ctx, d).as_str(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use hookraft_core::retry::RetryRule;

    use super::*;

    #[test]
    fn a_retry_entry_names_its_rule_and_an_entry_from_before_rules_has_none() {
        let rules = [
            (RetryRule::Backoff, "backoff"),
            (RetryRule::RetryAfter, "retry_after"),
            (RetryRule::RetryAfterCapped, "retry_after_capped"),
            (RetryRule::Throttled, "throttled"),
        ];
        for (rule, name) in rules {
            let view = timeline_entry(&TimelineEntry::RetryScheduled { at_ms: 0, next_attempt_at_ms: 1_000, rule });
            assert_eq!(view["kind"], "retry_scheduled");
            assert_eq!(view["rule"], name);
            assert_eq!(view["next_attempt_at"], ts(1_000));
        }
        let legacy = timeline_entry(&TimelineEntry::LegacyRetryScheduled { at_ms: 0, next_attempt_at_ms: 1_000 });
        assert_eq!(legacy["kind"], "retry_scheduled");
        assert!(legacy["rule"].is_null(), "{legacy}");
    }

    #[test]
    fn the_retry_policy_view_shows_retry_after_max_ms() {
        let view = retry(&RetryPolicy { retry_after_max_ms: 90_000, ..RetryPolicy::default() });
        assert_eq!(view["retry_after_max_ms"], 90_000);
        assert_eq!(view["cap_ms"], RetryPolicy::default().cap_ms);
    }
}
