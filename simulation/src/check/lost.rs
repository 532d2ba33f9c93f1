//! No acknowledged event is lost: after the heal phase, every delivery an
//! acknowledgement named exists (at work in memory or finished in the
//! history) and is delivered or dead-lettered, and a delivered one reached
//! its receiver with a 2xx. An event retention
//! forgot counts as it was pruned (the `pruned` tap checked the prune
//! itself): its deliveries must have ended the same way.

use std::borrow::Cow;
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
        let forgotten = !state.has_event(&event_id);
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
            let record = if forgotten { pruned.delivery(&id).map(Cow::Borrowed) } else { state.delivery(&id) };
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hookraft_delivery::transport::SendOrigin;

    use super::*;
    use crate::check::fixture::OneDelivery;

    fn acked(world: &OneDelivery) -> Ledger {
        let mut ledger = Ledger::default();
        let named = vec![(world.delivery.to_string(), world.endpoint.to_string())];
        ledger.acked.insert(world.event.to_string(), named);
        ledger
    }

    fn answered(world: &OneDelivery, code: u16) -> SendRecord {
        SendRecord {
            at_ms: 0,
            receiver: "r0".into(),
            origin: SendOrigin { node_id: 1, shard: 0, token: 1, started_at_ms: 0 },
            event_id: world.event.to_string(),
            delivery_id: world.delivery.to_string(),
            answered: Some(code),
            answered_at_ms: 2,
            in_time: true,
            signature_valid: true,
            body: Arc::from(&b"{}"[..]),
            sequence: None,
            ordering_key: None,
        }
    }

    #[test]
    fn a_delivered_event_in_the_history_is_not_lost_and_is_held_to_its_receiver() {
        let mut world = OneDelivery::new(2, None);
        let ledger = acked(&world);
        let pending = check(&ledger, &world.state, &Pruned::default(), &[]);
        assert!(pending.len() == 1 && pending[0].kind == crate::check::Kind::Liveness, "{pending:?}");
        world.deliver();
        let found = check(&ledger, &world.state, &Pruned::default(), &[answered(&world, 200)]);
        assert!(found.is_empty(), "{found:?}");
        // Read from the history: recorded delivered, never answered 2xx.
        let found = check(&ledger, &world.state, &Pruned::default(), &[answered(&world, 503)]);
        assert!(found.len() == 1 && found[0].detail.contains("never answered 2xx"), "{found:?}");
        // Neither stored nor pruned: lost.
        let found = check(&ledger, &ClusterState::default(), &Pruned::default(), &[]);
        assert!(found.len() == 1 && found[0].detail.contains("is not in the state"), "{found:?}");
    }
}
