//! Payloads sealed again under another key (`Command::RewrapPayloads`).

use super::ClusterState;
use super::usage::event_bytes;
use crate::command::{REWRAP_BATCH_MAX, Response, RewrappedPayload};
use crate::model::Rewrapped;

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
}
