//! Committing commands through openraft: the [`Proposer`] of this node.

use hookraft_core::command::Command;
use hookraft_delivery::batcher::{ProposeError, ProposeFuture, Proposer};
use hookraft_raft::Raft;
use openraft::error::{ClientWriteError, RaftError};

/// Proposes to the local Raft node. While this node is not the leader the
/// write is refused with `NoLeader` (forwarding arrives with clustering).
pub struct RaftProposer {
    pub raft: Raft,
}

impl Proposer for RaftProposer {
    fn propose(&self, command: Command) -> ProposeFuture<'_> {
        Box::pin(async move {
            match self.raft.client_write(command).await {
                Ok(response) => Ok(response.data),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(ProposeError::NoLeader),
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
                    Err(ProposeError::Other(e.to_string()))
                }
                Err(RaftError::Fatal(fatal)) => {
                    tracing::error!(%fatal, "raft stopped");
                    Err(ProposeError::ShuttingDown)
                }
            }
        })
    }
}
