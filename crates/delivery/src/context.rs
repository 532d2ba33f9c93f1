//! What the delivery actors share with the rest of the node: read access to
//! the replicated state, the ownership view, the transport, the clock, the
//! outcome channel and counters. Built once by the node and cloned into actors.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use hookraft_core::breaker::BreakerConfig;
use hookraft_core::clock::Clock;
use hookraft_core::command::Outcome;
use hookraft_core::ids::{DeliveryId, NodeId, Shard};
use hookraft_raft::StateHandle;
use tokio::sync::mpsc;

use crate::metrics::DeliveryMetrics;
use crate::payloads::PayloadKeys;
use crate::transport::Transport;

/// Which shards this node may send for right now, and under which token.
pub trait Ownership: Send + Sync + 'static {
    /// The fencing token of this node's current grant of `shard`, if it owns
    /// the shard and its lease is valid at this instant.
    fn token_for(&self, shard: Shard) -> Option<u64>;

    /// The fencing token of this node's current grant of `shard`, whether
    /// or not its lease is valid at this instant.
    fn granted_token(&self, shard: Shard) -> Option<u64>;
}

/// Deliveries with an attempt under way on this node, so the API can show
/// `attempting` for them.
#[derive(Debug, Default)]
pub struct InFlightRegistry {
    ids: Mutex<HashSet<DeliveryId>>,
}

impl InFlightRegistry {
    pub fn insert(&self, id: &DeliveryId) {
        self.lock().insert(*id);
    }

    pub fn remove(&self, id: &DeliveryId) {
        self.lock().remove(id);
    }

    pub fn contains(&self, id: &DeliveryId) -> bool {
        self.lock().contains(id)
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// The deliveries under way now, copied out (at most the endpoints'
    /// `max_in_flight` summed), for counting them per endpoint.
    pub fn ids(&self) -> Vec<DeliveryId> {
        self.lock().iter().copied().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<DeliveryId>> {
        // A panic while holding this lock cannot leave the set inconsistent.
        self.ids.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Shared by the supervisor and every endpoint actor of a node.
#[derive(Clone)]
pub struct DeliveryContext {
    pub node_id: NodeId,
    pub state: StateHandle,
    pub ownership: Arc<dyn Ownership>,
    pub transport: Arc<dyn Transport>,
    pub clock: Arc<dyn Clock>,
    /// Into the outcome batcher; bounded, so a slow log slows the actors down.
    pub outcomes: mpsc::Sender<Outcome>,
    pub in_flight: Arc<InFlightRegistry>,
    pub breaker: BreakerConfig,
    pub metrics: Arc<DeliveryMetrics>,
    /// Mixed with each endpoint id to seed that actor's backoff jitter.
    pub seed: u64,
    /// Opens payloads just before they are signed and sent.
    pub payloads: Arc<PayloadKeys>,
}
