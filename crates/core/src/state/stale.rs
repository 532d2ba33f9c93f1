//! The stale guard: a delivery of an inbound event whose entity key has
//! seen a newer version delivered to the same endpoint is not sent; it
//! ends `ignored_stale`.
//!
//! The state keeps, per (endpoint, source, entity key), the newest version
//! delivered and its event: two sources whose entity keys overlap never
//! compare their versions. Only deliveries of events whose source names
//! both an entity key and a version take part. The owner of an endpoint
//! asks [`ClusterState::stale_newer`] before each attempt and reports a
//! [`crate::retry::Decision::IgnoredStale`] under its fencing token; the
//! fact it read (a newer version was delivered) stays true, so apply
//! records it as reported. An entry goes with the retention of its event:
//! an older version arriving after that is delivered (the same window as
//! the deduplication of provider ids).
//!
//! A delivery replayed after it was ignored is sent: the operator asked
//! for it on purpose.

use serde::{Deserialize, Serialize};

use super::ClusterState;
use crate::ids::{EndpointId, EventId, SourceId};
use crate::inbound::Version;
use crate::model::{Delivery, Event, TimelineEntry};

/// (endpoint, source, entity key).
pub(super) type NewestKey = (EndpointId, SourceId, Box<str>);

/// The newest version of a key delivered to an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Newest {
    pub version: Version,
    pub event_id: EventId,
}

impl ClusterState {
    /// The event of a newer version of `delivery`'s entity key already
    /// delivered to its endpoint, if there is one and the guard applies.
    pub fn stale_newer(&self, delivery: &Delivery) -> Option<EventId> {
        if delivery.history.iter().any(|entry| matches!(entry, TimelineEntry::IgnoredStale { .. })) {
            // Ignored once and replayed since: sent on purpose.
            return None;
        }
        let event = self.events.get(&delivery.event_id)?;
        let inbound = event.inbound.as_deref()?;
        let (key, version) = inbound.guarded()?;
        let newest = self.inbound.newest.get(&(delivery.endpoint_id, inbound.source_id, Box::from(key)))?;
        (newest.version > *version).then_some(newest.event_id)
    }

    /// A delivery was delivered: its version becomes its key's newest at
    /// its endpoint if it is newer than what was.
    pub(super) fn note_delivered(&mut self, delivery: &Delivery) {
        let Some(event) = self.events.get(&delivery.event_id) else { return };
        let Some(inbound) = event.inbound.as_deref() else { return };
        let Some((key, version)) = inbound.guarded() else { return };
        let newest = Newest { version: version.clone(), event_id: event.id };
        let entry = self.inbound.newest.entry((delivery.endpoint_id, inbound.source_id, Box::from(key)));
        match entry {
            std::collections::btree_map::Entry::Vacant(vacant) => {
                vacant.insert(newest);
            }
            std::collections::btree_map::Entry::Occupied(mut occupied) => {
                if occupied.get().version < newest.version {
                    occupied.insert(newest);
                }
            }
        }
    }

    /// Retention takes `event` out, with its `deliveries`: the entries it
    /// is the newest of go.
    pub(super) fn forget_newest(&mut self, event: &Event, deliveries: &[Delivery]) {
        let Some(inbound) = event.inbound.as_deref() else { return };
        let Some(key) = inbound.entity_key.as_deref() else { return };
        for delivery in deliveries {
            let slot = (delivery.endpoint_id, inbound.source_id, Box::from(key));
            if self.inbound.newest.get(&slot).is_some_and(|newest| newest.event_id == event.id) {
                self.inbound.newest.remove(&slot);
            }
        }
    }
}
