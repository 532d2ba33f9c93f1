//! The seam through which webhooks leave the node.
//!
//! [`Transport`] sends one signed request and reports what happened. The
//! production implementation is [`crate::http::HttpTransport`] (reqwest, no
//! redirects, per-request timeout, SSRF guard); the simulator plugs in
//! scripted receivers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::ssrf::{TargetError, parse_target_url};

/// One webhook request, fully prepared (signed) by the endpoint actor.
#[derive(Debug, Clone)]
pub struct WebhookRequest {
    pub url: Target,
    /// Header names in lowercase, fixed by the sender (static, so sending
    /// allocates nothing for them).
    pub headers: Vec<(&'static str, String)>,
    pub body: bytes_body::Body,
    /// The whole attempt (connect, send, read the answer) must fit in it.
    pub timeout: Duration,
    /// Who sends it, under which grant: not sent on the wire; for logs and
    /// the simulator's one-sender-per-lease checker.
    pub origin: SendOrigin,
}

/// Where an attempt goes: the endpoint's URL as registered, parsed once
/// when the endpoint actor loads its settings rather than on every attempt.
/// Shared: a clone is a reference count.
#[derive(Debug, Clone)]
pub struct Target(Arc<ParsedTarget>);

#[derive(Debug)]
struct ParsedTarget {
    text: Box<str>,
    /// Why the text does not parse, when it does not; the transport then
    /// reports the attempt as `invalid_url` (the API refuses such URLs up
    /// front).
    parsed: Result<reqwest::Url, TargetError>,
}

impl Target {
    pub fn new(text: &str) -> Self {
        Self(Arc::new(ParsedTarget { text: text.into(), parsed: parse_target_url(text) }))
    }

    /// The URL as registered.
    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    /// The URL parsed, or why it does not parse.
    pub fn parsed(&self) -> Result<&reqwest::Url, &TargetError> {
        self.0.parsed.as_ref()
    }
}

impl From<String> for Target {
    fn from(text: String) -> Self {
        Self::new(&text)
    }
}

/// The node, shard and fencing token an attempt is sent under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendOrigin {
    pub node_id: u64,
    pub shard: u16,
    pub token: u64,
    /// The sender's wall time at the start of the attempt, as on the timeline.
    pub started_at_ms: u64,
}

/// Shared request bodies: one event's payload is sent to many endpoints.
pub mod bytes_body {
    /// The JSON payload (opened, when it was stored sealed), shared between
    /// the attempts that send it.
    pub type Body = std::sync::Arc<[u8]>;
}

/// What the endpoint answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResponse {
    pub status: u16,
    /// The raw `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// The first KiB of the body (lossy UTF-8), cut at a character boundary.
    pub body_excerpt: String,
}

/// Why no answer came back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("timeout")]
    Timeout,
    #[error("connect: {0}")]
    Connect(String),
    /// The target resolved to an address the SSRF guard forbids.
    #[error("refused target: {0}")]
    RefusedTarget(String),
    #[error("invalid url: {0}")]
    InvalidUrl(String),
    #[error("{0}")]
    Other(String),
    /// Nothing was sent: the payload could not be opened (its key is not in
    /// this node's keyring, or it failed authentication).
    #[error("payload: {0}")]
    PayloadUnavailable(String),
}

impl SendError {
    /// A short, stable kind for the timeline (`timeout`, `connect`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            SendError::Timeout => "timeout",
            SendError::Connect(_) => "connect",
            SendError::RefusedTarget(_) => "refused_target",
            SendError::InvalidUrl(_) => "invalid_url",
            SendError::Other(_) => "other",
            SendError::PayloadUnavailable(_) => "payload",
        }
    }
}

/// A boxed future, so `Transport` stays object-safe.
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<WebhookResponse, SendError>> + Send + 'a>>;

/// Sends webhook requests. Implementations must honour `timeout` themselves.
pub trait Transport: Send + Sync + 'static {
    fn send(&self, request: WebhookRequest) -> SendFuture<'_>;
}
