//! Liveness: after healing, every delivery to a healthy receiver completes
//! within the heal phase's bound.

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
            state.active.iter().find(|(id, _)| id.as_str() == endpoint.id).map(|(_, set)| set.len()).unwrap_or(0);
        if pending > 0 {
            found.push(Violation::liveness(
                "liveness",
                format!(
                    "{pending} deliveries to healthy receiver {} still pending {bound_ms} ms after healing",
                    endpoint.receiver
                ),
            ));
        }
    }
    found
}
