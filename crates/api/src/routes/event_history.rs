//! Reading the past: `GET /v1/events` lists events (by type, time,
//! endpoint, state of a delivery), paged by cursor; `POST
//! /v1/events/{id}/replay` replays an event's settled deliveries at once.

use std::ops::Bound;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hookraft_core::command::{Command, ReplayTarget, Response};
use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::model::{Delivery, DeliveryState, Event};
use hookraft_core::state::ClusterState;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{commit, parse_id};
use crate::context::ApiContext;
use crate::extract::OptionalJsonBody;
use crate::openapi::problems::{BadRequest, InvalidField, NotFound, Unavailable};
use crate::problem::{ApiResult, Problem};
use crate::validate;
use crate::views::{self, EndpointIdText, EventIdText, events as view};

/// Page size bounds of `GET /v1/events`.
pub const EVENTS_LIMIT_DEFAULT: usize = 50;
pub const EVENTS_LIMIT_MAX: usize = 1_000;
/// Events one listing looks at, at most, filtered or not: a filter that
/// matches little answers a short page and a cursor to go on from.
pub const EVENTS_SCAN_MAX: usize = 10_000;

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new().routes(routes!(list)).routes(routes!(replay))
}

/// The filters of `GET /v1/events`; every one optional, all must hold.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// The event type, exactly.
    #[param(rename = "type")]
    r#type: Option<String>,
    /// Received at or after this time.
    #[param(format = DateTime)]
    since: Option<String>,
    /// Received before this time.
    #[param(format = DateTime)]
    until: Option<String>,
    /// With a delivery to this endpoint.
    #[param(value_type = Option<EndpointIdText>)]
    endpoint_id: Option<String>,
    /// With a delivery in this state (and to `endpoint_id`, when given).
    #[param(value_type = Option<views::deliveries::StateView>)]
    state: Option<String>,
    /// Page size, default 50.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    limit: Option<String>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
}

/// What a listing keeps: every given filter must hold.
struct Filter {
    event_type: Option<String>,
    since_ms: u64,
    until_ms: u64,
    endpoint: Option<EndpointId>,
    state: Option<DeliveryState>,
}

impl Filter {
    fn parse(q: &ListQuery) -> ApiResult<Self> {
        let state = q.state.as_deref().map(validate::delivery_state).transpose()?;
        let endpoint = validate::query_id("endpoint_id", q.endpoint_id.as_deref())?;
        Ok(Self {
            event_type: q.r#type.clone(),
            since_ms: validate::query_time("since", q.since.as_deref())?.unwrap_or(0),
            until_ms: validate::query_time("until", q.until.as_deref())?.unwrap_or(u64::MAX),
            endpoint,
            state,
        })
    }

    /// Whether `event` passes: its type, its time, and (when asked) a
    /// delivery to the endpoint, in the state.
    fn keeps(&self, ctx: &ApiContext, state: &ClusterState, event: &Event) -> bool {
        if self.event_type.as_deref().is_some_and(|t| *event.event_type != *t)
            || !(self.since_ms..self.until_ms).contains(&event.received_at_ms)
        {
            return false;
        }
        if self.endpoint.is_none() && self.state.is_none() {
            return true;
        }
        state.deliveries_of(event).iter().any(|d| {
            self.endpoint.is_none_or(|e| d.endpoint_id == e)
                && self.state.is_none_or(|s| views::effective_state(ctx, d) == s)
        })
    }
}

