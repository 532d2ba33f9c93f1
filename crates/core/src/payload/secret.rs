//! Signing secrets as the log, snapshots and state hold them: an
//! endpoint's signing secrets and a source's provider secrets, in clear on
//! a node without a keyring, else sealed like payloads.
//!
//! A sealed secret is XChaCha20-Poly1305 under a keyring key, with a fresh
//! 192-bit nonce. Its associated data binds it to its key id and its owner
//! (kind and id), under a domain of its own, so a sealed secret moved to
//! another endpoint or source, or passed off as a payload, fails
//! authentication. The secrets are opened where they are used: by the
//! endpoint actor when its settings load, by the inbound route when a
//! request is verified, and by the API when it shows a secret.

use std::fmt;

use chacha20poly1305::XNonce;
use chacha20poly1305::aead::AeadInOut;
use serde::{Deserialize, Serialize};
use zeroize::Zeroize;

use super::{Keyring, NONCE_BYTES, OpenError, TAG_BYTES, associated_data, valid_key_id};
use crate::entropy::Entropy;

/// The domain of a sealed secret's associated data.
const SECRET_DOMAIN: &[u8] = b"hookraft-secret";

/// Whose secret it is: part of a sealed secret's associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretOwner<'a> {
    /// An endpoint's signing secret, by the endpoint's id.
    Endpoint(&'a str),
    /// An inbound source's provider secret, by the source's id.
    Source(&'a str),
}

impl SecretOwner<'_> {
    fn parts(&self) -> (&'static str, &str) {
        match self {
            SecretOwner::Endpoint(id) => ("endpoint", id),
            SecretOwner::Source(id) => ("source", id),
        }
    }
}

/// A secret's key bytes, opened. Wiped when dropped; never printed.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenedKey(Vec<u8>);

impl OpenedKey {
    pub fn new(key: &[u8]) -> Self {
        Self(key.to_vec())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for OpenedKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for OpenedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A secret as stored: its key bytes in clear, or sealed under a keyring key.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoredSecret {
    /// A node without a keyring stores its secrets in clear.
    Clear(OpenedKey),
    /// XChaCha20-Poly1305 under the key `key_id`; `body` is the ciphertext
    /// and its 16-byte tag.
    Sealed { key_id: String, nonce: [u8; NONCE_BYTES], body: Vec<u8> },
}

impl fmt::Debug for StoredSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredSecret::Clear(_) => f.write_str("Clear(<redacted>)"),
            StoredSecret::Sealed { key_id, .. } => write!(f, "Sealed {{ key_id: {key_id:?} }}"),
        }
    }
}

impl StoredSecret {
    /// `key` stored in clear (a node without a keyring, and tests).
    pub fn clear(key: &[u8]) -> Self {
        StoredSecret::Clear(OpenedKey::new(key))
    }

    /// `key` for `owner`: sealed under `keyring`'s active key, or in clear
    /// without a keyring.
    pub fn store(keyring: Option<&Keyring>, owner: SecretOwner<'_>, key: &[u8], entropy: &dyn Entropy) -> Self {
        match keyring {
            Some(ring) => ring.seal_secret(owner, key, entropy),
            None => Self::clear(key),
        }
    }

    /// The id of the key it is sealed under; `None` in clear.
    pub fn key_id(&self) -> Option<&str> {
        match self {
            StoredSecret::Clear(_) => None,
            StoredSecret::Sealed { key_id, .. } => Some(key_id),
        }
    }

