//! What a run measures beside its load: the figures of the retry,
//! budget and backlog scenarios, each node's resources, and the wait for
//! every expected delivery. Reads the deployment and the fleet; posts
//! nothing but the budget's one event after the drain.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::deployment::Deployment;
use crate::fleet::Fleet;
use crate::inbound::Repeats;
use crate::load::{self, Progress};
use crate::report::{BacklogFigures, BudgetFigures, InboundFigures, NodeUsage, Quantiles, RetryFigures};
use crate::scenario::Scenario;
use crate::{Args, MIB, procstat};

/// How long the backlog scenario lets the owner settle before reading its memory.
const BACKLOG_SETTLE: Duration = Duration::from_secs(5);

/// What the fleet refused and measured of a scenario with retries, and
/// the breakers the refusals opened.
pub async fn retry_figures(scenario: Scenario, deployment: &Deployment, fleet: &Fleet) -> RetryFigures {
    let opened = deployment.metric_sum("hookraft_breaker_transitions_total{to=\"open\"}").await;
    let (waits, held) = scenario.ordered().then(|| fleet.key_waits_us()).unzip();
    RetryFigures {
        first_attempts_refused: fleet.first_attempts_refused.load(Ordering::Relaxed),
        breakers_opened: opened.map(|n| n as u64),
        key_wait_ms: waits.as_deref().map(Quantiles::of_sorted_us),
        key_wait_samples: waits.as_ref().map(Vec::len),
        key_wait_held_ms: held.as_deref().map(Quantiles::of_sorted_us),
        key_wait_held_samples: held.as_ref().map(Vec::len),
    }
}

/// How the nodes held at their budget's cap, and whether ingest resumed
/// once everything accepted had arrived.
pub async fn budget_figures(
    args: &Args,
    deployment: &Deployment,
    progress: &Progress,
    accepted: &[load::Accepted],
    at_cap: &[(u64, Option<procstat::Sample>)],
    event_type: fn(usize) -> String,
) -> BudgetFigures {
    let refused_requests = progress.refused_requests.load(Ordering::Relaxed);
    let first = Duration::from_nanos(progress.first_refusal_ns.load(Ordering::Relaxed));
    let last = Duration::from_nanos(progress.last_refusal_ns.load(Ordering::Relaxed));
    let at_cap_s = last.saturating_sub(first).as_secs_f64();
    // Requests accepted from the first refusal on (a batch's events share one).
    let accepted_there = if refused_requests == 0 {
        0
    } else {
        accepted.iter().filter(|a| a.due >= first).count().div_ceil(args.batch) as u64
    };
    let answered_there = refused_requests + accepted_there;
    let url = &deployment.event_urls()[0];
    let body = serde_json::json!({"type": event_type(usize::MAX), "payload": {"after": "drain"}});
    let status_after_drain = match reqwest::Client::new().post(url).json(&body).send().await {
        Ok(response) => response.status().as_u16(),
        Err(error) => {
            eprintln!("   (the event after the drain was not answered: {error})");
            0
        }
    };
    BudgetFigures {
        max_pending: args.max_pending,
        memory_budget: args.memory_budget.clone(),
        refused_requests,
        at_cap_s,
        refused_per_s: refused_requests as f64 / at_cap_s.max(f64::EPSILON),
        refused_share: refused_requests as f64 / answered_there.max(1) as f64,
        rss_at_cap_mib: at_cap.first().and_then(|(_, s)| *s).map_or(0.0, |s| s.rss_bytes as f64 / MIB),
        status_after_drain,
    }
}

