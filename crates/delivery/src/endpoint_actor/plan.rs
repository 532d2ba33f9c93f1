//! What an attempt of an endpoint actor sends: the delivery's payload,
//! opened with the node's keys just before it is signed, and what the
//! actor records when it, or the endpoint's signing secret, cannot be
//! opened, or when a newer version of the delivery's entity key was
//! delivered first (nothing is sent).

use std::sync::Arc;

use hookraft_core::ids::EventId;
use hookraft_core::model::SigningSecrets;
use hookraft_core::payload::OpenError;
use ractor::ActorRef;

use super::{AttemptDone, EndpointMsg, EndpointState, InFlight};
use crate::attempt::{AttemptPlan, OrderingPlace};
use crate::queue::{QueuedDelivery, is_active_for};
use crate::transport::SendError;

/// Why an attempt is not sent.
pub(super) enum NotSent {
    /// Its payload, or its endpoint's signing secret, cannot be opened
    /// here: deferred.
    Unopened(OpenError),
    /// This newer event of its entity key was delivered first: it ends
    /// `ignored_stale` (the stale guard, `hookraft_core::state::stale`).
    Stale(EventId),
}

impl EndpointState {
    /// What the next attempt of `queued` sends: its event's payload,
    /// opened with this node's keys, and the secrets that sign it. `None`
    /// when the delivery is no longer this endpoint's to attempt; an error
    /// when it is not to be sent.
    pub(super) fn plan(&self, queued: &QueuedDelivery) -> Option<Result<(AttemptPlan, Arc<SigningSecrets>), NotSent>> {
        let secrets = match self.secrets.as_ref()? {
            Ok(secrets) => secrets.clone(),
            Err(error) => return Some(Err(NotSent::Unopened(error.clone()))),
        };
        let (event_id, payload, sealed_type, ordering) = {
            let guard = self.ctx.state.read();
            let delivery = guard.deliveries.get(&queued.id).filter(|d| is_active_for(d, &self.endpoint_id))?;
            if let Some(newer) = guard.stale_newer(delivery) {
                return Some(Err(NotSent::Stale(newer)));
            }
            let event = guard.events.get(&delivery.event_id)?;
            let ordering = guard.ordering_place(delivery).map(|(key, epoch_ms)| OrderingPlace {
                key: Box::from(key),
                epoch_ms,
                sequence: delivery.sequence,
            });
            // The type is part of a sealed payload's associated data only.
            let sealed_type = event.payload.is_sealed().then(|| event.event_type.clone());
            (event.id, event.payload.clone(), sealed_type, ordering)
        };
        // Opened outside the state's lock; a clear payload is sent as stored.
        let opened = match &sealed_type {
            Some(event_type) => self.ctx.payloads.open_payload(&event_id, event_type, &payload),
            None => Ok(payload.shared()),
        };
        #[cfg(feature = "break")]
        let opened = match opened {
            // Deliberately wrong (simulator's `--break send-sealed`).
            Ok(_) if hookraft_core::breaks::send_sealed() => Ok(payload.shared()),
            opened => opened,
        };
        Some(opened.map_err(NotSent::Unopened).map(|payload| {
            let plan = AttemptPlan {
                delivery_id: queued.id,
                event_id,
                payload,
                attempt_number: queued.attempt_count + 1,
                ordering,
            };
            (plan, secrets)
        }))
    }

    /// Records that `queued` was not sent: the same way as an attempt, so
    /// the outcome goes through [`Self::finish`], which defers one whose
    /// payload cannot be opened instead of spending its retries, and ends
    /// a stale one `ignored_stale`.
    pub(super) fn not_sent(
        &mut self,
        myself: &ActorRef<EndpointMsg>,
        queued: QueuedDelivery,
        token: u64,
        now_ms: u64,
        reason: NotSent,
    ) {
        let error = match reason {
            NotSent::Unopened(error) => error,
            NotSent::Stale(newer) => {
                let delivery_id = queued.id;
                self.ctx.in_flight.insert(&delivery_id);
                self.in_flight.insert(delivery_id, InFlight { queued, token, started_at_ms: now_ms, abort: None });
                let result = Err(SendError::Other(format!("not sent: {newer}, a newer version, was delivered")));
                let done = AttemptDone { delivery_id, result, latency_ms: 0, ignored_for: Some(newer) };
                let _ = myself.send_message(EndpointMsg::Done(Box::new(done)));
                return;
            }
        };
        match &error {
            // Logged once per key by `PayloadKeys`.
            OpenError::MissingKey(_) => {
                tracing::debug!(endpoint = %self.endpoint_id, delivery = %queued.id, %error, "payload or secret cannot be opened; not sent")
            }
            OpenError::Tampered(_) => {
                tracing::warn!(endpoint = %self.endpoint_id, delivery = %queued.id, %error, "payload or secret cannot be opened; not sent")
            }
        }
        let delivery_id = queued.id;
        self.ctx.in_flight.insert(&delivery_id);
        self.in_flight.insert(delivery_id, InFlight { queued, token, started_at_ms: now_ms, abort: None });
        let result = Err(SendError::PayloadUnavailable(error.to_string()));
        let done = AttemptDone { delivery_id, result, latency_ms: 0, ignored_for: None };
        let _ = myself.send_message(EndpointMsg::Done(Box::new(done)));
    }
}
