//! Moving events between the work in memory and the history
//! (`state/history.rs`), and reading records wherever they are.
//!
//! Every apply notes the events it touched (`touch`); at its end,
//! [`ClusterState::settle`] moves those that are finished into the
//! history, in id order, so every replica moves the same ones at the same
//! point of the log. A command that names a record of the history brings
//! its event back first ([`ClusterState::bring_back`]) and then acts on it
//! as on any event in memory.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;

use super::ClusterState;
use super::history::IdRange;
use super::history_store::{Flush, HistoryStore};
use super::usage::{delivery_bytes, event_bytes};
use crate::ids::{DeliveryId, EndpointId, EventId};
use crate::model::{Delivery, DeliveryState, Event};

impl ClusterState {
    /// Notes that this apply changed `event` or one of its deliveries.
    pub(super) fn touch(&mut self, event: EventId) {
        self.touched.push(event);
    }

    /// Notes the events of `endpoint`'s dead deliveries in memory: a change
    /// to the endpoint (deleted, ordering changed) may have let their keys go.
    pub(super) fn touch_dead_of(&mut self, endpoint: &EndpointId) {
        let Some(dead) = self.dead.get(endpoint) else { return };
        let events: Vec<EventId> = dead.iter().filter_map(|id| self.deliveries.get(id)).map(|d| d.event_id).collect();
        self.touched.extend(events);
    }

    /// Moves every event the apply touched that is finished into the history.
    pub(super) fn settle(&mut self) {
        if self.touched.is_empty() {
            return;
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for id in &touched {
            if self.events.get(id).is_some_and(|event| self.is_finished(event)) {
                self.move_to_history(id);
            }
        }
        touched.clear();
        self.touched = touched;
    }

    /// Moves every finished event in memory into the history, after a
    /// decode. O(state).
    pub(super) fn settle_all(&mut self) {
        self.touched.extend(self.events.keys().copied());
        self.settle();
    }

    /// Whether every delivery of `event` is over and none holds its key.
    pub(super) fn is_finished(&self, event: &Event) -> bool {
        event
            .deliveries
            .iter()
            .all(|id| self.deliveries.get(id).is_none_or(|d| d.state.is_terminal() && !self.holds_its_key(d)))
    }

    fn move_to_history(&mut self, id: &EventId) {
        let Some(event) = self.events.remove(id) else { return };
        let deliveries: Vec<Arc<Delivery>> =
            event.deliveries.iter().filter_map(|d| self.deliveries.remove(d)).collect();
        let mut memory = event_bytes(&event);
        for delivery in &deliveries {
            memory += delivery_bytes(delivery);
            if delivery.state == DeliveryState::Dead {
                self.unmark_dead(&delivery.id, &delivery.endpoint_id);
            }
        }
        let stored = self.history.put(&event, deliveries.iter().map(|d| &**d));
        self.count_bytes(memory, false);
        self.count_bytes(stored, true);
    }

    /// The deliberate bug of `--break prune-active`: an event still at work
    /// is moved into the history (its deliveries out of the active index),
    /// for retention to take.
    #[cfg(feature = "break")]
    pub(super) fn force_into_history(&mut self, id: &EventId) {
        let Some(event) = self.events.get(id) else { return };
        let at_work: Vec<(DeliveryId, EndpointId)> =
            event.deliveries.iter().filter_map(|d| self.deliveries.get(d)).map(|d| (d.id, d.endpoint_id)).collect();
        for (delivery, endpoint) in at_work {
            self.index_delivery(&delivery, &endpoint, false);
        }
        self.move_to_history(id);
    }

    /// Brings an event of the history, with its deliveries, back into
    /// memory, unchanged. Whatever the apply does to it, the end of the
    /// apply settles it again. False when the history has no such event.
    pub(super) fn bring_back(&mut self, id: &EventId) -> bool {
        let Some((event, deliveries, stored)) = self.history.take(id) else { return false };
        self.count_bytes(stored, false);
        self.count_bytes(event_bytes(&event), true);
        for delivery in deliveries {
            self.count_bytes(delivery_bytes(&delivery), true);
            if delivery.state == DeliveryState::Dead {
                self.dead.entry(delivery.endpoint_id).or_default().insert(delivery.id);
            }
            self.deliveries.insert(delivery.id, Arc::new(delivery));
        }
        self.events.insert(*id, Box::new(event));
        self.touch(*id);
        true
    }

    /// Brings back the event of a delivery of the history, if it is there.
    pub(super) fn bring_back_delivery(&mut self, id: &DeliveryId) -> bool {
        if self.deliveries.contains_key(id) {
            return false;
        }
        self.history.event_of(id).is_some_and(|event| self.bring_back(&event))
    }

    /// The finished events and deliveries, encoded.
    pub fn history(&self) -> &super::History {
        &self.history
    }

    /// Keeps the history's records in `store` from now on (see
    /// [`History::attach`](super::History::attach)): the state then encodes
    /// only what its history counts, and the store must be written in the
    /// same transaction as that encoding.
    pub fn attach_history(&mut self, store: Arc<dyn HistoryStore>) -> Result<(), String> {
        self.history.attach(store)
    }

    /// Starts a flush of the history's changes to its store
    /// ([`History::seal`](super::History::seal)); call it together with
    /// the clone of the state to be encoded beside the flush, under one lock.
    pub fn seal_history(&mut self) -> Flush {
        self.history.seal()
    }

    /// The store committed the last sealed flush
    /// ([`History::flushed`](super::History::flushed)).
    pub fn history_flushed(&mut self, store: Arc<dyn HistoryStore>) {
        self.history.flushed(store);
    }

    /// An event, in memory or in the history.
    pub fn event(&self, id: &EventId) -> Option<Cow<'_, Event>> {
        match self.events.get(id) {
            Some(event) => Some(Cow::Borrowed(&**event)),
            None => self.history.event(id).map(Cow::Owned),
        }
    }

