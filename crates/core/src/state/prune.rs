//! Retention: forgetting events whose deliveries are all over.
//!
//! The leader proposes `Prune { before_ms, max_events }` from time to time
//! (ARCHITECTURE §4.4); applying it removes, oldest first, up to `max_events` events
//! received before `before_ms` whose every delivery is delivered or dead,
//! with their deliveries and idempotency keys. An event with a delivery
//! still pending or retrying, or dead and blocking its ordering key (under
//! `on_dead: block`, until it is replayed or skipped), is kept whatever its
//! age: retention never drops work. Events are keyed by ULID, which starts with the time the
//! receiving node gave it, so the oldest come first and the scan stops at
//! the first event received after `before_ms` (or after [`PRUNE_SCAN_MAX`]
//! events looked at), which keeps one apply short however large the state.

use super::ClusterState;
use super::usage::{delivery_bytes, event_bytes};
use crate::command::Response;
use crate::ids::EventId;
use crate::model::DeliveryState;

/// How many events one `Prune` looks at, at most, per event it may remove:
/// events kept because a delivery is still active are skipped over, but not
/// without bound.
const PRUNE_SCAN_PER_EVENT: usize = 4;
/// How many events one `Prune` looks at in all, at most.
const PRUNE_SCAN_MAX: usize = 1 << 20;

impl ClusterState {
    pub(super) fn prune(&mut self, before_ms: u64, max_events: u32) -> Response {
        let chosen: Vec<EventId> = self.prunable(before_ms, max_events as usize).collect();
        let mut deliveries = 0u32;
        for event_id in &chosen {
            let Some(event) = self.events.remove(event_id) else { continue };
            self.forget_newest(&event);
            self.count_bytes(event_bytes(&event), false);
            for delivery_id in &event.deliveries {
                if let Some(delivery) = self.deliveries.remove(delivery_id) {
                    self.forget_ordered(&delivery, &event);
                    if delivery.state == DeliveryState::Dead {
                        self.unmark_dead(delivery_id, &delivery.endpoint_id);
                    }
                    #[cfg(not(feature = "break"))]
                    debug_assert!(delivery.state.is_terminal());
                    #[cfg(feature = "break")]
                    if let Some(active) = self.active.get_mut(&delivery.endpoint_id)
                        && active.remove(delivery_id)
                    {
                        self.usage.pending = self.usage.pending.saturating_sub(1);
                    }
                    self.count_bytes(delivery_bytes(&delivery), false);
                    deliveries += 1;
                    self.retired.deliveries.push(delivery);
                }
            }
            if let Some(key) = &event.idempotency_key
                && self.idempotency.get(&**key) == Some(event_id)
            {
                self.idempotency.remove(&**key);
            }
            self.retired.events.push(event);
        }
        Response::Pruned { events: chosen.len() as u32, deliveries }
    }

    /// The events a `Prune { before_ms, max_events }` would remove, oldest
    /// first, found lazily: the leader asks for the first of them before
    /// proposing one, so it proposes nothing when nothing is due.
    pub fn prunable(&self, before_ms: u64, max_events: usize) -> impl Iterator<Item = EventId> + '_ {
        let scan = max_events.saturating_mul(PRUNE_SCAN_PER_EVENT).min(PRUNE_SCAN_MAX);
        self.events
            .iter()
            .take(scan)
            // Everything after an event made and received since is newer,
            // give or take clock skew.
            .take_while(move |(id, event)| id.created_at_ms() < before_ms || event.received_at_ms < before_ms)
            .filter(move |(_, event)| {
                // A dead delivery that blocks its key is not over: forgetting
                // it would leave the key waiting on a delivery that is gone.
                let over = event
                    .deliveries
                    .iter()
                    .all(|d| self.deliveries.get(d).is_none_or(|d| d.state.is_terminal() && !self.holds_its_key(d)));
                #[cfg(feature = "break")]
                let over = over || crate::breaks::prune_active();
                event.received_at_ms < before_ms && over
            })
            .map(|(id, _)| *id)
            .take(max_events)
    }
}
