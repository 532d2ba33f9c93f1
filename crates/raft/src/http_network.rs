//! The node-to-node Raft transport over HTTP, and the forwarding of client
//! writes to the leader.
//!
//! [`HttpNetwork`] is the [`RaftNetworkFactory`] of a clustered node; each
//! [`HttpPeer`] it makes `POST`s openraft's RPCs to `http://{node.addr}`
//! with the paths and bodies of [`crate::rpc`]. Snapshots use openraft's
//! default chunked `full_snapshot`: one [`rpc::SNAPSHOT_PATH`] call per chunk.
//! [`forward_command`] sends a command to the leader's [`rpc::PROPOSE_PATH`].
//!
//! Every call has a deadline (openraft's `hard_ttl`, else
//! [`RPC_TIMEOUT_DEFAULT`]) and a [`CONNECT_TIMEOUT`]; reqwest is told not
//! to retry on its own nor to use proxies from the environment, so openraft
//! alone decides when to try again. Failures map to openraft's errors like
//! this:
//! - no connection (refused, unresolvable, connect timeout), a status other
//!   than 200 (401 wrong secret, 400 undecodable, 503), an undecodable or
//!   oversized reply, or a remote Raft that has stopped → `Unreachable`:
//!   openraft backs off for [`UNREACHABLE_BACKOFF`] before the next try;
//! - a connection that failed or timed out mid-exchange → `Network`;
//! - 413 on `append_entries` → `PayloadTooLarge`, so openraft sends fewer
//!   entries;
//! - a snapshot chunk out of sequence → openraft's `SnapshotMismatch`, so
//!   the sender restarts the stream.
//!
//! This module decides nothing about Raft; it only carries bytes.

use std::fmt;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption};
use openraft::{AnyError, BasicNode, RaftNetwork, RaftNetworkFactory};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::rpc::{self, AppendRequest, AppendResponse, ProposeReply, RaftReply, SnapshotRequest, SnapshotResponse};
use crate::{Command, NodeId, TypeConfig};

/// How long opening a TCP connection to a peer may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The deadline of a call whose caller gave none (a zero `hard_ttl`).
pub const RPC_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// openraft's pause before retrying a peer that was `Unreachable`.
pub const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(200);
/// The largest reply body read from a peer.
pub const REPLY_BYTES_MAX: usize = 16 * 1024 * 1024;
/// How much of a non-200 reply is kept for the error message.
const ERROR_EXCERPT_BYTES_MAX: usize = 512;
/// Idle connections to a peer are closed after this long.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What can go wrong setting up the transport.
#[derive(Debug, thiserror::Error)]
pub enum HttpNetworkError {
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("the cluster secret is not a valid HTTP header value (use visible ASCII)")]
    InvalidSecret,
}

/// Why a forwarded command did not return a [`Response`](crate::Response).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// No answer (refused, timed out, 5xx, garbled reply). After a timeout
    /// the command may still have committed.
    #[error("cannot reach the node: {0}")]
    Unreachable(String),
    /// The node is not the leader; `leader` is the leader it knows of.
    #[error("the node is not the leader (it names {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    /// The node is not the leader and knows of none: an election is running.
    #[error("the cluster has no leader right now")]
    NoLeader,
    /// The node refused the request (wrong secret, undecodable command) or,
    /// as leader, failed to commit it.
    #[error("the node refused the command: {0}")]
    Rejected(String),
}

/// Builds the HTTP client for node-to-node calls: no proxies from the
/// environment, no retries of its own, a [`CONNECT_TIMEOUT`].
pub fn rpc_client() -> Result<reqwest::Client, reqwest::Error> {
    rpc_client_trusting(Vec::new())
}

/// [`rpc_client`] that trusts only `roots` for HTTPS (the peers'
/// authority, `--tls-ca`); with none, the system's roots.
pub fn rpc_client_trusting(roots: Vec<reqwest::Certificate>) -> Result<reqwest::Client, reqwest::Error> {
    let builder =
        if roots.is_empty() { reqwest::Client::builder() } else { reqwest::Client::builder().tls_certs_only(roots) };
    builder
        .no_proxy()
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tcp_nodelay(true)
        .build()
}

/// The network factory of a clustered node. Cheap to clone: clones share
/// the connection pool.
#[derive(Clone)]
pub struct HttpNetwork {
    client: reqwest::Client,
    /// The header value sent to every peer; `None` when the cluster has no secret.
    cluster_secret: Option<HeaderValue>,
    /// Call peers whose address names no scheme over HTTPS.
    https: bool,
}

