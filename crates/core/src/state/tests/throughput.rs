//! The cluster's flows per minute, counted by apply where each happens:
//! accepted on ingest, delivered, retried and dead on outcomes, dead on a
//! disable; the same on every replica that applies the same log.

use super::*;
use crate::state::throughput::Tally;

const MINUTE_MS: u64 = 60_000;

fn last_minute(state: &ClusterState, now_ms: u64) -> Tally {
    state.throughput().per_minute(now_ms, 1)[0].1
}

#[test]
fn ingest_and_outcomes_are_counted_in_the_minute_of_their_command() {
    let mut rng = StdRng::seed_from_u64(21);
    let a = endpoint(&mut rng, None);
    let mut state = state_with(std::slice::from_ref(&a));
    let events: Vec<NewEvent> = (0..3).map(|_| event(&mut rng, "a", None, None)).collect();
    let Response::Ingested { results } = state.apply(&Command::IngestEvents { now_ms: MINUTE_MS, events }) else {
        panic!("ingested")
    };
    let ids: Vec<DeliveryId> = results
        .into_iter()
        .flat_map(|r| match r {
            IngestResult::Created { deliveries, .. } => deliveries,
            other => panic!("{other:?}"),
        })
        .map(|(d, _)| d)
        .collect();
    assert_eq!(last_minute(&state, MINUTE_MS), Tally { accepted: 3, ..Tally::default() });

    let at = 2 * MINUTE_MS + 10;
    let outcomes = vec![
        outcome(&state, &ids[0], Some(200), Decision::Delivered),
        outcome(&state, &ids[1], Some(503), Decision::Retry { at_ms: at + 1_000, rule: RetryRule::Backoff }),
        outcome(&state, &ids[2], Some(500), Decision::Dead { reason: "attempts exhausted".into() }),
    ];
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: at, outcomes });
    assert_eq!(last_minute(&state, at), Tally { accepted: 0, delivered: 1, retried: 1, dead: 1 });

    // Disabled by an operator: its one pending delivery is dead-lettered.
    let disable = EndpointPatch { disabled: Some(true), ..Default::default() };
    let later = 3 * MINUTE_MS;
    state.apply(&Command::UpdateEndpoint { id: a.id, patch: disable, now_ms: later });
    assert_eq!(last_minute(&state, later), Tally { dead: 1, ..Tally::default() });

    // An outcome proposed again (a forward that timed out after its
    // commit) is not counted again.
    let mut repeat = outcome(&state, &ids[0], Some(200), Decision::Delivered);
    repeat.attempt.started_at_ms -= 1; // the first attempt's record, as it was
    state.apply(&Command::RecordOutcomes { node_id: NODE, now_ms: later, outcomes: vec![repeat] });
    assert_eq!(last_minute(&state, later).delivered, 0);

    let hour: Vec<(u64, Tally)> = state.throughput().per_minute(later, 60);
    let total = hour.iter().fold(Tally::default(), |t, (_, m)| Tally {
        accepted: t.accepted + m.accepted,
        delivered: t.delivered + m.delivered,
        retried: t.retried + m.retried,
        dead: t.dead + m.dead,
    });
    assert_eq!(total, Tally { accepted: 3, delivered: 1, retried: 1, dead: 2 });
    assert_eq!(state.dead_count(), 2);
    assert_eq!(state.dead_count_of(&a.id), 2);
}
