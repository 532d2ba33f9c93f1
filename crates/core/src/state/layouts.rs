//! The layout a snapshot encodes the state in, decoded through
//! [`Encoded`] so that the derived indexes are rebuilt. There is one
//! layout, pinned by the snapshot's golden file (`hookraft-raft`'s
//! `tests/golden/snapshot.bin`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::{ClusterState, History, InboundState, Retired, Usage, dead_index, fanout, ordered};
use crate::dense::{DenseMap, DenseSet};
use crate::ids::{DeliveryId, EndpointId, EventId, NodeId};
use crate::model::{Delivery, Endpoint, Event, NodeRecord, ShardGrant};

/// The fields of [`ClusterState`] a snapshot encodes, in their order:
/// decoding goes through it so that the derived indexes are rebuilt.
#[derive(Deserialize)]
pub(super) struct Encoded {
    endpoints: BTreeMap<EndpointId, Endpoint>,
    events: DenseMap<EventId, Box<Event>>,
    deliveries: DenseMap<DeliveryId, Arc<Delivery>>,
    idempotency: DenseMap<Box<str>, EventId>,
    active: BTreeMap<EndpointId, DenseSet<DeliveryId>>,
    nodes: BTreeMap<NodeId, NodeRecord>,
    shards: Vec<ShardGrant>,
    last_token: u64,
    outcomes_rejected_stale: u64,
    ordered: crate::ordering::OrderedKeys<ordered::OrderKey>,
    numbered: BTreeMap<ordered::OrderKey, u32>,
    inbound: InboundState,
    history: History,
}

impl From<Encoded> for ClusterState {
    fn from(encoded: Encoded) -> Self {
        let dead = dead_index(&encoded.deliveries);
        let mut state = Self {
            endpoints: encoded.endpoints,
            events: encoded.events,
            deliveries: encoded.deliveries,
            idempotency: encoded.idempotency,
            active: encoded.active,
            nodes: encoded.nodes,
            shards: encoded.shards,
            last_token: encoded.last_token,
            outcomes_rejected_stale: encoded.outcomes_rejected_stale,
            retired: Retired::default(),
            fanout: fanout::Fanout::default(),
            dead,
            usage: Usage::default(),
            ordered: encoded.ordered,
            numbered: encoded.numbered,
            inbound: encoded.inbound,
            history: encoded.history,
            touched: Vec::new(),
            to_wake: Default::default(),
            stats: Default::default(),
            tallies: Default::default(),
            throughput: Default::default(),
        };
        state.recount_usage();
        // Every finished event belongs in the history: one encoded whole
        // with finished events in memory (a state made by hand, as the
        // checkers' tests make them) is settled here. O(state); a node's
        // own snapshots leave nothing to move.
        state.settle_all();
        state
    }
}
