//! `/metrics`: the node's one `prometheus-client` registry and its
//! rendering (docs/METRICS.md lists every family).
//!
//! What the node counts as it goes (the API's counters, the endpoint
//! actors', the lifecycle tallies of the applies) is registered once, when
//! the node builds its [`ApiContext`]; what is read from the node at each
//! scrape (Raft, the lease, the budgets, the payload keys, the replicated
//! state, the per-endpoint series) comes from one collector
//! ([`scrape::Scrape`]). No global registry: two nodes in one process (the
//! simulator's) keep apart.
//!
//! A scrape that asks for OpenMetrics (`Accept: application/openmetrics-text`,
//! as Prometheus does) gets it; anything else gets the Prometheus text
//! format 0.0.4. Both carry the same families and samples.

mod endpoints;
mod scrape;

use std::sync::Weak;

use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use hookraft_delivery::metrics::DeliveryMetrics;
use prometheus_client::encoding::{prometheus_text, text as openmetrics_text};
use prometheus_client::registry::{Registry, Unit};

pub use endpoints::{
    EndpointRow, OTHER_ENDPOINTS, TOP_ENDPOINTS_DEFAULT, TOP_ENDPOINTS_MAX, TopEndpoints, top_endpoints,
};

use crate::context::{ApiContext, ApiMetrics};

/// Upper bounds (s) of the ingest commit latency histogram's buckets.
pub const COMMIT_LATENCY_BUCKETS_S: [f64; 12] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// The node's registry: `api` and `delivery` registered, and a collector
/// that reads the rest from the context at each scrape. The collector
/// holds `ctx` weakly: the context owns the registry.
pub fn registry(ctx: Weak<ApiContext>, api: &ApiMetrics, delivery: &DeliveryMetrics) -> Registry {
    let mut registry = Registry::default();
    register_api(&mut registry, api);
    delivery.register(&mut registry);
    registry.register_collector(Box::new(scrape::Scrape::new(ctx)));
    registry
}

fn register_api(registry: &mut Registry, m: &ApiMetrics) {
    for (name, help, counter) in [
        ("hookraft_ingest_accepted", "Events accepted (committed)", &m.events_accepted_total),
        ("hookraft_ingest_rejected", "Event posts refused with a problem", &m.events_rejected_total),
        (
            "hookraft_ingest_idempotent_replays",
            "Posts answered from an earlier Idempotency-Key",
            &m.events_idempotent_replays_total,
        ),
        ("hookraft_ingest_unavailable", "Posts answered 503 (no leader)", &m.ingest_unavailable_total),
        ("hookraft_inbound_accepted", "Provider requests committed as new events", &m.inbound_accepted_total),
        (
            "hookraft_inbound_duplicates",
            "Provider requests for an event id already committed",
            &m.inbound_duplicates_total,
        ),
        (
            "hookraft_inbound_bad_signature",
            "Provider requests whose signature did not hold",
            &m.inbound_bad_signature_total,
        ),
        (
            "hookraft_inbound_refused",
            "Provider requests refused by an allowlist, a rate limit or a disabled source",
            &m.inbound_refused_total,
        ),
        ("hookraft_inbound_rejected", "Provider requests refused otherwise", &m.inbound_rejected_total),
    ] {
        registry.register(name, help, counter.clone());
    }
    registry.register_with_unit(
        "hookraft_commit_latency",
        "Time from an event post's admission to its events committed and applied",
        Unit::Seconds,
        m.commit_latency.clone(),
    );
}

/// The format a scrape asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text 0.0.4: what a browser or `curl` gets.
    PrometheusText,
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when `Accept` names it, else the Prometheus text format.
    pub fn negotiate(headers: &HeaderMap) -> Self {
        let accepts = headers.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok());
        let open_metrics = accepts.flat_map(|v| v.split(',')).any(|item| {
            let media = item.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("application/openmetrics-text")
        });
        if open_metrics { Format::OpenMetrics } else { Format::PrometheusText }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::PrometheusText => prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The registry in `format`.
pub fn encode(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(16_384);
    match format {
        Format::PrometheusText => prometheus_text::encode(&mut out, registry)?,
        Format::OpenMetrics => openmetrics_text::encode(&mut out, registry)?,
    }
    Ok(out)
}

/// The answer to `GET /metrics`.
pub fn render(ctx: &ApiContext, headers: &HeaderMap) -> Response {
    let format = Format::negotiate(headers);
    match encode(&ctx.registry, format) {
        Ok(body) => ([(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()))], body).into_response(),
        Err(_) => crate::problem::Problem::internal("the metrics could not be rendered").into_response(),
    }
}

#[cfg(test)]
mod tests;
