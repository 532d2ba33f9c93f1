//! Retention: forgetting finished events.
//!
//! The leader proposes `Prune { before_ms, max_events }` from time to time
//! (ARCHITECTURE §4.4); applying it removes, oldest received first, up to
//! `max_events` events received before `before_ms` from the history
//! (`state/history.rs`), with their deliveries and idempotency keys. Only
//! finished events are in the history: an event with a delivery still
//! pending or retrying, or dead and blocking its ordering key (under
//! `on_dead: block`, until it is replayed or skipped), is in memory and
//! kept whatever its age: retention never drops work. The history is
//! ordered by time received, so one apply looks at no event it does not
//! remove, however large the state.

use std::sync::Arc;

use super::ClusterState;
use crate::command::Response;
use crate::ids::EventId;

impl ClusterState {
    pub(super) fn prune(&mut self, before_ms: u64, max_events: u32) -> Response {
        let chosen: Vec<EventId> = self.prunable(before_ms, max_events as usize).collect();
        let mut deliveries = 0u32;
        for event_id in &chosen {
            #[cfg(feature = "break")]
            if crate::breaks::prune_active() && self.events.contains_key(event_id) {
                self.force_into_history(event_id);
            }
            let Some((event, removed, stored)) = self.history.take(event_id) else { continue };
            self.count_bytes(stored, false);
            self.forget_newest(&event, &removed);
            for delivery in removed {
                self.forget_ordered(&delivery, &event);
                deliveries += 1;
                self.retired.deliveries.push(Arc::new(delivery));
            }
            if let Some(key) = &event.idempotency_key
                && self.idempotency.get(&**key) == Some(event_id)
            {
                self.idempotency.remove(&**key);
            }
            self.retired.events.push(Box::new(event));
        }
        Response::Pruned { events: chosen.len() as u32, deliveries }
    }

    /// The events a `Prune { before_ms, max_events }` would remove, oldest
    /// first, found lazily: the leader asks for the first of them before
    /// proposing one, so it proposes nothing when nothing is due.
    pub fn prunable(&self, before_ms: u64, max_events: usize) -> impl Iterator<Item = EventId> + '_ {
        let finished = self.history.received_before(before_ms);
        #[cfg(feature = "break")]
        let finished: Box<dyn Iterator<Item = EventId> + '_> = if crate::breaks::prune_active() {
            // The deliberate bug: events still at work are pruned too.
            let at_work = self.events.values().filter(move |e| e.received_at_ms < before_ms).map(|e| e.id);
            Box::new(at_work.chain(finished))
        } else {
            Box::new(finished)
        };
        finished.take(max_events)
    }
}
