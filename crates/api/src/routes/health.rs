//! `/healthz` (the process answers), `/readyz` (it can take writes) and
//! `/metrics` (Prometheus text).

use std::fmt::Write;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;

use crate::context::ApiContext;

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).route("/metrics", get(metrics))
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// `/readyz` does not look at the budgets: a full budget is back-pressure
/// on ingest, not a node that cannot serve (reads, replays, cluster
/// administration and delivery all go on), so a load balancer must not
/// take it out.
///
/// Nor does it go unready for a missing payload key (taking the node out
/// of a load balancer would not send those deliveries either): the body
/// names each key payloads needed that the keyring lacks, for an operator
/// to see, and `/metrics` counts them.
async fn readyz(State(ctx): State<Arc<ApiContext>>) -> (StatusCode, String) {
    let (status, mut body) = if ctx.cluster.ready() {
        (StatusCode::OK, String::from("ready\n"))
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, String::from("not ready\n"))
    };
    for (key_id, failed) in ctx.payloads.missing_keys() {
        let _ = writeln!(
            body,
            "warning: key {key_id} is not in this node's keyring ({failed} payloads could not be opened)"
        );
    }
    (status, body)
}

/// Prometheus text, or OpenMetrics when asked for (`crate::metrics`).
async fn metrics(State(ctx): State<Arc<ApiContext>>, headers: HeaderMap) -> Response {
    crate::metrics::render(&ctx, &headers)
}
