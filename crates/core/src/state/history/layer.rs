//! One layer of a history's changes: puts and removals, with the index
//! rows they add or take away, and how a newer layer joins an older one or
//! becomes a [`Flush`].

use std::collections::BTreeMap;

use super::Blob;
use crate::dense::DenseMap;
use crate::ids::{DeliveryId, EndpointId, EventId};
use crate::state::history_store::{Flush, StoredDelivery, StoredEvent};

/// One layer's changes; its indexes list every record it names, `true`
/// where its put is in the index (a removal, or a put not in the dead
/// index over one that was, is `false`).
#[derive(Clone, Default)]
pub(super) struct Layer {
    pub(super) events: DenseMap<EventId, EventChange>,
    pub(super) deliveries: DenseMap<DeliveryId, DeliveryChange>,
    pub(super) by_time: DenseMap<(u64, EventId), bool>,
    pub(super) dead: BTreeMap<EndpointId, DenseMap<DeliveryId, bool>>,
}

#[derive(Clone)]
pub(super) enum EventChange {
    /// `replaces`: the layer below holds another version, which a flush
    /// removes first.
    Put {
        received_at_ms: u64,
        blob: Blob,
        replaces: bool,
    },
    Removed {
        received_at_ms: u64,
    },
}

/// `dead_of` is the endpoint of a dead delivery (its row in the dead index).
#[derive(Clone)]
pub(super) enum DeliveryChange {
    Put { dead_of: Option<EndpointId>, blob: Blob, replaces: Option<Option<EndpointId>> },
    Removed { dead_of: Option<EndpointId> },
}

/// What a layer says of a record: there (with it), gone, or nothing.
pub(super) enum Says<'a> {
    Put(&'a Blob),
    Removed,
    Nothing,
}

impl Layer {
    pub(super) fn event(&self, id: &EventId) -> Says<'_> {
        match self.events.get(id) {
            Some(EventChange::Put { blob, .. }) => Says::Put(blob),
            Some(EventChange::Removed { .. }) => Says::Removed,
            None => Says::Nothing,
        }
    }

    pub(super) fn delivery(&self, id: &DeliveryId) -> Says<'_> {
        match self.deliveries.get(id) {
            Some(DeliveryChange::Put { blob, .. }) => Says::Put(blob),
            Some(DeliveryChange::Removed { .. }) => Says::Removed,
            None => Says::Nothing,
        }
    }

    pub(super) fn set_dead(&mut self, endpoint: EndpointId, id: DeliveryId, dead: bool) {
        self.dead.entry(endpoint).or_default().insert(id, dead);
    }

    pub(super) fn forget_dead(&mut self, endpoint: &EndpointId, id: &DeliveryId) {
        if let Some(map) = self.dead.get_mut(endpoint) {
            map.remove(id);
            if map.is_empty() {
                self.dead.remove(endpoint);
            }
        }
    }

    /// `newer`'s changes over this layer's: what both say, as one layer.
    pub(super) fn absorb(&mut self, newer: Layer) {
        for (id, change) in newer.events {
            let change = match (change, self.events.get(&id)) {
                (EventChange::Put { received_at_ms, blob, .. }, Some(EventChange::Removed { .. })) => {
                    EventChange::Put { received_at_ms, blob, replaces: true }
                }
                (EventChange::Put { received_at_ms, blob, .. }, Some(EventChange::Put { replaces, .. })) => {
                    EventChange::Put { received_at_ms, blob, replaces: *replaces }
                }
                (change, _) => change,
            };
            self.events.insert(id, change);
        }
        for (id, change) in newer.deliveries {
            let change = match (change, self.deliveries.get(&id)) {
                (DeliveryChange::Put { dead_of, blob, .. }, Some(DeliveryChange::Removed { dead_of: was })) => {
                    DeliveryChange::Put { dead_of, blob, replaces: Some(*was) }
                }
                (DeliveryChange::Put { dead_of, blob, .. }, Some(DeliveryChange::Put { replaces, .. })) => {
                    DeliveryChange::Put { dead_of, blob, replaces: *replaces }
                }
                // A removal of this layer's own put: what it replaced is
                // what the store holds.
                (DeliveryChange::Removed { .. }, Some(DeliveryChange::Put { replaces: Some(was), .. })) => {
                    DeliveryChange::Removed { dead_of: *was }
                }
                (change, _) => change,
            };
            self.deliveries.insert(id, change);
        }
        for (key, there) in newer.by_time {
            self.by_time.insert(key, there);
        }
        for (endpoint, map) in newer.dead {
            for (id, dead) in map {
                self.set_dead(endpoint, id, dead);
            }
        }
    }

    /// What a flush of this layer writes.
    pub(super) fn flush(&self) -> Flush {
        let mut flush = Flush::default();
        for (id, change) in &self.events {
            match change {
                EventChange::Put { received_at_ms, blob, replaces } => {
                    if *replaces {
                        flush.removed_events.push((*received_at_ms, *id));
                    }
                    flush.events.push(StoredEvent {
                        id: *id,
                        received_at_ms: *received_at_ms,
                        record: blob.0.to_vec(),
                    });
                }
                EventChange::Removed { received_at_ms } => flush.removed_events.push((*received_at_ms, *id)),
            }
        }
        for (id, change) in &self.deliveries {
            match change {
                DeliveryChange::Put { dead_of, blob, replaces } => {
                    if let Some(was) = replaces {
                        flush.removed_deliveries.push((*id, *was));
                    }
                    flush.deliveries.push(StoredDelivery { id: *id, dead_of: *dead_of, record: blob.0.to_vec() });
                }
                DeliveryChange::Removed { dead_of } => flush.removed_deliveries.push((*id, *dead_of)),
            }
        }
        flush
    }
}
