//! The consensus seam: how a node's parts commit a command to the
//! replicated log without knowing Raft. The node implements [`Proposer`]
//! (its log writer when it leads, a forward to the leader otherwise); the
//! API's handlers, the ingest and outcome batchers and the lease loop
//! commit through it, and tests hand them a fake.

use std::future::Future;
use std::pin::Pin;

use crate::command::{Command, Response};

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
