//! The node's log writer: every local write (ingest batches, outcome
//! batches, heartbeats, admin changes, writes forwarded by followers) goes
//! through one queue, and whatever is queued while the previous append is
//! being fsynced becomes the next log entry, as one `Command::Batch`.
//!
//! openraft 0.9 appends and fsyncs once per `client_write`; without this,
//! an ingest batch and an outcome batch arriving together would cost two
//! fsyncs. With it, throughput is bounded by how much arrives per fsync.

use hookraft_core::command::{Command, Response};
use hookraft_raft::Raft;
use hookraft_raft::rpc::Committed;
use tokio::sync::{mpsc, oneshot};

use crate::cluster::{LocalWrite, write_locally};

/// Commands waiting for the next append at most; a full queue makes writers wait.
pub const LOG_WRITER_QUEUE_MAX: usize = 4_096;
/// Commands wrapped into one log entry at most.
pub const LOG_WRITER_BATCH_MAX: usize = 256;

type Reply = oneshot::Sender<LocalWrite>;

/// The writers' side: cheap to clone.
#[derive(Clone)]
pub struct LogWriter {
    tx: mpsc::Sender<(Command, Reply)>,
}

impl LogWriter {
    /// Starts the writer task over `raft`, on `runtime` when given (where
    /// Raft runs) or on the caller's.
    pub fn start(raft: Raft, runtime: Option<&tokio::runtime::Handle>) -> Self {
        let (tx, rx) = mpsc::channel(LOG_WRITER_QUEUE_MAX);
        crate::io::spawn_on(runtime, run(rx, raft));
        Self { tx }
    }

    /// Commits `command` on the local Raft if it leads (see [`write_locally`]).
    pub async fn write(&self, command: Command) -> LocalWrite {
        let (reply, answer) = oneshot::channel();
        if self.tx.send((command, reply)).await.is_err() {
            return LocalWrite::Failed(hookraft_delivery::batcher::ProposeError::ShuttingDown);
        }
        answer.await.unwrap_or(LocalWrite::Failed(hookraft_delivery::batcher::ProposeError::ShuttingDown))
    }
}

async fn run(mut rx: mpsc::Receiver<(Command, Reply)>, raft: Raft) {
    let mut queued = Vec::with_capacity(LOG_WRITER_BATCH_MAX);
    while rx.recv_many(&mut queued, LOG_WRITER_BATCH_MAX).await > 0 {
        let (commands, replies): (Vec<Command>, Vec<Reply>) = std::mem::take(&mut queued).into_iter().unzip();
        if commands.len() == 1 {
            let command = commands.into_iter().next().expect("one command");
            let outcome = write_locally(&raft, command).await;
            if let Some(reply) = replies.into_iter().next() {
                let _ = reply.send(outcome);
            }
            continue;
        }
        let count = commands.len();
        match write_locally(&raft, Command::Batch(commands)).await {
            LocalWrite::Applied(Committed { response: Response::Batch(responses), log_index })
                if responses.len() == count =>
            {
                for (reply, response) in replies.into_iter().zip(responses) {
                    let _ = reply.send(LocalWrite::Applied(Committed { response, log_index }));
                }
            }
            LocalWrite::Applied(other) => {
                tracing::error!(?other.response, "a batch was answered with something else than one response per command");
                for reply in replies {
                    let _ = reply.send(LocalWrite::Failed(hookraft_delivery::batcher::ProposeError::Other(
                        "unexpected response from the log".into(),
                    )));
                }
            }
            LocalWrite::NotLeader { leader } => {
                for reply in replies {
                    let _ = reply.send(LocalWrite::NotLeader { leader: leader.clone() });
                }
            }
            LocalWrite::Failed(error) => {
                for reply in replies {
                    let _ = reply.send(LocalWrite::Failed(error.clone()));
                }
            }
        }
    }
}
