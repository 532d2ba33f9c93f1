//! The layouts a snapshot encodes the state in, each decoded through
//! [`Encoded`] so that the derived indexes are rebuilt; the earlier ones
//! upgraded to the current one as they decode.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::{ClusterState, History, HistoryV4, InboundState, Retired, Usage, dead_index, fanout, ordered};
use crate::dense::{DenseMap, DenseSet};
use crate::ids::{DeliveryId, EndpointId, EventId, NodeId};
use crate::model::{Delivery, Endpoint, Event, NodeRecord, ShardGrant};

/// The fields of [`ClusterState`] a snapshot encodes, in their order:
/// decoding goes through it so that the derived indexes are rebuilt.
/// `O` is the ordered keys' queues, `N` the numbered deliveries counted
/// per key, `I` the inbound sources and `H` the history, or `()` (nothing)
/// in the layouts from before them.
#[derive(Deserialize)]
pub(super) struct Encoded<O, N, I, H> {
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
    numbered: N,
    inbound: I,
    history: H,
}

/// The numbered deliveries of each ordered key, when the layout encodes
/// them (from `V5`: with the history in a store, counting them again would
/// read all of it); `None` has them counted from the records.
type Numbered = Option<BTreeMap<ordered::OrderKey, u32>>;

impl<O, N, I, H> Encoded<O, N, I, H> {
    /// The same fields with the last four of the current layout.
    fn upgraded(
        self,
        ordered: impl FnOnce(O) -> Ordered,
        numbered: impl FnOnce(N) -> Numbered,
        inbound: impl FnOnce(I) -> InboundState,
        history: impl FnOnce(H) -> History,
    ) -> Upgraded {
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
            numbered: numbered(self.numbered),
            inbound: inbound(self.inbound),
            history: history(self.history),
        }
    }
}

pub(super) type Ordered = crate::ordering::OrderedKeys<ordered::OrderKey>;
/// The current layout (`V5`).
pub(super) type Current = Encoded<Ordered, BTreeMap<ordered::OrderKey, u32>, InboundState, History>;
/// Any layout, upgraded to the fields of the current one.
type Upgraded = Encoded<Ordered, Numbered, InboundState, History>;

/// A state encoded before ordered delivery existed (a `V1` snapshot): it
/// holds no ordered key and no source.
#[derive(Debug, Deserialize)]
#[serde(from = "Encoded<(), (), (), ()>")]
pub struct ClusterStateV1(pub ClusterState);

impl From<Encoded<(), (), (), ()>> for ClusterStateV1 {
    fn from(encoded: Encoded<(), (), (), ()>) -> Self {
        Self(ClusterState::from(encoded.upgraded(
            |()| Ordered::default(),
            |()| None,
            |()| InboundState::default(),
            |()| History::default(),
        )))
    }
}

/// A state encoded before inbound sources existed (a `V2` snapshot).
#[derive(Debug, Deserialize)]
#[serde(from = "Encoded<Ordered, (), (), ()>")]
pub struct ClusterStateV2(pub ClusterState);

impl From<Encoded<Ordered, (), (), ()>> for ClusterStateV2 {
    fn from(encoded: Encoded<Ordered, (), (), ()>) -> Self {
        Self(ClusterState::from(encoded.upgraded(
            |ordered| ordered,
            |()| None,
            |()| InboundState::default(),
            |()| History::default(),
        )))
    }
}

/// A state encoded before the history existed (a `V3` snapshot): every
/// event in memory; the finished ones move into the history as it is
/// decoded.
#[derive(Debug, Deserialize)]
#[serde(from = "Encoded<Ordered, (), InboundState, ()>")]
pub struct ClusterStateV3(pub ClusterState);

impl From<Encoded<Ordered, (), InboundState, ()>> for ClusterStateV3 {
    fn from(encoded: Encoded<Ordered, (), InboundState, ()>) -> Self {
        Self(ClusterState::from(encoded.upgraded(
            |ordered| ordered,
            |()| None,
            |inbound| inbound,
            |()| History::default(),
        )))
    }
}

/// A state encoded before the numbered deliveries were (a `V4` snapshot):
/// its history is always whole and untagged.
#[derive(Debug, Deserialize)]
#[serde(from = "Encoded<Ordered, (), InboundState, HistoryV4>")]
pub struct ClusterStateV4(pub ClusterState);

impl From<Encoded<Ordered, (), InboundState, HistoryV4>> for ClusterStateV4 {
    fn from(encoded: Encoded<Ordered, (), InboundState, HistoryV4>) -> Self {
        Self(ClusterState::from(encoded.upgraded(|ordered| ordered, |()| None, |inbound| inbound, |history| history.0)))
    }
}

impl From<Current> for ClusterState {
    fn from(encoded: Current) -> Self {
        Self::from(encoded.upgraded(|ordered| ordered, Some, |inbound| inbound, |history| history))
    }
}

impl From<Upgraded> for ClusterState {
    fn from(encoded: Upgraded) -> Self {
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
        state.numbered = match encoded.numbered {
            Some(numbered) => numbered,
            None => state.counted_numbered(),
        };
        // Only a layout from before the history holds finished events here.
        state.settle_all();
        state
    }
}
