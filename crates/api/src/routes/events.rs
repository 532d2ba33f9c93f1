//! `/v1/events`: ingest (batched into the log, answered after commit), a
//! batch of events committed together, and read.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hookraft_core::command::{IngestResult, NewEvent};
use hookraft_core::ids::{EndpointId, EventId};
use hookraft_core::model::Delivery;
use hookraft_core::propose::ProposeError;
use hookraft_core::state::{ClusterState, Usage, new_event_bytes};
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::parse_id;
use crate::admission::Reservation;
use crate::context::ApiContext;
use crate::extract::{parse_json, read_body};
use crate::openapi::problems::{BadRequest, IngestUnavailable, InvalidField, NotFound};
use crate::problem::{ApiResult, OVER_BUDGET, Problem};
use crate::views::{EndpointIdText, EventIdText};
use crate::{validate, views};

/// Longest `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 256;
/// Most explicit targets one event may name.
pub const ENDPOINT_IDS_MAX: usize = 1_000;
/// Most events in one `POST /v1/events/batch`.
pub const BATCH_EVENTS_MAX: usize = 1_000;

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    // `GET /v1/events` (the listing) is in `event_history`.
    OpenApiRouter::new().routes(routes!(ingest)).routes(routes!(ingest_batch)).routes(routes!(read))
}

/// An event to ingest.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PostEvent<'a> {
    /// 1 to 256 bytes, no control characters.
    #[schema(min_length = 1, max_length = 256, example = "order.created")]
    r#type: String,
    /// Any JSON: what the endpoints receive as the body.
    #[serde(borrow)]
    #[schema(value_type = Value)]
    payload: &'a RawValue,
    /// Endpoints to deliver to; absent: every enabled endpoint whose `event_types` take the type.
    #[schema(value_type = Option<Vec<EndpointIdText>>, max_items = 1000)]
    endpoint_ids: Option<Vec<String>>,
    /// Orders the event behind earlier events of the key at endpoints with `ordering: per_key`;
    /// 1 to 256 printable ASCII characters.
    #[schema(min_length = 1, max_length = 256)]
    ordering_key: Option<String>,
}

/// One event of `POST /v1/events/batch`: a `PostEvent` with its
/// idempotency key in the body instead of a header.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct BatchEvent<'a> {
    #[schema(min_length = 1, max_length = 256, example = "order.created")]
    r#type: String,
    #[serde(borrow)]
    #[schema(value_type = Value)]
    payload: &'a RawValue,
    #[schema(value_type = Option<Vec<EndpointIdText>>, max_items = 1000)]
    endpoint_ids: Option<Vec<String>>,
    /// 1 to 256 printable ASCII characters.
    #[schema(min_length = 1, max_length = 256)]
    idempotency_key: Option<String>,
    #[schema(min_length = 1, max_length = 256)]
    ordering_key: Option<String>,
}

/// 1 to 1,000 events, committed together or not at all.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PostBatch<'a> {
    #[serde(borrow, deserialize_with = "crate::extract::objects")]
    #[schema(min_items = 1, max_items = 1000)]
    events: Vec<BatchEvent<'a>>,
}

/// Idempotency of `POST /v1/events`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Documents the header; the handler reads it from the request.
struct IngestHeaders {
    /// 1 to 256 printable ASCII characters: a repeat answers the first event and creates nothing.
    #[param(rename = "Idempotency-Key", min_length = 1, max_length = 256)]
    idempotency_key: Option<String>,
}

/// Counts a failed ingest request and turns its problem into the answer.
fn rejected(ctx: &ApiContext, problem: Problem) -> Response {
    ctx.metrics.events_rejected_total.inc();
    if problem.status == StatusCode::SERVICE_UNAVAILABLE && problem.slug != OVER_BUDGET {
        ctx.metrics.ingest_unavailable_total.inc();
    }
    problem.into_response()
}

