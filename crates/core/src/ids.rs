//! Typed, prefixed identifiers.
//!
//! Ids are ULID-shaped: 48 bits of milliseconds since the epoch followed by 80
//! random bits, written as 26 characters of Crockford base32 after a type
//! prefix (`ep_`, `evt_`, `dlv_`). They sort by creation time, which keeps
//! listings in a useful order. Randomness and time are passed in: this module
//! never reads a clock or a global RNG.

use std::fmt;

use rand_core::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
const ULID_CHARS: usize = 26;

/// A node of the cluster, as numbered in its configuration.
pub type NodeId = u64;

/// Encodes 128 bits as 26 characters of lowercase Crockford base32.
fn encode_ulid(value: u128, out: &mut [u8]) {
    debug_assert_eq!(out.len(), ULID_CHARS);
    for (i, slot) in out.iter_mut().enumerate() {
        let shift = 5 * (ULID_CHARS - 1 - i);
        *slot = CROCKFORD[((value >> shift) & 0x1f) as usize];
    }
}

/// An id's 128 bits, big-endian, so the bytes order like the value and
/// therefore like the text (a fixed prefix, then a fixed-width base32 of
/// the value). Ids are copied into every delivery, index and timeline: 16
/// bytes here against 30 as text, and no heap (docs/benchmarks-history.md,
/// "Memory of a pending delivery, part by part"). The text is made when
/// it is asked for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Ulid([u8; 16]);

impl Ulid {
    fn value(self) -> u128 {
        u128::from_be_bytes(self.0)
    }
}

/// An id written out: its prefix and 26 characters, on the stack. Derefs to
/// `str`; `N` is fixed per kind of id.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IdText<const N: usize>([u8; N]);

impl<const N: usize> IdText<N> {
    fn new(prefix: &str, ulid: u128) -> Self {
        let mut bytes = [0u8; N];
        bytes[..prefix.len()].copy_from_slice(prefix.as_bytes());
        encode_ulid(ulid, &mut bytes[prefix.len()..]);
        Self(bytes)
    }
}

impl<const N: usize> std::ops::Deref for IdText<N> {
    type Target = str;

    fn deref(&self) -> &str {
        std::str::from_utf8(&self.0).expect("an id is ASCII by construction")
    }
}

impl<const N: usize> fmt::Display for IdText<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl<const N: usize> fmt::Debug for IdText<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Deserializes an id from its text, validating it.
struct IdVisitor<T> {
    parse: fn(&str) -> Result<T, IdParseError>,
}

impl<T> serde::de::Visitor<'_> for IdVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prefixed id")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<T, E> {
        (self.parse)(text).map_err(E::custom)
    }
}

/// Crockford base32 digit of each byte, either case; `INVALID` for the rest.
const DIGIT_OF: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut digit = 0;
    while digit < CROCKFORD.len() {
        let c = CROCKFORD[digit];
        table[c as usize] = digit as u8;
        table[c.to_ascii_uppercase() as usize] = digit as u8;
        digit += 1;
    }
    table
};
const INVALID: u8 = 0xff;

/// The value of 26 Crockford base32 characters (either case), or `None`.
/// Ids are decoded for every log entry a leader replicates, so this is a
/// table lookup per character, not a search.
fn decode_ulid(text: &str) -> Option<u128> {
    let bytes: &[u8; ULID_CHARS] = text.as_bytes().try_into().ok()?;
    // The first character carries only 3 significant bits (26 * 5 = 130).
    if DIGIT_OF[bytes[0] as usize] > 7 {
        return None;
    }
    let mut value: u128 = 0;
    for &c in bytes {
        let digit = DIGIT_OF[c as usize];
        if digit == INVALID {
            return None;
        }
        value = (value << 5) | u128::from(digit);
    }
    Some(value)
}

fn new_ulid(now_ms: u64, rng: &mut impl Rng) -> u128 {
    let mut random = [0u8; 16];
    rng.fill_bytes(&mut random);
    let random = u128::from_be_bytes(random) & ((1u128 << 80) - 1);
    (u128::from(now_ms & ((1u64 << 48) - 1)) << 80) | random
}

