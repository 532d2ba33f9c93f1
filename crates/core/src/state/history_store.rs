//! The seam between the history and a store on disk (design note 61,
//! step 2): what the history reads from a store, and what it hands one to
//! write at a snapshot point. Records cross it as their encoding (the
//! history's own), so a store moves bytes and keys and decodes nothing.
//!
//! A store holds the history as of its last flush. A [`Flush`] is applied
//! whole or not at all, removals before puts (an event taken back and
//! finished again since the last flush is removed and put again), in one
//! durable transaction with the snapshot it belongs to.

use super::history::IdRange;
use crate::ids::{DeliveryId, EndpointId, EventId};

/// A store that could not be read or written, with what it said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("history store: {0}")]
pub struct StoreError(pub String);

/// How much a store holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCounts {
    pub events: u64,
    pub deliveries: u64,
    /// Bytes of the encoded records.
    pub bytes: u64,
}

/// The reads of the history's flushed part, all as of one committed flush.
/// Ranges come in pages of at most `limit`, in id order or newest first.
pub trait HistoryStore: Send + Sync {
    /// An event's encoded record.
    fn event(&self, id: &EventId) -> Result<Option<Vec<u8>>, StoreError>;

    /// A delivery's encoded record.
    fn delivery(&self, id: &DeliveryId) -> Result<Option<Vec<u8>>, StoreError>;

    /// Events with ids in `range`.
    fn events(
        &self,
        range: IdRange<EventId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(EventId, Vec<u8>)>, StoreError>;

    /// Deliveries with ids in `range`.
    fn deliveries(
        &self,
        range: IdRange<DeliveryId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(DeliveryId, Vec<u8>)>, StoreError>;

    /// The dead deliveries of `endpoint` with ids in `range`.
    fn dead(
        &self,
        endpoint: &EndpointId,
        range: IdRange<DeliveryId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<DeliveryId>, StoreError>;

    /// `(received_at_ms, id)` of events, oldest first, after `after`.
    fn received(&self, after: Option<(u64, EventId)>, limit: usize) -> Result<Vec<(u64, EventId)>, StoreError>;

    fn counts(&self) -> Result<StoreCounts, StoreError>;
}

/// An event to put, with the key of its time index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    pub id: EventId,
    pub received_at_ms: u64,
    pub record: Vec<u8>,
}

/// A delivery to put; `dead_of` names its endpoint when it is dead, for the
/// dead index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDelivery {
    pub id: DeliveryId,
    pub dead_of: Option<EndpointId>,
    pub record: Vec<u8>,
}

/// What one snapshot point writes to the store: removals, then puts. A
/// removal names the index keys its record had, so the store removes
/// index rows without reading the record first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flush {
    /// `(received_at_ms, id)` of each event removed.
    pub removed_events: Vec<(u64, EventId)>,
    /// Each delivery removed, with its endpoint when it was dead.
    pub removed_deliveries: Vec<(DeliveryId, Option<EndpointId>)>,
    pub events: Vec<StoredEvent>,
    pub deliveries: Vec<StoredDelivery>,
}

impl Flush {
    pub fn is_empty(&self) -> bool {
        self.removed_events.is_empty()
            && self.removed_deliveries.is_empty()
            && self.events.is_empty()
            && self.deliveries.is_empty()
    }
}

/// A store in memory: the reference the on-disk one is checked against,
/// and the simulator's (a flush is one step, so a crash sees it all or
/// none of it).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemStore {
    events: std::collections::BTreeMap<EventId, Vec<u8>>,
    deliveries: std::collections::BTreeMap<DeliveryId, Vec<u8>>,
    by_time: std::collections::BTreeSet<(u64, EventId)>,
    dead: std::collections::BTreeSet<(EndpointId, DeliveryId)>,
}

impl MemStore {
    /// Applies a flush: removals, then puts.
    pub fn apply(&mut self, flush: &Flush) {
        for (at_ms, id) in &flush.removed_events {
            self.events.remove(id);
            self.by_time.remove(&(*at_ms, *id));
        }
        for (id, dead_of) in &flush.removed_deliveries {
            self.deliveries.remove(id);
            if let Some(endpoint) = dead_of {
                self.dead.remove(&(*endpoint, *id));
            }
        }
        for event in &flush.events {
            self.events.insert(event.id, event.record.clone());
            self.by_time.insert((event.received_at_ms, event.id));
        }
        for delivery in &flush.deliveries {
            self.deliveries.insert(delivery.id, delivery.record.clone());
            if let Some(endpoint) = delivery.dead_of {
                self.dead.insert((endpoint, delivery.id));
            }
        }
    }
}

