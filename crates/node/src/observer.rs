//! Turns applied commands into work for the delivery supervisor: committed
//! deliveries wake their endpoint's actor, endpoint changes refresh it,
//! shard grants rebalance the actors; what an apply tallied for this node
//! goes into its lifecycle metrics. Called inside the state machine's
//! apply, so it only enqueues messages and adds counts, and never blocks.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use hookraft_core::command::{Command, IngestResult, Response};
use hookraft_core::ids::{DeliveryId, EndpointId, NodeId};
use hookraft_core::state::ClusterState;
use hookraft_delivery::metrics::LifecycleMetrics;
use hookraft_delivery::supervisor::SupervisorMsg;
use hookraft_raft::ApplyObserver;
use ractor::ActorRef;

/// Set once the supervisor runs; commands applied before that (the log
/// replayed at start-up) need no message: the supervisor's first
/// rebalance reads the state they produced.
#[derive(Default)]
pub struct SupervisorLink {
    pub supervisor: OnceLock<ActorRef<SupervisorMsg>>,
    /// This node's id and lifecycle metrics, set with the supervisor: the
    /// log replayed at start-up was counted by the process before, and
    /// counting it again would show a restart as a burst of deliveries.
    pub lifecycle: OnceLock<(NodeId, Arc<LifecycleMetrics>)>,
}

impl SupervisorLink {
    fn send(&self, message: SupervisorMsg) {
        if let Some(supervisor) = self.supervisor.get() {
            // Fails only while the node shuts down.
            let _ = supervisor.send_message(message);
        }
    }
}

impl ApplyObserver for SupervisorLink {
    /// The supervisor reads the state itself, outside the apply lock.
    fn applied(&self, state: &ClusterState, command: &Command, response: &Response) {
        self.route(command, response);
        if let Some((node_id, metrics)) = self.lifecycle.get()
            && let Some(tally) = state.tallies().of(*node_id)
        {
            metrics.record(tally);
        }
        // What the apply made ready beyond its response: operational
        // events' deliveries, and ordered keys' new heads (their actors
        // parked them; a head still its key's, a retry, is not among them).
        if !state.to_wake().is_empty() {
            self.send(SupervisorMsg::Wake(group(state.to_wake().iter())));
        }
    }

    fn snapshot_installed(&self, _state: &ClusterState) {
        self.send(SupervisorMsg::Resync);
    }
}

impl SupervisorLink {
    /// Sends what `command` means for the actors to the supervisor.
    fn route(&self, command: &Command, response: &Response) {
        match (command, response) {
            (Command::Batch(commands), Response::Batch(responses)) => {
                for (command, response) in commands.iter().zip(responses) {
                    self.route(command, response);
                }
            }
            (Command::SetOrdering { id, .. }, Response::Ok) => self.send(SupervisorMsg::EndpointChanged(*id)),
            (Command::IngestEvents { .. } | Command::IngestEventsFrom { .. }, Response::Ingested { results }) => {
                let created = results.iter().filter_map(|r| match r {
                    IngestResult::Created { deliveries, .. } => Some(deliveries.iter()),
                    _ => None,
                });
                let wake = group(created.flatten());
                if !wake.is_empty() {
                    self.send(SupervisorMsg::Wake(wake));
                }
            }
            (Command::Replay { .. }, Response::Replayed { deliveries } | Response::ReplayedUpTo { deliveries, .. })
                if !deliveries.is_empty() =>
            {
                self.send(SupervisorMsg::Wake(group(deliveries.iter())));
            }
            (Command::RegisterEndpoint { endpoint }, Response::Ok) => {
                self.send(SupervisorMsg::EndpointChanged(endpoint.id))
            }
            (
                Command::UpdateEndpoint { id, .. }
                | Command::DeleteEndpoint { id, .. }
                | Command::RotateSecret { id, .. },
                Response::Ok,
            ) => self.send(SupervisorMsg::EndpointChanged(*id)),
            (Command::AssignShards { .. } | Command::RevokeShards { .. }, Response::ShardsAssigned { .. }) => {
                self.send(SupervisorMsg::Rebalance)
            }
            _ => {}
        }
    }
}

fn group<'a>(pairs: impl Iterator<Item = &'a (DeliveryId, EndpointId)>) -> Vec<(EndpointId, Vec<DeliveryId>)> {
    let mut by_endpoint: BTreeMap<EndpointId, Vec<DeliveryId>> = BTreeMap::new();
    for (delivery, endpoint) in pairs {
        by_endpoint.entry(*endpoint).or_default().push(*delivery);
    }
    by_endpoint.into_iter().collect()
}

/// Two observers called in turn: the node's own, then a tap (the simulator's checkers).
pub struct Both(pub Arc<SupervisorLink>, pub Arc<dyn ApplyObserver>);

impl ApplyObserver for Both {
    fn applied(&self, state: &ClusterState, command: &Command, response: &Response) {
        self.0.applied(state, command, response);
        self.1.applied(state, command, response);
    }

    fn snapshot_installed(&self, state: &ClusterState) {
        self.0.snapshot_installed(state);
        self.1.snapshot_installed(state);
    }
}
