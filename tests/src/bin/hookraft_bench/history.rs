//! The history scenario: what a node pays for the finished deliveries it
//! keeps within its retention, and how fast it reads one of them back.
//!
//! A fresh node first takes `--history` events (one delivery each, to the
//! throughput scenario's 100 endpoints) as fast as it accepts them, 1,000
//! per `POST /v1/events/batch` over a few connections, until every one is
//! delivered; then it takes a steady open load of `--rate` events/s, one
//! per request, for `--duration`, while a reader fetches events and
//! deliveries of the preload chosen at random (`GET /v1/events/{id}`,
//! `GET /v1/deliveries/{id}`), each read timed. With `--compare-empty`
//! the steady phase runs again on a fresh node without a preload, and
//! the report judges the node's memory with the history against the one
//! without (issue 34: within 1.2x) and the reads' p99 (under 5 ms).
//!
//! The reader draws from a uniform sample of the preload (a reservoir of
//! [`SAMPLE_IDS`] ids) rather than all of them: 20 million ids would
//! take the generator more memory than the figures are worth.
//!
//! Pure pieces (the generator, the reservoir, reading a batch's answer,
//! the verdicts) at the top; the phases that drive the node below.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hookraft_tests::register_endpoint;
use serde::Serialize;

use crate::deployment::Deployment;
use crate::fleet::Fleet;
use crate::load::{self, Load, Progress};
use crate::procstat::rss_mib;
use crate::report::{Quantiles, micros};
use crate::scenario::Scenario;

#[path = "history/render.rs"]
mod render;
pub use render::render;

/// Finished deliveries preloaded without `--history`.
pub const HISTORY_DEFAULT: usize = 1_000_000;
/// The steady phase without `--rate` or `--duration`. Five minutes: a
/// fresh node's memory grows for about two (its history cache fills with
/// the pages its own snapshots write, its own history accumulates), so a
/// two-minute phase judged the last minute of a node still warming up
/// against one already warm (design note 68).
pub const RATE_DEFAULT: f64 = 1_000.0;
pub const DURATION_DEFAULT: Duration = Duration::from_secs(300);
/// Preloaded (event, delivery) ids the reader draws from.
pub const SAMPLE_IDS: usize = 100_000;
/// Reads per second of the steady phase, alternating events and deliveries.
const READS_PER_S: f64 = 50.0;
/// Issue 34's bounds: memory with the history against without, and the
/// p99 of one read.
pub const RSS_RATIO_BOUND: f64 = 1.2;
pub const READ_P99_BOUND_MS: f64 = 5.0;
/// How long a read may take before it counts as failed.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the node's RSS is sampled through a steady phase.
const RSS_EVERY: Duration = Duration::from_secs(1);
/// The end of a steady phase whose RSS samples are judged: one sample at
/// the end moves by 15-20% with a snapshot's buffers in flight, the
/// median of a minute's does not.
const RSS_JUDGED_WINDOW: Duration = Duration::from_secs(60);

/// A small deterministic generator (splitmix64): the reservoir and the
/// reader need uniform picks, not secrecy, and a seed makes a run's
/// choice of ids repeatable.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0), by multiplying rather than by
    /// a remainder, whose bias is below 2^-32 for any `n` used here.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A uniform sample of at most `capacity` items of a stream of unknown
/// length (Algorithm R): every item offered has the same chance to stay.
#[derive(Debug)]
pub struct Reservoir<T> {
    capacity: usize,
    seen: u64,
    items: Vec<T>,
    rng: Rng,
}

impl<T> Reservoir<T> {
    pub fn new(capacity: usize, seed: u64) -> Self {
        Self { capacity, seen: 0, items: Vec::with_capacity(capacity), rng: Rng::new(seed) }
    }

    pub fn offer(&mut self, item: T) {
        self.seen += 1;
        if self.items.len() < self.capacity {
            self.items.push(item);
            return;
        }
        let at = self.rng.below(self.seen);
        if let Some(slot) = usize::try_from(at).ok().and_then(|at| self.items.get_mut(at)) {
            *slot = item;
        }
    }

    /// Items offered so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    pub fn into_items(self) -> Vec<T> {
        self.items
    }
}

