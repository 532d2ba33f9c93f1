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
//! snapshot's, `bincode::config::standard()`): about a third of a decoded
//! record's footprint, and the form an on-disk store keeps them in
//! (design note 61). The indexes beside them (by time received, the dead
//! deliveries of each endpoint) are derived: never encoded, rebuilt when a
//! snapshot is decoded, which also checks every record decodes, so a read
//! after that cannot fail.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use serde::de::{DeserializeOwned, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::dense::{DenseMap, DenseSet};
use crate::ids::{DeliveryId, EndpointId, EventId};
use crate::model::{Delivery, DeliveryState, Event};

/// A range of ids, as the listings ask for them.
pub type IdRange<T> = (Bound<T>, Bound<T>);

/// Finished events and deliveries, encoded. See the module's comment.
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Stored")]
pub struct History {
    events: DenseMap<EventId, Blob>,
    deliveries: DenseMap<DeliveryId, Blob>,
    /// `(received_at_ms, id)` of every event: retention's order.
    #[serde(skip)]
    by_time: DenseSet<(u64, EventId)>,
    /// The dead deliveries of each endpoint, in id order.
    #[serde(skip)]
    dead: BTreeMap<EndpointId, DenseSet<DeliveryId>>,
    /// Bytes of the encoded records.
    #[serde(skip)]
    bytes: u64,
}

/// The encoded fields of [`History`], decoded and checked before the
/// derived indexes are built from them.
#[derive(Deserialize)]
struct Stored {
    events: DenseMap<EventId, Blob>,
    deliveries: DenseMap<DeliveryId, Blob>,
}

impl TryFrom<Stored> for History {
    type Error = String;

    /// Decodes every record once: a snapshot whose history does not decode,
    /// or holds a delivery without its event, is refused here.
    fn try_from(stored: Stored) -> Result<Self, String> {
        let mut history = History { events: stored.events, deliveries: stored.deliveries, ..History::default() };
        for (id, blob) in history.events.iter() {
            let event: Event = blob.decode().map_err(|e| format!("history event {id}: {e}"))?;
            if event.id != *id {
                return Err(format!("history event {id} holds the record of {}", event.id));
            }
            history.by_time.insert((event.received_at_ms, *id));
            history.bytes += blob.len();
        }
        for (id, blob) in history.deliveries.iter() {
            let delivery: Delivery = blob.decode().map_err(|e| format!("history delivery {id}: {e}"))?;
            if delivery.id != *id || !history.events.contains_key(&delivery.event_id) {
                return Err(format!("history delivery {id} is not one of a stored event's"));
            }
            if delivery.state == DeliveryState::Dead {
                history.dead.entry(delivery.endpoint_id).or_default().insert(*id);
            }
            history.bytes += blob.len();
        }
        Ok(history)
    }
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "History {{ {} events, {} deliveries, {} bytes }}",
            self.events.len(),
            self.deliveries.len(),
            self.bytes
        )
    }
}

impl History {
    /// Finished events held.
    pub fn event_count(&self) -> usize {
        self.events.len()
    }

    /// Deliveries of finished events held.
    pub fn delivery_count(&self) -> usize {
        self.deliveries.len()
    }

