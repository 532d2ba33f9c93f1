//! Event payloads as they are stored: either the producer's JSON in clear,
//! or sealed with XChaCha20-Poly1305 under a key of the node's keyring.
//!
//! A [`Payload`] is one shared byte string. The log, snapshots and the
//! state hold it as it is; only the node that sends a delivery (or answers
//! `GET /v1/events/{id}`) opens it, with [`Keyring::open`].
//!
//! The stored bytes are one of two layouts, told apart by the first byte:
//!
//! - **clear**: the JSON text exactly as the producer sent it. A JSON text
//!   never starts with a NUL byte, and is never empty.
//! - **sealed**: `0x00`, the layout version ([`SEALED_V1`]), the key id's
//!   length and the key id, the 24-byte nonce, then the ciphertext and its
//!   16-byte tag. The associated data binds the ciphertext to its key id,
//!   its event's id and its event's type, so a payload moved to another
//!   event, or relabelled, fails authentication.
//!
//! Both encode as one bincode byte string.
//!
//! Nonces are 192 random bits drawn from the node's [`Entropy`] for every
//! payload: at that length random nonces need no counter and no
//! coordination between nodes that share a key (XChaCha20's reason to be;
//! AES-GCM's 96-bit random nonces would allow about 2³² payloads per key).

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chacha20poly1305::aead::AeadInOut;
use chacha20poly1305::{KeyInit, Tag, XChaCha20Poly1305, XNonce};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zeroize::Zeroize;

use crate::entropy::Entropy;

/// Marks a sealed payload: no JSON text starts with it.
const SEALED_MARK: u8 = 0x00;
/// The one sealed layout so far: XChaCha20-Poly1305, 24-byte nonce, 16-byte tag.
pub const SEALED_V1: u8 = 1;
const NONCE_BYTES: usize = 24;
const TAG_BYTES: usize = 16;
/// The length of a key, in bytes (256 bits).
pub const KEY_BYTES: usize = 32;
/// The longest key id.
pub const KEY_ID_BYTES_MAX: usize = 64;
/// The most keys a keyring holds.
pub const KEYS_MAX: usize = 64;

/// An event's payload as stored: clear JSON or sealed. Cloning shares it.
#[derive(Clone, PartialEq, Eq)]
pub struct Payload(Arc<[u8]>);

/// What a [`Payload`]'s bytes hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored<'a> {
    Clear(&'a str),
    Sealed(Sealed<'a>),
}

/// The parts of a sealed payload.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sealed<'a> {
    pub key_id: &'a str,
    nonce: &'a [u8],
    /// Ciphertext and tag.
    body: &'a [u8],
}

impl fmt::Debug for Sealed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sealed {{ key_id: {:?}, {} bytes }}", self.key_id, self.body.len())
    }
}

impl Payload {
    /// A payload kept in clear (a node without a keyring). `json` is
    /// validated JSON: not empty, not starting with a NUL byte.
    pub fn clear(json: &str) -> Self {
        debug_assert!(json.as_bytes().first().is_some_and(|b| *b != SEALED_MARK));
        Self(Arc::from(json.as_bytes()))
    }

    /// Checks stored bytes, from a log or a snapshot.
    pub fn from_stored(bytes: Arc<[u8]>) -> Result<Self, String> {
        parse(&bytes)?;
        Ok(Self(bytes))
    }

    /// The bytes as stored.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The stored bytes, shared.
    pub fn shared(&self) -> Arc<[u8]> {
        self.0.clone()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn stored(&self) -> Stored<'_> {
        // Checked when made or decoded.
        parse(&self.0).unwrap_or(Stored::Clear(""))
    }

    /// The id of the key it is sealed under; `None` in clear.
    pub fn key_id(&self) -> Option<&str> {
        match self.stored() {
            Stored::Sealed(sealed) => Some(sealed.key_id),
            Stored::Clear(_) => None,
        }
    }

    pub fn is_sealed(&self) -> bool {
        self.0.first() == Some(&SEALED_MARK)
    }
}

/// Clear JSON text (tests and fixtures; the API validates before it makes one).
impl From<&str> for Payload {
    fn from(json: &str) -> Self {
        Self::clear(json)
    }
}

impl From<String> for Payload {
    fn from(json: String) -> Self {
        Self::clear(&json)
    }
}

/// A payload never prints its content: a sealed one shows its key id and
/// size, a clear one its size.
impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.stored() {
            Stored::Sealed(sealed) => sealed.fmt(f),
            Stored::Clear(text) => write!(f, "Clear {{ {} bytes }}", text.len()),
        }
    }
}

