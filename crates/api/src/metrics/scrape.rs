//! What `/metrics` reads from the node at each scrape: Raft and the lease,
//! the ingest budgets, the payload keys, the attempts in flight, the
//! replicated state's figures, this node's lifecycle tallies and the
//! per-endpoint series. One `prometheus-client` collector.

use std::sync::Weak;
use std::sync::atomic::{AtomicU64, Ordering};

use hookraft_core::state::tally::{DURATION_BOUNDS_MS, DeadReason, Durations, TIMED_STATES, Tally};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::endpoints;
use crate::admission::Budget;
use crate::context::ApiContext;

/// The collector; holds the context weakly, since the context holds it.
#[derive(Debug)]
pub(super) struct Scrape {
    ctx: Weak<ApiContext>,
}

impl Scrape {
    pub(super) fn new(ctx: Weak<ApiContext>) -> Self {
        Self { ctx }
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        // Gone only while the node shuts down: then there is nothing to read.
        let Some(ctx) = self.ctx.upgrade() else { return Ok(()) };
        let e = &mut encoder;
        cluster(e, &ctx)?;
        payloads(e, &ctx)?;
        gauge(e, "hookraft_attempts_in_flight", "Attempts under way on this node", ctx.in_flight.len() as u64)?;
        let (stale, usage, ranked) = {
            let state = ctx.state.read();
            let rows = endpoints::owned_rows(&state, ctx.node_id, ctx.clock.wall_ms());
            let ranked = endpoints::top_endpoints(rows, ctx.metrics_top_endpoints);
            (state.outcomes_rejected_stale, (state.memory_usage(), state.history().bytes()), ranked)
        };
        budgets(e, &ctx, usage.0, usage.1)?;
        counter(
            e,
            "hookraft_outcomes_rejected_stale",
            "Outcomes of any node refused for a stale fencing token, since the cluster began (replicated: every \
             node reports the same count; do not sum over nodes)",
            stale,
        )?;
        lifecycle(e, &ctx.lifecycle.snapshot())?;
        endpoints::encode(e, &ranked)
    }
}

/// Raft and this node's lease.
fn cluster(e: &mut DescriptorEncoder, ctx: &ApiContext) -> std::fmt::Result {
    let c = &ctx.cluster;
    gauge(e, "hookraft_raft_term", "Current Raft term", c.term())?;
    counter(e, "hookraft_raft_leader_changes", "Leader changes seen by this node", c.leader_changes())?;
    gauge(e, "hookraft_lease_valid", "1 when this node's lease is valid", u64::from(c.lease_valid()))?;
    counter(e, "hookraft_lease_renewals", "Heartbeats that renewed this node's lease", c.lease_renewals())?;
    counter(
        e,
        "hookraft_lease_expiries",
        "Times this node's lease lapsed (it stops sending until a heartbeat commits)",
        c.lease_expiries(),
    )?;
    let log = c.log_figures();
    gauge(e, "hookraft_raft_applied_index", "Last log index applied to this replica", log.applied_index)?;
    gauge(
        e,
        "hookraft_snapshot_index",
        "Last log index the current snapshot covers (0 without one)",
        log.snapshot_index,
    )?;
    let bytes = Unit::Bytes;
    ConstGauge::new(log.snapshot_bytes).encode(descriptor(
        e,
        "hookraft_snapshot",
        "Bytes of the current snapshot's payload (built here or installed from the leader)",
        Some(&bytes),
        MetricType::Gauge,
    )?)?;
    ConstGauge::new(log.log_bytes_since_snapshot).encode(descriptor(
        e,
        "hookraft_raft_log_since_snapshot",
        "Encoded bytes of the log entries past the current snapshot",
        Some(&bytes),
        MetricType::Gauge,
    )?)
}

/// Payload encryption: whether it is on, what was sealed and opened, and
/// what could not be opened (a missing key by its id, at most
/// `MISSING_KEYS_TRACKED_MAX` of them).
fn payloads(e: &mut DescriptorEncoder, ctx: &ApiContext) -> std::fmt::Result {
    let p = &ctx.payloads;
    gauge(
        e,
        "hookraft_payload_encryption",
        "1 when this node seals payloads (it has a keyring), 0 when it stores them in clear",
        u64::from(p.keyring().is_some()),
    )?;
    counter(e, "hookraft_payloads_sealed", "Payloads sealed on ingest", load(&p.sealed_total))?;
    counter(e, "hookraft_payloads_opened", "Sealed payloads opened (to send or show)", load(&p.opened_total))?;
    let mut failures = descriptor(
        e,
        "hookraft_payload_open_failures",
        "Payloads and secrets that could not be opened, by reason",
        None,
        MetricType::Counter,
    )?;
    for (reason, value) in [("missing_key", &p.missing_key_total), ("tampered", &p.tampered_total)] {
        ConstCounter::new(load(value)).encode(failures.encode_family(&[("reason", reason)])?)?;
    }
    let mut missing = descriptor(
        e,
        "hookraft_payload_missing_key",
        "Payloads that named a key this node's keyring lacks, by key",
        None,
        MetricType::Gauge,
    )?;
    for (key_id, failed) in p.missing_keys() {
        ConstGauge::new(failed).encode(missing.encode_family(&[("key_id", key_id.as_str())])?)?;
    }
    Ok(())
}

