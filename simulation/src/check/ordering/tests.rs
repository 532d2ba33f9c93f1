//! The ordering checker's own tests.

use std::sync::Arc;

use hookraft_core::ids::EventId;
use hookraft_core::model::{Event, OptionalMs};
use hookraft_core::payload::Payload;
use hookraft_delivery::transport::SendOrigin;

use super::*;
use crate::check::fixture::through_snapshot;

const ENDPOINT: &str = "ep_01J0000000000000000000000E";

fn endpoint() -> EndpointId {
    EndpointId::parse(ENDPOINT).unwrap()
}

fn event(n: u64) -> EventId {
    EventId::parse(&format!("evt_01J00000000000000000000{n:03}")).unwrap()
}

fn body(n: u64) -> String {
    format!(r#"{{"n":{n}}}"#)
}

/// A run of key `a` of sequences 1..=count, every one in `final_state`,
/// and a ledger that posted each with key `a`. Its state is made by
/// hand, each delivery with its event; the checks read it as a replica
/// decodes it, the finished events in the history.
struct World {
    sequences: Sequences,
    state: ClusterState,
    ledger: Ledger,
    modes: BTreeMap<String, Option<OnDead>>,
}

impl World {
    fn new(count: u64, on_dead: OnDead, final_state: DeliveryState) -> Self {
        let mut world = Self {
            sequences: Sequences::default(),
            state: ClusterState::default(),
            ledger: Ledger::default(),
            modes: BTreeMap::from([("r0".to_string(), Some(on_dead))]),
        };
        for n in 1..=count {
            let id = world.id(n);
            assert_eq!(world.sequences.number(id, endpoint(), "a", n, &ClusterState::default()), None);
            world.set(n, final_state, &[]);
            world.ledger.posted.insert(body(n));
            world.ledger.ordering_keys.insert(body(n), "a".into());
        }
        world
    }

    fn id(&self, n: u64) -> DeliveryId {
        DeliveryId::derive(&event(n), &endpoint())
    }

    /// Sets delivery `n`'s final record, and its event's.
    fn set(&mut self, n: u64, state: DeliveryState, history: &[TimelineEntry]) {
        let delivery = Delivery {
            id: self.id(n),
            event_id: event(n),
            endpoint_id: endpoint(),
            state,
            initial_state: DeliveryState::Pending,
            attempt_count: 1,
            cycle_attempts: 1,
            sequence: n as u32,
            cycle_started_at_ms: 0,
            next_attempt_at_ms: OptionalMs::NONE,
            created_at_ms: 0,
            updated_at_ms: 0,
            history: history.to_vec().into_boxed_slice(),
        };
        self.state.deliveries.insert(self.id(n), Arc::new(delivery));
        let event = Event {
            id: event(n),
            event_type: "order.paid".into(),
            payload: Payload::clear(&body(n)),
            received_at_ms: 0,
            idempotency_key: None,
            deliveries: Box::new([self.id(n)]),
            received_by: Some(1),
            rewrapped: None,
            ordering_key: Some("a".into()),
            inbound: None,
        };
        self.state.events.insert(event.id, Box::new(event));
    }

    /// Delivery `n` and its event gone, as retention takes them.
    fn forget(&mut self, n: u64) {
        self.state.deliveries.remove(&self.id(n));
        self.state.events.remove(&event(n));
    }

    /// The state as a node holds it.
    fn stored(&self) -> ClusterState {
        through_snapshot(&self.state)
    }

    /// A request for sequence `n` arriving at `at_ms`, answered `code`
    /// 2 ms later.
    fn send(&self, n: u64, at_ms: u64, code: u16) -> SendRecord {
        SendRecord {
            at_ms,
            receiver: "r0".into(),
            origin: SendOrigin { node_id: 1, shard: 0, token: 1, started_at_ms: at_ms },
            event_id: event(n).to_string(),
            delivery_id: self.id(n).to_string(),
            answered: Some(code),
            answered_at_ms: at_ms + 2,
            in_time: true,
            signature_valid: true,
            body: Arc::from(body(n).as_bytes()),
            sequence: Some(n.to_string()),
            ordering_key: Some("a".into()),
        }
    }

    fn check(&self, sends: &[SendRecord]) -> Vec<Violation> {
        check(&self.sequences, &self.stored(), &Pruned::default(), &self.modes, &self.ledger, sends)
    }
}

fn dead() -> TimelineEntry {
    TimelineEntry::Dead { at_ms: 0, reason: "attempts exhausted".into() }
}

#[test]
fn a_key_delivered_in_order_through_a_retry_passes() {
    let world = World::new(3, OnDead::Block, DeliveryState::Delivered);
    let sends = [world.send(1, 0, 200), world.send(2, 10, 503), world.send(2, 20, 200), world.send(3, 30, 200)];
    assert!(world.check(&sends).is_empty(), "{:?}", world.check(&sends));
}

#[test]
fn a_send_that_overtakes_its_predecessor_is_a_violation() {
    let world = World::new(3, OnDead::Skip, DeliveryState::Delivered);
    // #2 arrives while #1 is still unanswered (answered at 2 ms).
    let sends = [world.send(1, 0, 200), world.send(2, 1, 200), world.send(3, 10, 200)];
    let found = world.check(&sends);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("a#2") && found[0].detail.contains("before #1"), "{}", found[0].detail);
    // A failed answer to #1 does not let #2 go either.
    let sends = [world.send(1, 0, 503), world.send(2, 10, 200), world.send(1, 20, 200)];
    assert_eq!(world.check(&sends).len(), 1);
}

