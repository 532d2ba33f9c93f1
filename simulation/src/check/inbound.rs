//! Inbound traffic: one event per provider event, sent where its source's
//! events go.
//!
//! [`InboundTap`] watches every node's applies: an apply that creates an
//! event from a source leaves no other event of the same source and
//! provider event id in the state (at work or in the history). Retention
//! may free a provider id (its event pruned, a late retry makes a new one),
//! never while its event is held.
//!
//! [`check`], after healing:
//! - every replica holds at most one event per (source, provider event id);
//! - every provider event answered 200 has its event: each answer named an
//!   event of that provider event, held or pruned (answers name two only
//!   when retention freed the id in between, which the tap watched);
//! - that event's deliveries go exactly to the endpoints receiving from its
//!   source (and its type), as many as the answer that created it counted,
//!   and each ended: delivered (its receiver answered 2xx), dead, or
//!   ignored as stale because a newer version of its entity was delivered
//!   to the same endpoint first (the event its timeline names);
//! - a request carrying a provider's body reached only an endpoint
//!   receiving from its source, and those endpoints got nothing else;
//! - no well-signed post was refused (400, 401, 403, 413).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use hookraft_core::command::{Command, IngestResult, Response};
use hookraft_core::ids::{EndpointId, EventId, NodeId};
use hookraft_core::inbound::Inbound;
use hookraft_core::model::{Delivery, DeliveryState, TimelineEntry};
use hookraft_core::state::ClusterState;

use super::pruned::Pruned;
use super::{Violation, every, listed};
use crate::receivers::SendRecord;
use crate::workload::{Ledger, SimEndpoint};

const CHECKER: &str = "inbound";

/// (source id, provider event id).
type ProviderKey = (String, String);

fn key_of(inbound: &Inbound) -> ProviderKey {
    (inbound.source_id.to_string(), inbound.provider_event_id.to_string())
}

/// Watches every node's applies for a second event of one provider event.
#[derive(Default)]
pub struct InboundTap {
    inner: Mutex<TapState>,
}

#[derive(Default)]
struct TapState {
    found: Vec<String>,
    /// Events already reported, once however many nodes apply them.
    flagged: BTreeSet<EventId>,
    /// Every event created from a source, by provider event, as any node
    /// first applied it: the candidates for a twin, so that an apply looks
    /// up a few ids instead of decoding the whole history. Every creation
    /// goes through an apply this tap sees.
    created: BTreeMap<ProviderKey, BTreeSet<EventId>>,
}

impl InboundTap {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn violations(&self) -> Vec<Violation> {
        let found = self.inner.lock().unwrap_or_else(|p| p.into_inner()).found.clone();
        listed(CHECKER, found.into_iter(), "events created twice")
    }

    pub fn observe(&self, state: &ClusterState, command: &Command, response: &Response) {
        let mut created = Vec::new();
        created_events(command, response, &mut created);
        if created.is_empty() {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for id in created {
            // Finished by the same entry (it matched no endpoint), it is
            // already in the history.
            let Some(inbound) = state.event(id).and_then(|e| e.inbound.clone()) else { continue };
            let twins = inner.created.entry(key_of(&inbound)).or_default();
            twins.insert(*id);
            let held: Vec<String> =
                twins.iter().filter(|other| *other != id && state.has_event(other)).map(|o| o.to_string()).collect();
            if !held.is_empty() && inner.flagged.insert(*id) {
                inner.found.push(format!(
                    "event {id} was created for provider event {} of {} while {held:?} of it was held",
                    inbound.provider_event_id, inbound.source_id
                ));
            }
        }
    }
}

/// The events `command` created, as `response` names them.
fn created_events<'a>(command: &Command, response: &'a Response, out: &mut Vec<&'a EventId>) {
    match (command, response) {
        (Command::Batch(commands), Response::Batch(responses)) => {
            for (command, response) in commands.iter().zip(responses) {
                created_events(command, response, out);
            }
        }
        (Command::IngestEvents { .. } | Command::IngestEventsFrom { .. }, Response::Ingested { results }) => {
            out.extend(results.iter().filter_map(|result| match result {
                IngestResult::Created { event_id, .. } => Some(event_id),
                _ => None,
            }));
        }
        _ => {}
    }
}

/// An event as the final state holds it (at work or in the history), or
/// as retention pruned it.
struct Found<'a> {
    inbound: Option<Box<Inbound>>,
    /// Deliveries it names.
    named: usize,
    deliveries: Vec<Cow<'a, Delivery>>,
}

impl Found<'_> {
    fn inbound(&self) -> Option<&Inbound> {
        self.inbound.as_deref()
    }
}

