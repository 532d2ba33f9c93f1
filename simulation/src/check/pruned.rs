//! Retention forgets only finished work: a `Prune`'s cut-off is at least
//! the retention before the time it was proposed at, every event it
//! removes was received before that cut-off, and every delivery it had is
//! delivered, dead or ignored as stale, and a prune removes nothing else.
//! Checked on every node as it applies, from the records the apply took
//! out (kept beside the state until the state machine drops them),
//! independently of how `apply` chose them.
//!
//! The records it saw are kept: the other checkers look up an
//! acknowledged event that is no longer in the state here, and accept its
//! absence only when it was pruned this way.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Mutex;

use hookraft_core::command::{Command, Response};
use hookraft_core::ids::{DeliveryId, EventId};
use hookraft_core::inbound::Inbound;
use hookraft_core::model::{Delivery, DeliveryState};
use hookraft_core::state::ClusterState;

use super::{Violation, holds_delivery};
use crate::cluster::RETENTION_MS;
use crate::trace::Trace;

/// An event as a `Prune` removed it, with its deliveries as they were.
#[derive(Debug, Clone)]
pub struct PrunedEvent {
    pub received_at_ms: u64,
    pub idempotency_key: Option<String>,
    /// What an inbound event carried (its source, provider id, entity key
    /// and version).
    pub inbound: Option<Box<Inbound>>,
    pub deliveries: BTreeMap<DeliveryId, Delivery>,
}

/// What the prunes of a run removed, first as seen on any node.
#[derive(Debug, Clone, Default)]
pub struct Pruned {
    pub events: BTreeMap<EventId, PrunedEvent>,
    /// The event each pruned delivery was pruned with.
    by_delivery: BTreeMap<DeliveryId, EventId>,
}

impl Pruned {
    /// The delivery as it was pruned, if it was.
    pub fn delivery(&self, id: &DeliveryId) -> Option<&Delivery> {
        self.events.get(self.by_delivery.get(id)?)?.deliveries.get(id)
    }

    /// The delivery as `state` holds it (at work or in its history), or
    /// else as it was pruned.
    pub fn kept_or_pruned<'a>(&'a self, state: &'a ClusterState, id: &DeliveryId) -> Option<Cow<'a, Delivery>> {
        state.delivery(id).or_else(|| self.delivery(id).map(Cow::Borrowed))
    }

    fn insert(&mut self, id: EventId, record: PrunedEvent) {
        if self.events.contains_key(&id) {
            return;
        }
        self.by_delivery.extend(record.deliveries.keys().map(|d| (*d, id)));
        self.events.insert(id, record);
    }

    /// When the first pruned event that `key` created was received. A
    /// key is free again once its event is pruned, so a producer's retry
    /// that outlived the retention made a second event under it.
    pub fn received_by_key(&self) -> BTreeMap<&str, u64> {
        let mut first = BTreeMap::new();
        for event in self.events.values() {
            if let Some(key) = event.idempotency_key.as_deref() {
                first
                    .entry(key)
                    .and_modify(|at: &mut u64| *at = (*at).min(event.received_at_ms))
                    .or_insert(event.received_at_ms);
            }
        }
        first
    }
}

/// Every `Prune` in `command`: the time it was proposed at and its cut-off.
fn prunes(command: &Command) -> Vec<(u64, u64)> {
    match command {
        Command::Prune { now_ms, before_ms, .. } => vec![(*now_ms, *before_ms)],
        Command::Batch(commands) => commands.iter().flat_map(prunes).collect(),
        _ => Vec::new(),
    }
}

/// What `response` says the prunes in it removed: (events, deliveries).
fn reported(response: &Response) -> (u64, u64) {
    match response {
        Response::Pruned { events, deliveries } => (u64::from(*events), u64::from(*deliveries)),
        Response::Batch(responses) => responses.iter().map(reported).fold((0, 0), |(e, d), (e2, d2)| (e + e2, d + d2)),
        _ => (0, 0),
    }
}

