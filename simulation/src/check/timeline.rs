//! Timelines are append-only and agree with the receivers: a timeline seen
//! earlier is a prefix of the final one, and an attempt the receiver
//! answered 2xx in time is never recorded as failed under the same token
//! (when two attempts share a node, token and start time, one of them is
//! recorded 2xx).
//! Every delivery is compared, at work or in the history; one retention
//! forgot is compared as its prune took it out.

use hookraft_core::ids::DeliveryId;
use hookraft_core::model::TimelineEntry;
use hookraft_core::state::ClusterState;

use super::pruned::Pruned;
use super::{Violation, every};
use crate::receivers::SendRecord;

pub fn check(earlier: &ClusterState, last: &ClusterState, pruned: &Pruned, sends: &[SendRecord]) -> Vec<Violation> {
    let mut found = Vec::new();
    for before in earlier.deliveries_in(every(), false) {
        let id = &before.id;
        let Some(after) = pruned.kept_or_pruned(last, id) else {
            found.push(Violation::safety("timeline", format!("delivery {id} disappeared")));
            continue;
        };
        if after.created_at_ms != before.created_at_ms || !after.history.starts_with(&before.history) {
            found.push(Violation::safety("timeline", format!("the timeline of {id} was rewritten")));
        }
    }
    for send in sends.iter().filter(|s| s.in_time && s.answered.is_some_and(|c| (200..300).contains(&c))) {
        let Ok(id) = DeliveryId::parse(&send.delivery_id) else { continue };
        let Some(delivery) = pruned.kept_or_pruned(last, &id) else { continue };
        // The attempts recorded as this send: its node, token and start.
        // Two attempts may share them (the node's wall clock stepped back
        // between them, seed 537824074): one of them must then say 2xx.
        let recorded: Vec<Option<u16>> = delivery
            .history
            .iter()
            .filter_map(|entry| match entry {
                TimelineEntry::Attempt { attempt, .. }
                    if attempt.node_id == send.origin.node_id
                        && attempt.fencing_token == send.origin.token
                        && attempt.started_at_ms == send.origin.started_at_ms =>
                {
                    Some(attempt.status_code)
                }
                _ => None,
            })
            .collect();
        if !recorded.is_empty() && !recorded.iter().any(|c| c.is_some_and(|c| (200..300).contains(&c))) {
            found.push(Violation::safety(
                "timeline",
                format!(
                    "{}: the receiver answered {:?} in time, the timeline says {:?}",
                    send.delivery_id, send.answered, recorded
                ),
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
    fn timelines_are_compared_wherever_the_states_keep_them() {
        let mut world = OneDelivery::new(4, None);
        let pending = world.state.clone();
        world.deliver();
        // At work earlier, in the history at the end: appended to.
        assert!(check(&pending, &world.state, &Pruned::default(), &[]).is_empty());
        // In the history earlier, nowhere at the end, not pruned.
        let found = check(&world.state, &ClusterState::default(), &Pruned::default(), &[]);
        assert!(found.len() == 1 && found[0].detail.contains("disappeared"), "{found:?}");
        // In the history at both ends (a replica that applied the same).
        let replica = OneDelivery::new(4, None).deliver().state.clone();
        assert!(check(&world.state, &replica, &Pruned::default(), &[]).is_empty());
        // In the history earlier, at work with a shorter timeline at the end.
        let found = check(&world.state, &pending, &Pruned::default(), &[]);
        assert!(found.len() == 1 && found[0].detail.contains("rewritten"), "{found:?}");
    }
}
