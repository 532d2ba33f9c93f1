//! `/healthz` (the process answers), `/readyz` (it can take writes) and
//! `/metrics` (Prometheus text).

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::context::ApiContext;

pub fn router() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new().routes(routes!(healthz)).routes(routes!(readyz)).routes(routes!(metrics))
}

/// The process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain"))
)]
async fn healthz() -> &'static str {
    "ok\n"
}

/// The node can take writes: it knows a leader, has applied the log and
/// holds a valid lease.
///
/// It does not look at the budgets: a full budget is back-pressure
/// on ingest, not a node that cannot serve (reads, replays, cluster
/// administration and delivery all go on), so a load balancer must not
/// take it out.
///
/// Nor does it go unready for a missing payload key (taking the node out
/// of a load balancer would not send those deliveries either): the body
/// names each key payloads needed that the keyring lacks, for an operator
/// to see, and `/metrics` counts them.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "`ready`, then a warning line per payload key this node lacks.",
            body = String, content_type = "text/plain"),
        (status = 503, description = "`not ready`: no leader, the log not applied yet, or no valid lease.",
            body = String, content_type = "text/plain"),
    )
)]
async fn readyz(State(ctx): State<Arc<ApiContext>>) -> (StatusCode, String) {
    let (status, mut body) = if ctx.cluster.ready() {
        (StatusCode::OK, String::from("ready\n"))
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, String::from("not ready\n"))
    };
    for (key_id, failed) in ctx.payloads.missing_keys() {
        let _ = writeln!(
            body,
            "warning: key {key_id} is not in this node's keyring ({failed} opens of payloads or secrets failed)"
        );
    }
    (status, body)
}

/// This node's metrics: Prometheus text, or OpenMetrics to a scraper that
/// asks for it (`Accept: application/openmetrics-text`); the families are
/// listed in docs/METRICS.md.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "The node's metrics (docs/METRICS.md).",
        content((String = "text/plain"), (String = "application/openmetrics-text"))))
)]
async fn metrics(State(ctx): State<Arc<ApiContext>>, headers: HeaderMap) -> Response {
    crate::metrics::render(&ctx, &headers)
}
