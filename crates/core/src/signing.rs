//! Standard Webhooks signing and verification.
//!
//! `webhook-signature: v1,<base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))>`,
//! one space-separated `v1,` entry per valid secret during a rotation.
//! Verification accepts a request when any entry matches any secret, compares
//! in constant time, and refuses timestamps more than five minutes away.
//!
//! Ordered deliveries also carry `webhook-ordering-signature`, the same
//! `v1,<base64>` entries over their ordering headers, so that a receiver
//! orders by signed data only ([`ordering_signature_header`]): HMAC-SHA256
//! of `"{id}.{timestamp}.{epoch}.{sequence}.{key}"` under the ordering key
//! of each secret, HMAC-SHA256(secret, `hookraft-ordering-v1`). A key of
//! its own keeps the two signatures apart: neither can stand for the other.
//!
//! This module owns the secret format (`whsec_` + standard base64) and the
//! signature scheme. It must not read a clock or a global RNG: the current time
//! and the random source are parameters.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use rand_core::Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Sha256;
use zeroize::Zeroize;

type HmacSha256 = Hmac<Sha256>;

/// How far a `webhook-timestamp` may be from the verifier's clock.
pub const TIMESTAMP_TOLERANCE_S: u64 = 300;
/// Prefix of the textual form of a secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// Bounds on the decoded key length of a secret.
pub const SECRET_BYTES_MIN: usize = 24;
pub const SECRET_BYTES_MAX: usize = 64;
/// Length of generated secrets.
pub const SECRET_BYTES_GENERATED: usize = 32;
/// Version tag of the only signature scheme we produce and accept.
pub const SIGNATURE_VERSION_PREFIX: &str = "v1,";
/// `v1,` entries of one header that `verify` looks at; the rest are ignored,
/// so a hostile header cannot make us compute HMACs without bound.
pub const SIGNATURE_ENTRIES_CHECKED_MAX: usize = 16;

/// What the ordering key of a secret is derived with.
pub const ORDERING_KEY_LABEL: &[u8] = b"hookraft-ordering-v1";

/// An ordered delivery's place, as `webhook-ordering-signature` signs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderingHeaders<'a> {
    /// `webhook-ordering-epoch`: when the key's run started (ms).
    pub epoch_ms: u64,
    /// `webhook-sequence`.
    pub sequence: u32,
    /// `webhook-ordering-key`.
    pub key: &'a str,
}

/// A signing secret. `Debug` never shows the key.
///
/// Serialized (serde) as its `whsec_` text; deserializing validates it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    key: Vec<u8>,
}

/// Why a secret could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("a secret must start with `whsec_`")]
    MissingPrefix,
    #[error("the part after `whsec_` is not valid base64")]
    NotBase64,
    #[error("a secret must decode to between 24 and 64 bytes, this one has {0}")]
    BadLength(usize),
}

/// Why a request's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the webhook-timestamp header is not a unix time in seconds")]
    BadTimestamp,
    #[error("the webhook-timestamp is more than 5 minutes from now")]
    TimestampOutOfTolerance,
    #[error("no v1 signature in the header matches")]
    NoMatchingSignature,
}

impl Secret {
    /// A fresh secret of [`SECRET_BYTES_GENERATED`] random bytes.
    pub fn generate(rng: &mut impl Rng) -> Self {
        let mut key = vec![0u8; SECRET_BYTES_GENERATED];
        rng.fill_bytes(&mut key);
        Self { key }
    }

    /// Wraps raw key bytes, checking their length.
    pub fn from_key(key: Vec<u8>) -> Result<Self, SecretError> {
        if !(SECRET_BYTES_MIN..=SECRET_BYTES_MAX).contains(&key.len()) {
            return Err(SecretError::BadLength(key.len()));
        }
        Ok(Self { key })
    }