/// Ingest an event; answered once it is committed, never before.
#[utoipa::path(
    post,
    path = "/v1/events",
    tag = "events",
    params(IngestHeaders),
    request_body = PostEvent,
    responses(
        (status = 202, description = "Committed: the event and its deliveries.", body = views::IngestAnswer),
        (status = 200, description = "A repeated `Idempotency-Key`: the first event's answer; nothing created.",
            body = views::IngestAnswer,
            headers(("Idempotent-Replay" = String, description = "`true`"))),
        (status = 400, response = BadRequest),
        (status = 422, response = InvalidField),
        (status = 503, response = IngestUnavailable),
    )
)]
async fn ingest(State(ctx): State<Arc<ApiContext>>, request: Request) -> Response {
    ingest_inner(&ctx, request).await.unwrap_or_else(|problem| rejected(&ctx, problem))
}

/// Ingest 1 to 1,000 events in one log entry: every event is checked
/// first (one bad event refuses the whole batch), then all are committed
/// together or none.
#[utoipa::path(
    post,
    path = "/v1/events/batch",
    tag = "events",
    request_body = PostBatch,
    responses(
        (status = 202, description = "One result per event, in the order sent.", body = views::events::BatchAnswers),
        (status = 422, response = InvalidField),
        (status = 503, response = IngestUnavailable),
    )
)]
async fn ingest_batch(State(ctx): State<Arc<ApiContext>>, request: Request) -> Response {
    ingest_batch_inner(&ctx, request).await.unwrap_or_else(|problem| rejected(&ctx, problem))
}

