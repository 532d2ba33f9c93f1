//! The outcome batcher: collects attempt outcomes from every endpoint actor
//! of the node and commits them in batches, one `RecordOutcomes` entry each.
//!
//! A batch that cannot be committed (no leader, a lost quorum) is retried
//! with backoff until it commits: the actors have moved on, so dropping it
//! would leave its deliveries queued in the log but forgotten here. The
//! bounded channel in front pushes back on the actors meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hookraft_core::clock::Clock;
use hookraft_core::command::{Command, Outcome, Response};
use hookraft_core::ids::NodeId;
use tokio::sync::mpsc;

/// Outcomes committed in one log entry at most.
pub const OUTCOME_BATCH_MAX: usize = 2_048;
/// Outcomes waiting for the batcher at most (the channel bound).
pub const OUTCOME_QUEUE_MAX: usize = 16_384;
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A failure to commit a command.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    #[error("no leader is known; retry later")]
    NoLeader,
    #[error("the node is shutting down")]
    ShuttingDown,
    #[error("{0}")]
    Other(String),
}

/// A boxed future for [`Proposer::propose`].
pub type ProposeFuture<'a> = Pin<Box<dyn Future<Output = Result<Response, ProposeError>> + Send + 'a>>;

/// Commits a command to the replicated log and returns its applied response.
pub trait Proposer: Send + Sync + 'static {
    fn propose(&self, command: Command) -> ProposeFuture<'_>;
}

/// Runs until every sender is dropped or the proposer shuts down.
pub async fn run_outcome_batcher(
    mut outcomes: mpsc::Receiver<Outcome>,
    proposer: Arc<dyn Proposer>,
    clock: Arc<dyn Clock>,
    node_id: NodeId,
) {
    let mut batch = Vec::with_capacity(OUTCOME_BATCH_MAX);
    while outcomes.recv_many(&mut batch, OUTCOME_BATCH_MAX).await > 0 {
        let mut backoff = RETRY_BACKOFF_MIN;
        loop {
            let command = Command::RecordOutcomes { node_id, now_ms: clock.wall_ms(), outcomes: batch.clone() };
            match proposer.propose(command).await {
                Ok(Response::OutcomesApplied { stale, .. }) => {
                    if stale > 0 {
                        tracing::warn!(stale, "outcomes rejected as stale: this node lost a shard grant");
                    }
                    break;
                }
                Ok(other) => {
                    tracing::error!(?other, "unexpected response to RecordOutcomes");
                    break;
                }
                Err(ProposeError::ShuttingDown) => return,
                Err(error) => {
                    tracing::warn!(%error, outcomes = batch.len(), "could not commit outcomes; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
                }
            }
        }
        batch.clear();
    }
}
