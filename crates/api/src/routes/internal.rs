//! Node-to-node RPC: the server side of `hookraft_raft::http_network`.
//!
//! `POST /internal/raft/append|vote|snapshot` hand openraft's RPCs to the
//! local [`Raft`]; `POST /internal/propose` commits a command a follower
//! forwarded, through [`LocalWrite`]. Bodies and replies are the bincode
//! enums of [`hookraft_raft::rpc`], which also names the paths and header.
//!
//! `POST /internal/hello` answers an empty body: the sender's proof that
//! this node holds the cluster's key before it sends anything else.
//!
//! Every request must carry the signature of `hookraft_raft::link`,
//! addressed to this node, timely and never seen before ([`require_link`]);
//! every `200` reply is signed back. Statuses: 200 with a bincode reply
//! whenever the request reached Raft (a Raft refusal travels inside the
//! reply); 401 when the signature is missing, malformed, for another node,
//! out of time, wrong or replayed; 400 for a body that does not decode;
//! 413 over [`RPC_BODY_BYTES_MAX`]; 503 when Raft did not answer within
//! the handler's bound.
//!
//! These routes carry no domain logic. A node started without a shared
//! secret keeps one of its own that no client knows, so they are never
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
use hookraft_core::clock::Clock;
use hookraft_core::command::Command;
use hookraft_raft::link::{self, LinkKey, ReplayGuard};
use hookraft_raft::rpc::{
    self, AppendRequest, Committed, ProposeReply, RPC_BODY_BYTES_MAX, RaftReply, SnapshotRequest, VoteRequest,
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
    /// This node's id: requests must be addressed to it.
    pub node_id: NodeId,
    /// The key of the cluster secret, in every configuration: a node
    /// without a shared secret holds one of its own.
    pub link_key: LinkKey,
    /// The `(boot, seq)` pairs already seen.
    pub replay: ReplayGuard,
    pub clock: Arc<dyn Clock>,
    /// Commits forwarded commands.
    pub local_write: Arc<dyn LocalWrite>,
}

impl fmt::Debug for InternalRpc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InternalRpc").field("node_id", &self.node_id).finish_non_exhaustive()
    }
}

/// The internal routes, each with its part of the document (tagged
/// `internal`: bincode bodies, for nodes only).
pub fn routes() -> OpenApiRouter<Arc<InternalRpc>> {
    OpenApiRouter::new()
        .routes(routes!(hello))
        .routes(routes!(append))
        .routes(routes!(vote))
        .routes(routes!(snapshot))
        .routes(routes!(propose))
}

/// The internal routes, with their own state, to `merge` into the node's router.
pub fn router(rpc: Arc<InternalRpc>) -> Router {
    let (routes, _) = routes().split_for_parts();
    routes
        .route_layer(axum::middleware::from_fn_with_state(rpc.clone(), require_link))
        .layer(axum::middleware::map_response(crate::problem::ensure_problem))
        .layer(DefaultBodyLimit::max(RPC_BODY_BYTES_MAX))
        .with_state(rpc)
}

/// Lets a request through only when its link signature verifies for this
/// node, now, and was not seen before; signs a `200` reply back. The body
/// is read (up to [`RPC_BODY_BYTES_MAX`]) to be checked before any handler
/// decodes it.
async fn require_link(State(rpc): State<Arc<InternalRpc>>, request: Request, next: Next) -> HttpResponse {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, RPC_BODY_BYTES_MAX).await {
        Ok(body) => body,
        Err(_) => {
            return Problem::too_large(format!("node-to-node bodies are limited to {RPC_BODY_BYTES_MAX} bytes"))
                .into_response();
        }
    };
    let header = parts.headers.get(link::LINK_HEADER).and_then(|v| v.to_str().ok());
    let now_ms = rpc.clock.wall_ms();
    let verified = rpc
        .link_key
        .verify_request(header, rpc.node_id, now_ms, parts.uri.path(), &body)
        .and_then(|stamp| if rpc.replay.admit(&stamp, now_ms) { Ok(stamp) } else { Err(link::LinkError::Replayed) });
    let stamp = match verified {
        Ok(stamp) => stamp,
        Err(error) => {
            return Problem {
                detail: format!("node-to-node requests must be signed with the cluster's key: {error}"),
                ..Problem::unauthorized()
            }
            .into_response();
        }
    };
    let response = next.run(Request::from_parts(parts, axum::body::Body::from(body))).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return Problem::internal("cannot read the reply to sign it").into_response();
    };
    let signature = rpc.link_key.sign_reply(&stamp, StatusCode::OK.as_u16(), &body);
    match HeaderValue::from_str(&signature) {
        Ok(value) => {
            parts.headers.insert(link::LINK_REPLY_HEADER, value);
            HttpResponse::from_parts(parts, axum::body::Body::from(body))
        }
        Err(_) => Problem::internal("cannot sign the reply").into_response(),
    }
}

/// A peer's first call: the signed empty reply proves this node holds the
/// cluster's key.
#[utoipa::path(
    post,
    path = link::HELLO_PATH,
    tag = "internal",
    request_body(content = Vec<u8>, description = "Empty.", content_type = "application/octet-stream"),
    responses((status = 200, description = "Empty, signed (`x-hookraft-link-reply`).")),
)]
async fn hello() -> StatusCode {
    StatusCode::OK
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
