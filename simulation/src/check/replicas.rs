//! Replicas agree: once every node has applied the same log index, their
//! states are byte-for-byte equal (compared by digest), their histories
//! too, record by record, wherever each node keeps them (in memory or in
//! its history store, as of its own last snapshot).

use hookraft_core::ids::NodeId;
use hookraft_core::state::ClusterState;
use sha2::{Digest, Sha256};

use super::Violation;

/// SHA-256 (hex, 16 bytes) of a state's bincode encoding, then of each
/// record of its history in id order (a state whose history is kept in a
/// store encodes only what it counts).
pub fn digest(state: &ClusterState) -> String {
    let config = bincode::config::standard();
    let mut hash = Sha256::new();
    hash.update(bincode::serde::encode_to_vec(state, config).unwrap_or_default());
    for event in state.history().events() {
        hash.update(bincode::serde::encode_to_vec(&event, config).unwrap_or_default());
    }
    for delivery in state.history().deliveries() {
        hash.update(bincode::serde::encode_to_vec(&delivery, config).unwrap_or_default());
    }
    hash.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
}

pub fn check(states: &[(NodeId, ClusterState, u64)]) -> Vec<Violation> {
    let mut found = Vec::new();
    let Some((first_id, first, first_index)) = states.first() else { return found };
    let expected = digest(first);
    for (id, state, index) in &states[1..] {
        if index != first_index {
            found.push(Violation::liveness(
                "replicas",
                format!("node {id} applied up to {index}, node {first_id} up to {first_index}, after healing"),
            ));
        } else if digest(state) != expected {
            found.push(Violation::safety("replicas", format!("nodes {first_id} and {id} differ at index {index}")));
        }
        if let Err(e) = state.check_invariants() {
            found.push(Violation::safety("replicas", format!("node {id}: {e}")));
        }
    }
    found
}
