//! What one scenario run measured, as JSON (`--json`) and as a few lines
//! for a human.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

/// Latency quantiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Quantiles {
    /// From sorted samples in microseconds.
    pub fn of_sorted_us(sorted: &[u64]) -> Self {
        let at = |q: f64| quantile(sorted, q) as f64 / 1000.0;
        Self { p50: at(0.50), p99: at(0.99), p999: at(0.999), max: at(1.0) }
    }
}

/// The `q` quantile (0..=1) of sorted samples, nearest rank; 0 when empty.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// One node's resources over the measured phase.
#[derive(Debug, Clone, Serialize)]
pub struct NodeUsage {
    pub node_id: u64,
    pub rss_mib: f64,
    pub rss_peak_mib: f64,
    pub cpu_s: f64,
    /// CPU time over wall time; 200 means both cores of this machine.
    pub cpu_percent: f64,
    /// CPU time over accepted events: the node's cost of one event, less
    /// sensitive than events/s to what else shares the cores.
    pub cpu_us_per_event: f64,
}

/// What the benchmark process itself (load generator and receiver fleet)
/// took of the machine the nodes share with it.
#[derive(Debug, Clone, Serialize)]
pub struct BenchUsage {
    pub cpu_s: f64,
    pub cpu_percent: f64,
}

/// How the whole machine's cores spent the measured phase, in percent of
/// one core (200 = both cores of a two-core machine). `steal_percent` is
/// time the hypervisor gave to other machines: a run with much of it is
/// not comparable with one without.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MachineUsage {
    pub cores: u64,
    pub busy_percent: f64,
    pub idle_percent: f64,
    pub steal_percent: f64,
}

/// The backlog scenario's own figures.
#[derive(Debug, Clone, Serialize)]
pub struct BacklogFigures {
    pub pending: usize,
    /// Resident memory of the owner with the backlog built.
    pub rss_mib: f64,
    /// Resident memory the backlog added to the owner, over pending deliveries.
    pub rss_bytes_per_pending: f64,
    /// The same, less the payload each pending delivery carries.
    pub rss_bytes_per_pending_beyond_payload: f64,
    /// From bringing the endpoint back to its first delivery: the breaker's
    /// cooldown until its next probe.
    pub first_delivery_after_up_s: f64,
    /// From the first delivery to the last.
    pub drain_s: f64,
    pub drained_per_s: f64,
}

/// A run against nodes with an ingest budget (`--max-pending`,
/// `--memory-budget`): how they held at the cap and recovered.
#[derive(Debug, Clone, Serialize)]
pub struct BudgetFigures {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<String>,
    /// Requests answered 503 by a full budget.
    pub refused_requests: u64,
    /// From the first such refusal to the last.
    pub at_cap_s: f64,
    pub refused_per_s: f64,
    /// Of the requests answered from the first refusal on, the share refused.
    pub refused_share: f64,
    /// Resident memory of the first node when the load ended, at the cap.
    pub rss_at_cap_mib: f64,
    /// The status of one more event posted once everything accepted had
    /// arrived: 202 when ingest resumed by itself.
    pub status_after_drain: u16,
}

/// The figures of the scenarios whose fleet refuses some first attempts
/// (`ordered`, `unordered-retries`).
#[derive(Debug, Clone, Serialize)]
pub struct RetryFigures {
    /// First attempts the fleet answered 503 (one delivery in ten).
    pub first_attempts_refused: u64,
    /// Circuit breakers opened on the nodes (`hookraft_breaker_transitions_total{to="open"}`),
    /// when the nodes answered `/metrics`: an open one holds its endpoint
    /// back for its cooldown, and with it every key of the endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakers_opened: Option<u64>,
    /// Of ordered endpoints only: how long each delivery waited behind its
    /// key, once per sequence, as the fleet measured it from the
    /// `webhook-ordering-key`, `webhook-sequence` and `webhook-attempt`
    /// headers: from when the fleet answered the key's previous sequence
    /// 2xx (or from when the event was posted, if that was later, or it is
    /// the key's first) to when its own first attempt arrived. It is the
    /// time from "free to go" to "sent": the previous delivery's outcome
    /// committed, the next head picked and sent. Time spent queued while
    /// the previous one was still being attempted or retried is not in it;
    /// that shows in the end-to-end latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_wait_ms: Option<Quantiles>,
    /// Deliveries behind `key_wait_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_wait_samples: Option<usize>,
    /// The same for the deliveries *held* behind their key: whose key's
    /// previous sequence was delivered after they were posted, so that the
    /// wait is the hand-over from one head to the next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_wait_held_ms: Option<Quantiles>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_wait_held_samples: Option<usize>,
}

