//! The lifecycle tally (`state/tally.rs`): each change of a delivery's
//! state, its first attempt, retries, dead letters and stale outcomes,
//! tallied by the apply that made them, for the node that counts them.

use super::*;
use crate::state::tally::{DeadReason, Tally};

fn record(state: &mut ClusterState, node: NodeId, now_ms: u64, outcome: Outcome) -> Response {
    state.apply(&Command::RecordOutcomes { node_id: node, now_ms, outcomes: vec![outcome] })
}

fn tally(state: &ClusterState, node: NodeId) -> Tally {
    state.tallies().of(node).cloned().unwrap_or_else(|| panic!("nothing tallied for node {node}"))
}

fn pending(t: &Tally) -> &crate::state::tally::Durations {
    t.in_state(DeliveryState::Pending).expect("timed")
}

#[test]
fn a_retry_then_a_success_tally_each_state_left_the_first_attempt_and_the_total_time() {
    // Received at 5 ms; the first attempt starts at 3,000 (`outcome`).
    let (mut state, _, id) = one_pending(41);
    let retry = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 9_000, rule: RetryRule::Backoff });
    record(&mut state, NODE, 3_100, retry);
    let t = tally(&state, NODE);
    assert_eq!(t.retries, 1);
    assert_eq!((t.to_first_attempt.count, t.to_first_attempt.sum_ms), (1, 3_000 - 5));
    assert_eq!((pending(&t).count, pending(&t).sum_ms), (1, 3_100 - 5), "left pending at the outcome");
    assert_eq!(t.to_delivered.count, 0);

    // A second failure keeps it retrying: nothing left, one more retry.
    let retry = outcome(&state, &id, Some(503), Decision::Retry { at_ms: 12_000, rule: RetryRule::Backoff });
    record(&mut state, NODE, 9_100, retry);
    let t = tally(&state, NODE);
    assert_eq!(t.retries, 1);
    assert_eq!(t.to_first_attempt.count, 0, "not the first attempt");
    assert!(t.in_state.iter().all(|d| d.count == 0), "still retrying");

    let success = outcome(&state, &id, Some(200), Decision::Delivered);
    record(&mut state, NODE, 12_100, success);
    let t = tally(&state, NODE);
    let retrying = t.in_state(DeliveryState::Retrying).expect("timed");
    assert_eq!((retrying.count, retrying.sum_ms), (1, 12_100 - 3_100), "from the first retry of the run");
    assert_eq!((t.to_delivered.count, t.to_delivered.sum_ms), (1, 12_100 - 5));
    assert_eq!(t.retries, 0);
    assert_eq!(state.tallies().of(2), None, "only the owner counts");
}

#[test]
fn the_next_apply_starts_a_new_tally() {
    let (mut state, _, id) = one_pending(42);
    let o = outcome(&state, &id, Some(200), Decision::Delivered);
    record(&mut state, NODE, 3_100, o);
    assert_eq!(tally(&state, NODE).to_delivered.count, 1);
    state.apply(&Command::Noop);
    assert_eq!(state.tallies().of(NODE), None);
}

#[test]
fn a_dead_letter_is_counted_by_reason_and_its_time_dead_when_it_is_replayed() {
    let (mut state, _, id) = one_pending(43);
    let dead = Decision::Dead { reason: "attempts exhausted: 1 of 1 failed".into() };
    let o = outcome(&state, &id, Some(500), dead);
    record(&mut state, NODE, 3_100, o);
    let t = tally(&state, NODE);
    assert_eq!(t.dead_letters(DeadReason::AttemptsExhausted), 1);
    assert_eq!(t.dead_letters.iter().sum::<u64>(), 1);
    assert_eq!(pending(&t).count, 1);

    state.apply(&Command::Replay { now_ms: 10_000, target: ReplayTarget::Delivery(id) });
    let t = tally(&state, NODE);
    let dead = t.in_state(DeliveryState::Dead).expect("timed");
    assert_eq!((dead.count, dead.sum_ms), (1, 10_000 - 3_100));

    // After the replay, its next attempt is not its life's first.
    let success = outcome(&state, &id, Some(200), Decision::Delivered);
    record(&mut state, NODE, 11_000, success);
    let t = tally(&state, NODE);
    assert_eq!(t.to_first_attempt.count, 0);
    assert_eq!(pending(&t).sum_ms, 11_000 - 10_000, "pending since the replay");
    assert_eq!(t.to_delivered.sum_ms, 11_000 - 5, "from the acceptance");
}

