//! Events as callers see them, and the answers of the event routes.

use std::borrow::Cow;

use hookraft_core::ids::{DeliveryId, EndpointId, EventId, SourceId};
use hookraft_core::inbound::Version;
use hookraft_core::model::{Delivery, DeliveryState, Event};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::Timestamp;
use super::deliveries::{StateView, effective_state};
use crate::context::ApiContext;

/// The answer to an ingest: the event and the short list of its
/// deliveries in their creation states, so a replayed answer equals the
/// first. Borrowed and serialized as is (no JSON tree is built): it is
/// written once per accepted event.
#[derive(Debug, Serialize, ToSchema)]
#[schema(description = "The event and its deliveries in their creation states; a replay of it answers the same.")]
pub struct IngestAnswer<'a> {
    #[schema(value_type = String, example = "evt_01jd5m3k4r8v2w6x9y0z1a2b3c")]
    id: EventId,
    /// Borrowed from an event in memory; a finished one is read from the
    /// history, decoded.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    event_type: Cow<'a, str>,
    deliveries: Vec<IngestedDelivery>,
}

/// One event's result in the answer to `POST /v1/events/batch`: `status`
/// 202 (created) or 200 (an idempotency key seen before) with the event as
/// `IngestAnswer` has it, or 422 with a `detail` and nothing else.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAnswer<'a> {
    #[schema(example = 202)]
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    id: Option<EventId>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    event_type: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deliveries: Option<Vec<IngestedDelivery>>,
    /// Why the event was refused (status 422).
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
}

impl<'a> BatchAnswer<'a> {
    pub fn event(status: u16, event: IngestAnswer<'a>) -> Self {
        let IngestAnswer { id, event_type, deliveries } = event;
        Self { status, id: Some(id), event_type: Some(event_type), deliveries: Some(deliveries), detail: None }
    }

    pub fn rejected(status: u16, detail: String) -> Self {
        Self { status, id: None, event_type: None, deliveries: None, detail: Some(detail) }
    }
}

/// The answer to `POST /v1/events/batch`: one result per event, in the order sent.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAnswers<'a> {
    pub events: Vec<BatchAnswer<'a>>,
}

/// A delivery an ingest created, in its creation state.
#[derive(Debug, Serialize, ToSchema)]
pub struct IngestedDelivery {
    #[schema(value_type = String)]
    id: DeliveryId,
    #[schema(value_type = String)]
    endpoint_id: EndpointId,
    state: StateView,
}

pub fn ingest_answer<'a>(event: Cow<'a, Event>, deliveries: &[(&Delivery, DeliveryState)]) -> IngestAnswer<'a> {
    let id = event.id;
    let event_type = match event {
        Cow::Borrowed(event) => Cow::Borrowed(&*event.event_type),
        Cow::Owned(event) => Cow::Owned(event.event_type.into()),
    };
    IngestAnswer {
        id,
        event_type,
        deliveries: deliveries
            .iter()
            .map(|(d, state)| IngestedDelivery { id: d.id, endpoint_id: d.endpoint_id, state: (*state).into() })
            .collect(),
    }
}

/// Where an inbound event came from.
#[derive(Debug, Serialize, ToSchema)]
pub struct InboundView {
    #[schema(value_type = String, example = "src_01jd5m3k4r8v2w6x9y0z1a2b3c")]
    pub source_id: SourceId,
    pub provider_event_id: String,
    #[schema(required = true)]
    pub entity_key: Option<String>,
    /// A number, or text that sorts as the provider's order.
    #[schema(value_type = Option<VersionView>, required = true)]
    pub version: Option<VersionView>,
}

/// An inbound event's version.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum VersionView {
    Number(i64),
    Text(String),
}

/// One of an event's deliveries, in its state now.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventDelivery {
    #[schema(value_type = String)]
    pub id: DeliveryId,
    #[schema(value_type = String)]
    pub endpoint_id: EndpointId,
    pub state: StateView,
}

