use std::collections::BTreeMap;

use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;
use crate::ids::{EndpointId, EventId};

fn deliveries(n: usize) -> Vec<DeliveryId> {
    let mut rng = StdRng::seed_from_u64(9);
    let endpoint = EndpointId::generate(1, &mut rng);
    (0..n).map(|i| DeliveryId::derive(&EventId::generate(1_000 + i as u64, &mut rng), &endpoint)).collect()
}

/// Why an operation on a key's queue did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OrderError {
    NotWaiting,
    NotBlocked,
}

type Head = Option<(u64, DeliveryId)>;

/// What the state does to a key's queue, each as the [`Place`] it gives a
/// delivery: the operations these tests drive, on the one mechanism.
impl<K: Ord + Clone> OrderedKeys<K> {
    fn head_of(&self, key: &K) -> Head {
        self.get(key).and_then(KeyOrder::head)
    }

    fn waiting_sequence(&self, key: &K, delivery: &DeliveryId) -> Result<u64, OrderError> {
        let order = self.get(key).ok_or(OrderError::NotWaiting)?;
        let at = order.position(delivery).ok_or(OrderError::NotWaiting)?;
        Ok(order.waiting[at].sequence)
    }

    /// Delivered: it leaves the queue, wherever it is.
    fn delivered(&mut self, key: &K, delivery: &DeliveryId) -> Result<Head, OrderError> {
        let sequence = self.waiting_sequence(key, delivery)?;
        self.place(key.clone(), sequence, *delivery, Place::Passed, 0);
        Ok(self.head_of(key))
    }

    /// Dead: it stays and blocks (`Block`) or leaves (`Skip`).
    fn dead(&mut self, key: &K, delivery: &DeliveryId, on_dead: OnDead) -> Result<Head, OrderError> {
        let sequence = self.waiting_sequence(key, delivery)?;
        let place = if on_dead == OnDead::Block { Place::Blocking } else { Place::Passed };
        self.place(key.clone(), sequence, *delivery, place, 0);
        Ok(self.head_of(key))
    }

    /// The dead head that blocks the key is skipped: it leaves.
    fn skip(&mut self, key: &K) -> Result<Head, OrderError> {
        let (sequence, head) = self.get(key).and_then(KeyOrder::blocked_by).ok_or(OrderError::NotBlocked)?;
        self.place(key.clone(), sequence, head, Place::Passed, 0);
        Ok(self.head_of(key))
    }

    /// Replayed: it waits again, in its sequence's place.
    fn replayed(&mut self, key: &K, sequence: u64, delivery: DeliveryId) -> Head {
        self.place(key.clone(), sequence, delivery, Place::Waiting, 0);
        self.head_of(key)
    }
}

#[test]
fn each_key_numbers_its_deliveries_from_one_without_gaps_and_keys_are_independent() {
    let d = deliveries(5);
    let mut keys = OrderedKeys::default();
    assert_eq!(keys.enqueue("a", d[0], 0), 1);
    assert_eq!(keys.enqueue("b", d[1], 0), 1);
    assert_eq!(keys.enqueue("a", d[2], 0), 2);
    assert_eq!(keys.enqueue("a", d[3], 0), 3);
    assert_eq!(keys.get(&"a").unwrap().last_sequence(), 3);
    // Only each key's head may go; both keys' heads may go at once.
    assert!(keys.may_attempt(&"a", &d[0]) && keys.may_attempt(&"b", &d[1]));
    assert!(!keys.may_attempt(&"a", &d[2]) && !keys.may_attempt(&"a", &d[3]));
    assert_eq!(keys.delivered(&"a", &d[0]), Ok(Some((2, d[2]))));
    assert!(keys.may_attempt(&"a", &d[2]));
}

#[test]
fn a_dead_head_blocks_its_key_until_skipped_or_replayed() {
    let d = deliveries(3);
    let mut keys = OrderedKeys::default();
    for delivery in &d {
        keys.enqueue("k", *delivery, 0);
    }
    assert_eq!(keys.dead(&"k", &d[0], OnDead::Block), Ok(None));
    assert!(!keys.may_attempt(&"k", &d[1]), "blocked behind the dead head");
    assert_eq!(keys.blocked().collect::<Vec<_>>(), [(&"k", (1, d[0]))]);
    // Replayed: it goes again, first, and the rest still waits behind it.
    assert_eq!(keys.replayed(&"k", 1, d[0]), Some((1, d[0])));
    assert!(keys.may_attempt(&"k", &d[0]) && !keys.may_attempt(&"k", &d[1]));
    // Dead again, then skipped: the next one goes.
    keys.dead(&"k", &d[0], OnDead::Block).unwrap();
    assert_eq!(keys.skip(&"k"), Ok(Some((2, d[1]))));
    assert_eq!(keys.skip(&"k"), Err(OrderError::NotBlocked), "nothing blocks now");
    assert_eq!(keys.blocked().count(), 0);
}