impl fmt::Debug for HttpNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = self.cluster_secret.as_ref().map(|_| "<redacted>");
        f.debug_struct("HttpNetwork").field("cluster_secret", &secret).finish_non_exhaustive()
    }
}

impl HttpNetwork {
    /// A network with its own [`rpc_client`].
    pub fn new(cluster_secret: Option<String>) -> Result<Self, HttpNetworkError> {
        Self::with_client(rpc_client()?, cluster_secret)
    }

    /// A network over `client`, which should be built like [`rpc_client`].
    pub fn with_client(client: reqwest::Client, cluster_secret: Option<String>) -> Result<Self, HttpNetworkError> {
        let cluster_secret = cluster_secret.as_deref().map(secret_header).transpose()?;
        Ok(Self { client, cluster_secret, https: false })
    }

    /// Calls peers whose address names no scheme over HTTPS.
    pub fn over_https(mut self) -> Self {
        self.https = true;
        self
    }

    /// The HTTP client, to share with [`forward_command`].
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

fn secret_header(secret: &str) -> Result<HeaderValue, HttpNetworkError> {
    let mut value = HeaderValue::from_str(secret).map_err(|_| HttpNetworkError::InvalidSecret)?;
    value.set_sensitive(true);
    Ok(value)
}

/// `http://{addr}{path}`, or `https://` when `https`; an `addr` that
/// already names a scheme is kept.
fn url(addr: &str, path: &str, https: bool) -> String {
    let addr = addr.trim_end_matches('/');
    if addr.starts_with("http://") || addr.starts_with("https://") {
        format!("{addr}{path}")
    } else {
        format!("{}://{addr}{path}", if https { "https" } else { "http" })
    }
}

/// `addr` with the scheme a peer is called with: its own, else `https://`
/// when `https`, else `http://`.
pub fn peer_base(addr: &str, https: bool) -> String {
    url(addr, "", https)
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = HttpPeer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> HttpPeer {
        HttpPeer {
            client: self.client.clone(),
            cluster_secret: self.cluster_secret.clone(),
            https: self.https,
            target,
            node: node.clone(),
        }
    }
}

/// The client of one peer, made by [`HttpNetwork`].
#[derive(Clone)]
pub struct HttpPeer {
    client: reqwest::Client,
    cluster_secret: Option<HeaderValue>,
    https: bool,
    target: NodeId,
    /// The peer's address, as in the membership config.
    node: BasicNode,
}

impl fmt::Debug for HttpPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpPeer").field("target", &self.target).field("addr", &self.node.addr).finish_non_exhaustive()
    }
}

/// Why a call got no decodable 200 reply.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("cannot encode the request: {0}")]
    Encode(crate::Error),
    #[error("cannot connect: {0}")]
    Connect(reqwest::Error),
    #[error("exchange failed: {0}")]
    Exchange(reqwest::Error),
    #[error("answered {status}: {excerpt}")]
    Status { status: StatusCode, excerpt: String },
    #[error("the reply is over {REPLY_BYTES_MAX} bytes")]
    ReplyTooLarge,
    #[error("cannot decode the reply: {0}")]
    Decode(crate::Error),
}

impl CallError {
    fn from_reqwest(error: reqwest::Error) -> Self {
        let error = error.without_url();
        if error.is_connect() { Self::Connect(error) } else { Self::Exchange(error) }
    }
}

/// `POST`s `request` to `url` and decodes the 200 reply.
async fn call<Req: Serialize, Rep: DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
    secret: Option<&HeaderValue>,
    request: &Req,
    timeout: Duration,
) -> Result<Rep, CallError> {
    let body = rpc::encode("rpc request", request).map_err(CallError::Encode)?;
    let timeout = if timeout.is_zero() { RPC_TIMEOUT_DEFAULT } else { timeout };
    let mut builder = client
        .post(url)
        .timeout(timeout)
        .header(CONTENT_TYPE, HeaderValue::from_static(rpc::BINCODE_CONTENT_TYPE))
        .body(body);
    if let Some(secret) = secret {
        builder = builder.header(rpc::CLUSTER_SECRET_HEADER, secret.clone());
    }
    let mut response = builder.send().await.map_err(CallError::from_reqwest)?;
    let status = response.status();
    if status != StatusCode::OK {
        let (excerpt, _) = read_up_to(&mut response, ERROR_EXCERPT_BYTES_MAX).await.unwrap_or_default();
        return Err(CallError::Status { status, excerpt: String::from_utf8_lossy(&excerpt).into_owned() });
    }
    let (bytes, complete) = read_up_to(&mut response, REPLY_BYTES_MAX).await.map_err(CallError::from_reqwest)?;
    if !complete {
        return Err(CallError::ReplyTooLarge);
    }
    rpc::decode("rpc reply", &bytes).map_err(CallError::Decode)
}

