//! Ordered delivery per key in the replicated state: the per-key queues
//! (`crate::ordering`), kept by every apply that changes an ordered
//! delivery and encoded with the state.
//!
//! A delivery is ordered when it was created for an endpoint with
//! `Ordering::PerKey` from an event with an `ordering_key`: it then has a
//! sequence (from 1, gap-free per endpoint and key). Only its key's head
//! may be attempted ([`ClusterState::may_attempt`]).

use std::collections::BTreeMap;
use std::ops::Bound;

use super::ClusterState;
use crate::command::Response;
use crate::dense::DenseMap;
use crate::ids::{DeliveryId, EndpointId, EventId};
use crate::model::{Delivery, DeliveryState, Endpoint, Event, Ordering, TimelineEntry};
use crate::ordering::{OnDead, Place};

/// An endpoint and an ordering key.
pub type OrderKey = (EndpointId, Box<str>);

/// A blocked key, its dead head's sequence and the head.
pub type BlockedKey = (Box<str>, u64, DeliveryId);

/// Where an ordered delivery stands in its key's queue, from its record.
fn place_of(delivery: &Delivery, on_dead: OnDead) -> Place {
    match delivery.state {
        DeliveryState::Pending | DeliveryState::Attempting | DeliveryState::Retrying => Place::Waiting,
        DeliveryState::Delivered | DeliveryState::IgnoredStale => Place::Passed,
        DeliveryState::Dead => {
            let skipped = matches!(delivery.history.last(), Some(TimelineEntry::Skipped { .. }));
            if on_dead == OnDead::Block && !skipped { Place::Blocking } else { Place::Passed }
        }
    }
}

/// The queue key of an ordered delivery: its endpoint's, if that is still
/// ordered, and its event's `ordering_key`.
fn key_of(
    delivery: &Delivery,
    events: &DenseMap<EventId, Box<Event>>,
    endpoints: &BTreeMap<EndpointId, Endpoint>,
) -> Option<(OrderKey, OnDead)> {
    if delivery.sequence == 0 {
        return None;
    }
    let on_dead = endpoints.get(&delivery.endpoint_id)?.ordering.on_dead()?;
    let key = events.get(&delivery.event_id)?.ordering_key.clone()?;
    Some(((delivery.endpoint_id, key), on_dead))
}

impl ClusterState {
    /// Numbers a delivery just created in its key's order, when its
    /// endpoint is ordered and its event has a key.
    pub(super) fn sequence_new(&mut self, endpoint: &EndpointId, key: Option<&str>, delivery: &mut Delivery) {
        let ordered = self.endpoints.get(endpoint).is_some_and(|e| e.ordering != Ordering::None);
        if let (true, Some(key)) = (ordered, key) {
            let key: OrderKey = (*endpoint, key.into());
            let sequence = self.ordered.enqueue(key.clone(), delivery.id, delivery.created_at_ms);
            delivery.sequence = u32::try_from(sequence).unwrap_or(u32::MAX);
            *self.numbered.entry(key).or_default() += 1;
        }
    }

    /// The key a numbered delivery was numbered in, whatever its endpoint's
    /// ordering now.
    fn numbered_key(delivery: &Delivery, event: &Event) -> Option<OrderKey> {
        let key = event.ordering_key.as_ref().filter(|_| delivery.sequence != 0)?;
        Some((delivery.endpoint_id, key.clone()))
    }

    /// The numbered deliveries of each key, counted from the records.
    pub(super) fn counted_numbered(&self) -> BTreeMap<OrderKey, u32> {
        let mut counted: BTreeMap<OrderKey, u32> = BTreeMap::new();
        for delivery in self.deliveries.values() {
            if let Some(key) = self.events.get(&delivery.event_id).and_then(|e| Self::numbered_key(delivery, e)) {
                *counted.entry(key).or_default() += 1;
            }
        }
        // A finished ordered delivery keeps its number until it is pruned.
        for event in self.history.events().filter(|e| e.ordering_key.is_some()) {
            for delivery in event.deliveries.iter().filter_map(|d| self.history.delivery(d)) {
                if let Some(key) = Self::numbered_key(&delivery, &event) {
                    *counted.entry(key).or_default() += 1;
                }
            }
        }
        counted
    }