#[test]
fn disabling_and_deleting_endpoints_dead_letter_their_queues_by_reason() {
    let mut rng = StdRng::seed_from_u64(44);
    let (a, b) = (endpoint(&mut rng, None), endpoint(&mut rng, None));
    let mut state = state_with(&[a.clone(), b.clone()]);
    let events = (0..3).map(|_| event(&mut rng, "a", None, None)).collect();
    state.apply(&Command::IngestEvents { now_ms: 5, events });
    let disable = EndpointPatch { disabled: Some(true), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id: a.id, patch: disable, now_ms: 50 });
    let t = tally(&state, NODE);
    assert_eq!(t.dead_letters(DeadReason::EndpointDisabled), 3);
    assert_eq!((pending(&t).count, pending(&t).sum_ms), (3, 3 * 45));
    state.apply(&Command::DeleteEndpoint { id: b.id, now_ms: 60 });
    assert_eq!(tally(&state, NODE).dead_letters(DeadReason::EndpointDeleted), 3);
    // An event aimed at the disabled endpoint is created dead.
    let aimed = event(&mut rng, "a", None, Some(vec![a.id]));
    state.apply(&Command::IngestEvents { now_ms: 70, events: vec![aimed] });
    assert_eq!(tally(&state, NODE).dead_letters(DeadReason::EndpointDisabled), 1);
    state.check_invariants().unwrap();
}

#[test]
fn a_gone_answer_counts_every_delivery_it_ends_as_gone() {
    let mut rng = StdRng::seed_from_u64(45);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let events = (0..3).map(|_| event(&mut rng, "a", None, None)).collect();
    state.apply(&Command::IngestEvents { now_ms: 5, events });
    let first = *state.active[&a.id].iter().next().unwrap();
    let o = outcome(&state, &first, Some(410), Decision::Gone);
    record(&mut state, NODE, 6, o);
    let t = tally(&state, NODE);
    assert_eq!(t.dead_letters(DeadReason::Gone), 3);
    assert_eq!(t.dead_letters.iter().sum::<u64>(), 3);
}

#[test]
fn stale_outcomes_are_counted_for_the_node_that_sent_them() {
    let (mut state, a, id) = one_pending(46);
    let old = outcome(&state, &id, Some(200), Decision::Delivered);
    state.apply(&Command::AssignShards { now_ms: 8, grants: vec![(a.id.shard(), 2)] });
    record(&mut state, NODE, 9, old);
    assert_eq!(tally(&state, NODE).stale_outcomes, 1);
    assert_eq!(state.tallies().of(2), None);
}

#[test]
fn a_change_to_a_shard_without_owner_is_counted_by_the_lowest_node() {
    let (mut state, a, _) = one_pending(47);
    for node in [3, 2] {
        state.apply(&Command::Heartbeat { node_id: node, now_ms: 10, lease_ms: 1_000 });
    }
    state.apply(&Command::RevokeShards { now_ms: 20, shards: vec![(a.id.shard(), None)] });
    assert_eq!(state.grant_for(&a.id).owner, None);
    let disable = EndpointPatch { disabled: Some(true), ..Default::default() };
    state.apply(&Command::UpdateEndpoint { id: a.id, patch: disable, now_ms: 50 });
    let lowest = *state.nodes.keys().next().expect("nodes");
    assert_eq!(tally(&state, lowest).dead_letters(DeadReason::EndpointDisabled), 1);
    assert_eq!(state.tallies().of(3), None);
}

#[test]
fn ignored_stale_and_deferred_outcomes_spend_no_first_attempt_and_no_retry() {
    let (mut state, _, id) = one_pending(48);
    let deferred = outcome(&state, &id, None, Decision::Deferred { at_ms: 9_000 });
    record(&mut state, NODE, 3_100, deferred);
    let t = tally(&state, NODE);
    assert_eq!((t.retries, t.to_first_attempt.count), (0, 0));
    assert_eq!(pending(&t).count, 1, "deferred: pending to retrying");
    let newer = EventId::generate(9_000, &mut StdRng::seed_from_u64(1));
    let o = outcome(&state, &id, None, Decision::IgnoredStale { newer });
    record(&mut state, NODE, 4_000, o);
    let t = tally(&state, NODE);
    assert_eq!(t.ignored_stale, 1);
    assert_eq!(t.in_state(DeliveryState::Retrying).map(|d| d.count), Some(1));
}

#[test]
fn every_replica_tallies_the_same() {
    let (mut one, _, id) = one_pending(49);
    let mut two = decoded(&one);
    let o = outcome(&one, &id, Some(503), Decision::Retry { at_ms: 9_000, rule: RetryRule::Backoff });
    record(&mut one, NODE, 3_100, o.clone());
    record(&mut two, NODE, 3_100, o);
    assert_eq!(tally(&one, NODE), tally(&two, NODE));
}
