//! Verifying a provider's signature, scheme by scheme. Pure: the time and
//! the request's headers come in as arguments.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{Encoding, ProviderSecret, Scheme};
use crate::signing::{self, TIMESTAMP_TOLERANCE_S};

type HmacSha256 = Hmac<Sha256>;

/// Signatures of one header that are looked at; the rest are ignored, so a
/// hostile header cannot make us compute HMACs without bound.
pub const SIGNATURES_CHECKED_MAX: usize = 16;

/// Why a request's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the {0} header is missing")]
    MissingHeader(String),
    #[error("the {0} header is malformed")]
    Malformed(String),
    #[error("the signature's timestamp is more than {TIMESTAMP_TOLERANCE_S} seconds from now")]
    Expired,
    #[error("no signature matches")]
    NoMatch,
}

/// Checks that `body` was signed by the holder of one of `secrets` as
/// `scheme` signs, within the scheme's timestamp tolerance of `now_s`.
/// `header` looks a header up by its lowercase name.
pub fn verify<'h>(
    scheme: &Scheme,
    secrets: &[&ProviderSecret],
    header: impl Fn(&str) -> Option<&'h str>,
    body: &[u8],
    now_s: u64,
) -> Result<(), SignatureError> {
    let required = |name: &str| header(name).ok_or_else(|| SignatureError::MissingHeader(name.to_string()));
    match scheme {
        Scheme::StandardWebhooks => standard_webhooks(secrets, &required, body, now_s),
        Scheme::Stripe => stripe(secrets, required("stripe-signature")?, body, now_s),
        Scheme::Github => {
            let value = required("x-hub-signature-256")?;
            let tag = value.trim().strip_prefix("sha256=").and_then(hex_decode);
            let tag = tag.ok_or_else(|| SignatureError::Malformed("x-hub-signature-256".into()))?;
            matches_any(secrets, &[], body, &[tag])
        }
        Scheme::HmacSha256 { header: name, encoding, prefix } => {
            let value = required(name)?.trim();
            let value = match prefix {
                Some(prefix) => value.strip_prefix(prefix.as_str()),
                None => Some(value),
            };
            let tag = value.and_then(|v| match encoding {
                Encoding::Hex => hex_decode(v),
                Encoding::Base64 => BASE64.decode(v).ok(),
            });
            matches_any(secrets, &[], body, &[tag.ok_or_else(|| SignatureError::Malformed(name.clone()))?])
        }
    }
}

fn standard_webhooks<'h>(
    secrets: &[&ProviderSecret],
    required: &impl Fn(&str) -> Result<&'h str, SignatureError>,
    body: &[u8],
    now_s: u64,
) -> Result<(), SignatureError> {
    let (id, timestamp, signature) =
        (required("webhook-id")?, required("webhook-timestamp")?, required("webhook-signature")?);
    // A standard-webhooks secret is 24..=64 bytes by construction.
    let keys: Vec<signing::Secret> =
        secrets.iter().filter_map(|s| signing::Secret::from_key(s.key().to_vec()).ok()).collect();
    let keys: Vec<&signing::Secret> = keys.iter().collect();
    signing::verify(&keys, id, timestamp, signature, body, now_s).map_err(|e| match e {
        signing::VerifyError::BadTimestamp => SignatureError::Malformed("webhook-timestamp".into()),
        signing::VerifyError::TimestampOutOfTolerance => SignatureError::Expired,
        signing::VerifyError::NoMatchingSignature => SignatureError::NoMatch,
    })
}

/// `t=<unix s>,v1=<hex>[,v1=<hex>…]`: HMAC of `{t}.{body}`.
fn stripe(secrets: &[&ProviderSecret], value: &str, body: &[u8], now_s: u64) -> Result<(), SignatureError> {
    let malformed = || SignatureError::Malformed("stripe-signature".into());
    let mut timestamp = None;
    let mut tags = Vec::new();
    for part in value.split(',').take(SIGNATURES_CHECKED_MAX * 2) {
        match part.trim().split_once('=') {
            Some(("t", t)) if t.bytes().all(|b| b.is_ascii_digit()) => timestamp = t.parse::<u64>().ok(),
            Some(("v1", hex)) if tags.len() < SIGNATURES_CHECKED_MAX => tags.extend(hex_decode(hex)),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(malformed)?;
    if tags.is_empty() {
        return Err(malformed());
    }
    if timestamp.abs_diff(now_s) > TIMESTAMP_TOLERANCE_S {
        return Err(SignatureError::Expired);
    }
    let signed_prefix = format!("{timestamp}.");
    matches_any(secrets, signed_prefix.as_bytes(), body, &tags)
}

/// Whether any tag is the HMAC-SHA256 of `prefix ++ body` under any secret,
/// compared in constant time.
fn matches_any(
    secrets: &[&ProviderSecret],
    prefix: &[u8],
    body: &[u8],
    tags: &[Vec<u8>],
) -> Result<(), SignatureError> {
    for secret in secrets {
        let mut mac = HmacSha256::new_from_slice(secret.key()).expect("HMAC accepts any key length");
        mac.update(prefix);
        mac.update(body);
        if tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok()) {
            return Ok(());
        }
    }
    Err(SignatureError::NoMatch)
}

/// Lowercase or uppercase hex to bytes; `None` for anything else.
fn hex_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.is_empty() || !text.len().is_multiple_of(2) || text.len() > 256 {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16);
    text.as_bytes().chunks(2).map(|pair| Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)).collect()
}

/// The HMAC-SHA256 of `prefix ++ body`, for tests that sign as a provider.
#[cfg(test)]
pub(crate) fn mac_of(key: &[u8], prefix: &[u8], body: &[u8]) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).expect("any key length");
    mac.update(prefix);
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
#[path = "verify_tests.rs"]
mod tests;
