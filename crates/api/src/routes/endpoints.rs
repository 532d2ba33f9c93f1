//! `/v1/endpoints`: register, list, read, change, delete, rotate secrets,
//! bulk replay.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use hookraft_core::clock::parse_rfc3339_ms;
use hookraft_core::command::{Command, EndpointPatch, ReplayTarget, Response};
use hookraft_core::ids::EndpointId;
use hookraft_core::model::{Endpoint, MAX_IN_FLIGHT_DEFAULT, TIMEOUT_MS_DEFAULT};
use hookraft_core::signing::Secret;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{commit, parse_id};
use crate::context::ApiContext;
use crate::extract::{JsonBody, OptionalJsonBody};
use crate::problem::{ApiResult, Problem};
use crate::validate::{self, RetryInput, double_option};
use crate::views;

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new()
        .route("/v1/endpoints", post(create).get(list))
        .route("/v1/endpoints/{id}", get(read).patch(update).delete(remove))
        .route("/v1/endpoints/{id}/rotate-secret", post(rotate_secret))
        .route("/v1/endpoints/{id}/replay", post(replay_dead))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateEndpoint {
    url: String,
    secret: Option<String>,
    description: Option<String>,
    event_types: Option<Vec<String>>,
    max_in_flight: Option<u32>,
    rate_limit_per_s: Option<u32>,
    timeout_ms: Option<u32>,
    retry: Option<RetryInput>,
}

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
    let endpoint = Endpoint {
        description: body.description,
        event_types: body.event_types,
        max_in_flight: validate::max_in_flight(body.max_in_flight.unwrap_or(MAX_IN_FLIGHT_DEFAULT))?,
        rate_limit_per_s: body.rate_limit_per_s.map(validate::rate_limit).transpose()?,
        timeout_ms: validate::timeout_ms(body.timeout_ms.unwrap_or(TIMEOUT_MS_DEFAULT))?,
        retry: body.retry.unwrap_or_default().into_policy()?,
        ..Endpoint::new(id, url, secret, now_ms)
    };
    commit(&ctx, Command::RegisterEndpoint { endpoint: Box::new(endpoint) }).await?;
    Ok((StatusCode::CREATED, axum::Json(endpoint_view(&ctx, &id)?)))
}

fn endpoint_view(ctx: &ApiContext, id: &EndpointId) -> ApiResult<Value> {
    let state = ctx.state.read();
    let endpoint = state.endpoints.get(id).ok_or_else(|| Problem::not_found(format!("no endpoint {id}")))?;
    Ok(views::endpoint(endpoint))
}

async fn list(State(ctx): State<Arc<ApiContext>>) -> axum::Json<Value> {
    let state = ctx.state.read();
    let data: Vec<Value> = state.endpoints.values().map(views::endpoint).collect();
    axum::Json(json!({ "data": data }))
}

async fn read(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<axum::Json<Value>> {
    let id: EndpointId = parse_id(&id)?;
    endpoint_view(&ctx, &id).map(axum::Json)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchEndpoint {
    url: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    description: Option<Option<String>>,
    #[serde(default, deserialize_with = "double_option")]
    event_types: Option<Option<Vec<String>>>,
    max_in_flight: Option<u32>,
    #[serde(default, deserialize_with = "double_option")]
    rate_limit_per_s: Option<Option<u32>>,
    timeout_ms: Option<u32>,
    retry: Option<RetryInput>,
    disabled: Option<bool>,
}

async fn update(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PatchEndpoint>,
) -> ApiResult<axum::Json<Value>> {
    let id: EndpointId = parse_id(&id)?;
    endpoint_view(&ctx, &id)?; // 404 before validating
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
    let now_ms = ctx.clock.wall_ms();
    commit(&ctx, Command::UpdateEndpoint { id, patch, now_ms }).await?;
    endpoint_view(&ctx, &id).map(axum::Json)
}

async fn remove(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let id: EndpointId = parse_id(&id)?;
    let now_ms = ctx.clock.wall_ms();
    commit(&ctx, Command::DeleteEndpoint { id, now_ms }).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RotateSecret {
    secret: Option<String>,
    grace_period_s: Option<u64>,
}

/// Longest grace period a rotation may ask for.
const GRACE_PERIOD_S_MAX: u64 = 7 * 24 * 3_600;

async fn rotate_secret(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody<RotateSecret>,
) -> ApiResult<axum::Json<Value>> {
    let id: EndpointId = parse_id(&id)?;
    let secret = match &body.secret {
        Some(text) => Secret::parse(text).map_err(|e| Problem::invalid(format!("secret: {e}")))?,
        None => ctx.with_rng(|rng| Secret::generate(rng)),
    };
    let grace_ms = match body.grace_period_s {
        Some(s) if s > GRACE_PERIOD_S_MAX => {
            return Err(Problem::invalid(format!("grace_period_s may be at most {GRACE_PERIOD_S_MAX}")));
        }
        Some(s) => s * 1_000,
        None => ctx.secret_grace_ms,
    };
    let now_ms = ctx.clock.wall_ms();
    let grace_until_ms = now_ms + grace_ms;
    let whsec = secret.to_whsec();
    commit(&ctx, Command::RotateSecret { id, secret, grace_until_ms, now_ms }).await?;
    Ok(axum::Json(json!({
        "secret": whsec,
        "previous_secret_expires_at": hookraft_core::clock::format_rfc3339_ms(grace_until_ms),
    })))
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkReplay {
    state: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

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
    let until_ms = time("until", body.until)?;
    let target = ReplayTarget::EndpointDead { endpoint_id, since_ms, until_ms };
    let now_ms = ctx.clock.wall_ms();
    match commit(&ctx, Command::Replay { now_ms, target }).await? {
        Response::Replayed { deliveries } => {
            Ok((StatusCode::ACCEPTED, axum::Json(json!({ "replayed": deliveries.len() }))))
        }
        other => Err(Problem::internal(format!("unexpected response {other:?}"))),
    }
}