/// Reads at most `max` bytes of the body; `true` when that was all of it.
async fn read_up_to(response: &mut reqwest::Response, max: usize) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > max {
            body.extend_from_slice(&chunk[..max - body.len()]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

fn unreachable<E: std::error::Error>(message: String) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&AnyError::error(message)))
}

fn network<E: std::error::Error>(message: String) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&AnyError::error(message)))
}

impl HttpPeer {
    async fn call<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        path: &str,
        request: &Req,
        option: &RPCOption,
    ) -> Result<RaftReply<Rep>, CallError> {
        let url = url(&self.node.addr, path, self.https);
        call(&self.client, &url, self.cluster_secret.as_ref(), request, option.hard_ttl()).await
    }

    /// Maps a failed call to openraft's error (module docs).
    fn call_error<E: std::error::Error>(&self, path: &str, error: CallError) -> RPCError<NodeId, BasicNode, E> {
        let message = format!("{path} to node {} at {}: {error}", self.target, self.node.addr);
        match error {
            CallError::Encode(_) | CallError::Exchange(_) => network(message),
            CallError::Connect(_) | CallError::Status { .. } | CallError::ReplyTooLarge | CallError::Decode(_) => {
                unreachable(message)
            }
        }
    }

    /// Maps a reply to the RPC's result; `mismatch` rebuilds a snapshot
    /// mismatch, the one remote error openraft acts on.
    #[expect(clippy::result_large_err, reason = "openraft's own error type, which the trait methods return")]
    fn reply<T, E: std::error::Error>(
        &self,
        path: &str,
        reply: RaftReply<T>,
        mismatch: impl FnOnce(rpc::SegmentId, rpc::SegmentId) -> Option<E>,
    ) -> Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        let whom = format!("node {} at {}", self.target, self.node.addr);
        match reply {
            RaftReply::Ok(value) => Ok(value),
            RaftReply::Fatal(why) => Err(unreachable(format!("{path}: raft on {whom} has stopped: {why}"))),
            RaftReply::SnapshotMismatch { expect, got } => match mismatch(expect, got) {
                Some(error) => Err(RPCError::RemoteError(RemoteError::new_with_node(
                    self.target,
                    self.node.clone(),
                    RaftError::APIError(error),
                ))),
                None => Err(network(format!("{path}: {whom} answered a snapshot mismatch"))),
            },
        }
    }
}

impl RaftNetwork<TypeConfig> for HttpPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendRequest,
        option: RPCOption,
    ) -> Result<AppendResponse, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let entries = rpc.entries.len() as u64;
        match self.call(rpc::APPEND_PATH, &rpc, &option).await {
            Ok(reply) => self.reply(rpc::APPEND_PATH, reply, |_, _| None),
            Err(CallError::Status { status: StatusCode::PAYLOAD_TOO_LARGE, .. }) if entries > 1 => {
                Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(entries / 2)))
            }
            Err(error) => Err(self.call_error(rpc::APPEND_PATH, error)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: SnapshotRequest,
        option: RPCOption,
    ) -> Result<SnapshotResponse, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>> {
        match self.call(rpc::SNAPSHOT_PATH, &rpc, &option).await {
            Ok(reply) => self.reply(rpc::SNAPSHOT_PATH, reply, |expect, got| Some(rpc::snapshot_mismatch(expect, got))),
            Err(error) => Err(self.call_error(rpc::SNAPSHOT_PATH, error)),
        }
    }

    async fn vote(
        &mut self,
        rpc: rpc::VoteRequest,
        option: RPCOption,
    ) -> Result<rpc::VoteReply, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        // Elections are rare and their timing is what an operator needs
        // after a failover took long: every vote exchange is logged.
        let candidate = rpc.vote;
        let started = tokio::time::Instant::now();
        let result: Result<rpc::VoteReply, _> = match self.call(rpc::VOTE_PATH, &rpc, &option).await {
            Ok(reply) => self.reply(rpc::VOTE_PATH, reply, |_, _| None),
            Err(error) => Err(self.call_error(rpc::VOTE_PATH, error)),
        };
        let elapsed_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok(reply) => tracing::info!(
                target_node = self.target,
                %candidate,
                granted = reply.vote_granted,
                voter_vote = %reply.vote,
                elapsed_ms,
                "vote requested"
            ),
            Err(error) => {
                tracing::info!(target_node = self.target, %candidate, %error, elapsed_ms, "vote request failed")
            }
        }
        result
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF))
    }
}