/// The inbound scenario's figures from what its provider saw: `accepted`
/// new events and the `repeats`, over `ingest_s`; `beyond_expected`
/// distinct arrivals of events that should not exist.
pub fn inbound_figures(
    retry_percent: u32,
    repeats: &Repeats,
    accepted: usize,
    ingest_s: f64,
    beyond_expected: usize,
    nodes: &[NodeUsage],
) -> InboundFigures {
    let duplicates = repeats.answered.len() as u64;
    let answered = accepted as u64 + duplicates;
    let mut latencies: Vec<u64> = repeats.answered.iter().map(|&(_, latency)| crate::report::micros(latency)).collect();
    latencies.sort_unstable();
    let cpu_s: f64 = nodes.iter().map(|n| n.cpu_s).sum();
    InboundFigures {
        retry_percent,
        requests_answered: answered,
        requests_answered_per_s: answered as f64 / ingest_s.max(f64::EPSILON),
        repeats_posted: repeats.posted,
        duplicates_answered: duplicates,
        duplicate_latency_ms: Quantiles::of_sorted_us(&latencies),
        repeats_created_anew: repeats.created_anew,
        repeats_not_answered: repeats.not_answered,
        deliveries_beyond_expected: beyond_expected,
        cpu_us_per_request: 1e6 * cpu_s / answered.max(1) as f64,
    }
}

/// Reads the owner's memory with the backlog built, brings the endpoint
/// back, and times the drain.
pub async fn drain_backlog(
    deployment: &Deployment,
    fleet: &Fleet,
    before: &[(u64, Option<procstat::Sample>)],
    pending: usize,
    args: &Args,
    expected: usize,
) -> BacklogFigures {
    tokio::time::sleep(BACKLOG_SETTLE).await;
    let built = deployment.samples();
    let rss = |samples: &[(u64, Option<procstat::Sample>)]| samples.first().and_then(|(_, s)| *s).map(|s| s.rss_bytes);
    let added = rss(&built).unwrap_or(0).saturating_sub(rss(before).unwrap_or(0)) as f64;
    let per_pending = added / pending.max(1) as f64;
    eprintln!("backlog built: {pending} pending, {:.0} MiB added; bringing the endpoint up", added / MIB);
    let up = Instant::now();
    fleet.bring_up();
    // The breaker lets the next probe through only after its cooldown.
    let deadline = Duration::from_secs(args.delivery_deadline_s);
    wait_for_arrivals(fleet, 1, deadline).await;
    let first = up.elapsed();
    wait_for_arrivals(fleet, expected, deadline).await;
    let drain_s = (up.elapsed() - first).as_secs_f64();
    BacklogFigures {
        pending,
        rss_mib: rss(&built).unwrap_or(0) as f64 / MIB,
        rss_bytes_per_pending: per_pending,
        rss_bytes_per_pending_beyond_payload: per_pending - args.payload_bytes as f64,
        first_delivery_after_up_s: first.as_secs_f64(),
        drain_s,
        drained_per_s: pending as f64 / drain_s.max(f64::EPSILON),
    }
}

/// Waits until `expected` distinct deliveries reached healthy endpoints, or the deadline.
pub async fn wait_for_arrivals(fleet: &Fleet, expected: usize, deadline: Duration) {
    let started = Instant::now();
    while fleet.distinct() < expected && started.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn usage(
    before: &[(u64, Option<procstat::Sample>)],
    after: &[(u64, Option<procstat::Sample>)],
    wall: Duration,
    accepted: usize,
) -> Vec<NodeUsage> {
    after
        .iter()
        .filter_map(|(id, sample)| {
            let end = (*sample)?;
            let start = before.iter().find(|(b, _)| b == id).and_then(|(_, s)| *s).unwrap_or_default();
            let cpu_s = end.cpu.saturating_sub(start.cpu).as_secs_f64();
            Some(NodeUsage {
                node_id: *id,
                rss_mib: end.rss_bytes as f64 / MIB,
                rss_peak_mib: end.rss_peak_bytes as f64 / MIB,
                cpu_s,
                cpu_percent: cpu_percent(cpu_s, wall),
                cpu_us_per_event: 1e6 * cpu_s / accepted.max(1) as f64,
            })
        })
        .collect()
}

/// CPU time over wall time, in percent of one core.
pub fn cpu_percent(cpu_s: f64, wall: Duration) -> f64 {
    100.0 * cpu_s / wall.as_secs_f64().max(f64::EPSILON)
}
