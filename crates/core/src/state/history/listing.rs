//! The history's walks over ranges: events and deliveries by id, an
//! endpoint's dead deliveries, events by the time they were received. Each
//! merges the layers (the newest deciding) with the store's pages.

use std::ops::Bound;

use super::layer::{DeliveryChange, EventChange, Layer};
use super::{Found, History, IdRange, STORE_PAGE};
use crate::ids::{DeliveryId, EndpointId, EventId};
use crate::model::{Delivery, Event};
use crate::state::history_store::HistoryStore;
use crate::state::settle::merged;

/// Walks a store's pages of a range, one page at a time, in either order.
fn paged<'a, K: Copy + 'a, V: 'a>(
    range: IdRange<K>,
    newest_first: bool,
    mut fetch: impl FnMut(IdRange<K>, usize) -> Vec<(K, V)> + 'a,
    key: impl Fn(&(K, V)) -> K + 'a,
) -> impl Iterator<Item = (K, V)> + 'a {
    let mut range = Some(range);
    let mut page = std::collections::VecDeque::new();
    std::iter::from_fn(move || {
        if page.is_empty() {
            let current = range.take()?;
            let rows = fetch(current, STORE_PAGE);
            // A full page: the rest of the range lies past its last row.
            if let Some(last) = rows.last().map(&key)
                && rows.len() == STORE_PAGE
            {
                range = Some(if newest_first {
                    (current.0, Bound::Excluded(last))
                } else {
                    (Bound::Excluded(last), current.1)
                });
            }
            page.extend(rows);
        }
        page.pop_front()
    })
}

