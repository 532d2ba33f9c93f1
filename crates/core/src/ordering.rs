//! Ordered delivery per key: the pure queue of each (endpoint, key) pair.
//!
//! An endpoint that opts into ordering delivers the events of one key in
//! the order they were committed: each gets the key's next sequence number
//! (gap-free, from 1), and only the key's *head*, its lowest unsettled
//! sequence, may be attempted. Keys are independent of each other.
//!
//! Each run of a key has an **epoch**: the creation time (ms) of the
//! delivery that started it. A key forgotten (retention took its last
//! delivery, or its endpoint stopped ordering) starts again at sequence 1
//! in a later epoch, so a receiver that compares `(epoch, sequence)` tells
//! a new run from an old event ([`KeyOrder::epoch_ms`]).
//!
//! When the head is dead-lettered, [`OnDead`] decides: `Block` keeps it as
//! the head, blocking the key until it is replayed or skipped; `Skip`
//! settles it and lets the next one go. A replayed delivery goes back in
//! its sequence's place. A key with nothing waiting keeps only its last
//! sequence number, until retention forgets the last of its deliveries.
//!
//! Nothing here reads a clock or knows about shards: the replicated state
//! applies these operations in log order, so every replica holds the same
//! queues, and the endpoint's owner asks [`OrderedKeys::may_attempt`].
//! The state keeps one [`OrderedKeys`], placing each ordered delivery by
//! its record after every change ([`OrderedKeys::place`]).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::ids::DeliveryId;

/// Where a delivery stands in its key's queue, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Not settled: it waits for its turn, or is the head.
    Waiting,
    /// Dead under `Block`, neither replayed nor skipped: it blocks the key
    /// when it is first.
    Blocking,
    /// Delivered, skipped, or dead under `Skip`: out of the queue.
    Passed,
}

/// What the dead head of a key does to the deliveries behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OnDead {
    /// It stays the head: the key waits until it is replayed or skipped.
    #[default]
    Block,
    /// It is settled as it is, and the next delivery of the key goes.
    Skip,
}

/// One key's order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyOrder {
    /// When this run of the key started: the creation time of the delivery
    /// that made the queue.
    epoch_ms: u64,
    /// The last sequence number given out (0: none yet).
    last_sequence: u64,
    /// Unsettled deliveries in sequence order; the first is the head. A
    /// dead one stays (under `Block`) until it is replayed or skipped, and
    /// blocks the key while it is first.
    waiting: VecDeque<Waiting>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Waiting {
    sequence: u64,
    delivery: DeliveryId,
    dead: bool,
}

impl KeyOrder {
    fn starting(epoch_ms: u64) -> Self {
        Self { epoch_ms, ..Self::default() }
    }

    pub fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    /// When this run of the key started (ms): later for every new run.
    pub fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }

    /// The delivery that may go next and its sequence, unless the key is
    /// blocked or has nothing waiting.
    pub fn head(&self) -> Option<(u64, DeliveryId)> {
        self.waiting.front().filter(|w| !w.dead).map(|w| (w.sequence, w.delivery))
    }

    /// The dead head that blocks the key, if it is blocked.
    pub fn blocked_by(&self) -> Option<(u64, DeliveryId)> {
        self.waiting.front().filter(|w| w.dead).map(|w| (w.sequence, w.delivery))
    }

    /// Deliveries waiting, dead ones that block included.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn position(&self, delivery: &DeliveryId) -> Option<usize> {
        self.waiting.iter().position(|w| w.delivery == *delivery)
    }
}

/// Every ordered key of the endpoints, by `K` (an endpoint and a key).
/// Encoded in snapshots as it is: a key's last sequence outlives the
/// records it was counted from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(serialize = "K: Serialize", deserialize = "K: Deserialize<'de> + Ord"))]
pub struct OrderedKeys<K: Ord> {
    keys: BTreeMap<K, KeyOrder>,
}

impl<K: Ord> Default for OrderedKeys<K> {
    fn default() -> Self {
        Self { keys: BTreeMap::new() }
    }
}

