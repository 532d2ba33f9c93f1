//! The node's log writer: every local write (ingest batches, outcome
//! batches, heartbeats, admin changes, writes forwarded by followers) goes
//! through one queue, and whatever is queued while the previous append is
//! being fsynced becomes the next log entry, as one `Command::Batch`.
//!
//! openraft 0.9 appends and fsyncs once per `client_write`; without this,
//! an ingest batch and an outcome batch arriving together would cost two
//! fsyncs. With it, throughput is bounded by how much arrives per fsync.
//!
//! [`write_locally`] is the one call into the local Raft; the cluster glue
//! (`crate::cluster`) builds forwarding and the RPC's local write on it.

use hookraft_core::command::{Command, Response};
use hookraft_core::ids::NodeId;
use hookraft_core::propose::ProposeError;
use hookraft_raft::Raft;
use hookraft_raft::rpc::Committed;
use openraft::error::{ClientWriteError, RaftError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

/// Commands waiting for the next append at most; a full queue makes writers wait.
pub const LOG_WRITER_QUEUE_MAX: usize = 4_096;
/// Commands wrapped into one log entry at most.
pub const LOG_WRITER_BATCH_MAX: usize = 256;

/// Where a local write ended.
pub enum Written {
    Applied(Committed),
    NotLeader { leader: Option<(NodeId, String)> },
    Failed(ProposeError),
}

/// How long a write on the local Raft may take before it is reported failed.
///
/// openraft 0.9 can leave a `client_write` unanswered for good: a leader
/// that stalls with writes pending, loses leadership, and then catches up by
/// installing a snapshot never applies those indexes itself, nor truncates
/// them, which are the only two ways it answers a pending write. Without this
/// bound the log writer, and every heartbeat behind it, waited forever (found
/// by the chaos run: a leader paused past its lease never became live again).
pub const LOCAL_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Commits on the local Raft if it leads; says who leads otherwise. A write
/// not answered within [`LOCAL_WRITE_TIMEOUT`] fails but may still commit,
/// like a forward that timed out (docs/DESIGN-NOTES.md, note 13).
pub async fn write_locally(raft: &Raft, command: Command) -> Written {
    let Ok(written) = tokio::time::timeout(LOCAL_WRITE_TIMEOUT, raft.client_write(command.into())).await else {
        tracing::warn!(timeout = ?LOCAL_WRITE_TIMEOUT, "a local raft write was not answered in time");
        return Written::Failed(ProposeError::Other(format!(
            "the write was not answered within {} s; it may still commit",
            LOCAL_WRITE_TIMEOUT.as_secs()
        )));
    };
    match written {
        Ok(written) => Written::Applied(Committed { response: written.data, log_index: written.log_id.index }),
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            Written::NotLeader { leader: f.leader_id.zip(f.leader_node.map(|n| n.addr)) }
        }
        Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
            Written::Failed(ProposeError::Other(e.to_string()))
        }
        Err(RaftError::Fatal(fatal)) => {
            tracing::error!(%fatal, "raft stopped");
            Written::Failed(ProposeError::ShuttingDown)
        }
    }
}

type Reply = oneshot::Sender<Written>;

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
    pub async fn write(&self, command: Command) -> Written {
        let (reply, answer) = oneshot::channel();
        if self.tx.send((command, reply)).await.is_err() {
            return Written::Failed(ProposeError::ShuttingDown);
        }
        answer.await.unwrap_or(Written::Failed(ProposeError::ShuttingDown))
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
            Written::Applied(Committed { response: Response::Batch(responses), log_index })
                if responses.len() == count =>
            {
                for (reply, response) in replies.into_iter().zip(responses) {
                    let _ = reply.send(Written::Applied(Committed { response, log_index }));
                }
            }
            Written::Applied(other) => {
                tracing::error!(?other.response, "a batch was answered with something else than one response per command");
                for reply in replies {
                    let _ = reply.send(Written::Failed(ProposeError::Other("unexpected response from the log".into())));
                }
            }
            Written::NotLeader { leader } => {
                for reply in replies {
                    let _ = reply.send(Written::NotLeader { leader: leader.clone() });
                }
            }
            Written::Failed(error) => {
                for reply in replies {
                    let _ = reply.send(Written::Failed(error.clone()));
                }
            }
        }
    }
}
