//! One webhook request as it arrives, and its verification.
//!
//! [`verify`] is pure: it turns the headers and body of a request into a
//! [`Delivery`] (the request's signature checked against the secrets, its
//! timestamp within [`TIMESTAMP_TOLERANCE_S`](crate::TIMESTAMP_TOLERANCE_S) of `now_s`, its ordering headers
//! parsed) or into the [`Rejection`] that says why not. It keeps no state and
//! reads no clock; deduplication and the stale guard are [`crate::Inbox`]'s.
//!
//! The signature covers `webhook-id`, `webhook-timestamp` and the body, as
//! Standard Webhooks defines it. The ordering headers (`webhook-ordering-key`,
//! `webhook-ordering-epoch`, `webhook-sequence`) are covered by
//! `webhook-ordering-signature` (`hookraft_core::signing::verify_ordering`):
//! a request whose ordering headers are not signed, or signed for other
//! values, is rejected, so an ordering decision rests on signed data only.

use hookraft_core::signing::{self, OrderingHeaders, Secret, VerifyError};

/// Longest `webhook-id` accepted, in bytes; the inbox stores each one for the
/// dedupe window. hookraft's event ids are 30 bytes.
pub const ID_BYTES_MAX: usize = 256;
/// Longest ordering key accepted (header or caller's), in bytes; hookraft's
/// `ordering_key` has the same limit.
pub const KEY_BYTES_MAX: usize = 256;

/// The headers a receiver reads, exactly as they came; nothing checked yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request<'a> {
    /// `webhook-id`: the event id, the same on every attempt.
    pub id: Option<&'a str>,
    /// `webhook-timestamp`: unix seconds of this attempt.
    pub timestamp: Option<&'a str>,
    /// `webhook-signature`: `v1,<base64>` entries, space separated.
    pub signature: Option<&'a str>,
    /// `webhook-sequence`: on ordered endpoints, the number in the key's order.
    pub sequence: Option<&'a str>,
    /// `webhook-ordering-key`: on ordered endpoints, the event's key.
    pub ordering_key: Option<&'a str>,
    /// `webhook-ordering-epoch`: on ordered endpoints, when the key's run
    /// started (ms); a later run has a later epoch.
    pub ordering_epoch: Option<&'a str>,
    /// `webhook-ordering-signature`: the ordering headers' signature.
    pub ordering_signature: Option<&'a str>,
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    /// Reads the headers through `header`, which is given lower-case names
    /// and answers `None` for a header that is absent (or not text).
    pub fn from_headers(header: impl Fn(&str) -> Option<&'a str>, body: &'a [u8]) -> Self {
        Self {
            id: header("webhook-id"),
            timestamp: header("webhook-timestamp"),
            signature: header("webhook-signature"),
            sequence: header("webhook-sequence"),
            ordering_key: header("webhook-ordering-key"),
            ordering_epoch: header("webhook-ordering-epoch"),
            ordering_signature: header("webhook-ordering-signature"),
            body,
        }
    }
}

/// A request whose signature and timestamp are good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    pub id: &'a str,
    pub timestamp_s: u64,
    /// Present on deliveries from endpoints with ordered delivery.
    pub sequenced: Option<Sequenced<'a>>,
    pub body: &'a [u8],
}

/// The place of a delivery in its key's order, from an ordered endpoint:
/// sequences count 1, 2, 3, ... per (endpoint, key) without gaps within a
/// run of the key; a key forgotten by the sender starts a new run, at 1,
/// under a later epoch. Signed by the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sequenced<'a> {
    pub key: &'a str,
    pub epoch_ms: u64,
    pub sequence: u32,
}

