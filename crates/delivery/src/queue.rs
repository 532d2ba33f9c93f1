//! The endpoint actor's queue: deliveries ordered by when their next attempt
//! is due, each at most once. Pure data structure; the actor supplies time.

use hookraft_core::dense::{DenseMap, DenseSet};
use hookraft_core::ids::DeliveryId;

/// What the actor remembers of a queued delivery between attempts. The
/// replicated state may lag behind (outcomes are batched), so the actor
/// counts attempts itself from the values it loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedDelivery {
    pub id: DeliveryId,
    pub due_ms: u64,
    /// Attempts over the delivery's life, before the next one.
    pub attempt_count: u32,
    /// Attempts in the current cycle (since creation or replay).
    pub cycle_attempts: u32,
    pub cycle_started_at_ms: u64,
}

/// A queued delivery without its id, which is its key: an actor of a
/// down endpoint holds one per pending delivery, and the id is a third of it.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    due_ms: u64,
    attempt_count: u32,
    cycle_attempts: u32,
    cycle_started_at_ms: u64,
}

impl Waiting {
    fn of(delivery: &QueuedDelivery) -> Self {
        let QueuedDelivery { id: _, due_ms, attempt_count, cycle_attempts, cycle_started_at_ms } = *delivery;
        Self { due_ms, attempt_count, cycle_attempts, cycle_started_at_ms }
    }

    fn with_id(self, id: DeliveryId) -> QueuedDelivery {
        let Self { due_ms, attempt_count, cycle_attempts, cycle_started_at_ms } = self;
        QueuedDelivery { id, due_ms, attempt_count, cycle_attempts, cycle_started_at_ms }
    }
}

/// Deliveries waiting for an attempt, earliest first. Both indexes are kept
/// dense: a backlog's deliveries arrive in id order, due when created.
#[derive(Debug, Default)]
pub struct DeliveryQueue {
    by_due: DenseSet<(u64, DeliveryId)>,
    entries: DenseMap<DeliveryId, Waiting>,
}

impl DeliveryQueue {
    /// Adds a delivery, or moves it if it is queued already.
    pub fn push(&mut self, delivery: QueuedDelivery) {
        if let Some(old) = self.entries.insert(delivery.id, Waiting::of(&delivery)) {
            self.by_due.remove(&(old.due_ms, delivery.id));
        }
        self.by_due.insert((delivery.due_ms, delivery.id));
    }

    pub fn contains(&self, id: &DeliveryId) -> bool {
        self.entries.contains_key(id)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// When the earliest delivery is due.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.by_due.first().map(|(due, _)| *due)
    }

    /// Takes the earliest delivery if it is due at `now_ms`.
    pub fn pop_due(&mut self, now_ms: u64) -> Option<QueuedDelivery> {
        let (due, _) = self.by_due.first()?;
        if *due > now_ms {
            return None;
        }
        let (_, id) = self.by_due.pop_first()?;
        self.entries.remove(&id).map(|waiting| waiting.with_id(id))
    }

    pub fn remove(&mut self, id: &DeliveryId) -> Option<QueuedDelivery> {
        let waiting = self.entries.remove(id)?;
        self.by_due.remove(&(waiting.due_ms, *id));
        Some(waiting.with_id(*id))
    }

    pub fn clear(&mut self) {
        self.by_due.clear();
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn queued(id: &DeliveryId, due_ms: u64) -> QueuedDelivery {
        QueuedDelivery { id: *id, due_ms, attempt_count: 0, cycle_attempts: 0, cycle_started_at_ms: 0 }
    }

    fn ids(n: usize) -> Vec<DeliveryId> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        (0..n).map(|i| DeliveryId::generate(i as u64, &mut rng)).collect()
    }

    #[test]
    fn pops_in_due_order_and_only_when_due() {
        let ids = ids(3);
        let mut queue = DeliveryQueue::default();
        queue.push(queued(&ids[0], 30));
        queue.push(queued(&ids[1], 10));
        queue.push(queued(&ids[2], 20));
        assert_eq!(queue.next_due_ms(), Some(10));
        assert_eq!(queue.pop_due(5), None);
        assert_eq!(queue.pop_due(25).unwrap().id, ids[1]);
        assert_eq!(queue.pop_due(25).unwrap().id, ids[2]);
        assert_eq!(queue.pop_due(25), None);
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn pushing_a_queued_delivery_again_moves_it_instead_of_duplicating() {
        let ids = ids(1);
        let mut queue = DeliveryQueue::default();
        queue.push(queued(&ids[0], 50));
        queue.push(queued(&ids[0], 5));
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.pop_due(5).unwrap().due_ms, 5);
        assert!(queue.is_empty());
        assert_eq!(queue.next_due_ms(), None);
    }

    #[test]
    fn remove_takes_an_entry_out_of_both_indexes() {
        let ids = ids(2);
        let mut queue = DeliveryQueue::default();
        queue.push(queued(&ids[0], 1));
        queue.push(queued(&ids[1], 2));
        assert!(queue.remove(&ids[0]).is_some());
        assert!(!queue.contains(&ids[0]));
        assert_eq!(queue.pop_due(10).unwrap().id, ids[1]);
    }

    #[test]
    fn what_comes_out_is_what_went_in() {
        let ids = ids(1);
        let mut queue = DeliveryQueue::default();
        let delivery =
            QueuedDelivery { id: ids[0], due_ms: 7, attempt_count: 3, cycle_attempts: 2, cycle_started_at_ms: 4 };
        queue.push(delivery.clone());
        assert_eq!(queue.remove(&ids[0]), Some(delivery.clone()));
        queue.push(delivery.clone());
        assert_eq!(queue.pop_due(7), Some(delivery));
    }
}
