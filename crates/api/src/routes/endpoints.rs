//! `/v1/endpoints`: register, list, read, change, delete, rotate secrets,
//! bulk replay.

use std::sync::Arc;

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hookraft_core::clock::parse_rfc3339_ms;
use hookraft_core::command::{Command, EndpointPatch, ReplayTarget, Response};
use hookraft_core::ids::{DeliveryId, EndpointId, IdParseError, SourceId};
use hookraft_core::model::{
    DISABLE_AFTER_S_DEFAULT, DISABLE_AFTER_S_MAX, Endpoint, MAX_IN_FLIGHT_DEFAULT, Ordering, TIMEOUT_MS_DEFAULT,
};
use hookraft_core::ordering::OnDead;
use hookraft_core::payload::SecretOwner;
use hookraft_core::signing::Secret;
use hookraft_core::state::{ENDPOINT_SOURCES_MAX, REPLAY_BATCH_MAX};
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{commit, parse_id};
use crate::auth::{Caller, may_see_secrets};
use crate::context::ApiContext;
use crate::extract::{JsonBody, OptionalJsonBody};
use crate::openapi::problems::{BadRequest, Conflict, InvalidField, NotFound, Unavailable};
use crate::problem::{ApiResult, Problem};
use crate::validate::{self, RetryInput, double_option};
use crate::views::{self, endpoints as view};

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(read, update, remove))
        .routes(routes!(rotate_secret))
        .routes(routes!(replay_dead))
        .routes(routes!(blocked_keys))
        .routes(routes!(skip_blocked))
}

/// An endpoint to register.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateEndpoint {
    /// Where deliveries go: http(s), and not a private address unless the node allows it.
    #[schema(format = "uri", example = "https://example.com/hook")]
    url: String,
    /// `whsec_<base64>` of a 24 to 64 byte key; generated when absent.
    #[schema(pattern = "^whsec_[A-Za-z0-9+/]{32,86}={0,2}$")]
    secret: Option<String>,
    #[schema(max_length = 1024)]
    description: Option<String>,
    /// The event types it receives; absent or `null`: every type.
    #[schema(max_items = 256)]
    event_types: Option<Vec<String>>,
    /// Default 10.
    #[schema(minimum = 1, maximum = 1000)]
    max_in_flight: Option<u32>,
    /// Absent or `null`: unlimited.
    #[schema(minimum = 1, maximum = 100000)]
    rate_limit_per_s: Option<u32>,
    /// Default 15000.
    #[schema(minimum = 100, maximum = 30000)]
    timeout_ms: Option<u32>,
    #[serde(default, deserialize_with = "crate::extract::optional_object")]
    retry: Option<RetryInput>,
    /// `none` (default) or `per_key`.
    #[schema(value_type = Option<view::OrderingView>)]
    ordering: Option<String>,
    /// Only with `per_key`: `block` (default) or `skip`.
    #[schema(value_type = Option<view::OnDeadView>)]
    on_dead: Option<String>,
    /// Source ids (or `hookraft` for operational events) whose events it receives instead of the producers'.
    #[schema(max_items = 16)]
    sources: Option<Vec<String>>,
    /// Disable after every attempt failed this long; 0 never. Default 432000 (5 days).
    #[schema(maximum = 7776000)]
    disable_after_s: Option<u64>,
}

/// `disable_after_s`: 0 (never) to [`DISABLE_AFTER_S_MAX`].
fn disable_after(seconds: u64) -> ApiResult<u64> {
    if seconds > DISABLE_AFTER_S_MAX {
        return Err(Problem::invalid(format!(
            "disable_after_s may be at most {DISABLE_AFTER_S_MAX} (0 never disables)"
        )));
    }
    Ok(seconds)
}

/// What `sources` calls hookraft's own operational events.
pub const OPERATIONAL_SOURCE_NAME: &str = "hookraft";

