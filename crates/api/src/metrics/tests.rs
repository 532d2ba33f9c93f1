//! The registry's rendering in both formats, the negotiation between them,
//! and the encoding of the lifecycle tallies and the per-endpoint series.
//! (The real node's whole exposition is checked end to end:
//! `tests/tests/metrics.rs`.)

use axum::http::HeaderMap;
use hookraft_core::ids::EndpointId;
use hookraft_core::model::DeliveryState;
use hookraft_core::state::tally::{DeadReason, Tally};
use hookraft_delivery::metrics::{Decided, DeliveryMetrics};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::*;

fn accept(value: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(axum::http::header::ACCEPT, value.parse().expect("header"));
    headers
}

#[test]
fn open_metrics_is_served_only_to_a_scrape_that_asks_for_it() {
    assert_eq!(Format::negotiate(&HeaderMap::new()), Format::PrometheusText);
    assert_eq!(Format::negotiate(&accept("text/plain;version=0.0.4;q=0.3,*/*;q=0.2")), Format::PrometheusText);
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
                      text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::negotiate(&accept(prometheus)), Format::OpenMetrics);
    assert_eq!(Format::negotiate(&accept("Application/OpenMetrics-Text")), Format::OpenMetrics);
    assert_eq!(Format::negotiate(&accept("application/openmetrics-textual")), Format::PrometheusText);
}

fn registered() -> (Registry, ApiMetrics, DeliveryMetrics) {
    let (api, delivery) = (ApiMetrics::default(), DeliveryMetrics::default());
    let mut registry = Registry::default();
    register_api(&mut registry, &api);
    delivery.register(&mut registry);
    (registry, api, delivery)
}

#[test]
fn counters_histograms_and_labels_render_with_their_conventional_names() {
    let (registry, api, delivery) = registered();
    api.events_accepted_total.inc();
    api.observe_commit_ms(3);
    delivery.decided(Decided::Dead);
    delivery.observe_latency_ms(20);
    let text = encode(&registry, Format::PrometheusText).expect("renders");
    for line in [
        "# HELP hookraft_ingest_accepted_total Events accepted (committed).",
        "# TYPE hookraft_ingest_accepted_total counter",
        "hookraft_ingest_accepted_total 1",
        "hookraft_deliveries_total{outcome=\"dead\"} 1",
        "hookraft_deliveries_total{outcome=\"ignored_stale\"} 0",
        "hookraft_breaker_transitions_total{to=\"half_open\"} 0",
        "# TYPE hookraft_attempt_latency_seconds histogram",
        "hookraft_attempt_latency_seconds_bucket{le=\"0.01\"} 0",
        "hookraft_attempt_latency_seconds_bucket{le=\"0.025\"} 1",
        "hookraft_attempt_latency_seconds_bucket{le=\"+Inf\"} 1",
        "hookraft_attempt_latency_seconds_count 1",
        "hookraft_commit_latency_seconds_bucket{le=\"0.005\"} 1",
        "hookraft_queue_depth 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
    }
    assert!(!text.contains("# EOF"));

    let open = encode(&registry, Format::OpenMetrics).expect("renders");
    for line in [
        "# TYPE hookraft_ingest_accepted counter",
        "hookraft_ingest_accepted_total 1",
        "# UNIT hookraft_attempt_latency_seconds seconds",
        "hookraft_attempt_latency_seconds_count 1",
    ] {
        assert!(open.lines().any(|l| l == line), "no line {line:?} in\n{open}");
    }
    assert_eq!(open.lines().last(), Some("# EOF"));
}

/// A collector of fixed figures, to render the scrape's pieces alone.
#[derive(Debug)]
struct Fixed {
    tally: Tally,
    ranked: TopEndpoints<EndpointId>,
}

impl Collector for Fixed {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        scrape::lifecycle(&mut encoder, &self.tally)?;
        endpoints::encode(&mut encoder, &self.ranked)
    }
}

