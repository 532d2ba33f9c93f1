//! `/v1/deliveries`: list (the dead-letter queue is `state=dead`), read with
//! the timeline, replay one.

use std::ops::Bound;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use hookraft_core::command::{Command, ReplayTarget};
use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::model::DeliveryState;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{commit, parse_id};
use crate::context::ApiContext;
use crate::problem::{ApiResult, Problem};
use crate::views;

/// Page size bounds of `GET /v1/deliveries`.
pub const LIMIT_DEFAULT: usize = 50;
pub const LIMIT_MAX: usize = 1_000;

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new()
        .route("/v1/deliveries", get(list))
        .route("/v1/deliveries/{id}", get(read))
        .route("/v1/deliveries/{id}/replay", post(replay))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    endpoint_id: Option<String>,
    event_id: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

async fn list(
    State(ctx): State<Arc<ApiContext>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<axum::Json<Value>> {
    let Query(q) = query.map_err(|e| Problem::malformed(e.body_text()))?;
    let state_filter = q
        .state
        .as_deref()
        .map(|s| {
            DeliveryState::parse(s).ok_or_else(|| {
                Problem::malformed(format!("state must be pending, attempting, retrying, delivered or dead, got `{s}`"))
            })
        })
        .transpose()?;
    let endpoint: Option<EndpointId> = q
        .endpoint_id
        .as_deref()
        .map(|e| e.parse().map_err(|e| Problem::malformed(format!("endpoint_id: {e}"))))
        .transpose()?;
    let event: Option<EventId> = q
        .event_id
        .as_deref()
        .map(|e| e.parse().map_err(|e| Problem::malformed(format!("event_id: {e}"))))
        .transpose()?;
    let limit = match q.limit.as_deref() {
        None => LIMIT_DEFAULT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=LIMIT_MAX).contains(l))
            .ok_or_else(|| Problem::malformed(format!("limit must be between 1 and {LIMIT_MAX}, got `{l}`")))?,
    };
    let after: Bound<DeliveryId> = match q.cursor.as_deref() {
        None | Some("") => Bound::Unbounded,
        Some(c) => Bound::Excluded(c.parse().map_err(|_| Problem::malformed("cursor: pass back a next_cursor value"))?),
    };

    let state = ctx.state.read();
    let mut page: Vec<Value> = Vec::with_capacity(limit);
    let mut next_cursor = None;
    let matching = state.deliveries.range((after, Bound::Unbounded)).map(|(_, d)| d).filter(|d| {
        endpoint.as_ref().is_none_or(|e| &d.endpoint_id == e)
            && event.as_ref().is_none_or(|e| &d.event_id == e)
            && state_filter.is_none_or(|s| views::effective_state(&ctx, d) == s)
    });
    for d in matching {
        if page.len() == limit {
            next_cursor = page.last().and_then(|v| v["id"].as_str().map(str::to_string));
            break;
        }
        page.push(views::delivery(&ctx, d, false));
    }
    Ok(axum::Json(json!({ "data": page, "next_cursor": next_cursor })))
}

async fn read(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<axum::Json<Value>> {
    let id: DeliveryId = parse_id(&id)?;
    let state = ctx.state.read();
    let delivery = state.deliveries.get(&id).ok_or_else(|| Problem::not_found(format!("no delivery {id}")))?;
    Ok(axum::Json(views::delivery(&ctx, delivery, true)))
}

async fn replay(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    let id: DeliveryId = parse_id(&id)?;
    let now_ms = ctx.clock.wall_ms();
    commit(&ctx, Command::Replay { now_ms, target: ReplayTarget::Delivery(id) }).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(json!({ "id": id, "state": "pending" }))))
}
