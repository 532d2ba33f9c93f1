//! `POST /in/{source_id}`: the public ingress of provider webhooks.
//!
//! No API token: the provider's signature authenticates the request. In
//! this order, and nothing more before answering: the source must exist
//! and be enabled (404, 403), the caller's address must be in its
//! allowlist (403) and must not have spent its failed signatures (429),
//! all before the body is read; then the signature must hold (401, which
//! takes one of the address's failures); then the request takes a token of
//! the source's rate limit (429 with `Retry-After`): only signed requests
//! do, so a flood of unsigned ones cannot make the provider's own see 429.
//! The provider's event id, type, entity key and version are read (400
//! when the id is missing); a repeat of a committed event answers 200 and
//! creates nothing; otherwise the event is committed through the log and
//! answered 200. Nothing is stored for a refused request.
//!
//! What makes a repeat depends on what the scheme signs
//! ([`dedupe_key`]): schemes with a signed timestamp (Standard Webhooks,
//! Stripe) refuse old requests and key on the provider's event id, which
//! they sign; schemes without one (GitHub, plain HMAC) key on a digest of
//! the signed body, which nobody can vary without the secret, so a
//! captured request sent again with another delivery id header is a repeat.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hookraft_core::command::{IngestResult, NewEvent};
use hookraft_core::ids::{EventId, SourceId};
use hookraft_core::inbound::{Inbound, Locator, PROVIDER_TEXT_BYTES_MAX, Source, Version, verify};
use hookraft_core::ratelimit::TokenBucket;
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::parse_id;
use crate::context::ApiContext;
use crate::extract::read_body;
use crate::openapi::problems::{BadRequest, BadSignature, Forbidden, IngestUnavailable, NotFound, RateLimited};
use crate::problem::{ApiResult, Problem};
use crate::validate;
use crate::views::sources::{InboundAccepted, InboundDuplicate};

/// The address a request's connection came from: the node's server puts
/// it in each request's extensions, for sources' allowlists. A request
/// without it (served in process) passes no allowlist.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub SocketAddr);

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new().routes(routes!(receive))
}

/// The event type of an inbound event whose source says nowhere, or whose
/// provider sent none.
pub const UNTYPED_EVENT_TYPE: &str = "inbound";

/// Failed signatures one address may send a second, in bursts of
/// [`FAILURES_BURST`], before its requests are refused unread (429).
pub const FAILURES_PER_S: u32 = 5;
pub const FAILURES_BURST: u32 = 20;
/// Addresses whose failed signatures are counted at once; past it, the
/// recovered ones are forgotten first, then all.
pub const FAILURE_ADDRESSES_MAX: usize = 4_096;

/// Each source's rate limit on this node (a token bucket per source that
/// has one, at most one per source of the state: sources are bounded), and
/// each address's failed signatures (a bucket per address, at most
/// [`FAILURE_ADDRESSES_MAX`]).
#[derive(Default)]
pub struct InboundGate {
    buckets: Mutex<HashMap<SourceId, TokenBucket>>,
    failures: Mutex<HashMap<Option<IpAddr>, TokenBucket>>,
}

impl InboundGate {
    /// Whether `peer` may still send a request whose signature could fail;
    /// `Err` holds the seconds until it may.
    fn failures_left(&self, peer: Option<IpAddr>, now_ms: u64) -> Result<(), u32> {
        let failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match failures.get(&peer) {
            Some(bucket) if bucket.available(now_ms) == 0 => Err(1),
            _ => Ok(()),
        }
    }

    /// Counts a failed signature from `peer`.
    fn failed(&self, peer: Option<IpAddr>, now_ms: u64) {
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if failures.len() >= FAILURE_ADDRESSES_MAX && !failures.contains_key(&peer) {
            failures.retain(|_, bucket| bucket.available(now_ms) < bucket.burst());
            if failures.len() >= FAILURE_ADDRESSES_MAX {
                failures.clear();
            }
        }
        let bucket = failures.entry(peer).or_insert_with(|| TokenBucket::new(FAILURES_PER_S, FAILURES_BURST, now_ms));
        let _ = bucket.try_take(now_ms);
    }

    /// Takes a token of `source`'s limit, or says in how many seconds one
    /// is due. A changed limit starts a fresh bucket.
    fn admit(&self, source: &Source, now_ms: u64) -> Result<(), u32> {
        let Some(rate) = source.rate_limit_per_s else { return Ok(()) };
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() > hookraft_core::inbound::SOURCES_MAX {
            // Deleted sources' buckets: start over rather than grow.
            buckets.clear();
        }
        let bucket = buckets.entry(source.id).or_insert_with(|| TokenBucket::new(rate, rate, now_ms));
        if bucket.rate_per_s() != rate {
            *bucket = TokenBucket::new(rate, rate, now_ms);
        }
        bucket.try_take(now_ms).map_err(|wait_ms| wait_ms.div_ceil(1_000).clamp(1, u64::from(u32::MAX)) as u32)
    }
}