    /// The key bytes of `owner`'s secret: a clear one as stored, a sealed
    /// one opened with `keyring`. Fails when the key is not in the ring or
    /// authentication fails (altered, or another owner's secret).
    pub fn open(&self, keyring: Option<&Keyring>, owner: SecretOwner<'_>) -> Result<OpenedKey, OpenError> {
        let (key_id, nonce, body) = match self {
            StoredSecret::Clear(key) => return Ok(key.clone()),
            StoredSecret::Sealed { key_id, nonce, body } => (key_id, nonce, body),
        };
        let tampered = || OpenError::Tampered(key_id.clone());
        if valid_key_id(key_id).is_err() || body.len() < TAG_BYTES {
            return Err(tampered());
        }
        let cipher =
            keyring.and_then(|ring| ring.cipher(key_id)).ok_or_else(|| OpenError::MissingKey(key_id.clone()))?;
        let (ciphertext, tag) = body.split_at(body.len() - TAG_BYTES);
        let tag = chacha20poly1305::Tag::try_from(tag).map_err(|_| tampered())?;
        let (kind, id) = owner.parts();
        let ad = associated_data(SECRET_DOMAIN, key_id, kind, id);
        let mut plain = OpenedKey::new(ciphertext);
        cipher
            .decrypt_inout_detached(&XNonce::from(*nonce), &ad, plain.0.as_mut_slice().into(), &tag)
            .map_err(|_| tampered())?;
        Ok(plain)
    }

