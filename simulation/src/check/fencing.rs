//! No stale writer: an outcome whose token is not its shard's current grant
//! to the reporting node is never applied. Checked on every node as it
//! applies: this tap re-derives, independently of `apply`, how many outcomes
//! of each `RecordOutcomes` were stale and compares with what `apply` said.

use std::sync::Mutex;

use hookraft_core::command::{Command, Outcome, Response};
use hookraft_core::ids::NodeId;
use hookraft_core::state::ClusterState;
use hookraft_raft::ApplyObserver;

use super::Violation;
use crate::trace::Trace;

/// Whether applying `command` can change a shard grant.
fn changes_grants(command: &Command) -> bool {
    match command {
        Command::AssignShards { .. } | Command::RevokeShards { .. } | Command::ForgetNode { .. } => true,
        Command::Batch(commands) => commands.iter().any(changes_grants),
        _ => false,
    }
}

/// Observes every node's applied commands.
pub struct FencingTap {
    violations: Mutex<Vec<Violation>>,
    trace: Trace,
}

impl FencingTap {
    pub fn new(trace: Trace) -> Self {
        Self { violations: Mutex::default(), trace }
    }

    pub fn violations(&self) -> Vec<Violation> {
        self.violations.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `prune_follows`: a `Prune` later in the same entry may have taken a
    /// delivery out after its outcome was judged; what it took waits
    /// beside the state until the entry is done. (A delivery a prune
    /// before the outcomes took out is not judged: its outcome is ignored.)
    fn expected_stale(state: &ClusterState, node_id: NodeId, outcomes: &[Outcome], prune_follows: bool) -> u32 {
        let mut stale = 0;
        for outcome in outcomes {
            let retired = || {
                prune_follows
                    .then(|| state.retired().deliveries.iter().find(|d| d.id == outcome.delivery_id))
                    .flatten()
                    .map(|d| d.endpoint_id)
            };
            // The apply that judged the outcome may have finished the
            // delivery and moved it into the history: it is judged there too.
            let kept = || state.delivery(&outcome.delivery_id).map(|d| d.endpoint_id);
            let Some(endpoint) = kept().or_else(retired) else { continue };
            let endpoint = &endpoint;
            let grant = state.shards[endpoint.shard() as usize];
            if outcome.shard != endpoint.shard() || grant.token != outcome.token || grant.owner != Some(node_id) {
                stale += 1;
            }
        }
        stale
    }

    fn observe(
        &self,
        state: &ClusterState,
        command: &Command,
        response: &Response,
        grants_settled: bool,
        prune_follows: bool,
    ) {
        match (command, response) {
            (Command::Batch(commands), Response::Batch(responses)) => {
                // Grants change only through AssignShards, RevokeShards and ForgetNode; when a
                // batch holds one, the state after the batch no longer shows
                // the grants its outcomes were judged against.
                let settled = grants_settled && !commands.iter().any(changes_grants);
                let is_prune = |c: &Command| matches!(c, Command::Prune { .. });
                for (i, (command, response)) in commands.iter().zip(responses).enumerate() {
                    // What a prune took out is judged only when every prune
                    // of the entry came after these outcomes.
                    let prune_follows = !commands[..i].iter().any(is_prune) && commands[i + 1..].iter().any(is_prune);
                    self.observe(state, command, response, settled, prune_follows);
                }
            }
            (
                Command::RecordOutcomes { node_id, outcomes, .. },
                Response::OutcomesApplied { applied, stale, ignored },
            ) => {
                self.trace
                    .record(format!("apply outcomes n{node_id} applied={applied} stale={stale} ignored={ignored}"));
                if grants_settled {
                    let expected = Self::expected_stale(state, *node_id, outcomes, prune_follows);
                    if expected != *stale {
                        let detail = format!(
                            "node {node_id} reported {} outcomes: {expected} stale by their tokens, apply rejected {stale}",
                            outcomes.len()
                        );
                        self.violations
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(Violation::safety("fencing", detail));
                    }
                }
            }
            (Command::AssignShards { grants, .. }, _) => self.trace.record(format!("apply grants {}", grants.len())),
            (Command::IngestEvents { events, .. }, _) => self.trace.record(format!("apply ingest {}", events.len())),
            _ => {}
        }
    }
}

impl ApplyObserver for FencingTap {
    fn applied(&self, state: &ClusterState, command: &Command, response: &Response) {
        self.observe(state, command, response, true, false);
    }
}

#[cfg(test)]
mod tests {
    use hookraft_core::retry::Decision;

    use super::*;
    use crate::check::fixture::{OWNER, OneDelivery};

    #[test]
    fn a_late_outcome_of_a_finished_delivery_is_judged_where_the_history_keeps_it() {
        let mut world = OneDelivery::new(1, None);
        world.deliver();
        // A node that holds no grant reports an attempt after the event
        // was finished: apply judges it (stale) and settles it again.
        let late = world.outcome(OWNER + 1, 200, Decision::Delivered);
        let (command, response) = world.report(OWNER + 1, late);
        assert!(matches!(response, Response::OutcomesApplied { stale: 1, .. }), "{response:?}");
        assert!(world.state.history().contains_delivery(&world.delivery));
        let tap = FencingTap::new(Trace::new(false));
        tap.applied(&world.state, &command, &response);
        assert!(tap.violations().is_empty(), "{:?}", tap.violations());
        // An apply that had let it through is caught, the delivery being
        // in the history all the same.
        tap.applied(&world.state, &command, &Response::OutcomesApplied { applied: 1, stale: 0, ignored: 0 });
        let found = tap.violations();
        assert!(found.len() == 1 && found[0].detail.contains("1 stale by their tokens"), "{found:?}");
    }
}