/// Sends `command` to the node at `addr` (`host:port`) to be committed
/// there, and returns the state machine's answer. Used by a follower to
/// hand a client write to the leader; `timeout` bounds the whole exchange
/// (zero means [`RPC_TIMEOUT_DEFAULT`]).
pub async fn forward_command(
    client: &reqwest::Client,
    addr: &str,
    secret: Option<&str>,
    command: &Command,
    timeout: Duration,
) -> Result<rpc::Committed, ForwardError> {
    let secret = secret.map(secret_header).transpose().map_err(|e| ForwardError::Rejected(e.to_string()))?;
    let reply = call(client, &url(addr, rpc::PROPOSE_PATH, false), secret.as_ref(), command, timeout).await;
    match reply {
        Ok(ProposeReply::Applied(committed)) => Ok(committed),
        Ok(ProposeReply::NotLeader { leader: Some(leader) }) => Err(ForwardError::NotLeader { leader: Some(leader) }),
        Ok(ProposeReply::NotLeader { leader: None }) => Err(ForwardError::NoLeader),
        Ok(ProposeReply::Failed(why)) => Err(ForwardError::Rejected(why)),
        Err(error @ (CallError::Encode(_) | CallError::Status { status: StatusCode::UNAUTHORIZED, .. })) => {
            Err(ForwardError::Rejected(format!("{addr}: {error}")))
        }
        Err(error @ CallError::Status { status, .. }) if status.is_client_error() => {
            Err(ForwardError::Rejected(format!("{addr}: {error}")))
        }
        Err(error) => Err(ForwardError::Unreachable(format!("{addr}: {error}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Vote;

    /// An address nothing listens on: bind a port, then free it.
    async fn closed_addr() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        drop(listener);
        addr.to_string()
    }

    #[test]
    fn url_adds_http_unless_a_scheme_is_given() {
        assert_eq!(url("10.0.0.1:7000", rpc::VOTE_PATH, false), "http://10.0.0.1:7000/internal/raft/vote");
        assert_eq!(url("10.0.0.1:7000", rpc::VOTE_PATH, true), "https://10.0.0.1:7000/internal/raft/vote");
        assert_eq!(url("https://n1:7000/", rpc::VOTE_PATH, false), "https://n1:7000/internal/raft/vote");
        assert_eq!(url("http://n1:7000", rpc::VOTE_PATH, true), "http://n1:7000/internal/raft/vote");
        assert_eq!(peer_base("n1:7000", true), "https://n1:7000");
    }

    #[test]
    fn debug_output_redacts_the_secret() {
        let network = HttpNetwork::new(Some("hunter2".into())).expect("builds");
        let text = format!("{network:?}");
        assert!(!text.contains("hunter2") && text.contains("redacted"), "{text}");
    }

    #[test]
    fn a_secret_that_is_no_header_value_is_refused() {
        let err = HttpNetwork::new(Some("two\nlines".into())).expect_err("newline refused");
        assert!(matches!(err, HttpNetworkError::InvalidSecret), "{err:?}");
    }

    #[tokio::test]
    async fn vote_to_a_closed_port_is_unreachable() {
        let mut network = HttpNetwork::new(Some("s".into())).expect("builds");
        let mut peer = network.new_client(2, &BasicNode::new(closed_addr().await)).await;
        let rpc = rpc::VoteRequest { vote: Vote::new(1, 1), last_log_id: None };
        let err = peer.vote(rpc, RPCOption::new(Duration::from_secs(2))).await.expect_err("nobody listens");
        assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
        assert!(err.to_string().contains("node 2"), "{err}");
    }

    #[tokio::test]
    async fn forward_to_a_closed_port_is_unreachable() {
        let client = rpc_client().expect("builds");
        let command = Command::Noop;
        let err = forward_command(&client, &closed_addr().await, None, &command, Duration::from_secs(2))
            .await
            .expect_err("nobody listens");
        assert!(matches!(err, ForwardError::Unreachable(_)), "{err:?}");
    }
}