#[test]
fn under_skip_a_dead_head_lets_the_key_go_on() {
    let d = deliveries(2);
    let mut keys = OrderedKeys::default();
    keys.enqueue("k", d[0], 0);
    keys.enqueue("k", d[1], 0);
    assert_eq!(keys.dead(&"k", &d[0], OnDead::Skip), Ok(Some((2, d[1]))));
    assert_eq!(keys.blocked().count(), 0);
}

#[test]
fn a_skipped_delivery_replayed_goes_back_in_its_place() {
    let d = deliveries(3);
    let mut keys = OrderedKeys::default();
    for delivery in &d {
        keys.enqueue("k", *delivery, 0);
    }
    keys.dead(&"k", &d[0], OnDead::Skip).unwrap();
    // Replayed before the two behind it were delivered: it is first again.
    assert_eq!(keys.replayed(&"k", 1, d[0]), Some((1, d[0])));
    assert!(!keys.may_attempt(&"k", &d[1]));
    assert_eq!(keys.delivered(&"k", &d[0]), Ok(Some((2, d[1]))));
}

#[test]
fn a_dead_delivery_behind_the_head_blocks_when_it_comes_first() {
    let d = deliveries(3);
    let mut keys = OrderedKeys::default();
    for delivery in &d {
        keys.enqueue("k", *delivery, 0);
    }
    // The endpoint was disabled: everything waiting is dead-lettered.
    for delivery in &d {
        keys.dead(&"k", delivery, OnDead::Block).unwrap();
    }
    assert_eq!(keys.get(&"k").unwrap().blocked_by(), Some((1, d[0])));
    assert_eq!(keys.skip(&"k"), Ok(None), "the next one is dead too: still blocked");
    assert_eq!(keys.get(&"k").unwrap().blocked_by(), Some((2, d[1])));
    // A bulk replay in sequence order resumes the key from its first.
    keys.replayed(&"k", 2, d[1]);
    keys.replayed(&"k", 3, d[2]);
    assert!(keys.may_attempt(&"k", &d[1]));
}

#[test]
fn an_idle_key_is_forgotten_with_its_last_delivery_and_starts_again_at_one() {
    let d = deliveries(3);
    let mut keys = OrderedKeys::default();
    keys.enqueue("k", d[0], 1_000);
    keys.enqueue("k", d[1], 2_000);
    assert_eq!(keys.get(&"k").map(KeyOrder::epoch_ms), Some(1_000), "the run's first delivery names its epoch");
    keys.delivered(&"k", &d[0]).unwrap();
    keys.forgotten(&"k");
    assert_eq!(keys.get(&"k").map(KeyOrder::last_sequence), Some(2), "one still waits");
    keys.delivered(&"k", &d[1]).unwrap();
    keys.forgotten(&"k");
    assert!(keys.is_empty());
    assert_eq!(keys.enqueue("k", d[2], 90_000), 1);
    assert_eq!(keys.get(&"k").map(KeyOrder::epoch_ms), Some(90_000), "a new run, a later epoch");
}

#[test]
fn operations_on_what_is_not_waiting_change_nothing() {
    let d = deliveries(2);
    let mut keys = OrderedKeys::default();
    keys.enqueue("k", d[0], 0);
    let before = keys.clone();
    assert_eq!(keys.delivered(&"k", &d[1]), Err(OrderError::NotWaiting));
    assert_eq!(keys.dead(&"x", &d[0], OnDead::Block), Err(OrderError::NotWaiting));
    assert_eq!(keys.skip(&"k"), Err(OrderError::NotBlocked));
    assert_eq!(keys, before);
}

/// What happens next to one key.
#[derive(Debug, Clone)]
enum Op {
    Enqueue(u8),
    /// The key's head, if any, is attempted: delivered or dead.
    Attempt(u8, bool),
    Skip(u8),
    /// The dead head that blocks the key, if any, is replayed.
    ReplayHead(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3).prop_map(Op::Enqueue),
        4 => (0u8..3, any::<bool>()).prop_map(|(k, ok)| Op::Attempt(k, ok)),
        1 => (0u8..3).prop_map(Op::Skip),
        1 => (0u8..3).prop_map(Op::ReplayHead),
    ]
}