fn parse(bytes: &[u8]) -> Result<Stored<'_>, String> {
    match bytes.split_first() {
        None => Err("an empty payload".into()),
        Some((&SEALED_MARK, rest)) => parse_sealed(rest).map(Stored::Sealed),
        Some(_) => {
            std::str::from_utf8(bytes).map(Stored::Clear).map_err(|_| "a clear payload that is not UTF-8".into())
        }
    }
}

fn parse_sealed(rest: &[u8]) -> Result<Sealed<'_>, String> {
    let [version, id_len, rest @ ..] = rest else { return Err("a truncated sealed payload".into()) };
    if *version != SEALED_V1 {
        return Err(format!("a sealed payload of unknown layout {version}"));
    }
    let id_len = usize::from(*id_len);
    if rest.len() < id_len + NONCE_BYTES + TAG_BYTES {
        return Err("a truncated sealed payload".into());
    }
    let (id, rest) = rest.split_at(id_len);
    let key_id = std::str::from_utf8(id).ok().filter(|id| valid_key_id(id).is_ok());
    let key_id = key_id.ok_or("a sealed payload with an invalid key id")?;
    let (nonce, body) = rest.split_at(NONCE_BYTES);
    Ok(Sealed { key_id, nonce, body })
}

/// Whether `id` may name a key: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn valid_key_id(id: &str) -> Result<(), String> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if id.is_empty() || id.len() > KEY_ID_BYTES_MAX || !id.bytes().all(allowed) {
        return Err(format!("key id {id:?} must be 1 to {KEY_ID_BYTES_MAX} of A-Z a-z 0-9 . _ -"));
    }
    if id == "active" || id == "clear" {
        return Err(format!("{id:?} is reserved (the active key's line; payloads in clear); it cannot be a key id"));
    }
    Ok(())
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_byte_buf(PayloadVisitor)
    }
}

struct PayloadVisitor;

impl Visitor<'_> for PayloadVisitor {
    type Value = Payload;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a stored payload")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Payload, E> {
        Payload::from_stored(Arc::from(bytes)).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Payload, E> {
        self.visit_bytes(text.as_bytes())
    }
}

/// The domain of a sealed payload's associated data.
const PAYLOAD_DOMAIN: &[u8] = b"hookraft-payload";

/// The associated data of a sealed value: its domain (payload or secret),
/// the layout, then the key id and the two names that bind it to its
/// place (an event's id and type, a secret's owner kind and id), each
/// length-prefixed.
fn associated_data(domain: &[u8], key_id: &str, first: &str, second: &str) -> Vec<u8> {
    let mut ad = Vec::with_capacity(domain.len() + 13 + key_id.len() + first.len() + second.len());
    ad.extend_from_slice(domain);
    ad.push(SEALED_V1);
    for part in [key_id, first, second] {
        ad.extend_from_slice(&(part.len() as u32).to_be_bytes());
        ad.extend_from_slice(part.as_bytes());
    }
    ad
}

/// Why a payload could not be opened. Each says what an operator must do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("key {0} is not in this node's keyring")]
    MissingKey(String),
    #[error("payload failed authentication under key {0}: it was altered or belongs to another event")]
    Tampered(String),
}

impl OpenError {
    /// The key the payload names.
    pub fn key_id(&self) -> &str {
        match self {
            OpenError::MissingKey(id) | OpenError::Tampered(id) => id,
        }
    }
}

/// 32 bytes of key material. Zeroed when dropped; never printed.
#[derive(Clone)]
pub struct KeyMaterial([u8; KEY_BYTES]);

impl KeyMaterial {
    /// A new key from `entropy`.
    pub fn generate(entropy: &dyn Entropy) -> Self {
        let mut key = [0u8; KEY_BYTES];
        entropy.fill(&mut key);
        Self(key)
    }

    /// A key from its bytes (drawn by the caller from a source of its own).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        Self(bytes)
    }

    /// A key written as base64 (standard alphabet, padded).
    pub fn from_base64(text: &str) -> Result<Self, String> {
        let bytes = BASE64.decode(text.trim()).map_err(|_| "is not base64".to_string())?;
        let key: [u8; KEY_BYTES] =
            bytes.as_slice().try_into().map_err(|_| format!("is {} bytes; a key is {KEY_BYTES}", bytes.len()))?;
        Ok(Self(key))
    }

    pub fn to_base64(&self) -> String {
        BASE64.encode(self.0)
    }
}

