//! Liveness: after healing, every delivery to a healthy receiver completes
//! within the heal phase's bound.

use hookraft_core::ids::EndpointId;
use hookraft_core::state::ClusterState;

use super::Violation;
use crate::receivers::{Behavior, Receivers};
use crate::workload::SimEndpoint;

pub fn check(state: &ClusterState, endpoints: &[SimEndpoint], receivers: &Receivers, bound_ms: u64) -> Vec<Violation> {
    let mut found = Vec::new();
    for endpoint in endpoints {
        if receivers.behavior(&endpoint.receiver) != Some(Behavior::Healthy) {
            continue;
        }
        let pending =
            state.active.iter().find(|(id, _)| *id.as_str() == *endpoint.id).map(|(_, set)| set.len()).unwrap_or(0);
        if pending > 0 {
            // Who should be sending, and whether its breaker lets it: what a
            // reader of the violation asks first.
            let owner = EndpointId::parse(&endpoint.id).ok().map(|id| {
                let shard = id.shard();
                let grant = &state.shards[usize::from(shard)];
                let breaker = state.endpoints.get(&id).map(|e| format!("{:?}", e.breaker.status()));
                format!("shard {shard} owner {:?} token {}, breaker {breaker:?}", grant.owner, grant.token)
            });
            found.push(Violation::liveness(
                "liveness",
                format!(
                    "{pending} deliveries to healthy receiver {} still pending {bound_ms} ms after healing ({})",
                    endpoint.receiver,
                    owner.unwrap_or_default()
                ),
            ));
        }
    }
    found
}