/// A figure against its bound.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judged {
    /// `None` when it could not be measured (no reads, no baseline).
    pub value: Option<f64>,
    pub bound: f64,
    pub pass: bool,
}

/// The median of the samples (MiB) taken within `window` of the last one:
/// what a node held at the end of a phase. `None` without samples.
pub fn settled_rss(samples: &[(Duration, f64)], window: Duration) -> Option<f64> {
    let &(last, _) = samples.last()?;
    let mut within: Vec<f64> =
        samples.iter().filter(|(at, _)| last.saturating_sub(*at) <= window).map(|&(_, mib)| mib).collect();
    within.sort_by(f64::total_cmp);
    let mid = within.len() / 2;
    Some(if within.len() % 2 == 1 { within[mid] } else { (within[mid - 1] + within[mid]) / 2.0 })
}

/// The node's RSS with the history over its RSS without, in the last
/// minute of each steady phase ([`settled_rss`]): at most `bound` passes.
pub fn rss_ratio(with_mib: Option<f64>, without_mib: Option<f64>, bound: f64) -> Judged {
    let value = with_mib.zip(without_mib.filter(|&w| w > 0.0)).map(|(with, without)| with / without);
    Judged { value, bound, pass: value.is_some_and(|r| r <= bound) }
}

/// A read p99 (ms) of `reads` reads: under `bound` passes; no reads fail.
pub fn read_p99(p99_ms: f64, reads: usize, bound: f64) -> Judged {
    let value = (reads > 0).then_some(p99_ms);
    Judged { value, bound, pass: value.is_some_and(|p| p < bound) }
}

/// The preload: how fast the node took and delivered the history.
#[derive(Debug, Clone, Serialize)]
pub struct Preload {
    pub requested: usize,
    pub accepted: usize,
    pub not_accepted: u64,
    /// From the first request to the last answer.
    pub ingest_s: f64,
    pub accepted_per_s: f64,
    /// From the first request until every accepted event's delivery
    /// arrived and the node had none pending.
    pub delivered_s: f64,
    pub delivered_per_s: f64,
    /// Of the node, once every delivery was finished.
    pub rss_mib: Option<f64>,
    /// (event, delivery) ids the reader draws from.
    pub sampled_ids: usize,
}

/// Timed reads of one kind.
#[derive(Debug, Clone, Serialize)]
pub struct Reads {
    pub count: usize,
    /// Not answered 200 within the timeout.
    pub failed: u64,
    pub latency_ms: Quantiles,
}

/// One steady phase: the open load, the reads beside it, the node's memory.
#[derive(Debug, Clone, Serialize)]
pub struct Steady {
    pub finished_before: usize,
    pub rate: f64,
    pub duration_s: f64,
    pub offered: usize,
    pub accepted: usize,
    pub not_accepted: u64,
    pub ingest_latency_ms: Quantiles,
    pub end_to_end_latency_ms: Quantiles,
    pub lost: usize,
    pub rss_start_mib: Option<f64>,
    pub rss_end_mib: Option<f64>,
    /// The median of the samples of the phase's last minute
    /// ([`settled_rss`]): what the ratio judges.
    pub rss_settled_mib: Option<f64>,
    /// The highest sample of the phase.
    pub rss_max_mib: Option<f64>,
    pub event_reads: Reads,
    pub delivery_reads: Reads,
}

/// The history scenario's report.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryFigures {
    pub scenario: &'static str,
    pub history: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preload: Option<Preload>,
    pub steady: Steady,
    /// The same steady phase on a node without history (`--compare-empty`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub empty: Option<Steady>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_ratio: Option<Judged>,
    pub event_read_p99: Judged,
    pub delivery_read_p99: Judged,
    /// A new node joined and installed the history (`--join`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub join: Option<crate::join::Joined>,
}

impl HistoryFigures {
    /// Expected deliveries of the steady phases that never arrived.
    pub fn lost(&self) -> usize {
        self.steady.lost + self.empty.as_ref().map_or(0, |e| e.lost)
    }
}