/// The headroom of the ingest budgets (`crate::admission`).
fn budgets(
    e: &mut DescriptorEncoder,
    ctx: &ApiContext,
    usage: hookraft_core::state::Usage,
    history_bytes: u64,
) -> std::fmt::Result {
    let (admission, budgets) = (&ctx.admission, ctx.admission.budgets);
    gauge(e, "hookraft_pending_deliveries", "Deliveries not yet delivered or dead (this replica)", usage.pending)?;
    gauge(e, "hookraft_pending_budget", "Pending deliveries past which ingest is refused", budgets.max_pending)?;
    gauge(
        e,
        "hookraft_retained_bytes",
        "Estimated bytes of events, deliveries and timelines held in memory (this replica)",
        usage.bytes,
    )?;
    gauge(
        e,
        "hookraft_history_bytes",
        "Bytes of the encoded finished history, in memory and in the history store (this replica)",
        history_bytes,
    )?;
    let metric = ConstGauge::new(budgets.memory_bytes);
    let unit = Unit::Bytes;
    metric.encode(descriptor(
        e,
        "hookraft_memory_budget",
        "Retained bytes past which ingest is refused",
        Some(&unit),
        MetricType::Gauge,
    )?)?;
    let mut refused = descriptor(
        e,
        "hookraft_ingest_refused",
        "Ingest requests refused (503) by a full budget, by budget",
        None,
        MetricType::Counter,
    )?;
    for budget in [Budget::Pending, Budget::Memory] {
        ConstCounter::new(admission.refused(budget)).encode(refused.encode_family(&[("budget", budget.label())])?)?;
    }
    Ok(())
}

/// This node's lifecycle tallies (`hookraft_core::state::tally`):
/// observed on the node that owns each delivery's shard, so a sum over the
/// cluster counts each change once.
pub(super) fn lifecycle(e: &mut DescriptorEncoder, tally: &Tally) -> std::fmt::Result {
    let seconds = Unit::Seconds;
    let mut in_state = descriptor(
        e,
        "hookraft_delivery_state_duration",
        "Time deliveries spent in a state, observed when they leave it, by state (on the node owning the \
         delivery's shard)",
        Some(&seconds),
        MetricType::Histogram,
    )?;
    for state in TIMED_STATES {
        let durations = tally.in_state(state).cloned().unwrap_or_default();
        histogram(in_state.encode_family(&[("state", state.as_str())])?, &durations)?;
    }
    for (name, help, durations) in [
        (
            "hookraft_delivery_time_to_first_attempt",
            "Time from an event's acceptance to the start of its delivery's first attempt that was sent",
            &tally.to_first_attempt,
        ),
        (
            "hookraft_delivery_time_to_delivered",
            "Time from an event's acceptance to its delivery becoming delivered, replays and all",
            &tally.to_delivered,
        ),
    ] {
        histogram(descriptor(e, name, help, Some(&seconds), MetricType::Histogram)?, durations)?;
    }
    counter(
        e,
        "hookraft_delivery_retries",
        "Attempts whose recorded outcome scheduled a retry (the retry rate is its rate())",
        tally.retries,
    )?;
    let mut dead = descriptor(
        e,
        "hookraft_dead_letters",
        "Deliveries that went dead (dead-letter inflow), by reason class",
        None,
        MetricType::Counter,
    )?;
    for reason in DeadReason::ALL {
        ConstCounter::new(tally.dead_letters(reason)).encode(dead.encode_family(&[("reason", reason.as_str())])?)?;
    }
    counter(
        e,
        "hookraft_delivery_ignored_stale",
        "Deliveries that ended ignored_stale: not sent, a newer version of their entity key was delivered first",
        tally.ignored_stale,
    )?;
    counter(
        e,
        "hookraft_outcomes_sent_stale",
        "Outcomes this node sent that were refused for a stale fencing token (it had lost the shard)",
        tally.stale_outcomes,
    )
}

/// A histogram of [`Durations`] in seconds.
fn histogram(mut metric: MetricEncoder, durations: &Durations) -> std::fmt::Result {
    let mut buckets = [(0.0, 0); DURATION_BOUNDS_MS.len() + 1];
    for (i, count) in durations.buckets.iter().enumerate() {
        let bound = DURATION_BOUNDS_MS.get(i).map_or(f64::INFINITY, |ms| *ms as f64 / 1_000.0);
        buckets[i] = (bound, *count);
    }
    metric.encode_histogram::<NoLabelSet>(durations.sum_ms as f64 / 1_000.0, durations.count, &buckets, None)
}

/// A descriptor; `help` gets its full stop here, as the registry's own do.
fn descriptor<'s>(
    e: &'s mut DescriptorEncoder,
    name: &'s str,
    help: &str,
    unit: Option<&'s Unit>,
    metric_type: MetricType,
) -> Result<MetricEncoder<'s>, std::fmt::Error> {
    e.encode_descriptor(name, &format!("{help}."), unit, metric_type)
}

/// A counter without labels; `name` without its `_total`, which the
/// encoder adds.
fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> std::fmt::Result {
    ConstCounter::new(value).encode(descriptor(e, name, help, None, MetricType::Counter)?)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> std::fmt::Result {
    ConstGauge::new(value).encode(descriptor(e, name, help, None, MetricType::Gauge)?)
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}