/// The inbound scenario's own figures: provider requests to `POST /in/{source}`.
#[derive(Debug, Clone, Serialize)]
pub struct InboundFigures {
    /// `--provider-retry-percent`: the share of events posted a second time.
    pub retry_percent: u32,
    /// Provider requests answered 200: new events and repeats answered as duplicates.
    pub requests_answered: u64,
    pub requests_answered_per_s: f64,
    pub repeats_posted: u64,
    /// Repeats answered 200 `duplicate: true` with their event's id.
    pub duplicates_answered: u64,
    /// Latency of those answers.
    pub duplicate_latency_ms: Quantiles,
    /// Repeats answered as a new event (or another's duplicate): a provider
    /// event accepted twice (any fails the run).
    pub repeats_created_anew: u64,
    /// Repeats not answered 200.
    pub repeats_not_answered: u64,
    /// Distinct (endpoint, event) arrivals beyond the expected ones: events
    /// that should not exist (any fails the run).
    pub deliveries_beyond_expected: usize,
    /// The nodes' CPU over the provider requests answered.
    pub cpu_us_per_request: f64,
}

/// One scenario run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: &'static str,
    pub nodes: u64,
    pub connections: usize,
    /// 1: `POST /v1/events`; more: `POST /v1/events/batch` of that many.
    pub events_per_request: usize,
    /// The nodes' `--delivery-threads`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_threads: Option<u16>,
    /// The nodes' `--retention`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<String>,
    /// Whether the nodes sealed payloads (`--keyring` or `--encrypt`).
    pub encrypted: bool,
    pub endpoints: usize,
    pub payload_bytes: usize,
    pub events_offered: usize,
    /// `--rate`: events per second offered (an open load), when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_per_s: Option<f64>,
    pub accepted: usize,
    pub not_accepted: u64,
    pub ingest_s: f64,
    pub accepted_per_s: f64,
    /// `--warmup-s`: events due before this many seconds into the load are
    /// left out of `ingest_latency_ms` and `end_to_end_latency_ms`.
    pub warmup_s: f64,
    pub ingest_latency_ms: Quantiles,
    /// The whole run's, warm-up included (only with a warm-up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_latency_whole_run_ms: Option<Quantiles>,
    /// (endpoint, event) pairs that must arrive at a healthy endpoint.
    pub deliveries_expected: usize,
    pub delivered: usize,
    /// From the first post to the last first arrival.
    pub delivery_s: f64,
    pub delivered_per_s: f64,
    /// Receive time minus post time, first arrival of each delivery.
    pub end_to_end_latency_ms: Quantiles,
    /// The whole run's, warm-up included (only with a warm-up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_to_end_latency_whole_run_ms: Option<Quantiles>,
    /// Arrivals beyond the first of one (endpoint, event).
    pub duplicates: u64,
    /// Expected deliveries that never arrived before the deadline.
    pub lost: usize,
    /// Of ordered endpoints only: requests that arrived before their key's
    /// previous sequence was answered 2xx (any is a failed run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_order: Option<u64>,
    /// Requests that reached the hanging and failing endpoints.
    pub unhealthy_requests: u64,
    pub node_usage: Vec<NodeUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bench_usage: Option<BenchUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_usage: Option<MachineUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog: Option<BacklogFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<RetryFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inbound: Option<InboundFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soak: Option<crate::soak::SoakFigures>,
}

impl Report {
    /// Of an inbound run: provider events that reached an endpoint twice,
    /// or were accepted twice; 0 for any other run, whose duplicates are
    /// reported only.
    pub fn provider_events_twice(&self) -> u64 {
        self.inbound
            .as_ref()
            .map_or(0, |i| self.duplicates + i.repeats_created_anew + i.deliveries_beyond_expected as u64)
    }