/// What a history run does.
#[derive(Clone)]
pub struct Plan {
    pub history: usize,
    pub rate: f64,
    pub duration: Duration,
    pub connections: usize,
    pub payload_bytes: usize,
    pub compare_empty: bool,
    /// Once the steady phase is over, a new node joins and installs the
    /// history ([`crate::join`]).
    pub join: bool,
    pub delivery_deadline: Duration,
    pub node_args: Vec<String>,
    /// Where each node's log is copied at the end of its phase
    /// (`history-node1.log`; `history-empty-node1.log` without history).
    pub keep_logs: Option<std::path::PathBuf>,
}

/// Runs the scenario: the phase with its history, then, if asked, the
/// phase without.
pub async fn run(plan: &Plan, bin: &std::path::PathBuf) -> Result<HistoryFigures> {
    eprintln!("== history: {} finished deliveries, then {} events/s for {:?}", plan.history, plan.rate, plan.duration);
    let (preload, steady, join) = phase(plan, bin, plan.history).await?;
    let empty = if plan.compare_empty && plan.history > 0 {
        eprintln!("== history: the same steady phase on a node without history");
        Some(phase(&Plan { join: false, ..plan.clone() }, bin, 0).await?.1)
    } else {
        None
    };
    let rss_ratio = empty.as_ref().map(|e| rss_ratio(steady.rss_settled_mib, e.rss_settled_mib, RSS_RATIO_BOUND));
    let judge = |reads: &Reads| read_p99(reads.latency_ms.p99, reads.count, READ_P99_BOUND_MS);
    Ok(HistoryFigures {
        scenario: Scenario::History.name(),
        history: plan.history,
        event_read_p99: judge(&steady.event_reads),
        delivery_read_p99: judge(&steady.delivery_reads),
        preload,
        steady,
        empty,
        rss_ratio,
        join,
    })
}

/// One fresh node: `history` finished deliveries, the steady phase, then
/// a node joining if the plan says so.
async fn phase(
    plan: &Plan,
    bin: &std::path::PathBuf,
    history: usize,
) -> Result<(Option<Preload>, Steady, Option<crate::join::Joined>)> {
    crate::write_back_dirty_pages().await;
    let scenario = Scenario::History;
    let mut deployment = if plan.join {
        Deployment::joinable(bin, plan.node_args.clone()).await
    } else {
        Deployment::start(1, bin, plan.node_args.clone()).await
    };
    let origin = Instant::now();
    let steady_events = crate::soak::events_for(plan.rate, plan.duration);
    let (fleet, fleet_url) = Fleet::start(origin, history + steady_events).await?;
    let registrar = deployment.registrar().await;
    for spec in scenario.endpoints() {
        let mut body = spec.settings.clone();
        body["url"] = format!("{fleet_url}/{}/{}", spec.behaviour, spec.index).into();
        register_endpoint(registrar, &body).await;
    }
    let pid = deployment.pids().first().map(|&(_, pid)| pid);
    let done = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress::default());
    let printer = tokio::spawn(crate::print_progress(origin, progress.clone(), fleet.clone(), done.clone()));

    let (preload, ids) = if history > 0 {
        let url = format!("{}/batch", deployment.event_urls()[0]);
        let started = Instant::now();
        let (ids, accepted, not_accepted) =
            crate::preload::preload_history(&url, history, plan.payload_bytes, origin, &progress, &fleet).await?;
        let ingest_s = started.elapsed().as_secs_f64();
        crate::preload::wait_until_finished(&deployment, &fleet, accepted, plan.delivery_deadline).await;
        let delivered_s = started.elapsed().as_secs_f64();
        let preload = Preload {
            requested: history,
            accepted,
            not_accepted,
            ingest_s,
            accepted_per_s: accepted as f64 / ingest_s.max(f64::EPSILON),
            delivered_s,
            delivered_per_s: fleet.distinct().min(accepted) as f64 / delivered_s.max(f64::EPSILON),
            rss_mib: rss_mib(pid),
            sampled_ids: ids.len(),
        };
        (Some(preload), ids)
    } else {
        (None, Vec::new())
    };
    let finished_before = fleet.distinct();

    let load = Arc::new(Load {
        urls: deployment.event_urls(),
        events: steady_events,
        connections: plan.connections,
        per_request: 1,
        payload_bytes: plan.payload_bytes,
        event_type: scenario.event_type(),
        ordering_key: None,
        origin,
        rate: Some(plan.rate),
    });
    let rss_start_mib = rss_mib(pid);
    let steady_start = origin.elapsed();
    let reads = (READS_PER_S * plan.duration.as_secs_f64()) as usize;
    let reader = tokio::spawn(read_randomly(deployment.urls(""), Arc::new(ids), reads));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn(sample_rss(pid, sampling.clone()));
    let (accepted, not_accepted) = load::run(load, progress.clone()).await?;
    let rss_end_mib = rss_mib(pid);
    sampling.store(false, Ordering::Relaxed);
    let rss_samples = sampler.await.context("the RSS sampler panicked")?;
    let (event_reads, delivery_reads) = reader.await.context("the reader panicked")?;
    let expected: Vec<(u32, &str)> = accepted
        .iter()
        .flat_map(|a| scenario.healthy_targets(a.index).into_iter().map(move |t| (t, a.event_id.as_str())))
        .collect();
    crate::figures::wait_for_arrivals(&fleet, finished_before + expected.len(), plan.delivery_deadline).await;
    done.store(true, Ordering::Relaxed);
    let _ = printer.await;
    let delivered = fleet.arrived_among(expected.iter().copied());
    let mut ingest_us: Vec<u64> = accepted.iter().map(|a| micros(a.latency)).collect();
    ingest_us.sort_unstable();
    let steady = Steady {
        finished_before,
        rate: plan.rate,
        duration_s: plan.duration.as_secs_f64(),
        offered: steady_events,
        accepted: accepted.len(),
        not_accepted,
        ingest_latency_ms: Quantiles::of_sorted_us(&ingest_us),
        end_to_end_latency_ms: Quantiles::of_sorted_us(&fleet.latencies_us_sent_from(steady_start)),
        lost: expected.len() - delivered,
        rss_start_mib,
        rss_end_mib,
        rss_settled_mib: settled_rss(&rss_samples, RSS_JUDGED_WINDOW),
        rss_max_mib: rss_samples.iter().map(|&(_, mib)| mib).reduce(f64::max),
        event_reads,
        delivery_reads,
    };
    let join = match &mut deployment {
        Deployment::Cluster(cluster) if plan.join => {
            eprintln!("== history: a new node joins and installs the history");
            Some(crate::join::join(cluster).await?)
        }
        _ => None,
    };
    if let Some(dir) = &plan.keep_logs {
        deployment.keep_logs(dir, if history > 0 { "history" } else { "history-empty" })?;
    }
    Ok((preload, steady, join))
}