#[test]
fn a_gap_in_the_sequences_delivered_is_a_violation() {
    let mut world = World::new(3, OnDead::Skip, DeliveryState::Delivered);
    world.set(2, DeliveryState::Retrying, &[]);
    assert!(world.stored().deliveries.contains_key(&world.id(2)), "at work");
    assert!(world.stored().history().contains_delivery(&world.id(3)), "finished");
    let sends = [world.send(1, 0, 200), world.send(3, 10, 200)];
    let found = world.check(&sends);
    assert!(found.iter().any(|v| v.detail.contains("a gap") && v.detail.contains("#2")), "{found:?}");
    // Had #2 been dead-lettered, under `skip`, there is no gap and #3 may go.
    world.set(2, DeliveryState::Dead, &[dead()]);
    assert!(world.check(&sends).is_empty(), "{:?}", world.check(&sends));
}

#[test]
fn a_dead_head_lets_its_key_go_under_block_only_once_skipped() {
    let mut world = World::new(2, OnDead::Block, DeliveryState::Delivered);
    world.set(1, DeliveryState::Dead, &[dead()]);
    let sends = [world.send(1, 0, 503), world.send(2, 10, 200)];
    assert_eq!(world.check(&sends).len(), 1);
    world.set(1, DeliveryState::Dead, &[dead(), TimelineEntry::Skipped { at_ms: 5 }]);
    assert!(world.check(&sends).is_empty(), "{:?}", world.check(&sends));
}

#[test]
fn a_head_ignored_as_stale_lets_its_key_go_and_leaves_no_gap() {
    let mut world = World::new(3, OnDead::Block, DeliveryState::Delivered);
    let ignored = TimelineEntry::IgnoredStale { at_ms: 5, newer: Box::new(event(3)) };
    world.set(2, DeliveryState::IgnoredStale, &[ignored]);
    // #2 never sent: #3 follows #1.
    let sends = [world.send(1, 0, 200), world.send(3, 10, 200)];
    assert!(world.check(&sends).is_empty(), "{:?}", world.check(&sends));
}

#[test]
fn a_duplicate_of_a_delivered_sequence_passes() {
    let world = World::new(3, OnDead::Block, DeliveryState::Delivered);
    // A stale owner sends #2 and #1 again after the key moved on.
    let sends = [
        world.send(1, 0, 200),
        world.send(2, 10, 200),
        world.send(3, 20, 200),
        world.send(2, 30, 200),
        world.send(1, 31, 200),
    ];
    assert!(world.check(&sends).is_empty(), "{:?}", world.check(&sends));
}

#[test]
fn headers_must_match_the_numbering_and_the_posted_key() {
    let world = World::new(2, OnDead::Block, DeliveryState::Delivered);
    let mut wrong_sequence = world.send(1, 0, 200);
    wrong_sequence.sequence = Some("2".into());
    let mut no_headers = world.send(2, 10, 200);
    (no_headers.sequence, no_headers.ordering_key) = (None, None);
    let found = world.check(&[wrong_sequence, no_headers]);
    assert_eq!(found.len(), 2, "{found:?}");
    // An unordered endpoint's requests carry neither header.
    let mut unordered = World::new(1, OnDead::Block, DeliveryState::Delivered);
    unordered.modes.insert("r0".into(), None);
    unordered.sequences = Sequences::default();
    let found = unordered.check(&[unordered.send(1, 0, 200)]);
    assert!(found[0].detail.contains("is not ordered"), "{found:?}");
}

#[test]
fn runs_count_from_one_and_start_again_only_once_the_last_is_gone() {
    let mut sequences = Sequences::default();
    let empty = ClusterState::default();
    let id = |n: u64| DeliveryId::derive(&event(n), &endpoint());
    assert_eq!(sequences.number(id(1), endpoint(), "a", 1, &empty), None);
    assert_eq!(sequences.number(id(2), endpoint(), "a", 2, &empty), None);
    assert!(sequences.number(id(3), endpoint(), "a", 4, &empty).unwrap().contains("numbered 4 after 2"));
    // The key forgotten (nothing of it left in the state): a new run.
    assert_eq!(sequences.number(id(5), endpoint(), "a", 1, &empty), None);
    assert_eq!(sequences.deliveries[&id(5)].run, 2);
    assert_eq!(sequences.deliveries[&id(2)].run, 1);
    // Starting again while a delivery of the run is still there is wrong,
    // the first of it as much as the last.
    // A finished delivery in the history counts as much as one at work.
    let mut world = World::new(2, OnDead::Skip, DeliveryState::Delivered);
    assert!(world.stored().history().contains_delivery(&world.id(1)));
    let again = world.sequences.clone().number(id(9), endpoint(), "a", 1, &world.stored());
    assert!(again.unwrap().contains("#1"));
    world.forget(1);
    let again = world.sequences.number(id(9), endpoint(), "a", 1, &world.stored());
    assert!(again.unwrap().contains("#2 ") && world.sequences.deliveries[&id(9)].run == 2);
}
