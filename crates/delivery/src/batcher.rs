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
/// A batch smaller than this waits up to [`OUTCOME_LINGER`] for more
/// outcomes before it is proposed. Every log entry costs the same append,
/// flush, fsync and apply whatever it holds; without the wait, a node whose
/// log keeps up (Raft on a runtime of its own, or a node draining a
/// backlog) committed about a thousand entries a second of a dozen outcomes
/// each, and that overhead was a third of its CPU per delivery.
pub const OUTCOME_LINGER_MIN: usize = 256;
/// How long a small batch waits for more outcomes at most. An outcome is
/// recorded after its webhook was sent, so the wait delays only when the
/// timeline shows the attempt, never a delivery.
pub const OUTCOME_LINGER: Duration = Duration::from_millis(5);
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
        linger(&mut outcomes, &mut batch).await;
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

/// Tops a small batch up with the outcomes that arrive within
/// [`OUTCOME_LINGER`], until it holds [`OUTCOME_LINGER_MIN`].
async fn linger(outcomes: &mut mpsc::Receiver<Outcome>, batch: &mut Vec<Outcome>) {
    if batch.len() >= OUTCOME_LINGER_MIN {
        return;
    }
    let deadline = tokio::time::Instant::now() + OUTCOME_LINGER;
    while batch.len() < OUTCOME_LINGER_MIN {
        let room = OUTCOME_BATCH_MAX - batch.len();
        match tokio::time::timeout_at(deadline, outcomes.recv_many(batch, room)).await {
            Ok(0) | Err(_) => return, // every sender gone, or waited long enough
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use hookraft_core::command::Outcome;
    use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
    use hookraft_core::model::AttemptRecord;
    use hookraft_core::retry::Decision;
    use rand::SeedableRng;

    use super::*;

    /// Records how many outcomes each proposal carried.
    #[derive(Default)]
    struct Recorder {
        batches: Mutex<Vec<usize>>,
    }

    impl Recorder {
        fn batches(&self) -> Vec<usize> {
            self.batches.lock().expect("lock").clone()
        }
    }

    impl Proposer for Recorder {
        fn propose(&self, command: Command) -> ProposeFuture<'_> {
            let Command::RecordOutcomes { outcomes, .. } = command else { panic!("only outcomes are proposed") };
            self.batches.lock().expect("lock").push(outcomes.len());
            let applied = u32::try_from(outcomes.len()).expect("small");
            Box::pin(async move { Ok(Response::OutcomesApplied { applied, stale: 0, ignored: 0 }) })
        }
    }

    struct ZeroClock;

    impl Clock for ZeroClock {
        fn wall_ms(&self) -> u64 {
            0
        }
        fn monotonic_ms(&self) -> u64 {
            0
        }
    }

    fn outcome(n: u64) -> Outcome {
        let mut rng = rand::rngs::StdRng::seed_from_u64(n);
        let event = EventId::generate(1_700_000_000_000, &mut rng);
        let endpoint = EndpointId::generate(1_700_000_000_000, &mut rng);
        Outcome {
            delivery_id: DeliveryId::derive(&event, &endpoint),
            shard: endpoint.shard(),
            token: 1,
            attempt: AttemptRecord {
                node_id: 1,
                fencing_token: 1,
                started_at_ms: 0,
                latency_ms: 1,
                status_code: Some(200),
                error: None,
                response_excerpt: None,
            },
            decision: Decision::Delivered,
            breaker: None,
        }
    }

    fn start() -> (mpsc::Sender<Outcome>, Arc<Recorder>) {
        let (tx, rx) = mpsc::channel(OUTCOME_QUEUE_MAX);
        let recorder = Arc::new(Recorder::default());
        tokio::spawn(run_outcome_batcher(rx, recorder.clone(), Arc::new(ZeroClock), 1));
        (tx, recorder)
    }

    /// Lets the batcher run, then moves the paused clock on by `ms`.
    async fn pass(ms: u64) {
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_millis(ms)).await;
        tokio::task::yield_now().await;
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_that_arrive_within_the_linger_share_one_entry() {
        let (tx, recorder) = start();
        for n in 0..3 {
            tx.send(outcome(n)).await.expect("batcher runs");
            pass(1).await;
        }
        assert!(recorder.batches().is_empty(), "still lingering 3 ms after the first outcome");
        pass(OUTCOME_LINGER.as_millis() as u64).await;
        assert_eq!(recorder.batches(), vec![3]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_outcome_waits_for_the_linger_and_no_longer() {
        let (tx, recorder) = start();
        tx.send(outcome(0)).await.expect("batcher runs");
        pass(OUTCOME_LINGER.as_millis() as u64 - 1).await;
        assert!(recorder.batches().is_empty());
        pass(1).await;
        assert_eq!(recorder.batches(), vec![1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_of_the_linger_minimum_is_proposed_without_waiting() {
        let (tx, recorder) = start();
        // Queued without yielding, so the batcher finds them all at once.
        for n in 0..OUTCOME_LINGER_MIN as u64 + 10 {
            tx.try_send(outcome(n)).expect("queued");
        }
        // The paused clock does not move: no wait is involved.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(recorder.batches(), vec![OUTCOME_LINGER_MIN + 10]);
    }
}
