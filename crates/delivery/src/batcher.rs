//! The outcome batcher: collects attempt outcomes from every endpoint actor
//! of the node and commits them in batches, one `RecordOutcomes` entry each.
//!
//! A batch that cannot be committed (no leader, a lost quorum) is retried
//! with backoff until it commits: the actors have moved on, so dropping it
//! would leave its deliveries queued in the log but forgotten here. The
//! bounded channel in front pushes back on the actors meanwhile.

use std::sync::Arc;
use std::time::Duration;

use hookraft_core::clock::Clock;
use hookraft_core::command::{Command, Outcome, Response};
use hookraft_core::ids::NodeId;
use hookraft_core::propose::{ProposeError, Proposer};
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
/// recorded after its webhook was sent, so the wait delays when the
/// timeline shows the attempt, never a delivery; but until it is committed
/// a crash of this node makes the next owner send the webhook again, so
/// only a stream of outcomes waits (see [`OUTCOME_STREAM_MIN`]).
pub const OUTCOME_LINGER: Duration = Duration::from_millis(5);
/// A batch waits for more only when the one before it held at least this
/// many outcomes: outcomes are streaming in, and an entry per handful of
/// them is the cost the wait saves. A node sending a few hundred webhooks
/// a second proposes each outcome at once, as before, so its window for a
/// duplicate after a crash is unchanged (waiting for the end of a pause in
/// the stream instead, 1 ms, lost most of the gain while draining: the
/// actors' outcomes come in bursts).
pub const OUTCOME_STREAM_MIN: usize = 8;
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Runs until every sender is dropped or the proposer shuts down.
pub async fn run_outcome_batcher(
    mut outcomes: mpsc::Receiver<Outcome>,
    proposer: Arc<dyn Proposer>,
    clock: Arc<dyn Clock>,
    node_id: NodeId,
) {
    let mut batch = Vec::with_capacity(OUTCOME_BATCH_MAX);
    let mut streaming = false;
    while outcomes.recv_many(&mut batch, OUTCOME_BATCH_MAX).await > 0 {
        if streaming {
            linger(&mut outcomes, &mut batch).await;
        }
        streaming = batch.len() >= OUTCOME_STREAM_MIN;
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
    use hookraft_core::propose::ProposeFuture;
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

    /// Lets the batcher run, then moves the paused clock on by `by`.
    async fn pass(by: Duration) {
        tokio::task::yield_now().await;
        tokio::time::advance(by).await;
        tokio::task::yield_now().await;
    }

    /// Queues `n` outcomes without yielding, so the batcher finds them all at once.
    fn queue_at_once(tx: &mpsc::Sender<Outcome>, n: usize) {
        for i in 0..n as u64 {
            tx.try_send(outcome(i)).expect("queued");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_that_come_one_by_one_are_proposed_at_once() {
        let (tx, recorder) = start();
        for n in 1..=3 {
            tx.send(outcome(n)).await.expect("batcher runs");
            pass(Duration::ZERO).await;
            assert_eq!(recorder.batches(), vec![1; n as usize], "no wait: the clock has not moved");
            pass(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_batch_of_a_stream_the_next_small_one_lingers() {
        let (tx, recorder) = start();
        queue_at_once(&tx, OUTCOME_STREAM_MIN);
        pass(Duration::ZERO).await;
        assert_eq!(recorder.batches(), vec![OUTCOME_STREAM_MIN], "the first batch does not wait");
        for n in 0..3 {
            tx.send(outcome(n)).await.expect("batcher runs");
            pass(Duration::from_millis(1)).await;
        }
        assert_eq!(recorder.batches().len(), 1, "still lingering 3 ms after the first outcome");
        pass(OUTCOME_LINGER).await;
        assert_eq!(recorder.batches(), vec![OUTCOME_STREAM_MIN, 3]);
        // That batch was small: the stream has dried up, the next goes at once.
        tx.send(outcome(9)).await.expect("batcher runs");
        pass(Duration::ZERO).await;
        assert_eq!(recorder.batches(), vec![OUTCOME_STREAM_MIN, 3, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_of_the_linger_minimum_is_proposed_without_waiting() {
        let (tx, recorder) = start();
        queue_at_once(&tx, OUTCOME_STREAM_MIN);
        pass(Duration::ZERO).await;
        queue_at_once(&tx, OUTCOME_LINGER_MIN + 10);
        // The paused clock does not move: no wait is involved.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(recorder.batches(), vec![OUTCOME_STREAM_MIN, OUTCOME_LINGER_MIN + 10]);
    }
}