/// Why a request was refused. The text is meant for a log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("missing header {}", .0.join(", "))]
    MissingHeaders(Vec<&'static str>),
    #[error("webhook-id must be 1 to {ID_BYTES_MAX} bytes")]
    BadId,
    #[error(transparent)]
    Signature(#[from] VerifyError),
    #[error("webhook-sequence, webhook-ordering-key and webhook-ordering-epoch must come together")]
    HalfOrdering,
    #[error("webhook-sequence is not a whole number from 0 to 4294967295")]
    BadSequence,
    #[error("webhook-ordering-epoch is not a whole number of milliseconds")]
    BadEpoch,
    #[error("webhook-ordering-signature does not sign these ordering headers: {0}")]
    OrderingSignature(VerifyError),
    #[error("an ordering key must be 1 to {KEY_BYTES_MAX} bytes")]
    BadKey,
}

/// Checks one request as a Standard Webhooks receiver must, at `now_s`
/// (unix seconds): the headers are present and within bounds, the timestamp
/// is within [`TIMESTAMP_TOLERANCE_S`](crate::TIMESTAMP_TOLERANCE_S) and a signature matches one of
/// `secrets` (several during a rotation).
pub fn verify<'a>(secrets: &[Secret], request: &Request<'a>, now_s: u64) -> Result<Delivery<'a>, Rejection> {
    let (Some(id), Some(timestamp), Some(signature)) = (request.id, request.timestamp, request.signature) else {
        return Err(Rejection::MissingHeaders(missing_headers(request)));
    };
    if id.is_empty() || id.len() > ID_BYTES_MAX {
        return Err(Rejection::BadId);
    }
    let secrets: Vec<&Secret> = secrets.iter().collect();
    signing::verify(&secrets, id, timestamp, signature, request.body, now_s)?;
    let timestamp_s = timestamp.trim().parse().map_err(|_| Rejection::Signature(VerifyError::BadTimestamp))?;
    let sequenced = sequenced(request.sequence, request.ordering_key, request.ordering_epoch)?;
    if let Some(place) = &sequenced {
        let signed = OrderingHeaders { epoch_ms: place.epoch_ms, sequence: place.sequence, key: place.key };
        let signature = request.ordering_signature.unwrap_or_default();
        signing::verify_ordering(&secrets, id, timestamp_s, &signed, signature)
            .map_err(Rejection::OrderingSignature)?;
    }
    Ok(Delivery { id, timestamp_s, sequenced, body: request.body })
}

fn missing_headers(request: &Request<'_>) -> Vec<&'static str> {
    [
        ("webhook-id", request.id.is_none()),
        ("webhook-timestamp", request.timestamp.is_none()),
        ("webhook-signature", request.signature.is_none()),
    ]
    .into_iter()
    .filter_map(|(name, absent)| absent.then_some(name))
    .collect()
}

fn sequenced<'a>(
    sequence: Option<&str>,
    key: Option<&'a str>,
    epoch: Option<&str>,
) -> Result<Option<Sequenced<'a>>, Rejection> {
    match (sequence, key, epoch) {
        (None, None, None) => Ok(None),
        (Some(sequence), Some(key), Some(epoch)) => {
            check_key(key)?;
            let sequence = whole_number(sequence).ok_or(Rejection::BadSequence)?;
            let epoch_ms = whole_number(epoch).ok_or(Rejection::BadEpoch)?;
            Ok(Some(Sequenced { key, epoch_ms, sequence }))
        }
        _ => Err(Rejection::HalfOrdering),
    }
}

