//! Ordered delivery per key, as the receivers saw it.
//!
//! [`OrderingTap`] watches every node's applies and notes each ordered
//! delivery as it is first committed: its endpoint, key and sequence, and
//! the key's *run* it belongs to (a key retention forgot starts again at 1:
//! a new run). Every node applies the same log, so the first node to apply
//! a delivery sees them all in log order, and the tap checks the numbering
//! itself: each run of a key counts 1, 2, 3… without a gap, and a new run
//! starts only once every delivery of the run before is gone from the
//! state (two runs held at once would share their numbers).
//!
//! [`check`] then holds the receivers to the order, per endpoint, key and
//! run, taking requests in the order they arrived:
//! - a request for sequence s + 1 never arrives before a request for s was
//!   answered 2xx, or s was dead-lettered and let its key go (under `skip`,
//!   as soon as it was dead; under `block`, once an operator skipped it),
//!   or the stale guard ended s `ignored_stale` (an inbound event). A
//!   request for a sequence already answered 2xx is a duplicate (a stale
//!   owner's, or a retry after a lost answer) and allowed: delivery is at
//!   least once;
//! - the sequences answered 2xx are gap-free from 1, but for deliveries
//!   that were dead-lettered or ignored as stale;
//! - every request of an ordered delivery (an ordered endpoint, an event
//!   posted with a key) carries its `webhook-sequence` and
//!   `webhook-ordering-key`, as numbered and as posted, and every other
//!   request neither.
//!
//! Whether a delivery was dead-lettered, skipped or ignored is read from its final
//! record (the state's, in memory or in the history, or as retention pruned
//! it): its timeline keeps both, even after a replay.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use hookraft_core::command::{Command, IngestResult, Response};
use hookraft_core::ids::{DeliveryId, EndpointId};
use hookraft_core::model::{Delivery, DeliveryState, TimelineEntry};
use hookraft_core::ordering::OnDead;
use hookraft_core::state::ClusterState;

use super::pruned::Pruned;
use super::{Violation, holds_delivery, listed};
use crate::receivers::SendRecord;
use crate::workload::Ledger;

const CHECKER: &str = "ordering";

/// An endpoint and an ordering key.
type Key = (EndpointId, Box<str>);

/// Where an ordered delivery stands in its key's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numbered {
    pub endpoint: EndpointId,
    pub key: Box<str>,
    /// Which run of the key (from 1): a key retention forgot starts again.
    pub run: u32,
    pub sequence: u64,
}

/// The numbering of every ordered delivery of a simulated run.
#[derive(Debug, Clone, Default)]
pub struct Sequences {
    /// Every ordered delivery, as numbered when first committed.
    pub deliveries: BTreeMap<DeliveryId, Numbered>,
    /// Each key's current run: its number and its deliveries by sequence.
    runs: BTreeMap<Key, (u32, BTreeMap<u64, DeliveryId>)>,
    /// Each run's deliveries by sequence, runs over included.
    by_run: BTreeMap<(Key, u32), BTreeMap<u64, DeliveryId>>,
}

impl Sequences {
    /// Notes a delivery numbered `sequence` in `key` as it is committed,
    /// in log order; `state` is the state just after. Answers what is
    /// wrong with the numbering, if anything.
    pub fn number(
        &mut self,
        id: DeliveryId,
        endpoint: EndpointId,
        key: &str,
        sequence: u64,
        state: &ClusterState,
    ) -> Option<String> {
        let order_key: Key = (endpoint, key.into());
        let (run, sequences) = self.runs.entry(order_key.clone()).or_default();
        let mut wrong = None;
        if sequence == 1 {
            // A new run: the key was forgotten, so nothing of the run before
            // is left in the state, at work or in the history (a replay of
            // it would number among the new).
            if let Some((held_sequence, held)) = sequences.iter().find(|(_, d)| holds_delivery(state, d)) {
                wrong = Some(format!(
                    "{id} of key {key:?} of {endpoint} starts the key again at 1 while #{held_sequence} ({held}) of \
                     it is still in the state"
                ));
            }
            *run += 1;
            sequences.clear();
        } else {
            let last = sequences.last_key_value().map_or(0, |(s, _)| *s);
            if sequence != last + 1 {
                wrong = Some(format!("{id} of key {key:?} of {endpoint} is numbered {sequence} after {last}"));
            }
        }
        sequences.insert(sequence, id);
        let run = (*run).max(1);
        self.by_run.entry((order_key, run)).or_default().insert(sequence, id);
        self.deliveries.insert(id, Numbered { endpoint, key: key.into(), run, sequence });
        wrong
    }

    /// The delivery of `sequence` in the run of `numbered`.
    fn in_run(&self, numbered: &Numbered, sequence: u64) -> Option<DeliveryId> {
        let key = (numbered.endpoint, numbered.key.clone());
        self.by_run.get(&(key, numbered.run))?.get(&sequence).copied()
    }
}

/// Notes ordered deliveries as every node applies their commit.
#[derive(Default)]
pub struct OrderingTap {
    inner: Mutex<(Sequences, Vec<String>, BTreeSet<DeliveryId>)>,
}