/// Observes what every node's applies take out of the state.
pub struct PruneTap {
    inner: Mutex<(Pruned, Vec<Violation>)>,
    trace: Trace,
}

impl PruneTap {
    pub fn new(trace: Trace) -> Self {
        Self { inner: Mutex::default(), trace }
    }

    pub fn pruned(&self) -> Pruned {
        self.with(Pruned::clone)
    }

    /// Calls `f` with what was pruned so far.
    pub fn with<T>(&self, f: impl FnOnce(&Pruned) -> T) -> T {
        f(&self.inner.lock().unwrap_or_else(|p| p.into_inner()).0)
    }

    pub fn violations(&self) -> Vec<Violation> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.clone()
    }

    pub fn observe(&self, state: &ClusterState, command: &Command, response: &Response) {
        let retired = state.retired();
        let prunes = prunes(command);
        if retired.is_empty() && prunes.is_empty() {
            return;
        }
        let mut found: Vec<Violation> = prunes
            .iter()
            .filter(|(now_ms, before_ms)| now_ms.saturating_sub(*before_ms) < RETENTION_MS)
            .map(|(now_ms, before_ms)| {
                let detail = format!("a prune at {now_ms} cut off at {before_ms}, less than the retention before it");
                Violation::safety("pruned", detail)
            })
            .collect();
        // The latest cut-off of the entry's prunes.
        let Some(before_ms) = prunes.iter().map(|(_, before_ms)| *before_ms).max() else {
            found.push(Violation::safety(
                "pruned",
                format!(
                    "an apply that holds no Prune took out {} events and {} deliveries",
                    retired.events.len(),
                    retired.deliveries.len()
                ),
            ));
            self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.extend(found);
            return;
        };
        let taken = (retired.events.len() as u64, retired.deliveries.len() as u64);
        if taken != reported(response) {
            found.push(Violation::safety(
                "pruned",
                format!("a prune answered {:?} (events, deliveries) but took out {taken:?}", reported(response)),
            ));
        }
        let mut deliveries: BTreeMap<DeliveryId, &Delivery> = retired.deliveries.iter().map(|d| (d.id, &**d)).collect();
        let mut events = BTreeMap::new();
        for event in &retired.events {
            if event.received_at_ms >= before_ms {
                found.push(Violation::safety(
                    "pruned",
                    format!(
                        "event {} received at {} was pruned with a cut-off of {before_ms}",
                        event.id, event.received_at_ms
                    ),
                ));
            }
            let mut kept = BTreeMap::new();
            for id in &event.deliveries {
                match deliveries.remove(id) {
                    Some(delivery) => {
                        let finished = matches!(
                            delivery.state,
                            DeliveryState::Delivered | DeliveryState::Dead | DeliveryState::IgnoredStale
                        );
                        if !finished {
                            found.push(Violation::safety(
                                "pruned",
                                format!(
                                    "event {} was pruned while its delivery {id} was {}",
                                    event.id,
                                    delivery.state.as_str()
                                ),
                            ));
                        }
                        kept.insert(*id, delivery.clone());
                    }
                    None if holds_delivery(state, id) => found.push(Violation::safety(
                        "pruned",
                        format!("event {} was pruned but its delivery {id} stayed", event.id),
                    )),
                    None => found.push(Violation::safety(
                        "pruned",
                        format!("event {} named a delivery {id} the state did not hold", event.id),
                    )),
                }
            }
            let record = PrunedEvent {
                received_at_ms: event.received_at_ms,
                idempotency_key: event.idempotency_key.as_deref().map(str::to_owned),
                inbound: event.inbound.clone(),
                deliveries: kept,
            };
            events.insert(event.id, record);
        }
        for id in deliveries.keys() {
            found.push(Violation::safety("pruned", format!("delivery {id} was pruned without its event")));
        }
        self.trace.record(format!("apply prune before={before_ms} events={} deliveries={}", taken.0, taken.1));
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for (id, record) in events {
            inner.0.insert(id, record);
        }
        inner.1.extend(found);
    }
}
