//! `ClusterState`: the in-memory state every replica holds, and
//! [`ClusterState::apply`], the deterministic function from (state, command)
//! to (state, response).
//!
//! `apply` never reads a clock or an RNG, and only ordered maps are iterated,
//! so replicas that apply the same log hold the same state. Split by command
//! family: `endpoints`, `ingest` (with its `fanout` index), `outcomes`,
//! `replay`, `cluster`, `prune`; `usage` counts what it holds.

mod cluster;
mod endpoints;
mod fanout;
mod health;
mod history;
pub mod history_store;
mod ingest;
mod layouts;
mod operational;
mod ordered;
mod outcomes;
mod prune;
mod replay;
mod rewrap;
mod settle;
mod sources;
mod stale;
pub mod stats;
pub mod tally;
pub mod throughput;
mod usage;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use history::{History, IdRange};
pub use replay::{REPLAY_BATCH_MAX, REPLAY_SCAN_MAX};
pub use sources::{ENDPOINT_SOURCES_MAX, InboundState};

use crate::command::{Command, Response};
use crate::dense::{DenseMap, DenseSet};
use crate::ids::{DeliveryId, EndpointId, EventId, NodeId, SHARD_COUNT, Shard};
use crate::model::{Delivery, DeliveryState, Endpoint, Event, NodeRecord, ShardGrant};
pub use usage::{Usage, delivery_bytes, event_bytes, new_event_bytes};

/// Replicated state. Fields are public for reading; change it only through `apply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "layouts::Encoded")]
pub struct ClusterState {
    pub endpoints: BTreeMap<EndpointId, Endpoint>,
    /// Events and deliveries are boxed: a B-tree node keeps slack for 11
    /// entries, and the slack of a node of boxes is a pointer's, not a
    /// record's. Their ids arrive in ascending order, so the maps are kept
    /// dense (`crate::dense`). Both encode as plain maps of records, so the
    /// snapshot format is unchanged. Every collection that grows with the
    /// events is a dense one, whose clone shares its chunks: a snapshot
    /// clones the state in a moment (`ClusterState::clone`).
    pub events: DenseMap<EventId, Box<Event>>,
    /// Deliveries are shared (`Arc`) rather than boxed, for the same slack
    /// and one thing more: after a snapshot's clone, the first change to a
    /// chunk copies it, and with a backlog the first outcomes land all over
    /// the window of deliveries the actors are working through. Copying a
    /// chunk of boxes copied every record and its timeline, one allocation
    /// at a time (one apply held the lock 31–50 ms); a chunk of `Arc`s
    /// copies pointers, and an outcome then copies the one delivery it
    /// changes ([`ClusterState::change_delivery`]). The price is the 16 bytes
    /// of an `Arc`'s counts per delivery (docs/benchmarks.md).
    pub deliveries: DenseMap<DeliveryId, Arc<Delivery>>,
    /// Idempotency key → the event it created. Keys arrive in any order,
    /// so its chunks fill as std's B-tree does; it is dense for its clone.
    pub idempotency: DenseMap<Box<str>, EventId>,
    /// Non-terminal deliveries of each endpoint: what its actor must work on.
    pub active: BTreeMap<EndpointId, DenseSet<DeliveryId>>,
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    /// Indexed by shard number; `SHARD_COUNT` entries.
    pub shards: Vec<ShardGrant>,
    /// The last fencing token granted.
    pub last_token: u64,
    /// Outcomes refused because their token was not the shard's current one.
    pub outcomes_rejected_stale: u64,
    /// Records the last applies took out (a `Prune`'s), for the caller to
    /// drop once it has let go of the state's lock: dropping them is half
    /// of a prune's apply. Not part of the state: never encoded, never
    /// compared, empty in a clone.
    #[serde(skip)]
    retired: Retired,
    /// Which endpoints each event type fans out to: derived from
    /// `endpoints`, never encoded or compared ([`fanout::Fanout`]).
    #[serde(skip)]
    fanout: fanout::Fanout,
    /// Dead deliveries of each endpoint (deleted endpoints' too), in id
    /// order: what a bulk replay and a listing of one endpoint's dead
    /// deliveries walk instead of every delivery. Derived from
    /// `deliveries`: never encoded, rebuilt after a decode (`state/layouts.rs`),
    /// kept up to date by every apply that makes a delivery dead or takes
    /// one out of that state (`mark_dead`, `unmark_dead`).
    #[serde(skip)]
    dead: BTreeMap<EndpointId, DenseSet<DeliveryId>>,
    /// Pending deliveries and the estimated bytes of retained state,
    /// kept by every apply: derived, never encoded, counted again after
    /// a decode (`state/usage.rs`).
    #[serde(skip)]
    usage: Usage,
    /// Each ordered key's queue, kept by every apply that changes an
    /// ordered delivery (`state/ordered.rs`).
    ordered: crate::ordering::OrderedKeys<ordered::OrderKey>,
    /// How many numbered deliveries of each ordered key the state holds
    /// (the history's too): a key is forgotten with the last of them.
    /// Derived from the records, but encoded: with the history in a
    /// store, counting again would read every finished record.
    numbered: BTreeMap<ordered::OrderKey, u32>,
    /// The inbound sources and the stale guard's newest versions
    /// (`state/sources.rs`, `state/stale.rs`).
    pub inbound: InboundState,
    /// Finished events and their deliveries, encoded (`state/history.rs`):
    /// what `events` and `deliveries` no longer hold.
    history: History,
    /// The events the current apply touched, for its end to settle
    /// (`state/settle.rs`). Not part of the state: empty between applies.
    #[serde(skip)]
    touched: Vec<EventId>,
    /// Deliveries the last apply made ready that its response does not
    /// name, for the node to wake their actors: those of the operational
    /// events it emitted (`state/operational.rs`) and the ordered keys'
    /// new heads (`state/ordered.rs`). Not part of the state: never
    /// encoded, never compared, empty in a clone.
    #[serde(skip)]
    to_wake: operational::ToWake,
    /// Each endpoint's recent attempts, counted by apply: derived, local
    /// to this node, never encoded or compared (`state/stats.rs`).
    #[serde(skip)]
    stats: stats::Stats,
    /// What the last apply did to deliveries' lifecycles, by the node that
    /// counts it: derived, never encoded or compared, empty in a clone
    /// (`state/tally.rs`).
    #[serde(skip)]
    tallies: tally::Tallies,
    /// The cluster's events accepted and deliveries delivered, retried and
    /// dead-lettered per minute, counted by apply: derived, never encoded
    /// or compared (`state/throughput.rs`).
    #[serde(skip)]
    throughput: throughput::Throughput,
}