fn find<'a>(state: &'a ClusterState, pruned: &'a Pruned, id: &EventId) -> Option<Found<'a>> {
    if let Some(event) = state.event(id) {
        let deliveries = state.deliveries_of(&event);
        return Some(Found { inbound: event.inbound.clone(), named: event.deliveries.len(), deliveries });
    }
    let event = pruned.events.get(id)?;
    Some(Found {
        inbound: event.inbound.clone(),
        named: event.deliveries.len(),
        deliveries: event.deliveries.values().map(Cow::Borrowed).collect(),
    })
}

/// Whether `endpoint` receives events of `event_type` from `source`.
fn receives(endpoint: &SimEndpoint, source: &str, event_type: &str) -> bool {
    endpoint.sources.iter().any(|s| s == source)
        && (endpoint.event_types.is_empty() || endpoint.event_types.iter().any(|t| t == event_type))
}

/// Whether every delivery of every acknowledged inbound event that
/// `state` holds has ended: the run waits for them as for the producers'.
/// Only the events at work are looked at: the history holds finished ones.
pub fn settled(ledger: &Ledger, state: &ClusterState) -> bool {
    let answered = ledger.inbound.values().flat_map(|post| &post.answers);
    answered
        .filter_map(|id| EventId::parse(id).ok())
        .filter_map(|id| state.events.get(&id))
        .all(|event| event.deliveries.iter().all(|d| state.deliveries.get(d).is_none_or(|d| d.state.is_terminal())))
}

/// What the run did with inbound traffic, for its report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboundCounts {
    /// Provider events posted.
    pub posted: usize,
    /// Posts begun, repeats included.
    pub posts: u64,
    /// Provider events answered 200 at least once.
    pub answered: usize,
    /// 200 answers beyond the first of their provider event.
    pub repeats_answered: usize,
    /// Provider events answered with two events or more: retention freed
    /// the provider id between them.
    pub recreated: usize,
    /// Deliveries of inbound events ignored as stale.
    pub ignored_stale: usize,
}

/// Counts what the run did with inbound traffic.
pub fn counts(ledger: &Ledger, state: &ClusterState, pruned: &Pruned) -> InboundCounts {
    let mut counts = InboundCounts { posted: ledger.inbound.len(), ..Default::default() };
    for post in ledger.inbound.values() {
        counts.posts += u64::from(post.posts);
        counts.answered += usize::from(!post.answers.is_empty());
        counts.repeats_answered += post.answers.len().saturating_sub(1);
        let named: BTreeSet<&String> = post.answers.iter().collect();
        counts.recreated += usize::from(named.len() > 1);
        for id in named.into_iter().filter_map(|id| EventId::parse(id).ok()) {
            let Some(found) = find(state, pruned, &id) else { continue };
            counts.ignored_stale += found.deliveries.iter().filter(|d| d.state == DeliveryState::IgnoredStale).count();
        }
    }
    counts
}

/// Checks inbound traffic after healing; `states` are every replica's,
/// `state` the final one, `endpoints` those receiving from sources.
pub fn check(
    ledger: &Ledger,
    states: &[(NodeId, ClusterState, u64)],
    state: &ClusterState,
    pruned: &Pruned,
    endpoints: &[SimEndpoint],
    sends: &[SendRecord],
) -> Vec<Violation> {
    let mut wrong = Vec::new();
    let mut unfinished = Vec::new();
    for (node, replica, _) in states {
        wrong.extend(twins(*node, replica));
    }
    let answered_2xx: BTreeSet<&str> = sends
        .iter()
        .filter(|s| s.answered.is_some_and(|c| (200..300).contains(&c)))
        .map(|s| s.delivery_id.as_str())
        .collect();
    for ((source, provider_id), post) in &ledger.inbound {
        let what = format!("provider event {provider_id} of {source}");
        wrong.extend(
            post.refused.iter().map(|status| format!("a well-signed post of {what} was refused with {status}")),
        );
        let named: BTreeSet<&String> = post.answers.iter().collect();
        for id in named {
            let Some(found) = EventId::parse(id).ok().and_then(|event| find(state, pruned, &event)) else {
                wrong.push(format!("{what} was answered with event {id:?}, neither held nor pruned"));
                continue;
            };
            if found.inbound().map(key_of).as_ref() != Some(&(source.clone(), provider_id.clone())) {
                wrong.push(format!("{what} was answered with event {id}, which is not of it"));
                continue;
            }
            let expected: BTreeSet<EndpointId> = endpoints
                .iter()
                .filter(|e| receives(e, source, &post.event_type))
                .filter_map(|e| EndpointId::parse(&e.id).ok())
                .collect();
            let targets: BTreeSet<EndpointId> = found.deliveries.iter().map(|d| d.endpoint_id).collect();
            if targets != expected || found.named != found.deliveries.len() {
                wrong.push(format!(
                    "event {id} of {what} ({}) has deliveries to {targets:?} ({} named), not to {expected:?}",
                    post.event_type, found.named
                ));
            }
            for (_, counted) in post.created.iter().filter(|(created, _)| created == id) {
                if *counted != found.named as u64 {
                    wrong.push(format!(
                        "event {id} of {what} was answered with {counted} deliveries but has {}",
                        found.named
                    ));
                }
            }
            for delivery in &found.deliveries {
                match delivery.state {
                    DeliveryState::Delivered if !answered_2xx.contains(delivery.id.to_string().as_str()) => wrong.push(
                        format!("{} of event {id} is delivered but its receiver never answered 2xx", delivery.id),
                    ),
                    DeliveryState::Delivered | DeliveryState::Dead => {}
                    DeliveryState::IgnoredStale => wrong.extend(unjustified(delivery, found.inbound(), state, pruned)),
                    other => unfinished.push(Violation::liveness(
                        CHECKER,
                        format!("{} of event {id} of {what} is still {} after healing", delivery.id, other.as_str()),
                    )),
                }
            }
        }
    }
    wrong.extend(misdirected(ledger, endpoints, sends));
    let mut found = listed(CHECKER, wrong.into_iter(), "inbound violations");
    found.extend(unfinished.into_iter().take(super::LISTED_MAX));
    found
}

