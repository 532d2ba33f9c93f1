//! A history over a store reads as one kept in memory.

use std::ops::Bound;
use std::sync::Arc;

use proptest::prelude::*;

use super::History;
use crate::ids::{DeliveryId, EndpointId, EventId};
use crate::model::{Delivery, DeliveryState, Event, OptionalMs};
use crate::state::history_store::{FailingStore, MemStore};

const ENDPOINTS: u8 = 3;

fn endpoint(n: u8) -> EndpointId {
    let mut bytes = [0u8; 16];
    bytes[15] = n + 1;
    EndpointId::from_bytes(bytes)
}

/// Event `n`, received at `n` ms, with one delivery to each endpoint in
/// `dead` (true: dead, false: delivered) and `version` in its payload.
fn finished(n: u16, dead: &[bool], version: u8) -> (Event, Vec<Delivery>) {
    let mut bytes = [0u8; 16];
    bytes[4..6].copy_from_slice(&n.to_be_bytes());
    let id = EventId::from_bytes(bytes);
    let deliveries: Vec<Delivery> = dead
        .iter()
        .enumerate()
        .map(|(i, dead)| {
            let endpoint_id = endpoint(i as u8 % ENDPOINTS);
            let state = if *dead { DeliveryState::Dead } else { DeliveryState::Delivered };
            Delivery {
                id: DeliveryId::derive(&id, &endpoint_id),
                event_id: id,
                endpoint_id,
                state,
                initial_state: DeliveryState::Pending,
                attempt_count: u32::from(version),
                cycle_attempts: 0,
                sequence: 0,
                cycle_started_at_ms: 0,
                next_attempt_at_ms: OptionalMs::NONE,
                created_at_ms: u64::from(n),
                updated_at_ms: u64::from(n),
                history: Box::default(),
            }
        })
        .collect();
    let event = Event {
        id,
        event_type: "t".into(),
        payload: format!("{{\"v\":{version}}}").into(),
        received_at_ms: u64::from(n) * 7 % 50,
        idempotency_key: None,
        deliveries: deliveries.iter().map(|d| d.id).collect(),
        received_by: None,
        rewrapped: None,
        ordering_key: None,
        inbound: None,
    };
    (event, deliveries)
}

#[derive(Debug, Clone)]
enum Op {
    /// A new finished event with these deliveries.
    Put(Vec<bool>),
    /// The event at this position (of those held) taken out, and put
    /// back changed when `back`.
    Take { pick: usize, back: bool },
    /// A flush that commits, or one that fails after the seal.
    Flush { commits: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop::collection::vec(any::<bool>(), 0..3).prop_map(Op::Put),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(pick, back)| Op::Take { pick, back }),
        1 => any::<bool>().prop_map(|commits| Op::Flush { commits }),
    ]
}

/// Everything a reader can ask, answered by `history`.
fn reads(history: &History, bound: EventId, delivery_bound: DeliveryId) -> String {
    let all = (Bound::Unbounded, Bound::Unbounded);
    let mut out = format!(
        "{} {} {} {}\n",
        history.event_count(),
        history.delivery_count(),
        history.bytes(),
        history.dead_count()
    );
    for newest_first in [false, true] {
        out += &format!("{:?}\n", history.events_in(all, newest_first).map(|e| (e.id, e.payload)).collect::<Vec<_>>());
        out += &format!(
            "{:?}\n",
            history
                .events_in((Bound::Excluded(bound), Bound::Unbounded), newest_first)
                .map(|e| e.id)
                .collect::<Vec<_>>()
        );
        out += &format!(
            "{:?}\n",
            history
                .events_in((Bound::Unbounded, Bound::Excluded(bound)), newest_first)
                .map(|e| e.id)
                .collect::<Vec<_>>()
        );
        let every = (Bound::Unbounded, Bound::Unbounded);
        out += &format!(
            "{:?}\n",
            history.deliveries_in(every, newest_first).map(|d| (d.id, d.state, d.attempt_count)).collect::<Vec<_>>()
        );
        out += &format!(
            "{:?}\n",
            history
                .deliveries_in((Bound::Excluded(delivery_bound), Bound::Unbounded), newest_first)
                .map(|d| d.id)
                .collect::<Vec<_>>()
        );
        for n in 0..ENDPOINTS {
            let e = endpoint(n);
            out += &format!(
                "{} {:?}\n",
                history.dead_count_of(&e),
                history.dead_of(&e, every, newest_first).collect::<Vec<_>>()
            );
        }
    }
    for before in [0, 10, 25, 50] {
        out += &format!("{:?}\n", history.received_before(before).collect::<Vec<_>>());
    }
    out
}

