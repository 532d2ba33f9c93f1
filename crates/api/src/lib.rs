//! hookraft-api: the HTTP face of a node.
//!
//! A tour:
//! - [`context`]: [`ApiContext`], everything handlers need from the node
//!   (state reads, the proposer, the ingest batcher, the cluster view).
//! - [`routes`]: one module per resource (`endpoints`, `events`,
//!   `deliveries`, `cluster`, `health`), each with its own `router()`.
//! - [`problem`]: errors as `application/problem+json`; every failure status is chosen there.
//! - [`extract`]: JSON bodies with problems for bad input and the 1 MiB limit.
//! - [`views`]: the JSON shapes of `docs/API.md`, typed: the document's schemas.
//! - [`openapi`]: the OpenAPI 3.1 document derived from the handlers
//!   (`GET /openapi.json`) and its reference page (`GET /docs`).
//! - [`validate`]: endpoint settings checks. [`auth`]: bearer tokens and their scopes.
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
pub mod openapi;
pub mod problem;
pub mod routes;
pub mod validate;
pub mod views;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use utoipa_axum::router::OpenApiRouter;

pub use context::{ApiContext, ApiMetrics, ClusterView, Ingest, LogFigures};

/// The `/v1` routes, each with its part of the document; behind the token.
pub fn v1_routes() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new()
        .merge(routes::endpoints::router())
        .merge(routes::events::router())
        .merge(routes::event_history::router())
        .merge(routes::endpoint_stats::router())
        .merge(routes::deliveries::router())
        .merge(routes::cluster::router())
        .merge(routes::payloads::router())
        .merge(routes::sources::router())
        .merge(routes::stats::router())
}

/// The routes without an API token, each with its part of the document.
pub fn public_routes() -> OpenApiRouter<Arc<ApiContext>> {
    OpenApiRouter::new()
        .merge(routes::health::router())
        // The provider's signature authenticates each request.
        .merge(routes::inbound::router())
        // They describe the API and hold no data.
        .merge(openapi::router())
        // Static files that hold no data; the pages call `/v1` with the
        // operator's token from the browser.
        .merge(routes::ui::router())
}

/// The node's full HTTP router (but the node-to-node routes,
/// `routes::internal`, which have their own state). Its routes are those
/// of [`openapi::document`], from the same functions.
pub fn router(ctx: Arc<ApiContext>) -> Router {
    let (v1, _) = v1_routes().split_for_parts();
    let (public, _) = public_routes().split_for_parts();
    Router::new()
        .merge(
            v1.route_layer(axum::middleware::from_fn_with_state(ctx.clone(), history_fault))
                .route_layer(axum::middleware::from_fn_with_state(ctx.clone(), auth::require_token)),
        )
        .merge(public)
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(ctx.clone(), auth::require_loopback_host))
        .layer(axum::middleware::map_response(problem::ensure_problem))
        .layer(DefaultBodyLimit::max(extract::BODY_BYTES_MAX))
        .with_state(ctx)
}

/// A read that met a failing history store answers 503, not what it read
/// (which may be short of what the history holds). Only reads and replays
/// read the history; other requests pass unchecked.
async fn history_fault(
    axum::extract::State(ctx): axum::extract::State<Arc<ApiContext>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let reads = request.method() == axum::http::Method::GET || request.uri().path().ends_with("/replay");
    let response = next.run(request).await;
    if !reads {
        return response;
    }
    match ctx.state.read().history().fault() {
        Some(why) => problem::Problem::unavailable(format!(
            "this node's history store failed ({why}); it cannot read finished events: ask another node"
        ))
        .into_response(),
        None => response,
    }
}

/// What no route matches: a 404 problem. A path under `/ui/` deeper than
/// one segment is answered as the dashboard answers a file it does not
/// have, with its headers: its files are served at `/ui/{file}`, one
/// segment, because the document can name no catch-all (`routes::ui`).
async fn no_route(uri: axum::http::Uri) -> axum::response::Response {
    use axum::response::IntoResponse;
    match uri.path().strip_prefix("/ui/") {
        Some(rest) => routes::ui::no_file(rest),
        None => problem::Problem::not_found("no such route; see /docs or docs/API.md").into_response(),
    }
}
