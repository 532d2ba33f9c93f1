//! Deliveries and their timelines as callers see them.

use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::lifecycle::Stage;
use hookraft_core::model::{Delivery, DeliveryState, TimelineEntry};
use serde::Serialize;
use utoipa::ToSchema;

use super::Timestamp;
use crate::context::ApiContext;

/// A delivery's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StateView {
    Pending,
    /// An attempt is under way on the answering node.
    Attempting,
    Retrying,
    Delivered,
    Dead,
    /// Not sent: a newer version of its entity key was delivered first (inbound events).
    IgnoredStale,
}

impl From<DeliveryState> for StateView {
    fn from(state: DeliveryState) -> Self {
        match state {
            DeliveryState::Pending => StateView::Pending,
            DeliveryState::Attempting => StateView::Attempting,
            DeliveryState::Retrying => StateView::Retrying,
            DeliveryState::Delivered => StateView::Delivered,
            DeliveryState::Dead => StateView::Dead,
            DeliveryState::IgnoredStale => StateView::IgnoredStale,
        }
    }
}

/// The state an operator should see: `attempting` while this node has an
/// attempt under way.
pub fn effective_state(ctx: &ApiContext, d: &Delivery) -> DeliveryState {
    if !d.state.is_terminal() && ctx.in_flight.contains(&d.id) { DeliveryState::Attempting } else { d.state }
}

/// A delivery; `timeline` only when one delivery is read.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    #[schema(value_type = String, example = "dlv_01jd5m3k4r8v2w6x9y0z1a2b3c")]
    pub id: DeliveryId,
    #[schema(value_type = String)]
    pub event_id: EventId,
    #[schema(value_type = String)]
    pub endpoint_id: EndpointId,
    /// The event's ordering key.
    #[schema(required = true)]
    pub ordering_key: Option<String>,
    /// Its number in its key's order at an ordered endpoint; `null` when not ordered.
    #[schema(required = true)]
    pub sequence: Option<u32>,
    pub state: StateView,
    /// Attempts over the delivery's whole life.
    pub attempt_count: u32,
    #[schema(required = true)]
    pub next_attempt_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// In a listing: the type of the delivery's event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// The delivery's lifecycle, oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Vec<TimelineEntryView>>,
}

/// A delivery; with its timeline, `lifecycle` is what [`lifecycle_entry`]
/// renders (`hookraft_core::lifecycle`).
pub fn delivery(
    ctx: &ApiContext,
    d: &Delivery,
    ordering_key: Option<&str>,
    lifecycle: Option<&[Stage<'_>]>,
) -> DeliveryView {
    DeliveryView {
        id: d.id,
        event_id: d.event_id,
        endpoint_id: d.endpoint_id,
        ordering_key: ordering_key.map(str::to_string),
        sequence: (d.sequence != 0).then_some(d.sequence),
        state: effective_state(ctx, d).into(),
        attempt_count: d.attempt_count,
        next_attempt_at: Timestamp::from_opt_ms(d.next_attempt_at_ms.get()),
        created_at: Timestamp::from_ms(d.created_at_ms),
        updated_at: Timestamp::from_ms(d.updated_at_ms),
        event_type: None,
        timeline: lifecycle.map(|stages| stages.iter().map(lifecycle_entry).collect()),
    }
}

/// What chose a retry's wait.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetryRuleView {
    Backoff,
    RetryAfter,
    RetryAfterCapped,
    Throttled,
    PayloadUnavailable,
}

impl From<hookraft_core::retry::RetryRule> for RetryRuleView {
    fn from(rule: hookraft_core::retry::RetryRule) -> Self {
        use hookraft_core::retry::RetryRule;
        match rule {
            RetryRule::Backoff => RetryRuleView::Backoff,
            RetryRule::RetryAfter => RetryRuleView::RetryAfter,
            RetryRule::RetryAfterCapped => RetryRuleView::RetryAfterCapped,
            RetryRule::Throttled => RetryRuleView::Throttled,
            RetryRule::PayloadUnavailable => RetryRuleView::PayloadUnavailable,
        }
    }
}

/// One stage of a delivery's lifecycle, by `kind`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TimelineEntryView {
    /// The event was accepted (by `node_id`; `null` for events from before nodes were recorded).
    Received {
        at: Timestamp,
        #[schema(required = true)]
        node_id: Option<u64>,
    },
    /// The payload was sealed under `key_id` when received.
    Encrypted {
        at: Timestamp,
        key_id: String,
    },
    /// The payload was sealed again under `key_id` by a rewrap.
    Rewrapped {
        at: Timestamp,
        key_id: String,
    },
    /// `node_id` took the delivery up under `fencing_token`.
    Leased {
        at: Timestamp,
        node_id: u64,
        fencing_token: u64,
    },
    /// One attempt; `status_code` is `null` when nothing answered (see `error`).
    Attempt {
        at: Timestamp,
        started_at: Timestamp,
        #[schema(required = true)]
        status_code: Option<u16>,
        #[schema(required = true)]
        error: Option<String>,
        latency_ms: u64,
        node_id: u64,
        fencing_token: u64,
        /// The first KiB of the response body.
        #[schema(required = true)]
        response_body: Option<String>,
    },
    /// A retry was scheduled; `rule` is `null` on entries recorded before rules were.
    RetryScheduled {
        at: Timestamp,
        next_attempt_at: Timestamp,
        #[schema(required = true)]
        rule: Option<RetryRuleView>,
    },
    Delivered {
        at: Timestamp,
    },
    Dead {
        at: Timestamp,
        reason: String,
    },
    Replayed {
        at: Timestamp,
    },
    /// Stands for `dropped` older entries, past the timeline's bound.
    Truncated {
        at: Timestamp,
        dropped: u64,
    },
    Sequenced {
        at: Timestamp,
        sequence: u64,
    },
    /// An operator skipped this dead head of its key.
    Skipped {
        at: Timestamp,
    },
    /// Not sent: a newer version of its entity key was delivered first.
    IgnoredStale {
        at: Timestamp,
        #[schema(value_type = String)]
        newer_event_id: EventId,
    },
}

