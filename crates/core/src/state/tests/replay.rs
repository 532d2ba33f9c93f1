//! Replay of dead-lettered deliveries.

use super::*;

#[test]
fn bulk_replay_takes_dead_deliveries_in_the_window_only() {
    let mut rng = StdRng::seed_from_u64(8);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    for now_ms in [100, 200, 300] {
        let id =
            created(state.apply(&Command::IngestEvents { now_ms, events: vec![event(&mut rng, "a", None, None)] }))
                .remove(0)
                .0;
        let o = outcome(&state, &id, Some(500), Decision::Dead { reason: "attempts exhausted".into() });
        state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms, outcomes: vec![o] });
    }
    let target = |since_ms, until_ms| ReplayTarget::EndpointDead { endpoint_id: a.id, since_ms, until_ms };
    let Response::Replayed { deliveries } =
        state.apply(&Command::Replay { now_ms: 400, target: target(Some(150), Some(300)) })
    else {
        panic!()
    };
    assert_eq!(deliveries.len(), 1);
    let Response::Replayed { deliveries } = state.apply(&Command::Replay { now_ms: 400, target: target(None, None) })
    else {
        panic!()
    };
    assert_eq!(deliveries.len(), 2, "the one replayed already is no longer dead");
    assert_eq!(state.active[&a.id].len(), 3);
    let replayed = state.deliveries.values().next().unwrap();
    assert!(matches!(replayed.history.last(), Some(TimelineEntry::Replayed { .. })));
    state.check_invariants().unwrap();
}
