//! The wire protocol of node-to-node RPC, shared by the client
//! ([`crate::http_network`]) and the server (`hookraft-api`'s internal
//! routes), so the two sides cannot drift apart.
//!
//! Every call is an HTTP `POST` of a bincode body (this crate's one bincode
//! configuration, see `codec`) to one of the paths below, carrying
//! the signature of [`crate::link`] ([`crate::link::LINK_HEADER`]). A request the
//! server could decode and hand to Raft is answered `200` with a bincode
//! [`RaftReply`] or [`ProposeReply`]; any other status means the request did
//! not reach Raft (401 secret refused, 400 undecodable body, 413 body over
//! [`RPC_BODY_BYTES_MAX`], 503 the handler timed out).
//!
//! openraft's own error types never cross the wire: the receiver folds them
//! into the small enums here and the sender rebuilds what openraft needs.
//! Both enums are bincode-encoded, whose enum encoding is positional: from
//! a first release on, released variants are frozen and new ones go at the
//! end (docs/ARCHITECTURE.md, encodings).
//!
//! This module does no IO; it must not grow HTTP or timing concerns.

use openraft::SnapshotSegmentId;
use openraft::error::{Fatal, Infallible, InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{AppendEntriesResponse, InstallSnapshotResponse, VoteResponse};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{Command, Error, NodeId, Response, TypeConfig, codec};

/// `append_entries`: body [`AppendRequest`], reply `RaftReply<AppendResponse>`.
pub const APPEND_PATH: &str = "/internal/raft/append";
/// `vote`: body [`VoteRequest`], reply `RaftReply<VoteResponse>`.
pub const VOTE_PATH: &str = "/internal/raft/vote";
/// One snapshot chunk: body [`SnapshotRequest`], reply `RaftReply<SnapshotResponse>`.
pub const SNAPSHOT_PATH: &str = "/internal/raft/snapshot";
/// A client write forwarded to the leader: body [`Command`], reply [`ProposeReply`].
pub const PROPOSE_PATH: &str = "/internal/propose";
/// The content type of every request and reply body.
pub const BINCODE_CONTENT_TYPE: &str = "application/octet-stream";
/// The largest request body a node accepts on these routes: big append
/// batches and snapshot chunks (openraft's default chunk is 3 MiB) fit.
pub const RPC_BODY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// `append_entries` request.
pub type AppendRequest = openraft::raft::AppendEntriesRequest<TypeConfig>;
/// `append_entries` answer.
pub type AppendResponse = AppendEntriesResponse<NodeId>;
/// `vote` request.
pub type VoteRequest = openraft::raft::VoteRequest<NodeId>;
/// `vote` answer.
pub type VoteReply = VoteResponse<NodeId>;
/// One snapshot chunk.
pub type SnapshotRequest = openraft::raft::InstallSnapshotRequest<TypeConfig>;
/// The answer to one snapshot chunk.
pub type SnapshotResponse = InstallSnapshotResponse<NodeId>;

/// What a node answers to a Raft RPC it decoded. Append-only (module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaftReply<T> {
    /// Raft handled the request. A higher vote or a log conflict is an
    /// ordinary answer inside `T`, not an error.
    Ok(T),
    /// The receiver's Raft has stopped (shut down, or halted on a storage
    /// error); the text says why.
    Fatal(String),
    /// `install_snapshot` only: the chunk does not continue the snapshot the
    /// receiver is assembling; the sender restarts from `expect`.
    SnapshotMismatch { expect: SegmentId, got: SegmentId },
}

/// A position in a snapshot stream (openraft's `SnapshotSegmentId`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentId {
    pub snapshot_id: String,
    pub offset: u64,
}

/// A command committed and applied on the leader: the state machine's
/// answer and the log index it was applied at, so the forwarding node can
/// wait until its own replica has applied it too (read-your-writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Committed {
    pub response: Response,
    pub log_index: u64,
}

/// What a node answers to a forwarded command. Append-only (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ProposeReply {
    /// Committed and applied on the leader.
    Applied(Committed),
    /// The receiver is not the leader; `leader` is the leader it knows of.
    NotLeader { leader: Option<NodeId> },
    /// The receiver leads but could not commit (shutting down, storage
    /// error, timed out); the outcome may be unknown.
    Failed(String),
}

