//! Event ingest: idempotency, fan-out, delivery creation.

use super::ClusterState;
use crate::command::{IngestResult, NewEvent, Response};
use crate::ids::{DeliveryId, EndpointId};
use crate::model::{Delivery, DeliveryState, Event, TimelineEntry};

impl ClusterState {
    pub(super) fn ingest(&mut self, events: &[NewEvent], now_ms: u64) -> Response {
        let results = events.iter().map(|event| self.ingest_one(event, now_ms)).collect();
        Response::Ingested { results }
    }

    fn ingest_one(&mut self, new: &NewEvent, now_ms: u64) -> IngestResult {
        if let Some(key) = &new.idempotency_key
            && let Some(existing) = self.idempotency.get(key)
        {
            return IngestResult::Duplicate { event_id: existing.clone() };
        }
        if self.events.contains_key(&new.id) {
            // The same proposal committed twice (a retried forward): idempotent.
            return IngestResult::Duplicate { event_id: new.id.clone() };
        }
        let targets: Vec<(EndpointId, bool)> = match &new.endpoint_ids {
            Some(ids) => {
                let mut targets = Vec::with_capacity(ids.len());
                for id in ids {
                    match self.endpoints.get(id) {
                        Some(endpoint) => targets.push((id.clone(), endpoint.disabled)),
                        None => return IngestResult::UnknownEndpoint { endpoint_id: id.clone() },
                    }
                }
                targets.sort();
                targets.dedup();
                targets
            }
            None => self
                .endpoints
                .values()
                .filter(|e| !e.disabled && e.subscribes_to(&new.event_type))
                .map(|e| (e.id.clone(), false))
                .collect(),
        };

        let mut created = Vec::with_capacity(targets.len());
        for (endpoint_id, disabled) in targets {
            let id = DeliveryId::derive(&new.id, &endpoint_id);
            let mut delivery = Delivery {
                id: id.clone(),
                event_id: new.id.clone(),
                endpoint_id: endpoint_id.clone(),
                state: DeliveryState::Pending,
                initial_state: DeliveryState::Pending,
                attempt_count: 0,
                cycle_attempts: 0,
                cycle_started_at_ms: now_ms,
                next_attempt_at_ms: Some(now_ms),
                created_at_ms: now_ms,
                updated_at_ms: now_ms,
                timeline: vec![TimelineEntry::Received { at_ms: now_ms }],
            };
            if disabled {
                // Explicitly targeted at a disabled endpoint: keep it, dead-lettered, replayable.
                delivery.state = DeliveryState::Dead;
                delivery.initial_state = DeliveryState::Dead;
                delivery.next_attempt_at_ms = None;
                delivery.push_timeline(TimelineEntry::Dead { at_ms: now_ms, reason: "endpoint disabled".into() });
            } else {
                self.index_delivery(&id, &endpoint_id, true);
            }
            self.deliveries.insert(id.clone(), delivery);
            created.push((id, endpoint_id));
        }

        if let Some(key) = &new.idempotency_key {
            self.idempotency.insert(key.clone(), new.id.clone());
        }
        self.events.insert(
            new.id.clone(),
            Event {
                id: new.id.clone(),
                event_type: new.event_type.clone(),
                payload: new.payload.clone(),
                received_at_ms: now_ms,
                idempotency_key: new.idempotency_key.clone(),
                deliveries: created.iter().map(|(d, _)| d.clone()).collect(),
            },
        );
        IngestResult::Created { event_id: new.id.clone(), deliveries: created }
    }
}
