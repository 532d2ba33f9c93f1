//! The history: finished events and their deliveries, kept encoded, apart
//! from the work in memory.
//!
//! An event is finished when every delivery it made is over (delivered,
//! dead or ended) and none is dead holding its ordering key (the key waits
//! on it, [`ClusterState::holds_its_key`]). At the end of the apply that
//! finished it, apply moves it, with its deliveries, out of
//! `ClusterState::events` and `deliveries` into the history
//! (`state/settle.rs`); a command that names one of its records (a replay,
//! an outcome that comes late or twice, a rewrap) brings it back first and
//! the end of the apply settles it again, so every command acts on history
//! as it did when everything was in memory. Retention takes events from
//! the history only, oldest received first: the work in memory is never
//! pruned.
//!
//! Records are kept as their bincode encoding (the log's and the
//! snapshot's, `bincode::config::standard()`), the form an on-disk store
//! keeps them in (design note 61). The indexes beside them (by time
//! received, the dead deliveries of each endpoint) are derived: never
//! encoded, rebuilt when a snapshot is decoded, which also checks every
//! record decodes, so a read after that cannot fail.
//!
//! **Layers.** The history is the changes of its `open` layer over those
//! of a `sealed` one over a [`HistoryStore`] (each optional but the first):
//! the newest layer that names a record decides whether it is there (a put)
//! or not (a removal). Without a store everything is in the open layer and
//! no removal is ever kept. With one, [`History::seal`] hands the open
//! layer's changes to whoever flushes them to the store, as a [`Flush`],
//! and keeps them readable until [`History::flushed`] says the store
//! committed them; the reads are right at every moment in between, since
//! the sealed layer and the store then agree.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

use serde::de::DeserializeOwned;

use super::history_store::{Flush, HistoryStore, StoreError};
use crate::dense::DenseMap;
use crate::ids::{DeliveryId, EndpointId, EventId};
use crate::model::{Delivery, DeliveryState, Event};

/// A range of ids, as the listings ask for them.
pub type IdRange<T> = (Bound<T>, Bound<T>);

/// Rows a read of the store asks for at a time while a walk goes on (a
/// few in tests, so their walks cross pages).
const STORE_PAGE: usize = if cfg!(test) { 3 } else { 256 };

/// Finished events and deliveries, encoded. See the module's comment.
#[derive(Clone, Default)]
pub struct History {
    open: Layer,
    sealed: Option<Arc<Layer>>,
    store: Option<Arc<dyn HistoryStore>>,
    /// What the three hold together.
    counts: Counts,
    /// Decoded from an encoding that left the records to the store
    /// (`codec.rs`): [`History::attach`] must give it that store.
    apart: bool,
    /// Bytes of the records the open and sealed layers hold: what of the
    /// history is in memory.
    held: u64,
    /// The first error the store answered ([`History::fault`]).
    fault: Arc<OnceLock<String>>,
}

/// What the history holds, all layers together. Encoded in place of the
/// records when they are in the store.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Counts {
    events: u64,
    deliveries: u64,
    /// Bytes of the encoded records.
    bytes: u64,
    /// Dead deliveries of each endpoint.
    dead: BTreeMap<EndpointId, u64>,
}

/// A record found in a layer (borrowed) or read from the store (owned).
enum Found<'a> {
    Held(&'a Blob),
    Read(Vec<u8>),
}

impl Found<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Found::Held(blob) => &blob.0,
            Found::Read(bytes) => bytes,
        }
    }

    fn record<T: DeserializeOwned>(&self) -> T {
        decode(self.bytes()).expect("history records are checked when they enter the state")
    }
}

/// The dead-index row of a delivery, if it has one.
fn dead_of(delivery: &Delivery) -> Option<EndpointId> {
    (delivery.state == DeliveryState::Dead).then_some(delivery.endpoint_id)
}

impl History {
    fn layers(&self) -> impl Iterator<Item = &Layer> {
        std::iter::once(&self.open).chain(self.sealed.as_deref())
    }

    /// Finished events held.
    pub fn event_count(&self) -> usize {
        self.counts.events as usize
    }

    /// Deliveries of finished events held.
    pub fn delivery_count(&self) -> usize {
        self.counts.deliveries as usize
    }

    /// Bytes of the encoded records.
    pub fn bytes(&self) -> u64 {
        self.counts.bytes
    }

    /// Bytes of the encoded records held in memory (the layers), the rest
    /// being in the store: O(1), kept by every change.
    pub fn held_bytes(&self) -> u64 {
        self.held
    }

    /// Bytes of the records one layer holds, counted.
    fn layer_bytes(layer: &Layer) -> u64 {
        let events = layer.events.values().map(|c| match c {
            EventChange::Put { blob, .. } => blob.len(),
            EventChange::Removed { .. } => 0,
        });
        let deliveries = layer.deliveries.values().map(|c| match c {
            DeliveryChange::Put { blob, .. } => blob.len(),
            DeliveryChange::Removed { .. } => 0,
        });
        events.sum::<u64>() + deliveries.sum::<u64>()
    }

