//! The inbound checker on small hand-made states.

use std::sync::Arc;

use hookraft_core::ids::{DeliveryId, EndpointId, SourceId};
use hookraft_core::inbound::Version;
use hookraft_core::model::{Event, OptionalMs};
use hookraft_core::payload::Payload;
use hookraft_delivery::transport::SendOrigin;

use super::*;
use crate::check::fixture::through_snapshot;

const SOURCE: &str = "src_01arz3ndektsv4rrffq69g5fav";
/// Receives from [`SOURCE`] (receiver `in0`).
const INBOUND_ENDPOINT: &str = "ep_01j0000000000000000000000e";
/// A producers' endpoint (receiver `r0`).
const PRODUCER_ENDPOINT: &str = "ep_01j0000000000000000000000f";

fn event_id(n: u64) -> EventId {
    EventId::parse(&format!("evt_01J00000000000000000000{n:03}")).unwrap()
}

fn endpoint(id: &str) -> EndpointId {
    EndpointId::parse(id).unwrap()
}

fn body(provider_id: &str) -> String {
    format!(r#"{{"id":"{provider_id}"}}"#)
}

fn endpoints() -> Vec<SimEndpoint> {
    vec![SimEndpoint {
        id: INBOUND_ENDPOINT.into(),
        receiver: "in0".into(),
        event_types: Vec::new(),
        ordering: None,
        sources: vec![SOURCE.into()],
    }]
}

/// Final state, ledger and sends of a run, built up event by event. The
/// state is made by hand; the checks read it as a replica decodes it, the
/// finished events in the history.
#[derive(Default)]
struct World {
    state: ClusterState,
    ledger: Ledger,
    sends: Vec<SendRecord>,
}

impl World {
    /// Event `n` of provider event `provider_id` (entity `cus_1` at
    /// `version`), its deliveries to `targets` in `state`, the provider
    /// answered with it.
    fn event(&mut self, n: u64, provider_id: &str, version: i64, targets: &[(&str, DeliveryState)]) {
        let id = event_id(n);
        let inbound = Inbound {
            source_id: SOURCE.parse::<SourceId>().unwrap(),
            provider_event_id: provider_id.into(),
            entity_key: Some("cus_1".into()),
            version: Some(Version::Number(version)),
        };
        let mut deliveries = Vec::new();
        for (target, state) in targets {
            let delivery = delivery(id, endpoint(target), *state, &[]);
            deliveries.push(delivery.id);
            self.state.deliveries.insert(delivery.id, Arc::new(delivery));
        }
        let event = Event {
            id,
            event_type: "invoice.paid".into(),
            payload: Payload::clear(&body(provider_id)),
            received_at_ms: 0,
            idempotency_key: Some(Inbound::idempotency_key(&inbound.source_id, provider_id).into()),
            deliveries: deliveries.into_boxed_slice(),
            received_by: Some(1),
            rewrapped: None,
            ordering_key: Some("cus_1".into()),
            inbound: Some(Box::new(inbound)),
        };
        self.state.events.insert(id, Box::new(event));
        let post = self.ledger.inbound.entry((SOURCE.into(), provider_id.into())).or_default();
        post.event_type = "invoice.paid".into();
        post.body = body(provider_id);
        post.posts += 1;
        post.answers.push(id.to_string());
        post.created.push((id.to_string(), targets.len() as u64));
    }

    /// `receiver` got event `n` and answered `code`.
    fn send(&mut self, n: u64, provider_id: &str, target: &str, receiver: &str, code: u16) {
        self.sends.push(SendRecord {
            at_ms: 0,
            receiver: receiver.into(),
            origin: SendOrigin { node_id: 1, shard: 0, token: 1, started_at_ms: 0 },
            event_id: event_id(n).to_string(),
            delivery_id: DeliveryId::derive(&event_id(n), &endpoint(target)).to_string(),
            answered: Some(code),
            answered_at_ms: 2,
            in_time: true,
            signature_valid: true,
            body: Arc::from(body(provider_id).as_bytes()),
            sequence: None,
            ordering_key: None,
        });
    }

    /// The state as a node holds it.
    fn stored(&self) -> ClusterState {
        through_snapshot(&self.state)
    }

    fn check(&self) -> Vec<Violation> {
        let state = self.stored();
        let states = [(1, state.clone(), 0)];
        check(&self.ledger, &states, &state, &Pruned::default(), &endpoints(), &self.sends)
    }
}

fn delivery(event: EventId, endpoint_id: EndpointId, state: DeliveryState, history: &[TimelineEntry]) -> Delivery {
    Delivery {
        id: DeliveryId::derive(&event, &endpoint_id),
        event_id: event,
        endpoint_id,
        state,
        initial_state: DeliveryState::Pending,
        attempt_count: 1,
        cycle_attempts: 1,
        sequence: 0,
        cycle_started_at_ms: 0,
        next_attempt_at_ms: OptionalMs::NONE,
        created_at_ms: 0,
        updated_at_ms: 0,
        history: history.to_vec().into_boxed_slice(),
    }
}

#[test]
fn one_event_per_provider_event_delivered_where_its_source_goes_passes() {
    let mut world = World::default();
    world.event(1, "evt_a", 1, &[(INBOUND_ENDPOINT, DeliveryState::Delivered)]);
    world.send(1, "evt_a", INBOUND_ENDPOINT, "in0", 200);
    // A repeat answered with the same event.
    world.ledger.inbound.values_mut().for_each(|post| post.answers.push(event_id(1).to_string()));
    assert!(world.check().is_empty(), "{:?}", world.check());
}

#[test]
fn two_events_of_one_provider_event_on_a_replica_are_a_violation() {
    let mut world = World::default();
    world.event(1, "evt_a", 1, &[(INBOUND_ENDPOINT, DeliveryState::Dead)]);
    world.event(2, "evt_a", 1, &[(INBOUND_ENDPOINT, DeliveryState::Retrying)]);
    // One in the history, one at work.
    assert!(world.stored().history().contains_event(&event_id(1)) && world.stored().events.contains_key(&event_id(2)));
    let found = world.check();
    assert!(found.iter().any(|v| v.detail.contains("node 1 holds 2 events of provider event evt_a")), "{found:?}");
}

#[test]
fn an_answer_naming_an_event_that_is_nowhere_or_of_another_provider_event_is_a_violation() {
    let mut world = World::default();
    world.event(1, "evt_a", 1, &[(INBOUND_ENDPOINT, DeliveryState::Dead)]);
    world.event(2, "evt_b", 2, &[(INBOUND_ENDPOINT, DeliveryState::Dead)]);
    let post = world.ledger.inbound.get_mut(&(SOURCE.to_string(), "evt_a".to_string())).unwrap();
    post.answers.push(event_id(2).to_string());
    post.answers.push(event_id(9).to_string());
    let found = world.check();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].detail.contains("which is not of it"), "{}", found[0].detail);
    assert!(found[1].detail.contains("neither held nor pruned"), "{}", found[1].detail);
}