impl Drop for KeyMaterial {
    fn drop(&mut self) {
        // The ciphers made from it zero their own copy (the `zeroize`
        // feature of chacha20poly1305).
        self.0.zeroize();
    }
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A keyring as written in a file: which key is active, and every key by id.
///
/// The text form is one `name = value` per line (or separated by `;`, for
/// an environment variable); `#` starts a comment:
///
/// ```text
/// active = k2
/// k1 = <32 bytes, base64>
/// k2 = <32 bytes, base64>
/// ```
#[derive(Debug, Clone)]
pub struct KeyringFile {
    pub active: String,
    /// In the order written.
    pub keys: Vec<(String, KeyMaterial)>,
}

impl KeyringFile {
    /// Reads the text form; errors name the line and never echo a key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut active = None;
        let mut keys: Vec<(String, KeyMaterial)> = Vec::new();
        for (n, line) in text.split(['\n', ';']).enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = || format!("keyring entry {}", n + 1);
            let (name, value) = line.split_once('=').ok_or_else(|| format!("{}: expected `name = value`", at()))?;
            let (name, value) = (name.trim(), value.trim());
            if name == "active" {
                if active.replace(value.to_string()).is_some() {
                    return Err(format!("{}: `active` is given twice", at()));
                }
                continue;
            }
            // The name is not echoed: a line that lost its `=` shows key text there.
            valid_key_id(name).map_err(|_| {
                format!(
                    "{}: a key id must be 1 to {KEY_ID_BYTES_MAX} of A-Z a-z 0-9 . _ - (not `active` or `clear`)",
                    at()
                )
            })?;
            if keys.iter().any(|(id, _)| id == name) {
                return Err(format!("{}: key {name} is given twice", at()));
            }
            let key = KeyMaterial::from_base64(value).map_err(|e| format!("{}: key {name} {e}", at()))?;
            keys.push((name.to_string(), key));
        }
        let active = active.ok_or("the keyring names no active key (`active = <key id>`)")?;
        let file = Self { active, keys };
        file.check()?;
        Ok(file)
    }

    fn check(&self) -> Result<(), String> {
        if self.keys.is_empty() {
            return Err("the keyring holds no key".into());
        }
        if self.keys.len() > KEYS_MAX {
            return Err(format!("the keyring holds {} keys; at most {KEYS_MAX}", self.keys.len()));
        }
        if !self.keys.iter().any(|(id, _)| *id == self.active) {
            return Err(format!("the active key {} is not in the keyring", self.active));
        }
        Ok(())
    }

    /// The text form, keys included: for the keyring file only.
    pub fn render(&self) -> String {
        let mut text = String::from(
            "# hookraft keyring: payload encryption keys. Keep it secret (mode 0600) and\n\
             # give every node of a cluster the same one. `hookraft keys --help`.\n",
        );
        text.push_str(&format!("active = {}\n", self.active));
        for (id, key) in &self.keys {
            text.push_str(&format!("{id} = {}\n", key.to_base64()));
        }
        text
    }

    /// Adds a key made from `entropy` under `id` (or the next free `k<n>`),
    /// and makes it active if asked (or if it is the first). Returns its id.
    pub fn add_generated(&mut self, id: Option<&str>, activate: bool, entropy: &dyn Entropy) -> Result<String, String> {
        let id = match id {
            Some(id) => {
                valid_key_id(id)?;
                if self.keys.iter().any(|(k, _)| k == id) {
                    return Err(format!("the keyring already holds key {id}"));
                }
                id.to_string()
            }
            None => {
                (1..).map(|n| format!("k{n}")).find(|id| !self.keys.iter().any(|(k, _)| k == id)).unwrap_or_default()
            }
        };
        self.keys.push((id.clone(), KeyMaterial::generate(entropy)));
        if activate || self.active.is_empty() {
            self.active = id.clone();
        }
        self.check()?;
        Ok(id)
    }

    /// A new keyring of one generated key, active.
    pub fn generate(id: Option<&str>, entropy: &dyn Entropy) -> Result<Self, String> {
        let mut file = Self { active: String::new(), keys: Vec::new() };
        file.add_generated(id, true, entropy)?;
        Ok(file)
    }
}

