//! Node-to-node RPC: the server side of `hookraft_raft::http_network`.
//!
//! `POST /internal/raft/append|vote|snapshot` hand openraft's RPCs to the
//! local [`Raft`]; `POST /internal/propose` commits a command a follower
//! forwarded, through [`LocalWrite`]. Bodies and replies are the bincode
//! enums of [`hookraft_raft::rpc`], which also names the paths and header.
//!
//! Statuses: 200 with a bincode reply whenever the request reached Raft
//! (a Raft refusal travels inside the reply); 401 when the request does
//! not carry the cluster secret (checked before the body is read, in
//! constant time; every node has one); 400 for a body that does not decode; 413 over
//! [`RPC_BODY_BYTES_MAX`]; 503 when Raft did not answer within the
//! handler's bound.
//!
//! These routes carry no domain logic. A node started without a shared
//! secret requires one of its own that no client knows, so they are never
//! open.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response as HttpResponse};
use hookraft_core::command::Command;
use hookraft_core::redact::SecretString;
use hookraft_raft::rpc::{
    self, AppendRequest, CLUSTER_SECRET_HEADER, Committed, ProposeReply, RPC_BODY_BYTES_MAX, RaftReply,
    SnapshotRequest, VoteRequest,
};
use hookraft_raft::{NodeId, Raft};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::openapi::problems::{BadRequest, PayloadTooLarge, Unavailable};
use crate::problem::Problem;

/// How long a Raft RPC handler waits for the local Raft. The sender gives
/// up much sooner (openraft's TTLs are below 2 s); this only stops a stuck
/// handler from living forever.
pub const RAFT_HANDLER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a forwarded write may take to commit here.
pub const PROPOSE_HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

/// What [`LocalWrite::write`] returns.
pub type LocalWriteFuture<'a> = Pin<Box<dyn Future<Output = Result<Committed, LocalWriteError>> + Send + 'a>>;

/// Commits a command on this node, which must be the leader. The node
/// implements it with `Raft::client_write`.
pub trait LocalWrite: Send + Sync {
    fn write(&self, command: Command) -> LocalWriteFuture<'_>;
}

/// Why a [`LocalWrite`] did not commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocalWriteError {
    /// This node is not the leader (openraft said `ForwardToLeader`);
    /// `leader` is the one it knows of, if any.
    #[error("this node is not the leader (leader: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    /// The write failed here (shutting down, storage error, timed out).
    #[error("the write failed: {0}")]
    Failed(String),
}

/// What the internal routes need.
pub struct InternalRpc {
    pub raft: Raft,
    /// Required of every caller (`x-hookraft-cluster-secret`), in every
    /// configuration: a node without a shared one holds a secret of its own.
    pub cluster_secret: SecretString,
    /// Commits forwarded commands.
    pub local_write: Arc<dyn LocalWrite>,
}

impl fmt::Debug for InternalRpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InternalRpc").field("cluster_secret", &self.cluster_secret).finish_non_exhaustive()
    }
}

/// The internal routes, each with its part of the document (tagged
/// `internal`: bincode bodies, for nodes only).
pub fn routes() -> OpenApiRouter<Arc<InternalRpc>> {
    OpenApiRouter::new()
        .routes(routes!(append))
        .routes(routes!(vote))
        .routes(routes!(snapshot))
        .routes(routes!(propose))
}

/// The internal routes, with their own state, to `merge` into the node's router.
pub fn router(rpc: Arc<InternalRpc>) -> Router {
    let (routes, _) = routes().split_for_parts();
    routes
        .route_layer(axum::middleware::from_fn_with_state(rpc.clone(), require_cluster_secret))
        .layer(axum::middleware::map_response(crate::problem::ensure_problem))
        .layer(DefaultBodyLimit::max(RPC_BODY_BYTES_MAX))
        .with_state(rpc)
}

/// Lets a request through only when it carries the cluster secret.
async fn require_cluster_secret(State(rpc): State<Arc<InternalRpc>>, request: Request, next: Next) -> HttpResponse {
    let expected = rpc.cluster_secret.expose();
    match request.headers().get(CLUSTER_SECRET_HEADER) {
        Some(sent) if crate::auth::constant_time_eq(sent.as_bytes(), expected.as_bytes()) => next.run(request).await,
        _ => Problem {
            detail: format!("send the cluster secret in `{CLUSTER_SECRET_HEADER}`"),
            ..Problem::unauthorized()
        }
        .into_response(),
    }
}

/// Raft append entries, from the leader.
#[utoipa::path(
    post,
    path = rpc::APPEND_PATH,
    tag = "internal",
    request_body(content = Vec<u8>, description = "A bincode `AppendRequest`.", content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "A bincode `RaftReply` of the append.", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 400, response = BadRequest),
        (status = 413, response = PayloadTooLarge),
        (status = 503, response = Unavailable),
    )
)]
async fn append(State(rpc): State<Arc<InternalRpc>>, body: Result<Bytes, BytesRejection>) -> HttpResponse {
    let request: AppendRequest = match decode_body("append entries request", body) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    answer("append entries reply", rpc.raft.append_entries(request)).await
}

