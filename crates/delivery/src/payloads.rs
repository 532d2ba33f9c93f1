//! The node's keys at rest: sealing the payloads and secrets it accepts,
//! opening what it sends, verifies or shows, and counting what it could
//! not open.
//!
//! One [`PayloadKeys`] per node, shared by the API (which seals payloads
//! on ingest and secrets when an endpoint or source is made or rotated,
//! and opens for `GET /v1/events/{id}`, an endpoint's secret and inbound
//! verification) and the endpoint actors (which open a payload just before
//! they sign and send, and their endpoint's secrets when its settings
//! load). Without a keyring payloads and secrets are stored in clear;
//! clear ones (from before a keyring was set) always open.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hookraft_core::entropy::Entropy;
use hookraft_core::ids::EventId;
use hookraft_core::model::Event;
use hookraft_core::payload::{self, Keyring, OpenError, Payload, SecretOwner, StoredSecret};

/// Distinct missing key ids remembered for `/readyz` and `/metrics`: a
/// payload's key id comes from the log, so the set is bounded.
pub const MISSING_KEYS_TRACKED_MAX: usize = 64;

pub struct PayloadKeys {
    keyring: Option<Arc<Keyring>>,
    entropy: Arc<dyn Entropy>,
    /// Key ids payloads named that the keyring lacks, and how many times.
    missing: Mutex<BTreeMap<String, u64>>,
    pub sealed_total: AtomicU64,
    pub opened_total: AtomicU64,
    pub missing_key_total: AtomicU64,
    pub tampered_total: AtomicU64,
}

impl std::fmt::Debug for PayloadKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PayloadKeys").field("keyring", &self.keyring).finish_non_exhaustive()
    }
}

impl PayloadKeys {
    pub fn new(keyring: Option<Arc<Keyring>>, entropy: Arc<dyn Entropy>) -> Self {
        Self {
            keyring,
            entropy,
            missing: Mutex::default(),
            sealed_total: AtomicU64::new(0),
            opened_total: AtomicU64::new(0),
            missing_key_total: AtomicU64::new(0),
            tampered_total: AtomicU64::new(0),
        }
    }

    /// No keyring: payloads are stored in clear.
    pub fn clear(entropy: Arc<dyn Entropy>) -> Self {
        Self::new(None, entropy)
    }

    pub fn keyring(&self) -> Option<&Keyring> {
        self.keyring.as_deref()
    }

    /// The key new payloads are sealed under; `None` in plaintext mode.
    pub fn active_key_id(&self) -> Option<&str> {
        self.keyring.as_deref().map(Keyring::active_id)
    }

    /// `json` as it will be stored for the event `id` of type `event_type`:
    /// sealed under the active key, or in clear without a keyring.
    pub fn seal(&self, id: &EventId, event_type: &str, json: &str) -> Payload {
        match &self.keyring {
            Some(ring) => {
                self.sealed_total.fetch_add(1, Ordering::Relaxed);
                ring.seal(&id.as_str(), event_type, json.as_bytes(), self.entropy.as_ref())
            }
            None => Payload::clear(json),
        }
    }

    /// The plaintext of `event`'s payload; a failure is counted and, for a
    /// missing key, remembered.
    pub fn open(&self, event: &Event) -> Result<Arc<[u8]>, OpenError> {
        self.open_payload(&event.id, &event.event_type, &event.payload)
    }

    pub fn open_payload(&self, id: &EventId, event_type: &str, stored: &Payload) -> Result<Arc<[u8]>, OpenError> {
        self.counted(payload::open(self.keyring.as_deref(), &id.as_str(), event_type, stored), stored.is_sealed())
    }

    /// `key`, `owner`'s secret, as it will be stored: sealed under the
    /// active key, or in clear without a keyring.
    pub fn store_secret(&self, owner: SecretOwner<'_>, key: &[u8]) -> StoredSecret {
        StoredSecret::store(self.keyring.as_deref(), owner, key, self.entropy.as_ref())
    }

    /// Counts the outcome of an open and remembers a missing key: every
    /// open of a payload or a secret goes through here. Only sealed
    /// payloads count as opened (`sealed_payload`); failures count for both.
    pub fn counted<T>(&self, opened: Result<T, OpenError>, sealed_payload: bool) -> Result<T, OpenError> {
        match &opened {
            Ok(_) if sealed_payload => drop(self.opened_total.fetch_add(1, Ordering::Relaxed)),
            Ok(_) => {}
            Err(OpenError::MissingKey(key_id)) => {
                self.missing_key_total.fetch_add(1, Ordering::Relaxed);
                let mut missing = self.missing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if let Some(count) = missing.get_mut(key_id) {
                    *count += 1;
                } else {
                    // Once per key, not once per delivery and retry.
                    tracing::error!(
                        key_id = %key_id,
                        "a payload or secret is sealed under a key this node's keyring lacks: deliveries and \
                         inbound requests that need it wait until the key is added and the node restarted \
                         (see /readyz)"
                    );
                    if missing.len() < MISSING_KEYS_TRACKED_MAX {
                        missing.insert(key_id.clone(), 1);
                    }
                }
            }
            Err(OpenError::Tampered(_)) => drop(self.tampered_total.fetch_add(1, Ordering::Relaxed)),
        }
        opened
    }

    /// Key ids that payloads this node had to open named and its keyring
    /// lacks, with how many opens failed for each.
    pub fn missing_keys(&self) -> Vec<(String, u64)> {
        let missing = self.missing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        missing.iter().map(|(id, n)| (id.clone(), *n)).collect()
    }
}