/// The first `limit` items of `items`, or the last `limit` newest first.
fn page<T>(items: impl DoubleEndedIterator<Item = T>, newest_first: bool, limit: usize) -> Vec<T> {
    if newest_first { items.rev().take(limit).collect() } else { items.take(limit).collect() }
}

impl HistoryStore for MemStore {
    fn event(&self, id: &EventId) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.events.get(id).cloned())
    }

    fn delivery(&self, id: &DeliveryId) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.deliveries.get(id).cloned())
    }

    fn events(
        &self,
        range: IdRange<EventId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(EventId, Vec<u8>)>, StoreError> {
        if super::is_empty_range(&range) {
            return Ok(Vec::new());
        }
        Ok(page(self.events.range(range).map(|(id, r)| (*id, r.clone())), newest_first, limit))
    }

    fn deliveries(
        &self,
        range: IdRange<DeliveryId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<(DeliveryId, Vec<u8>)>, StoreError> {
        if super::is_empty_range(&range) {
            return Ok(Vec::new());
        }
        Ok(page(self.deliveries.range(range).map(|(id, r)| (*id, r.clone())), newest_first, limit))
    }

    fn dead(
        &self,
        endpoint: &EndpointId,
        range: IdRange<DeliveryId>,
        newest_first: bool,
        limit: usize,
    ) -> Result<Vec<DeliveryId>, StoreError> {
        let ids = self.dead.range((*endpoint, DeliveryId::from_bytes([0; 16]))..).take_while(|(e, _)| e == endpoint);
        let ids: Vec<DeliveryId> =
            ids.map(|(_, d)| *d).filter(|d| std::ops::RangeBounds::contains(&range, d)).collect();
        Ok(page(ids.into_iter(), newest_first, limit))
    }

    fn received(&self, after: Option<(u64, EventId)>, limit: usize) -> Result<Vec<(u64, EventId)>, StoreError> {
        let from = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        Ok(self.by_time.range((from, std::ops::Bound::Unbounded)).take(limit).copied().collect())
    }

    fn counts(&self) -> Result<StoreCounts, StoreError> {
        let bytes = self.events.values().chain(self.deliveries.values()).map(|r| r.len() as u64).sum();
        Ok(StoreCounts { events: self.events.len() as u64, deliveries: self.deliveries.len() as u64, bytes })
    }
}

/// A store that answers its counts (nothing held) and fails every read
/// with its message: a disk gone bad, for the tests of what the history,
/// the state machine and the API do then.
#[derive(Debug, Clone)]
pub struct FailingStore(pub String);

impl FailingStore {
    fn failed<T>(&self) -> Result<T, StoreError> {
        Err(StoreError(self.0.clone()))
    }
}

impl HistoryStore for FailingStore {
    fn event(&self, _: &EventId) -> Result<Option<Vec<u8>>, StoreError> {
        self.failed()
    }

    fn delivery(&self, _: &DeliveryId) -> Result<Option<Vec<u8>>, StoreError> {
        self.failed()
    }

    fn events(&self, _: IdRange<EventId>, _: bool, _: usize) -> Result<Vec<(EventId, Vec<u8>)>, StoreError> {
        self.failed()
    }

    fn deliveries(&self, _: IdRange<DeliveryId>, _: bool, _: usize) -> Result<Vec<(DeliveryId, Vec<u8>)>, StoreError> {
        self.failed()
    }

    fn dead(&self, _: &EndpointId, _: IdRange<DeliveryId>, _: bool, _: usize) -> Result<Vec<DeliveryId>, StoreError> {
        self.failed()
    }

    fn received(&self, _: Option<(u64, EventId)>, _: usize) -> Result<Vec<(u64, EventId)>, StoreError> {
        self.failed()
    }

    fn counts(&self) -> Result<StoreCounts, StoreError> {
        Ok(StoreCounts::default())
    }
}
