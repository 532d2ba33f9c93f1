//! `/v1/events`: ingest (batched into the log, answered after commit) and read.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hookraft_core::command::{IngestResult, NewEvent};
use hookraft_core::ids::{EndpointId, EventId};
use hookraft_core::model::Delivery;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::parse_id;
use crate::context::ApiContext;
use crate::extract::{parse_json, read_body};
use crate::problem::{ApiResult, Problem};
use crate::{validate, views};

/// Longest `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;
/// Most explicit targets one event may name.
pub const ENDPOINT_IDS_MAX: usize = 1_000;

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new().route("/v1/events", post(ingest)).route("/v1/events/{id}", get(read))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PostEvent<'a> {
    r#type: String,
    #[serde(borrow)]
    payload: &'a RawValue,
    endpoint_ids: Option<Vec<String>>,
}

async fn ingest(State(ctx): State<Arc<ApiContext>>, request: Request) -> Response {
    match ingest_inner(&ctx, request).await {
        Ok(response) => response,
        Err(problem) => {
            ctx.metrics.events_rejected_total.fetch_add(1, Ordering::Relaxed);
            if problem.status == StatusCode::SERVICE_UNAVAILABLE {
                ctx.metrics.ingest_unavailable_total.fetch_add(1, Ordering::Relaxed);
            }
            problem.into_response()
        }
    }
}

async fn ingest_inner(ctx: &ApiContext, request: Request) -> ApiResult<Response> {
    let key = idempotency_key(request.headers())?;
    let bytes = read_body(request, &(), true).await?;
    let body: PostEvent<'_> = parse_json(&bytes)?;
    validate::event_type(&body.r#type)?;
    let endpoint_ids = match body.endpoint_ids {
        Some(ids) if ids.len() > ENDPOINT_IDS_MAX => {
            return Err(Problem::invalid(format!("endpoint_ids may list at most {ENDPOINT_IDS_MAX} endpoints")));
        }
        Some(ids) => Some(
            ids.iter()
                .map(|id| id.parse::<EndpointId>().map_err(|e| Problem::invalid(format!("endpoint_ids: {e}"))))
                .collect::<ApiResult<Vec<_>>>()?,
        ),
        None => None,
    };
    // Its own statement: the read guard must be gone before `answer` reads
    // again (a guard in an `if let` condition lives through the whole block).
    let existing = key.as_ref().and_then(|key| ctx.state.read().idempotency.get(key.as_str()).copied());
    if let Some(existing) = existing {
        return answer(ctx, &existing, true);
    }
    let now_ms = ctx.clock.wall_ms();
    let event = NewEvent {
        id: ctx.with_rng(|rng| EventId::generate(now_ms, rng)),
        event_type: body.r#type,
        payload: body.payload.get().to_string(),
        idempotency_key: key,
        endpoint_ids,
    };
    #[cfg(feature = "break")]
    if hookraft_core::breaks::ack_before_commit() {
        // Deliberately wrong (simulator's `--break ack-before-commit`).
        let body = serde_json::json!({"id": event.id, "type": event.event_type, "deliveries": []});
        let ingest = ctx.ingest.clone();
        tokio::spawn(async move {
            let _ = ingest.submit(event).await;
        });
        return Ok((StatusCode::ACCEPTED, axum::Json(body)).into_response());
    }
    let started_ms = ctx.clock.monotonic_ms();
    let result = ctx.ingest.submit(event).await?;
    let m = &ctx.metrics;
    m.commit_latency_count.fetch_add(1, Ordering::Relaxed);
    m.commit_latency_sum_ms.fetch_add(ctx.clock.monotonic_ms().saturating_sub(started_ms), Ordering::Relaxed);
    match result {
        IngestResult::Created { event_id, .. } => {
            m.events_accepted_total.fetch_add(1, Ordering::Relaxed);
            answer(ctx, &event_id, false)
        }
        IngestResult::Duplicate { event_id } => answer(ctx, &event_id, true),
        IngestResult::UnknownEndpoint { endpoint_id } => {
            Err(Problem::invalid(format!("endpoint_ids: no endpoint {endpoint_id}")))
        }
    }
}

fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    let text = value.to_str().ok().filter(|t| !t.is_empty() && t.len() <= IDEMPOTENCY_KEY_BYTES_MAX);
    match text {
        Some(t) if t.bytes().all(|b| b.is_ascii_graphic() || b == b' ') => Ok(Some(t.to_string())),
        _ => Err(Problem::malformed(format!(
            "Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_BYTES_MAX} printable ASCII characters"
        ))),
    }
}

/// 202 with the event and its deliveries, or 200 + `Idempotent-Replay: true`.
fn answer(ctx: &ApiContext, event_id: &EventId, replay: bool) -> ApiResult<Response> {
    let state = ctx.state.read();
    let event = state
        .events
        .get(event_id)
        .ok_or_else(|| Problem::internal(format!("committed event {event_id} is missing")))?;
    let deliveries: Vec<(&Delivery, _)> = event
        .deliveries
        .iter()
        .filter_map(|d| state.deliveries.get(d).map(AsRef::as_ref))
        .map(|d| (d, d.initial_state))
        .collect();
    let body = axum::Json(views::ingest_answer(event, &deliveries));
    if replay {
        ctx.metrics.events_idempotent_replays_total.fetch_add(1, Ordering::Relaxed);
        let mut response = (StatusCode::OK, body).into_response();
        response.headers_mut().insert("idempotent-replay", HeaderValue::from_static("true"));
        Ok(response)
    } else {
        Ok((StatusCode::ACCEPTED, body).into_response())
    }
}

async fn read(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<axum::Json<serde_json::Value>> {
    let id: EventId = parse_id(&id)?;
    let state = ctx.state.read();
    let event = state.events.get(&id).ok_or_else(|| Problem::not_found(format!("no event {id}")))?;
    let deliveries: Vec<&Delivery> =
        event.deliveries.iter().filter_map(|d| state.deliveries.get(d).map(AsRef::as_ref)).collect();
    Ok(axum::Json(views::event(&ctx, event, &deliveries)))
}
