//! Event ingest: idempotency, fan-out, delivery creation.

use std::sync::Arc;

use super::ClusterState;
use super::usage::{delivery_bytes, event_bytes};
use crate::command::{IngestResult, NewEvent, Response};
use crate::ids::{DeliveryId, EndpointId, NodeId};
use crate::model::{Delivery, DeliveryState, Event, OptionalMs, TimelineEntry};

impl ClusterState {
    pub(super) fn ingest(&mut self, events: &[NewEvent], now_ms: u64, received_by: Option<NodeId>) -> Response {
        let results = events.iter().map(|event| self.ingest_one(event, now_ms, received_by)).collect();
        Response::Ingested { results }
    }

    pub(super) fn ingest_one(&mut self, new: &NewEvent, now_ms: u64, received_by: Option<NodeId>) -> IngestResult {
        if let Some(key) = &new.idempotency_key
            && let Some(existing) = self.idempotency.get(key.as_str())
        {
            return IngestResult::Duplicate { event_id: *existing };
        }
        if self.has_event(&new.id) {
            // The same proposal committed twice (a retried forward): idempotent.
            return IngestResult::Duplicate { event_id: new.id };
        }
        let targets: Vec<(EndpointId, bool)> = match &new.endpoint_ids {
            Some(ids) => {
                let mut targets = Vec::with_capacity(ids.len());
                for id in ids {
                    match self.endpoints.get(id) {
                        Some(endpoint) => targets.push((*id, endpoint.disabled)),
                        None => return IngestResult::UnknownEndpoint { endpoint_id: *id },
                    }
                }
                targets.sort();
                targets.dedup();
                targets
            }
            None => {
                let source = new.inbound.as_ref().map(|inbound| &inbound.source_id);
                self.fanout
                    .targets(&self.endpoints, &new.event_type, source)
                    .into_iter()
                    .map(|id| (id, false))
                    .collect()
            }
        };

        let mut created = Vec::with_capacity(targets.len());
        // Ordered deliveries created dead, placed once their event (and so
        // their key) is in the state.
        let mut created_dead = Vec::new();
        for (endpoint_id, disabled) in targets {
            let id = DeliveryId::derive(&new.id, &endpoint_id);
            let mut delivery = Delivery {
                id,
                event_id: new.id,
                endpoint_id,
                state: DeliveryState::Pending,
                initial_state: DeliveryState::Pending,
                attempt_count: 0,
                cycle_attempts: 0,
                sequence: 0,
                cycle_started_at_ms: now_ms,
                next_attempt_at_ms: OptionalMs::at(now_ms),
                created_at_ms: now_ms,
                updated_at_ms: now_ms,
                history: Box::default(),
            };
            self.sequence_new(&endpoint_id, new.ordering_key.as_deref(), &mut delivery);
            if disabled {
                // Explicitly targeted at a disabled endpoint: keep it, dead-lettered, replayable.
                delivery.state = DeliveryState::Dead;
                delivery.initial_state = DeliveryState::Dead;
                delivery.next_attempt_at_ms = OptionalMs::NONE;
                delivery.push_timeline(TimelineEntry::Dead { at_ms: now_ms, reason: "endpoint disabled".into() });
                self.mark_dead(&id, &endpoint_id, now_ms);
                if let Some(node) = self.counting_node(&endpoint_id) {
                    self.tallies.tally(node).add_dead_letter(super::tally::DeadReason::EndpointDisabled);
                }
            } else {
                self.index_delivery(&id, &endpoint_id, true);
            }
            self.count_bytes(delivery_bytes(&delivery), true);
            if delivery.sequence != 0 && disabled {
                created_dead.push(id);
            }
            self.deliveries.insert(id, Arc::new(delivery));
            created.push((id, endpoint_id));
        }

        if let Some(key) = &new.idempotency_key {
            self.idempotency.insert(key.as_str().into(), new.id);
        }
        let event = Box::new(Event {
            id: new.id,
            event_type: new.event_type.as_str().into(),
            payload: new.payload.clone(),
            received_at_ms: now_ms,
            idempotency_key: new.idempotency_key.as_deref().map(Box::from),
            deliveries: created.iter().map(|(d, _)| *d).collect(),
            received_by,
            rewrapped: None,
            ordering_key: new.ordering_key.as_deref().map(Box::from),
            inbound: new.inbound.clone(),
        });
        self.count_bytes(event_bytes(&event), true);
        self.events.insert(new.id, event);
        for id in &created_dead {
            // Created dead: it blocks its key, or passes, by the endpoint's
            // rule. Placed after the event is in: the key is the event's.
            self.place_ordered(id);
        }
        self.throughput.note(super::throughput::Flow::Accepted, now_ms);
        // Finished already when it matched no endpoint, or only disabled ones.
        self.touch(new.id);
        IngestResult::Created { event_id: new.id, deliveries: created }
    }
}
