//! The endpoint actor's queue: deliveries ordered by when their next attempt
//! is due. Pure data structure; the actor supplies time and the replicated
//! state.
//!
//! A queued delivery is one of two kinds:
//!
//! - **loaded**: queued as the replicated state has it. The queue keeps only
//!   its due time and id (24 bytes, the one index entry a backlog costs); its
//!   counters are read from the state when it comes up.
//! - **local**: queued again by the actor after an attempt (a retry, or an
//!   attempt abandoned or superseded). Outcomes reach the state in batches,
//!   so the state may not have its counters yet: the queue keeps them.
//!
//! An index entry is a `(due, id)` pair. A loaded entry whose due time no
//! longer matches the state's is moved to the state's by the actor when it
//! comes up, and an entry for a delivery the actor holds locally at another
//! due time is a leftover and is dropped when it comes up: each delivery is
//! attempted once per entry that is really its own.

use std::collections::BTreeMap;

use hookraft_core::dense::DenseSet;
use hookraft_core::ids::{DeliveryId, EndpointId};
use hookraft_core::model::Delivery;

/// A queued delivery with the counters of its next attempt.
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

/// The earliest entry of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// Queued as the state has it: read its counters there, and check that
    /// the state still has it due at `due_ms`.
    Loaded { id: DeliveryId, due_ms: u64 },
    /// Queued by the actor, with the counters of its next attempt.
    Local(QueuedDelivery),
}

impl Head {
    pub fn id(&self) -> DeliveryId {
        match self {
            Head::Loaded { id, .. } => *id,
            Head::Local(queued) => queued.id,
        }
    }

    pub fn due_ms(&self) -> u64 {
        match self {
            Head::Loaded { due_ms, .. } => *due_ms,
            Head::Local(queued) => queued.due_ms,
        }
    }
}

/// What to do with the queue's earliest entry, once it is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Attempt it, with these counters.
    Attempt(QueuedDelivery),
    /// Pop it: in flight already, finished, or no longer this endpoint's.
    Drop,
    /// Pop it and queue it as loaded at this time: the state has moved it.
    Move { due_ms: u64 },
}

/// Decides what becomes of the earliest entry, given what the replicated
/// state holds for its delivery (`None` if nothing) and whether an attempt
/// of it is in flight here. Pure: the actor reads the state and applies the
/// answer.
///
/// - A delivery in flight, finished or not this endpoint's is dropped.
/// - A local entry is attempted with its own counters: the state may not
///   have the outcome of the attempt that queued it yet.
/// - A loaded entry is attempted with the state's counters if the state
///   still has it due at the entry's time. Otherwise an outcome for it was
///   applied after it was loaded (one an earlier actor of the endpoint
///   reported), and it moves to the state's time, where a reload may have
///   queued it already.
pub fn resolve(head: Head, in_flight: bool, delivery: Option<&Delivery>, endpoint_id: &EndpointId) -> Resolution {
    let Some(delivery) = delivery.filter(|d| !in_flight && is_active_for(d, endpoint_id)) else {
        return Resolution::Drop;
    };
    match head {
        Head::Local(queued) => Resolution::Attempt(queued),
        Head::Loaded { id, due_ms } => {
            let state_due_ms = loaded_due_ms(delivery);
            if state_due_ms != due_ms {
                return Resolution::Move { due_ms: state_due_ms };
            }
            Resolution::Attempt(QueuedDelivery {
                id,
                due_ms,
                attempt_count: delivery.attempt_count,
                cycle_attempts: delivery.cycle_attempts,
                cycle_started_at_ms: delivery.cycle_started_at_ms,
            })
        }
    }
}

/// Whether the delivery still waits for an attempt to `endpoint_id`: not
/// finished, and that endpoint's.
pub fn is_active_for(delivery: &Delivery, endpoint_id: &EndpointId) -> bool {
    !delivery.state.is_terminal() && delivery.endpoint_id == *endpoint_id
}

/// The time a delivery is queued at when loaded from the state: its next
/// attempt's, or at once if it has none.
pub fn loaded_due_ms(delivery: &Delivery) -> u64 {
    delivery.next_attempt_at_ms.get().unwrap_or(0)
}

/// Deliveries waiting for an attempt, earliest first. The index is kept
/// dense: a backlog's deliveries arrive in id order, due when created.
#[derive(Debug, Default)]
pub struct DeliveryQueue {
    by_due: DenseSet<(u64, DeliveryId)>,
    /// Local entries, with the counters of their next attempt.
    local: BTreeMap<DeliveryId, QueuedDelivery>,
}

impl DeliveryQueue {
    /// Queues a delivery as the state has it, due at `due_ms`. Does nothing
    /// if the actor holds it locally: its own counters are the newer.
    pub fn push_loaded(&mut self, id: DeliveryId, due_ms: u64) {
        if !self.local.contains_key(&id) {
            self.by_due.insert((due_ms, id));
        }
    }

