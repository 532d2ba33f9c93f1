//! Inbound sources: registration, changes, deletion, secret rotation, and
//! which sources an endpoint receives from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ClusterState;
use super::stale::NewestKey;
use crate::command::{Response, SourcePatch};
use crate::ids::{EndpointId, SourceId};
use crate::inbound::{SOURCES_MAX, Source};
use crate::payload::StoredSecret;

/// Most sources one endpoint receives from.
pub const ENDPOINT_SOURCES_MAX: usize = 16;

/// What the state holds for inbound traffic: the sources, and the stale
/// guard's newest delivered version of each (endpoint, entity key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InboundState {
    pub sources: BTreeMap<SourceId, Source>,
    pub(super) newest: BTreeMap<NewestKey, super::stale::Newest>,
}

fn not_found(id: &SourceId) -> Response {
    Response::NotFound { what: format!("source {id}") }
}

impl ClusterState {
    /// Whether an endpoint may receive from `id`: a registered source, or
    /// hookraft's own operational events.
    pub(super) fn source_exists(&self, id: &SourceId) -> bool {
        *id == SourceId::OPERATIONAL || self.inbound.sources.contains_key(id)
    }

    pub(super) fn create_source(&mut self, source: &Source) -> Response {
        let sources = &mut self.inbound.sources;
        if sources.contains_key(&source.id) {
            return Response::Conflict { detail: format!("source {} already exists", source.id) };
        }
        if sources.len() >= SOURCES_MAX {
            return Response::Conflict { detail: format!("a cluster holds at most {SOURCES_MAX} sources") };
        }
        sources.insert(source.id, source.clone());
        Response::Ok
    }

    pub(super) fn update_source(&mut self, id: &SourceId, patch: &SourcePatch, now_ms: u64) -> Response {
        let Some(source) = self.inbound.sources.get_mut(id) else { return not_found(id) };
        let SourcePatch {
            description,
            event_id,
            event_type,
            entity_key,
            version,
            rate_limit_per_s,
            allow_cidrs,
            disabled,
        } = patch.clone();
        if let Some(description) = description {
            source.description = description;
        }
        if let Some(event_id) = event_id {
            source.event_id = event_id;
        }
        if let Some(event_type) = event_type {
            source.event_type = event_type;
        }
        if let Some(entity_key) = entity_key {
            source.entity_key = entity_key;
        }
        if let Some(version) = version {
            source.version = version;
        }
        if let Some(rate) = rate_limit_per_s {
            source.rate_limit_per_s = rate;
        }
        if let Some(cidrs) = allow_cidrs {
            source.allow_cidrs = cidrs;
        }
        if let Some(disabled) = disabled {
            source.disabled = disabled;
        }
        source.updated_at_ms = now_ms;
        Response::Ok
    }

    pub(super) fn delete_source(&mut self, id: &SourceId, now_ms: u64) -> Response {
        if self.inbound.sources.remove(id).is_none() {
            return not_found(id);
        }
        for endpoint in self.endpoints.values_mut() {
            if endpoint.sources.contains(id) {
                endpoint.sources.retain(|s| s != id);
                endpoint.updated_at_ms = now_ms;
            }
        }
        self.fanout.invalidate();
        Response::Ok
    }

    pub(super) fn rotate_source_secret(
        &mut self,
        id: &SourceId,
        secret: &StoredSecret,
        grace_until_ms: u64,
        now_ms: u64,
    ) -> Response {
        let Some(source) = self.inbound.sources.get_mut(id) else { return not_found(id) };
        source.rotate(secret.clone(), grace_until_ms, now_ms);
        Response::Ok
    }

    pub(super) fn set_endpoint_sources(&mut self, id: &EndpointId, sources: &[SourceId], now_ms: u64) -> Response {
        if let Some(missing) = sources.iter().find(|s| !self.source_exists(s)) {
            return not_found(missing);
        }
        if sources.len() > ENDPOINT_SOURCES_MAX {
            return Response::Conflict {
                detail: format!("an endpoint receives from at most {ENDPOINT_SOURCES_MAX} sources"),
            };
        }
        let Some(endpoint) = self.endpoints.get_mut(id) else {
            return Response::NotFound { what: format!("endpoint {id}") };
        };
        let mut sources = sources.to_vec();
        sources.sort();
        sources.dedup();
        endpoint.sources = sources;
        endpoint.updated_at_ms = now_ms;
        self.fanout.invalidate();
        Response::Ok
    }
}