/// The keys a node encrypts and decrypts payloads with. Holds ciphers, not
/// key text; `Debug` lists the ids only.
pub struct Keyring {
    active: usize,
    keys: Vec<(Box<str>, XChaCha20Poly1305)>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("active", &self.active_id())
            .field("ids", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

impl Keyring {
    pub fn new(file: &KeyringFile) -> Result<Self, String> {
        file.check()?;
        let keys: Vec<_> =
            file.keys.iter().map(|(id, key)| (Box::from(id.as_str()), XChaCha20Poly1305::new(&key.0.into()))).collect();
        let active = keys.iter().position(|(id, _)| **id == *file.active).ok_or("no active key")?;
        Ok(Self { active, keys })
    }

    /// Parses and loads the text form ([`KeyringFile::parse`]).
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::new(&KeyringFile::parse(text)?)
    }

    /// The key new payloads are sealed under.
    pub fn active_id(&self) -> &str {
        &self.keys[self.active].0
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(id, _)| &**id)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.cipher(id).is_some()
    }

    fn cipher(&self, id: &str) -> Option<&XChaCha20Poly1305> {
        self.keys.iter().find(|(k, _)| **k == *id).map(|(_, cipher)| cipher)
    }

    /// Seals `plaintext` for the event `event_id` of type `event_type`
    /// under the active key, with a fresh nonce from `entropy`.
    pub fn seal(&self, event_id: &str, event_type: &str, plaintext: &[u8], entropy: &dyn Entropy) -> Payload {
        let (key_id, cipher) = &self.keys[self.active];
        let mut nonce = [0u8; NONCE_BYTES];
        entropy.fill(&mut nonce);
        let head = [SEALED_MARK, SEALED_V1, key_id.len() as u8];
        let header = head.len() + key_id.len() + NONCE_BYTES;
        // Laid out in the one allocation it is stored in (an exact-size
        // iterator collects straight into it), then encrypted in place.
        let parts = [&head[..], key_id.as_bytes(), &nonce, plaintext, &[0; TAG_BYTES]];
        let mut bytes: Arc<[u8]> = parts.iter().flat_map(|part| part.iter().copied()).collect();
        let buffer = Arc::get_mut(&mut bytes).expect("just made, so not shared");
        let (body, tag_slot) = buffer[header..].split_at_mut(plaintext.len());
        let ad = associated_data(PAYLOAD_DOMAIN, key_id, event_id, event_type);
        let tag = cipher
            .encrypt_inout_detached(&XNonce::from(nonce), &ad, body.into())
            .expect("a payload is far below XChaCha20's length limit");
        tag_slot.copy_from_slice(&tag);
        Payload(bytes)
    }

    /// The plaintext of `payload` for the event `event_id` of type
    /// `event_type`: a clear payload as it is, a sealed one opened with its
    /// key. Fails when the key is not in the ring or authentication fails.
    pub fn open(&self, event_id: &str, event_type: &str, payload: &Payload) -> Result<Arc<[u8]>, OpenError> {
        open(Some(self), event_id, event_type, payload)
    }
}

/// Opens `payload` with `keyring` (a node without one can open only clear
/// payloads): the shared bytes of a clear payload, or a sealed one's plaintext.
pub fn open(
    keyring: Option<&Keyring>,
    event_id: &str,
    event_type: &str,
    payload: &Payload,
) -> Result<Arc<[u8]>, OpenError> {
    let sealed = match payload.stored() {
        Stored::Clear(_) => return Ok(payload.shared()),
        Stored::Sealed(sealed) => sealed,
    };
    let key_id = sealed.key_id;
    let cipher = keyring.and_then(|ring| ring.cipher(key_id)).ok_or_else(|| OpenError::MissingKey(key_id.into()))?;
    let (ciphertext, tag) = sealed.body.split_at(sealed.body.len() - TAG_BYTES);
    let nonce = XNonce::try_from(sealed.nonce).map_err(|_| OpenError::Tampered(key_id.into()))?;
    let tag = Tag::try_from(tag).map_err(|_| OpenError::Tampered(key_id.into()))?;
    let ad = associated_data(PAYLOAD_DOMAIN, key_id, event_id, event_type);
    // Decrypted in place, in the allocation the request body shares.
    let mut plain: Arc<[u8]> = Arc::from(ciphertext);
    let buffer = Arc::get_mut(&mut plain).expect("just made, so not shared");
    cipher.decrypt_inout_detached(&nonce, &ad, buffer.into(), &tag).map_err(|_| OpenError::Tampered(key_id.into()))?;
    Ok(plain)
}

mod secret;
pub use secret::{OpenedKey, SecretOwner, StoredSecret};

#[cfg(test)]
mod tests;
