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

    fn expected_stale(state: &ClusterState, node_id: NodeId, outcomes: &[Outcome]) -> u32 {
        let mut stale = 0;
        for outcome in outcomes {
            let Some(delivery) = state.deliveries.get(&outcome.delivery_id) else { continue };
            let endpoint = &delivery.endpoint_id;
            let grant = state.shards[endpoint.shard() as usize];
            if outcome.shard != endpoint.shard() || grant.token != outcome.token || grant.owner != Some(node_id) {
                stale += 1;
            }
        }
        stale
    }

    fn observe(&self, state: &ClusterState, command: &Command, response: &Response, grants_settled: bool) {
        match (command, response) {
            (Command::Batch(commands), Response::Batch(responses)) => {
                // Grants change only through AssignShards, RevokeShards and ForgetNode; when a
                // batch holds one, the state after the batch no longer shows
                // the grants its outcomes were judged against.
                let settled = grants_settled && !commands.iter().any(changes_grants);
                for (command, response) in commands.iter().zip(responses) {
                    self.observe(state, command, response, settled);
                }
            }
            (
                Command::RecordOutcomes { node_id, outcomes, .. },
                Response::OutcomesApplied { applied, stale, ignored },
            ) => {
                self.trace
                    .record(format!("apply outcomes n{node_id} applied={applied} stale={stale} ignored={ignored}"));
                if grants_settled {
                    let expected = Self::expected_stale(state, *node_id, outcomes);
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
        self.observe(state, command, response, true);
    }
}