    /// Parses the `whsec_<base64>` text form.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text.strip_prefix(SECRET_PREFIX).ok_or(SecretError::MissingPrefix)?;
        let key = BASE64.decode(encoded).map_err(|_| SecretError::NotBase64)?;
        Self::from_key(key)
    }

    /// The raw key (what is stored, sealed or not).
    pub fn key_bytes(&self) -> &[u8] {
        &self.key
    }

    /// Renders the `whsec_<base64>` text form; [`Secret::parse`] reads it back.
    pub fn to_whsec(&self) -> String {
        format!("{SECRET_PREFIX}{}", BASE64.encode(&self.key))
    }

    /// An HMAC keyed with this secret, fed with the signed content.
    fn mac(&self, msg_id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        // HMAC accepts keys of any length; ours are 24..=64 bytes by construction.
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts any key length");
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// An HMAC keyed with this secret's ordering key, fed with the ordering
    /// signature's content.
    fn ordering_mac(&self, msg_id: &str, timestamp: &str, ordering: &OrderingHeaders<'_>) -> HmacSha256 {
        let mut derive = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts any key length");
        derive.update(ORDERING_KEY_LABEL);
        let key = derive.finalize().into_bytes();
        let mut mac = HmacSha256::new_from_slice(&key).expect("HMAC accepts any key length");
        let OrderingHeaders { epoch_ms, sequence, key } = ordering;
        mac.update(format!("{msg_id}.{timestamp}.{epoch_ms}.{sequence}.").as_bytes());
        mac.update(key.as_bytes());
        mac
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_whsec())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Secret::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One `v1,<base64>` signature.
pub fn sign(secret: &Secret, msg_id: &str, timestamp_s: u64, body: &[u8]) -> String {
    let tag = secret.mac(msg_id, &timestamp_s.to_string(), body).finalize().into_bytes();
    format!("{SIGNATURE_VERSION_PREFIX}{}", BASE64.encode(tag))
}

/// The full header value: one `v1,` entry per secret, space separated.
pub fn signature_header(secrets: &[&Secret], msg_id: &str, timestamp_s: u64, body: &[u8]) -> String {
    secrets.iter().map(|secret| sign(secret, msg_id, timestamp_s, body)).collect::<Vec<_>>().join(" ")
}

/// The `webhook-ordering-signature` value: one `v1,` entry per secret.
pub fn ordering_signature_header(
    secrets: &[&Secret],
    msg_id: &str,
    timestamp_s: u64,
    ordering: &OrderingHeaders<'_>,
) -> String {
    let timestamp = timestamp_s.to_string();
    secrets
        .iter()
        .map(|secret| {
            let tag = secret.ordering_mac(msg_id, &timestamp, ordering).finalize().into_bytes();
            format!("{SIGNATURE_VERSION_PREFIX}{}", BASE64.encode(tag))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks `webhook-ordering-signature` of a request whose `webhook-signature`
/// [`verify`] accepted (its timestamp checked there): any entry matching any
/// secret, compared in constant time.
pub fn verify_ordering(
    secrets: &[&Secret],
    msg_id: &str,
    timestamp_s: u64,
    ordering: &OrderingHeaders<'_>,
    signature_header: &str,
) -> Result<(), VerifyError> {
    let timestamp = timestamp_s.to_string();
    let macs: Vec<HmacSha256> =
        secrets.iter().map(|secret| secret.ordering_mac(msg_id, &timestamp, ordering)).collect();
    matches_any(&macs, signature_header)
}

/// Whether an entry of `signature_header` matches one of `macs`.
fn matches_any(macs: &[HmacSha256], signature_header: &str) -> Result<(), VerifyError> {
    let tags = signature_header
        .split(' ')
        .filter_map(|entry| entry.strip_prefix(SIGNATURE_VERSION_PREFIX))
        .take(SIGNATURE_ENTRIES_CHECKED_MAX)
        .filter_map(|encoded| BASE64.decode(encoded).ok());
    for tag in tags {
        // `verify_slice` compares in constant time.
        if macs.iter().any(|mac| mac.clone().verify_slice(&tag).is_ok()) {
            return Ok(());
        }
    }
    Err(VerifyError::NoMatchingSignature)
}

/// Checks a request as a receiver would.
///
/// The timestamp is checked before any HMAC is computed, so replays of old
/// requests are refused cheaply. Entries with another version tag or invalid
/// base64 are skipped, not errors: a sender may add schemes we do not know.
/// Only the first [`SIGNATURE_ENTRIES_CHECKED_MAX`] `v1,` entries count.
pub fn verify(
    secrets: &[&Secret],
    msg_id: &str,
    timestamp_header: &str,
    signature_header: &str,
    body: &[u8],
    now_s: u64,
) -> Result<(), VerifyError> {
    let timestamp_s = parse_timestamp(timestamp_header)?;
    if timestamp_s.abs_diff(now_s) > TIMESTAMP_TOLERANCE_S {
        return Err(VerifyError::TimestampOutOfTolerance);
    }
    // Sign the canonical decimal form, as the sender did.
    let timestamp = timestamp_s.to_string();
    let macs: Vec<HmacSha256> = secrets.iter().map(|secret| secret.mac(msg_id, &timestamp, body)).collect();
    matches_any(&macs, signature_header)
}

/// A `webhook-timestamp`: ASCII decimal seconds, surrounding blanks tolerated.
fn parse_timestamp(text: &str) -> Result<u64, VerifyError> {
    let digits = text.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::BadTimestamp);
    }
    digits.parse().map_err(|_| VerifyError::BadTimestamp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TS: u64 = 1_614_265_330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn vector_secret() -> Secret {
        Secret::parse(VECTOR_SECRET).expect("the official vector secret parses")
    }

    fn secret_of(byte: u8) -> Secret {
        Secret::from_key(vec![byte; SECRET_BYTES_GENERATED]).expect("valid length")
    }

    #[test]
    fn an_ordering_signature_verifies_for_its_fields_only_and_never_as_a_payload_signature() {
        let secret = vector_secret();
        let place = OrderingHeaders { epoch_ms: 1_700_000_000_123, sequence: 4, key: "cus_1" };
        let header = ordering_signature_header(&[&secret], VECTOR_ID, VECTOR_TS, &place);
        assert_eq!(verify_ordering(&[&secret], VECTOR_ID, VECTOR_TS, &place, &header), Ok(()));
        let forged = [
            OrderingHeaders { sequence: 5, ..place },
            OrderingHeaders { epoch_ms: 1_700_000_000_124, ..place },
            OrderingHeaders { key: "cus_2", ..place },
        ];
        for other in forged {
            assert!(verify_ordering(&[&secret], VECTOR_ID, VECTOR_TS, &other, &header).is_err(), "{other:?}");
        }
        assert!(verify_ordering(&[&secret], "msg_other", VECTOR_TS, &place, &header).is_err());
        assert!(verify_ordering(&[&secret], VECTOR_ID, VECTOR_TS + 1, &place, &header).is_err());
        assert!(verify_ordering(&[&secret_of(9)], VECTOR_ID, VECTOR_TS, &place, &header).is_err());
        // The payload signature of the same content is another tag.
        let content = format!("{}.{}.{}", place.epoch_ms, place.sequence, place.key);
        let as_payload = signature_header(&[&secret], VECTOR_ID, VECTOR_TS, content.as_bytes());
        assert!(verify_ordering(&[&secret], VECTOR_ID, VECTOR_TS, &place, &as_payload).is_err());
        // Independently computed: HMAC(HMAC(key, label), content).
        let mut derive = HmacSha256::new_from_slice(&secret.key).unwrap();
        derive.update(b"hookraft-ordering-v1");
        let ordering_key = derive.finalize().into_bytes();
        let mut mac = HmacSha256::new_from_slice(&ordering_key).unwrap();
        mac.update(format!("{VECTOR_ID}.{VECTOR_TS}.1700000000123.4.cus_1").as_bytes());
        assert_eq!(header, format!("v1,{}", BASE64.encode(mac.finalize().into_bytes())));
    }

    #[test]
    fn official_vector_signs_to_the_published_signature() {
        let secret = vector_secret();
        assert_eq!(sign(&secret, VECTOR_ID, VECTOR_TS, VECTOR_BODY), VECTOR_SIGNATURE);
        let ts = VECTOR_TS.to_string();
        assert_eq!(verify(&[&secret], VECTOR_ID, &ts, VECTOR_SIGNATURE, VECTOR_BODY, VECTOR_TS), Ok(()));
    }

    #[test]
    fn official_vector_with_last_signature_char_changed_is_refused() {
        let secret = vector_secret();
        let ts = VECTOR_TS.to_string();
        let base = &VECTOR_SIGNATURE[..VECTOR_SIGNATURE.len() - 2];
        // The padding replaced, and the last data character replaced by one
        // that still decodes canonically but to a different last byte.
        for tampered in [format!("{base}EA"), format!("{base}I=")] {
            assert_ne!(tampered, VECTOR_SIGNATURE);
            let result = verify(&[&secret], VECTOR_ID, &ts, &tampered, VECTOR_BODY, VECTOR_TS);
            assert_eq!(result, Err(VerifyError::NoMatchingSignature), "{tampered}");
        }
        let decoded = BASE64.decode(&format!("{base}I=")[3..]).expect("canonical base64");
        assert_eq!(decoded.len(), 32);
    }

    #[test]
    fn signature_header_during_rotation_verifies_with_either_secret_alone() {
        let (old, new) = (secret_of(1), secret_of(2));
        let header = signature_header(&[&old, &new], "msg_1", 1000, b"body");
        assert_eq!(header.split(' ').count(), 2);
        assert!(header.split(' ').all(|entry| entry.starts_with("v1,")));
        assert_eq!(verify(&[&old], "msg_1", "1000", &header, b"body", 1000), Ok(()));
        assert_eq!(verify(&[&new], "msg_1", "1000", &header, b"body", 1000), Ok(()));
        let other = secret_of(3);
        let result = verify(&[&other], "msg_1", "1000", &header, b"body", 1000);
        assert_eq!(result, Err(VerifyError::NoMatchingSignature));
    }

    #[test]
    fn verify_with_rotated_secrets_accepts_a_header_signed_by_either() {
        let (old, new) = (secret_of(1), secret_of(2));
        let header = sign(&old, "msg_1", 1000, b"body");
        assert_eq!(verify(&[&new, &old], "msg_1", "1000", &header, b"body", 1000), Ok(()));
    }

    #[test]
    fn timestamp_exactly_at_tolerance_is_accepted_in_both_directions() {
        let secret = secret_of(7);
        let ts = 1_000_000;
        let header = sign(&secret, "msg", ts, b"x");
        for now in [ts - TIMESTAMP_TOLERANCE_S, ts + TIMESTAMP_TOLERANCE_S] {
            assert_eq!(verify(&[&secret], "msg", "1000000", &header, b"x", now), Ok(()));
        }
    }

    #[test]
    fn timestamp_one_second_past_tolerance_is_refused_in_both_directions() {
        let secret = secret_of(7);
        let ts = 1_000_000;
        let header = sign(&secret, "msg", ts, b"x");
        for now in [ts - TIMESTAMP_TOLERANCE_S - 1, ts + TIMESTAMP_TOLERANCE_S + 1] {
            let result = verify(&[&secret], "msg", "1000000", &header, b"x", now);
            assert_eq!(result, Err(VerifyError::TimestampOutOfTolerance));
        }
    }

    #[test]
    fn malformed_timestamps_are_refused_as_bad_timestamp() {
        let secret = secret_of(7);
        let header = sign(&secret, "msg", 1000, b"x");
        for ts in ["", " ", "abc", "-1000", "+1000", "10.5", "1e3", "99999999999999999999999"] {
            let result = verify(&[&secret], "msg", ts, &header, b"x", 1000);
            assert_eq!(result, Err(VerifyError::BadTimestamp), "timestamp {ts:?}");
        }
    }

    #[test]
    fn foreign_versions_and_garbage_entries_are_skipped() {
        let secret = secret_of(7);
        let good = sign(&secret, "msg", 1000, b"x");
        let header = format!("v2,abc v1,!!notbase64!! v1a,xyz {good}");
        assert_eq!(verify(&[&secret], "msg", "1000", &header, b"x", 1000), Ok(()));
        let only_garbage = "v2,abc v1,!!notbase64!! v1,AAAA";
        let result = verify(&[&secret], "msg", "1000", only_garbage, b"x", 1000);
        assert_eq!(result, Err(VerifyError::NoMatchingSignature));
    }

    #[test]
    fn entries_past_the_checked_maximum_are_ignored() {
        let secret = secret_of(7);
        let good = sign(&secret, "msg", 1000, b"x");
        let filler = vec!["v1,AAAA"; SIGNATURE_ENTRIES_CHECKED_MAX - 1].join(" ");
        let last_checked = format!("{filler} {good}");
        assert_eq!(verify(&[&secret], "msg", "1000", &last_checked, b"x", 1000), Ok(()));
        let too_far = format!("v1,AAAA {last_checked}");
        let result = verify(&[&secret], "msg", "1000", &too_far, b"x", 1000);
        assert_eq!(result, Err(VerifyError::NoMatchingSignature));
    }

    #[test]
    fn verify_without_secrets_finds_no_match() {
        let header = sign(&secret_of(7), "msg", 1000, b"x");
        assert_eq!(verify(&[], "msg", "1000", &header, b"x", 1000), Err(VerifyError::NoMatchingSignature));
    }

    #[test]
    fn secret_without_prefix_is_refused() {
        assert_eq!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), Err(SecretError::MissingPrefix));
        assert_eq!(Secret::parse("WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), Err(SecretError::MissingPrefix));
    }

    #[test]
    fn secret_with_bad_base64_is_refused() {
        assert_eq!(Secret::parse("whsec_not*base64!"), Err(SecretError::NotBase64));
        assert_eq!(Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS"), Err(SecretError::NotBase64));
    }

    #[test]
    fn secret_of_23_bytes_is_too_short_and_65_too_long() {
        let short = format!("whsec_{}", BASE64.encode([0u8; 23]));
        assert_eq!(Secret::parse(&short), Err(SecretError::BadLength(23)));
        let long = format!("whsec_{}", BASE64.encode([0u8; 65]));
        assert_eq!(Secret::parse(&long), Err(SecretError::BadLength(65)));
        assert_eq!(Secret::parse("whsec_"), Err(SecretError::BadLength(0)));
        assert!(Secret::from_key(vec![0; SECRET_BYTES_MIN]).is_ok());
        assert!(Secret::from_key(vec![0; SECRET_BYTES_MAX]).is_ok());
    }

    #[test]
    fn generated_secret_has_32_bytes_and_round_trips_through_whsec() {
        let mut rng = StdRng::seed_from_u64(42);
        let secret = Secret::generate(&mut rng);
        assert_eq!(secret.key.len(), SECRET_BYTES_GENERATED);
        let text = secret.to_whsec();
        assert!(text.starts_with(SECRET_PREFIX));
        assert_eq!(Secret::parse(&text), Ok(secret.clone()));
        assert_ne!(Secret::generate(&mut rng), secret);
    }

    #[test]
    fn generate_is_deterministic_for_a_seeded_rng() {
        let a = Secret::generate(&mut StdRng::seed_from_u64(9));
        let b = Secret::generate(&mut StdRng::seed_from_u64(9));
        assert_eq!(a, b);
    }

    #[test]
    fn debug_redacts_the_key() {
        let secret = vector_secret();
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        assert!(!format!("{secret:#?}").contains("MfKQ"));
    }

    #[test]
    fn serde_writes_the_whsec_string_and_validates_on_read() {
        let secret = vector_secret();
        let json = serde_json::to_string(&secret).expect("serializes");
        assert_eq!(json, format!("\"{VECTOR_SECRET}\""));
        let back: Secret = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, secret);
        assert!(serde_json::from_str::<Secret>("\"whsec_AAAA\"").is_err());
        assert!(serde_json::from_str::<Secret>("\"nope\"").is_err());
    }

    proptest! {
        #[test]
        fn sign_then_verify_round_trips(
            key in proptest::collection::vec(any::<u8>(), SECRET_BYTES_MIN..=SECRET_BYTES_MAX),
            body in proptest::collection::vec(any::<u8>(), 0..256),
            msg_id in "[a-zA-Z0-9_]{1,40}",
            ts in 0u64..4_000_000_000,
            skew in 0u64..=TIMESTAMP_TOLERANCE_S,
        ) {
            let secret = Secret::from_key(key).expect("length in range");
            let header = sign(&secret, &msg_id, ts, &body);
            let result = verify(&[&secret], &msg_id, &ts.to_string(), &header, &body, ts + skew);
            prop_assert_eq!(result, Ok(()));
        }

        #[test]
        fn flipped_body_byte_fails_verification(
            key in proptest::collection::vec(any::<u8>(), SECRET_BYTES_MIN..=SECRET_BYTES_MAX),
            body in proptest::collection::vec(any::<u8>(), 1..256),
            index in any::<prop::sample::Index>(),
            flip in 1u8..=255,
            ts in 0u64..4_000_000_000,
        ) {
            let secret = Secret::from_key(key).expect("length in range");
            let header = sign(&secret, "msg", ts, &body);
            let mut tampered = body.clone();
            let i = index.index(tampered.len());
            tampered[i] ^= flip;
            let result = verify(&[&secret], "msg", &ts.to_string(), &header, &tampered, ts);
            prop_assert_eq!(result, Err(VerifyError::NoMatchingSignature));
        }

        #[test]
        fn hostile_headers_never_verify_and_never_panic(
            key in proptest::collection::vec(any::<u8>(), SECRET_BYTES_MIN..=SECRET_BYTES_MAX),
            msg_id in "\\PC{0,40}",
            timestamp in "\\PC{0,24}|[0-9 ]{0,24}",
            signature in "\\PC{0,200}|(v1,[A-Za-z0-9+/=]{0,60} ?){0,20}",
            body in proptest::collection::vec(any::<u8>(), 0..128),
            now_s in any::<u64>(),
        ) {
            let secret = Secret::from_key(key).expect("length in range");
            let result = verify(&[&secret], &msg_id, &timestamp, &signature, &body, now_s);
            // A forged header matches only by forging HMAC-SHA256.
            prop_assert!(result.is_err(), "{:?}", result);
            let digits = timestamp.trim();
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                prop_assert_eq!(result, Err(VerifyError::BadTimestamp));
            }
        }

        #[test]
        fn a_true_signature_among_hostile_entries_verifies_only_within_the_checked_count(
            key in proptest::collection::vec(any::<u8>(), SECRET_BYTES_MIN..=SECRET_BYTES_MAX),
            junk in proptest::collection::vec("\\PC{0,20}|v1,[A-Za-z0-9+/=]{0,44}", 0..24),
            at in any::<prop::sample::Index>(),
        ) {
            let secret = Secret::from_key(key).expect("length in range");
            let mut entries: Vec<String> = junk.into_iter().map(|j| j.replace(' ', "")).collect();
            let position = at.index(entries.len() + 1);
            entries.insert(position, sign(&secret, "msg", 1_000, b"{}"));
            let header = entries.join(" ");
            let checked_before = entries[..position].iter().filter(|e| e.starts_with("v1,")).count();
            let result = verify(&[&secret], "msg", "1000", &header, b"{}", 1_000);
            if checked_before < SIGNATURE_ENTRIES_CHECKED_MAX {
                prop_assert_eq!(result, Ok(()));
            } else {
                prop_assert_eq!(result, Err(VerifyError::NoMatchingSignature));
            }
        }

        #[test]
        fn any_secret_text_parses_to_a_key_in_range_or_is_refused(text in "\\PC{0,100}|whsec_[A-Za-z0-9+/=]{0,120}") {
            if let Ok(secret) = Secret::parse(&text) {
                prop_assert!((SECRET_BYTES_MIN..=SECRET_BYTES_MAX).contains(&secret.key.len()));
                prop_assert_eq!(secret.to_whsec(), text);
            }
        }

        #[test]
        fn secret_text_round_trips(
            key in proptest::collection::vec(any::<u8>(), SECRET_BYTES_MIN..=SECRET_BYTES_MAX),
        ) {
            let secret = Secret::from_key(key).expect("length in range");
            prop_assert_eq!(Secret::parse(&secret.to_whsec()), Ok(secret));
        }
    }
}