/// The node that counts a change to a delivery of `endpoint` in its
/// metrics: the owner of its shard, else the node with the lowest id
/// (`state/tally.rs`). Of the fields, not the state, so it can be
/// asked while a delivery is borrowed.
fn counting_node(shards: &[ShardGrant], nodes: &BTreeMap<NodeId, NodeRecord>, endpoint: &EndpointId) -> Option<NodeId> {
    shards[endpoint.shard() as usize].owner.or_else(|| nodes.keys().next().copied())
}

/// Every dead delivery by endpoint, by looking at each.
fn dead_index(deliveries: &DenseMap<DeliveryId, Arc<Delivery>>) -> BTreeMap<EndpointId, DenseSet<DeliveryId>> {
    let mut dead: BTreeMap<EndpointId, DenseSet<DeliveryId>> = BTreeMap::new();
    for (id, delivery) in deliveries {
        if delivery.state == DeliveryState::Dead {
            dead.entry(delivery.endpoint_id).or_default().insert(*id);
        }
    }
    dead
}

/// Records taken out of the state by an apply, not yet dropped.
#[derive(Default)]
pub struct Retired {
    pub events: Vec<Box<Event>>,
    pub deliveries: Vec<Arc<Delivery>>,
}

impl Retired {
    /// Records held, events and deliveries.
    pub fn len(&self) -> usize {
        self.events.len() + self.deliveries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Clone for Retired {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Retired {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Retired {{ {} events, {} deliveries }}", self.events.len(), self.deliveries.len())
    }
}

impl Default for ClusterState {
    fn default() -> Self {
        Self {
            endpoints: BTreeMap::new(),
            events: DenseMap::new(),
            deliveries: DenseMap::new(),
            idempotency: DenseMap::new(),
            active: BTreeMap::new(),
            nodes: BTreeMap::new(),
            shards: vec![
                ShardGrant { owner: None, token: 0, granted_at_ms: 0, next_owner: None };
                SHARD_COUNT as usize
            ],
            last_token: 0,
            outcomes_rejected_stale: 0,
            retired: Retired::default(),
            fanout: fanout::Fanout::default(),
            dead: BTreeMap::new(),
            usage: Usage::default(),
            ordered: Default::default(),
            numbered: BTreeMap::new(),
            inbound: InboundState::default(),
            history: History::default(),
            touched: Vec::new(),
            to_wake: Default::default(),
            stats: Default::default(),
            tallies: Default::default(),
            throughput: Default::default(),
        }
    }
}

impl ClusterState {
    /// Applies one committed command.
    pub fn apply(&mut self, command: &Command) -> Response {
        self.to_wake.0.clear();
        self.tallies.clear();
        let response = self.apply_command(command);
        self.settle();
        response
    }

    /// What the last [`apply`](Self::apply) did to deliveries'
    /// lifecycles, tallied for the node that counts each change (see
    /// `state/tally.rs`).
    pub fn tallies(&self) -> &tally::Tallies {
        &self.tallies
    }

    /// The node that counts a change to a delivery of `endpoint` in its
    /// metrics (see [`counting_node`]).
    fn counting_node(&self, endpoint: &EndpointId) -> Option<NodeId> {
        counting_node(&self.shards, &self.nodes, endpoint)
    }

    /// The deliveries the last [`apply`](Self::apply) made ready that its
    /// response does not name: operational events' deliveries, and
    /// ordered keys' new heads (the delivery before settled, or was
    /// skipped). Whoever wakes actors looks here too.
    pub fn to_wake(&self) -> &[(DeliveryId, EndpointId)] {
        &self.to_wake.0
    }

    /// `endpoint`'s recent attempts as this node counted them.
    pub fn endpoint_stats(&self, endpoint: &EndpointId) -> Option<&stats::EndpointStats> {
        self.stats.of(endpoint)
    }

    /// The cluster's flows per minute, as this node counted them.
    pub fn throughput(&self) -> &throughput::Throughput {
        &self.throughput
    }

    /// How many dead deliveries `endpoint` has, from the dead index.
    pub fn dead_count_of(&self, endpoint: &EndpointId) -> usize {
        self.dead.get(endpoint).map_or(0, DenseSet::len) + self.history.dead_count_of(endpoint)
    }

    /// How many dead deliveries the state holds, deleted endpoints' too:
    /// one look per endpoint with any.
    pub fn dead_count(&self) -> usize {
        self.dead.values().map(DenseSet::len).sum::<usize>() + self.history.dead_count()
    }

    fn apply_command(&mut self, command: &Command) -> Response {
        match command {
            Command::RegisterEndpoint { endpoint } => self.register_endpoint(endpoint),
            Command::UpdateEndpoint { id, patch, now_ms } => self.update_endpoint(id, patch, *now_ms),
            Command::DeleteEndpoint { id, now_ms } => self.delete_endpoint(id, *now_ms),
            Command::RotateSecret { id, secret, grace_until_ms, now_ms } => {
                self.rotate_secret(id, secret, *grace_until_ms, *now_ms)
            }
            Command::IngestEvents { now_ms, events } => self.ingest(events, *now_ms, None),
            Command::IngestEventsFrom { node_id, now_ms, events } => self.ingest(events, *now_ms, Some(*node_id)),
            Command::RecordOutcomes { node_id, now_ms, outcomes } => self.record_outcomes(*node_id, outcomes, *now_ms),
            Command::Replay { now_ms, target } => self.replay(target, *now_ms),
            Command::Heartbeat { node_id, now_ms, lease_ms } => self.heartbeat(*node_id, *now_ms, *lease_ms),
            Command::AssignShards { now_ms, grants } => self.assign_shards(grants, *now_ms),
            Command::Noop => Response::Ok,
            Command::SetDraining { node_id, draining, now_ms } => self.set_draining(*node_id, *draining, *now_ms),
            Command::ForgetNode { node_id, now_ms } => self.forget_node(*node_id, *now_ms),
            Command::Batch(commands) => Response::Batch(commands.iter().map(|c| self.apply_command(c)).collect()),
            Command::RevokeShards { now_ms, shards } => self.revoke_shards(shards, *now_ms),
            Command::Prune { before_ms, max_events, .. } => self.prune(*before_ms, *max_events),
            Command::RewrapPayloads { now_ms, payloads } => self.rewrap(payloads, *now_ms),
            Command::RewrapSecrets { secrets, .. } => self.rewrap_secrets(secrets),
            Command::SetOrdering { id, ordering, now_ms } => self.set_ordering(id, *ordering, *now_ms),
            Command::SkipBlocked { endpoint_id, ordering_key, now_ms } => {
                self.skip_blocked(endpoint_id, ordering_key, *now_ms)
            }
            Command::CreateSource { source } => self.create_source(source),
            Command::UpdateSource { id, patch, now_ms } => self.update_source(id, patch, *now_ms),
            Command::DeleteSource { id, now_ms } => self.delete_source(id, *now_ms),
            Command::RotateSourceSecret { id, secret, grace_until_ms, now_ms } => {
                self.rotate_source_secret(id, secret, *grace_until_ms, *now_ms)
            }
            Command::SetEndpointSources { id, sources, now_ms } => self.set_endpoint_sources(id, sources, *now_ms),
            Command::SetDisableAfter { id, disable_after_s, now_ms } => {
                self.set_disable_after(id, *disable_after_s, *now_ms)
            }
        }
    }

    /// What the applies since the last [`take_retired`](Self::take_retired)
    /// took out of the state, for an observer of applies to look at.
    pub fn retired(&self) -> &Retired {
        &self.retired
    }

    /// What the applies since the last call took out of the state; drop
    /// it after releasing the state's lock (or leave it: the next apply's
    /// records join it).
    pub fn take_retired(&mut self) -> Retired {
        std::mem::take(&mut self.retired)
    }

    /// Changes a delivery, copied first if a snapshot's clone still
    /// shares it, so the clone keeps the record as it was; counts its
    /// footprint again (`usage().bytes`) and tallies a change of state
    /// (`tallies()`). `None` when there is no such delivery.
    fn change_delivery<R>(&mut self, id: &DeliveryId, change: impl FnOnce(&mut Delivery) -> R) -> Option<R> {
        let delivery = Arc::make_mut(self.deliveries.get_mut(id)?);
        self.touched.push(delivery.event_id);
        let before = delivery_bytes(delivery);
        let (state_before, entered_ms) = (delivery.state, tally::entered_state_at_ms(delivery));
        let result = change(delivery);
        let after = delivery_bytes(delivery);
        let ordered = delivery.sequence != 0;
        if delivery.state != state_before
            && let Some(node) = counting_node(&self.shards, &self.nodes, &delivery.endpoint_id)
        {
            let moved_ms = tally::entered_state_at_ms(delivery);
            self.tallies.tally(node).moved(state_before, entered_ms, delivery, moved_ms);
        }
        self.recount_delivery(before, after);
        if ordered {
            self.place_ordered(id);
        }
        Some(result)
    }

    /// How many deliveries an event of `event_type` without explicit
    /// targets would create now: one per enabled endpoint subscribed to
    /// the type. Read-only, for sizing a request before it is proposed.
    pub fn fanout_count(&self, event_type: &str, source: Option<&crate::ids::SourceId>) -> usize {
        self.fanout.count(&self.endpoints, event_type, source)
    }

    /// The grant of the shard `endpoint` lives in.
    pub fn grant_for(&self, endpoint: &EndpointId) -> ShardGrant {
        self.shards[endpoint.shard() as usize]
    }

    /// Shards currently granted to `node`.
    pub fn shards_owned_by(&self, node: NodeId) -> Vec<Shard> {
        (0..SHARD_COUNT).filter(|&s| self.shards[s as usize].owner == Some(node)).collect()
    }

    /// Marks a delivery active or inactive in the per-endpoint index.
    /// Keeps `usage().pending` with it.
    fn index_delivery(&mut self, delivery: &DeliveryId, endpoint: &EndpointId, active: bool) {
        if active {
            if self.active.entry(*endpoint).or_default().insert(*delivery) {
                self.usage.pending += 1;
            }
        } else if let Some(set) = self.active.get_mut(endpoint) {
            if set.remove(delivery) {
                self.usage.pending = self.usage.pending.saturating_sub(1);
            }
            if set.is_empty() {
                self.active.remove(endpoint);
            }
        }
    }

    /// Marks a delivery that just became dead, at `now_ms`: in the dead
    /// index, and in the minute's throughput.
    fn mark_dead(&mut self, delivery: &DeliveryId, endpoint: &EndpointId, now_ms: u64) {
        if self.dead.entry(*endpoint).or_default().insert(*delivery) {
            self.throughput.note(throughput::Flow::Dead, now_ms);
        }
    }

    /// Takes a delivery that is no longer dead out of the dead index.
    fn unmark_dead(&mut self, delivery: &DeliveryId, endpoint: &EndpointId) {
        if let Some(set) = self.dead.get_mut(endpoint) {
            set.remove(delivery);
            if set.is_empty() {
                self.dead.remove(endpoint);
            }
        }
    }

    /// Checks the invariants that tie the maps together; used by tests and the
    /// simulator after every apply.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (id, delivery) in &self.deliveries {
            let indexed = self.active.get(&delivery.endpoint_id).is_some_and(|s| s.contains(id));
            if indexed == delivery.state.is_terminal() {
                return Err(format!("{id}: state {:?} but active index says {indexed}", delivery.state));
            }
            if !self.events.contains_key(&delivery.event_id) {
                return Err(format!("{id}: event {} missing", delivery.event_id));
            }
        }
        for (endpoint, set) in &self.active {
            for id in set {
                match self.deliveries.get(id) {
                    Some(d) if &d.endpoint_id == endpoint => {}
                    _ => return Err(format!("active index lists {id} under {endpoint} wrongly")),
                }
            }
        }
        for (id, event) in &self.events {
            if let Some(missing) = event.deliveries.iter().find(|d| !self.deliveries.contains_key(*d)) {
                return Err(format!("{id}: its delivery {missing} is not in memory with it"));
            }
            if self.is_finished(event) {
                return Err(format!("{id}: finished, but not moved into the history"));
            }
            if self.history.contains_event(id) {
                return Err(format!("{id}: both in memory and in the history"));
            }
        }
        self.history.check()?;
        let dead = dead_index(&self.deliveries);
        if dead != self.dead {
            return Err(format!(
                "dead index lists {} deliveries, a scan finds {}",
                self.dead.values().map(DenseSet::len).sum::<usize>(),
                dead.values().map(DenseSet::len).sum::<usize>()
            ));
        }
        if self.shards.len() != SHARD_COUNT as usize {
            return Err("shard map has the wrong size".into());
        }
        if self.shards.iter().any(|g| g.token > self.last_token) {
            return Err("a shard token is above the last token granted".into());
        }
        self.check_ordered()?;
        if self.numbered != self.counted_numbered() {
            return Err("the numbered deliveries counted per key disagree with the records".into());
        }
        let counted = self.counted_usage();
        if self.usage != counted {
            return Err(format!("usage counters say {:?}, the records {counted:?}", self.usage));
        }
        Ok(())
    }
}

/// Whether no id can lie in `range` (`BTreeMap::range` panics on such
/// ranges, so a walk checks first).
pub(crate) fn is_empty_range<T: Ord>(range: &(std::ops::Bound<T>, std::ops::Bound<T>)) -> bool {
    use std::ops::Bound::{Excluded, Included};
    match range {
        (Included(s), Included(e)) => s > e,
        (Included(s) | Excluded(s), Included(e) | Excluded(e)) => s >= e,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