/// List events in the order they were received, without payloads; at most
/// 10,000 are looked at per call, so a short page with a `next_cursor`
/// means go on.
#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "events",
    params(ListQuery),
    responses((status = 200, body = view::EventPage), (status = 400, response = BadRequest))
)]
async fn list(
    State(ctx): State<Arc<ApiContext>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<axum::Json<view::EventPage>> {
    let Query(q) = query.map_err(|e| Problem::malformed(e.body_text()))?;
    let filter = Filter::parse(&q)?;
    let limit = validate::page_limit(q.limit.as_deref(), EVENTS_LIMIT_DEFAULT, EVENTS_LIMIT_MAX)?;
    let after: Bound<EventId> = validate::page_cursor(q.cursor.as_deref())?.map_or(Bound::Unbounded, Bound::Excluded);
    let state = ctx.state.read();
    let mut data = Vec::with_capacity(limit.min(64));
    let mut next_cursor = None;
    let mut candidates = state.events_in((after, Bound::Unbounded), false).peekable();
    let mut looked = 0;
    while let Some(event) = candidates.next() {
        looked += 1;
        if filter.keeps(&ctx, &state, &event) {
            if data.len() == limit {
                next_cursor = Some(data_cursor(&data));
                break;
            }
            data.push(summary(&ctx, &state, &event));
        }
        if looked >= EVENTS_SCAN_MAX && candidates.peek().is_some() {
            next_cursor = Some(event.id.to_string());
            break;
        }
    }
    Ok(axum::Json(view::EventPage { data, next_cursor }))
}

/// The id of the page's last event: where the next page starts after.
fn data_cursor(data: &[view::EventSummary]) -> String {
    data.last().map(|e| e.id.to_string()).unwrap_or_default()
}

/// An event in a listing: no payload (read one event for it).
fn summary(ctx: &ApiContext, state: &ClusterState, event: &Event) -> view::EventSummary {
    let deliveries = state.deliveries_of(event);
    let deliveries: Vec<&Delivery> = deliveries.iter().map(|d| &**d).collect();
    view::summary(ctx, event, &deliveries)
}

/// What to replay; the body is optional.
#[derive(Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ReplayBody {
    /// Replay delivered deliveries too (sending the event again to endpoints
    /// that already have it).
    #[serde(default)]
    include_delivered: bool,
}

/// Replay an event's settled deliveries.
///
/// Every settled delivery of the event
/// (dead, ignored as stale, and delivered ones when asked) is queued again,
/// in one log entry; unsettled ones are skipped, as are deliveries to
/// disabled or deleted endpoints, each with its reason.
#[utoipa::path(
    post,
    path = "/v1/events/{id}/replay",
    tag = "events",
    params(("id" = EventIdText, Path)),
    request_body(content = Option<ReplayBody>, content_type = "application/json"),
    responses(
        (status = 202, description = "Which deliveries were queued again, and which were left out and why.",
            body = view::EventReplayed),
        (status = 404, response = NotFound),
        (status = 422, response = InvalidField),
        (status = 503, response = Unavailable),
    )
)]
async fn replay(
    State(ctx): State<Arc<ApiContext>>,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody<ReplayBody>,
) -> ApiResult<impl IntoResponse> {
    let id: EventId = parse_id(&id)?;
    let (chosen, mut skipped) = {
        let state = ctx.state.read();
        let event = state.event(&id).ok_or_else(|| Problem::not_found(format!("no event {id}")))?;
        let mut chosen: Vec<DeliveryId> = Vec::new();
        let mut skipped: Vec<view::SkippedDelivery> = Vec::new();
        for delivery in state.deliveries_of(&event) {
            let reason = match delivery.state {
                s if !s.is_terminal() => Some("not settled"),
                DeliveryState::Delivered if !body.include_delivered => Some("delivered"),
                _ => match state.endpoints.get(&delivery.endpoint_id) {
                    None => Some("endpoint deleted"),
                    Some(e) if e.disabled => Some("endpoint disabled"),
                    Some(_) => None,
                },
            };
            match reason {
                Some(reason) => skipped.push(view::SkippedDelivery { id: delivery.id, reason: reason.to_string() }),
                None => chosen.push(delivery.id),
            }
        }
        (chosen, skipped)
    };
    let mut replayed = Vec::with_capacity(chosen.len());
    if !chosen.is_empty() {
        let now_ms = ctx.clock.wall_ms();
        let commands = chosen.iter().map(|d| Command::Replay { now_ms, target: ReplayTarget::Delivery(*d) }).collect();
        let Response::Batch(answers) = commit(&ctx, Command::Batch(commands)).await? else {
            return Err(Problem::internal("a batch answered otherwise"));
        };
        // Each one may have changed since it was read: say which went.
        for (delivery, answer) in chosen.iter().zip(answers) {
            let reason = match answer {
                Response::Replayed { .. } => {
                    replayed.push(*delivery);
                    continue;
                }
                Response::NotFound { what } => format!("no {what}"),
                Response::Conflict { detail } => detail,
                other => format!("{other:?}"),
            };
            skipped.push(view::SkippedDelivery { id: *delivery, reason });
        }
    }
    Ok((StatusCode::ACCEPTED, axum::Json(view::EventReplayed { event_id: id, replayed, skipped })))
}
