//! The JSON shapes callers see, as documented in `docs/API.md` and in the
//! OpenAPI document (`crate::openapi`). The model is stored with bincode;
//! these are typed views of it, built by the handlers and serialized as
//! they are, so the document's schemas are the types the handlers answer
//! with rather than a description kept beside them.
//!
//! Ids keep their core types (they serialize as their text) and say so to
//! the schema with `value_type = String`: the core crate knows nothing of
//! the document.

pub mod cluster;
pub mod deliveries;
pub mod endpoints;
pub mod events;
pub mod sources;

pub use deliveries::{delivery, effective_state, lifecycle_entry, timeline_entry};
pub use endpoints::{endpoint, retry};
pub use events::{BatchAnswer, IngestAnswer, event, ingest_answer, open_payload};

use hookraft_core::clock::format_rfc3339_ms;
use serde::Serialize;
use utoipa::ToSchema;

/// An RFC 3339 UTC time with milliseconds, like `2026-12-01T05:00:00.123Z`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(value_type = String, format = DateTime, example = "2026-12-01T05:00:00.123Z")]
pub struct Timestamp(String);

impl Timestamp {
    pub fn from_ms(ms: u64) -> Self {
        Self(format_rfc3339_ms(ms))
    }

    pub fn from_opt_ms(ms: Option<u64>) -> Option<Self> {
        ms.map(Self::from_ms)
    }
}

/// The schema of an id as a client may write it: its prefix and 26
/// Crockford base32 characters, either case (what `hookraft_core::ids`
/// parses). Schema only: handlers take ids as text and parse them.
fn id_schema(prefix: &str, kind: &str) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .pattern(Some(format!("^{prefix}[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{{25}}$")))
        .description(Some(format!("{kind} id: `{prefix}` and 26 characters.")))
        .examples([format!("{prefix}01jd5m3k4r8v2w6x9y0z1a2b3c")])
        .into()
}

macro_rules! id_texts {
    ($($name:ident: $prefix:literal, $kind:literal;)+) => {$(
        #[doc = concat!("The text of ", $kind, " id, for the document.")]
        pub struct $name;

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                id_schema($prefix, $kind)
            }
        }

        impl ToSchema for $name {}
    )+};
}

id_texts! {
    EndpointIdText: "ep_", "An endpoint";
    EventIdText: "evt_", "An event";
    DeliveryIdText: "dlv_", "A delivery";
    SourceIdText: "src_", "A source";
}