impl<K: Ord + Clone> OrderedKeys<K> {
    pub fn get(&self, key: &K) -> Option<&KeyOrder> {
        self.keys.get(key)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Gives `delivery` the key's next sequence number and queues it last;
    /// a key not held starts a run of epoch `created_ms`, the delivery's
    /// creation time.
    pub fn enqueue(&mut self, key: K, delivery: DeliveryId, created_ms: u64) -> u64 {
        let order = self.keys.entry(key).or_insert_with(|| KeyOrder::starting(created_ms));
        order.last_sequence += 1;
        order.waiting.push_back(Waiting { sequence: order.last_sequence, delivery, dead: false });
        order.last_sequence
    }

    /// Whether `delivery` of `key` may be attempted now: it is the head of
    /// an unblocked key.
    pub fn may_attempt(&self, key: &K, delivery: &DeliveryId) -> bool {
        self.keys.get(key).and_then(KeyOrder::head).is_some_and(|(_, head)| head == *delivery)
    }

    /// Retention forgot the last delivery of the key the state held (of
    /// any run of it): when nothing of the key waits, the key is forgotten
    /// too, and a later event of the key starts again at 1. Not before:
    /// a delivery still held could be replayed into its sequence's place,
    /// and two runs of one key would share their numbers.
    pub fn forgotten(&mut self, key: &K) {
        if self.keys.get(key).is_some_and(|order| order.waiting.is_empty()) {
            self.keys.remove(key);
        }
    }

    /// Puts a delivery of `sequence` where its record says it stands (the
    /// key's last sequence follows the highest seen). What the state calls
    /// after each change of an ordered delivery, and to rebuild the queues
    /// from the records after a snapshot is decoded. A key not held starts
    /// a run of epoch `created_ms`, the delivery's creation time.
    pub fn place(&mut self, key: K, sequence: u64, delivery: DeliveryId, place: Place, created_ms: u64) {
        let order = self.keys.entry(key).or_insert_with(|| KeyOrder::starting(created_ms));
        order.last_sequence = order.last_sequence.max(sequence);
        let at = order.position(&delivery);
        match (place, at) {
            (Place::Passed, Some(at)) => drop(order.waiting.remove(at)),
            (Place::Passed, None) => {}
            (Place::Waiting | Place::Blocking, Some(at)) => order.waiting[at].dead = place == Place::Blocking,
            (Place::Waiting | Place::Blocking, None) => {
                let at = order.waiting.partition_point(|w| w.sequence < sequence);
                order.waiting.insert(at, Waiting { sequence, delivery, dead: place == Place::Blocking });
            }
        }
    }

    /// Forgets every key `belongs` says is of a deleted or unordered endpoint.
    pub fn forget_where(&mut self, mut belongs: impl FnMut(&K) -> bool) {
        self.keys.retain(|key, _| !belongs(key));
    }

    /// Every delivery waiting in a queue: its key, sequence, id, and
    /// whether it is dead (blocking).
    pub fn waiting_entries(&self) -> impl Iterator<Item = (&K, u64, DeliveryId, bool)> {
        self.keys
            .iter()
            .flat_map(|(key, order)| order.waiting.iter().map(move |w| (key, w.sequence, w.delivery, w.dead)))
    }

    /// Keys in order from `from` on, each with the dead head that blocks it
    /// (`None`: not blocked), for a bounded walk.
    pub fn keys_from(&self, from: std::ops::Bound<&K>) -> impl Iterator<Item = (&K, Option<(u64, DeliveryId)>)> {
        self.keys.range((from, std::ops::Bound::Unbounded)).map(|(key, order)| (key, order.blocked_by()))
    }

    /// Keys blocked by a dead head, with that head, in key order.
    pub fn blocked(&self) -> impl Iterator<Item = (&K, (u64, DeliveryId))> {
        self.keys.iter().filter_map(|(key, order)| order.blocked_by().map(|head| (key, head)))
    }
}

#[cfg(test)]
mod tests;