    /// A few lines for a human.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let l = &self.ingest_latency_ms;
        let _ = writeln!(
            out,
            "[{}] {} node(s), {} connections, {} endpoints, {}-byte payloads{}{}{}{}",
            self.scenario,
            self.nodes,
            self.connections,
            self.endpoints,
            self.payload_bytes,
            if self.events_per_request > 1 {
                format!(", {} events per request (POST /v1/events/batch)", self.events_per_request)
            } else {
                String::new()
            },
            self.delivery_threads.map(|n| format!(", --delivery-threads {n}")).unwrap_or_default(),
            self.retention.as_deref().map(|r| format!(", --retention {r}")).unwrap_or_default(),
            if self.encrypted { ", payloads sealed" } else { "" }
        );
        let _ = writeln!(
            out,
            "  ingest:    {} of {} accepted in {:.2} s = {:.0} events/s{}; latency p50 {:.1} p99 {:.1} p999 {:.1} max {:.1} ms",
            self.accepted,
            self.events_offered,
            self.ingest_s,
            self.accepted_per_s,
            self.offered_per_s.map(|r| format!(" (offered {r:.0}/s, latency from when due)")).unwrap_or_default(),
            l.p50,
            l.p99,
            l.p999,
            l.max
        );
        if let Some(w) = &self.ingest_latency_whole_run_ms {
            let _ = writeln!(
                out,
                "             (events due after the first {:.1} s; the whole run: p50 {:.1} p99 {:.1} p999 {:.1} max {:.1} ms)",
                self.warmup_s, w.p50, w.p99, w.p999, w.max
            );
        }
        let e = &self.end_to_end_latency_ms;
        let _ = writeln!(
            out,
            "  delivery:  {} of {} delivered in {:.2} s = {:.0} delivered/s; end to end p50 {:.1} p99 {:.1} ms",
            self.delivered, self.deliveries_expected, self.delivery_s, self.delivered_per_s, e.p50, e.p99
        );
        if let Some(w) = &self.end_to_end_latency_whole_run_ms {
            let _ = writeln!(
                out,
                "             (events sent after the first {:.1} s; the whole run: end to end p50 {:.1} p99 {:.1} ms)",
                self.warmup_s, w.p50, w.p99
            );
        }
        let _ = writeln!(
            out,
            "  integrity: lost {}, duplicates {}, not accepted {}, requests to unhealthy endpoints {}{}",
            self.lost,
            self.duplicates,
            self.not_accepted,
            self.unhealthy_requests,
            self.out_of_order.map(|n| format!(", out of order {n}")).unwrap_or_default()
        );
        if let Some(r) = &self.retries {
            let _ = writeln!(
                out,
                "  retries:   {} first attempts answered 503 ({:.1}% of deliveries){}",
                r.first_attempts_refused,
                100.0 * r.first_attempts_refused as f64 / self.deliveries_expected.max(1) as f64,
                r.breakers_opened.map(|n| format!(", breakers opened {n}")).unwrap_or_default()
            );
            if let (Some(w), Some(samples)) = (&r.key_wait_ms, r.key_wait_samples) {
                let _ = writeln!(
                    out,
                    "  key wait:  p50 {:.1} p99 {:.1} max {:.1} ms over {samples} deliveries (from the key's previous \
                     delivery, or the post if later, to the first attempt)",
                    w.p50, w.p99, w.max
                );
            }
            if let (Some(w), Some(samples)) = (&r.key_wait_held_ms, r.key_wait_held_samples) {
                let _ = writeln!(
                    out,
                    "             of them held behind their key's previous delivery (delivered after they were posted): \
                     {samples}, p50 {:.1} p99 {:.1} max {:.1} ms",
                    w.p50, w.p99, w.max
                );
            }
        }
        if let Some(i) = &self.inbound {
            let d = &i.duplicate_latency_ms;
            let _ = writeln!(
                out,
                "  inbound:   {} provider requests answered 200 = {:.0} requests/s, {:.0} µs of node cpu each; {} of {} \
                 repeats ({}% of events) answered duplicate (p50 {:.1} p99 {:.1} max {:.1} ms), created anew {}, \
                 not answered {}, deliveries beyond the expected {}",
                i.requests_answered,
                i.requests_answered_per_s,
                i.cpu_us_per_request,
                i.duplicates_answered,
                i.repeats_posted,
                i.retry_percent,
                d.p50,
                d.p99,
                d.max,
                i.repeats_created_anew,
                i.repeats_not_answered,
                i.deliveries_beyond_expected
            );
        }
        for n in &self.node_usage {
            let _ = writeln!(
                out,
                "  node {}:    rss {:.0} MiB (peak {:.0}), cpu {:.1} s = {:.0}%, {:.0} µs per event",
                n.node_id, n.rss_mib, n.rss_peak_mib, n.cpu_s, n.cpu_percent, n.cpu_us_per_event
            );
        }
        if let Some(b) = &self.bench_usage {
            let _ = writeln!(out, "  bench:     load generator and fleet cpu {:.1} s = {:.0}%", b.cpu_s, b.cpu_percent);
        }
        if let Some(m) = &self.machine_usage {
            let _ = writeln!(
                out,
                "  machine:   {} cores: busy {:.0}%, idle {:.0}%, stolen by the hypervisor {:.0}%",
                m.cores, m.busy_percent, m.idle_percent, m.steal_percent
            );
        }
        if let Some(b) = &self.backlog {
            let _ = writeln!(
                out,
                "  backlog:   {} pending, rss {:.0} MiB: {:.0} bytes each ({:.0} beyond the payload); first delivery {:.1} s after \
             the endpoint came back (breaker cooldown), then drained in {:.1} s = {:.0}/s",
                b.pending,
                b.rss_mib,
                b.rss_bytes_per_pending,
                b.rss_bytes_per_pending_beyond_payload,
                b.first_delivery_after_up_s,
                b.drain_s,
                b.drained_per_s
            );
        }
        if let Some(b) = &self.budget {
            let budgets = [
                b.max_pending.map(|n| format!("--max-pending {n}")),
                b.memory_budget.as_ref().map(|m| format!("--memory-budget {m}")),
            ];
            let _ = writeln!(
                out,
                "  budget:    {}: rss at the cap {:.0} MiB; {} requests refused (503) over {:.1} s at the cap = {:.0}/s, \
             {:.1}% of the requests answered there; after the drain a new event answered {}",
                budgets.into_iter().flatten().collect::<Vec<_>>().join(", "),
                b.rss_at_cap_mib,
                b.refused_requests,
                b.at_cap_s,
                b.refused_per_s,
                100.0 * b.refused_share,
                b.status_after_drain
            );
        }
        // Last: its verdict closes the report.
        if let Some(soak) = &self.soak {
            crate::soak::render(soak, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let samples: Vec<u64> = (1..=1000).collect();
        assert_eq!(quantile(&samples, 0.5), 500);
        assert_eq!(quantile(&samples, 0.99), 990);
        assert_eq!(quantile(&samples, 0.999), 999);
        assert_eq!(quantile(&samples, 1.0), 1000);
        assert_eq!(quantile(&[], 0.99), 0);
        assert_eq!(quantile(&[7], 0.0), 7);
    }

    fn report(scenario: &'static str) -> Report {
        let q = Quantiles { p50: 1.0, p99: 2.0, p999: 3.0, max: 4.0 };
        Report {
            scenario,
            nodes: 1,
            connections: 64,
            events_per_request: 1,
            delivery_threads: None,
            retention: None,
            encrypted: false,
            endpoints: 100,
            payload_bytes: 200,
            events_offered: 1_000,
            offered_per_s: None,
            accepted: 1_000,
            not_accepted: 0,
            ingest_s: 1.0,
            accepted_per_s: 1_000.0,
            warmup_s: 0.0,
            ingest_latency_ms: q,
            ingest_latency_whole_run_ms: None,
            deliveries_expected: 1_000,
            delivered: 1_000,
            delivery_s: 1.0,
            delivered_per_s: 1_000.0,
            end_to_end_latency_ms: q,
            end_to_end_latency_whole_run_ms: None,
            duplicates: 0,
            lost: 0,
            out_of_order: None,
            unhealthy_requests: 0,
            node_usage: Vec::new(),
            bench_usage: None,
            machine_usage: None,
            backlog: None,
            budget: None,
            retries: None,
            inbound: None,
            soak: None,
        }
    }

    #[test]
    fn only_runs_with_retries_print_and_serialize_the_ordering_figures() {
        let plain = report("throughput");
        let text = plain.render();
        assert!(text.contains("integrity: lost 0, duplicates 0, not accepted 0, requests to unhealthy endpoints 0\n"));
        assert!(!text.contains("retries:") && !text.contains("key wait:"), "{text}");
        let json = serde_json::to_value(&plain).expect("encodes");
        assert!(json.get("out_of_order").is_none() && json.get("retries").is_none(), "{json}");

        let wait = Quantiles { p50: 0.5, p99: 7.25, p999: 9.0, max: 12.0 };
        let ordered = Report {
            out_of_order: Some(3),
            retries: Some(RetryFigures {
                first_attempts_refused: 100,
                breakers_opened: Some(0),
                key_wait_ms: Some(wait),
                key_wait_samples: Some(1_000),
                key_wait_held_ms: Some(wait),
                key_wait_held_samples: Some(40),
            }),
            ..report("ordered")
        };
        let text = ordered.render();
        assert!(text.contains("requests to unhealthy endpoints 0, out of order 3\n"), "{text}");
        assert!(text.contains("retries:   100 first attempts answered 503 (10.0% of deliveries), breakers opened 0\n"));
        assert!(text.contains("key wait:  p50 0.5 p99 7.2 max 12.0 ms over 1000 deliveries"), "{text}");
        assert!(text.contains("(delivered after they were posted): 40, p50 0.5 p99 7.2 max 12.0 ms\n"), "{text}");
        let json = serde_json::to_value(&ordered).expect("encodes");
        assert_eq!((&json["out_of_order"], &json["retries"]["key_wait_ms"]["p99"]), (&3.into(), &7.25.into()));

        let unordered = Report {
            retries: Some(RetryFigures {
                first_attempts_refused: 100,
                breakers_opened: None,
                key_wait_ms: None,
                key_wait_samples: None,
                key_wait_held_ms: None,
                key_wait_held_samples: None,
            }),
            ..report("unordered-retries")
        };
        let text = unordered.render();
        assert!(text.contains("retries:   100 first attempts answered 503 (10.0% of deliveries)\n"), "{text}");
        assert!(!text.contains("out of order") && !text.contains("key wait:") && !text.contains("held"), "{text}");
    }

    #[test]
    fn an_inbound_run_prints_its_provider_figures_and_counts_any_event_twice_as_a_failure() {
        let plain = report("throughput");
        assert!(!plain.render().contains("inbound:"));
        assert_eq!(Report { duplicates: 2, ..report("throughput") }.provider_events_twice(), 0, "reported only");
        let figures = InboundFigures {
            retry_percent: 10,
            requests_answered: 1_100,
            requests_answered_per_s: 1_100.0,
            repeats_posted: 100,
            duplicates_answered: 100,
            duplicate_latency_ms: Quantiles { p50: 0.5, p99: 2.0, p999: 3.0, max: 4.0 },
            repeats_created_anew: 0,
            repeats_not_answered: 0,
            deliveries_beyond_expected: 0,
            cpu_us_per_request: 90.0,
        };
        let inbound = Report { inbound: Some(figures.clone()), ..report("inbound") };
        let text = inbound.render();
        assert!(text.contains("inbound:   1100 provider requests answered 200 = 1100 requests/s, 90 µs"), "{text}");
        assert!(text.contains("100 of 100 repeats (10% of events) answered duplicate (p50 0.5 p99 2.0 max 4.0 ms)"));
        assert_eq!(inbound.provider_events_twice(), 0);
        let json = serde_json::to_value(&inbound).expect("encodes");
        assert_eq!(json["inbound"]["duplicates_answered"], 100);
        let twice = InboundFigures { repeats_created_anew: 1, deliveries_beyond_expected: 1, ..figures };
        assert_eq!(Report { duplicates: 1, inbound: Some(twice), ..report("inbound") }.provider_events_twice(), 3);
    }
}
