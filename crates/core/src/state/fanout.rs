//! Fan-out: which endpoints an event of a given type goes to.
//!
//! Ingest used to ask every endpoint whether it subscribes to the event's
//! type: a scan of all endpoints, and of each one's list of types, per
//! event (5% of the Raft thread with 100 endpoints at 30,000 events/s, and
//! growing with the endpoints). [`Fanout`] answers from an index by type
//! instead. It is derived from `ClusterState::endpoints` alone: never
//! encoded or compared, built on first use after a decode, and dropped by
//! every apply that can change an endpoint's types, sources or whether it
//! is disabled, so it is rebuilt from the endpoints as they are then.
//! Producers' events go to endpoints that list no source; a source's
//! events only to the endpoints that list it.

use std::collections::BTreeMap;

use crate::ids::{EndpointId, SourceId};
use crate::model::Endpoint;

/// The enabled endpoints by the event types they subscribe to.
#[derive(Clone, Default)]
pub struct Fanout {
    index: Option<Index>,
}

#[derive(Clone, Default)]
struct Index {
    /// Endpoints that list the type, in id order.
    by_type: BTreeMap<Box<str>, Vec<EndpointId>>,
    /// Endpoints with no list: every type, in id order.
    every_type: Vec<EndpointId>,
    /// Endpoints that receive each source's events (whatever their
    /// types), in id order.
    by_source: BTreeMap<SourceId, Vec<EndpointId>>,
}

impl Index {
    fn build(endpoints: &BTreeMap<EndpointId, Endpoint>) -> Self {
        let mut index = Self::default();
        // Endpoints come in id order, so every list is sorted as it grows.
        for endpoint in endpoints.values().filter(|e| !e.disabled) {
            for source in &endpoint.sources {
                let ids = index.by_source.entry(*source).or_default();
                if ids.last() != Some(&endpoint.id) {
                    ids.push(endpoint.id);
                }
            }
            if !endpoint.sources.is_empty() {
                continue;
            }
            match &endpoint.event_types {
                None => index.every_type.push(endpoint.id),
                Some(types) => {
                    for event_type in types {
                        let ids = index.by_type.entry(event_type.as_str().into()).or_default();
                        // A type listed twice by one endpoint counts once.
                        if ids.last() != Some(&endpoint.id) {
                            ids.push(endpoint.id);
                        }
                    }
                }
            }
        }
        index
    }
}

impl Fanout {
    /// Forgets the index: the endpoints changed.
    pub(super) fn invalidate(&mut self) {
        self.index = None;
    }

    /// The enabled endpoints an event of `event_type` from `source` fans
    /// out to, in id order: the same as asking each of `endpoints` in turn.
    pub(super) fn targets(
        &mut self,
        endpoints: &BTreeMap<EndpointId, Endpoint>,
        event_type: &str,
        source: Option<&SourceId>,
    ) -> Vec<EndpointId> {
        let index = self.index.get_or_insert_with(|| Index::build(endpoints));
        if let Some(source) = source {
            let listed = index.by_source.get(source).map(Vec::as_slice).unwrap_or_default();
            let targets: Vec<EndpointId> = listed
                .iter()
                .filter(|id| endpoints.get(id).is_some_and(|e| e.subscribes_to(event_type)))
                .copied()
                .collect();
            debug_assert_eq!(targets, scan(endpoints, event_type, Some(source)), "the fan-out index is stale");
            return targets;
        }
        let listed = index.by_type.get(event_type).map(Vec::as_slice).unwrap_or_default();
        let mut targets = Vec::with_capacity(listed.len() + index.every_type.len());
        targets.extend_from_slice(listed);
        if !index.every_type.is_empty() {
            // No endpoint is in both: one with a list is never in `every_type`.
            targets.extend_from_slice(&index.every_type);
            targets.sort_unstable();
        }
        debug_assert_eq!(targets, scan(endpoints, event_type, None), "the fan-out index is stale");
        targets
    }

    /// How many endpoints an event of `event_type` from `source` fans out
    /// to, without building the index: from it when it is built (after the
    /// first ingest), else by asking each endpoint.
    pub(super) fn count(
        &self,
        endpoints: &BTreeMap<EndpointId, Endpoint>,
        event_type: &str,
        source: Option<&SourceId>,
    ) -> usize {
        match (&self.index, source) {
            (Some(index), None) => index.by_type.get(event_type).map_or(0, Vec::len) + index.every_type.len(),
            // The source's own endpoints, not every endpoint.
            (Some(index), Some(source)) => index.by_source.get(source).map_or(0, |ids| {
                ids.iter().filter(|id| endpoints.get(id).is_some_and(|e| e.subscribes_to(event_type))).count()
            }),
            (None, _) => scan(endpoints, event_type, source).len(),
        }
    }
}

/// Every enabled endpoint that receives `event_type` from `source`, by asking each.
fn scan(endpoints: &BTreeMap<EndpointId, Endpoint>, event_type: &str, source: Option<&SourceId>) -> Vec<EndpointId> {
    endpoints.values().filter(|e| !e.disabled && e.receives(event_type, source)).map(|e| e.id).collect()
}

impl PartialEq for Fanout {
    /// Derived from the endpoints, which are compared.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.index {
            Some(index) => write!(f, "Fanout {{ {} types }}", index.by_type.len()),
            None => write!(f, "Fanout {{ not built }}"),
        }
    }
}
