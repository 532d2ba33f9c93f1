//! The node-to-node Raft transport over HTTP, and the forwarding of client
//! writes to the leader.
//!
//! [`HttpNetwork`] is the [`RaftNetworkFactory`] of a clustered node; each
//! [`HttpPeer`] it makes `POST`s openraft's RPCs to `http://{node.addr}`
//! with the paths and bodies of [`crate::rpc`]. Snapshots use openraft's
//! default chunked `full_snapshot`: one [`rpc::SNAPSHOT_PATH`] call per chunk.
//! [`forward_command`] sends a command to the leader's [`rpc::PROPOSE_PATH`].
//!
//! Every call is signed and every `200` reply checked as [`crate::link`]
//! says: a [`LinkSender`] holds the key, and the addresses that proved
//! they hold it. The first call to an address not proven yet is a
//! [`link::HELLO_PATH`] with an empty body; a connection that failed, or a
//! reply that does not verify, makes the address unproven again.
//!
//! Every call has a deadline (openraft's `hard_ttl`, else
//! [`RPC_TIMEOUT_DEFAULT`]) and a [`CONNECT_TIMEOUT`]; reqwest is told not
//! to retry on its own nor to use proxies from the environment, so openraft
//! alone decides when to try again. Failures map to openraft's errors like
//! this:
//! - no connection (refused, unresolvable, connect timeout), a status other
//!   than 200 (401 wrong secret, 400 undecodable, 503), an undecodable,
//!   unsigned or oversized reply, a peer that did not prove it holds the
//!   secret, or a remote Raft that has stopped → `Unreachable`:
//!   openraft backs off for [`UNREACHABLE_BACKOFF`] before the next try;
//! - a connection that failed or timed out mid-exchange → `Network`;
//! - 413 on `append_entries` → `PayloadTooLarge`, so openraft sends fewer
//!   entries;
//! - a snapshot chunk out of sequence → openraft's `SnapshotMismatch`, so
//!   the sender restarts the stream.
//!
//! This module decides nothing about Raft; it only carries bytes.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookraft_core::clock::Clock;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption};
use openraft::{AnyError, BasicNode, RaftNetwork, RaftNetworkFactory};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::link::{self, LinkKey, Stamp};
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
/// Idle connections to a peer are closed after this long: before the
/// peer's own header timeout closes them (the node listener's), so a call
/// never goes out on a connection the peer is closing.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// What can go wrong setting up the transport.
#[derive(Debug, thiserror::Error)]
pub enum HttpNetworkError {
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// The sending side of [`crate::link`]: this node's key, id and run, and
/// the peers that proved they hold the key.
pub struct LinkSender {
    key: LinkKey,
    me: NodeId,
    /// Drawn at random when the node starts.
    boot: u64,
    seq: AtomicU64,
    clock: Arc<dyn Clock>,
    /// The address each node's hello reply verified from.
    proven: Mutex<HashMap<NodeId, String>>,
}

impl fmt::Debug for LinkSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinkSender").field("me", &self.me).finish_non_exhaustive()
    }
}

impl LinkSender {
    /// Node `me`'s sender for the cluster secret `secret`; `boot` must be
    /// drawn at random on each start.
    pub fn new(secret: &str, me: NodeId, boot: u64, clock: Arc<dyn Clock>) -> Self {
        Self { key: LinkKey::derive(secret), me, boot, seq: AtomicU64::new(0), clock, proven: Mutex::default() }
    }

    fn stamp(&self, to: NodeId) -> Stamp {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        Stamp { from: self.me, to, time_ms: self.clock.wall_ms(), boot: self.boot, seq }
    }

    fn is_proven(&self, to: NodeId, base: &str) -> bool {
        self.proven.lock().unwrap_or_else(|p| p.into_inner()).get(&to).is_some_and(|proven| proven == base)
    }

    fn set_proven(&self, to: NodeId, base: &str, proven: bool) {
        let mut map = self.proven.lock().unwrap_or_else(|p| p.into_inner());
        if proven {
            map.insert(to, base.to_owned());
        } else if map.get(&to).is_some_and(|was| was == base) {
            map.remove(&to);
        }
    }