/// Checks one event's fields and gives it an id; nothing is committed.
fn new_event(
    ctx: &ApiContext,
    event_type: String,
    payload: &RawValue,
    endpoint_ids: Option<Vec<String>>,
    idempotency_key: Option<String>,
    ordering_key: Option<String>,
) -> ApiResult<NewEvent> {
    validate::event_type(&event_type)?;
    if let Some(key) = &ordering_key
        && idempotency_key_text(key).is_none()
    {
        return Err(Problem::invalid(key_rule("ordering_key")));
    }
    let endpoint_ids = match endpoint_ids {
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
    let now_ms = ctx.clock.wall_ms();
    let id = ctx.with_rng(|rng| EventId::generate(now_ms, rng));
    // Sealed here, before it is proposed: the log, snapshots and every
    // replica's state hold only what this returns.
    let payload = ctx.payloads.seal(&id, &event_type, payload.get());
    Ok(NewEvent { id, event_type, payload, idempotency_key, endpoint_ids, ordering_key, inbound: None })
}

async fn ingest_inner(ctx: &ApiContext, request: Request) -> ApiResult<Response> {
    let key = idempotency_key(request.headers())?;
    let bytes = read_body(request, &(), true).await?;
    let body: PostEvent<'_> = parse_json(&bytes)?;
    let event = new_event(ctx, body.r#type, body.payload, body.endpoint_ids, key, body.ordering_key)?;
    // One look at the state for both the key and the budget; its own
    // statement, so the read guard is gone before `answer` reads again.
    let (existing, used, incoming) = {
        let state = ctx.state.read();
        let existing = event.idempotency_key.as_ref().and_then(|key| state.idempotency.get(key.as_str()).copied());
        (existing, state.memory_usage(), incoming(&state, std::slice::from_ref(&event)))
    };
    if let Some(existing) = existing {
        return answer(ctx, &existing, true);
    }
    let _room = ctx.admission.admit(used, incoming).map_err(|refusal| Problem::over_budget(&refusal))?;
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
    m.observe_commit_ms(ctx.clock.monotonic_ms().saturating_sub(started_ms));
    match result {
        IngestResult::Created { event_id, .. } => {
            m.events_accepted_total.inc();
            answer(ctx, &event_id, false)
        }
        IngestResult::Duplicate { event_id } => answer(ctx, &event_id, true),
        IngestResult::UnknownEndpoint { endpoint_id } => {
            Err(Problem::invalid(format!("endpoint_ids: no endpoint {endpoint_id}")))
        }
    }
}

/// All events of the batch are checked first: one bad event rejects the
/// whole batch (naming it) and commits nothing. The rest are committed in
/// one log entry, together or not at all, and answered one result each.
async fn ingest_batch_inner(ctx: &ApiContext, request: Request) -> ApiResult<Response> {
    let bytes = read_body(request, &(), true).await?;
    let body: PostBatch<'_> = parse_json(&bytes)?;
    if body.events.is_empty() || body.events.len() > BATCH_EVENTS_MAX {
        return Err(Problem::invalid(format!("events must hold 1 to {BATCH_EVENTS_MAX} events")));
    }
    let mut events = Vec::with_capacity(body.events.len());
    for (i, item) in body.events.into_iter().enumerate() {
        let in_item = |problem: Problem| Problem { detail: format!("events[{i}]: {}", problem.detail), ..problem };
        let key = item.idempotency_key.map(|key| {
            idempotency_key_text(&key).ok_or_else(|| in_item(Problem::invalid(key_rule("idempotency_key"))))
        });
        let event = new_event(ctx, item.r#type, item.payload, item.endpoint_ids, key.transpose()?, item.ordering_key);
        events.push(event.map_err(in_item)?);
    }
    unknown_endpoints(ctx, &events)?;
    let _room = admit(ctx, &events)?;
    let started_ms = ctx.clock.monotonic_ms();
    let results = commit_batch(ctx, events).await?;
    let m = &ctx.metrics;
    m.observe_commit_ms(ctx.clock.monotonic_ms().saturating_sub(started_ms));
    let state = ctx.state.read();
    let mut answers = Vec::with_capacity(results.len());
    for result in &results {
        let (status, event_id) = match result {
            IngestResult::Created { event_id, .. } => {
                m.events_accepted_total.inc();
                (StatusCode::ACCEPTED, event_id)
            }
            IngestResult::Duplicate { event_id } => {
                m.events_idempotent_replays_total.inc();
                (StatusCode::OK, event_id)
            }
            // Deleted between the check above and the commit.
            IngestResult::UnknownEndpoint { endpoint_id } => {
                m.events_rejected_total.inc();
                let detail = format!("endpoint_ids: no endpoint {endpoint_id}");
                answers.push(views::BatchAnswer::rejected(StatusCode::UNPROCESSABLE_ENTITY.as_u16(), detail));
                continue;
            }
        };
        answers.push(views::BatchAnswer::event(status.as_u16(), ingest_answer(&state, event_id)?));
    }
    Ok((StatusCode::ACCEPTED, axum::Json(views::events::BatchAnswers { events: answers })).into_response())
}

/// Admits `events` within the node's budgets, holding their room until
/// they are committed (the returned guard), or answers the 503 of a full
/// budget. Checked before anything enters the ingest batcher.
pub(crate) fn admit<'a>(ctx: &'a ApiContext, events: &[NewEvent]) -> ApiResult<Reservation<'a>> {
    let (used, incoming) = {
        let state = ctx.state.read();
        (state.memory_usage(), incoming(&state, events))
    };
    ctx.admission.admit(used, incoming).map_err(|refusal| Problem::over_budget(&refusal))
}

/// What `events` would add to the state: the deliveries each would create
/// by this replica's endpoints, and their estimated bytes. An event whose
/// idempotency key is known adds nothing: it replays what was committed.
fn incoming(state: &ClusterState, events: &[NewEvent]) -> Usage {
    let mut usage = Usage::default();
    for event in events {
        let key = event.idempotency_key.as_deref();
        if key.is_some_and(|key| state.idempotency.contains_key(key)) {
            continue;
        }
        let deliveries = match &event.endpoint_ids {
            Some(ids) => ids.len(),
            None => state.fanout_count(&event.event_type, event.inbound.as_ref().map(|i| &i.source_id)),
        } as u64;
        usage.pending = usage.pending.saturating_add(deliveries);
        let bytes = new_event_bytes(event.event_type.len(), event.payload.len(), key.map(str::len), deliveries);
        usage.bytes = usage.bytes.saturating_add(bytes);
    }
    usage
}

/// Commits the batch as one log entry.
async fn commit_batch(ctx: &ApiContext, events: Vec<NewEvent>) -> Result<Vec<IngestResult>, ProposeError> {
    #[cfg(feature = "break")]
    if hookraft_core::breaks::split_batch() && events.len() > 1 {
        // Deliberately wrong (simulator's `--break split-batch`): two entries.
        let mut events = events;
        let second = events.split_off(events.len() / 2);
        let mut results = ctx.ingest.submit_batch(events).await?;
        results.extend(ctx.ingest.submit_batch(second).await?);
        return Ok(results);
    }
    ctx.ingest.submit_batch(events).await
}

/// A 422 naming the first event that lists an endpoint that does not exist.
/// An event whose idempotency key is already known is skipped: it replays
/// what was committed, even when its endpoint has been deleted since (a
/// retried batch must not be refused for what its first try created).
fn unknown_endpoints(ctx: &ApiContext, events: &[NewEvent]) -> ApiResult<()> {
    let state = ctx.state.read();
    for (i, event) in events.iter().enumerate() {
        if event.idempotency_key.as_ref().is_some_and(|key| state.idempotency.contains_key(key.as_str())) {
            continue;
        }
        let missing = event.endpoint_ids.iter().flatten().find(|id| !state.endpoints.contains_key(id));
        if let Some(id) = missing {
            return Err(Problem::invalid(format!("events[{i}]: endpoint_ids: no endpoint {id}")));
        }
    }
    Ok(())
}

fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(None) };
    let key = value.to_str().ok().and_then(idempotency_key_text);
    key.map(Some).ok_or_else(|| Problem::malformed(key_rule("Idempotency-Key")))
}

