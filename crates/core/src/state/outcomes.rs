//! Recording attempt outcomes under fencing tokens.

use super::operational::Kind;
use super::throughput::Flow;
use super::{ClusterState, tally};
use crate::breaker::BreakerStatus;
use crate::command::{Outcome, Response};
use crate::ids::NodeId;
use crate::model::{Delivery, DeliveryState, OptionalMs, TimelineEntry};
use crate::retry::{Decision, RetryRule};

/// How one outcome of a batch was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Applied,
    /// Its token is not the shard's current grant to the reporting node.
    Stale,
    /// Its delivery no longer exists or is already delivered, or the
    /// outcome was recorded already.
    Ignored,
}

impl ClusterState {
    pub(super) fn record_outcomes(&mut self, node_id: NodeId, outcomes: &[Outcome], now_ms: u64) -> Response {
        let (mut applied, mut stale, mut ignored) = (0, 0, 0);
        for outcome in outcomes {
            match self.record_outcome(node_id, outcome, now_ms) {
                Verdict::Applied => applied += 1,
                Verdict::Stale => stale += 1,
                Verdict::Ignored => ignored += 1,
            }
        }
        self.outcomes_rejected_stale += u64::from(stale);
        if stale > 0 {
            // Counted for the node that sent them, which no longer owns the shard.
            self.tallies.tally(node_id).stale_outcomes += u64::from(stale);
        }
        Response::OutcomesApplied { applied, stale, ignored }
    }

    fn record_outcome(&mut self, node_id: NodeId, outcome: &Outcome, now_ms: u64) -> Verdict {
        // Late, or twice: an outcome of a finished delivery is judged as
        // it always was, on the record in memory (settled again after).
        self.bring_back_delivery(&outcome.delivery_id);
        let Some(delivery) = self.deliveries.get(&outcome.delivery_id) else { return Verdict::Ignored };
        let endpoint_id = delivery.endpoint_id;
        // The fence: the outcome must come from the current grant of the
        // endpoint's shard, to the node that reports it.
        let grant = self.grant_for(&endpoint_id);
        let fenced =
            outcome.shard != endpoint_id.shard() || grant.token != outcome.token || grant.owner != Some(node_id);
        #[cfg(feature = "break")]
        let fenced = fenced && !crate::breaks::skip_fencing();
        if fenced {
            return Verdict::Stale;
        }
        if delivery.has_attempt(&outcome.attempt) {
            // The outcome batcher proposes a batch again when it cannot tell
            // whether it committed (a forward that timed out after the
            // commit), so an outcome can come twice. Its attempt record
            // (node, token, start time, result) names one attempt: a retry
            // is never due in the millisecond its attempt ended
            // (`retry::decide`), so one delivery's attempts under one grant
            // start at distinct times. Counting it again would take an
            // attempt off the delivery's retry budget.
            return Verdict::Ignored;
        }
        let first_sent = tally::first_attempt_pending(delivery)
            && !matches!(outcome.decision, Decision::Deferred { .. } | Decision::IgnoredStale { .. });
        let created_at_ms = delivery.created_at_ms;
        let (still_active, gone) =
            match self.change_delivery(&outcome.delivery_id, |delivery| apply_outcome(delivery, outcome, now_ms)) {
                Some(Applied::Changed { still_active, gone }) => (still_active, gone),
                Some(Applied::Done(verdict)) => {
                    if verdict == Verdict::Applied {
                        // A success reached a dead delivery: it is delivered now.
                        self.unmark_dead(&outcome.delivery_id, &endpoint_id);
                        self.throughput.note(Flow::Delivered, now_ms);
                        self.note_if_delivered(&outcome.delivery_id);
                        self.note_health(&endpoint_id, outcome, now_ms);
                    }
                    return verdict;
                }
                None => return Verdict::Ignored,
            };
        // The fence passed: `node_id` owns the shard and counts the attempt.
        if first_sent {
            let waited_ms = outcome.attempt.started_at_ms.saturating_sub(created_at_ms);
            self.tallies.tally(node_id).to_first_attempt.observe(waited_ms);
        }
        if matches!(outcome.decision, Decision::Retry { .. }) {
            self.tallies.tally(node_id).retries += 1;
        }
        let delivery_id = outcome.delivery_id;
        let dead = matches!(outcome.decision, Decision::Dead { .. } | Decision::Gone);
        self.index_delivery(&delivery_id, &endpoint_id, still_active);
        if dead {
            self.mark_dead(&delivery_id, &endpoint_id, now_ms);
        }
        match outcome.decision {
            Decision::Delivered => self.throughput.note(Flow::Delivered, now_ms),
            Decision::Retry { .. } => self.throughput.note(Flow::Retried, now_ms),
            _ => {}
        }
        let mut breaker_moved = None;
        let mut disabled_now = false;
        if let Some(endpoint) = self.endpoints.get_mut(&endpoint_id) {
            if let Some(breaker) = &outcome.breaker {
                let (before, after) = (endpoint.breaker.status(), breaker.status());
                breaker_moved = match (before, after) {
                    (BreakerStatus::Open, _) | (_, BreakerStatus::HalfOpen) => None,
                    (_, BreakerStatus::Open) => Some(Kind::BreakerOpened),
                    (BreakerStatus::HalfOpen, BreakerStatus::Closed) => Some(Kind::BreakerClosed),
                    (BreakerStatus::Closed, BreakerStatus::Closed) => None,
                };
                endpoint.breaker = breaker.clone();
            }
            if gone && !endpoint.disabled {
                endpoint.disabled = true;
                endpoint.disabled_reason = Some("the endpoint answered 410 Gone".into());
                endpoint.updated_at_ms = now_ms;
                self.fanout.invalidate();
                disabled_now = true;
            }
        }
        if let Decision::Dead { reason } = &outcome.decision {
            self.emit_dead(&delivery_id, reason, now_ms);
        }
        if let Some(kind) = breaker_moved {
            self.emit_about(kind, &endpoint_id, now_ms);
        }
        if gone {
            let pending = self.active.get(&endpoint_id).map_or(0, |a| a.len());
            self.dead_letter_active(&endpoint_id, "endpoint disabled after 410 Gone", now_ms);
            if disabled_now {
                self.emit_disabled(&endpoint_id, "the endpoint answered 410 Gone", pending, now_ms);
            }
        }
        self.note_health(&endpoint_id, outcome, now_ms);
        if !matches!(outcome.decision, Decision::Deferred { .. } | Decision::IgnoredStale { .. }) {
            self.stats.record(&endpoint_id, &delivery_id, &outcome.attempt, now_ms);
        }
        self.note_if_delivered(&delivery_id);
        Verdict::Applied
    }
}

