//! Operational events: hookraft's events about itself (`endpoint.disabled`,
//! `endpoint.enabled`, `delivery.dead`, `breaker.opened`, `breaker.closed`,
//! `node.down`, `shard.moved`), emitted by apply and delivered, signed and
//! retried like any other event to the endpoints that receive from the
//! reserved source [`SourceId::OPERATIONAL`] (`"sources": ["hookraft"]`).
//!
//! Emitted inside apply, so every replica creates the same event with the
//! same id ([`EventId::derive`] from the kind, its subject and the
//! command's time), once per committed command. Nothing is emitted when no
//! endpoint receives the kind. No event is emitted about an endpoint that
//! itself receives operational events, nor about its deliveries: a failing
//! operational endpoint cannot feed itself events about its own failures.
//! The payload is `{"type", "at", "data"}` in clear (ids, states and
//! reasons; no customer payload).

use super::ClusterState;
use crate::clock::format_rfc3339_ms;
use crate::command::{IngestResult, NewEvent};
use crate::ids::DeliveryId;
use crate::ids::{EndpointId, EventId, SourceId};
use crate::inbound::Inbound;
use crate::payload::Payload;

/// Deliveries one apply made ready; see `ClusterState::to_wake`.
#[derive(Default)]
pub(super) struct ToWake(pub Vec<(DeliveryId, EndpointId)>);

impl Clone for ToWake {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for ToWake {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for ToWake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ToWake({})", self.0.len())
    }
}

/// What hookraft tells its operational endpoints about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    EndpointDisabled,
    EndpointEnabled,
    DeliveryDead,
    BreakerOpened,
    BreakerClosed,
    NodeDown,
    ShardMoved,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::EndpointDisabled => "endpoint.disabled",
            Kind::EndpointEnabled => "endpoint.enabled",
            Kind::DeliveryDead => "delivery.dead",
            Kind::BreakerOpened => "breaker.opened",
            Kind::BreakerClosed => "breaker.closed",
            Kind::NodeDown => "node.down",
            Kind::ShardMoved => "shard.moved",
        }
    }
}

/// `text` as a JSON string, quotes included.
pub(super) fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl ClusterState {
    /// Whether events about `endpoint` may be emitted: it is not itself a
    /// receiver of operational events.
    pub(super) fn reportable(&self, endpoint: &EndpointId) -> bool {
        self.endpoints.get(endpoint).is_none_or(|e| !e.sources.contains(&SourceId::OPERATIONAL))
    }

    /// Emits an operational event of `kind` about `subject` with `data` (a
    /// JSON object's text), if any endpoint receives it.
    pub(super) fn emit(&mut self, kind: Kind, subject: &str, data: &str, now_ms: u64) {
        let source = SourceId::OPERATIONAL;
        if self.fanout.count(&self.endpoints, kind.as_str(), Some(&source)) == 0 {
            return;
        }
        let seed = format!("{}\u{0}{subject}\u{0}{now_ms}", kind.as_str());
        let id = EventId::derive(now_ms, seed.as_bytes());
        let payload =
            format!("{{\"type\":\"{}\",\"at\":\"{}\",\"data\":{data}}}", kind.as_str(), format_rfc3339_ms(now_ms));
        let inbound = Inbound {
            source_id: source,
            provider_event_id: format!("{}/{subject}", kind.as_str()).into(),
            entity_key: None,
            version: None,
        };
        let event = NewEvent {
            id,
            event_type: kind.as_str().to_string(),
            payload: Payload::clear(&payload),
            idempotency_key: None,
            endpoint_ids: None,
            ordering_key: None,
            inbound: Some(Box::new(inbound)),
        };
        // An id already taken (the same kind and subject in one command) is
        // answered as a duplicate and emits nothing more.
        if let IngestResult::Created { deliveries, .. } = self.ingest_one(&event, now_ms, None) {
            self.to_wake.0.extend(deliveries);
        }
    }

    /// `endpoint.disabled`, with why and how many deliveries it dead-lettered.
    pub(super) fn emit_disabled(&mut self, endpoint: &EndpointId, reason: &str, dead_lettered: usize, now_ms: u64) {
        if self.reportable(endpoint) {
            let data = format!(
                "{{\"endpoint_id\":\"{endpoint}\",\"reason\":{},\"dead_lettered\":{dead_lettered}}}",
                json_string(reason)
            );
            self.emit(Kind::EndpointDisabled, &endpoint.to_string(), &data, now_ms);
        }
    }

    /// `delivery.dead`: a delivery gave up after its retries.
    pub(super) fn emit_dead(&mut self, delivery: &crate::ids::DeliveryId, reason: &str, now_ms: u64) {
        let Some(record) = self.deliveries.get(delivery) else { return };
        let (event, endpoint, attempts) = (record.event_id, record.endpoint_id, record.attempt_count);
        if self.reportable(&endpoint) {
            let data = format!(
                "{{\"delivery_id\":\"{delivery}\",\"event_id\":\"{event}\",\"endpoint_id\":\"{endpoint}\",\
                 \"attempts\":{attempts},\"reason\":{}}}",
                json_string(reason)
            );
            self.emit(Kind::DeliveryDead, &delivery.to_string(), &data, now_ms);
        }
    }

    /// An event about an endpoint alone (`endpoint.enabled`, `breaker.*`).
    pub(super) fn emit_about(&mut self, kind: Kind, endpoint: &EndpointId, now_ms: u64) {
        if self.reportable(endpoint) {
            self.emit(kind, &endpoint.to_string(), &format!("{{\"endpoint_id\":\"{endpoint}\"}}"), now_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        assert_eq!(json_string("a \"b\" \\ c\n"), "\"a \\\"b\\\" \\\\ c\\u000a\"");
        let parsed: String = serde_json::from_str(&json_string("x\u{1}y\"")).expect("valid JSON");
        assert_eq!(parsed, "x\u{1}y\"");
    }
}
