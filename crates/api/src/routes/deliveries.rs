//! `/v1/deliveries`: list (the dead-letter queue is `state=dead`), read with
//! the timeline, replay one.

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hookraft_core::command::{Command, ReplayTarget};
use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::lifecycle::lifecycle;
use hookraft_core::model::{Delivery, DeliveryState, Event};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{commit, parse_id};
use crate::context::ApiContext;
use crate::openapi::problems::{BadRequest, Conflict, NotFound, Unavailable};
use crate::problem::{ApiResult, Problem};
use crate::validate;
use crate::views::{self, DeliveryIdText, EndpointIdText, EventIdText, deliveries as view};

/// Page size bounds of `GET /v1/deliveries`.
pub const LIMIT_DEFAULT: usize = 50;
pub const LIMIT_MAX: usize = 1_000;

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new().routes(routes!(list)).routes(routes!(read)).routes(routes!(replay))
}

/// The order of a delivery listing.
#[derive(utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // a schema: the handler reads `order` as text
enum ListOrder {
    Oldest,
    Newest,
}

/// The filters of `GET /v1/deliveries`; every one optional, all must hold.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// `state=dead` is the dead-letter queue.
    #[param(value_type = Option<view::StateView>)]
    state: Option<String>,
    #[param(value_type = Option<EndpointIdText>)]
    endpoint_id: Option<String>,
    #[param(value_type = Option<EventIdText>)]
    event_id: Option<String>,
    /// The type of the delivery's event.
    r#type: Option<String>,
    /// Created at or after this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    since: Option<String>,
    /// Created before this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    until: Option<String>,
    /// `oldest` first (the default) or `newest` first.
    #[param(value_type = Option<ListOrder>, inline)]
    order: Option<String>,
    /// Page size, default 50.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    limit: Option<String>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
}

/// `order`: `oldest` first (the default) or `newest` first.
fn newest_first(order: Option<&str>) -> ApiResult<bool> {
    match order {
        None | Some("oldest") => Ok(false),
        Some("newest") => Ok(true),
        Some(other) => Err(Problem::malformed(format!("order must be `oldest` or `newest`, got `{other}`"))),
    }
}

