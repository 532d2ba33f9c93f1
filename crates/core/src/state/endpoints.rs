//! Endpoint registration, changes, deletion and secret rotation.

use super::ClusterState;
use crate::command::{EndpointPatch, Response};
use crate::ids::EndpointId;
use crate::model::{DeliveryState, Endpoint, OptionalMs, Ordering, RetiredSecret, TimelineEntry};
use crate::payload::StoredSecret;

/// Retired secrets kept per endpoint; a rotation past this drops the oldest.
pub const RETIRED_SECRETS_MAX: usize = 4;

fn not_found(id: &EndpointId) -> Response {
    Response::NotFound { what: format!("endpoint {id}") }
}

impl ClusterState {
    pub(super) fn register_endpoint(&mut self, endpoint: &Endpoint) -> Response {
        if self.endpoints.contains_key(&endpoint.id) {
            return Response::Conflict { detail: format!("endpoint {} already exists", endpoint.id) };
        }
        if let Some(missing) = endpoint.sources.iter().find(|s| !self.source_exists(s)) {
            return Response::NotFound { what: format!("source {missing}") };
        }
        self.endpoints.insert(endpoint.id, endpoint.clone());
        self.fanout.invalidate();
        Response::Ok
    }

    pub(super) fn update_endpoint(&mut self, id: &EndpointId, patch: &EndpointPatch, now_ms: u64) -> Response {
        let Some(endpoint) = self.endpoints.get_mut(id) else { return not_found(id) };
        let EndpointPatch {
            url,
            description,
            event_types,
            max_in_flight,
            rate_limit_per_s,
            timeout_ms,
            retry,
            disabled,
        } = patch.clone();
        if let Some(url) = url {
            endpoint.url = url;
        }
        if let Some(description) = description {
            endpoint.description = description;
        }
        if let Some(event_types) = event_types {
            endpoint.event_types = event_types;
        }
        if let Some(max_in_flight) = max_in_flight {
            endpoint.max_in_flight = max_in_flight;
        }
        if let Some(rate) = rate_limit_per_s {
            endpoint.rate_limit_per_s = rate;
        }
        if let Some(timeout_ms) = timeout_ms {
            endpoint.timeout_ms = timeout_ms;
        }
        if let Some(retry) = retry {
            endpoint.retry = retry;
        }
        let was_disabled = endpoint.disabled;
        if let Some(disabled) = disabled {
            endpoint.disabled = disabled;
            endpoint.disabled_reason = disabled.then(|| "disabled by an operator".to_string());
            if !disabled {
                endpoint.breaker = Default::default();
                // Enabled again: its failing time starts over.
                endpoint.failing_since_ms = None;
            }
        }
        endpoint.updated_at_ms = now_ms;
        let disabled = endpoint.disabled;
        // Its types or whether it is enabled may have changed.
        self.fanout.invalidate();
        if disabled {
            let pending = self.active.get(id).map_or(0, |a| a.len());
            self.dead_letter_active(id, "endpoint disabled", now_ms);
            if !was_disabled {
                self.emit_disabled(id, "disabled by an operator", pending, now_ms);
            }
        } else if was_disabled {
            self.emit_about(super::operational::Kind::EndpointEnabled, id, now_ms);
        }
        Response::Ok
    }

    /// Deleting an endpoint dead-letters its active deliveries (they stay
    /// readable) and removes it from fan-out.
    pub(super) fn delete_endpoint(&mut self, id: &EndpointId, now_ms: u64) -> Response {
        if !self.endpoints.contains_key(id) {
            return not_found(id);
        }
        self.dead_letter_active(id, "endpoint deleted", now_ms);
        self.endpoints.remove(id);
        self.stats.forget(id);
        self.forget_ordered_endpoint(id);
        self.fanout.invalidate();
        // Its dead deliveries hold no key any more.
        self.touch_dead_of(id);
        Response::Ok
    }

    pub(super) fn set_ordering(&mut self, id: &EndpointId, ordering: Ordering, now_ms: u64) -> Response {
        let Some(endpoint) = self.endpoints.get_mut(id) else { return not_found(id) };
        let before = std::mem::replace(&mut endpoint.ordering, ordering);
        if before != ordering {
            endpoint.updated_at_ms = now_ms;
            self.ordering_changed(id, before);
        }
        Response::Ok
    }

    pub(super) fn rotate_secret(
        &mut self,
        id: &EndpointId,
        secret: &StoredSecret,
        grace_until_ms: u64,
        now_ms: u64,
    ) -> Response {
        let Some(endpoint) = self.endpoints.get_mut(id) else { return not_found(id) };
        let old = std::mem::replace(&mut endpoint.secret, secret.clone());
        endpoint.previous_secrets.retain(|s| s.expires_at_ms > now_ms);
        endpoint.previous_secrets.insert(0, RetiredSecret { secret: old, expires_at_ms: grace_until_ms });
        endpoint.previous_secrets.truncate(RETIRED_SECRETS_MAX);
        endpoint.updated_at_ms = now_ms;
        Response::Ok
    }

    /// Moves every active delivery of an endpoint to the dead-letter state.
    pub(super) fn dead_letter_active(&mut self, id: &EndpointId, reason: &str, now_ms: u64) {
        let Some(active) = self.active.remove(id) else { return };
        self.usage.pending = self.usage.pending.saturating_sub(active.len() as u64);
        for delivery_id in active {
            self.change_delivery(&delivery_id, |delivery| {
                delivery.state = DeliveryState::Dead;
                delivery.next_attempt_at_ms = OptionalMs::NONE;
                delivery.updated_at_ms = now_ms;
                delivery.push_timeline(TimelineEntry::Dead { at_ms: now_ms, reason: reason.to_string() });
            });
            self.mark_dead(&delivery_id, id, now_ms);
        }
    }
}