/// An event in a listing: no payload (read the event for it).
#[derive(Debug, Serialize, ToSchema)]
pub struct EventSummary {
    #[schema(value_type = String, example = "evt_01jd5m3k4r8v2w6x9y0z1a2b3c")]
    pub id: EventId,
    #[serde(rename = "type")]
    pub event_type: String,
    /// The key the payload is sealed under; `null` when stored in clear.
    #[schema(required = true)]
    pub key_id: Option<String>,
    pub received_at: Timestamp,
    /// The node that accepted it; `null` for events from before nodes were recorded.
    #[schema(required = true)]
    pub received_by: Option<u64>,
    #[schema(required = true)]
    pub ordering_key: Option<String>,
    /// The producer's key; `null` for inbound events (their key is the engine's own).
    #[schema(required = true)]
    pub idempotency_key: Option<String>,
    /// Set for events a source's ingress received.
    #[schema(required = true)]
    pub inbound: Option<InboundView>,
    pub deliveries: Vec<EventDelivery>,
}

/// An event with its payload, opened with the answering node's keyring.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    #[serde(flatten)]
    pub summary: EventSummary,
    /// The producer's JSON; `null` when it cannot be opened here (see `payload_error`).
    #[schema(value_type = Value, required = true)]
    pub payload: Value,
    /// Why the payload could not be opened; `null` when it was.
    #[schema(required = true)]
    pub payload_error: Option<String>,
}

/// An event, its payload still unopened (`null`): [`open_payload`] fills
/// it in, outside the state's lock.
pub fn event(ctx: &ApiContext, event: &Event, deliveries: &[&Delivery]) -> EventView {
    EventView { summary: summary(ctx, event, deliveries), payload: Value::Null, payload_error: None }
}

/// An event without its payload.
pub fn summary(ctx: &ApiContext, event: &Event, deliveries: &[&Delivery]) -> EventSummary {
    EventSummary {
        id: event.id,
        event_type: event.event_type.to_string(),
        key_id: event.payload.key_id().map(str::to_string),
        received_at: Timestamp::from_ms(event.received_at_ms),
        received_by: event.received_by,
        ordering_key: event.ordering_key.as_deref().map(str::to_string),
        // An inbound event's key is the engine's own, not the producer's.
        idempotency_key: if event.inbound.is_some() {
            None
        } else {
            event.idempotency_key.as_deref().map(str::to_string)
        },
        inbound: event.inbound.as_deref().map(|i| InboundView {
            source_id: i.source_id,
            provider_event_id: i.provider_event_id.to_string(),
            entity_key: i.entity_key.as_deref().map(str::to_string),
            version: i.version.as_ref().map(|v| match v {
                Version::Number(n) => VersionView::Number(*n),
                Version::Text(t) => VersionView::Text(t.to_string()),
            }),
        }),
        deliveries: deliveries
            .iter()
            .map(|d| EventDelivery { id: d.id, endpoint_id: d.endpoint_id, state: effective_state(ctx, d).into() })
            .collect(),
    }
}

/// Opens `event`'s payload with this node's keys into its `view`; one that
/// cannot be opened stays `null`, with `payload_error` saying why.
pub fn open_payload(ctx: &ApiContext, event: &Event, view: &mut EventView) {
    match ctx.payloads.open(event) {
        Ok(json) => view.payload = serde_json::from_slice(&json).unwrap_or(Value::Null),
        Err(error) => view.payload_error = Some(error.to_string()),
    }
}

/// A page of events (without payloads), in id order.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventPage {
    pub data: Vec<EventSummary>,
    /// Pass back as `cursor`; a short or empty page with a cursor means go
    /// on, `null` means the end.
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

/// A delivery an event replay left out, and why.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkippedDelivery {
    #[schema(value_type = String)]
    pub id: DeliveryId,
    /// `not settled`, `delivered`, `endpoint disabled`, `endpoint deleted`, or
    /// what changed since the delivery was read.
    pub reason: String,
}

/// The answer to replaying an event.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventReplayed {
    #[schema(value_type = String)]
    pub event_id: EventId,
    #[schema(value_type = Vec<String>)]
    pub replayed: Vec<DeliveryId>,
    pub skipped: Vec<SkippedDelivery>,
}