#[test]
fn a_delivery_or_a_request_to_an_endpoint_not_receiving_from_the_source_is_a_violation() {
    let mut world = World::default();
    world.event(1, "evt_a", 1, &[(INBOUND_ENDPOINT, DeliveryState::Dead), (PRODUCER_ENDPOINT, DeliveryState::Dead)]);
    world.send(1, "evt_a", PRODUCER_ENDPOINT, "r0", 503);
    let found = world.check();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].detail.contains("has deliveries to"), "{}", found[0].detail);
    assert!(found[1].detail.contains("which it does not receive"), "{}", found[1].detail);
}

#[test]
fn no_delivery_to_an_endpoint_receiving_from_the_source_is_a_violation() {
    let mut world = World::default();
    world.event(1, "evt_a", 1, &[]);
    let found = world.check();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("not to {ep_"), "{}", found[0].detail);
}

#[test]
fn delivered_without_a_2xx_refused_or_unfinished_are_violations() {
    let mut world = World::default();
    world.event(1, "evt_a", 1, &[(INBOUND_ENDPOINT, DeliveryState::Delivered)]);
    world.event(2, "evt_b", 2, &[(INBOUND_ENDPOINT, DeliveryState::Retrying)]);
    world.ledger.inbound.values_mut().next().unwrap().refused.push(401);
    let found = world.check();
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].detail.contains("was refused with 401"), "{}", found[0].detail);
    assert!(found[1].detail.contains("never answered 2xx"), "{}", found[1].detail);
    assert_eq!(found[2].kind, crate::check::Kind::Liveness);
}

#[test]
fn ignored_as_stale_passes_only_behind_a_newer_version_delivered() {
    let mut world = World::default();
    world.event(1, "evt_a", 1, &[(INBOUND_ENDPOINT, DeliveryState::IgnoredStale)]);
    world.event(2, "evt_b", 2, &[(INBOUND_ENDPOINT, DeliveryState::Delivered)]);
    world.send(2, "evt_b", INBOUND_ENDPOINT, "in0", 200);
    let ignore = |world: &mut World, behind: u64| {
        let entry = TimelineEntry::IgnoredStale { at_ms: 5, newer: Box::new(event_id(behind)) };
        let stale = delivery(event_id(1), endpoint(INBOUND_ENDPOINT), DeliveryState::IgnoredStale, &[entry]);
        world.state.deliveries.insert(stale.id, Arc::new(stale));
    };
    ignore(&mut world, 2);
    assert!(world.check().is_empty(), "{:?}", world.check());
    // Behind itself: not a newer version.
    ignore(&mut world, 1);
    let found = world.check();
    assert!(found.len() == 1 && found[0].detail.contains("not a newer version"), "{found:?}");
    // Behind a newer version never delivered.
    ignore(&mut world, 2);
    let newer = DeliveryId::derive(&event_id(2), &endpoint(INBOUND_ENDPOINT));
    let undelivered = delivery(event_id(2), endpoint(INBOUND_ENDPOINT), DeliveryState::Dead, &[]);
    world.state.deliveries.insert(newer, Arc::new(undelivered));
    let found = world.check();
    assert!(found.len() == 1 && found[0].detail.contains("which was not delivered"), "{found:?}");
}

#[test]
fn the_tap_flags_an_event_created_while_another_of_its_provider_event_is_held() {
    let mut world = World::default();
    world.event(1, "evt_a", 1, &[]);
    let tap = InboundTap::new();
    let command = Command::IngestEvents { now_ms: 0, events: Vec::new() };
    let created = |n: u64| Response::Ingested {
        results: vec![IngestResult::Created { event_id: event_id(n), deliveries: Vec::new() }],
    };
    // Finished at once (no delivery): both in the history.
    tap.observe(&world.stored(), &command, &created(1));
    assert!(tap.violations().is_empty());
    world.event(2, "evt_a", 1, &[]);
    assert!(world.stored().history().contains_event(&event_id(1)));
    tap.observe(&world.stored(), &command, &created(2));
    // Seen again on another node: reported once.
    tap.observe(&world.stored(), &command, &created(2));
    let found = tap.violations();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("while [\"evt_"), "{}", found[0].detail);
}
