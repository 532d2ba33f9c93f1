//! Replay: re-queueing dead (or delivered) deliveries.

use super::ClusterState;
use crate::command::{ReplayTarget, Response};
use crate::ids::{DeliveryId, EndpointId};
use crate::model::{DeliveryState, OptionalMs, TimelineEntry};

impl ClusterState {
    pub(super) fn replay(&mut self, target: &ReplayTarget, now_ms: u64) -> Response {
        match target {
            ReplayTarget::Delivery(id) => {
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
                let since = since_ms.unwrap_or(0);
                let until = until_ms.unwrap_or(u64::MAX);
                let chosen: Vec<DeliveryId> = self
                    .deliveries
                    .values()
                    .filter(|d| {
                        &d.endpoint_id == endpoint_id
                            && d.state == DeliveryState::Dead
                            && d.created_at_ms >= since
                            && d.created_at_ms < until
                    })
                    .map(|d| d.id)
                    .collect();
                for id in &chosen {
                    self.requeue(id, endpoint_id, now_ms);
                }
                Response::Replayed { deliveries: chosen.into_iter().map(|d| (d, *endpoint_id)).collect() }
            }
        }
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
        }
    }
}
