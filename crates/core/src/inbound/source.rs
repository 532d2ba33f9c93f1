//! The replicated record of an inbound source.

use std::fmt;

use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use super::Cidr;
use crate::ids::SourceId;
use crate::payload::{Keyring, OpenError, SecretOwner, StoredSecret};

/// Most sources a cluster holds.
pub const SOURCES_MAX: usize = 1_000;
/// Most CIDRs one source's allowlist holds.
pub const ALLOW_CIDRS_MAX: usize = 64;
/// Bounds on a provider secret's length, in bytes.
pub const PROVIDER_SECRET_BYTES_MIN: usize = 8;
pub const PROVIDER_SECRET_BYTES_MAX: usize = 256;
/// Longest header name or JSON pointer a source may name.
pub const LOCATOR_BYTES_MAX: usize = 256;
/// Secrets a source keeps besides its current one (rotations within the grace).
pub const PREVIOUS_SECRETS_MAX: usize = 8;

/// An inbound source: a provider whose webhooks `POST /in/{id}` accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    pub id: SourceId,
    pub description: Option<String>,
    pub scheme: Scheme,
    /// The provider's current signing secret: sealed under the keyring's
    /// active key when the node that took it had a keyring.
    pub secret: StoredSecret,
    /// Secrets replaced by a rotation, still accepted until their expiry.
    pub previous_secrets: Vec<RetiredProviderSecret>,
    /// Where the provider's event id is.
    pub event_id: Locator,
    /// Where the event's type is; `None`: the scheme's default place.
    pub event_type: Option<Locator>,
    /// JSON pointer to the entity the event is about.
    pub entity_key: Option<String>,
    /// JSON pointer to the entity's version (a number, or a timestamp
    /// that sorts as text).
    pub version: Option<String>,
    /// Requests a second each node accepts for this source.
    pub rate_limit_per_s: Option<u32>,
    /// Where requests may come from; empty: anywhere.
    pub allow_cidrs: Vec<Cidr>,
    /// A disabled source refuses every request (403).
    pub disabled: bool,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

impl Source {
    /// The secrets a request received at `now_ms` may be signed with,
    /// current first, opened with `keyring`.
    pub fn verifying_secrets(&self, keyring: Option<&Keyring>, now_ms: u64) -> Result<Vec<ProviderSecret>, OpenError> {
        let id = self.id.as_str();
        std::iter::once(&self.secret)
            .chain(self.previous_secrets.iter().filter(|old| old.expires_at_ms > now_ms).map(|old| &old.secret))
            .map(|stored| stored.open_as(keyring, SecretOwner::Source(&id), ProviderSecret::from_key))
            .collect()
    }

    /// Where the event type is: the source's own choice, else its scheme's.
    pub fn event_type_locator(&self) -> Option<Locator> {
        self.event_type.clone().or_else(|| self.scheme.default_event_type())
    }

    /// Replaces the secret, keeping the old one until `grace_until_ms`;
    /// expired ones are dropped and at most [`PREVIOUS_SECRETS_MAX`] kept.
    pub fn rotate(&mut self, secret: StoredSecret, grace_until_ms: u64, now_ms: u64) {
        let old = std::mem::replace(&mut self.secret, secret);
        self.previous_secrets.retain(|s| s.expires_at_ms > now_ms);
        if grace_until_ms > now_ms {
            self.previous_secrets.insert(0, RetiredProviderSecret { secret: old, expires_at_ms: grace_until_ms });
        }
        self.previous_secrets.truncate(PREVIOUS_SECRETS_MAX);
        self.updated_at_ms = now_ms;
    }
}

/// How a provider signs its requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scheme {
    /// `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`;
    /// the secret is `whsec_<base64>`.
    StandardWebhooks,
    /// `Stripe-Signature: t=<unix s>,v1=<hex>`, HMAC-SHA256 of `{t}.{body}`.
    Stripe,
    /// `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the body.
    Github,
    /// HMAC-SHA256 of the body in a header of the source's choice.
    HmacSha256 { header: String, encoding: Encoding, prefix: Option<String> },
}

/// How a plain HMAC signature is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Encoding {
    Hex,
    Base64,
}

impl Scheme {
    /// Whether the scheme signs a timestamp, so that an old request is
    /// refused: Standard Webhooks and Stripe do, GitHub and plain HMAC not.
    pub fn signs_time(&self) -> bool {
        matches!(self, Scheme::StandardWebhooks | Scheme::Stripe)
    }

    pub fn name(&self) -> &'static str {
        match self {
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Stripe => "stripe",
            Scheme::Github => "github",
            Scheme::HmacSha256 { .. } => "hmac-sha256",
        }
    }

    /// Where this scheme's providers put their event id; `None`: the
    /// source must say.
    pub fn default_event_id(&self) -> Option<Locator> {
        match self {
            Scheme::StandardWebhooks => Some(Locator::Header("webhook-id".into())),
            Scheme::Stripe => Some(Locator::Pointer("/id".into())),
            Scheme::Github => Some(Locator::Header("x-github-delivery".into())),
            Scheme::HmacSha256 { .. } => None,
        }
    }

    /// Where this scheme's providers put the event type.
    pub fn default_event_type(&self) -> Option<Locator> {
        match self {
            Scheme::StandardWebhooks | Scheme::Stripe => Some(Locator::Pointer("/type".into())),
            Scheme::Github => Some(Locator::Header("x-github-event".into())),
            Scheme::HmacSha256 { .. } => None,
        }
    }
}

/// Where a value is in a provider's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Locator {
    /// A header, by its lowercase name.
    Header(String),
    /// A JSON pointer (RFC 6901) into the body.
    Pointer(String),
}

/// A provider's signing secret: raw key bytes (a `whsec_` secret's are
/// its decoded base64; other schemes use the text as given). Never shown
/// by `Debug`, wiped when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderSecret {
    key: Vec<u8>,
}

impl Drop for ProviderSecret {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

/// Why a provider secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderSecretError {
    #[error("a secret must be {PROVIDER_SECRET_BYTES_MIN} to {PROVIDER_SECRET_BYTES_MAX} bytes, this one has {0}")]
    BadLength(usize),
    #[error("a standard-webhooks secret must be `whsec_` and base64 of 24 to 64 bytes")]
    NotWhsec,
}

impl ProviderSecret {
    /// Reads the secret as `scheme`'s providers show it.
    pub fn parse(scheme: &Scheme, text: &str) -> Result<Self, ProviderSecretError> {
        let key = match scheme {
            Scheme::StandardWebhooks => crate::signing::Secret::parse(text)
                .map(|secret| secret.key_bytes().to_vec())
                .map_err(|_| ProviderSecretError::NotWhsec)?,
            _ => text.as_bytes().to_vec(),
        };
        Self::from_key(&key)
    }

    /// Wraps raw key bytes (as stored), checking their length.
    pub fn from_key(key: &[u8]) -> Result<Self, ProviderSecretError> {
        if !(PROVIDER_SECRET_BYTES_MIN..=PROVIDER_SECRET_BYTES_MAX).contains(&key.len()) {
            return Err(ProviderSecretError::BadLength(key.len()));
        }
        Ok(Self { key: key.to_vec() })
    }

    /// The raw key (what is stored, sealed or not).
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

impl fmt::Debug for ProviderSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProviderSecret(<redacted>)")
    }
}

/// A secret that stopped being current at a rotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredProviderSecret {
    pub secret: StoredSecret,
    pub expires_at_ms: u64,
}