/// The provider events `replica` holds more than one event of, at work or
/// in the history.
fn twins(node: NodeId, replica: &ClusterState) -> Vec<String> {
    let mut held: BTreeMap<ProviderKey, Vec<String>> = BTreeMap::new();
    for event in replica.events_in(every(), false) {
        if let Some(inbound) = event.inbound.as_deref() {
            held.entry(key_of(inbound)).or_default().push(event.id.to_string());
        }
    }
    held.into_iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|((source, provider_id), ids)| {
            format!("node {node} holds {} events of provider event {provider_id} of {source}: {ids:?}", ids.len())
        })
        .collect()
}

/// Why a delivery ignored as stale should not have been, if it should not:
/// its timeline names the newer event, which must be of its entity, of a
/// newer version, and delivered to the same endpoint.
fn unjustified(
    delivery: &Delivery,
    inbound: Option<&Inbound>,
    state: &ClusterState,
    pruned: &Pruned,
) -> Option<String> {
    let id = delivery.id;
    let newer = delivery.history.iter().rev().find_map(|entry| match entry {
        TimelineEntry::IgnoredStale { newer, .. } => Some(**newer),
        _ => None,
    });
    let Some(newer) = newer else {
        // A long timeline may have dropped the entry.
        let truncated = matches!(delivery.history.first(), Some(TimelineEntry::Truncated { .. }));
        return (!truncated).then(|| format!("{id} is ignored_stale but its timeline names no newer event"));
    };
    let Some((key, version)) = inbound.and_then(Inbound::guarded) else {
        return Some(format!("{id} is ignored_stale but its event has no entity key and version"));
    };
    let Some(other) = find(state, pruned, &newer) else {
        return Some(format!("{id} was ignored for {newer}, neither held nor pruned"));
    };
    let newer_version = other.inbound().and_then(Inbound::guarded).filter(|(k, v)| *k == key && *v > version);
    if newer_version.is_none() {
        return Some(format!("{id} ({key} version {version}) was ignored for {newer}, not a newer version of {key}"));
    }
    let delivered =
        other.deliveries.iter().any(|d| d.endpoint_id == delivery.endpoint_id && d.state == DeliveryState::Delivered);
    (!delivered).then(|| format!("{id} was ignored for {newer}, which was not delivered to {}", delivery.endpoint_id))
}

/// Requests that carried a provider's body to an endpoint not receiving
/// from its source, or anything else to an endpoint receiving from sources.
fn misdirected(ledger: &Ledger, endpoints: &[SimEndpoint], sends: &[SendRecord]) -> Vec<String> {
    let bodies: BTreeMap<&str, (&str, &str)> = ledger
        .inbound
        .iter()
        .map(|((source, _), post)| (post.body.as_str(), (source.as_str(), post.event_type.as_str())))
        .collect();
    let by_receiver: BTreeMap<&str, &SimEndpoint> = endpoints.iter().map(|e| (e.receiver.as_str(), e)).collect();
    sends
        .iter()
        .filter_map(|send| {
            let posted = std::str::from_utf8(&send.body).ok().and_then(|body| bodies.get(body));
            let what = || format!("{} of event {} to {}", send.delivery_id, send.event_id, send.receiver);
            match (posted, by_receiver.get(send.receiver.as_str())) {
                (Some((source, event_type)), Some(endpoint)) if receives(endpoint, source, event_type) => None,
                (Some((source, event_type)), _) => {
                    Some(format!("{} carries a {event_type} event of {source}, which it does not receive", what()))
                }
                (None, Some(_)) => Some(format!("{} carries a body no provider posted", what())),
                (None, None) => None,
            }
        })
        .collect()
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
