//! The layouts a snapshot encodes the state in, each decoded through
//! [`Encoded`] so that the derived indexes are rebuilt; the earlier ones
//! upgraded to the current one as they decode.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::{ClusterState, History, InboundState, Retired, Usage, dead_index, fanout, ordered};
use crate::dense::{DenseMap, DenseSet};
use crate::ids::{DeliveryId, EndpointId, EventId, NodeId};
use crate::model::{Delivery, Endpoint, Event, NodeRecord, ShardGrant};

/// The fields of [`ClusterState`] a snapshot encodes, in their order:
/// decoding goes through it so that the derived indexes are rebuilt.
/// `O` is the ordered keys' queues, `I` the inbound sources and `H` the
/// history, or `()` (nothing) in the layouts from before them.
#[derive(Deserialize)]
pub(super) struct Encoded<O, I, H> {
    endpoints: BTreeMap<EndpointId, Endpoint>,
    events: DenseMap<EventId, Box<Event>>,
    deliveries: DenseMap<DeliveryId, Arc<Delivery>>,
    idempotency: DenseMap<Box<str>, EventId>,
    active: BTreeMap<EndpointId, DenseSet<DeliveryId>>,
    nodes: BTreeMap<NodeId, NodeRecord>,
    shards: Vec<ShardGrant>,
    last_token: u64,
    outcomes_rejected_stale: u64,
    ordered: O,
    inbound: I,
    history: H,
}

impl<O, I, H> Encoded<O, I, H> {
    /// The same fields with the last three of the current layout.
    fn upgraded(
        self,
        ordered: impl FnOnce(O) -> Ordered,
        inbound: impl FnOnce(I) -> InboundState,
        history: impl FnOnce(H) -> History,
    ) -> Current {
        Encoded {
            endpoints: self.endpoints,
            events: self.events,
            deliveries: self.deliveries,
            idempotency: self.idempotency,
            active: self.active,
            nodes: self.nodes,
            shards: self.shards,
            last_token: self.last_token,
            outcomes_rejected_stale: self.outcomes_rejected_stale,
            ordered: ordered(self.ordered),
            inbound: inbound(self.inbound),
            history: history(self.history),
        }
    }
}

pub(super) type Ordered = crate::ordering::OrderedKeys<ordered::OrderKey>;
pub(super) type Current = Encoded<Ordered, InboundState, History>;

/// A state encoded before ordered delivery existed (a `V1` snapshot): it
/// holds no ordered key and no source.
#[derive(Debug, Deserialize)]
#[serde(from = "Encoded<(), (), ()>")]
pub struct ClusterStateV1(pub ClusterState);

impl From<Encoded<(), (), ()>> for ClusterStateV1 {
    fn from(encoded: Encoded<(), (), ()>) -> Self {
        Self(ClusterState::from(encoded.upgraded(
            |()| Ordered::default(),
            |()| InboundState::default(),
            |()| History::default(),
        )))
    }
}

/// A state encoded before inbound sources existed (a `V2` snapshot).
#[derive(Debug, Deserialize)]
#[serde(from = "Encoded<Ordered, (), ()>")]
pub struct ClusterStateV2(pub ClusterState);

impl From<Encoded<Ordered, (), ()>> for ClusterStateV2 {
    fn from(encoded: Encoded<Ordered, (), ()>) -> Self {
        Self(ClusterState::from(encoded.upgraded(
            |ordered| ordered,
            |()| InboundState::default(),
            |()| History::default(),
        )))
    }
}

/// A state encoded before the history existed (a `V3` snapshot): every
/// event in memory; the finished ones move into the history as it is
/// decoded.
#[derive(Debug, Deserialize)]
#[serde(from = "Encoded<Ordered, InboundState, ()>")]
pub struct ClusterStateV3(pub ClusterState);

impl From<Encoded<Ordered, InboundState, ()>> for ClusterStateV3 {
    fn from(encoded: Encoded<Ordered, InboundState, ()>) -> Self {
        Self(ClusterState::from(encoded.upgraded(|ordered| ordered, |inbound| inbound, |()| History::default())))
    }
}

impl From<Current> for ClusterState {
    fn from(encoded: Current) -> Self {
        let dead = dead_index(&encoded.deliveries);
        let ordered = encoded.ordered;
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
            ordered,
            numbered: BTreeMap::new(),
            inbound: encoded.inbound,
            history: encoded.history,
            touched: Vec::new(),
            to_wake: Default::default(),
            stats: Default::default(),
            tallies: Default::default(),
            throughput: Default::default(),
        };
        state.recount_usage();
        state.numbered = state.counted_numbered();
        // Only a layout from before the history holds finished events here.
        state.settle_all();
        state
    }
}
