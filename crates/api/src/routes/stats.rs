//! `GET /v1/stats` (the cluster's events accepted and deliveries delivered,
//! retried and dead per minute over the last hour, with the queue and the
//! dead letters held) and `GET /v1/stats/endpoints` (every endpoint's
//! health in one paged listing): what an operator looks at first, and what
//! the dashboard draws.
//!
//! Everything here is read from this node's replica: the per-minute counts
//! and the attempt statistics are counted by apply
//! (`hookraft_core::state::{throughput, stats}`), so every node answers
//! alike, except `in_flight`, which only the node sending for an endpoint
//! knows (`sender_node_id` says which node that is).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use axum::extract::{Query, State};
use hookraft_core::ids::{DeliveryId, EndpointId};
use hookraft_core::model::Endpoint;
use hookraft_core::state::ClusterState;
use hookraft_core::state::throughput::{THROUGHPUT_MINUTES, Tally};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::context::ApiContext;
use crate::openapi::problems::BadRequest;
use crate::problem::{ApiResult, Problem};
use crate::views::stats::{self as view, EndpointHealth, EndpointHealthPage, StatsOverview, Work};
use crate::views::{self, Timestamp};

/// Page size bounds of `GET /v1/stats/endpoints`.
pub const HEALTH_LIMIT_DEFAULT: usize = 100;
pub const HEALTH_LIMIT_MAX: usize = 1_000;
/// The window of an endpoint's success rate and latency in the listing.
const HEALTH_WINDOW_MS: u64 = 3_600_000;

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new().routes(routes!(overview)).routes(routes!(endpoints))
}

/// The cluster's events accepted and deliveries delivered, retried and
/// dead per minute over the last hour, with the queue and the dead letters
/// held now.
#[utoipa::path(
    get,
    path = "/v1/stats",
    tag = "stats",
    responses((status = 200, body = StatsOverview))
)]
async fn overview(State(ctx): State<Arc<ApiContext>>) -> axum::Json<StatsOverview> {
    let now_ms = ctx.clock.wall_ms();
    let state = ctx.state.read();
    let minutes = state.throughput().per_minute(now_ms, THROUGHPUT_MINUTES);
    axum::Json(StatsOverview {
        node_id: ctx.node_id,
        minutes: minutes.iter().map(|(start, tally)| view::minute(*start, tally)).collect(),
        last_hour: view::tally(&total(&minutes)),
        queue_depth: state.usage().pending,
        dead: state.dead_count(),
        endpoints: state.endpoints.len(),
    })
}

/// The page of `GET /v1/stats/endpoints`.
#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct HealthQuery {
    /// Page size, default 100.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    limit: Option<String>,
    /// The `next_cursor` of the page before (an endpoint id); empty or
    /// absent: the first page.
    cursor: Option<String>,
}