impl History {
    /// The records of `range` in every layer and the store, newest layer
    /// first where they overlap, removals dropped.
    fn layered<'a, K: Ord + Copy + 'a>(
        &'a self,
        range: IdRange<K>,
        newest_first: bool,
        in_layer: impl Fn(&'a Layer, IdRange<K>) -> Box<dyn DoubleEndedIterator<Item = (K, Option<Found<'a>>)> + 'a>,
        in_store: impl FnMut(&dyn HistoryStore, IdRange<K>, bool, usize) -> Vec<(K, Vec<u8>)> + 'a,
    ) -> impl Iterator<Item = (K, Found<'a>)> + 'a {
        let walk = move |iter: Box<dyn DoubleEndedIterator<Item = (K, Option<Found<'a>>)> + 'a>| -> Box<dyn Iterator<Item = (K, Option<Found<'a>>)> + 'a> {
            if newest_first { Box::new(iter.rev()) } else { iter }
        };
        let open = walk(in_layer(&self.open, range));
        let sealed: Box<dyn Iterator<Item = (K, Option<Found<'a>>)> + 'a> = match self.sealed.as_deref() {
            Some(layer) => walk(in_layer(layer, range)),
            None => Box::new(std::iter::empty()),
        };
        let store: Box<dyn Iterator<Item = (K, Option<Found<'a>>)> + 'a> = match self.store.as_deref() {
            Some(store) => {
                let mut in_store = in_store;
                let rows =
                    paged(range, newest_first, move |r, limit| in_store(store, r, newest_first, limit), |(k, _)| *k);
                Box::new(rows.map(|(k, bytes)| (k, Some(Found::Read(bytes)))))
            }
            None => Box::new(std::iter::empty()),
        };
        let layers = merged(open, sealed, |(k, _)| *k, newest_first);
        merged(layers, store, |(k, _)| *k, newest_first).filter_map(|(k, found)| found.map(|f| (k, f)))
    }

    /// Events with ids in `range`, in id order or newest first, decoded one
    /// at a time as the caller walks.
    pub fn events_in(&self, range: IdRange<EventId>, newest_first: bool) -> Box<dyn Iterator<Item = Event> + '_> {
        Box::new(self.event_rows(range, newest_first).map(|(_, found)| found.record()))
    }

    pub(super) fn event_rows(
        &self,
        range: IdRange<EventId>,
        newest_first: bool,
    ) -> impl Iterator<Item = (EventId, Found<'_>)> + '_ {
        self.layered(
            range,
            newest_first,
            |layer, range| {
                Box::new(layer.events.range(range).map(|(id, change)| {
                    let found = match change {
                        EventChange::Put { blob, .. } => Some(Found::Held(blob)),
                        EventChange::Removed { .. } => None,
                    };
                    (*id, found)
                }))
            },
            |store, range, newest_first, limit| self.answer(store.events(range, newest_first, limit), Vec::new()),
        )
    }

    /// Deliveries with ids in `range`, as [`events_in`](Self::events_in).
    pub fn deliveries_in(
        &self,
        range: IdRange<DeliveryId>,
        newest_first: bool,
    ) -> Box<dyn Iterator<Item = Delivery> + '_> {
        Box::new(self.delivery_rows(range, newest_first).map(|(_, found)| found.record()))
    }

    pub(super) fn delivery_rows(
        &self,
        range: IdRange<DeliveryId>,
        newest_first: bool,
    ) -> impl Iterator<Item = (DeliveryId, Found<'_>)> + '_ {
        self.layered(
            range,
            newest_first,
            |layer, range| {
                Box::new(layer.deliveries.range(range).map(|(id, change)| {
                    let found = match change {
                        DeliveryChange::Put { blob, .. } => Some(Found::Held(blob)),
                        DeliveryChange::Removed { .. } => None,
                    };
                    (*id, found)
                }))
            },
            |store, range, newest_first, limit| self.answer(store.deliveries(range, newest_first, limit), Vec::new()),
        )
    }

    /// The dead deliveries of `endpoint` with ids in `range`, in id order
    /// or newest first, from the indexes.
    pub fn dead_of(
        &self,
        endpoint: &EndpointId,
        range: IdRange<DeliveryId>,
        newest_first: bool,
    ) -> Box<dyn Iterator<Item = DeliveryId> + '_> {
        let endpoint = *endpoint;
        let rows = self.layered(
            range,
            newest_first,
            move |layer, range| match layer.dead.get(&endpoint) {
                Some(map) => {
                    Box::new(map.range(range).map(|(id, dead)| (*id, dead.then_some(Found::Read(Vec::new())))))
                }
                None => Box::new(std::iter::empty()),
            },
            move |store, range, newest_first, limit| {
                let ids = self.answer(store.dead(&endpoint, range, newest_first, limit), Vec::new());
                ids.into_iter().map(|id| (id, Vec::new())).collect()
            },
        );
        Box::new(rows.map(|(id, _)| id))
    }

    /// How many dead deliveries of `endpoint` the history holds.
    pub fn dead_count_of(&self, endpoint: &EndpointId) -> usize {
        self.counts.dead.get(endpoint).copied().unwrap_or(0) as usize
    }

    /// How many dead deliveries the history holds: one look per endpoint.
    pub fn dead_count(&self) -> usize {
        self.counts.dead.values().sum::<u64>() as usize
    }

    /// The events received before `before_ms`, oldest first.
    pub fn received_before(&self, before_ms: u64) -> impl Iterator<Item = EventId> + '_ {
        fn layer(layer: &Layer) -> Box<dyn Iterator<Item = ((u64, EventId), bool)> + '_> {
            Box::new(layer.by_time.iter().map(|(key, there)| (*key, *there)))
        }
        let sealed: Box<dyn Iterator<Item = ((u64, EventId), bool)> + '_> = match self.sealed.as_deref() {
            Some(sealed) => layer(sealed),
            None => Box::new(std::iter::empty()),
        };
        let store: Box<dyn Iterator<Item = ((u64, EventId), bool)> + '_> = match self.store.as_deref() {
            Some(store) => {
                let mut after = None;
                let mut done = false;
                let mut page = std::collections::VecDeque::new();
                Box::new(std::iter::from_fn(move || {
                    if page.is_empty() && !done {
                        let rows = self.answer(store.received(after, STORE_PAGE), Vec::new());
                        done = rows.len() < STORE_PAGE;
                        after = rows.last().copied();
                        page.extend(rows);
                    }
                    page.pop_front().map(|key| (key, true))
                }))
            }
            None => Box::new(std::iter::empty()),
        };
        let layers = merged(layer(&self.open), sealed, |(k, _)| *k, false);
        merged(layers, store, |(k, _)| *k, false)
            .take_while(move |((at_ms, _), _)| *at_ms < before_ms)
            .filter(|(_, there)| *there)
            .map(|((_, id), _)| id)
    }

    /// Every event, in id order: for checks and tests, O(history).
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        self.events_in((Bound::Unbounded, Bound::Unbounded), false)
    }

    /// Every delivery, in id order: for checks and tests, O(history).
    pub fn deliveries(&self) -> impl Iterator<Item = Delivery> + '_ {
        self.deliveries_in((Bound::Unbounded, Bound::Unbounded), false)
    }
}
