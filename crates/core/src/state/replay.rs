//! Replay: re-queueing dead (or delivered) deliveries.
//!
//! A bulk replay walks the endpoint's dead index (`ClusterState::dead_of`)
//! in id order, never the whole state, and one entry re-queues at most
//! [`REPLAY_BATCH_MAX`] deliveries after a cursor: the API proposes steps
//! one after another, as retention proposes `Prune`s, so no single apply
//! holds the state's lock for long however many deliveries died.

use super::ClusterState;
use crate::command::{ReplayTarget, Response};
use crate::ids::{DeliveryId, EndpointId};
use crate::model::{DeliveryState, OptionalMs, TimelineEntry};

/// Deliveries one bulk-replay entry re-queues at most: about as long an
/// apply as a `Prune` of 512 events.
pub const REPLAY_BATCH_MAX: u32 = 512;
/// Dead deliveries one bulk-replay entry looks at, at most: those outside
/// the time window are stepped over, but not without bound.
pub const REPLAY_SCAN_MAX: usize = 4 * REPLAY_BATCH_MAX as usize;

/// The time window of a bulk replay: creation times in `[since, until)`.
#[derive(Debug, Clone, Copy)]
struct Window {
    since_ms: u64,
    until_ms: u64,
}

impl Window {
    fn new(since_ms: Option<u64>, until_ms: Option<u64>) -> Self {
        Self { since_ms: since_ms.unwrap_or(0), until_ms: until_ms.unwrap_or(u64::MAX) }
    }

    fn contains(self, created_at_ms: u64) -> bool {
        self.since_ms <= created_at_ms && created_at_ms < self.until_ms
    }
}

/// What one step chose: the deliveries to re-queue, and the last dead
/// delivery it looked at when the index may hold more after it.
struct Step {
    chosen: Vec<DeliveryId>,
    next_after: Option<DeliveryId>,
}

impl ClusterState {
    pub(super) fn replay(&mut self, target: &ReplayTarget, now_ms: u64) -> Response {
        match target {
            ReplayTarget::Delivery(id) => {
                self.bring_back_delivery(id);
                let Some(delivery) = self.deliveries.get(id) else {
                    return Response::NotFound { what: format!("delivery {id}") };
                };
                if !delivery.state.is_terminal() {
                    return Response::Conflict { detail: format!("delivery {id} is already queued") };
                }
                let endpoint_id = delivery.endpoint_id;
                if let Some(refused) = self.replay_refusal(&endpoint_id) {
                    return refused;
                }
                self.requeue(id, &endpoint_id, now_ms);
                Response::Replayed { deliveries: vec![(*id, endpoint_id)] }
            }
            ReplayTarget::EndpointDead { endpoint_id, since_ms, until_ms } => {
                if let Some(refused) = self.replay_refusal(endpoint_id) {
                    return refused;
                }
                let step = self.dead_step(endpoint_id, Window::new(*since_ms, *until_ms), None, usize::MAX, usize::MAX);
                Response::Replayed { deliveries: self.requeue_all(&step.chosen, endpoint_id, now_ms) }
            }
            ReplayTarget::EndpointDeadAfter { endpoint_id, since_ms, until_ms, after, max } => {
                if let Some(refused) = self.replay_refusal(endpoint_id) {
                    return refused;
                }
                let max = (*max).min(REPLAY_BATCH_MAX) as usize;
                let window = Window::new(*since_ms, *until_ms);
                let step = self.dead_step(endpoint_id, window, after.as_ref(), max, REPLAY_SCAN_MAX);
                let deliveries = self.requeue_all(&step.chosen, endpoint_id, now_ms);
                Response::ReplayedUpTo { deliveries, next_after: step.next_after }
            }
        }
    }

    /// The dead deliveries of `endpoint_id` after `after` in `window`, up to
    /// `max` of them and `scan` looked at.
    fn dead_step(
        &self,
        endpoint_id: &EndpointId,
        window: Window,
        after: Option<&DeliveryId>,
        max: usize,
        scan: usize,
    ) -> Step {
        let mut chosen = Vec::new();
        let mut looked = 0;
        let mut last = None;
        let mut dead = self.dead_of(endpoint_id, after);
        while chosen.len() < max && looked < scan {
            let Some(id) = dead.next() else {
                return Step { chosen, next_after: None };
            };
            looked += 1;
            last = Some(id);
            if self.delivery(&id).is_some_and(|d| window.contains(d.created_at_ms)) {
                chosen.push(id);
            }
        }
        // Stopped at a bound: more may follow, unless the index ends here.
        let next_after = if dead.next().is_some() { last } else { None };
        Step { chosen, next_after }
    }

    fn requeue_all(
        &mut self,
        chosen: &[DeliveryId],
        endpoint_id: &EndpointId,
        now_ms: u64,
    ) -> Vec<(DeliveryId, EndpointId)> {
        for id in chosen {
            self.bring_back_delivery(id);
            self.requeue(id, endpoint_id, now_ms);
        }
        chosen.iter().map(|d| (*d, *endpoint_id)).collect()
    }

    fn replay_refusal(&self, endpoint_id: &EndpointId) -> Option<Response> {
        match self.endpoints.get(endpoint_id) {
            None => Some(Response::NotFound { what: format!("endpoint {endpoint_id}") }),
            Some(e) if e.disabled => Some(Response::Conflict {
                detail: format!(
                    "endpoint {endpoint_id} is disabled; enable it (PATCH disabled=false) before replaying"
                ),
            }),
            Some(_) => None,
        }
    }

    fn requeue(&mut self, id: &DeliveryId, endpoint_id: &EndpointId, now_ms: u64) {
        let changed = self.change_delivery(id, |delivery| {
            delivery.state = DeliveryState::Pending;
            delivery.cycle_attempts = 0;
            delivery.cycle_started_at_ms = now_ms;
            delivery.next_attempt_at_ms = OptionalMs::at(now_ms);
            delivery.updated_at_ms = now_ms;
            delivery.push_timeline(TimelineEntry::Replayed { at_ms: now_ms });
        });
        if changed.is_some() {
            self.index_delivery(id, endpoint_id, true);
            self.unmark_dead(id, endpoint_id);
        }
    }
}