/// The sources an endpoint is to receive from: known ids (or `hookraft`),
/// each once, at most [`ENDPOINT_SOURCES_MAX`].
fn sources_of(ctx: &ApiContext, ids: &[String]) -> ApiResult<Vec<SourceId>> {
    if ids.len() > ENDPOINT_SOURCES_MAX {
        return Err(Problem::invalid(format!("sources may list at most {ENDPOINT_SOURCES_MAX} sources")));
    }
    let mut sources = Vec::with_capacity(ids.len());
    let state = ctx.state.read();
    for id in ids {
        if id == OPERATIONAL_SOURCE_NAME {
            sources.push(SourceId::OPERATIONAL);
            continue;
        }
        let id: SourceId = id.parse().map_err(|e: IdParseError| Problem::invalid(format!("sources: {e}")))?;
        if !state.inbound.sources.contains_key(&id) {
            return Err(Problem::invalid(format!("sources: no source {id}")));
        }
        sources.push(id);
    }
    sources.sort();
    sources.dedup();
    Ok(sources)
}

/// `ordering` (`none` or `per_key`) and `on_dead` (`block` or `skip`,
/// only with `per_key`) as the endpoint's [`Ordering`]; what is not given
/// stays as in `current`.
fn ordering_of(ordering: Option<&str>, on_dead: Option<&str>, current: Ordering) -> ApiResult<Ordering> {
    let per_key = match ordering {
        None => current != Ordering::None,
        Some("none") => false,
        Some("per_key") => true,
        Some(other) => {
            return Err(Problem::invalid(format!("ordering must be \"none\" or \"per_key\", not {other:?}")));
        }
    };
    let on_dead = match on_dead {
        None => current.on_dead().unwrap_or_default(),
        Some(_) if !per_key => {
            return Err(Problem::invalid("on_dead applies only to an endpoint with \"ordering\": \"per_key\""));
        }
        Some("block") => OnDead::Block,
        Some("skip") => OnDead::Skip,
        Some(other) => return Err(Problem::invalid(format!("on_dead must be \"block\" or \"skip\", not {other:?}"))),
    };
    Ok(if per_key { Ordering::PerKey { on_dead } } else { Ordering::None })
}