proptest! {
    /// Whatever the puts, takes and flushes (committed or failed), a
    /// history over a store answers every read as one that keeps all
    /// in memory, and its indexes and counts check.
    #[test]
    fn a_history_over_a_store_reads_as_one_kept_in_memory(ops in prop::collection::vec(op(), 1..60)) {
        let mut layered = History::default();
        let mut flat = History::default();
        let mut store = MemStore::default();
        let mut held: Vec<u16> = Vec::new();
        let mut next: u16 = 0;
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Put(dead) => {
                    let (event, deliveries) = finished(next, &dead, 0);
                    layered.put(&event, &deliveries);
                    flat.put(&event, &deliveries);
                    held.push(next);
                    next += 1;
                }
                Op::Take { pick, back } if !held.is_empty() => {
                    let n = held[pick % held.len()];
                    let (event, _) = finished(n, &[], 0);
                    let taken = layered.take(&event.id);
                    prop_assert_eq!(&taken, &flat.take(&event.id));
                    let (event, deliveries, _) = taken.expect("held");
                    if back {
                        // Replayed and finished again: new versions of the same records.
                        let dead: Vec<bool> = deliveries.iter().map(|d| d.state != DeliveryState::Dead).collect();
                        let (again, deliveries) = finished(n, &dead, step as u8);
                        prop_assert_eq!(again.id, event.id);
                        layered.put(&again, &deliveries);
                        flat.put(&again, &deliveries);
                    } else {
                        held.retain(|h| *h != n);
                    }
                }
                Op::Take { .. } => {}
                Op::Flush { commits } => {
                    let flush = layered.seal();
                    if commits {
                        store.apply(&flush);
                        layered.flushed(Arc::new(store.clone()));
                    }
                }
            }
            let bound = finished(next / 2, &[], 0).0.id;
            let delivery_bound = DeliveryId::derive(&bound, &endpoint(1));
            prop_assert_eq!(reads(&layered, bound, delivery_bound), reads(&flat, bound, delivery_bound));
            prop_assert!(layered.check().is_ok(), "{:?}", layered.check());
            prop_assert!(layered == flat);
        }
        // A flush of everything leaves nothing in memory but the removals' absence.
        let flush = layered.seal();
        store.apply(&flush);
        layered.flushed(Arc::new(store.clone()));
        prop_assert_eq!(layered.held_bytes(), 0);
        prop_assert!(layered == flat);
    }
}

#[test]
fn a_failing_store_is_a_fault_to_check_not_a_panic() {
    let mut history = History::default();
    history.attach(Arc::new(FailingStore("the disk is gone".into()))).expect("attaches: the counts agree");
    assert_eq!(history.fault(), None);
    let (event, deliveries) = finished(1, &[true], 0);
    assert!(!history.contains_event(&event.id), "read as absent");
    assert_eq!(history.fault(), Some("the disk is gone"), "and the failure is kept");
    assert!(history.delivery(&deliveries[0].id).is_none());
    let all = (Bound::Unbounded, Bound::Unbounded);
    assert_eq!(history.events_in(all, false).count(), 0);
    assert_eq!(history.received_before(u64::MAX).count(), 0);
    assert_eq!(history.fault(), Some("the disk is gone"), "the first failure is the one kept");
}