impl ClusterState {
    /// Tells the stale guard of a delivery that is now delivered.
    fn note_if_delivered(&mut self, id: &crate::ids::DeliveryId) {
        if let Some(delivery) = self.deliveries.get(id).filter(|d| d.state == DeliveryState::Delivered).cloned() {
            self.note_delivered(&delivery);
        }
    }
}

/// What [`apply_outcome`] did to a delivery.
enum Applied {
    /// Nothing more to do: the delivery had already ended.
    Done(Verdict),
    /// The outcome moved the delivery on; the caller updates the index
    /// and, on a 410, the endpoint.
    Changed { still_active: bool, gone: bool },
}

/// Records an attempt's outcome on its delivery (its fence already checked).
fn apply_outcome(delivery: &mut Delivery, outcome: &Outcome, now_ms: u64) -> Applied {
    if let Decision::IgnoredStale { newer } = &outcome.decision {
        // Nothing was sent: no attempt to record, none spent.
        if delivery.state.is_terminal() {
            return Applied::Done(Verdict::Ignored);
        }
        delivery.state = DeliveryState::IgnoredStale;
        delivery.next_attempt_at_ms = OptionalMs::NONE;
        delivery.updated_at_ms = now_ms;
        delivery.push_timeline(TimelineEntry::IgnoredStale { at_ms: now_ms, newer: Box::new(*newer) });
        return Applied::Changed { still_active: false, gone: false };
    }
    if delivery.state.is_terminal() {
        // The attempt was in flight when the delivery ended (a duplicate
        // send that raced a success, or an operator dead-lettered it).
        // Keep the record; only a success may still change a dead delivery.
        delivery.push_timeline(TimelineEntry::Attempt { at_ms: now_ms, attempt: Box::new(outcome.attempt.clone()) });
        delivery.attempt_count = delivery.attempt_count.saturating_add(1);
        if delivery.state == DeliveryState::Dead && outcome.decision == Decision::Delivered {
            delivery.state = DeliveryState::Delivered;
            delivery.updated_at_ms = now_ms;
            delivery.push_timeline(TimelineEntry::Delivered { at_ms: now_ms });
            return Applied::Done(Verdict::Applied);
        }
        return Applied::Done(Verdict::Ignored);
    }
    delivery.attempt_count = delivery.attempt_count.saturating_add(1);
    if !matches!(outcome.decision, Decision::Deferred { .. }) {
        delivery.cycle_attempts = delivery.cycle_attempts.saturating_add(1);
    }
    delivery.updated_at_ms = now_ms;
    delivery.push_timeline(TimelineEntry::Attempt { at_ms: now_ms, attempt: Box::new(outcome.attempt.clone()) });
    let mut still_active = true;
    let mut gone = false;
    match &outcome.decision {
        Decision::Delivered => {
            delivery.state = DeliveryState::Delivered;
            delivery.next_attempt_at_ms = OptionalMs::NONE;
            delivery.push_timeline(TimelineEntry::Delivered { at_ms: now_ms });
            still_active = false;
        }
        Decision::Retry { at_ms, rule } => {
            delivery.state = DeliveryState::Retrying;
            delivery.next_attempt_at_ms = OptionalMs::at(*at_ms);
            delivery.push_timeline(TimelineEntry::RetryScheduled {
                at_ms: now_ms,
                next_attempt_at_ms: *at_ms,
                rule: *rule,
            });
        }
        Decision::Deferred { at_ms } => {
            delivery.state = DeliveryState::Retrying;
            delivery.next_attempt_at_ms = OptionalMs::at(*at_ms);
            delivery.push_timeline(TimelineEntry::RetryScheduled {
                at_ms: now_ms,
                next_attempt_at_ms: *at_ms,
                rule: RetryRule::PayloadUnavailable,
            });
        }
        Decision::Dead { reason } => {
            delivery.state = DeliveryState::Dead;
            delivery.next_attempt_at_ms = OptionalMs::NONE;
            delivery.push_timeline(TimelineEntry::Dead { at_ms: now_ms, reason: reason.clone() });
            still_active = false;
        }
        Decision::IgnoredStale { .. } => unreachable!("handled above"),
        Decision::Gone => {
            delivery.state = DeliveryState::Dead;
            delivery.next_attempt_at_ms = OptionalMs::NONE;
            let reason = "endpoint answered 410 Gone; endpoint disabled".to_string();
            delivery.push_timeline(TimelineEntry::Dead { at_ms: now_ms, reason });
            still_active = false;
            gone = true;
        }
    }
    Applied::Changed { still_active, gone }
}