fn rendered(tally: Tally, ranked: TopEndpoints<EndpointId>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Fixed { tally, ranked }));
    encode(&registry, Format::PrometheusText).expect("renders")
}

fn endpoint_id(n: u64) -> EndpointId {
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(n);
    EndpointId::generate(1_000 + n, &mut rng)
}

#[test]
fn lifecycle_tallies_render_as_histograms_in_seconds_and_labelled_counters() {
    let mut tally = Tally { retries: 3, ignored_stale: 1, stale_outcomes: 2, ..Default::default() };
    tally.in_state[1].observe(1_500); // retrying
    tally.to_first_attempt.observe(40);
    tally.to_delivered.observe(90_000_000_000);
    tally.dead_letters[0] = 4; // attempts exhausted
    let text = rendered(tally, top_endpoints(Vec::new(), 20));
    for line in [
        "# TYPE hookraft_delivery_state_duration_seconds histogram",
        "hookraft_delivery_state_duration_seconds_bucket{state=\"retrying\",le=\"1\"} 0",
        "hookraft_delivery_state_duration_seconds_bucket{state=\"retrying\",le=\"2.5\"} 1",
        "hookraft_delivery_state_duration_seconds_bucket{state=\"retrying\",le=\"+Inf\"} 1",
        "hookraft_delivery_state_duration_seconds_sum{state=\"retrying\"} 1.5",
        "hookraft_delivery_state_duration_seconds_count{state=\"pending\"} 0",
        "hookraft_delivery_time_to_first_attempt_seconds_bucket{le=\"0.05\"} 1",
        "hookraft_delivery_time_to_delivered_seconds_bucket{le=\"259200\"} 0",
        "hookraft_delivery_time_to_delivered_seconds_bucket{le=\"+Inf\"} 1",
        "hookraft_delivery_retries_total 3",
        "hookraft_dead_letters_total{reason=\"attempts_exhausted\"} 4",
        "hookraft_dead_letters_total{reason=\"endpoint_deleted\"} 0",
        "hookraft_delivery_ignored_stale_total 1",
        "hookraft_outcomes_sent_stale_total 2",
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
    }
    let states = text.lines().filter(|l| l.starts_with("hookraft_delivery_state_duration_seconds_count")).count();
    assert_eq!(states, 5, "every timed state, from the start");
    let reasons = text.lines().filter(|l| l.starts_with("hookraft_dead_letters_total")).count();
    assert_eq!(reasons, DeadReason::ALL.len());
    assert_eq!(Tally::default().in_state(DeliveryState::Attempting), None, "attempting is not timed");
}

#[test]
fn per_endpoint_series_are_the_top_set_and_other() {
    let rows: Vec<_> =
        (0..30).map(|n| (endpoint_id(n), EndpointRow { attempts: n, failures: n / 2, pending: 1 })).collect();
    let first = rows[29].0;
    let text = rendered(Tally::default(), top_endpoints(rows, 3));
    let attempts: Vec<_> = text.lines().filter(|l| l.starts_with("hookraft_endpoint_attempts_last_hour{")).collect();
    assert_eq!(attempts.len(), 4, "three endpoints and other:\n{text}");
    assert!(attempts.contains(&format!("hookraft_endpoint_attempts_last_hour{{endpoint=\"{first}\"}} 29").as_str()));
    // The other 27 endpoints: 0 + 1 + ... + 26.
    assert!(attempts.contains(&"hookraft_endpoint_attempts_last_hour{endpoint=\"other\"} 351"));
    assert!(text.lines().any(|l| l == "hookraft_endpoint_pending{endpoint=\"other\"} 27"));
    let empty = rendered(Tally::default(), top_endpoints(Vec::new(), 3));
    assert!(empty.lines().any(|l| l == "hookraft_endpoint_failures_last_hour{endpoint=\"other\"} 0"));
}