    /// Bytes of the encoded records.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn contains_event(&self, id: &EventId) -> bool {
        self.events.contains_key(id)
    }

    pub fn contains_delivery(&self, id: &DeliveryId) -> bool {
        self.deliveries.contains_key(id)
    }

    pub fn event(&self, id: &EventId) -> Option<Event> {
        self.events.get(id).map(Blob::record)
    }

    pub fn delivery(&self, id: &DeliveryId) -> Option<Delivery> {
        self.deliveries.get(id).map(Blob::record)
    }

    /// Events with ids in `range`, in id order or newest first, decoded one
    /// at a time as the caller walks.
    pub fn events_in(&self, range: IdRange<EventId>, newest_first: bool) -> Box<dyn Iterator<Item = Event> + '_> {
        let records = self.events.range(range).map(|(_, blob)| blob.record());
        if newest_first { Box::new(records.rev()) } else { Box::new(records) }
    }

    /// Deliveries with ids in `range`, as [`events_in`](Self::events_in).
    pub fn deliveries_in(
        &self,
        range: IdRange<DeliveryId>,
        newest_first: bool,
    ) -> Box<dyn Iterator<Item = Delivery> + '_> {
        let records = self.deliveries.range(range).map(|(_, blob)| blob.record());
        if newest_first { Box::new(records.rev()) } else { Box::new(records) }
    }

    /// The dead deliveries of `endpoint` with ids in `range`, in id order
    /// or newest first, from the index.
    pub fn dead_of(
        &self,
        endpoint: &EndpointId,
        range: IdRange<DeliveryId>,
        newest_first: bool,
    ) -> Box<dyn Iterator<Item = DeliveryId> + '_> {
        let Some(set) = self.dead.get(endpoint) else { return Box::new(std::iter::empty()) };
        let ids = set.range(range).copied();
        if newest_first { Box::new(ids.rev()) } else { Box::new(ids) }
    }

    /// How many dead deliveries of `endpoint` the history holds.
    pub fn dead_count_of(&self, endpoint: &EndpointId) -> usize {
        self.dead.get(endpoint).map_or(0, DenseSet::len)
    }

    /// How many dead deliveries the history holds: one look per endpoint.
    pub fn dead_count(&self) -> usize {
        self.dead.values().map(DenseSet::len).sum()
    }

    /// The events received before `before_ms`, oldest first.
    pub fn received_before(&self, before_ms: u64) -> impl Iterator<Item = EventId> + '_ {
        self.by_time.iter().take_while(move |(at_ms, _)| *at_ms < before_ms).map(|(_, id)| *id)
    }

    /// Every event, in id order: for checks and tests, O(history).
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        self.events.values().map(Blob::record)
    }

    /// Every delivery, in id order: for checks and tests, O(history).
    pub fn deliveries(&self) -> impl Iterator<Item = Delivery> + '_ {
        self.deliveries.values().map(Blob::record)
    }

    /// Adds a finished event and its deliveries. Returns the bytes added.
    pub(super) fn put<'a>(&mut self, event: &Event, deliveries: impl IntoIterator<Item = &'a Delivery>) -> u64 {
        let mut added = 0;
        for delivery in deliveries {
            let blob = Blob::encode(delivery);
            added += blob.len();
            if delivery.state == DeliveryState::Dead {
                self.dead.entry(delivery.endpoint_id).or_default().insert(delivery.id);
            }
            self.deliveries.insert(delivery.id, blob);
        }
        let blob = Blob::encode(event);
        added += blob.len();
        self.by_time.insert((event.received_at_ms, event.id));
        self.events.insert(event.id, blob);
        self.bytes += added;
        added
    }

    /// Takes an event and its deliveries out, decoded, with the bytes they
    /// held.
    pub(super) fn take(&mut self, id: &EventId) -> Option<(Event, Vec<Delivery>, u64)> {
        let blob = self.events.remove(id)?;
        let event: Event = blob.record();
        let mut removed = blob.len();
        self.by_time.remove(&(event.received_at_ms, *id));
        let mut deliveries = Vec::with_capacity(event.deliveries.len());
        for delivery_id in &event.deliveries {
            let Some(blob) = self.deliveries.remove(delivery_id) else { continue };
            removed += blob.len();
            let delivery: Delivery = blob.record();
            if delivery.state == DeliveryState::Dead
                && let Some(set) = self.dead.get_mut(&delivery.endpoint_id)
            {
                set.remove(delivery_id);
                if set.is_empty() {
                    self.dead.remove(&delivery.endpoint_id);
                }
            }
            deliveries.push(delivery);
        }
        self.bytes = self.bytes.saturating_sub(removed);
        Some((event, deliveries, removed))
    }

    /// The event a delivery of the history belongs to.
    pub fn event_of(&self, delivery: &DeliveryId) -> Option<EventId> {
        self.delivery(delivery).map(|d| d.event_id)
    }

    /// Checks the derived indexes and byte count against the records.
    pub(super) fn check(&self) -> Result<(), String> {
        let rebuilt = History::try_from(Stored { events: self.events.clone(), deliveries: self.deliveries.clone() })?;
        if rebuilt.by_time != self.by_time {
            return Err("the history's time index disagrees with its events".into());
        }
        if rebuilt.dead != self.dead {
            return Err("the history's dead index disagrees with its deliveries".into());
        }
        if rebuilt.bytes != self.bytes {
            return Err(format!("the history counts {} bytes, its records hold {}", self.bytes, rebuilt.bytes));
        }
        for event in self.events() {
            if let Some(missing) = event.deliveries.iter().find(|d| !self.deliveries.contains_key(*d)) {
                return Err(format!("history event {} lacks its delivery {missing}", event.id));
            }
        }
        Ok(())
    }
}

/// One record's bincode encoding. Encodes as a byte string (a length, then
/// the bytes), not as a sequence of numbers.
#[derive(Clone, PartialEq, Eq)]
struct Blob(Box<[u8]>);

impl Blob {
    fn encode<T: Serialize>(record: &T) -> Self {
        // Encoding into a vector fails only for a type serde cannot
        // encode, which none of the records is.
        let bytes =
            bincode::serde::encode_to_vec(record, bincode::config::standard()).expect("a state record always encodes");
        Blob(bytes.into_boxed_slice())
    }

    fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        let (record, read) =
            bincode::serde::decode_from_slice(&self.0, bincode::config::standard()).map_err(|e| e.to_string())?;
        if read != self.0.len() {
            return Err(format!("{} bytes after the record", self.0.len() - read));
        }
        Ok(record)
    }

    /// The record, from bytes this process encoded or checked when decoding
    /// the snapshot that brought them.
    fn record<T: DeserializeOwned>(&self) -> T {
        self.decode().expect("history records are checked when they enter the state")
    }

    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

impl Serialize for Blob {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BlobVisitor;
        impl<'de> Visitor<'de> for BlobVisitor {
            type Value = Blob;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Blob, E> {
                Ok(Blob(bytes.into()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Blob, E> {
                Ok(Blob(bytes.into_boxed_slice()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Blob, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(byte) = seq.next_element::<u8>()? {
                    bytes.push(byte);
                }
                Ok(Blob(bytes.into_boxed_slice()))
            }
        }
        deserializer.deserialize_bytes(BlobVisitor)
    }
}