    /// A delivery, in memory or in the history.
    pub fn delivery(&self, id: &DeliveryId) -> Option<Cow<'_, Delivery>> {
        match self.deliveries.get(id) {
            Some(delivery) => Some(Cow::Borrowed(&**delivery)),
            None => self.history.delivery(id).map(Cow::Owned),
        }
    }

    /// The deliveries of `event`, in its order, wherever they are (an
    /// event and its deliveries are always in the same place).
    pub fn deliveries_of(&self, event: &Event) -> Vec<Cow<'_, Delivery>> {
        event.deliveries.iter().filter_map(|id| self.delivery(id)).collect()
    }

    /// Whether an event with this id is stored, in memory or history.
    pub fn has_event(&self, id: &EventId) -> bool {
        self.events.contains_key(id) || self.history.contains_event(id)
    }

    /// Events stored, in memory and history.
    pub fn event_count(&self) -> usize {
        self.events.len() + self.history.event_count()
    }

    /// Deliveries stored, in memory and history.
    pub fn delivery_count(&self) -> usize {
        self.deliveries.len() + self.history.delivery_count()
    }

    /// Events with ids in `range`, from memory and history, in id order or
    /// newest first.
    pub fn events_in(&self, range: IdRange<EventId>, newest_first: bool) -> impl Iterator<Item = Cow<'_, Event>> + '_ {
        let memory = self.events.range(range).map(|(_, e)| Cow::Borrowed(&**e));
        let memory: Box<dyn Iterator<Item = Cow<'_, Event>>> =
            if newest_first { Box::new(memory.rev()) } else { Box::new(memory) };
        let history = self.history.events_in(range, newest_first).map(Cow::Owned);
        merged(memory, history, |e| e.id, newest_first)
    }

    /// Deliveries with ids in `range`, from memory and history, in id order
    /// or newest first.
    pub fn deliveries_in(
        &self,
        range: IdRange<DeliveryId>,
        newest_first: bool,
    ) -> impl Iterator<Item = Cow<'_, Delivery>> + '_ {
        let memory = self.deliveries.range(range).map(|(_, d)| Cow::Borrowed(&**d));
        let memory: Box<dyn Iterator<Item = Cow<'_, Delivery>>> =
            if newest_first { Box::new(memory.rev()) } else { Box::new(memory) };
        let history = self.history.deliveries_in(range, newest_first).map(Cow::Owned);
        merged(memory, history, |d| d.id, newest_first)
    }

    /// The dead deliveries of `endpoint` with ids above `after` (all of
    /// them without one), in id order, in memory and history, from the
    /// indexes: no other delivery is looked at.
    pub fn dead_of(&self, endpoint: &EndpointId, after: Option<&DeliveryId>) -> impl Iterator<Item = DeliveryId> + '_ {
        let range = (after.map_or(Bound::Unbounded, |id| Bound::Excluded(*id)), Bound::Unbounded);
        self.dead_in(endpoint, range, false)
    }

    /// The dead deliveries of `endpoint` with ids below `before` (all of
    /// them without one), newest first, in memory and history.
    pub fn dead_of_newest_first(
        &self,
        endpoint: &EndpointId,
        before: Option<&DeliveryId>,
    ) -> impl Iterator<Item = DeliveryId> + '_ {
        let range = (Bound::Unbounded, before.map_or(Bound::Unbounded, |id| Bound::Excluded(*id)));
        self.dead_in(endpoint, range, true)
    }

    fn dead_in(
        &self,
        endpoint: &EndpointId,
        range: IdRange<DeliveryId>,
        newest_first: bool,
    ) -> impl Iterator<Item = DeliveryId> + '_ {
        let memory = self.dead.get(endpoint).into_iter().flat_map(move |set| set.range(range).copied());
        let memory: Box<dyn Iterator<Item = DeliveryId>> =
            if newest_first { Box::new(memory.rev()) } else { Box::new(memory) };
        merged(memory, self.history.dead_of(endpoint, range, newest_first), |id| *id, newest_first)
    }
}

/// Two iterators sorted by `key` (ascending, or descending when
/// `descending`) merged into one sorted the same way. A key in both comes
/// once, from `a`.
pub(crate) fn merged<'a, T: 'a, K: Ord + 'a>(
    a: impl Iterator<Item = T> + 'a,
    b: impl Iterator<Item = T> + 'a,
    key: impl Fn(&T) -> K + 'a,
    descending: bool,
) -> impl Iterator<Item = T> + 'a {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || {
        let order = match (a.peek(), b.peek()) {
            (None, None) => return None,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = key(x).cmp(&key(y));
                if descending { order.reverse() } else { order }
            }
        };
        match order {
            std::cmp::Ordering::Less => a.next(),
            std::cmp::Ordering::Greater => b.next(),
            std::cmp::Ordering::Equal => {
                b.next();
                a.next()
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::merged;

    #[test]
    fn merging_keeps_the_order_and_takes_a_shared_key_once() {
        let up: Vec<u32> = merged([1, 4, 5].into_iter(), [2, 4, 9].into_iter(), |x| *x, false).collect();
        assert_eq!(up, vec![1, 2, 4, 5, 9]);
        let down: Vec<u32> = merged([5, 4, 1].into_iter(), [9, 4, 2].into_iter(), |x| *x, true).collect();
        assert_eq!(down, vec![9, 5, 4, 2, 1]);
        let one_side: Vec<u32> = merged(std::iter::empty(), [3, 7].into_iter(), |x| *x, false).collect();
        assert_eq!(one_side, vec![3, 7]);
    }
}