    /// Puts an ordered delivery where its record now says, after a change.
    /// A key whose head it makes another delivery (the one before settled,
    /// or was skipped) hands that head to the node to wake: its actor
    /// parked it. Found here, in the apply that moved the key, rather than
    /// after the whole entry: a `Prune` later in the same entry may take
    /// out the settled delivery, and the key with it could not be found
    /// from it any more (simulator, seed 80273).
    pub(super) fn place_ordered(&mut self, id: &DeliveryId) {
        let Some(delivery) = self.deliveries.get(id) else { return };
        if let Some((key, on_dead)) = key_of(delivery, &self.events, &self.endpoints) {
            let place = place_of(delivery, on_dead);
            let head_of = |state: &Self, key: &OrderKey| state.ordered.get(key).and_then(|k| k.head()).map(|(_, h)| h);
            let before = head_of(self, &key);
            self.ordered.place(key.clone(), u64::from(delivery.sequence), *id, place, delivery.created_at_ms);
            let after = head_of(self, &key);
            if let Some(head) = after.filter(|head| after != before && head != id) {
                self.to_wake.0.push((head, key.0));
            }
        }
    }

    /// Retention takes out an ordered delivery (its event is pruned): the
    /// last of its key the state held takes the key with it. Not the one
    /// of the key's last sequence: a delivery before it may still be held
    /// (dead, its event kept by another endpoint's delivery, or a run of
    /// the key before), and a replay of it would number in among the new.
    pub(super) fn forget_ordered(&mut self, delivery: &Delivery, event: &Event) {
        let Some(key) = Self::numbered_key(delivery, event) else { return };
        let Some(count) = self.numbered.get_mut(&key) else { return };
        *count -= 1;
        if *count == 0 {
            self.numbered.remove(&key);
            self.ordered.forgotten(&key);
        }
    }

    /// An endpoint was deleted or stopped ordering: its keys go.
    pub(super) fn forget_ordered_endpoint(&mut self, endpoint: &EndpointId) {
        self.ordered.forget_where(|(e, _)| e == endpoint);
    }

    /// Checks the queues against the records: every waiting delivery exists,
    /// is of its key and waits (or blocks) as its record says.
    pub(super) fn check_ordered(&self) -> Result<(), String> {
        for ((endpoint, key), sequence, id, dead) in self.ordered.waiting_entries() {
            let Some(delivery) = self.deliveries.get(&id) else {
                return Err(format!("ordered key {key:?} of {endpoint} waits on a missing delivery {id}"));
            };
            let Some(((_, its_key), on_dead)) = key_of(delivery, &self.events, &self.endpoints) else {
                return Err(format!("{id} waits in an ordered key but is not ordered"));
            };
            let expected = if dead { Place::Blocking } else { Place::Waiting };
            if *its_key != **key || u64::from(delivery.sequence) != sequence || place_of(delivery, on_dead) != expected
            {
                return Err(format!("{id} waits in key {key:?} at {sequence} as {expected:?}, its record disagrees"));
            }
        }
        Ok(())
    }

    /// Whether `delivery` may be attempted now as far as ordering goes:
    /// it is not ordered, or it is its key's head.
    pub fn may_attempt(&self, delivery: &Delivery) -> bool {
        match key_of(delivery, &self.events, &self.endpoints) {
            Some((key, _)) => self.ordered.may_attempt(&key, &delivery.id),
            None => true,
        }
    }

    /// Whether `delivery` is dead and still holds its place in its key's
    /// queue: under `Block`, neither replayed nor skipped. Retention keeps
    /// it (and its event), as it keeps work still to do: the key waits on
    /// it, and only a replay or a skip may let the key go.
    pub fn holds_its_key(&self, delivery: &Delivery) -> bool {
        delivery.sequence != 0
            && delivery.state == DeliveryState::Dead
            && key_of(delivery, &self.events, &self.endpoints)
                .is_some_and(|(_, on_dead)| place_of(delivery, on_dead) == Place::Blocking)
    }

    /// The head of `delivery`'s key now (to wake once a delivery of the
    /// key settled), if it is ordered and its key has one.
    pub fn key_head(&self, delivery: &Delivery) -> Option<DeliveryId> {
        let (key, _) = key_of(delivery, &self.events, &self.endpoints)?;
        self.ordered.get(&key)?.head().map(|(_, head)| head)
    }