/// Every endpoint's health, in id order: its state and breaker, success
/// rate and latency over the last hour, work queued, under way (on the
/// answering node) and dead, and its last failed attempt.
#[utoipa::path(
    get,
    path = "/v1/stats/endpoints",
    tag = "stats",
    params(HealthQuery),
    responses((status = 200, body = EndpointHealthPage), (status = 400, response = BadRequest))
)]
async fn endpoints(
    State(ctx): State<Arc<ApiContext>>,
    query: Result<Query<HealthQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<axum::Json<EndpointHealthPage>> {
    let Query(q) = query.map_err(|e| Problem::malformed(e.body_text()))?;
    let limit = crate::validate::page_limit(q.limit.as_deref(), HEALTH_LIMIT_DEFAULT, HEALTH_LIMIT_MAX)?;
    let after: Bound<EndpointId> =
        crate::validate::page_cursor(q.cursor.as_deref())?.map_or(Bound::Unbounded, Bound::Excluded);
    let now_ms = ctx.clock.wall_ms();
    let in_flight_ids = ctx.in_flight.ids();
    let state = ctx.state.read();
    let in_flight = in_flight_by_endpoint(&state, &in_flight_ids);
    let mut page = state.endpoints.range((after, Bound::Unbounded));
    let data: Vec<EndpointHealth> = page
        .by_ref()
        .take(limit)
        .map(|(id, endpoint)| health(&state, endpoint, in_flight.get(id).copied().unwrap_or(0), now_ms))
        .collect();
    let next_cursor = match page.next() {
        Some(_) => data.last().map(|row| row.endpoint_id),
        None => None,
    };
    Ok(axum::Json(EndpointHealthPage { node_id: ctx.node_id, data, next_cursor }))
}

/// How many attempts this node has under way for each endpoint.
pub(crate) fn in_flight_by_endpoint(state: &ClusterState, in_flight: &[DeliveryId]) -> BTreeMap<EndpointId, usize> {
    let mut counts = BTreeMap::new();
    for delivery in in_flight.iter().filter_map(|id| state.deliveries.get(id)) {
        *counts.entry(delivery.endpoint_id).or_insert(0) += 1;
    }
    counts
}

/// How many attempts this node has under way for `endpoint`.
pub(crate) fn in_flight_of(state: &ClusterState, in_flight: &[DeliveryId], endpoint: &EndpointId) -> usize {
    in_flight.iter().filter(|id| state.deliveries.get(id).is_some_and(|d| d.endpoint_id == *endpoint)).count()
}

/// One endpoint's health (see [`EndpointHealth`]).
pub(crate) fn health(state: &ClusterState, endpoint: &Endpoint, in_flight: usize, now_ms: u64) -> EndpointHealth {
    let id = &endpoint.id;
    let stats = state.endpoint_stats(id);
    let hour = stats.map(|s| s.window(now_ms, HEALTH_WINDOW_MS)).unwrap_or_default();
    let Work { in_flight, queue_depth, dead } = work(state, id, in_flight);
    EndpointHealth {
        endpoint_id: *id,
        url: endpoint.url.clone(),
        description: endpoint.description.clone(),
        disabled: endpoint.disabled,
        disabled_reason: endpoint.disabled_reason.clone(),
        breaker: views::breaker(endpoint),
        failing_since: Timestamp::from_opt_ms(endpoint.failing_since_ms),
        last_hour: view::hour(&hour),
        sender_node_id: state.grant_for(id).owner,
        last_error: stats.and_then(|s| s.last_error()).map(view::last_error),
        in_flight,
        queue_depth,
        dead,
    }
}

/// An endpoint's work: `in_flight` attempts under way on this node, its
/// deliveries queued (pending or retrying) and dead.
pub(crate) fn work(state: &ClusterState, id: &EndpointId, in_flight: usize) -> Work {
    Work { in_flight, queue_depth: state.active.get(id).map_or(0, |a| a.len()), dead: state.dead_count_of(id) }
}

fn total(minutes: &[(u64, Tally)]) -> Tally {
    minutes.iter().fold(Tally::default(), |sum, (_, t)| Tally {
        accepted: sum.accepted + t.accepted,
        delivered: sum.delivered + t.delivered,
        retried: sum.retried + t.retried,
        dead: sum.dead + t.dead,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookraft_core::command::{Command, IngestResult, NewEvent, Outcome, Response};
    use hookraft_core::ids::{EventId, SHARD_COUNT};
    use hookraft_core::model::AttemptRecord;
    use hookraft_core::retry::{Decision, RetryRule};
    use hookraft_core::signing::Secret;
    use hookraft_core::state::stats::Counts;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use serde_json::json;

    /// One endpoint on shards owned by node 1, two deliveries to it; the
    /// first failed once with a 503 and waits for its retry.
    fn one_failure() -> (ClusterState, EndpointId, Vec<DeliveryId>) {
        let mut rng = StdRng::seed_from_u64(5);
        let mut state = ClusterState::default();
        state.apply(&Command::AssignShards { now_ms: 1, grants: (0..SHARD_COUNT).map(|s| (s, 1)).collect() });
        let id = EndpointId::generate(1, &mut rng);
        let secret = Secret::from_key(vec![7; 32]).expect("secret");
        let endpoint = Endpoint::new(id, "https://example.com/hook".into(), (&secret).into(), 1);
        state.apply(&Command::RegisterEndpoint { endpoint: Box::new(endpoint) });
        let events = (0..2)
            .map(|_| NewEvent {
                id: EventId::generate(10, &mut rng),
                event_type: "t".into(),
                payload: "{}".into(),
                idempotency_key: None,
                endpoint_ids: None,
                ordering_key: None,
                inbound: None,
            })
            .collect();
        let Response::Ingested { results } = state.apply(&Command::IngestEvents { now_ms: 10, events }) else {
            panic!("ingested")
        };
        let deliveries: Vec<DeliveryId> = results
            .into_iter()
            .flat_map(|r| match r {
                IngestResult::Created { deliveries, .. } => deliveries,
                other => panic!("{other:?}"),
            })
            .map(|(d, _)| d)
            .collect();
        let token = state.grant_for(&id).token;
        let attempt = AttemptRecord {
            node_id: 1,
            fencing_token: token,
            started_at_ms: 20,
            latency_ms: 40,
            status_code: Some(503),
            error: None,
            response_excerpt: Some("busy".into()),
        };
        let outcome = Outcome {
            delivery_id: deliveries[0],
            shard: id.shard(),
            token,
            attempt,
            decision: Decision::Retry { at_ms: 5_000, rule: RetryRule::Backoff },
            breaker: None,
        };
        state.apply(&Command::RecordOutcomes { node_id: 1, now_ms: 60, outcomes: vec![outcome] });
        (state, id, deliveries)
    }

    #[test]
    fn an_endpoints_health_has_its_queue_its_last_failure_and_its_sender() {
        let (state, id, deliveries) = one_failure();
        let in_flight = in_flight_by_endpoint(&state, &deliveries[1..]);
        assert_eq!(in_flight.get(&id), Some(&1));
        let row = health(&state, &state.endpoints[&id], in_flight[&id], 1_000);
        assert_eq!((row.queue_depth, row.dead, row.in_flight), (2, 0, 1));
        assert_eq!(row.sender_node_id, Some(1));
        assert_eq!(row.last_hour.attempts, 1);
        assert_eq!(row.last_hour.success_rate, Some(0.0));
        let last = row.last_error.as_ref().expect("a last error");
        assert_eq!((last.status_code, last.response_body.as_deref()), (Some(503), Some("busy")));
        assert_eq!(last.delivery_id, deliveries[0]);
        // The names the dashboard reads.
        let view = serde_json::to_value(&row).expect("serializes");
        assert_eq!(view["breaker"]["state"], "closed");
        assert_eq!(view["last_error"]["status_code"], 503);
        assert_eq!(view["last_error"]["delivery_id"], json!(deliveries[0]));
        assert_eq!(view["last_error"]["at"], "1970-01-01T00:00:00.060Z");
        for field in ["url", "description", "disabled", "disabled_reason", "failing_since", "queue_depth", "in_flight"]
        {
            assert!(view.get(field).is_some(), "{field} in {view}");
        }
        assert!(view.get("secret").is_none(), "no secret in a health row: {view}");
        // A delivery id that is no longer in the state counts nowhere.
        let gone = DeliveryId::parse("dlv_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id");
        assert!(in_flight_by_endpoint(&state, &[gone]).is_empty());
    }

    #[test]
    fn a_minute_reads_as_its_start_and_its_four_counts_and_the_hour_sums_them() {
        let minutes = [
            (60_000, Tally { accepted: 3, delivered: 2, retried: 1, dead: 0 }),
            (120_000, Tally { accepted: 1, delivered: 0, retried: 4, dead: 2 }),
        ];
        let minute = serde_json::to_value(view::minute(minutes[0].0, &minutes[0].1)).expect("serializes");
        assert_eq!(
            minute,
            json!({"at": "1970-01-01T00:01:00.000Z", "accepted": 3, "delivered": 2, "retried": 1, "dead": 0})
        );
        assert_eq!(total(&minutes), Tally { accepted: 4, delivered: 2, retried: 5, dead: 2 });
        assert_eq!(total(&[]), Tally::default());
        let hour = serde_json::to_value(view::tally(&total(&minutes))).expect("serializes");
        assert_eq!(hour, json!({"accepted": 4, "delivered": 2, "retried": 5, "dead": 2}));
    }

    #[test]
    fn an_hour_without_attempts_has_no_rate_and_no_latency() {
        let hour = serde_json::to_value(view::hour(&Counts::default())).expect("serializes");
        assert_eq!(hour, json!({"attempts": 0, "success_rate": null, "latency_ms": {"p50": null, "p99": null}}));
    }
}