/// ASCII digits, surrounding blanks tolerated, that fit `T`.
fn whole_number<T: std::str::FromStr>(text: &str) -> Option<T> {
    let digits = text.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// An ordering key is 1 to [`KEY_BYTES_MAX`] bytes.
pub(crate) fn check_key(key: &str) -> Result<(), Rejection> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX { Err(Rejection::BadKey) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TIMESTAMP_TOLERANCE_S;
    use crate::test_support::{EPOCH_MS, NOW_S, secret, signed};

    #[test]
    fn a_correctly_signed_request_verifies_with_its_id_and_timestamp() {
        let key = secret(1);
        let request = signed(&key, "evt_1", NOW_S, b"{}");
        let delivery = verify(&[key], &request.as_request(), NOW_S + 10).expect("verifies");
        assert_eq!(delivery.id, "evt_1");
        assert_eq!(delivery.timestamp_s, NOW_S);
        assert_eq!(delivery.sequenced, None);
        assert_eq!(delivery.body, b"{}");
    }

    #[test]
    fn a_forged_signature_is_rejected() {
        let request = signed(&secret(1), "evt_1", NOW_S, b"{}");
        let result = verify(&[secret(2)], &request.as_request(), NOW_S);
        assert_eq!(result, Err(Rejection::Signature(VerifyError::NoMatchingSignature)));
    }

    #[test]
    fn a_tampered_body_is_rejected() {
        let key = secret(1);
        let request = signed(&key, "evt_1", NOW_S, b"{\"amount\":1}");
        let tampered = Request { body: b"{\"amount\":9}", ..request.as_request() };
        let result = verify(&[key], &tampered, NOW_S);
        assert_eq!(result, Err(Rejection::Signature(VerifyError::NoMatchingSignature)));
    }

    #[test]
    fn a_request_older_than_the_tolerance_is_rejected_as_expired() {
        let key = secret(1);
        let request = signed(&key, "evt_1", NOW_S, b"{}");
        let result = verify(&[key], &request.as_request(), NOW_S + TIMESTAMP_TOLERANCE_S + 1);
        assert_eq!(result, Err(Rejection::Signature(VerifyError::TimestampOutOfTolerance)));
        assert!(result.unwrap_err().to_string().contains("5 minutes"));
    }

    #[test]
    fn a_request_signed_with_the_old_secret_verifies_during_a_rotation() {
        let (old, new) = (secret(1), secret(2));
        let request = signed(&old, "evt_1", NOW_S, b"{}");
        assert!(verify(&[new, old], &request.as_request(), NOW_S).is_ok());
    }

    #[test]
    fn missing_headers_are_all_named() {
        let result = verify(&[secret(1)], &Request::default(), NOW_S);
        let rejection = result.unwrap_err();
        assert_eq!(rejection.to_string(), "missing header webhook-id, webhook-timestamp, webhook-signature");
    }

    #[test]
    fn an_empty_or_overlong_id_is_rejected_before_any_hmac() {
        let key = secret(1);
        let long = "e".repeat(ID_BYTES_MAX + 1);
        for id in ["", long.as_str()] {
            let request = signed(&key, id, NOW_S, b"{}");
            assert_eq!(
                verify(std::slice::from_ref(&key), &request.as_request(), NOW_S),
                Err(Rejection::BadId),
                "{id:?}"
            );
        }
        let longest = "e".repeat(ID_BYTES_MAX);
        assert!(verify(std::slice::from_ref(&key), &signed(&key, &longest, NOW_S, b"{}").as_request(), NOW_S).is_ok());
    }

    #[test]
    fn ordering_headers_become_the_delivery_sequence() {
        let key = secret(1);
        let request = signed(&key, "evt_1", NOW_S, b"{}").ordered("cus_42", "7");
        let delivery = verify(&[key], &request.as_request(), NOW_S).expect("verifies");
        assert_eq!(delivery.sequenced, Some(Sequenced { key: "cus_42", epoch_ms: EPOCH_MS, sequence: 7 }));
    }

    #[test]
    fn forged_or_unsigned_ordering_headers_are_rejected() {
        let key = secret(1);
        let request = signed(&key, "evt_1", NOW_S, b"{}").ordered("cus_42", "7");
        let genuine = request.as_request();
        let forged = [
            Request { sequence: Some("8"), ..genuine },
            Request { ordering_key: Some("cus_43"), ..genuine },
            Request { ordering_epoch: Some("1"), ..genuine },
            Request { ordering_signature: None, ..genuine },
            Request { ordering_signature: genuine.signature, ..genuine },
        ];
        for request in forged {
            let result = verify(std::slice::from_ref(&key), &request, NOW_S);
            assert!(matches!(result, Err(Rejection::OrderingSignature(_))), "{request:?}: {result:?}");
        }
        let other_secret = signed(&secret(2), "evt_1", NOW_S, b"{}").ordered("cus_42", "7");
        let mixed = Request { ordering_signature: other_secret.as_request().ordering_signature, ..genuine };
        assert!(matches!(verify(&[key], &mixed, NOW_S), Err(Rejection::OrderingSignature(_))));
    }

    #[test]
    fn malformed_ordering_headers_are_rejected() {
        let key = secret(1);
        let base = signed(&key, "evt_1", NOW_S, b"{}");
        let long_key = "k".repeat(KEY_BYTES_MAX + 1);
        let epoch = Some("1700000000000");
        let cases = [
            (Some("1"), None, epoch, Rejection::HalfOrdering),
            (None, Some("cus_1"), epoch, Rejection::HalfOrdering),
            (Some("1"), Some("cus_1"), None, Rejection::HalfOrdering),
            (Some("-1"), Some("cus_1"), epoch, Rejection::BadSequence),
            (Some("4294967296"), Some("cus_1"), epoch, Rejection::BadSequence),
            (Some(""), Some("cus_1"), epoch, Rejection::BadSequence),
            (Some("1"), Some("cus_1"), Some("x"), Rejection::BadEpoch),
            (Some("1"), Some(""), epoch, Rejection::BadKey),
            (Some("1"), Some(long_key.as_str()), epoch, Rejection::BadKey),
        ];
        for (sequence, ordering_key, ordering_epoch, expected) in cases {
            let request = Request { sequence, ordering_key, ordering_epoch, ..base.as_request() };
            assert_eq!(
                verify(std::slice::from_ref(&key), &request, NOW_S),
                Err(expected),
                "{sequence:?} {ordering_key:?}"
            );
        }
    }

    #[test]
    fn from_headers_reads_the_lower_case_names() {
        let headers = [("webhook-id", "evt_1"), ("webhook-sequence", "3"), ("webhook-ordering-key", "k")];
        let lookup = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        let request = Request::from_headers(lookup, b"x");
        assert_eq!(request.id, Some("evt_1"));
        assert_eq!(request.timestamp, None);
        assert_eq!(request.sequence, Some("3"));
        assert_eq!(request.ordering_key, Some("k"));
        assert_eq!(request.body, b"x");
    }
}
