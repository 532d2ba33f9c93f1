//! No acknowledged event is lost: after the heal phase, every delivery an
//! acknowledgement named exists and is delivered or dead-lettered, and a
//! delivered one reached its receiver with a 2xx. An event retention
//! forgot counts as it was pruned (the `pruned` tap checked the prune
//! itself): its deliveries must have ended the same way.

use std::collections::BTreeSet;

use hookraft_core::ids::{DeliveryId, EventId};
use hookraft_core::model::DeliveryState;
use hookraft_core::state::ClusterState;

use super::Violation;
use super::pruned::Pruned;
use crate::receivers::SendRecord;
use crate::workload::Ledger;

pub fn check(ledger: &Ledger, state: &ClusterState, pruned: &Pruned, sends: &[SendRecord]) -> Vec<Violation> {
    let answered: BTreeSet<&str> = sends
        .iter()
        .filter(|s| s.answered.is_some_and(|c| (200..300).contains(&c)))
        .map(|s| s.delivery_id.as_str())
        .collect();
    let mut found = Vec::new();
    for (event, deliveries) in &ledger.acked {
        let Ok(event_id) = EventId::parse(event) else {
            found.push(Violation::safety("lost", format!("acknowledged event {event} has a bad id")));
            continue;
        };
        let forgotten = !state.events.contains_key(&event_id);
        if forgotten && !pruned.events.contains_key(&event_id) {
            found.push(Violation::safety("lost", format!("acknowledged event {event} is not in the state")));
            continue;
        }
        for (delivery, endpoint) in deliveries {
            let Ok(id) = DeliveryId::parse(delivery) else {
                found.push(Violation::safety(
                    "lost",
                    format!("event {event} was acknowledged with a bad delivery id {delivery}"),
                ));
                continue;
            };
            let record = if forgotten { pruned.delivery(&id) } else { state.deliveries.get(&id).map(|d| &**d) };
            match record.map(|d| d.state) {
                None => found
                    .push(Violation::safety("lost", format!("delivery {delivery} of {event} to {endpoint} is gone"))),
                Some(DeliveryState::Delivered) if !answered.contains(delivery.as_str()) => {
                    found.push(Violation::safety(
                        "lost",
                        format!("delivery {delivery} is recorded delivered but its receiver never answered 2xx"),
                    ))
                }
                Some(DeliveryState::Delivered | DeliveryState::Dead) => {}
                Some(other) => found.push(Violation::liveness(
                    "lost",
                    format!("delivery {delivery} of {event} to {endpoint} is still {} after healing", other.as_str()),
                )),
            }
        }
    }
    found
}