/// A Raft vote request, from a candidate.
#[utoipa::path(
    post,
    path = rpc::VOTE_PATH,
    tag = "internal",
    request_body(content = Vec<u8>, description = "A bincode `VoteRequest`.", content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "A bincode `RaftReply` of the vote.", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 400, response = BadRequest),
        (status = 413, response = PayloadTooLarge),
        (status = 503, response = Unavailable),
    )
)]
async fn vote(State(rpc): State<Arc<InternalRpc>>, body: Result<Bytes, BytesRejection>) -> HttpResponse {
    let request: VoteRequest = match decode_body("vote request", body) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    let candidate = request.vote;
    let raft = &rpc.raft;
    answer("vote reply", async move {
        let started = tokio::time::Instant::now();
        let reply = raft.vote(request).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match &reply {
            Ok(reply) => {
                tracing::info!(%candidate, granted = reply.vote_granted, elapsed_ms, "answered a vote request")
            }
            Err(error) => tracing::warn!(%candidate, %error, elapsed_ms, "a vote request failed here"),
        }
        reply
    })
    .await
}

/// A Raft snapshot chunk, from the leader.
#[utoipa::path(
    post,
    path = rpc::SNAPSHOT_PATH,
    tag = "internal",
    request_body(content = Vec<u8>, description = "A bincode `SnapshotRequest`.", content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "A bincode `RaftReply` of the install.", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 400, response = BadRequest),
        (status = 413, response = PayloadTooLarge),
        (status = 503, response = Unavailable),
    )
)]
async fn snapshot(State(rpc): State<Arc<InternalRpc>>, body: Result<Bytes, BytesRejection>) -> HttpResponse {
    let request: SnapshotRequest = match decode_body("install snapshot request", body) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };
    answer("install snapshot reply", rpc.raft.install_snapshot(request)).await
}

/// A command a follower forwarded, to commit here (the leader).
#[utoipa::path(
    post,
    path = rpc::PROPOSE_PATH,
    tag = "internal",
    request_body(content = Vec<u8>, description = "A bincode `Command`.", content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "A bincode `ProposeReply`: applied, not the leader, or failed.", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 400, response = BadRequest),
        (status = 413, response = PayloadTooLarge),
        (status = 503, response = Unavailable),
    )
)]
async fn propose(State(rpc): State<Arc<InternalRpc>>, body: Result<Bytes, BytesRejection>) -> HttpResponse {
    let command: Command = match decode_body("forwarded command", body) {
        Ok(command) => command,
        Err(problem) => return problem.into_response(),
    };
    let Ok(result) = tokio::time::timeout(PROPOSE_HANDLER_TIMEOUT, rpc.local_write.write(command)).await else {
        return Problem::unavailable("the write did not commit in time; its outcome is unknown").into_response();
    };
    let reply = match result {
        Ok(committed) => ProposeReply::Applied(committed),
        Err(LocalWriteError::NotLeader { leader }) => ProposeReply::NotLeader { leader },
        Err(LocalWriteError::Failed(why)) => ProposeReply::Failed(why),
    };
    bincode_response("propose reply", &reply)
}

/// Waits (bounded) for Raft's answer and sends it as a [`RaftReply`].
async fn answer<T: Serialize, E>(what: &'static str, call: impl Future<Output = Result<T, E>>) -> HttpResponse
where
    RaftReply<T>: From<Result<T, E>>,
{
    match tokio::time::timeout(RAFT_HANDLER_TIMEOUT, call).await {
        Ok(result) => bincode_response(what, &RaftReply::from(result)),
        Err(_) => Problem::unavailable("raft did not answer in time").into_response(),
    }
}

fn decode_body<T: DeserializeOwned>(what: &'static str, body: Result<Bytes, BytesRejection>) -> Result<T, Problem> {
    let bytes = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            Problem::too_large(format!("node-to-node bodies are limited to {RPC_BODY_BYTES_MAX} bytes"))
        }
        _ => Problem::malformed(rejection.body_text()),
    })?;
    rpc::decode(what, &bytes).map_err(|e| Problem::malformed(e.to_string()))
}

fn bincode_response<T: Serialize>(what: &'static str, reply: &T) -> HttpResponse {
    match rpc::encode(what, reply) {
        Ok(bytes) => {
            ([(header::CONTENT_TYPE, HeaderValue::from_static(rpc::BINCODE_CONTENT_TYPE))], bytes).into_response()
        }
        Err(error) => {
            tracing::error!(%error, "cannot encode an internal rpc reply");
            Problem::internal(error.to_string()).into_response()
        }
    }
}
