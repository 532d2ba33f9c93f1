//! A batch is one log entry: after healing, the events of every batch the
//! workload posted are all in the state or none of them are, and the ones
//! there were received at one instant (the time of the entry that holds
//! them; two entries would have been stamped apart). Events retention
//! forgot count as there, received when their prune said; a key whose
//! event was pruned is free again, so a retry of the batch that outlived
//! the retention makes a second event under it, and each key is judged by
//! its first event.

use std::collections::BTreeSet;

use hookraft_core::state::ClusterState;

use super::Violation;
use super::pruned::Pruned;
use crate::workload::Ledger;

pub fn check(ledger: &Ledger, state: &ClusterState, pruned: &Pruned) -> Vec<Violation> {
    let pruned = pruned.received_by_key();
    let mut found = Vec::new();
    for keys in &ledger.batches {
        let received: Vec<Option<u64>> = keys
            .iter()
            .map(|key| {
                let kept = state.idempotency.get(key.as_str()).and_then(|id| state.events.get(id));
                let kept = kept.map(|event| event.received_at_ms);
                let forgotten = pruned.get(key.as_str()).copied();
                kept.into_iter().chain(forgotten).min()
            })
            .collect();
        let present = received.iter().flatten().count();
        if present != 0 && present != keys.len() {
            let missing: Vec<&str> =
                keys.iter().zip(&received).filter(|(_, at)| at.is_none()).map(|(k, _)| k.as_str()).collect();
            found.push(Violation::safety(
                "batches",
                format!("batch {} was partly committed: {} missing", keys.join(","), missing.join(",")),
            ));
        }
        let instants: BTreeSet<u64> = received.iter().flatten().copied().collect();
        if instants.len() > 1 {
            found.push(Violation::safety(
                "batches",
                format!("batch {} was committed in more than one entry (received at {instants:?})", keys.join(",")),
            ));
        }
    }
    found
}