    /// `owner`'s secret opened and made into what its key bytes are, by
    /// `make`: bytes that `make` refuses count as tampered with.
    pub fn open_as<T, E>(
        &self,
        keyring: Option<&Keyring>,
        owner: SecretOwner<'_>,
        make: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> Result<T, OpenError> {
        let key = self.open(keyring, owner)?;
        make(key.as_bytes()).map_err(|_| OpenError::Tampered(self.key_id().unwrap_or("clear").to_string()))
    }
}

/// A signing secret kept in clear (a node without a keyring, and tests).
impl From<&crate::signing::Secret> for StoredSecret {
    fn from(secret: &crate::signing::Secret) -> Self {
        Self::clear(secret.key_bytes())
    }
}

impl Keyring {
    /// Seals `key`, `owner`'s secret, under the active key with a fresh
    /// nonce from `entropy`.
    pub fn seal_secret(&self, owner: SecretOwner<'_>, key: &[u8], entropy: &dyn Entropy) -> StoredSecret {
        let (key_id, cipher) = &self.keys[self.active];
        let mut nonce = [0u8; NONCE_BYTES];
        entropy.fill(&mut nonce);
        let (kind, id) = owner.parts();
        let ad = associated_data(SECRET_DOMAIN, key_id, kind, id);
        let mut body = Vec::with_capacity(key.len() + TAG_BYTES);
        body.extend_from_slice(key);
        let tag = cipher
            .encrypt_inout_detached(&XNonce::from(nonce), &ad, body.as_mut_slice().into())
            .expect("a secret is far below XChaCha20's length limit");
        body.extend_from_slice(&tag);
        StoredSecret::Sealed { key_id: key_id.to_string(), nonce, body }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::tests::entropy_seeded;
    use crate::payload::{KeyringFile, Payload};

    fn ring(entropy: &dyn Entropy, ids: &[&str]) -> Keyring {
        let mut file = KeyringFile::generate(Some(ids[0]), entropy).unwrap();
        for id in &ids[1..] {
            file.add_generated(Some(id), true, entropy).unwrap();
        }
        Keyring::new(&file).unwrap()
    }

    const KEY: &[u8] = b"provider secret bytes, 32 long!!";

    fn encode(stored: &StoredSecret) -> Result<Vec<u8>, bincode::error::EncodeError> {
        bincode::serde::encode_to_vec(stored, bincode::config::standard())
    }

    #[test]
    fn a_sealed_secret_opens_for_its_owner_only() {
        let entropy = entropy_seeded(1);
        let ring = ring(&entropy, &["k1"]);
        let sealed = ring.seal_secret(SecretOwner::Endpoint("ep_1"), KEY, &entropy);
        assert_eq!(sealed.key_id(), Some("k1"));
        assert_eq!(sealed.open(Some(&ring), SecretOwner::Endpoint("ep_1")).unwrap().as_bytes(), KEY);
        for other in [SecretOwner::Endpoint("ep_2"), SecretOwner::Source("ep_1")] {
            assert_eq!(sealed.open(Some(&ring), other), Err(OpenError::Tampered("k1".into())));
        }
        assert_eq!(sealed.open(None, SecretOwner::Endpoint("ep_1")), Err(OpenError::MissingKey("k1".into())));
    }

    #[test]
    fn the_stored_bytes_do_not_hold_the_key_and_two_seals_differ() {
        let entropy = entropy_seeded(2);
        let ring = ring(&entropy, &["k1"]);
        let owner = SecretOwner::Source("src_1");
        let a = encode(&ring.seal_secret(owner, KEY, &entropy)).unwrap();
        let b = encode(&ring.seal_secret(owner, KEY, &entropy)).unwrap();
        assert_ne!(a, b, "a fresh nonce each time");
        assert!(!a.windows(8).any(|w| KEY.windows(8).any(|k| k == w)), "no 8 bytes of the key in the stored form");
        let clear = encode(&StoredSecret::clear(KEY)).unwrap();
        assert!(clear.windows(KEY.len()).any(|w| w == KEY), "the clear form is the key itself");
    }

    #[test]
    fn an_altered_secret_or_a_payload_key_never_opens() {
        let entropy = entropy_seeded(3);
        let ring = ring(&entropy, &["k1", "k2"]);
        let owner = SecretOwner::Endpoint("ep_1");
        let StoredSecret::Sealed { key_id, nonce, body } = ring.seal_secret(owner, KEY, &entropy) else {
            panic!("a keyring seals")
        };
        assert_eq!(key_id, "k2", "the active key");
        for i in [0, body.len() / 2, body.len() - 1] {
            let mut altered = body.clone();
            altered[i] ^= 1;
            let stored = StoredSecret::Sealed { key_id: key_id.clone(), nonce, body: altered };
            assert_eq!(stored.open(Some(&ring), owner), Err(OpenError::Tampered("k2".into())));
        }
        let relabelled = StoredSecret::Sealed { key_id: "k1".into(), nonce, body: body.clone() };
        assert_eq!(relabelled.open(Some(&ring), owner), Err(OpenError::Tampered("k1".into())));
        let short = StoredSecret::Sealed { key_id: key_id.clone(), nonce, body: body[..TAG_BYTES - 1].to_vec() };
        assert_eq!(short.open(Some(&ring), owner), Err(OpenError::Tampered("k2".into())));
        let bad_id = StoredSecret::Sealed { key_id: "no spaces".into(), nonce, body: body.clone() };
        assert_eq!(bad_id.open(Some(&ring), owner), Err(OpenError::Tampered("no spaces".into())));
        // The same key, sealed as a payload of an event whose id and type
        // are the owner's kind and id, does not open as the secret.
        let payload = ring.seal("endpoint", "ep_1", KEY, &entropy);
        assert!(Payload::from_stored(payload.shared()).is_ok());
        let crate::payload::Stored::Sealed(parts) = payload.stored() else { panic!("sealed") };
        let nonce: [u8; NONCE_BYTES] = parts.nonce.try_into().unwrap();
        let stored = StoredSecret::Sealed { key_id: "k2".into(), nonce, body: parts.body.to_vec() };
        assert_eq!(stored.open(Some(&ring), owner), Err(OpenError::Tampered("k2".into())));
    }

    #[test]
    fn store_seals_with_a_keyring_and_keeps_clear_without() {
        let entropy = entropy_seeded(4);
        let ring = ring(&entropy, &["k1"]);
        let owner = SecretOwner::Source("src_1");
        let sealed = StoredSecret::store(Some(&ring), owner, KEY, &entropy);
        assert_eq!(sealed.key_id(), Some("k1"));
        let clear = StoredSecret::store(None, owner, KEY, &entropy);
        assert_eq!(clear.key_id(), None);
        assert_eq!(clear.open(None, owner).unwrap().as_bytes(), KEY);
        assert_eq!(clear.open(Some(&ring), SecretOwner::Endpoint("any")).unwrap().as_bytes(), KEY);
        assert_eq!(format!("{sealed:?} {clear:?}"), "Sealed { key_id: \"k1\" } Clear(<redacted>)");
    }
}
