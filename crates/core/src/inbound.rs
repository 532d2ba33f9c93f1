//! Inbound sources: provider webhooks that hookraft receives, verifies and
//! turns into events of its own.
//!
//! A [`Source`] names a provider's signature [`Scheme`] and secrets, where
//! the provider's event id and type are found ([`Locator`]), and optionally
//! where an entity key and its version are (JSON pointers): events of one
//! key carry a [`Version`], and the stale guard (`state/stale.rs`) ends a
//! delivery `ignored_stale` when a newer version of its key was delivered
//! to the same endpoint first.
//!
//! This module owns the replicated records and the pure checks: signature
//! verification ([`verify`]), CIDR matching ([`cidr`]). Reading JSON
//! pointers and headers is the API's; nothing here reads a clock.

pub mod cidr;
mod source;
pub mod verify;

use serde::{Deserialize, Serialize};

pub use cidr::Cidr;
pub use source::*;

use crate::ids::SourceId;

/// Longest provider event id, entity key or version text accepted.
pub const PROVIDER_TEXT_BYTES_MAX: usize = 256;

/// What an event received from a source carries besides its payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbound {
    pub source_id: SourceId,
    /// The provider's own id of the event: repeats of it are one event.
    pub provider_event_id: Box<str>,
    /// The entity the event is about (a customer, an order), when the
    /// source says where to find it; also the event's ordering key.
    pub entity_key: Option<Box<str>>,
    /// Where the event stands among its key's events, when the source
    /// says where to find it.
    pub version: Option<Version>,
}

impl Inbound {
    /// The idempotency key that makes repeats of one provider event one
    /// event. Producer keys are printable ASCII, so the leading control
    /// character keeps the two apart.
    pub fn idempotency_key(source_id: &SourceId, provider_event_id: &str) -> String {
        format!("\u{1f}in/{source_id}/{provider_event_id}")
    }

    /// The idempotency key of a signed body, for schemes that sign no
    /// timestamp: the body's SHA-256, which nobody varies without the secret.
    pub fn body_key(source_id: &SourceId, body: &[u8]) -> String {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(body);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("\u{1f}in/{source_id}/sha256:{hex}")
    }

    /// The key and version the stale guard compares, when both are known.
    pub fn guarded(&self) -> Option<(&str, &Version)> {
        Some((self.entity_key.as_deref()?, self.version.as_ref()?))
    }
}

/// A version read from a provider's payload. Numbers compare as numbers,
/// text compares byte by byte (a UTC timestamp in one fixed format sorts
/// right); one key's versions should be of one kind, and a number sorts
/// before any text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Version {
    Number(i64),
    Text(Box<str>),
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Version::Number(n) => write!(f, "{n}"),
            Version::Text(text) => f.write_str(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numbers_as_numbers_and_text_byte_by_byte() {
        assert!(Version::Number(9) < Version::Number(10));
        assert!(Version::Text("2026-01-02T00:00:00Z".into()) > Version::Text("2026-01-01T23:59:59Z".into()));
        assert!(Version::Number(i64::MAX) < Version::Text("0".into()));
    }

    #[test]
    fn inbound_idempotency_keys_cannot_be_a_producers() {
        let id: SourceId = "src_01ARZ3NDEKTSV4RRFFQ69G5FAV".parse().expect("id");
        let key = Inbound::idempotency_key(&id, "evt_1");
        assert!(!key.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
        assert!(key.ends_with(&format!("/{id}/evt_1")), "{key:?}");
    }
}
