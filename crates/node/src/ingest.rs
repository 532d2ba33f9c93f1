//! The ingest batcher: events from every HTTP handler of the node go into
//! one bounded queue; up to [`INGEST_BATCH_MAX`] at a time become one
//! `IngestEvents` entry. Each handler is answered once its event is
//! committed and applied. A few batches may be in flight at once so the
//! log's fsync and the next batch's collection overlap.

use std::sync::Arc;

use hookraft_api::context::{Ingest, IngestBatchFuture, IngestFuture};
use hookraft_core::clock::Clock;
use hookraft_core::command::{Command, IngestResult, NewEvent, Response};
use hookraft_core::ids::NodeId;
use hookraft_core::propose::{ProposeError, Proposer};
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
/// `hookraft-bench --scenario throughput`; the figures are in
/// docs/benchmarks-history.md ("What was tried on the log and the allocator").
pub const INGEST_BATCHES_IN_FLIGHT_MAX: usize = 4;

type Reply<T> = oneshot::Sender<Result<T, ProposeError>>;

/// What one handler hands the batcher: one event, or a batch that goes
/// into a single log entry whole.
enum Submission {
    One(NewEvent, Reply<IngestResult>),
    Batch(Vec<NewEvent>, Reply<Vec<IngestResult>>),
}

impl Submission {
    fn len(&self) -> usize {
        match self {
            Submission::One(..) => 1,
            Submission::Batch(events, _) => events.len(),
        }
    }

    /// Moves the events into the entry being built and keeps where their
    /// answers go.
    fn into_entry(self, entry: &mut Vec<NewEvent>) -> Waiter {
        match self {
            Submission::One(event, reply) => {
                entry.push(event);
                Waiter::One(reply)
            }
            Submission::Batch(mut events, reply) => {
                let waiter = Waiter::Batch(events.len(), reply);
                entry.append(&mut events);
                waiter
            }
        }
    }
}

/// Where a submission's answers go once its entry is applied.
enum Waiter {
    One(Reply<IngestResult>),
    Batch(usize, Reply<Vec<IngestResult>>),
}

impl Waiter {
    fn fail(self, error: ProposeError) {
        match self {
            Waiter::One(reply) => drop(reply.send(Err(error))),
            Waiter::Batch(_, reply) => drop(reply.send(Err(error))),
        }
    }
}

/// The handlers' side of the batcher.
pub struct IngestQueue {
    tx: mpsc::Sender<Submission>,
}

impl Ingest for IngestQueue {
    fn submit(&self, event: NewEvent) -> IngestFuture<'_> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            self.tx.send(Submission::One(event, reply)).await.map_err(|_| ProposeError::ShuttingDown)?;
            answer.await.map_err(|_| ProposeError::ShuttingDown)?
        })
    }

    fn submit_batch(&self, events: Vec<NewEvent>) -> IngestBatchFuture<'_> {
        Box::pin(async move {
            if events.is_empty() {
                return Ok(Vec::new());
            }
            let (reply, answer) = oneshot::channel();
            self.tx.send(Submission::Batch(events, reply)).await.map_err(|_| ProposeError::ShuttingDown)?;
            answer.await.map_err(|_| ProposeError::ShuttingDown)?
        })
    }
}

/// Starts the batcher task; it ends when the queue's last sender is dropped.
/// `node_id` is this node: every event's timeline names it as the receiver.
pub fn start(proposer: Arc<dyn Proposer>, clock: Arc<dyn Clock>, node_id: NodeId) -> IngestQueue {
    let (tx, rx) = mpsc::channel(INGEST_QUEUE_MAX);
    tokio::spawn(run(rx, proposer, clock, node_id));
    IngestQueue { tx }
}

/// How many of the queued submissions (their sizes in order) go into the
/// next entry: as many as fit in `max` events, and always at least the
/// first, so a batch larger than `max` still goes (alone).
fn submissions_that_fit(sizes: impl IntoIterator<Item = usize>, max: usize) -> usize {
    let mut events = 0;
    let mut taken = 0;
    for size in sizes {
        if taken > 0 && events + size > max {
            break;
        }
        events += size;
        taken += 1;
    }
    taken
}

async fn run(mut rx: mpsc::Receiver<Submission>, proposer: Arc<dyn Proposer>, clock: Arc<dyn Clock>, node_id: NodeId) {
    let in_flight = Arc::new(Semaphore::new(INGEST_BATCHES_IN_FLIGHT_MAX));
    // Received but not yet proposed: what did not fit in the last entry.
    let mut queued: Vec<Submission> = Vec::with_capacity(INGEST_BATCH_MAX);
    loop {
        // Wait for a commit slot first, so events keep accumulating meanwhile.
        let Ok(permit) = in_flight.clone().acquire_owned().await else { return };
        if queued.is_empty() {
            if rx.recv_many(&mut queued, INGEST_BATCH_MAX).await == 0 {
                return;
            }
        } else {
            while queued.len() < INGEST_BATCH_MAX
                && let Ok(submission) = rx.try_recv()
            {
                queued.push(submission);
            }
        }
        let taken = submissions_that_fit(queued.iter().map(Submission::len), INGEST_BATCH_MAX);
        let mut events = Vec::with_capacity(queued[..taken].iter().map(Submission::len).sum());
        let waiters: Vec<Waiter> = queued.drain(..taken).map(|s| s.into_entry(&mut events)).collect();
        let proposer = proposer.clone();
        let now_ms = clock.wall_ms();
        tokio::spawn(async move {
            let count = events.len();
            let outcome = proposer.propose(Command::IngestEventsFrom { node_id, now_ms, events }).await;
            drop(permit);
            match outcome {
                Ok(Response::Ingested { results }) if results.len() == count => answer(waiters, results),
                Ok(other) => {
                    tracing::error!(?other, "unexpected response to IngestEvents");
                    for waiter in waiters {
                        waiter.fail(ProposeError::Other("unexpected response from the log".into()));
                    }
                }
                // Not committed: every handler answers 503 and the producer retries.
                Err(error) => {
                    for waiter in waiters {
                        waiter.fail(error.clone());
                    }
                }
            }
        });
    }
}

/// Hands each waiter its share of the entry's results, in order.
fn answer(waiters: Vec<Waiter>, results: Vec<IngestResult>) {
    let mut results = results.into_iter();
    for waiter in waiters {
        match waiter {
            Waiter::One(reply) => {
                if let Some(result) = results.next() {
                    let _ = reply.send(Ok(result));
                }
            }
            Waiter::Batch(len, reply) => {
                let _ = reply.send(Ok(results.by_ref().take(len).collect()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_events_fill_an_entry_up_to_the_cap() {
        assert_eq!(submissions_that_fit([1; 5], 3), 3);
        assert_eq!(submissions_that_fit([1; 2], 3), 2);
        assert_eq!(submissions_that_fit(std::iter::empty(), 3), 0);
    }

    #[test]
    fn a_batch_that_would_overflow_the_entry_waits_for_the_next() {
        assert_eq!(submissions_that_fit([1, 1, 500, 1], 501), 2);
        assert_eq!(submissions_that_fit([500, 1, 1], 501), 2);
        assert_eq!(submissions_that_fit([500, 2], 501), 1);
    }

    #[test]
    fn a_batch_larger_than_the_cap_goes_alone() {
        assert_eq!(submissions_that_fit([2_000, 1], 1_024), 1);
    }
}