/// Why a string is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a valid {kind} id (expected `{prefix}` followed by 26 base32 characters)")]
pub struct IdParseError {
    kind: &'static str,
    prefix: &'static str,
    text: String,
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Ulid);

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_str(IdVisitor { parse: Self::parse })
            }
        }

        impl $name {
            /// The prefix every id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;

            /// A new id created at `now_ms`.
            pub fn generate(now_ms: u64, rng: &mut impl Rng) -> Self {
                Self::from_ulid(new_ulid(now_ms, rng))
            }

            const fn from_ulid(value: u128) -> Self {
                Self(Ulid(value.to_be_bytes()))
            }

            /// Parses an id, checking its prefix and body.
            pub fn parse(text: &str) -> Result<Self, IdParseError> {
                let err = || IdParseError { kind: $kind, prefix: $prefix, text: text.chars().take(64).collect() };
                let body = text.strip_prefix($prefix).ok_or_else(err)?;
                let value = decode_ulid(body).ok_or_else(err)?;
                Ok(Self::from_ulid(value))
            }

            /// The id as text, prefix included.
            pub fn as_str(&self) -> IdText<{ $prefix.len() + ULID_CHARS }> {
                IdText::new($prefix, self.ulid())
            }

            fn ulid(&self) -> u128 {
                self.0.value()
            }

            /// The id's 16 bytes, big-endian: as keys of a store, they sort
            /// as the ids do.
            pub fn to_bytes(&self) -> [u8; 16] {
                self.ulid().to_be_bytes()
            }

            /// The id whose [`to_bytes`](Self::to_bytes) are `bytes`.
            pub fn from_bytes(bytes: [u8; 16]) -> Self {
                Self::from_ulid(u128::from_be_bytes(bytes))
            }

            /// Milliseconds since the epoch at which the id was created.
            pub fn created_at_ms(&self) -> u64 {
                (self.ulid() >> 80) as u64
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.as_str())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }
    };
}

prefixed_id!(
    /// A customer endpoint.
    EndpointId, "ep_", "endpoint"
);
prefixed_id!(
    /// An event posted by a producer; also the `webhook-id` of every request it causes.
    EventId, "evt_", "event"
);
prefixed_id!(
    /// The delivery of one event to one endpoint.
    DeliveryId, "dlv_", "delivery"
);
prefixed_id!(
    /// An inbound source: a provider whose webhooks hookraft receives.
    SourceId, "src_", "source"
);

impl SourceId {
    /// hookraft itself, as the source of its operational events
    /// (`state/operational.rs`); the API names it `hookraft`.
    pub const OPERATIONAL: SourceId = SourceId::from_ulid(1);
}

impl EventId {
    /// An id made at `now_ms` from `seed` rather than randomness: every
    /// replica that applies the same command derives the same id (for
    /// events the state emits itself).
    pub fn derive(now_ms: u64, seed: &[u8]) -> Self {
        let digest = Sha256::digest(seed);
        let mut random = [0u8; 16];
        random[6..].copy_from_slice(&digest[..10]);
        let value = (u128::from(now_ms & ((1 << 48) - 1)) << 80) | u128::from_be_bytes(random);
        Self::from_ulid(value)
    }
}

impl DeliveryId {
    /// The id of the delivery of `event` to `endpoint`, derived so that every
    /// replica computes the same id without coordination: the event's time and
    /// random bits, the random bits mixed with a hash of the endpoint id.
    pub fn derive(event: &EventId, endpoint: &EndpointId) -> Self {
        let digest = Sha256::digest(endpoint.as_str().as_bytes());
        let mut mix = [0u8; 16];
        mix[6..].copy_from_slice(&digest[..10]);
        Self::from_ulid(event.ulid() ^ u128::from_be_bytes(mix))
    }
}

/// Number of shards endpoints are spread over (ARCHITECTURE §5.1).
pub const SHARD_COUNT: u16 = 64;

/// A shard number, `0..SHARD_COUNT`.
pub type Shard = u16;