/// One stage of a delivery's lifecycle: a recorded entry as
/// [`timeline_entry`] renders it, or a derived one.
pub fn lifecycle_entry(stage: &Stage<'_>) -> TimelineEntryView {
    let at = |ms: &u64| Timestamp::from_ms(*ms);
    match stage {
        Stage::Received { at_ms, node_id } => TimelineEntryView::Received { at: at(at_ms), node_id: *node_id },
        Stage::Encrypted { at_ms, key_id } => {
            TimelineEntryView::Encrypted { at: at(at_ms), key_id: key_id.to_string() }
        }
        Stage::Rewrapped { at_ms, key_id } => {
            TimelineEntryView::Rewrapped { at: at(at_ms), key_id: key_id.to_string() }
        }
        Stage::Leased { at_ms, node_id, fencing_token } => {
            TimelineEntryView::Leased { at: at(at_ms), node_id: *node_id, fencing_token: *fencing_token }
        }
        Stage::Recorded(entry) => timeline_entry(entry),
    }
}

pub fn timeline_entry(entry: &TimelineEntry) -> TimelineEntryView {
    let at = |ms: &u64| Timestamp::from_ms(*ms);
    match entry {
        // The recorded entry knows no node; the lifecycle's derived one does.
        TimelineEntry::Received { at_ms } => TimelineEntryView::Received { at: at(at_ms), node_id: None },
        TimelineEntry::Attempt { at_ms, attempt } => TimelineEntryView::Attempt {
            at: at(at_ms),
            started_at: at(&attempt.started_at_ms),
            status_code: attempt.status_code,
            error: attempt.error.clone(),
            latency_ms: attempt.latency_ms,
            node_id: attempt.node_id,
            fencing_token: attempt.fencing_token,
            response_body: attempt.response_excerpt.clone(),
        },
        TimelineEntry::RetryScheduled { at_ms, next_attempt_at_ms, rule } => TimelineEntryView::RetryScheduled {
            at: at(at_ms),
            next_attempt_at: at(next_attempt_at_ms),
            rule: Some((*rule).into()),
        },
        TimelineEntry::Delivered { at_ms } => TimelineEntryView::Delivered { at: at(at_ms) },
        TimelineEntry::Dead { at_ms, reason } => TimelineEntryView::Dead { at: at(at_ms), reason: reason.clone() },
        TimelineEntry::Replayed { at_ms } => TimelineEntryView::Replayed { at: at(at_ms) },
        TimelineEntry::Truncated { at_ms, dropped } => {
            TimelineEntryView::Truncated { at: at(at_ms), dropped: *dropped }
        }
        // Held in the delivery's `sequence`, never in its history.
        TimelineEntry::Sequenced { at_ms, sequence } => {
            TimelineEntryView::Sequenced { at: at(at_ms), sequence: *sequence }
        }
        TimelineEntry::Skipped { at_ms } => TimelineEntryView::Skipped { at: at(at_ms) },
        TimelineEntry::IgnoredStale { at_ms, newer } => {
            TimelineEntryView::IgnoredStale { at: at(at_ms), newer_event_id: **newer }
        }
    }
}

/// A page of deliveries (without timelines), in id order.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryPage {
    pub data: Vec<DeliveryView>,
    /// Pass back as `cursor`; a short or empty page with a cursor means go
    /// on, `null` means the end.
    #[schema(value_type = Option<String>, required = true)]
    pub next_cursor: Option<DeliveryId>,
}

/// The answer to replaying one delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayedDelivery {
    #[schema(value_type = String)]
    pub id: DeliveryId,
    /// Always `pending`: the delivery is queued again.
    pub state: StateView,
}

#[cfg(test)]
mod tests {
    use hookraft_core::retry::RetryRule;
    use serde_json::Value;

    use super::*;

    fn json(entry: TimelineEntryView) -> Value {
        serde_json::to_value(entry).expect("serializes")
    }

    #[test]
    fn a_retry_entry_names_its_rule_and_an_entry_from_before_rules_has_none() {
        let rules = [
            (RetryRule::Backoff, "backoff"),
            (RetryRule::RetryAfter, "retry_after"),
            (RetryRule::RetryAfterCapped, "retry_after_capped"),
            (RetryRule::Throttled, "throttled"),
            (RetryRule::PayloadUnavailable, "payload_unavailable"),
        ];
        for (rule, name) in rules {
            assert_eq!(rule.as_str(), name, "the view and the core name a rule alike");
            let view =
                json(timeline_entry(&TimelineEntry::RetryScheduled { at_ms: 0, next_attempt_at_ms: 1_000, rule }));
            assert_eq!(view["kind"], "retry_scheduled");
            assert_eq!(view["rule"], name);
            assert_eq!(view["next_attempt_at"], "1970-01-01T00:00:01.000Z");
        }
    }

    #[test]
    fn every_delivery_state_is_named_as_the_core_names_it() {
        for state in [
            DeliveryState::Pending,
            DeliveryState::Attempting,
            DeliveryState::Retrying,
            DeliveryState::Delivered,
            DeliveryState::Dead,
            DeliveryState::IgnoredStale,
        ] {
            assert_eq!(serde_json::to_value(StateView::from(state)).expect("serializes"), state.as_str());
        }
    }
}
