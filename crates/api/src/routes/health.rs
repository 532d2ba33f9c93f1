//! `/healthz` (the process answers), `/readyz` (it can take writes) and
//! `/metrics` (Prometheus text).

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use hookraft_core::state::Usage;
use hookraft_delivery::metrics::LATENCY_BUCKETS_MS;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::admission::{Admission, Budget};
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

/// The node can take writes: it has a leader and has applied the log.
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
        (status = 503, description = "`not ready`: no leader, or the log not applied yet.",
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
            "warning: key {key_id} is not in this node's keyring ({failed} payloads could not be opened)"
        );
    }
    (status, body)
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}");
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
}

/// Payload encryption: whether it is on, what was sealed and opened, and
/// what could not be opened (a missing key by its id).
fn payload_metrics(out: &mut String, ctx: &ApiContext) {
    let p = &ctx.payloads;
    gauge(
        out,
        "hookraft_payload_encryption",
        "1 when this node seals payloads (it has a keyring), 0 when it stores them in clear.",
        u64::from(p.keyring().is_some()),
    );
    counter(out, "hookraft_payloads_sealed_total", "Payloads sealed on ingest.", load(&p.sealed_total));
    counter(out, "hookraft_payloads_opened_total", "Sealed payloads opened (to send or show).", load(&p.opened_total));
    let _ = writeln!(
        out,
        "# HELP hookraft_payload_open_failures_total Payloads that could not be opened, by reason.\n\
         # TYPE hookraft_payload_open_failures_total counter\n\
         hookraft_payload_open_failures_total{{reason=\"missing_key\"}} {}\n\
         hookraft_payload_open_failures_total{{reason=\"tampered\"}} {}",
        load(&p.missing_key_total),
        load(&p.tampered_total)
    );
    let _ = writeln!(
        out,
        "# HELP hookraft_payload_missing_key Payloads that named a key this node's keyring lacks, by key.\n\
         # TYPE hookraft_payload_missing_key gauge"
    );
    for (key_id, failed) in p.missing_keys() {
        let _ = writeln!(out, "hookraft_payload_missing_key{{key_id=\"{key_id}\"}} {failed}");
    }
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// This node's metrics, in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text.", body = String, content_type = "text/plain"))
)]
async fn metrics(State(ctx): State<Arc<ApiContext>>) -> impl IntoResponse {
    let mut out = String::with_capacity(4_096);
    let a = &ctx.metrics;
    counter(&mut out, "hookraft_ingest_accepted_total", "Events accepted (committed).", load(&a.events_accepted_total));
    for (name, help, value) in [
        ("hookraft_inbound_accepted_total", "Provider requests committed as new events.", &a.inbound_accepted_total),
        (
            "hookraft_inbound_duplicates_total",
            "Provider requests for an event id already committed.",
            &a.inbound_duplicates_total,
        ),
        (
            "hookraft_inbound_bad_signature_total",
            "Provider requests whose signature did not hold.",
            &a.inbound_bad_signature_total,
        ),
        (
            "hookraft_inbound_refused_total",
            "Provider requests refused by an allowlist, a rate limit or a disabled source.",
            &a.inbound_refused_total,
        ),
        ("hookraft_inbound_rejected_total", "Provider requests refused otherwise.", &a.inbound_rejected_total),
    ] {
        counter(&mut out, name, help, load(value));
    }
    counter(
        &mut out,
        "hookraft_ingest_rejected_total",
        "Event posts refused with a problem.",
        load(&a.events_rejected_total),
    );
    counter(
        &mut out,
        "hookraft_ingest_idempotent_replays_total",
        "Posts answered from an earlier Idempotency-Key.",
        load(&a.events_idempotent_replays_total),
    );
    counter(
        &mut out,
        "hookraft_ingest_unavailable_total",
        "Posts answered 503 (no leader).",
        load(&a.ingest_unavailable_total),
    );
    counter(
        &mut out,
        "hookraft_commit_latency_ms_sum",
        "Sum of ingest commit latencies.",
        load(&a.commit_latency_sum_ms),
    );
    counter(&mut out, "hookraft_commit_latency_ms_count", "Ingest commits measured.", load(&a.commit_latency_count));
    gauge(&mut out, "hookraft_raft_term", "Current Raft term.", ctx.cluster.term());
    counter(
        &mut out,
        "hookraft_raft_leader_changes_total",
        "Leader changes seen by this node.",
        ctx.cluster.leader_changes(),
    );
    gauge(&mut out, "hookraft_lease_valid", "1 when this node's lease is valid.", u64::from(ctx.cluster.lease_valid()));
    counter(
        &mut out,
        "hookraft_lease_renewals_total",
        "Heartbeats that renewed this node's lease.",
        ctx.cluster.lease_renewals(),
    );
    counter(&mut out, "hookraft_lease_expiries_total", "Times this node's lease lapsed.", ctx.cluster.lease_expiries());

    let d = &ctx.delivery_metrics;
    let _ = writeln!(
        out,
        "# HELP hookraft_deliveries_total Attempt outcomes by result.\n# TYPE hookraft_deliveries_total counter"
    );
    for (outcome, value) in [
        ("delivered", &d.delivered_total),
        ("retried", &d.retried_total),
        ("dead", &d.dead_total),
        ("gone", &d.gone_total),
        ("not_sent", &d.not_sent_total),
        ("ignored_stale", &d.ignored_stale_total),
    ] {
        let _ = writeln!(out, "hookraft_deliveries_total{{outcome=\"{outcome}\"}} {}", load(value));
    }
    counter(&mut out, "hookraft_attempts_total", "Attempts started.", load(&d.attempts_total));
    payload_metrics(&mut out, &ctx);
    let _ = writeln!(
        out,
        "# HELP hookraft_attempt_latency_ms Attempt latency.\n# TYPE hookraft_attempt_latency_ms histogram"
    );
    for (bound, bucket) in LATENCY_BUCKETS_MS.iter().zip(&d.latency_buckets) {
        let _ = writeln!(out, "hookraft_attempt_latency_ms_bucket{{le=\"{bound}\"}} {}", load(bucket));
    }
    let _ = writeln!(out, "hookraft_attempt_latency_ms_bucket{{le=\"+Inf\"}} {}", load(&d.latency_count));
    let _ = writeln!(
        out,
        "hookraft_attempt_latency_ms_sum {}\nhookraft_attempt_latency_ms_count {}",
        load(&d.latency_sum_ms),
        load(&d.latency_count)
    );
    let _ = writeln!(
        out,
        "# HELP hookraft_breaker_transitions_total Circuit breaker transitions by new state.\n# TYPE hookraft_breaker_transitions_total counter"
    );
    for (to, value) in [
        ("open", &d.breaker_opened_total),
        ("half_open", &d.breaker_half_open_total),
        ("closed", &d.breaker_closed_total),
    ] {
        let _ = writeln!(out, "hookraft_breaker_transitions_total{{to=\"{to}\"}} {}", load(value));
    }
    counter(
        &mut out,
        "hookraft_breaker_rejections_total",
        "Attempts held back by an open breaker.",
        load(&d.breaker_rejections_total),
    );
    counter(
        &mut out,
        "hookraft_rate_limited_total",
        "Attempts held back by a rate limit.",
        load(&d.rate_limited_total),
    );
    counter(
        &mut out,
        "hookraft_lease_refusals_total",
        "Sends refused because the lease was not valid.",
        load(&d.lease_refusals_total),
    );
    counter(
        &mut out,
        "hookraft_actor_restarts_total",
        "Endpoint actors restarted after a crash.",
        load(&d.actor_restarts_total),
    );
    gauge(&mut out, "hookraft_queue_depth", "Deliveries queued in this node's endpoint actors.", load(&d.queue_depth));
    gauge(&mut out, "hookraft_attempts_in_flight", "Attempts under way on this node.", ctx.in_flight.len() as u64);
    let (stale, usage) = {
        let state = ctx.state.read();
        (state.outcomes_rejected_stale, state.usage())
    };
    admission_metrics(&mut out, &ctx.admission, usage);
    counter(&mut out, "hookraft_outcomes_rejected_stale_total", "Outcomes refused for a stale fencing token.", stale);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

/// The headroom of the ingest budgets (`crate::admission`).
fn admission_metrics(out: &mut String, admission: &Admission, usage: Usage) {
    let budgets = admission.budgets;
    gauge(out, "hookraft_pending_deliveries", "Deliveries not yet delivered or dead (this replica).", usage.pending);
    gauge(out, "hookraft_pending_budget", "Pending deliveries past which ingest is refused.", budgets.max_pending);
    gauge(
        out,
        "hookraft_retained_bytes_estimate",
        "Estimated bytes of retained events, deliveries and timelines (this replica).",
        usage.bytes,
    );
    gauge(out, "hookraft_memory_budget_bytes", "Retained bytes past which ingest is refused.", budgets.memory_bytes);
    let _ = writeln!(
        out,
        "# HELP hookraft_ingest_refused_total Ingest requests refused (503) by a full budget.\n# TYPE hookraft_ingest_refused_total counter"
    );
    for budget in [Budget::Pending, Budget::Memory] {
        let _ = writeln!(
            out,
            "hookraft_ingest_refused_total{{budget=\"{}\"}} {}",
            budget.label(),
            admission.refused(budget)
        );
    }
}