/// A provider's webhook, to a source's ingress.
///
/// No API token: the provider's signature, by the source's scheme, is the
/// credential. Checked in this order, and nothing is stored for a refused
/// request: the source exists (404) and is enabled (403), the caller is in
/// its allowlist (403) and within its rate limit (429), the body fits and
/// is sent as JSON (413, 415), the signature holds (401), the body has a
/// provider event id (400). A repeat of a committed provider event id
/// answers 200 and creates nothing.
#[utoipa::path(
    post,
    path = "/in/{source_id}",
    tag = "inbound",
    params(("source_id" = crate::views::SourceIdText, Path)),
    request_body(content = Value, description = "The provider's JSON, signed by its scheme; kept as received.",
        content_type = "application/json"),
    responses(
        (status = 200, description = "Committed as a new event, or a repeat of one (`duplicate`).",
            body = AcceptedOrDuplicate),
        (status = 400, response = BadRequest),
        (status = 401, response = BadSignature),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        (status = 429, response = RateLimited),
        (status = 503, response = IngestUnavailable),
    )
)]
async fn receive(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>, request: Request) -> Response {
    let result = receive_inner(&ctx, &id, request).await;
    let m = &ctx.metrics;
    match result {
        Ok(answer) => answer.into_response(),
        Err(problem) => {
            let counter = match problem.status {
                StatusCode::UNAUTHORIZED => &m.inbound_bad_signature_total,
                StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS => &m.inbound_refused_total,
                _ => &m.inbound_rejected_total,
            };
            counter.inc();
            problem.into_response()
        }
    }
}

async fn receive_inner(
    ctx: &ApiContext,
    id: &str,
    request: Request,
) -> ApiResult<(StatusCode, axum::Json<AcceptedOrDuplicate>)> {
    let id: SourceId = parse_id(id)?;
    let source = ctx.state.read().inbound.sources.get(&id).cloned();
    let source = source.ok_or_else(|| Problem::not_found(format!("no source {id}")))?;
    if source.disabled {
        return Err(Problem::forbidden(format!("source {id} is disabled")));
    }
    let peer = request.extensions().get::<PeerAddr>().map(|peer| peer.0.ip());
    check_allowlist(&source, peer)?;
    let now_ms = ctx.clock.wall_ms();
    ctx.inbound.failures_left(peer, now_ms).map_err(|wait_s| {
        let who = peer.map_or_else(|| "this caller".to_string(), |ip| ip.to_string());
        Problem::rate_limited(format!("too many requests with failed signatures from {who}"), wait_s)
    })?;

    let headers = request.headers().clone();
    let body = read_body(request, &(), true).await?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let keys = &ctx.payloads;
    let secrets = keys.counted(source.verifying_secrets(keys.keyring(), now_ms), false).map_err(|error| {
        // The provider is not to blame: it may send again once the key is back.
        Problem::unavailable(format!("source {id}'s secret cannot be opened on this node: {error}"))
    })?;
    let secrets: Vec<_> = secrets.iter().collect();
    if let Err(error) = verify::verify(&source.scheme, &secrets, header, &body, now_ms / 1_000) {
        ctx.inbound.failed(peer, now_ms);
        return Err(Problem::bad_signature(format!("{} signature refused: {error}", source.scheme.name())));
    }
    ctx.inbound
        .admit(&source, now_ms)
        .map_err(|wait_s| Problem::rate_limited(format!("source {id} is over its rate limit"), wait_s))?;

    let json: Value = serde_json::from_slice(&body)
        .map_err(|e| Problem::malformed(format!("the body is not JSON ({e}); sources accept JSON bodies")))?;
    let provider_event_id = provider_event_id(&source, &headers, &json)?;
    let key = dedupe_key(&source, &provider_event_id, &body);
    #[cfg(feature = "break")]
    let key = if hookraft_core::breaks::inbound_dedupe() {
        // Deliberately wrong (simulator's `--break inbound-dedupe`): a key
        // of this request alone, so a repeat is not recognised.
        format!("{key}/{}", ctx.with_rng(|rng| rand::Rng::next_u64(rng)))
    } else {
        key
    };
    if let Some(existing) = ctx.state.read().idempotency.get(key.as_str()).copied() {
        return Ok(duplicate(ctx, existing));
    }
    let event = new_event(ctx, &source, &headers, &json, &body, provider_event_id, key)?;
    let _room = super::events::admit(ctx, std::slice::from_ref(&event))?;
    match ctx.ingest.submit(event).await? {
        IngestResult::Created { event_id, deliveries } => {
            ctx.metrics.inbound_accepted_total.inc();
            let accepted = InboundAccepted { event_id, deliveries: deliveries.len() };
            Ok((StatusCode::OK, axum::Json(AcceptedOrDuplicate::Accepted(accepted))))
        }
        IngestResult::Duplicate { event_id } => Ok(duplicate(ctx, event_id)),
        IngestResult::UnknownEndpoint { endpoint_id } => {
            Err(Problem::internal(format!("an inbound event named endpoint {endpoint_id}")))
        }
    }
}