    /// Queues a delivery with the actor's own counters, moving it if the
    /// actor held it locally already.
    pub fn push(&mut self, delivery: QueuedDelivery) {
        let key = (delivery.due_ms, delivery.id);
        if let Some(old) = self.local.insert(delivery.id, delivery) {
            self.by_due.remove(&(old.due_ms, old.id));
        }
        self.by_due.insert(key);
    }

    /// Whether the delivery is queued, held locally or loaded at the due
    /// time the state gives it.
    pub fn contains(&self, id: &DeliveryId, loaded_due_ms: u64) -> bool {
        self.local.contains_key(id) || self.by_due.contains(&(loaded_due_ms, *id))
    }

    /// Index entries, a leftover not yet dropped included.
    pub fn len(&self) -> usize {
        self.by_due.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_due.is_empty()
    }

    /// The earliest entry, dropping leftovers on the way.
    pub fn head(&mut self) -> Option<Head> {
        loop {
            let &(due_ms, id) = self.by_due.first()?;
            match self.local.get(&id) {
                None => return Some(Head::Loaded { id, due_ms }),
                Some(queued) if queued.due_ms == due_ms => return Some(Head::Local(queued.clone())),
                Some(_) => {
                    self.by_due.pop_first();
                }
            }
        }
    }

    /// Removes the earliest entry (the one [`head`](Self::head) returned).
    pub fn pop_head(&mut self) {
        if let Some((due_ms, id)) = self.by_due.pop_first()
            && self.local.get(&id).is_some_and(|queued| queued.due_ms == due_ms)
        {
            self.local.remove(&id);
        }
    }

    pub fn clear(&mut self) {
        self.by_due.clear();
        self.local.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookraft_core::model::DeliveryState;
    use rand::SeedableRng;

    fn local(id: &DeliveryId, due_ms: u64, attempt_count: u32) -> QueuedDelivery {
        QueuedDelivery { id: *id, due_ms, attempt_count, cycle_attempts: attempt_count, cycle_started_at_ms: 1 }
    }

    fn ids(n: usize) -> Vec<DeliveryId> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        (0..n).map(|i| DeliveryId::generate(i as u64, &mut rng)).collect()
    }

    /// Takes every entry in order, as the actor would once all are due.
    fn drain(queue: &mut DeliveryQueue) -> Vec<Head> {
        let mut taken = Vec::new();
        while let Some(head) = queue.head() {
            queue.pop_head();
            taken.push(head);
        }
        taken
    }

