//! hookraft-api: the HTTP face of a node.
//!
//! A tour:
//! - [`context`]: [`ApiContext`], everything handlers need from the node
//!   (state reads, the proposer, the ingest batcher, the cluster view).
//! - [`routes`]: one module per resource (`endpoints`, `events`,
//!   `deliveries`, `cluster`, `health`), each with its own `router()`.
//! - [`problem`]: errors as `application/problem+json`; every failure status is chosen there.
//! - [`extract`]: JSON bodies with problems for bad input and the 1 MiB limit.
//! - [`views`]: the JSON shapes of `docs/API.md`.
//! - [`validate`]: endpoint settings checks. [`auth`]: the bearer token.
//! - [`admission`]: the budgets that refuse ingest a node cannot absorb.
//! - [`metrics`]: the node's Prometheus registry, rendered by `/metrics`.
//! - [`routes::ui`]: the operator dashboard under `/ui`, static files
//!   embedded in the binary, rendered in the browser from `/v1`.
//!
//! Handlers never touch Raft or actors: they read the replicated state and
//! commit commands through the context.

pub mod admission;
pub mod auth;
pub mod context;
pub mod extract;
pub mod metrics;
pub mod problem;
pub mod routes;
pub mod validate;
pub mod views;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;

pub use context::{ApiContext, ApiMetrics, ClusterView, Ingest};

/// The node's full HTTP router.
pub fn router(ctx: Arc<ApiContext>) -> Router {
    let v1 = Router::new()
        .merge(routes::endpoints::router())
        .merge(routes::events::router())
        .merge(routes::event_history::router())
        .merge(routes::endpoint_stats::router())
        .merge(routes::deliveries::router())
        .merge(routes::cluster::router())
        .merge(routes::payloads::router())
        .merge(routes::sources::router())
        .merge(routes::stats::router())
        .route_layer(axum::middleware::from_fn_with_state(ctx.clone(), auth::require_token));
    Router::new()
        .merge(v1)
        .merge(routes::health::router())
        // No token: the provider's signature authenticates each request.
        .merge(routes::inbound::router())
        // No token: static files that hold no data; the pages call `/v1`
        // with the operator's token from the browser.
        .merge(routes::ui::router())
        .fallback(|| async { problem::Problem::not_found("no such route; see docs/API.md") })
        .layer(DefaultBodyLimit::max(extract::BODY_BYTES_MAX))
        .with_state(ctx)
}