    /// Whether node `to` at `base` (`scheme://host:port`) proves it holds
    /// the key: a hello, answered with a reply that verifies. Nothing
    /// listening there is tried again for up to [`PROVE_CONNECT_WAIT`] (a
    /// node still starting); any other failure answers at once.
    pub async fn prove(&self, client: &reqwest::Client, to: NodeId, base: &str) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + PROVE_CONNECT_WAIT;
        loop {
            match self.hello(client, to, base).await {
                Ok(()) => return Ok(()),
                Err(CallError::Unproven(inner))
                    if matches!(*inner, CallError::Connect(_)) && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(PROVE_RETRY_PAUSE).await;
                }
                Err(error) => return Err(error.to_string()),
            }
        }
    }

    async fn hello(&self, client: &reqwest::Client, to: NodeId, base: &str) -> Result<(), CallError> {
        let url = format!("{base}{}", link::HELLO_PATH);
        let result = exchange(client, &url, link::HELLO_PATH, Some((self, to)), Vec::new(), HELLO_TIMEOUT).await;
        let proven = result.is_ok();
        self.set_proven(to, base, proven);
        result.map(|_| ()).map_err(|error| CallError::Unproven(Box::new(error)))
    }
}

/// How long a hello may take.
const HELLO_TIMEOUT: Duration = Duration::from_secs(3);
/// How long [`LinkSender::prove`] waits for a node that does not listen yet.
pub const PROVE_CONNECT_WAIT: Duration = Duration::from_secs(10);
/// The pause between two of its tries.
const PROVE_RETRY_PAUSE: Duration = Duration::from_millis(250);

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
    /// Signs every call; `None` on a node without a shared cluster secret,
    /// whose calls every peer refuses.
    link: Option<Arc<LinkSender>>,
    /// Call peers over HTTPS.
    https: bool,
}

impl fmt::Debug for HttpNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpNetwork").field("link", &self.link).field("https", &self.https).finish_non_exhaustive()
    }
}

impl HttpNetwork {
    /// A network with its own [`rpc_client`].
    pub fn new(link: Option<Arc<LinkSender>>) -> Result<Self, HttpNetworkError> {
        Ok(Self::with_client(rpc_client()?, link))
    }

    /// A network over `client`, which should be built like [`rpc_client`].
    pub fn with_client(client: reqwest::Client, link: Option<Arc<LinkSender>>) -> Self {
        Self { client, link, https: false }
    }

    /// Calls peers over HTTPS.
    pub fn over_https(mut self) -> Self {
        self.https = true;
        self
    }