impl OrderingTap {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn sequences(&self) -> Sequences {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0.clone()
    }

    pub fn violations(&self) -> Vec<Violation> {
        let found = self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.clone();
        listed(CHECKER, found.into_iter(), "numbering violations")
    }

    pub fn observe(&self, state: &ClusterState, command: &Command, response: &Response) {
        let mut created = Vec::new();
        created_by(command, response, &mut created);
        if created.is_empty() {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (sequences, found, flagged) = &mut *inner;
        for (id, endpoint) in created {
            if sequences.deliveries.contains_key(id) || flagged.contains(id) {
                continue; // seen on a node that applied it first
            }
            // Created by this entry, but maybe finished by it too (ignored
            // as stale at once, or an outcome later in the batch): then in
            // the history.
            let Some(delivery) = state.delivery(id) else { continue };
            let event = state.event(&delivery.event_id);
            let key = event.as_ref().and_then(|e| e.ordering_key.as_deref());
            // The state is the one after the whole entry: an endpoint
            // deleted later in the same batch is not there to say (the
            // workload never changes an endpoint's ordering).
            let ordered = state.endpoints.get(endpoint).map(|e| e.ordering.on_dead().is_some());
            let wrong = match (delivery.sequence, key, ordered) {
                (0, Some(_), Some(true)) => {
                    Some(format!("{id} to {endpoint}, ordered, of a keyed event has no sequence"))
                }
                (0, _, _) => None,
                (sequence, Some(key), Some(true) | None) => {
                    sequences.number(*id, *endpoint, key, u64::from(sequence), state)
                }
                (sequence, _, _) => Some(format!("{id} to {endpoint} is numbered {sequence} but is not ordered")),
            };
            if let Some(detail) = wrong {
                flagged.insert(*id);
                found.push(detail);
            }
        }
    }
}

/// The deliveries `command` created, as `response` names them.
fn created_by<'a>(command: &Command, response: &'a Response, out: &mut Vec<&'a (DeliveryId, EndpointId)>) {
    match (command, response) {
        (Command::Batch(commands), Response::Batch(responses)) => {
            for (command, response) in commands.iter().zip(responses) {
                created_by(command, response, out);
            }
        }
        (Command::IngestEvents { .. } | Command::IngestEventsFrom { .. }, Response::Ingested { results }) => {
            for result in results {
                if let IngestResult::Created { deliveries, .. } = result {
                    out.extend(deliveries.iter());
                }
            }
        }
        _ => {}
    }
}

/// What became of an ordered delivery, from its final record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fate {
    /// It was dead-lettered at some point.
    dead: bool,
    /// An operator skipped it while it blocked its key.
    skipped: bool,
    /// The stale guard ended it unsent (an inbound event whose entity had
    /// a newer version delivered first): its key goes on, whatever the
    /// endpoint's rule for the dead.
    ignored: bool,
}

fn fate(delivery: Option<&Delivery>) -> Fate {
    let Some(delivery) = delivery else { return Fate { dead: false, skipped: false, ignored: false } };
    // Entries a long timeline dropped may have held either: assume they did.
    let truncated = matches!(delivery.history.first(), Some(TimelineEntry::Truncated { .. }));
    let dead = truncated
        || delivery.state == DeliveryState::Dead
        || delivery.history.iter().any(|e| matches!(e, TimelineEntry::Dead { .. }));
    let skipped = truncated || delivery.history.iter().any(|e| matches!(e, TimelineEntry::Skipped { .. }));
    let ignored = truncated
        || delivery.state == DeliveryState::IgnoredStale
        || delivery.history.iter().any(|e| matches!(e, TimelineEntry::IgnoredStale { .. }));
    Fate { dead, skipped, ignored }
}

/// Whether a delivery of this fate, never answered 2xx, lets its key go on.
fn lets_go(fate: Fate, on_dead: OnDead) -> bool {
    let released = match on_dead {
        OnDead::Skip => fate.dead,
        OnDead::Block => fate.skipped,
    };
    released || fate.ignored
}