    fn found_event(&self, id: &EventId) -> Option<Found<'_>> {
        for layer in self.layers() {
            match layer.event(id) {
                Says::Put(blob) => return Some(Found::Held(blob)),
                Says::Removed => return None,
                Says::Nothing => {}
            }
        }
        let store = self.store.as_ref()?;
        self.answer(store.event(id), None).map(Found::Read)
    }

    fn found_delivery(&self, id: &DeliveryId) -> Option<Found<'_>> {
        for layer in self.layers() {
            match layer.delivery(id) {
                Says::Put(blob) => return Some(Found::Held(blob)),
                Says::Removed => return None,
                Says::Nothing => {}
            }
        }
        let store = self.store.as_ref()?;
        self.answer(store.delivery(id), None).map(Found::Read)
    }

    /// Whether the layers below the open one, or the store, hold `id`.
    fn below_holds_event(&self, id: &EventId) -> bool {
        if let Some(sealed) = &self.sealed {
            match sealed.event(id) {
                Says::Put(_) => return true,
                Says::Removed => return false,
                Says::Nothing => {}
            }
        }
        self.store.as_ref().is_some_and(|s| self.answer(s.event(id), None).is_some())
    }

    /// The dead-index row the version of `id` below the open layer has:
    /// `None` when nothing below holds it, `Some(row)` when something does.
    fn below_delivery(&self, id: &DeliveryId) -> Option<Option<EndpointId>> {
        if let Some(sealed) = &self.sealed {
            match sealed.deliveries.get(id) {
                Some(DeliveryChange::Put { dead_of, .. }) => return Some(*dead_of),
                Some(DeliveryChange::Removed { .. }) => return None,
                None => {}
            }
        }
        let record = self.answer(self.store.as_ref()?.delivery(id), None)?;
        let delivery: Delivery = decode(&record).expect("history records are checked when they enter the state");
        Some(dead_of(&delivery))
    }

    /// A store's answer, or `otherwise` when it failed: the failure is
    /// kept ([`History::fault`]) and the read goes on as if the store held
    /// nothing. Whoever read must then check the fault and discard what it
    /// read: the state machine stops the node, a handler answers 503.
    fn answer<T>(&self, result: Result<T, StoreError>, otherwise: T) -> T {
        result.unwrap_or_else(|StoreError(why)| {
            let _ = self.fault.set(why);
            otherwise
        })
    }

    /// The first error the history store answered, if any: from then on,
    /// what this history reads may be short of what it holds.
    pub fn fault(&self) -> Option<&str> {
        self.fault.get().map(String::as_str)
    }

    pub fn contains_event(&self, id: &EventId) -> bool {
        self.found_event(id).is_some()
    }

    pub fn contains_delivery(&self, id: &DeliveryId) -> bool {
        self.found_delivery(id).is_some()
    }

    pub fn event(&self, id: &EventId) -> Option<Event> {
        self.found_event(id).map(|f| f.record())
    }

    pub fn delivery(&self, id: &DeliveryId) -> Option<Delivery> {
        self.found_delivery(id).map(|f| f.record())
    }

    /// Adds a finished event and its deliveries, none of which the history
    /// holds. Returns the bytes added.
    pub(super) fn put<'a>(&mut self, event: &Event, deliveries: impl IntoIterator<Item = &'a Delivery>) -> u64 {
        let mut added = 0;
        for delivery in deliveries {
            let blob = Blob::encode(delivery);
            added += blob.len();
            let row = dead_of(delivery);
            let replaces = match self.open.deliveries.get(&delivery.id) {
                Some(DeliveryChange::Removed { dead_of }) => Some(*dead_of),
                _ => None,
            };
            if let Some(endpoint) = row {
                self.open.set_dead(endpoint, delivery.id, true);
                *self.counts.dead.entry(endpoint).or_default() += 1;
            } else if self.open.dead.get(&delivery.endpoint_id).is_some_and(|m| m.contains_key(&delivery.id)) {
                self.open.set_dead(delivery.endpoint_id, delivery.id, false);
            }
            self.open.deliveries.insert(delivery.id, DeliveryChange::Put { dead_of: row, blob, replaces });
            self.counts.deliveries += 1;
        }
        let blob = Blob::encode(event);
        added += blob.len();
        let replaces = matches!(self.open.events.get(&event.id), Some(EventChange::Removed { .. }));
        self.open.by_time.insert((event.received_at_ms, event.id), true);
        self.open.events.insert(event.id, EventChange::Put { received_at_ms: event.received_at_ms, blob, replaces });
        self.counts.events += 1;
        self.counts.bytes += added;
        self.held += added;
        added
    }

    /// Takes an event and its deliveries out, decoded, with the bytes they
    /// held.
    pub(super) fn take(&mut self, id: &EventId) -> Option<(Event, Vec<Delivery>, u64)> {
        let found = self.found_event(id)?;
        let mut removed = found.bytes().len() as u64;
        let event: Event = found.record();
        let mut deliveries = Vec::with_capacity(event.deliveries.len());
        for delivery_id in &event.deliveries {
            let Some(found) = self.found_delivery(delivery_id) else { continue };
            removed += found.bytes().len() as u64;
            deliveries.push(found.record::<Delivery>());
        }
        let key = (event.received_at_ms, *id);
        if let Some(EventChange::Put { blob, .. }) = self.open.events.get(id) {
            self.held -= blob.len();
        }
        if self.below_holds_event(id) {
            self.open.events.insert(*id, EventChange::Removed { received_at_ms: event.received_at_ms });
            self.open.by_time.insert(key, false);
        } else {
            self.open.events.remove(id);
            self.open.by_time.remove(&key);
        }
        for delivery in &deliveries {
            let below = match self.open.deliveries.get(&delivery.id) {
                Some(DeliveryChange::Put { replaces, blob, .. }) => {
                    self.held -= blob.len();
                    *replaces
                }
                _ => self.below_delivery(&delivery.id),
            };
            match below {
                Some(row) => {
                    self.open.deliveries.insert(delivery.id, DeliveryChange::Removed { dead_of: row });
                    self.open.set_dead(delivery.endpoint_id, delivery.id, false);
                }
                None => {
                    self.open.deliveries.remove(&delivery.id);
                    self.open.forget_dead(&delivery.endpoint_id, &delivery.id);
                }
            }
            if let Some(endpoint) = dead_of(delivery)
                && let Some(count) = self.counts.dead.get_mut(&endpoint)
            {
                *count -= 1;
                if *count == 0 {
                    self.counts.dead.remove(&endpoint);
                }
            }
        }
        self.counts.events -= 1;
        self.counts.deliveries -= deliveries.len() as u64;
        self.counts.bytes = self.counts.bytes.saturating_sub(removed);
        Some((event, deliveries, removed))
    }

    /// The event a delivery of the history belongs to.
    pub fn event_of(&self, delivery: &DeliveryId) -> Option<EventId> {
        self.delivery(delivery).map(|d| d.event_id)
    }

    /// Starts a flush to the store: the open layer's changes become the
    /// sealed one's (joining a sealed layer a failed flush left) and what
    /// to write is returned. Reads see no change.
    pub fn seal(&mut self) -> Flush {
        let open = std::mem::take(&mut self.open);
        let sealed = match self.sealed.take() {
            Some(earlier) => {
                let mut earlier = Arc::unwrap_or_clone(earlier);
                earlier.absorb(open);
                earlier
            }
            None => open,
        };
        let flush = sealed.flush();
        // Joined layers may hold less than both did (a newer removal).
        self.held = Self::layer_bytes(&sealed);
        self.sealed = Some(Arc::new(sealed));
        flush
    }

    /// The store committed the last [`seal`](Self::seal)'s flush: its
    /// changes are read from the store from now on.
    pub fn flushed(&mut self, store: Arc<dyn HistoryStore>) {
        if let Some(sealed) = self.sealed.take() {
            self.held -= Self::layer_bytes(&sealed);
        }
        self.store = Some(store);
    }

    /// Gives the history the store its records are kept in, once, as a
    /// state machine opens: either the history was decoded from an
    /// encoding that left its records to this store (the store must then
    /// hold exactly what the encoding counted), or the store is empty and
    /// the history's records are all in memory, for the next flush to write.
    pub fn attach(&mut self, store: Arc<dyn HistoryStore>) -> Result<(), String> {
        if self.store.is_some() {
            return Err("the history already has its store".into());
        }
        let held = store.counts().map_err(|e| e.to_string())?;
        let counted = (self.counts.events, self.counts.deliveries, self.counts.bytes);
        let matches = if self.apart {
            (held.events, held.deliveries, held.bytes) == counted
        } else {
            held == super::history_store::StoreCounts::default()
        };
        if !matches {
            return Err(format!(
                "the history store holds {} events, {} deliveries, {} bytes; the state counts {} events, {} deliveries, {} bytes{}",
                held.events,
                held.deliveries,
                held.bytes,
                counted.0,
                counted.1,
                counted.2,
                if self.apart { "" } else { " in memory, with none in the store" },
            ));
        }
        self.store = Some(store);
        self.apart = true;
        Ok(())
    }

    /// Whether the records are kept in a store (then the state encodes
    /// only what the history counts).
    pub fn is_apart(&self) -> bool {
        self.apart
    }
}

mod check;
mod codec;
mod layer;
mod listing;
use codec::{Blob, decode};
use layer::{DeliveryChange, EventChange, Layer, Says};
#[cfg(test)]
mod tests;