proptest! {
    /// Whatever happens, each key's sequences are 1..=n in the order the
    /// deliveries were queued, only a key's head is ever attempted, what is
    /// delivered comes in increasing sequence, and under `Block` nothing
    /// goes past a dead delivery that was not skipped.
    #[test]
    fn keys_deliver_in_sequence_gap_free(ops in proptest::collection::vec(op(), 1..200), block in any::<bool>()) {
        let on_dead = if block { OnDead::Block } else { OnDead::Skip };
        let pool = deliveries(200);
        let mut next = pool.iter();
        let mut keys = OrderedKeys::default();
        let mut queued: BTreeMap<u8, Vec<DeliveryId>> = BTreeMap::new();
        let mut delivered: BTreeMap<u8, Vec<u64>> = BTreeMap::new();
        let mut passed: BTreeMap<u8, Vec<u64>> = BTreeMap::new(); // delivered, skipped or dead under Skip
        for op in ops {
            match op {
                Op::Enqueue(k) => {
                    let Some(d) = next.next() else { break };
                    let sequence = keys.enqueue(k, *d, 0);
                    let list = queued.entry(k).or_default();
                    list.push(*d);
                    prop_assert_eq!(sequence, list.len() as u64, "gap-free, in queue order");
                }
                Op::Attempt(k, ok) => {
                    let Some((sequence, head)) = keys.get(&k).and_then(KeyOrder::head) else { continue };
                    prop_assert!(keys.may_attempt(&k, &head));
                    prop_assert_eq!(queued[&k][sequence as usize - 1], head, "the head is the delivery of its sequence");
                    let earlier = passed.get(&k).map_or(0, Vec::len) as u64;
                    prop_assert_eq!(sequence, earlier + 1, "everything before the head has passed");
                    if ok {
                        keys.delivered(&k, &head).unwrap();
                        delivered.entry(k).or_default().push(sequence);
                        passed.entry(k).or_default().push(sequence);
                    } else {
                        keys.dead(&k, &head, on_dead).unwrap();
                        if on_dead == OnDead::Skip {
                            passed.entry(k).or_default().push(sequence);
                        } else {
                            prop_assert_eq!(keys.get(&k).and_then(KeyOrder::blocked_by), Some((sequence, head)));
                        }
                    }
                }
                Op::Skip(k) => {
                    if let Some((sequence, _)) = keys.get(&k).and_then(KeyOrder::blocked_by) {
                        keys.skip(&k).unwrap();
                        passed.entry(k).or_default().push(sequence);
                    } else {
                        prop_assert_eq!(keys.skip(&k), Err(OrderError::NotBlocked));
                    }
                }
                Op::ReplayHead(k) => {
                    if let Some((sequence, head)) = keys.get(&k).and_then(KeyOrder::blocked_by) {
                        prop_assert_eq!(keys.replayed(&k, sequence, head), Some((sequence, head)));
                    }
                }
            }
        }
        for (k, sequences) in &delivered {
            prop_assert!(sequences.windows(2).all(|w| w[0] < w[1]), "key {}: {:?}", k, sequences);
        }
        for (k, list) in &queued {
            let order = keys.get(k).unwrap();
            let passed = passed.get(k).map_or(0, Vec::len);
            prop_assert_eq!(order.waiting() + passed, list.len(), "every delivery waits or has passed");
        }
    }
}

#[test]
fn placing_by_the_records_rebuilds_the_queue_whatever_their_order() {
    let d = deliveries(4);
    let mut built = OrderedKeys::default();
    for delivery in &d {
        built.enqueue("k", *delivery, 0);
    }
    built.delivered(&"k", &d[0]).unwrap();
    built.dead(&"k", &d[1], OnDead::Block).unwrap();
    let mut placed = OrderedKeys::default();
    placed.place("k", 3, d[2], Place::Waiting, 0);
    placed.place("k", 1, d[0], Place::Passed, 0);
    placed.place("k", 4, d[3], Place::Waiting, 0);
    placed.place("k", 2, d[1], Place::Blocking, 0);
    assert_eq!(placed, built);
    // Placing again moves a delivery, never duplicates it.
    placed.place("k", 2, d[1], Place::Waiting, 0);
    assert_eq!(placed.get(&"k").unwrap().head(), Some((2, d[1])));
    assert_eq!(placed.get(&"k").unwrap().waiting(), 3);
    placed.forget_where(|key| *key == "k");
    assert!(placed.is_empty());
}