    #[test]
    fn comes_out_in_due_order_whatever_the_kind() {
        let ids = ids(3);
        let mut queue = DeliveryQueue::default();
        queue.push_loaded(ids[0], 30);
        queue.push(local(&ids[1], 10, 2));
        queue.push_loaded(ids[2], 20);
        assert_eq!(queue.len(), 3);
        assert_eq!(
            drain(&mut queue),
            vec![
                Head::Local(local(&ids[1], 10, 2)),
                Head::Loaded { id: ids[2], due_ms: 20 },
                Head::Loaded { id: ids[0], due_ms: 30 },
            ]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn head_leaves_the_entry_queued_until_it_is_popped() {
        let ids = ids(1);
        let mut queue = DeliveryQueue::default();
        queue.push_loaded(ids[0], 5);
        assert_eq!(queue.head(), Some(Head::Loaded { id: ids[0], due_ms: 5 }));
        assert_eq!(queue.head(), Some(Head::Loaded { id: ids[0], due_ms: 5 }));
        queue.pop_head();
        assert_eq!(queue.head(), None);
    }

    #[test]
    fn pushing_a_local_delivery_again_moves_it_instead_of_duplicating() {
        let ids = ids(1);
        let mut queue = DeliveryQueue::default();
        queue.push(local(&ids[0], 50, 1));
        queue.push(local(&ids[0], 5, 2));
        assert_eq!(queue.len(), 1);
        assert_eq!(drain(&mut queue), vec![Head::Local(local(&ids[0], 5, 2))]);
    }

    #[test]
    fn loading_a_delivery_twice_at_one_due_time_queues_it_once() {
        let ids = ids(1);
        let mut queue = DeliveryQueue::default();
        queue.push_loaded(ids[0], 7);
        assert!(queue.contains(&ids[0], 7));
        assert!(!queue.contains(&ids[0], 8), "a loaded entry is found at its own due time only");
        queue.push_loaded(ids[0], 7);
        assert_eq!(drain(&mut queue), vec![Head::Loaded { id: ids[0], due_ms: 7 }]);
    }

    #[test]
    fn a_local_delivery_is_not_loaded_again_and_is_found_at_any_due_time() {
        let ids = ids(1);
        let mut queue = DeliveryQueue::default();
        queue.push(local(&ids[0], 40, 3));
        assert!(queue.contains(&ids[0], 0));
        queue.push_loaded(ids[0], 10);
        assert_eq!(drain(&mut queue), vec![Head::Local(local(&ids[0], 40, 3))]);
    }

    #[test]
    fn a_loaded_entry_left_over_by_a_local_one_is_dropped_without_coming_up() {
        let ids = ids(2);
        let mut queue = DeliveryQueue::default();
        queue.push_loaded(ids[0], 10);
        queue.push_loaded(ids[1], 20);
        // The actor queues ids[0] itself, due later: the loaded entry at 10
        // is a leftover and must not come up as a second entry of ids[0].
        queue.push(local(&ids[0], 30, 1));
        assert_eq!(
            drain(&mut queue),
            vec![Head::Loaded { id: ids[1], due_ms: 20 }, Head::Local(local(&ids[0], 30, 1))]
        );
        assert!(queue.is_empty());
    }

    #[test]
    fn a_local_entry_at_a_loaded_entrys_due_time_is_one_entry() {
        let ids = ids(1);
        let mut queue = DeliveryQueue::default();
        queue.push_loaded(ids[0], 10);
        queue.push(local(&ids[0], 10, 4));
        assert_eq!(queue.len(), 1);
        assert_eq!(drain(&mut queue), vec![Head::Local(local(&ids[0], 10, 4))]);
        queue.push_loaded(ids[0], 10);
        assert_eq!(drain(&mut queue), vec![Head::Loaded { id: ids[0], due_ms: 10 }], "popping forgot the counters");
    }

    #[test]
    fn clear_empties_both_kinds() {
        let ids = ids(2);
        let mut queue = DeliveryQueue::default();
        queue.push_loaded(ids[0], 1);
        queue.push(local(&ids[1], 2, 1));
        queue.clear();
        assert!(queue.is_empty());
        assert!(!queue.contains(&ids[1], 2));
        queue.push_loaded(ids[1], 2);
        assert_eq!(drain(&mut queue), vec![Head::Loaded { id: ids[1], due_ms: 2 }]);
    }

    fn delivery(id: DeliveryId, endpoint_id: EndpointId, next_attempt: Option<u64>) -> Delivery {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        Delivery {
            id,
            event_id: hookraft_core::ids::EventId::generate(1, &mut rng),
            endpoint_id,
            state: DeliveryState::Retrying,
            initial_state: DeliveryState::Pending,
            attempt_count: 5,
            cycle_attempts: 2,
            sequence: 0,
            cycle_started_at_ms: 100,
            next_attempt_at_ms: next_attempt.into(),
            created_at_ms: 1,
            updated_at_ms: 90,
            history: Box::default(),
        }
    }

    fn endpoint() -> EndpointId {
        EndpointId::generate(1, &mut rand::rngs::StdRng::seed_from_u64(8))
    }

    #[test]
    fn a_loaded_entry_due_when_the_state_says_is_attempted_with_the_states_counters() {
        let (id, endpoint) = (ids(1)[0], endpoint());
        let d = delivery(id, endpoint, Some(40));
        assert_eq!(
            resolve(Head::Loaded { id, due_ms: 40 }, false, Some(&d), &endpoint),
            Resolution::Attempt(QueuedDelivery {
                id,
                due_ms: 40,
                attempt_count: 5,
                cycle_attempts: 2,
                cycle_started_at_ms: 100
            })
        );
    }

    #[test]
    fn a_loaded_entry_the_state_has_moved_moves_with_it() {
        let (id, endpoint) = (ids(1)[0], endpoint());
        // Loaded due at 40; an earlier actor's retry outcome then moved it to 900.
        let d = delivery(id, endpoint, Some(900));
        assert_eq!(
            resolve(Head::Loaded { id, due_ms: 40 }, false, Some(&d), &endpoint),
            Resolution::Move { due_ms: 900 }
        );
        let unscheduled = delivery(id, endpoint, None);
        assert_eq!(
            resolve(Head::Loaded { id, due_ms: 40 }, false, Some(&unscheduled), &endpoint),
            Resolution::Move { due_ms: 0 }
        );
    }

    #[test]
    fn a_local_entry_keeps_its_own_counters_whatever_the_state_says() {
        let (id, endpoint) = (ids(1)[0], endpoint());
        let d = delivery(id, endpoint, Some(40));
        let own = local(&id, 70, 6);
        assert_eq!(resolve(Head::Local(own.clone()), false, Some(&d), &endpoint), Resolution::Attempt(own));
    }

    #[test]
    fn an_entry_in_flight_finished_gone_or_of_another_endpoint_is_dropped() {
        let (id, endpoint) = (ids(1)[0], endpoint());
        let pending = delivery(id, endpoint, Some(40));
        let heads = [Head::Loaded { id, due_ms: 40 }, Head::Local(local(&id, 40, 1))];
        for head in heads {
            assert_eq!(resolve(head.clone(), true, Some(&pending), &endpoint), Resolution::Drop, "in flight");
            assert_eq!(resolve(head.clone(), false, None, &endpoint), Resolution::Drop, "not in the state");
            for finished in [DeliveryState::Delivered, DeliveryState::Dead] {
                let d = Delivery { state: finished, ..delivery(id, endpoint, None) };
                assert_eq!(resolve(head.clone(), false, Some(&d), &endpoint), Resolution::Drop, "{finished:?}");
            }
            let other = EndpointId::generate(2, &mut rand::rngs::StdRng::seed_from_u64(9));
            assert_eq!(resolve(head.clone(), false, Some(&pending), &other), Resolution::Drop, "another endpoint's");
        }
    }
}