/// List deliveries in id order, without timelines; at most 10,000 are
/// looked at per call, so a short page with a `next_cursor` means go on.
#[utoipa::path(
    get,
    path = "/v1/deliveries",
    tag = "deliveries",
    params(ListQuery),
    responses((status = 200, body = view::DeliveryPage), (status = 400, response = BadRequest))
)]
async fn list(
    State(ctx): State<Arc<ApiContext>>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<axum::Json<view::DeliveryPage>> {
    let Query(q) = query.map_err(|e| Problem::malformed(e.body_text()))?;
    let state_filter = q.state.as_deref().map(validate::delivery_state).transpose()?;
    let endpoint: Option<EndpointId> = validate::query_id("endpoint_id", q.endpoint_id.as_deref())?;
    let event: Option<EventId> = validate::query_id("event_id", q.event_id.as_deref())?;
    let limit = validate::page_limit(q.limit.as_deref(), LIMIT_DEFAULT, LIMIT_MAX)?;
    let cursor: Option<DeliveryId> = validate::page_cursor(q.cursor.as_deref())?;
    let since_ms = validate::query_time("since", q.since.as_deref())?.unwrap_or(0);
    let until_ms = validate::query_time("until", q.until.as_deref())?.unwrap_or(u64::MAX);
    let newest = newest_first(q.order.as_deref())?;
    // Past the cursor in the order asked for.
    let beyond = |id: &DeliveryId| cursor.as_ref().is_none_or(|c| if newest { id < c } else { id > c });

    let state = ctx.state.read();
    let keep = |d: &Delivery| {
        endpoint.as_ref().is_none_or(|e| &d.endpoint_id == e)
            && event.as_ref().is_none_or(|e| &d.event_id == e)
            && (since_ms..until_ms).contains(&d.created_at_ms)
            && q.r#type.as_deref().is_none_or(|t| state.event(&d.event_id).is_some_and(|e| &*e.event_type == t))
            && state_filter.is_none_or(|s| views::effective_state(&ctx, d) == s)
    };
    let page = match (&event, &endpoint, state_filter) {
        // One event's deliveries: a handful, whatever the state holds.
        (Some(event), _, _) => {
            let mut ids: Vec<DeliveryId> = state.event(event).map(|e| e.deliveries.to_vec()).unwrap_or_default();
            ids.sort_unstable();
            if newest {
                ids.reverse();
            }
            let ids = ids.into_iter().filter(|id| beyond(id));
            page_of(ids.filter_map(|id| state.delivery(&id)), keep, limit, LIST_SCAN_MAX)
        }
        // The dead-letter queue of one endpoint: its index.
        (None, Some(endpoint), Some(DeliveryState::Dead)) if !newest => {
            let dead = state.dead_of(endpoint, cursor.as_ref()).filter_map(|id| state.delivery(&id));
            page_of(dead, keep, limit, LIST_SCAN_MAX)
        }
        (None, Some(endpoint), Some(DeliveryState::Dead)) => {
            let dead = state.dead_of_newest_first(endpoint, cursor.as_ref());
            page_of(dead.filter_map(|id| state.delivery(&id)), keep, limit, LIST_SCAN_MAX)
        }
        _ if newest => {
            let upper = cursor.map_or(Bound::Unbounded, Bound::Excluded);
            page_of(state.deliveries_in((Bound::Unbounded, upper), true), keep, limit, LIST_SCAN_MAX)
        }
        _ => {
            let lower = cursor.map_or(Bound::Unbounded, Bound::Excluded);
            page_of(state.deliveries_in((lower, Bound::Unbounded), false), keep, limit, LIST_SCAN_MAX)
        }
    };
    let data = page
        .rows
        .iter()
        .map(|d| {
            let event = state.event(&d.event_id);
            let mut row = views::delivery(&ctx, d, ordering_key(d, event.as_deref()), None);
            row.event_type = event.as_ref().map(|e| e.event_type.to_string());
            row
        })
        .collect();
    Ok(axum::Json(view::DeliveryPage { data, next_cursor: page.next_cursor }))
}

/// The ordering key of an ordered delivery, from its event.
fn ordering_key<'a>(delivery: &Delivery, event: Option<&'a Event>) -> Option<&'a str> {
    event.filter(|_| delivery.sequence != 0)?.ordering_key.as_deref()
}

/// Deliveries one listing looks at, at most, filtered or not: a filter that
/// matches nothing answers an empty page and a cursor after this many,
/// instead of reading every delivery under the state's read lock.
pub const LIST_SCAN_MAX: usize = 10_000;

/// A page of a listing and where the next one starts (`None`: nothing
/// after it).
struct Page<'a> {
    rows: Vec<Cow<'a, Delivery>>,
    next_cursor: Option<DeliveryId>,
}

/// Up to `limit` of `candidates` (in id order) that `keep` keeps, looking
/// at `scan_max` of them at most. The cursor is set when more may follow:
/// after the last row of a full page, or after the last delivery looked
/// at when the bound stopped the scan, so a short or empty page with a
/// cursor means "keep going".
fn page_of<'a>(
    candidates: impl Iterator<Item = Cow<'a, Delivery>>,
    keep: impl Fn(&Delivery) -> bool,
    limit: usize,
    scan_max: usize,
) -> Page<'a> {
    let mut rows: Vec<Cow<'a, Delivery>> = Vec::with_capacity(limit.min(64));
    let mut candidates = candidates.peekable();
    let mut looked = 0;
    while let Some(d) = candidates.next() {
        looked += 1;
        let id = d.id;
        if keep(&d) {
            if rows.len() == limit {
                // A match beyond the page: there is a next page.
                let next_cursor = rows.last().map(|d| d.id);
                return Page { rows, next_cursor };
            }
            rows.push(d);
        }
        if looked >= scan_max && candidates.peek().is_some() {
            return Page { rows, next_cursor: Some(id) };
        }
    }
    Page { rows, next_cursor: None }
}

