//! `GET /v1/endpoints/{id}/stats`: an endpoint's recent attempts, by
//! window, as this node counted them from the outcomes it applied
//! (`hookraft_core::state::stats`), with its work and its last failure as
//! `GET /v1/stats/endpoints` shows them.

use std::sync::Arc;

use axum::extract::{Path, State};
use hookraft_core::ids::EndpointId;
use hookraft_core::state::stats::Counts;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::parse_id;
use crate::context::ApiContext;
use crate::openapi::problems::NotFound;
use crate::problem::{ApiResult, Problem};
use crate::views::endpoints::{EndpointStats, FailureCounts, LatencyQuantiles, StatsWindows, WindowCounts};
use crate::views::stats::{self as stats_view, Work};

/// The windows reported, by name and length.
pub const WINDOWS: [(&str, u64); 3] = [("5m", 300_000), ("1h", 3_600_000), ("24h", 86_400_000)];

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new().routes(routes!(stats))
}

fn counts_view(counts: &Counts) -> WindowCounts {
    WindowCounts {
        attempts: counts.attempts,
        successes: counts.successes,
        success_rate: stats_view::success_rate(counts),
        failures: FailureCounts {
            client_4xx: counts.client_errors,
            server_5xx: counts.server_errors,
            timeout: counts.timeouts,
            connect: counts.connect_errors,
            other: counts.other_errors,
        },
        // The upper bound of the histogram bucket each quantile falls in;
        // null without attempts or past the last bound (30 s).
        latency_ms: LatencyQuantiles {
            p50: counts.latency_quantile_ms(0.5),
            p90: counts.latency_quantile_ms(0.9),
            p99: counts.latency_quantile_ms(0.99),
        },
    }
}

/// An endpoint's recent attempts, by window (5 minutes, 1 hour, 24 hours),
/// as the answering node counted them from the outcomes it applied; its
/// work queued, under way (on the answering node) and dead; its last
/// failed attempt.
#[utoipa::path(
    get,
    path = "/v1/endpoints/{id}/stats",
    tag = "endpoints",
    params(("id" = crate::views::EndpointIdText, Path)),
    responses((status = 200, body = EndpointStats), (status = 404, response = NotFound))
)]
async fn stats(State(ctx): State<Arc<ApiContext>>, Path(id): Path<String>) -> ApiResult<axum::Json<EndpointStats>> {
    let id: EndpointId = parse_id(&id)?;
    let now_ms = ctx.clock.wall_ms();
    let in_flight_ids = ctx.in_flight.ids();
    let state = ctx.state.read();
    if !state.endpoints.contains_key(&id) {
        return Err(Problem::not_found(format!("no endpoint {id}")));
    }
    let stats = state.endpoint_stats(&id);
    let [five_minutes, one_hour, one_day] =
        WINDOWS.map(|(_, length_ms)| counts_view(&stats.map(|s| s.window(now_ms, length_ms)).unwrap_or_default()));
    let in_flight = super::stats::in_flight_of(&state, &in_flight_ids, &id);
    let Work { in_flight, queue_depth, dead } = super::stats::work(&state, &id, in_flight);
    Ok(axum::Json(EndpointStats {
        endpoint_id: id,
        node_id: ctx.node_id,
        windows: StatsWindows { five_minutes, one_hour, one_day },
        sender_node_id: state.grant_for(&id).owner,
        last_error: stats.and_then(|s| s.last_error()).map(stats_view::last_error),
        in_flight,
        queue_depth,
        dead,
    }))
}