    /// The HTTP client, to share with [`forward_command`].
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

/// `http://{addr}`, or `https://{addr}` when `https`: the scheme is the
/// cluster's, never the address's (`hookraft_core::node_addr`).
pub fn peer_base(addr: &str, https: bool) -> String {
    format!("{}://{}", if https { "https" } else { "http" }, addr.trim_end_matches('/'))
}

impl RaftNetworkFactory<TypeConfig> for HttpNetwork {
    type Network = HttpPeer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> HttpPeer {
        HttpPeer {
            client: self.client.clone(),
            link: self.link.clone(),
            base: peer_base(&node.addr, self.https),
            target,
            node: node.clone(),
        }
    }
}

/// The client of one peer, made by [`HttpNetwork`].
#[derive(Clone)]
pub struct HttpPeer {
    client: reqwest::Client,
    link: Option<Arc<LinkSender>>,
    /// `scheme://host:port` of the peer.
    base: String,
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
    #[error("the reply is not signed with the cluster's key: {0}")]
    Unsigned(link::LinkError),
    #[error("the peer did not prove it holds the cluster secret ({0})")]
    Unproven(Box<CallError>),
}

impl CallError {
    fn from_reqwest(error: reqwest::Error) -> Self {
        let error = error.without_url();
        if error.is_connect() { Self::Connect(error) } else { Self::Exchange(error) }
    }
}

/// `POST`s `request` to node `to` at `base` (`scheme://host:port`) +
/// `path`, signed by `link`, and decodes the 200 reply. An address not
/// proven yet gets a hello first; a failed connection or an unsigned
/// reply makes it unproven again.
async fn call<Req: Serialize, Rep: DeserializeOwned>(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    signer: Option<(&LinkSender, NodeId)>,
    request: &Req,
    timeout: Duration,
) -> Result<Rep, CallError> {
    let body = rpc::encode("rpc request", request).map_err(CallError::Encode)?;
    let timeout = if timeout.is_zero() { RPC_TIMEOUT_DEFAULT } else { timeout };
    if let Some((link, to)) = signer
        && !link.is_proven(to, base)
    {
        link.hello(client, to, base).await?;
    }
    let url = format!("{base}{path}");
    let result = exchange(client, &url, path, signer, body, timeout).await;
    if let (Some((link, to)), Err(CallError::Connect(_) | CallError::Unsigned(_))) = (signer, &result) {
        link.set_proven(to, base, false);
    }
    rpc::decode("rpc reply", &result?).map_err(CallError::Decode)
}

/// One signed `POST` of `body`; the reply's body once its status is 200
/// and its signature verifies.
async fn exchange(
    client: &reqwest::Client,
    url: &str,
    path: &str,
    signer: Option<(&LinkSender, NodeId)>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, CallError> {
    let mut builder =
        client.post(url).timeout(timeout).header(CONTENT_TYPE, HeaderValue::from_static(rpc::BINCODE_CONTENT_TYPE));
    let stamp = signer.map(|(link, to)| (link, link.stamp(to)));
    if let Some((link, stamp)) = &stamp {
        builder = builder.header(link::LINK_HEADER, link.key.sign_request(stamp, path, &body));
    }
    let mut response = builder.body(body).send().await.map_err(CallError::from_reqwest)?;
    let status = response.status();
    if status != StatusCode::OK {
        let (excerpt, _) = read_up_to(&mut response, ERROR_EXCERPT_BYTES_MAX).await.unwrap_or_default();
        return Err(CallError::Status { status, excerpt: String::from_utf8_lossy(&excerpt).into_owned() });
    }
    let signature = response.headers().get(link::LINK_REPLY_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (bytes, complete) = read_up_to(&mut response, REPLY_BYTES_MAX).await.map_err(CallError::from_reqwest)?;
    if !complete {
        return Err(CallError::ReplyTooLarge);
    }
    if let Some((link, stamp)) = stamp {
        link.key.verify_reply(signature.as_deref(), &stamp, status.as_u16(), &bytes).map_err(CallError::Unsigned)?;
    }
    Ok(bytes)
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
        let signer = self.link.as_deref().map(|link| (link, self.target));
        call(&self.client, &self.base, path, signer, request, option.hard_ttl()).await
    }

    /// Maps a failed call to openraft's error (module docs).
    fn call_error<E: std::error::Error>(&self, path: &str, error: CallError) -> RPCError<NodeId, BasicNode, E> {
        let message = format!("{path} to node {} at {}: {error}", self.target, self.node.addr);
        match error {
            CallError::Encode(_) | CallError::Exchange(_) => network(message),
            CallError::Connect(_)
            | CallError::Status { .. }
            | CallError::ReplyTooLarge
            | CallError::Decode(_)
            | CallError::Unsigned(_)
            | CallError::Unproven(_) => unreachable(message),
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

/// Sends `command` to node `target` at `base` (`scheme://host:port`) to
/// be committed there, and returns the state machine's answer. Used by a
/// follower to hand a client write to the leader; `timeout` bounds the
/// exchange (zero means [`RPC_TIMEOUT_DEFAULT`]).
pub async fn forward_command(
    client: &reqwest::Client,
    base: &str,
    signer: Option<(&LinkSender, NodeId)>,
    command: &Command,
    timeout: Duration,
) -> Result<rpc::Committed, ForwardError> {
    let reply = call(client, base, rpc::PROPOSE_PATH, signer, command, timeout).await;
    match reply {
        Ok(ProposeReply::Applied(committed)) => Ok(committed),
        Ok(ProposeReply::NotLeader { leader: Some(leader) }) => Err(ForwardError::NotLeader { leader: Some(leader) }),
        Ok(ProposeReply::NotLeader { leader: None }) => Err(ForwardError::NoLeader),
        Ok(ProposeReply::Failed(why)) => Err(ForwardError::Rejected(why)),
        Err(error @ (CallError::Encode(_) | CallError::Status { status: StatusCode::UNAUTHORIZED, .. })) => {
            Err(ForwardError::Rejected(format!("{base}: {error}")))
        }
        Err(CallError::Unproven(inner))
            if matches!(*inner, CallError::Status { status: StatusCode::UNAUTHORIZED, .. }) =>
        {
            Err(ForwardError::Rejected(format!(
                "{base}: the node refused this node's signature (another cluster secret?): {inner}"
            )))
        }
        Err(error @ CallError::Status { status, .. }) if status.is_client_error() => {
            Err(ForwardError::Rejected(format!("{base}: {error}")))
        }
        Err(error) => Err(ForwardError::Unreachable(format!("{base}: {error}"))),
    }
}

#[cfg(test)]
mod tests;
