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
                let kept = state.idempotency.get(key.as_str()).and_then(|id| state.event(id));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::OneDelivery;

    #[test]
    fn a_batch_whose_events_finished_is_found_in_the_history() {
        let mut first = OneDelivery::new(3, Some("k-1"));
        first.deliver();
        let mut ledger = Ledger::default();
        ledger.batches.push(vec!["k-1".into()]);
        assert!(check(&ledger, &first.state, &Pruned::default()).is_empty());
        // A second key of the same batch that is nowhere: committed in part.
        ledger.batches[0].push("k-2".into());
        let found = check(&ledger, &first.state, &Pruned::default());
        assert!(found.len() == 1 && found[0].detail.contains("partly committed: k-2 missing"), "{found:?}");
    }
}