impl EndpointId {
    /// The shard this endpoint lives in: FNV-1a of the id modulo [`SHARD_COUNT`].
    /// Stable across versions and platforms: it decides ownership.
    pub fn shard(&self) -> Shard {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in self.as_str().as_bytes() {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        (hash % u64::from(SHARD_COUNT)) as Shard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn generated_ids_round_trip_through_parse_and_keep_their_time() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let id = EventId::generate(1_700_000_000_123, &mut rng);
        assert!(id.as_str().starts_with("evt_"));
        assert_eq!(id.as_str().len(), 4 + 26);
        assert_eq!(EventId::parse(&id.as_str()).unwrap(), id);
        assert_eq!(id.created_at_ms(), 1_700_000_000_123);
    }

    #[test]
    fn ids_as_bytes_round_trip_and_sort_as_the_ids_do() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        let mut ids: Vec<DeliveryId> = (0..200).map(|n| DeliveryId::generate(n % 7, &mut rng)).collect();
        for id in &ids {
            assert_eq!(DeliveryId::from_bytes(id.to_bytes()), *id);
        }
        let mut by_bytes = ids.clone();
        by_bytes.sort_by_key(DeliveryId::to_bytes);
        ids.sort();
        assert_eq!(by_bytes, ids);
    }

    #[test]
    fn parse_rejects_wrong_prefix_length_and_alphabet() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let id = EndpointId::generate(5, &mut rng);
        assert!(EventId::parse(&id.as_str()).is_err());
        assert!(EndpointId::parse("ep_short").is_err());
        assert!(EndpointId::parse("ep_0000000000000000000000000u").is_err());
        assert!(EndpointId::parse("ep_8zzzzzzzzzzzzzzzzzzzzzzzzz").is_err());
        assert!(EndpointId::parse("ep_7zzzzzzzzzzzzzzzzzzzzzzzzz").is_ok(), "the largest ULID");
        for excluded in ['i', 'l', 'o', 'u', 'I', '-', 'é'] {
            let text = format!("ep_000000000000000000000000{excluded}");
            assert!(EndpointId::parse(&text).is_err(), "{text}");
        }
    }

    #[test]
    fn parse_accepts_upper_case_and_keeps_the_lower_case_text() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let id = EventId::generate(1_700_000_000_000, &mut rng);
        let shouted = format!("evt_{}", id.as_str()["evt_".len()..].to_ascii_uppercase());
        assert_eq!(EventId::parse(&shouted).unwrap(), id);
        assert_eq!(EventId::parse(&shouted).unwrap().as_str(), id.as_str());
    }

    #[test]
    fn derived_delivery_ids_are_stable_distinct_and_time_ordered() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let event = EventId::generate(1_000, &mut rng);
        let later = EventId::generate(2_000, &mut rng);
        let a = EndpointId::generate(1, &mut rng);
        let b = EndpointId::generate(1, &mut rng);
        assert_eq!(DeliveryId::derive(&event, &a), DeliveryId::derive(&event, &a));
        assert_ne!(DeliveryId::derive(&event, &a), DeliveryId::derive(&event, &b));
        assert!(DeliveryId::derive(&event, &a) < DeliveryId::derive(&later, &a));
        assert_eq!(DeliveryId::derive(&event, &a).created_at_ms(), 1_000);
    }

    #[test]
    fn ids_serialize_as_their_text_and_refuse_invalid_text() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let id = DeliveryId::generate(42, &mut rng);
        let json = serde_json::to_string(&id).expect("encodes");
        assert_eq!(json, format!("\"{}\"", id.as_str()));
        assert_eq!(serde_json::from_str::<DeliveryId>(&json).expect("decodes"), id);
        assert!(serde_json::from_str::<DeliveryId>("\"dlv_nope\"").is_err());
        assert!(serde_json::from_str::<EventId>(&json).is_err(), "a delivery id is not an event id");
    }

    #[test]
    fn inline_ids_order_like_their_text() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut ids: Vec<EndpointId> = (0..200).map(|i| EndpointId::generate(i % 7, &mut rng)).collect();
        let mut texts: Vec<String> = ids.iter().map(|id| id.as_str().to_string()).collect();
        ids.sort();
        texts.sort();
        assert_eq!(ids.iter().map(|id| id.as_str().to_string()).collect::<Vec<_>>(), texts);
        assert_eq!(std::mem::size_of::<DeliveryId>(), 16, "an id is its 128 bits");
        assert_eq!(std::mem::align_of::<DeliveryId>(), 1, "and adds no padding where it is stored");
    }

    #[test]
    fn shard_is_in_range_and_spreads() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2_000 {
            let shard = EndpointId::generate(0, &mut rng).shard();
            assert!(shard < SHARD_COUNT);
            seen.insert(shard);
        }
        assert_eq!(seen.len(), SHARD_COUNT as usize);
    }
}