/// An idempotency key as given, if it is 1 to 256 printable ASCII characters.
fn idempotency_key_text(text: &str) -> Option<String> {
    let printable = text.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    (!text.is_empty() && text.len() <= IDEMPOTENCY_KEY_BYTES_MAX && printable).then(|| text.to_string())
}

fn key_rule(name: &str) -> String {
    format!("{name} must be 1 to {IDEMPOTENCY_KEY_BYTES_MAX} printable ASCII characters")
}

/// 202 with the event and its deliveries, or 200 + `Idempotent-Replay: true`.
fn answer(ctx: &ApiContext, event_id: &EventId, replay: bool) -> ApiResult<Response> {
    let state = ctx.state.read();
    let body = axum::Json(ingest_answer(&state, event_id)?);
    if replay {
        ctx.metrics.events_idempotent_replays_total.inc();
        let mut response = (StatusCode::OK, body).into_response();
        response.headers_mut().insert("idempotent-replay", HeaderValue::from_static("true"));
        Ok(response)
    } else {
        Ok((StatusCode::ACCEPTED, body).into_response())
    }
}

/// A committed event and its deliveries in their creation states.
fn ingest_answer<'a>(state: &'a ClusterState, event_id: &EventId) -> ApiResult<views::IngestAnswer<'a>> {
    let event =
        state.event(event_id).ok_or_else(|| Problem::internal(format!("committed event {event_id} is missing")))?;
    let deliveries = state.deliveries_of(&event);
    let deliveries: Vec<(&Delivery, _)> = deliveries.iter().map(|d| (&**d, d.initial_state)).collect();
    Ok(views::ingest_answer(event, &deliveries))
}

/// Read an event, its payload opened with this node's keyring.
#[utoipa::path(
    get,
    path = "/v1/events/{id}",
    tag = "events",
    params(("id" = EventIdText, Path)),
    responses((status = 200, body = views::events::EventView), (status = 404, response = NotFound))
)]
async fn read(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<views::events::EventView>> {
    let id: EventId = parse_id(&id)?;
    let (event, mut view) = {
        let state = ctx.state.read();
        let event = state.event(&id).ok_or_else(|| Problem::not_found(format!("no event {id}")))?;
        let deliveries = state.deliveries_of(&event);
        let deliveries: Vec<&Delivery> = deliveries.iter().map(|d| &**d).collect();
        let view = views::event(&ctx, &event, &deliveries);
        (event.into_owned(), view)
    };
    // Opened once the state's lock is released: a payload may be a MiB.
    views::open_payload(&ctx, &event, &mut view);
    Ok(axum::Json(view))
}