/// Read a delivery with its timeline.
#[utoipa::path(
    get,
    path = "/v1/deliveries/{id}",
    tag = "deliveries",
    params(("id" = DeliveryIdText, Path)),
    responses((status = 200, body = view::DeliveryView), (status = 404, response = NotFound))
)]
async fn read(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<axum::Json<view::DeliveryView>> {
    let id: DeliveryId = parse_id(&id)?;
    let state = ctx.state.read();
    let delivery = state.delivery(&id).ok_or_else(|| Problem::not_found(format!("no delivery {id}")))?;
    let event = state.event(&delivery.event_id);
    let stages = lifecycle(&delivery, event.as_deref(), &state.grant_for(&delivery.endpoint_id));
    Ok(axum::Json(views::delivery(&ctx, &delivery, ordering_key(&delivery, event.as_deref()), Some(&stages))))
}

/// Replay a settled delivery: it is queued again.
#[utoipa::path(
    post,
    path = "/v1/deliveries/{id}/replay",
    tag = "deliveries",
    params(("id" = DeliveryIdText, Path)),
    responses(
        (status = 202, body = view::ReplayedDelivery),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 503, response = Unavailable),
    )
)]
async fn replay(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<impl IntoResponse> {
    let id: DeliveryId = parse_id(&id)?;
    let now_ms = ctx.clock.wall_ms();
    commit(&ctx, Command::Replay { now_ms, target: ReplayTarget::Delivery(id) }).await?;
    Ok((StatusCode::ACCEPTED, axum::Json(view::ReplayedDelivery { id, state: view::StateView::Pending })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookraft_core::ClusterState;
    use hookraft_core::command::{EndpointPatch, NewEvent};
    use hookraft_core::ids::SHARD_COUNT;
    use hookraft_core::model::Endpoint;
    use hookraft_core::signing::Secret;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    /// A state with endpoints `a` and `b`: `before` deliveries to `a`, then
    /// one to `b`, ids in that order; `dead_a` of `a`'s are dead (sent while
    /// it was disabled).
    fn backlog(before: usize, dead_a: usize) -> (ClusterState, EndpointId, EndpointId) {
        let mut rng = StdRng::seed_from_u64(3);
        let mut state = ClusterState::default();
        state.apply(&Command::AssignShards { now_ms: 1, grants: (0..SHARD_COUNT).map(|s| (s, 1)).collect() });
        let mut ids = [EndpointId::generate(1, &mut rng), EndpointId::generate(1, &mut rng)];
        ids.sort();
        for id in ids {
            let secret = Secret::from_key(vec![7; 32]).expect("secret");
            let endpoint = Endpoint::new(id, "https://example.com/hook".into(), (&secret).into(), 1);
            state.apply(&Command::RegisterEndpoint { endpoint: Box::new(endpoint) });
        }
        let [a, b] = ids;
        let mut event = |at_ms: u64, to: EndpointId| NewEvent {
            id: EventId::generate(at_ms, &mut rng),
            event_type: "t".into(),
            payload: "{}".into(),
            idempotency_key: None,
            endpoint_ids: Some(vec![to]),
            ordering_key: None,
            inbound: None,
        };
        let disabled = |disabled| EndpointPatch { disabled: Some(disabled), ..Default::default() };
        state.apply(&Command::UpdateEndpoint { id: a, patch: disabled(true), now_ms: 2 });
        let dead: Vec<NewEvent> = (0..dead_a).map(|i| event(1_000 + i as u64, a)).collect();
        state.apply(&Command::IngestEvents { now_ms: 3, events: dead });
        state.apply(&Command::UpdateEndpoint { id: a, patch: disabled(false), now_ms: 4 });
        let pending: Vec<NewEvent> = (dead_a..before).map(|i| event(1_000 + i as u64, a)).collect();
        state.apply(&Command::IngestEvents { now_ms: 5, events: pending });
        let last = event(1_000 + before as u64, b);
        state.apply(&Command::IngestEvents { now_ms: 6, events: vec![last] });
        assert_eq!(state.delivery_count(), before + 1);
        (state, a, b)
    }

    fn all_after(state: &ClusterState, after: Option<DeliveryId>) -> impl Iterator<Item = Cow<'_, Delivery>> {
        let after = after.map_or(Bound::Unbounded, Bound::Excluded);
        state.deliveries_in((after, Bound::Unbounded), false)
    }

    #[test]
    fn a_filter_that_matches_nothing_stops_at_the_bound_with_a_cursor_until_the_end() {
        let (state, _, _) = backlog(2 * LIST_SCAN_MAX + 5, 0);
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = page_of(all_after(&state, cursor), |_| false, 50, LIST_SCAN_MAX);
            pages += 1;
            assert!(page.rows.is_empty());
            match page.next_cursor {
                Some(next) => {
                    assert!(cursor.is_none_or(|c| next > c), "the cursor moves forward");
                    cursor = Some(next);
                }
                None => break,
            }
        }
        assert_eq!(pages, 3, "10,000 + 10,000 + 6 deliveries looked at");
    }

    #[test]
    fn following_cursors_finds_a_match_placed_past_the_bound() {
        let (state, _, b) = backlog(LIST_SCAN_MAX + 5, 0);
        let keep = |d: &Delivery| d.endpoint_id == b;
        let first = page_of(all_after(&state, None), keep, 50, LIST_SCAN_MAX);
        assert!(first.rows.is_empty(), "b's delivery is past the bound");
        let cursor = first.next_cursor.expect("a cursor with the empty page");
        let second = page_of(all_after(&state, Some(cursor)), keep, 50, LIST_SCAN_MAX);
        assert_eq!(second.rows.iter().map(|d| d.endpoint_id).collect::<Vec<_>>(), vec![b]);
        assert_eq!(second.next_cursor, None);
    }

    #[test]
    fn a_full_page_has_a_cursor_after_its_last_row_and_the_last_page_none() {
        let (state, a, _) = backlog(7, 0);
        let keep = |d: &Delivery| d.endpoint_id == a;
        let first = page_of(all_after(&state, None), keep, 5, LIST_SCAN_MAX);
        assert_eq!(first.rows.len(), 5);
        assert_eq!(first.next_cursor, Some(first.rows[4].id));
        let second = page_of(all_after(&state, first.next_cursor), keep, 5, LIST_SCAN_MAX);
        assert_eq!(second.rows.len(), 2);
        assert_eq!(second.next_cursor, None);
    }

    #[test]
    fn the_dead_letter_queue_of_one_endpoint_reads_only_its_dead_deliveries() {
        // 3 dead of `a` first, then more pending than the bound.
        let (state, a, _) = backlog(LIST_SCAN_MAX + 10, 3);
        let dead = state.dead_of(&a, None).filter_map(|id| state.delivery(&id));
        let page = page_of(dead, |d| d.state == DeliveryState::Dead, 2, LIST_SCAN_MAX);
        assert_eq!(page.rows.len(), 2);
        let cursor = page.next_cursor.expect("one more dead delivery");
        let rest = state.dead_of(&a, Some(&cursor)).filter_map(|id| state.delivery(&id));
        let page = page_of(rest, |d| d.state == DeliveryState::Dead, 2, LIST_SCAN_MAX);
        assert_eq!(page.rows.len(), 1);
        assert_eq!(page.next_cursor, None, "the pending deliveries are never looked at");
    }
}