/// Register an endpoint.
#[utoipa::path(
    post,
    path = "/v1/endpoints",
    tag = "endpoints",
    request_body = CreateEndpoint,
    responses(
        (status = 201, description = "The endpoint, with its secret.", body = view::EndpointView),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn create(
    State(ctx): State<Arc<ApiContext>>,
    JsonBody(body): JsonBody<CreateEndpoint>,
) -> ApiResult<impl IntoResponse> {
    let url = validate::url(&body.url, ctx.allow_private_targets)?;
    if let Some(types) = &body.event_types {
        validate::event_types(types)?;
    }
    if let Some(d) = &body.description {
        validate::description(d)?;
    }
    let secret = match &body.secret {
        Some(text) => Secret::parse(text).map_err(|e| Problem::invalid(format!("secret: {e}")))?,
        None => ctx.with_rng(|rng| Secret::generate(rng)),
    };
    let now_ms = ctx.clock.wall_ms();
    let id = ctx.with_rng(|rng| EndpointId::generate(now_ms, rng));
    let secret = ctx.payloads.store_secret(SecretOwner::Endpoint(&id.as_str()), secret.key_bytes());
    let endpoint = Endpoint {
        description: body.description,
        event_types: body.event_types,
        max_in_flight: validate::max_in_flight(body.max_in_flight.unwrap_or(MAX_IN_FLIGHT_DEFAULT))?,
        rate_limit_per_s: body.rate_limit_per_s.map(validate::rate_limit).transpose()?,
        timeout_ms: validate::timeout_ms(body.timeout_ms.unwrap_or(TIMEOUT_MS_DEFAULT))?,
        retry: body.retry.unwrap_or_default().into_policy()?,
        ordering: ordering_of(body.ordering.as_deref(), body.on_dead.as_deref(), Ordering::None)?,
        sources: sources_of(&ctx, body.sources.as_deref().unwrap_or_default())?,
        disable_after_s: disable_after(body.disable_after_s.unwrap_or(DISABLE_AFTER_S_DEFAULT))?,
        ..Endpoint::new(id, url, secret, now_ms)
    };
    commit(&ctx, Command::RegisterEndpoint { endpoint: Box::new(endpoint) }).await?;
    Ok((StatusCode::CREATED, axum::Json(endpoint_view(&ctx, &id, true)?)))
}

fn endpoint_view(ctx: &ApiContext, id: &EndpointId, shown: bool) -> ApiResult<view::EndpointView> {
    let state = ctx.state.read();
    let endpoint = state.endpoints.get(id).ok_or_else(|| Problem::not_found(format!("no endpoint {id}")))?;
    Ok(view_for(ctx, endpoint, shown))
}

/// `e` with its current secret, opened, when the caller may see secrets
/// (`shown`) and this node can open it (else a key its keyring lacks,
/// which `/readyz` names).
fn view_for(ctx: &ApiContext, e: &Endpoint, shown: bool) -> view::EndpointView {
    let keys = &ctx.payloads;
    let secret = shown.then(|| keys.counted(e.current_secret(keys.keyring()), false).ok()).flatten();
    let secret = secret.map(|secret| secret.to_whsec());
    views::endpoint(e, secret)
}

/// List every endpoint.
#[utoipa::path(get, path = "/v1/endpoints", tag = "endpoints", responses((status = 200, body = view::EndpointList)))]
async fn list(State(ctx): State<Arc<ApiContext>>, caller: Option<Extension<Caller>>) -> axum::Json<view::EndpointList> {
    let shown = may_see_secrets(caller.as_deref());
    let state = ctx.state.read();
    let data = state.endpoints.values().map(|e| view_for(&ctx, e, shown)).collect();
    axum::Json(view::EndpointList { data })
}

/// Read an endpoint.
#[utoipa::path(
    get,
    path = "/v1/endpoints/{id}",
    tag = "endpoints",
    params(EndpointPath),
    responses((status = 200, body = view::EndpointView), (status = 404, response = NotFound))
)]
async fn read(
    State(ctx): State<Arc<ApiContext>>,
    caller: Option<Extension<Caller>>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<view::EndpointView>> {
    let id: EndpointId = parse_id(&id)?;
    let shown = may_see_secrets(caller.as_deref());
    endpoint_view(&ctx, &id, shown).map(axum::Json)
}

/// Changes to an endpoint: any field of `CreateEndpoint` but `secret`,
/// and `disabled`; `null` clears `description`, `event_types` and
/// `rate_limit_per_s`; `retry` replaces the policy.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PatchEndpoint {
    #[schema(format = "uri")]
    url: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(max_length = 1024)]
    description: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(max_items = 256)]
    event_types: Option<Option<Vec<String>>>,
    #[schema(minimum = 1, maximum = 1000)]
    max_in_flight: Option<u32>,
    #[serde(default, deserialize_with = "double_option")]
    #[schema(minimum = 1, maximum = 100000)]
    rate_limit_per_s: Option<Option<u32>>,
    #[schema(minimum = 100, maximum = 30000)]
    timeout_ms: Option<u32>,
    #[serde(default, deserialize_with = "crate::extract::optional_object")]
    retry: Option<RetryInput>,
    /// `false` enables it again (its failing time starts over).
    disabled: Option<bool>,
    #[schema(value_type = Option<view::OrderingView>)]
    ordering: Option<String>,
    #[schema(value_type = Option<view::OnDeadView>)]
    on_dead: Option<String>,
    #[schema(max_items = 16)]
    sources: Option<Vec<String>>,
    #[schema(maximum = 7776000)]
    disable_after_s: Option<u64>,
}

