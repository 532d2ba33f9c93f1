//! Timelines are append-only and agree with the receivers: a timeline seen
//! earlier is a prefix of the final one, and an attempt the receiver
//! answered 2xx in time is never recorded as failed under the same token.
//! A delivery retention forgot is compared as its prune took it out.

use hookraft_core::ids::DeliveryId;
use hookraft_core::model::TimelineEntry;
use hookraft_core::state::ClusterState;

use super::Violation;
use super::pruned::Pruned;
use crate::receivers::SendRecord;

pub fn check(earlier: &ClusterState, last: &ClusterState, pruned: &Pruned, sends: &[SendRecord]) -> Vec<Violation> {
    let mut found = Vec::new();
    for (id, before) in &earlier.deliveries {
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
        for entry in &delivery.history {
            let TimelineEntry::Attempt { attempt, .. } = entry else { continue };
            let same = attempt.node_id == send.origin.node_id
                && attempt.fencing_token == send.origin.token
                && attempt.started_at_ms == send.origin.started_at_ms;
            if same && !attempt.status_code.is_some_and(|c| (200..300).contains(&c)) {
                found.push(Violation::safety(
                    "timeline",
                    format!(
                        "{}: the receiver answered {:?} in time, the timeline says {:?}",
                        send.delivery_id, send.answered, attempt.status_code
                    ),
                ));
            }
        }
    }
    found
}
