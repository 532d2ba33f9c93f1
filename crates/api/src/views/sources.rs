//! Inbound sources as callers see them: everything but their secrets.

use hookraft_core::ids::{EventId, SourceId};
use hookraft_core::inbound::{Encoding, Locator, Scheme, Source};
use serde::Serialize;
use utoipa::ToSchema;

use super::Timestamp;

/// Where a value is: a header, or a JSON pointer into the body.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LocatorView {
    /// A header's name, lowercased.
    Header(String),
    /// A JSON pointer (RFC 6901), like `/data/object/id`.
    Pointer(String),
}

impl From<&Locator> for LocatorView {
    fn from(locator: &Locator) -> Self {
        match locator {
            Locator::Header(name) => LocatorView::Header(name.clone()),
            Locator::Pointer(pointer) => LocatorView::Pointer(pointer.clone()),
        }
    }
}

/// How a provider signs.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum SchemeView {
    #[serde(rename = "standard-webhooks")]
    StandardWebhooks,
    #[serde(rename = "stripe")]
    Stripe,
    #[serde(rename = "github")]
    Github,
    #[serde(rename = "hmac-sha256")]
    HmacSha256,
}

/// How an `hmac-sha256` signature is written.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EncodingView {
    Hex,
    Base64,
}

/// A source. Its secrets never appear.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceView {
    #[schema(value_type = String, example = "src_01jd5m3k4r8v2w6x9y0z1a2b3c")]
    pub id: SourceId,
    #[schema(required = true)]
    pub description: Option<String>,
    pub scheme: SchemeView,
    /// Where the provider sends its webhooks: `/in/{id}`.
    pub ingress_path: String,
    /// Where the provider's event id is.
    pub event_id: LocatorView,
    /// Where the event type is; `null`: every event is typed `inbound`.
    #[schema(required = true)]
    pub event_type: Option<LocatorView>,
    /// JSON pointer to the entity an event is about.
    #[schema(required = true)]
    pub entity_key: Option<String>,
    /// JSON pointer to an event's version.
    #[schema(required = true)]
    pub version: Option<String>,
    #[schema(required = true)]
    pub rate_limit_per_s: Option<u32>,
    /// Callers allowed (CIDR blocks); empty: anyone.
    pub allow_cidrs: Vec<String>,
    pub disabled: bool,
    /// When each rotated-out secret stops verifying.
    pub previous_secrets_expire_at: Vec<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// `hmac-sha256` only: the header the signature is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_header: Option<String>,
    /// `hmac-sha256` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature_encoding: Option<EncodingView>,
    /// `hmac-sha256` only: the text before the signature (present, maybe `null`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub signature_prefix: Option<Option<String>>,
}

/// A source as the API shows it: everything but its secrets.
pub fn view(source: &Source) -> SourceView {
    let (scheme, hmac) = match &source.scheme {
        Scheme::StandardWebhooks => (SchemeView::StandardWebhooks, None),
        Scheme::Stripe => (SchemeView::Stripe, None),
        Scheme::Github => (SchemeView::Github, None),
        Scheme::HmacSha256 { header, encoding, prefix } => (SchemeView::HmacSha256, Some((header, encoding, prefix))),
    };
    SourceView {
        id: source.id,
        description: source.description.clone(),
        scheme,
        ingress_path: format!("/in/{}", source.id),
        event_id: (&source.event_id).into(),
        event_type: source.event_type_locator().as_ref().map(LocatorView::from),
        entity_key: source.entity_key.clone(),
        version: source.version.clone(),
        rate_limit_per_s: source.rate_limit_per_s,
        allow_cidrs: source.allow_cidrs.iter().map(ToString::to_string).collect(),
        disabled: source.disabled,
        previous_secrets_expire_at: source
            .previous_secrets
            .iter()
            .map(|s| Timestamp::from_ms(s.expires_at_ms))
            .collect(),
        created_at: Timestamp::from_ms(source.created_at_ms),
        updated_at: Timestamp::from_ms(source.updated_at_ms),
        signature_header: hmac.map(|(header, _, _)| header.clone()),
        signature_encoding: hmac.map(|(_, encoding, _)| match encoding {
            Encoding::Hex => EncodingView::Hex,
            Encoding::Base64 => EncodingView::Base64,
        }),
        signature_prefix: hmac.map(|(_, _, prefix)| prefix.clone()),
    }
}

/// Every source.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceList {
    pub data: Vec<SourceView>,
}

/// A provider request committed as a new event.
#[derive(Debug, Serialize, ToSchema)]
pub struct InboundAccepted {
    #[schema(value_type = String, example = "evt_01jd5m3k4r8v2w6x9y0z1a2b3c")]
    pub event_id: EventId,
    /// Deliveries the event created.
    pub deliveries: usize,
}

/// A repeat of a provider event already committed: nothing new was created.
#[derive(Debug, Serialize, ToSchema)]
pub struct InboundDuplicate {
    #[schema(value_type = String, example = "evt_01jd5m3k4r8v2w6x9y0z1a2b3c")]
    pub event_id: EventId,
    /// Always `true`.
    pub duplicate: bool,
}