/// Samples the RSS of `pid` every [`RSS_EVERY`] while `sampling` holds;
/// returns each sample (MiB) with its time from the first.
async fn sample_rss(pid: Option<u32>, sampling: Arc<AtomicBool>) -> Vec<(Duration, f64)> {
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut every = tokio::time::interval(RSS_EVERY);
    while sampling.load(Ordering::Relaxed) {
        every.tick().await;
        if let Some(mib) = rss_mib(pid) {
            samples.push((started.elapsed(), mib));
        }
    }
    samples
}

/// Issues `reads` reads at [`READS_PER_S`], alternating an event and a
/// delivery, each of a pair drawn at random from `ids`; returns the
/// timings of each kind.
async fn read_randomly(bases: Vec<String>, ids: Arc<Vec<(String, String)>>, reads: usize) -> (Reads, Reads) {
    let mut timings: [(Vec<u64>, u64); 2] = [(Vec::new(), 0), (Vec::new(), 0)];
    let base = bases.into_iter().next().unwrap_or_default();
    let client = reqwest::Client::builder().no_proxy().timeout(READ_TIMEOUT).build().unwrap_or_default();
    let mut rng = Rng::new(0x5245_4144);
    let reads = if ids.is_empty() { 0 } else { reads };
    let start = tokio::time::Instant::now();
    for k in 0..reads {
        tokio::time::sleep_until(start + Duration::from_secs_f64(k as f64 / READS_PER_S)).await;
        let pick = usize::try_from(rng.below(ids.len() as u64)).unwrap_or(0);
        let (event, delivery) = &ids[pick];
        let kind = k % 2;
        let url =
            if kind == 0 { format!("{base}/v1/events/{event}") } else { format!("{base}/v1/deliveries/{delivery}") };
        let sent = Instant::now();
        let mut request = client.get(&url);
        if let Some(token) = crate::load::bearer_token() {
            request = request.bearer_auth(token);
        }
        let read = match request.send().await {
            Ok(response) if response.status() == reqwest::StatusCode::OK => response.bytes().await.is_ok(),
            Ok(response) => {
                eprintln!("   (read {url} answered {})", response.status());
                false
            }
            Err(_) => false,
        };
        let (latencies, failed) = &mut timings[kind];
        if read {
            latencies.push(micros(sent.elapsed()));
        } else {
            *failed += 1;
        }
    }
    let [events, deliveries] = timings.map(|(mut latencies, failed)| {
        latencies.sort_unstable();
        Reads { count: latencies.len(), failed, latency_ms: Quantiles::of_sorted_us(&latencies) }
    });
    (events, deliveries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_stay_below_their_bound_and_cover_it() {
        let mut rng = Rng::new(7);
        let mut hits = [0u32; 10];
        for _ in 0..10_000 {
            let pick = rng.below(10);
            assert!(pick < 10);
            hits[pick as usize] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1_200).contains(&h)), "{hits:?}");
        assert_eq!(rng.below(0), 0);
        assert_eq!(Rng::new(7).next_u64(), Rng::new(7).next_u64(), "a seed repeats its picks");
    }

    #[test]
    fn the_reservoir_keeps_a_uniform_sample_of_its_capacity() {
        let mut short = Reservoir::new(10, 1);
        (0..4).for_each(|i| short.offer(i));
        assert_eq!((short.seen(), short.into_items()), (4, vec![0, 1, 2, 3]), "all of a short stream");

        let mut reservoir = Reservoir::new(1_000, 1);
        (0..100_000u64).for_each(|i| reservoir.offer(i));
        assert_eq!(reservoir.seen(), 100_000);
        let items = reservoir.into_items();
        assert_eq!(items.len(), 1_000);
        // A uniform sample has as many from each tenth of the stream, about
        // 100 each; a sample of the first thousand would have them all in one.
        let mut per_tenth = [0u32; 10];
        items.iter().for_each(|&i| per_tenth[(i / 10_000) as usize] += 1);
        assert!(per_tenth.iter().all(|&n| (60..140).contains(&n)), "{per_tenth:?}");
        let mut distinct = items.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 1_000, "no item kept twice");
    }

    #[test]
    fn the_settled_rss_is_the_median_of_the_last_window() {
        let at = |s: u64, mib: f64| (Duration::from_secs(s), mib);
        let samples = [at(0, 500.0), at(50, 300.0), at(100, 90.0), at(110, 140.0), at(120, 95.0)];
        assert_eq!(settled_rss(&samples, Duration::from_secs(60)), Some(95.0), "the first two are older");
        assert_eq!(settled_rss(&samples[..4], Duration::from_secs(60)), Some(140.0), "50 s is within 60 of 110");
        assert_eq!(settled_rss(&samples[2..4], Duration::from_secs(60)), Some(115.0), "an even count's middle two");
        assert_eq!(settled_rss(&[], Duration::from_secs(60)), None);
    }

    #[test]
    fn the_rss_ratio_passes_within_its_bound() {
        let within = rss_ratio(Some(120.0), Some(100.0), RSS_RATIO_BOUND);
        assert!(within.pass && within.value.is_some_and(|r| (r - 1.2).abs() < 1e-9), "the bound itself passes");
        let over = rss_ratio(Some(121.0), Some(100.0), RSS_RATIO_BOUND);
        assert!(!over.pass);
        assert_eq!(rss_ratio(None, Some(100.0), RSS_RATIO_BOUND), Judged { value: None, bound: 1.2, pass: false });
        assert!(!rss_ratio(Some(100.0), Some(0.0), RSS_RATIO_BOUND).pass, "no baseline, no verdict");
    }

    #[test]
    fn a_read_p99_passes_under_its_bound_and_only_with_reads() {
        assert!(read_p99(4.99, 100, READ_P99_BOUND_MS).pass);
        assert!(!read_p99(5.0, 100, READ_P99_BOUND_MS).pass, "under, not at");
        assert_eq!(read_p99(0.0, 0, READ_P99_BOUND_MS), Judged { value: None, bound: 5.0, pass: false });
    }
}