    /// The ordering key of an ordered delivery.
    pub fn ordering_key(&self, delivery: &Delivery) -> Option<&str> {
        if delivery.sequence == 0 {
            return None;
        }
        self.events.get(&delivery.event_id)?.ordering_key.as_deref()
    }

    /// The key of an ordered delivery and the epoch of the run it is
    /// numbered in (its key's queue holds it while it is not settled, and
    /// after, while any delivery of the run is held; 0 without a queue);
    /// `None` for an unordered delivery.
    pub fn ordering_place(&self, delivery: &Delivery) -> Option<(&str, u64)> {
        let key = self.ordering_key(delivery)?;
        let epoch_ms = self.ordered.get(&(delivery.endpoint_id, key.into())).map_or(0, |order| order.epoch_ms());
        Some((key, epoch_ms))
    }

    /// The keys of `endpoint` blocked by a dead head, with that head and its
    /// sequence, in key order after `after`, looking at `scan_max` keys at
    /// most. The second value is the key to go on after when the walk
    /// stopped at its bound.
    pub fn blocked_keys(
        &self,
        endpoint: &EndpointId,
        after: Option<&str>,
        scan_max: usize,
    ) -> (Vec<BlockedKey>, Option<Box<str>>) {
        let start: OrderKey = (*endpoint, after.unwrap_or("").into());
        let from = if after.is_some() { Bound::Excluded(&start) } else { Bound::Included(&start) };
        let mut blocked = Vec::new();
        let mut looked: Option<&Box<str>> = None;
        for (count, ((e, key), head)) in self.ordered.keys_from(from).enumerate() {
            if e != endpoint {
                break;
            }
            if count == scan_max {
                return (blocked, looked.cloned());
            }
            looked = Some(key);
            if let Some((sequence, head)) = head {
                blocked.push((key.clone(), sequence, head));
            }
        }
        (blocked, None)
    }

    /// `SkipBlocked`: the dead head blocking `key` of `endpoint` is marked
    /// skipped, and the key goes on.
    pub(super) fn skip_blocked(&mut self, endpoint: &EndpointId, key: &str, now_ms: u64) -> Response {
        if !self.endpoints.contains_key(endpoint) {
            return Response::NotFound { what: format!("endpoint {endpoint}") };
        }
        let order_key: OrderKey = (*endpoint, key.into());
        let Some((_, head)) = self.ordered.get(&order_key).and_then(|order| order.blocked_by()) else {
            return Response::Conflict {
                detail: format!("ordering key {key:?} of endpoint {endpoint} is not blocked"),
            };
        };
        self.change_delivery(&head, |delivery| {
            delivery.updated_at_ms = now_ms;
            delivery.push_timeline(TimelineEntry::Skipped { at_ms: now_ms });
        });
        let next = self.ordered.get(&order_key).and_then(|order| order.head()).map(|(_, next)| next);
        Response::SkippedBlocked { skipped: head, next }
    }

    /// The endpoint's ordering changed from `before`.
    pub(super) fn ordering_changed(&mut self, endpoint: &EndpointId, before: Ordering) {
        let after = self.endpoints.get(endpoint).map_or(Ordering::None, |e| e.ordering);
        match (before.on_dead(), after.on_dead()) {
            (Some(_), None) => {
                self.forget_ordered_endpoint(endpoint);
                self.touch_dead_of(endpoint);
            }
            // No longer blocking: the dead heads that blocked let their keys go.
            // Each dead delivery is placed by the new rule: under `Skip` the
            // dead heads let their keys go; under `Block` they block them,
            // the finished ones too, which come back from the history.
            (Some(from), Some(to)) if from != to => {
                if to == OnDead::Block {
                    let finished: Vec<DeliveryId> =
                        self.history.dead_of(endpoint, (Bound::Unbounded, Bound::Unbounded), false).collect();
                    for id in finished {
                        if self.history.delivery(&id).is_some_and(|d| d.sequence != 0) {
                            self.bring_back_delivery(&id);
                        }
                    }
                }
                let dead: Vec<DeliveryId> =
                    self.dead.get(endpoint).map(|d| d.iter().copied().collect()).unwrap_or_default();
                for id in dead {
                    self.place_ordered(&id);
                }
                self.touch_dead_of(endpoint);
            }
            _ => {}
        }
    }
}