/// What makes two requests one event: the provider's event id where the
/// scheme signs it with a timestamp (Standard Webhooks, Stripe), else a
/// digest of the signed body (GitHub, plain HMAC), which a replayer cannot
/// vary without the secret.
fn dedupe_key(source: &Source, provider_event_id: &str, body: &[u8]) -> String {
    if source.scheme.signs_time() {
        Inbound::idempotency_key(&source.id, provider_event_id)
    } else {
        Inbound::body_key(&source.id, body)
    }
}

/// The answer to a provider's request.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
enum AcceptedOrDuplicate {
    Accepted(InboundAccepted),
    Duplicate(InboundDuplicate),
}

fn duplicate(ctx: &ApiContext, event_id: EventId) -> (StatusCode, axum::Json<AcceptedOrDuplicate>) {
    ctx.metrics.inbound_duplicates_total.inc();
    (StatusCode::OK, axum::Json(AcceptedOrDuplicate::Duplicate(InboundDuplicate { event_id, duplicate: true })))
}

/// An empty allowlist lets everyone in; otherwise the caller's address must
/// be in it, and a caller whose address is unknown is not.
fn check_allowlist(source: &Source, peer: Option<IpAddr>) -> ApiResult<()> {
    if source.allow_cidrs.is_empty() || peer.is_some_and(|ip| source.allow_cidrs.iter().any(|c| c.contains(ip))) {
        return Ok(());
    }
    let who = peer.map_or_else(|| "an unknown address".to_string(), |ip| ip.to_string());
    Err(Problem::forbidden(format!("{who} is not in the source's allowlist")))
}

/// What a locator finds, as text: a header's value, or a JSON string or
/// number at a pointer.
fn locate(locator: &Locator, headers: &HeaderMap, json: &Value) -> Option<String> {
    match locator {
        Locator::Header(name) => headers.get(name.as_str()).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_string()),
        Locator::Pointer(pointer) => match json.pointer(pointer)? {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        },
    }
}

/// Printable ASCII of 1 to [`PROVIDER_TEXT_BYTES_MAX`] bytes.
fn usable(text: &str) -> bool {
    !text.is_empty() && text.len() <= PROVIDER_TEXT_BYTES_MAX && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
}

fn provider_event_id(source: &Source, headers: &HeaderMap, json: &Value) -> ApiResult<String> {
    let found = locate(&source.event_id, headers, json).filter(|id| usable(id));
    found.ok_or_else(|| {
        let place = match &source.event_id {
            Locator::Header(name) => format!("header {name}"),
            Locator::Pointer(pointer) => format!("JSON pointer {pointer}"),
        };
        Problem::malformed(format!(
            "no provider event id at {place} (1 to {PROVIDER_TEXT_BYTES_MAX} printable ASCII characters)"
        ))
    })
}

/// A version at `pointer`: a JSON integer, or text.
fn version_at(pointer: &str, json: &Value) -> Option<Version> {
    match json.pointer(pointer)? {
        Value::Number(n) => n.as_i64().map(Version::Number),
        Value::String(text) if usable(text) => Some(Version::Text(text.as_str().into())),
        _ => None,
    }
}

/// The event the request becomes, its payload sealed here like a
/// producer's. An entity key or version that cannot be read leaves the
/// event outside the stale guard (and its key's order); its type falls
/// back to [`UNTYPED_EVENT_TYPE`].
fn new_event(
    ctx: &ApiContext,
    source: &Source,
    headers: &HeaderMap,
    json: &Value,
    body: &[u8],
    provider_event_id: String,
    key: String,
) -> ApiResult<NewEvent> {
    let event_type = source
        .event_type_locator()
        .and_then(|locator| locate(&locator, headers, json))
        .filter(|t| validate::event_type(t).is_ok())
        .unwrap_or_else(|| UNTYPED_EVENT_TYPE.to_string());
    let entity_key = source.entity_key.as_deref().and_then(|p| locate(&Locator::Pointer(p.into()), headers, json));
    let entity_key = entity_key.filter(|k| usable(k));
    let version = source.version.as_deref().and_then(|p| version_at(p, json));
    let now_ms = ctx.clock.wall_ms();
    let id = ctx.with_rng(|rng| EventId::generate(now_ms, rng));
    let text = std::str::from_utf8(body).map_err(|_| Problem::malformed("the body is not UTF-8"))?;
    let payload = ctx.payloads.seal(&id, &event_type, text);
    let inbound = Inbound {
        source_id: source.id,
        provider_event_id: provider_event_id.into(),
        entity_key: entity_key.as_deref().map(Box::from),
        version,
    };
    Ok(NewEvent {
        id,
        event_type,
        payload,
        idempotency_key: Some(key),
        endpoint_ids: None,
        ordering_key: ordering_key(source, entity_key.as_deref()),
        inbound: Some(Box::new(inbound)),
    })
}

/// The ordering key of a source's entity key: `{source_id}:{entity_key}`,
/// so that two sources whose entity keys overlap are never one key's order
/// (nor one receiver's). `None` past the ordering keys' bound (the event
/// then goes unordered).
fn ordering_key(source: &Source, entity_key: Option<&str>) -> Option<String> {
    let key = format!("{}:{}", source.id, entity_key?);
    (key.len() <= super::events::IDEMPOTENCY_KEY_BYTES_MAX).then_some(key)
}
