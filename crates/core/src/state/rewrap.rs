//! Payloads and secrets sealed again under another key
//! (`Command::RewrapPayloads`, `Command::RewrapSecrets`).

use super::ClusterState;
use super::usage::event_bytes;
use crate::command::{REWRAP_BATCH_MAX, Response, RewrappedPayload, RewrappedSecret, SecretSlot};
use crate::model::Rewrapped;
use crate::payload::StoredSecret;

impl ClusterState {
    pub(super) fn rewrap(&mut self, payloads: &[RewrappedPayload], now_ms: u64) -> Response {
        let (mut rewrapped, mut skipped) = (0, 0);
        for (n, item) in payloads.iter().enumerate() {
            if n < REWRAP_BATCH_MAX && self.rewrap_one(item, now_ms) {
                rewrapped += 1;
            } else {
                skipped += 1;
            }
        }
        Response::Rewrapped { rewrapped, skipped }
    }

    /// Replaces one event's payload if it is still stored as the proposer
    /// read it; never with a clear one (that would undo an encryption).
    fn rewrap_one(&mut self, item: &RewrappedPayload, now_ms: u64) -> bool {
        if !item.payload.is_sealed() {
            return false;
        }
        if !self.events.contains_key(&item.event_id) {
            // A finished event is sealed again in memory and settled after.
            self.bring_back(&item.event_id);
        }
        let Some(event) = self.events.get_mut(&item.event_id) else { return false };
        let current = event.payload.key_id();
        if current != item.from_key_id.as_deref() {
            return false;
        }
        let before = event_bytes(event);
        let first_key_id = match event.rewrapped.take() {
            Some(earlier) => earlier.first_key_id,
            None => current.map(Box::from),
        };
        event.payload = item.payload.clone();
        event.rewrapped = Some(Box::new(Rewrapped { at_ms: now_ms, first_key_id }));
        let after = event_bytes(event);
        self.count_bytes(before, false);
        self.count_bytes(after, true);
        true
    }

    pub(super) fn rewrap_secrets(&mut self, secrets: &[RewrappedSecret]) -> Response {
        let (mut rewrapped, mut skipped) = (0, 0);
        for (n, item) in secrets.iter().enumerate() {
            let sealed = item.secret.key_id().is_some();
            match self.secret_slot(&item.slot) {
                Some(stored) if n < REWRAP_BATCH_MAX && sealed && *stored == item.from => {
                    *stored = item.secret.clone();
                    rewrapped += 1;
                }
                _ => skipped += 1,
            }
        }
        Response::Rewrapped { rewrapped, skipped }
    }

    /// Every stored secret, endpoints' then sources', each with its slot:
    /// what a secret rewrap reads.
    pub fn secret_slots(&self) -> Vec<(SecretSlot, StoredSecret)> {
        fn slots<'a>(
            current: &'a StoredSecret,
            retired: impl Iterator<Item = &'a StoredSecret>,
            slot: impl Fn(Option<u32>) -> SecretSlot,
        ) -> impl Iterator<Item = (SecretSlot, StoredSecret)> {
            let first = (slot(None), current.clone());
            let retired: Vec<_> = retired.zip(0..).map(|(stored, i)| (slot(Some(i)), stored.clone())).collect();
            std::iter::once(first).chain(retired)
        }
        let endpoints = self.endpoints.values().flat_map(|e| {
            let id = e.id;
            slots(&e.secret, e.previous_secrets.iter().map(|old| &old.secret), move |retired| SecretSlot::Endpoint {
                id,
                retired,
            })
        });
        let sources = self.inbound.sources.values().flat_map(|s| {
            let id = s.id;
            slots(&s.secret, s.previous_secrets.iter().map(|old| &old.secret), move |retired| SecretSlot::Source {
                id,
                retired,
            })
        });
        endpoints.chain(sources).collect()
    }

    /// The stored secret `slot` names, if its owner and it still exist.
    /// Rewrapping does not touch the owner's `updated_at_ms`: no setting changed.
    fn secret_slot(&mut self, slot: &SecretSlot) -> Option<&mut StoredSecret> {
        fn pick<'a>(
            current: &'a mut StoredSecret,
            mut retired: impl Iterator<Item = &'a mut StoredSecret>,
            index: Option<u32>,
        ) -> Option<&'a mut StoredSecret> {
            match index {
                None => Some(current),
                Some(i) => retired.nth(usize::try_from(i).ok()?),
            }
        }
        match slot {
            SecretSlot::Endpoint { id, retired } => {
                let endpoint = self.endpoints.get_mut(id)?;
                pick(&mut endpoint.secret, endpoint.previous_secrets.iter_mut().map(|old| &mut old.secret), *retired)
            }
            SecretSlot::Source { id, retired } => {
                let source = self.inbound.sources.get_mut(id)?;
                pick(&mut source.secret, source.previous_secrets.iter_mut().map(|old| &mut old.secret), *retired)
            }
        }
    }
}