/// Checks the requests receivers got against the order of their keys.
/// `modes` names each receiver's endpoint's ordering (`None`: unordered).
pub fn check(
    sequences: &Sequences,
    state: &ClusterState,
    pruned: &Pruned,
    modes: &BTreeMap<String, Option<OnDead>>,
    ledger: &Ledger,
    sends: &[SendRecord],
) -> Vec<Violation> {
    let record = |id: &DeliveryId| pruned.kept_or_pruned(state, id);
    let mut wrong = Vec::new();
    // Per key and run: the earliest 2xx answer to each sequence so far.
    let mut answered: BTreeMap<(Key, u32), BTreeMap<u64, u64>> = BTreeMap::new();
    for send in sends {
        let Some(mode) = modes.get(&send.receiver) else { continue };
        let numbered = DeliveryId::parse(&send.delivery_id).ok().and_then(|id| sequences.deliveries.get(&id));
        wrong.extend(headers(send, *mode, numbered, ledger));
        let (Some(on_dead), Some(numbered)) = (mode, numbered) else { continue };
        let run_key = ((numbered.endpoint, numbered.key.clone()), numbered.run);
        let run = answered.entry(run_key).or_default();
        let before = |sequence: u64| run.get(&sequence).is_some_and(|at| *at <= send.at_ms);
        let sequence = numbered.sequence;
        if sequence > 1 && !before(sequence) && !before(sequence - 1) {
            let previous = sequences.in_run(numbered, sequence - 1);
            let released = previous.is_some_and(|p| lets_go(fate(record(&p).as_deref()), *on_dead));
            if !released {
                let previous = previous.map_or_else(|| "unknown".to_string(), |p| p.to_string());
                wrong.push(format!(
                    "{} got {}#{sequence} ({}, from node {}) at {} ms before #{} ({previous}) was answered 2xx{}",
                    send.receiver,
                    numbered.key,
                    send.delivery_id,
                    send.origin.node_id,
                    send.at_ms,
                    sequence - 1,
                    if *on_dead == OnDead::Skip { " or dead" } else { " or skipped" }
                ));
            }
        }
        if send.answered.is_some_and(|c| (200..300).contains(&c)) {
            let at = run.entry(sequence).or_insert(send.answered_at_ms);
            *at = (*at).min(send.answered_at_ms);
        }
    }
    // Gap-free: below the highest sequence answered 2xx, each was too, or died.
    for ((key, run), delivered) in &answered {
        let Some(highest) = delivered.keys().next_back() else { continue };
        for sequence in 1..*highest {
            if delivered.contains_key(&sequence) {
                continue;
            }
            let id = sequences.by_run.get(&(key.clone(), *run)).and_then(|s| s.get(&sequence));
            if id.is_some_and(|id| fate(record(id).as_deref()).dead || fate(record(id).as_deref()).ignored) {
                continue;
            }
            wrong.push(format!(
                "key {:?} of {}: #{highest} was answered 2xx, but #{sequence} ({}) never was and was not \
                 dead-lettered (a gap)",
                key.1,
                key.0,
                id.map_or_else(|| "unknown".to_string(), |id| id.to_string()),
            ));
        }
    }
    listed(CHECKER, wrong.into_iter(), "ordering violations")
}

/// What a run did with ordered delivery, for its report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderingCounts {
    /// Ordered deliveries committed.
    pub deliveries: usize,
    /// Of them, dead-lettered at some point.
    pub dead: usize,
    /// Of them, skipped by the operator while they blocked their key.
    pub skipped: usize,
    /// Keys that retention forgot and that started again at 1.
    pub restarted: usize,
}

/// Counts what the run did with ordered delivery.
pub fn counts(sequences: &Sequences, state: &ClusterState, pruned: &Pruned) -> OrderingCounts {
    let fates: Vec<Fate> =
        sequences.deliveries.keys().map(|id| fate(pruned.kept_or_pruned(state, id).as_deref())).collect();
    OrderingCounts {
        deliveries: fates.len(),
        dead: fates.iter().filter(|f| f.dead).count(),
        skipped: fates.iter().filter(|f| f.skipped).count(),
        restarted: sequences.by_run.keys().filter(|(_, run)| *run > 1).count(),
    }
}

/// What is wrong with `send`'s ordering headers, if anything: an ordered
/// delivery carries its number and its event's key, any other neither.
fn headers(send: &SendRecord, mode: Option<OnDead>, numbered: Option<&Numbered>, ledger: &Ledger) -> Option<String> {
    let body = std::str::from_utf8(&send.body).ok();
    // The key it was posted with; a body no producer posted (the payload
    // checker's business) leaves the state's word.
    let posted_key = body.filter(|b| ledger.posted.contains(*b)).map(|b| ledger.ordering_keys.get(b));
    let expected_key = match posted_key {
        Some(key) => mode.and(key.map(String::as_str)),
        None => numbered.map(|n| &*n.key),
    };
    let what = || format!("{} to {} from node {}", send.delivery_id, send.receiver, send.origin.node_id);
    match (expected_key, numbered) {
        (None, None) if send.sequence.is_none() && send.ordering_key.is_none() => None,
        (None, _) => Some(format!(
            "{} is not ordered but carries sequence {:?} and key {:?} (numbered {:?})",
            what(),
            send.sequence,
            send.ordering_key,
            numbered.map(|n| n.sequence)
        )),
        (Some(key), None) => Some(format!("{} of key {key:?} was never numbered in its key's order", what())),
        (Some(key), Some(numbered)) => {
            let sequence = numbered.sequence.to_string();
            let fine = send.sequence.as_deref() == Some(sequence.as_str())
                && send.ordering_key.as_deref() == Some(key)
                && *numbered.key == *key;
            (!fine).then(|| {
                format!(
                    "{} carries sequence {:?} and key {:?}, not {sequence} and {key:?}",
                    what(),
                    send.sequence,
                    send.ordering_key
                )
            })
        }
    }
}

#[cfg(test)]
mod tests;
