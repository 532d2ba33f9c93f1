//! The ingest batcher: events from every HTTP handler of the node go into
//! one bounded queue; up to [`INGEST_BATCH_MAX`] at a time become one
//! `IngestEvents` entry. Each handler is answered once its event is
//! committed and applied. A few batches may be in flight at once so the
//! log's fsync and the next batch's collection overlap.

use std::sync::Arc;

use hookraft_api::context::{Ingest, IngestFuture};
use hookraft_core::clock::Clock;
use hookraft_core::command::{Command, IngestResult, NewEvent, Response};
use hookraft_delivery::batcher::{ProposeError, Proposer};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Events committed in one log entry at most.
pub const INGEST_BATCH_MAX: usize = 1_024;
/// Events waiting to be batched at most; a full queue makes handlers wait.
pub const INGEST_QUEUE_MAX: usize = 16_384;
/// Batches being committed at the same time at most. More than one lets a
/// batch wait in the log writer's queue (or, on a follower, travel to the
/// leader) while the one before it is committed, instead of waiting for its
/// answer first; the log writer still appends one entry at a time, holding
/// whatever is queued, so entries do not get smaller. Measured with
/// `hookraft-bench --scenario throughput` (docs/benchmarks.md): 1 → 4 took
/// three nodes from 5,800–5,890 to 6,560–6,930 events/s.
pub const INGEST_BATCHES_IN_FLIGHT_MAX: usize = 4;

type Reply = oneshot::Sender<Result<IngestResult, ProposeError>>;

/// The handlers' side of the batcher.
pub struct IngestQueue {
    tx: mpsc::Sender<(NewEvent, Reply)>,
}

impl Ingest for IngestQueue {
    fn submit(&self, event: NewEvent) -> IngestFuture<'_> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            self.tx.send((event, reply)).await.map_err(|_| ProposeError::ShuttingDown)?;
            answer.await.map_err(|_| ProposeError::ShuttingDown)?
        })
    }
}

/// Starts the batcher task; it ends when the queue's last sender is dropped.
pub fn start(proposer: Arc<dyn Proposer>, clock: Arc<dyn Clock>) -> IngestQueue {
    let (tx, rx) = mpsc::channel(INGEST_QUEUE_MAX);
    tokio::spawn(run(rx, proposer, clock));
    IngestQueue { tx }
}

async fn run(mut rx: mpsc::Receiver<(NewEvent, Reply)>, proposer: Arc<dyn Proposer>, clock: Arc<dyn Clock>) {
    let in_flight = Arc::new(Semaphore::new(INGEST_BATCHES_IN_FLIGHT_MAX));
    let mut batch = Vec::with_capacity(INGEST_BATCH_MAX);
    loop {
        // Wait for a commit slot first, so events keep accumulating meanwhile.
        let Ok(permit) = in_flight.clone().acquire_owned().await else { return };
        if rx.recv_many(&mut batch, INGEST_BATCH_MAX).await == 0 {
            return;
        }
        let (events, replies): (Vec<NewEvent>, Vec<Reply>) = std::mem::take(&mut batch).into_iter().unzip();
        let proposer = proposer.clone();
        let now_ms = clock.wall_ms();
        tokio::spawn(async move {
            let outcome = proposer.propose(Command::IngestEvents { now_ms, events }).await;
            drop(permit);
            match outcome {
                Ok(Response::Ingested { results }) if results.len() == replies.len() => {
                    for (reply, result) in replies.into_iter().zip(results) {
                        let _ = reply.send(Ok(result));
                    }
                }
                Ok(other) => {
                    tracing::error!(?other, "unexpected response to IngestEvents");
                    for reply in replies {
                        let _ = reply.send(Err(ProposeError::Other("unexpected response from the log".into())));
                    }
                }
                // Not committed: every handler answers 503 and the producer retries.
                Err(error) => {
                    for reply in replies {
                        let _ = reply.send(Err(error.clone()));
                    }
                }
            }
        });
    }
}
