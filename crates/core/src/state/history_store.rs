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
