//! Invariant checkers, one module per property. Each returns the
//! violations it finds; a run is ok when none do.

pub mod batches;
pub mod fencing;
pub mod inbound;
pub mod liveness;
pub mod lost;
pub mod one_sender;
pub mod ordering;
pub mod payloads;
pub mod pruned;
pub mod replicas;
pub mod signatures;
pub mod timeline;

#[cfg(test)]
pub(crate) mod fixture;

use std::ops::Bound;

use hookraft_core::command::{Command, Response};
use hookraft_core::ids::DeliveryId;
use hookraft_core::state::{ClusterState, IdRange};
use hookraft_raft::ApplyObserver;

use crate::trace::Trace;

/// Every id: the range that walks all of a state's events or deliveries,
/// in memory and in the history (`ClusterState::events_in`).
pub fn every<T>() -> IdRange<T> {
    (Bound::Unbounded, Bound::Unbounded)
}

/// Whether `state` stores delivery `id`, at work in memory or finished in
/// the history, without decoding it.
pub fn holds_delivery(state: &ClusterState, id: &DeliveryId) -> bool {
    state.deliveries.contains_key(id) || state.history().contains_delivery(id)
}

/// The checkers that watch every node's applies as they happen.
pub struct Taps {
    pub fencing: fencing::FencingTap,
    pub pruned: pruned::PruneTap,
    pub ordering: ordering::OrderingTap,
    pub inbound: inbound::InboundTap,
}

impl Taps {
    pub fn new(trace: Trace) -> Self {
        Self {
            fencing: fencing::FencingTap::new(trace.clone()),
            pruned: pruned::PruneTap::new(trace),
            ordering: ordering::OrderingTap::new(),
            inbound: inbound::InboundTap::new(),
        }
    }

    pub fn violations(&self) -> Vec<Violation> {
        let mut found = self.fencing.violations();
        found.extend(self.pruned.violations());
        found.extend(self.ordering.violations());
        found.extend(self.inbound.violations());
        found
    }
}

impl ApplyObserver for Taps {
    fn applied(&self, state: &ClusterState, command: &Command, response: &Response) {
        self.fencing.applied(state, command, response);
        self.pruned.observe(state, command, response);
        self.ordering.observe(state, command, response);
        self.inbound.observe(state, command, response);
    }
}

/// Whether a violation breaks safety (something wrong happened) or
/// liveness (something right did not happen in time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Safety,
    Liveness,
}

/// One broken property.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The checker (module) that found it.
    pub checker: &'static str,
    pub kind: Kind,
    pub detail: String,
}

impl Violation {
    pub fn safety(checker: &'static str, detail: impl Into<String>) -> Self {
        Self { checker, kind: Kind::Safety, detail: detail.into() }
    }

    pub fn liveness(checker: &'static str, detail: impl Into<String>) -> Self {
        Self { checker, kind: Kind::Liveness, detail: detail.into() }
    }
}

/// Violations a checker lists one by one; the rest are counted in one more.
pub const LISTED_MAX: usize = 5;

/// The first [`LISTED_MAX`] of `details` as safety violations, and the
/// number of the rest (`things`) in one more.
pub fn listed(checker: &'static str, details: impl Iterator<Item = String>, things: &str) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut more = 0usize;
    for detail in details {
        if found.len() < LISTED_MAX {
            found.push(Violation::safety(checker, detail));
        } else {
            more += 1;
        }
    }
    if more > 0 {
        found.push(Violation::safety(checker, format!("and {more} more {things} like these")));
    }
    found
}