/// Change an endpoint.
#[utoipa::path(
    patch,
    path = "/v1/endpoints/{id}",
    tag = "endpoints",
    params(EndpointPath),
    request_body = PatchEndpoint,
    responses(
        (status = 200, description = "The endpoint as changed.", body = view::EndpointView),
        (status = 404, response = NotFound),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn update(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PatchEndpoint>,
) -> ApiResult<axum::Json<view::EndpointView>> {
    let id: EndpointId = parse_id(&id)?;
    let current = ctx.state.read().endpoints.get(&id).map(|e| e.ordering);
    let Some(current) = current else { return Err(Problem::not_found(format!("no endpoint {id}"))) }; // 404 before validating
    let ordering = ordering_of(body.ordering.as_deref(), body.on_dead.as_deref(), current)?;
    if let Some(Some(types)) = &body.event_types {
        validate::event_types(types)?;
    }
    if let Some(Some(d)) = &body.description {
        validate::description(d)?;
    }
    let patch = EndpointPatch {
        url: body.url.as_deref().map(|u| validate::url(u, ctx.allow_private_targets)).transpose()?,
        description: body.description,
        event_types: body.event_types,
        max_in_flight: body.max_in_flight.map(validate::max_in_flight).transpose()?,
        rate_limit_per_s: body.rate_limit_per_s.map(|r| r.map(validate::rate_limit).transpose()).transpose()?,
        timeout_ms: body.timeout_ms.map(validate::timeout_ms).transpose()?,
        retry: body.retry.map(RetryInput::into_policy).transpose()?,
        disabled: body.disabled,
    };
    let sources = body.sources.as_deref().map(|ids| sources_of(&ctx, ids)).transpose()?;
    let disable_after_s = body.disable_after_s.map(disable_after).transpose()?;
    let now_ms = ctx.clock.wall_ms();
    let mut commands = vec![Command::UpdateEndpoint { id, patch, now_ms }];
    if ordering != current {
        commands.push(Command::SetOrdering { id, ordering, now_ms });
    }
    if let Some(sources) = sources {
        commands.push(Command::SetEndpointSources { id, sources, now_ms });
    }
    if let Some(disable_after_s) = disable_after_s {
        commands.push(Command::SetDisableAfter { id, disable_after_s, now_ms });
    }
    // One entry: every change together or none.
    let command = if commands.len() == 1 { commands.remove(0) } else { Command::Batch(commands) };
    // A batch's answers are not mapped to problems by `commit`: the
    // endpoint may have been deleted since it was read.
    if let Response::Batch(answers) = commit(&ctx, command).await?
        && let Some(Response::NotFound { what }) = answers.iter().find(|a| matches!(a, Response::NotFound { .. }))
    {
        return Err(Problem::not_found(format!("no {what}")));
    }
    endpoint_view(&ctx, &id, true).map(axum::Json)
}

/// Delete an endpoint; its queued deliveries are dead-lettered.
#[utoipa::path(
    delete,
    path = "/v1/endpoints/{id}",
    tag = "endpoints",
    params(EndpointPath),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, response = NotFound),
        (status = 503, response = Unavailable),
    )
)]
async fn remove(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let id: EndpointId = parse_id(&id)?;
    let now_ms = ctx.clock.wall_ms();
    commit(&ctx, Command::DeleteEndpoint { id, now_ms }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new signing secret; the body is optional.
#[derive(Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RotateEndpointSecret)]
struct RotateSecret {
    /// `whsec_<base64>` of a 24 to 64 byte key; generated when absent.
    #[schema(pattern = "^whsec_[A-Za-z0-9+/]{32,86}={0,2}$")]
    secret: Option<String>,
    /// How long the previous secret keeps signing; at most 604800 (7 days).
    #[schema(maximum = 604800)]
    grace_period_s: Option<u64>,
}

/// Rotate an endpoint's signing secret; until the previous one expires, every request carries both signatures.
#[utoipa::path(
    post,
    path = "/v1/endpoints/{id}/rotate-secret",
    tag = "endpoints",
    params(EndpointPath),
    request_body(content = Option<RotateSecret>, content_type = "application/json"),
    responses(
        (status = 200, body = view::RotatedSecret),
        (status = 404, response = NotFound),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn rotate_secret(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody<RotateSecret>,
) -> ApiResult<axum::Json<view::RotatedSecret>> {
    let id: EndpointId = parse_id(&id)?;
    let secret = match &body.secret {
        Some(text) => Secret::parse(text).map_err(|e| Problem::invalid(format!("secret: {e}")))?,
        None => ctx.with_rng(|rng| Secret::generate(rng)),
    };
    let grace_ms = validate::grace_ms(body.grace_period_s, ctx.secret_grace_ms)?;
    let now_ms = ctx.clock.wall_ms();
    let grace_until_ms = now_ms + grace_ms;
    let whsec = secret.to_whsec();
    let secret = ctx.payloads.store_secret(SecretOwner::Endpoint(&id.as_str()), secret.key_bytes());
    commit(&ctx, Command::RotateSecret { id, secret, grace_until_ms, now_ms }).await?;
    Ok(axum::Json(view::RotatedSecret {
        secret: whsec,
        previous_secret_expires_at: views::Timestamp::from_ms(grace_until_ms),
    }))
}

/// Which dead deliveries to replay; the body is optional, every field too.
#[derive(Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct BulkReplay {
    /// Only `dead`.
    #[schema(value_type = Option<BulkState>)]
    state: Option<String>,
    /// Deliveries created from this time on.
    #[schema(format = DateTime)]
    since: Option<String>,
    /// Deliveries created before this time; absent: before the call.
    #[schema(format = DateTime)]
    until: Option<String>,
    /// The `next_cursor` of the call before: where this one goes on.
    #[schema(value_type = Option<crate::views::DeliveryIdText>)]
    cursor: Option<String>,
}

/// The state a bulk replay takes.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // Documents the one accepted value.
enum BulkState {
    Dead,
}

/// Bulk-replay entries one call proposes at most, one after another: up to
/// 16,384 deliveries (each entry re-queues at most
/// [`hookraft_core::state::REPLAY_BATCH_MAX`]), a few hundred ms of
/// commits. A larger replay answers with a cursor to go on from.
pub const REPLAY_ENTRIES_PER_CALL: usize = 32;

/// Replay an endpoint's dead deliveries, oldest first, up to 16,384 per call.
#[utoipa::path(
    post,
    path = "/v1/endpoints/{id}/replay",
    tag = "endpoints",
    params(EndpointPath),
    request_body(content = Option<BulkReplay>, content_type = "application/json"),
    responses(
        (status = 202, description = "What was replayed; post again with `next_cursor` while it is set.", body = view::BulkReplayed),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn replay_dead(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody<BulkReplay>,
) -> ApiResult<impl IntoResponse> {
    let endpoint_id: EndpointId = parse_id(&id)?;
    if let Some(state) = body.state.as_deref().filter(|s| *s != "dead") {
        return Err(Problem::invalid(format!("state: only dead deliveries can be replayed in bulk, got `{state}`")));
    }
    let time = |field: &str, value: Option<String>| -> ApiResult<Option<u64>> {
        value
            .map(|v| {
                parse_rfc3339_ms(&v).ok_or_else(|| Problem::invalid(format!("{field}: `{v}` is not an RFC 3339 time")))
            })
            .transpose()
    };
    let since_ms = time("since", body.since)?;
    // Without an end, deliveries created from this call on are left out:
    // one that dies again while the replay goes on is not replayed twice
    // (its id is behind the cursor anyway; a new one's is ahead of it).
    let until_ms = Some(time("until", body.until)?.unwrap_or_else(|| ctx.clock.wall_ms()));
    let mut after: Option<DeliveryId> = match body.cursor {
        Some(cursor) => Some(
            cursor.parse().map_err(|_: IdParseError| Problem::malformed("cursor: pass back a next_cursor value"))?,
        ),
        None => None,
    };
    let mut replayed = 0;
    for step in 0..REPLAY_ENTRIES_PER_CALL {
        let target = ReplayTarget::EndpointDeadAfter { endpoint_id, since_ms, until_ms, after, max: REPLAY_BATCH_MAX };
        let now_ms = ctx.clock.wall_ms();
        let response = match commit(&ctx, Command::Replay { now_ms, target }).await {
            Ok(response) => response,
            // What the steps before replayed stays replayed: answer with
            // it and the cursor; the next call meets the error again.
            Err(_) if step > 0 => break,
            Err(problem) => return Err(problem),
        };
        let Response::ReplayedUpTo { deliveries, next_after } = response else {
            return Err(Problem::internal(format!("unexpected response {response:?}")));
        };
        replayed += deliveries.len();
        after = next_after;
        if after.is_none() {
            break;
        }
    }
    Ok((StatusCode::ACCEPTED, axum::Json(view::BulkReplayed { replayed, next_cursor: after })))
}

/// Ordering keys one listing of blocked keys looks at, at most.
pub const BLOCKED_SCAN_MAX: usize = 10_000;

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct BlockedQuery {
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
}

/// The ordering keys a dead delivery blocks, with that delivery, in key
/// order; one call looks at 10,000 keys at most.
#[utoipa::path(
    get,
    path = "/v1/endpoints/{id}/blocked-keys",
    tag = "endpoints",
    params(EndpointPath, BlockedQuery),
    responses(
        (status = 200, body = view::BlockedKeys),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
    )
)]
async fn blocked_keys(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    query: Result<axum::extract::Query<BlockedQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<axum::Json<view::BlockedKeys>> {
    let id: EndpointId = parse_id(&id)?;
    let axum::extract::Query(query) = query.map_err(|e| Problem::malformed(e.body_text()))?;
    let state = ctx.state.read();
    if !state.endpoints.contains_key(&id) {
        return Err(Problem::not_found(format!("no endpoint {id}")));
    }
    let (blocked, next) = state.blocked_keys(&id, query.cursor.as_deref(), BLOCKED_SCAN_MAX);
    let data = blocked
        .iter()
        .map(|(key, sequence, head)| view::BlockedKey {
            ordering_key: key.to_string(),
            delivery_id: *head,
            sequence: *sequence,
        })
        .collect();
    Ok(axum::Json(view::BlockedKeys { data, next_cursor: next.map(String::from) }))
}

/// The blocked key to let go.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct SkipBody {
    ordering_key: String,
}

/// Let a blocked key go: the dead delivery blocking it stays dead, marked
/// skipped, and the key's next delivery goes.
#[utoipa::path(
    post,
    path = "/v1/endpoints/{id}/blocked-keys/skip",
    tag = "endpoints",
    params(EndpointPath),
    request_body = SkipBody,
    responses(
        (status = 200, body = view::Skipped),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn skip_blocked(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<SkipBody>,
) -> ApiResult<axum::Json<view::Skipped>> {
    let endpoint_id: EndpointId = parse_id(&id)?;
    let now_ms = ctx.clock.wall_ms();
    let command = Command::SkipBlocked { endpoint_id, ordering_key: body.ordering_key, now_ms };
    match commit(&ctx, command).await? {
        Response::SkippedBlocked { skipped, next } => Ok(axum::Json(view::Skipped { skipped, next })),
        other => Err(Problem::internal(format!("unexpected answer to a skip: {other:?}"))),
    }
}

/// The `{id}` of the routes above.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // Documents the path parameter; handlers take it as text.
struct EndpointPath {
    #[param(value_type = crate::views::EndpointIdText)]
    id: String,
}