impl<T> From<Result<T, RaftError<NodeId, Infallible>>> for RaftReply<T> {
    /// Folds the answer of `Raft::append_entries` or `Raft::vote`.
    fn from(result: Result<T, RaftError<NodeId, Infallible>>) -> Self {
        match result {
            Ok(value) => Self::Ok(value),
            Err(RaftError::Fatal(fatal)) => Self::fatal(&fatal),
            Err(RaftError::APIError(never)) => match never {},
        }
    }
}

impl<T> From<Result<T, RaftError<NodeId, InstallSnapshotError>>> for RaftReply<T> {
    /// Folds the answer of `Raft::install_snapshot`.
    fn from(result: Result<T, RaftError<NodeId, InstallSnapshotError>>) -> Self {
        match result {
            Ok(value) => Self::Ok(value),
            Err(RaftError::Fatal(fatal)) => Self::fatal(&fatal),
            Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(mismatch))) => {
                Self::SnapshotMismatch { expect: mismatch.expect.into(), got: mismatch.got.into() }
            }
        }
    }
}

impl<T> RaftReply<T> {
    fn fatal(fatal: &Fatal<NodeId>) -> Self {
        Self::Fatal(fatal.to_string())
    }
}

impl From<SnapshotSegmentId> for SegmentId {
    fn from(segment: SnapshotSegmentId) -> Self {
        Self { snapshot_id: segment.id, offset: segment.offset }
    }
}

impl From<SegmentId> for SnapshotSegmentId {
    fn from(segment: SegmentId) -> Self {
        SnapshotSegmentId { id: segment.snapshot_id, offset: segment.offset }
    }
}

/// Rebuilds openraft's mismatch error from its wire form.
pub(crate) fn snapshot_mismatch(expect: SegmentId, got: SegmentId) -> InstallSnapshotError {
    InstallSnapshotError::SnapshotMismatch(SnapshotMismatch { expect: expect.into(), got: got.into() })
}

/// Encodes a request or reply body; `what` names it in the error.
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, Error> {
    codec::encode(what, value)
}

/// Decodes a whole request or reply body that came from the network.
/// Lengths inside it are bounded by [`RPC_BODY_BYTES_MAX`], so a corrupt
/// or hostile length prefix is an error, not a huge allocation.
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, Error> {
    codec::decode_untrusted(what, bytes)
}

/// Decodes a forwarded command (the body of [`PROPOSE_PATH`]).
pub fn decode_command(bytes: &[u8]) -> Result<Command, Error> {
    decode("forwarded command", bytes)
}

#[cfg(test)]
mod tests {
    use openraft::error::Fatal;

    use super::*;
    use crate::Vote;

    #[test]
    fn raft_reply_round_trips_through_bincode() {
        let replies: Vec<RaftReply<VoteReply>> = vec![
            RaftReply::Ok(VoteResponse { vote: Vote::new(3, 2), vote_granted: true, last_log_id: None }),
            RaftReply::Fatal("raft stopped".into()),
            RaftReply::SnapshotMismatch {
                expect: SegmentId { snapshot_id: "1-5-1".into(), offset: 0 },
                got: SegmentId { snapshot_id: "1-5-1".into(), offset: 64 },
            },
        ];
        for reply in replies {
            let bytes = encode("vote reply", &reply).expect("encodes");
            assert_eq!(decode::<RaftReply<VoteReply>>("vote reply", &bytes).expect("decodes"), reply);
        }
    }

    #[test]
    fn fatal_and_mismatch_errors_fold_into_their_wire_variants() {
        let stopped: Result<(), RaftError<NodeId>> = Err(RaftError::Fatal(Fatal::Stopped));
        assert_eq!(RaftReply::from(stopped), RaftReply::Fatal("raft stopped".into()));

        let segment = |offset| SnapshotSegmentId { id: "s".into(), offset };
        let mismatch = InstallSnapshotError::SnapshotMismatch(SnapshotMismatch { expect: segment(0), got: segment(9) });
        let reply = RaftReply::<()>::from(Err(RaftError::APIError(mismatch.clone())));
        let RaftReply::SnapshotMismatch { expect, got } = reply else { panic!("{reply:?}") };
        assert_eq!(snapshot_mismatch(expect, got), mismatch);
    }

    #[test]
    fn decode_of_a_hostile_length_prefix_is_an_error_not_an_allocation() {
        // A `ProposeReply::Failed` whose string claims 2^60 bytes.
        let mut bytes = encode("reply", &ProposeReply::Failed(String::new())).expect("encodes");
        bytes.truncate(1);
        bytes.push(253); // varint marker: a u64 follows
        bytes.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(decode::<ProposeReply>("reply", &bytes).is_err());
    }
}
