//! `hookraft-bench`: hookraft's speed, measured the same way every time.
//!
//! For each scenario of `--scenario` it starts a fresh deployment (one node,
//! or `--nodes 3` on loopback, from the release binary beside this one), a
//! receiver fleet in this process that counts deliveries per endpoint and
//! `webhook-id`, registers the scenario's endpoints, posts its events from
//! `--connections` keep-alive clients as fast as they are accepted (one per
//! request, or `--batch N` per `POST /v1/events/batch`), waits
//! until every expected delivery arrived, and reports accepted events/s,
//! ingest latency p50/p99/p999, delivered/s, end-to-end latency p50/p99,
//! duplicates, lost deliveries, and each node's memory and CPU. A progress
//! line goes to stderr every second. `--json` prints the reports as JSON on
//! stdout (the human summary then goes to stderr).
//!
//! Scenarios (`scenario.rs`): `throughput` (100 endpoints), `isolation` (99
//! healthy, one hanging past its timeout, one answering 500), `backlog` (a
//! million deliveries to an endpoint that is down, then back: memory per
//! pending delivery and drain rate), `fan-out` (each event to 50
//! endpoints), `ingest-only`, and `ordered` with its twin
//! `unordered-retries`: the throughput scenario's endpoints delivering in
//! order per key (1,000 keys) or not, while the fleet refuses one first
//! attempt in ten. For those the report adds the refused first attempts
//! and, for `ordered`, how long deliveries waited behind their keys and
//! the fleet's count of deliveries out of their key's order. `inbound`
//! (`inbound.rs`) is the throughput scenario's endpoints taking the events
//! of a Stripe source, each event a signed provider request to `POST
//! /in/{source}` and `--provider-retry-percent` of them posted again: the
//! report adds provider requests/s, the repeats answered as duplicates,
//! and the node's CPU per request; a provider event accepted or delivered
//! twice fails the run. `soak` (`soak.rs`) offers the throughput
//! scenario's events at a fixed `--rate` (200/s unless given) for a fixed
//! `--duration` (10 minutes unless given), one per request, and reports
//! per 10-second window the events accepted, their ingest and end-to-end
//! p99 (by when each was due) and the deliveries that arrived; every 10 s
//! the first node's RSS, its snapshot's bytes and index and the log past
//! it (`/metrics`) and the snapshots its log reported; and whether the
//! last minute's end-to-end p99 stayed within 1.5x of the second
//! minute's (PASS or FAIL, printed and in the JSON; the exit code does
//! not change). With `--max-pending` or `--memory-budget` the nodes run
//! with that ingest budget, and the report adds how they held at the cap:
//! their memory there, the 503s while there, and whether ingest resumed
//! after the drain (`--scenario backlog --events 100000 --max-pending
//! 20000` drives a node into its budget with the endpoint down).
//! `history` (`history.rs`) preloads `--history` finished deliveries
//! (1,000,000 unless given) in batches to the throughput scenario's
//! endpoints, reporting how fast the node took and delivered them and its
//! RSS after; then it offers `--rate` (1,000/s unless given) for
//! `--duration` (2 minutes unless given) while reading 50 preloaded events
//! and deliveries a second, at random, and reports the reads' p50/p99/p999
//! per kind, the load's ingest and end-to-end latency and the node's RSS
//! at the phase's start and end. `--compare-empty` runs the same phase on
//! a fresh node without history and judges the RSS with it against
//! without (within 1.2x) and each kind's read p99 (under 5 ms), PASS or
//! FAIL like the soak; with `--json` its report is a second JSON document.
//! `--join` (`join.rs`) then adds a new node, which is sent the history
//! as a snapshot: the time until it caught up, the snapshot's size, the
//! import's time and the new node's extra RSS (bound: 1 GiB).
//!
//! ```text
//! cargo build --release -p hookraft -p hookraft-tests
//! target/release/hookraft-bench --scenario throughput,isolation --nodes 1
//! target/release/hookraft-bench --scenario soak --rate 2000 --duration 10m
//! target/release/hookraft-bench --scenario history --history 20000000 --compare-empty
//! target/release/hookraft-bench --scenario history --history 160000 --payload-bytes 65536 --join
//! ```
//!
//! It prints figures; it fails (exit 1) only when an expected delivery never
//! arrives, one of an ordered key arrives before the one before it was
//! delivered, or a provider event is accepted or delivered twice, which
//! would be a bug, not a slow run.

#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time; the clock seam is for production code")]

#[path = "hookraft_bench/args.rs"]
mod args;
#[path = "hookraft_bench/deployment.rs"]
mod deployment;
#[path = "hookraft_bench/figures.rs"]
mod figures;
#[path = "hookraft_bench/fleet.rs"]
mod fleet;
#[path = "hookraft_bench/history.rs"]
mod history;
#[path = "hookraft_bench/http1.rs"]
mod http1;
#[path = "hookraft_bench/inbound.rs"]
mod inbound;
#[path = "hookraft_bench/join.rs"]
mod join;
#[path = "hookraft_bench/load.rs"]
mod load;
#[path = "hookraft_bench/ordered.rs"]
mod ordered;
#[path = "hookraft_bench/preload.rs"]
mod preload;
#[path = "hookraft_bench/procstat.rs"]
mod procstat;
#[path = "hookraft_bench/report.rs"]
mod report;
#[path = "hookraft_bench/scenario.rs"]
mod scenario;
#[path = "hookraft_bench/soak.rs"]
mod soak;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use args::Args;
use clap::Parser;
use hookraft_tests::{locate_hookraft_binary, register_endpoint};

use deployment::Deployment;
use figures::{budget_figures, cpu_percent, drain_backlog, inbound_figures, retry_figures, usage, wait_for_arrivals};
use fleet::Fleet;
use load::{Load, Progress};
use report::{BenchUsage, Quantiles, Report};
use scenario::Scenario;

/// How often the progress line is printed and delivery progress is polled.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
const MIB: f64 = 1024.0 * 1024.0;

/// The same allocator as the node, so the load generator and the fleet
/// take less of the CPU the node shares with them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<ExitCode> {
    let args = Args::parse();
    ensure!(args.warmup_s >= 0.0 && args.warmup_s.is_finite(), "--warmup-s must be a number of seconds, 0 or more");
    ensure!(args.connections > 0 && args.nodes > 0, "connections and nodes must be positive");
    ensure!((1..=1_000).contains(&args.batch), "--batch must be 1 to 1,000 events per request");
    ensure!(args.provider_retry_percent <= 100, "--provider-retry-percent must be 0 to 100");
    ensure!(
        args.batch == 1 || !args.scenario.contains(&Scenario::Inbound),
        "--scenario inbound posts one provider event per request (a provider has no batch)"
    );
    let soaks = args.scenario.contains(&Scenario::Soak);
    let histories = args.scenario.contains(&Scenario::History);
    ensure!(
        !(soaks || histories) || args.events.is_none(),
        "--scenario soak and history post --rate × --duration events; give those instead of --events"
    );
    ensure!(soaks || histories || args.duration.is_none(), "--duration is for --scenario soak or history");
    ensure!(
        histories || (args.history.is_none() && !args.compare_empty && !args.join),
        "--history, --compare-empty and --join are for --scenario history"
    );
    ensure!(!histories || args.nodes == 1, "--scenario history runs one node");
    ensure!(
        !(soaks && histories) || args.duration.is_none(),
        "--duration means a different length to soak and history; run them apart"
    );
    ensure!(
        !soaks || args.soak_duration() >= soak::DURATION_MIN,
        "--duration must be at least {} s: the second minute is compared with the last",
        soak::DURATION_MIN.as_secs()
    );
    let bin = match args.bin.clone() {
        Some(bin) => bin,
        None => locate_hookraft_binary(),
    };
    ensure!(
        bin.is_file(),
        "no hookraft binary at {}; build it with `cargo build --release -p hookraft`",
        bin.display()
    );

    let mut args = args;
    // Kept until the run ends: the nodes read it when they start.
    let _keyring_dir = if args.encrypt {
        let (dir, path) = fresh_keyring()?;
        args.keyring = Some(path);
        Some(dir)
    } else {
        None
    };
    let mut reports = Vec::new();
    let mut history_reports = Vec::new();
    for &scenario in &args.scenario {
        if scenario == Scenario::History {
            let figures = history::run(&args.history_plan(), &bin).await?;
            let text = history::render(&figures);
            if args.json {
                eprint!("{text}")
            } else {
                print!("{text}")
            }
            history_reports.push(figures);
            continue;
        }
        let report = run_scenario(&args, scenario, &bin).await?;
        let text = report.render();
        if args.json {
            eprint!("{text}")
        } else {
            print!("{text}")
        }
        reports.push(report);
    }
    let by_name = |name: &str| reports.iter().find(|r| r.scenario == name);
    if let (Some(base), Some(isolated)) = (by_name("throughput"), by_name("isolation")) {
        let ratio = isolated.end_to_end_latency_ms.p99 / base.end_to_end_latency_ms.p99.max(f64::EPSILON);
        let line = format!("isolation: healthy end-to-end p99 is {ratio:.2}x the throughput scenario's");
        if args.json { eprintln!("{line}") } else { println!("{line}") }
    }
    if args.json {
        if !reports.is_empty() || history_reports.is_empty() {
            println!("{}", serde_json::to_string_pretty(&reports)?);
        }
        // A document of its own: the history's report has its own shape.
        if !history_reports.is_empty() {
            println!("{}", serde_json::to_string_pretty(&history_reports)?);
        }
    }
    let lost: usize =
        reports.iter().map(|r| r.lost).sum::<usize>() + history_reports.iter().map(|h| h.lost()).sum::<usize>();
    let out_of_order: u64 = reports.iter().filter_map(|r| r.out_of_order).sum();
    let twice: u64 = reports.iter().map(Report::provider_events_twice).sum();
    if lost > 0 {
        eprintln!("FAIL: {lost} expected deliveries never arrived");
    }
    if out_of_order > 0 {
        eprintln!("FAIL: {out_of_order} requests arrived before their key's previous sequence was delivered");
    }
    if twice > 0 {
        eprintln!("FAIL: {twice} provider events were accepted or delivered more than once");
    }
    if lost > 0 || out_of_order > 0 || twice > 0 {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// A keyring of one key from the OS, in a private temporary directory.
fn fresh_keyring() -> Result<(tempfile::TempDir, PathBuf)> {
    use std::io::Read;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    let key = hookraft_core::payload::KeyMaterial::from_bytes(key);
    let file = hookraft_core::payload::KeyringFile { active: "k1".into(), keys: vec![("k1".into(), key)] };
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("keyring");
    std::fs::write(&path, file.render())?;
    Ok((dir, path))
}

/// Writes the machine's dirty pages back before a deployment starts. A build
/// just before a run leaves hundreds of megabytes dirty, and the kernel
/// writes them back about 30 s later in one burst: a node's log syncs waited
/// 0.4 s behind one such burst of 325 MB, in the middle of a measurement.
async fn write_back_dirty_pages() {
    match tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await {
        Ok(Ok(status)) if status.success() => {}
        outcome => eprintln!("   (could not write back dirty pages before the run: {outcome:?})"),
    }
}

async fn run_scenario(args: &Args, scenario: Scenario, bin: &PathBuf) -> Result<Report> {
    let events = args.events_of(scenario);
    let rate = args.rate_of(scenario);
    eprintln!("== {}: {events} events, {} node(s)", scenario.name(), args.nodes);
    // Counted before anything starts: a million targets for the backlog.
    let expected_arrivals = (0..events).map(|index| scenario.healthy_targets(index).len()).sum();
    write_back_dirty_pages().await;
    let deployment = Deployment::start(args.nodes, bin, args.node_args()).await;
    let origin = Instant::now();
    let (fleet, fleet_url) = Fleet::start(origin, expected_arrivals).await?;
    let specs = scenario.endpoints();
    let registrar = deployment.registrar().await;
    let source = if scenario.inbound() { Some(inbound::create_source(registrar).await?) } else { None };
    for spec in &specs {
        let mut body = spec.settings.clone();
        body["url"] = format!("{fleet_url}/{}/{}", spec.behaviour, spec.index).into();
        if let Some(source) = &source {
            body["sources"] = serde_json::json!([source]);
        }
        register_endpoint(registrar, &body).await;
    }

    let before = deployment.samples();
    let bench_before = procstat::sample(std::process::id());
    let machine_before = procstat::machine();
    let load = Arc::new(Load {
        urls: match &source {
            Some(source) => deployment.urls(&format!("/in/{source}")),
            None => deployment.event_urls(),
        },
        events,
        connections: args.connections,
        per_request: args.batch,
        payload_bytes: args.payload_bytes,
        event_type: scenario.event_type(),
        ordering_key: scenario.ordering_key(),
        origin,
        rate,
    });
    let progress = Arc::new(Progress::default());
    let done = Arc::new(AtomicBool::new(false));
    let printer = tokio::spawn(print_progress(origin, progress.clone(), fleet.clone(), done.clone()));
    let ingest_started = origin.elapsed();
    let sampler = (scenario == Scenario::Soak)
        .then(|| tokio::spawn(soak::sample_until(deployment.watched(), origin + ingest_started, done.clone())));
    let (accepted, not_accepted, repeats) = match &source {
        Some(_) => {
            let signer = inbound::StripeSigner::new(inbound::STRIPE_SECRET);
            let (accepted, failed, repeats) =
                inbound::run(load, signer, args.provider_retry_percent, progress.clone()).await?;
            (accepted, failed, Some(repeats))
        }
        None => {
            let (accepted, failed) = load::run(load, progress.clone()).await?;
            (accepted, failed, None)
        }
    };
    let ingest_s = (origin.elapsed() - ingest_started).as_secs_f64();
    let at_cap = deployment.samples();

    let expected: Vec<(u32, &str)> = accepted
        .iter()
        .flat_map(|a| scenario.healthy_targets(a.index).into_iter().map(move |t| (t, a.event_id.as_str())))
        .collect();
    let backlog = if scenario == Scenario::Backlog {
        Some(drain_backlog(&deployment, &fleet, &before, accepted.len(), args, expected.len()).await)
    } else {
        None
    };
    wait_for_arrivals(&fleet, expected.len(), Duration::from_secs(args.delivery_deadline_s)).await;
    let budget = if args.budgeted() {
        Some(budget_figures(args, &deployment, &progress, &accepted, &at_cap, scenario.event_type()).await)
    } else {
        None
    };
    done.store(true, Ordering::Relaxed);
    let _ = printer.await;
    let samples = match sampler {
        Some(sampler) => Some(sampler.await.unwrap_or_default()),
        None => None,
    };
    let wall = origin.elapsed() - ingest_started;
    let after = deployment.samples();
    let bench_after = procstat::sample(std::process::id());
    let machine_after = procstat::machine();

    let delivered = fleet.arrived_among(expected.iter().copied());
    let duplicates = fleet.duplicates();
    let retries = if scenario.retries() { Some(retry_figures(scenario, &deployment, &fleet).await) } else { None };
    let delivery_s = fleet.last_first_arrival().saturating_sub(ingest_started).as_secs_f64();
    if let Some(dir) = &args.keep_logs {
        deployment.keep_logs(dir, scenario.name())?;
    }
    let measured_from = ingest_started + Duration::from_secs_f64(args.warmup_s);
    // Every provider request's latency, repeats answered as duplicates included.
    let repeated = repeats.as_ref().map_or(&[][..], |r| &r.answered[..]);
    let ingest_us = |from: Duration| {
        let firsts = accepted.iter().map(|a| (a.due, a.latency));
        let all = firsts.chain(repeated.iter().copied()).filter(|&(due, _)| due >= from);
        let mut us: Vec<u64> = all.map(|(_, latency)| report::micros(latency)).collect();
        us.sort_unstable();
        us
    };
    let node_usage = usage(&before, &after, wall, accepted.len());
    let inbound = repeats.as_ref().map(|r| {
        let beyond = fleet.distinct().saturating_sub(delivered);
        inbound_figures(args.provider_retry_percent, r, accepted.len(), ingest_s, beyond, &node_usage)
    });
    let soak = samples.map(|samples| soak_figures(args, &accepted, &fleet, ingest_started, samples));
    let warmed_up = args.warmup_s > 0.0;
    let whole_run = |quantiles: Quantiles| warmed_up.then_some(quantiles);
    Ok(Report {
        scenario: scenario.name(),
        nodes: args.nodes,
        connections: args.connections,
        events_per_request: args.batch,
        delivery_threads: args.delivery_threads,
        retention: args.retention.clone(),
        encrypted: args.encrypted(),
        endpoints: specs.len(),
        payload_bytes: args.payload_bytes,
        events_offered: events,
        offered_per_s: rate,
        accepted: accepted.len(),
        not_accepted,
        ingest_s,
        accepted_per_s: accepted.len() as f64 / ingest_s,
        warmup_s: args.warmup_s,
        ingest_latency_ms: Quantiles::of_sorted_us(&ingest_us(measured_from)),
        ingest_latency_whole_run_ms: whole_run(Quantiles::of_sorted_us(&ingest_us(Duration::ZERO))),
        deliveries_expected: expected.len(),
        delivered,
        delivery_s,
        delivered_per_s: if delivery_s > 0.0 { delivered as f64 / delivery_s } else { 0.0 },
        end_to_end_latency_ms: Quantiles::of_sorted_us(&fleet.latencies_us_sent_from(measured_from)),
        end_to_end_latency_whole_run_ms: whole_run(Quantiles::of_sorted_us(
            &fleet.latencies_us_sent_from(Duration::ZERO),
        )),
        duplicates,
        lost: expected.len() - delivered,
        out_of_order: scenario.ordered().then(|| fleet.out_of_order()),
        unhealthy_requests: fleet.received_unhealthy.load(Ordering::Relaxed),
        node_usage,
        bench_usage: bench_before.zip(bench_after).map(|(start, end)| {
            let cpu_s = end.cpu.saturating_sub(start.cpu).as_secs_f64();
            BenchUsage { cpu_s, cpu_percent: cpu_percent(cpu_s, wall) }
        }),
        machine_usage: machine_before.zip(machine_after).and_then(|(start, end)| start.usage_until(&end)),
        backlog,
        budget,
        retries,
        inbound,
        soak,
    })
}

/// The soak's windows and verdicts, from the accepted events and the
/// fleet's arrivals, every time taken from the load's start.
fn soak_figures(
    args: &Args,
    accepted: &[load::Accepted],
    fleet: &Fleet,
    load_start: Duration,
    samples: Vec<soak::Sample>,
) -> soak::SoakFigures {
    let start_us = report::micros(load_start);
    let ingest: Vec<(u64, u64)> = accepted
        .iter()
        .map(|a| (report::micros(a.due.saturating_sub(load_start)), report::micros(a.latency)))
        .collect();
    let end_to_end: Vec<(u64, u64)> = fleet
        .latency_samples_us()
        .into_iter()
        .map(|(sent, latency)| (sent.saturating_sub(start_us), latency))
        .collect();
    let duration = args.soak_duration();
    let duration_us = report::micros(duration);
    let window_us = report::micros(soak::WINDOW);
    let count = usize::try_from(duration_us.div_ceil(window_us)).unwrap_or(usize::MAX);
    soak::SoakFigures {
        duration_s: duration.as_secs_f64(),
        window_s: soak::WINDOW.as_secs(),
        windows: soak::windows(&ingest, &end_to_end, window_us, count),
        samples,
        end_to_end: soak::verdict(&end_to_end, duration_us, soak::RATIO_BOUND),
        ingest: soak::verdict(&ingest, duration_us, soak::RATIO_BOUND),
    }
}

async fn print_progress(origin: Instant, progress: Arc<Progress>, fleet: Arc<Fleet>, done: Arc<AtomicBool>) {
    let (mut last_accepted, mut last_received) = (0, 0);
    let mut last_machine = procstat::machine();
    while !done.load(Ordering::Relaxed) {
        tokio::time::sleep(PROGRESS_INTERVAL).await;
        let accepted = progress.accepted.load(Ordering::Relaxed);
        let received = fleet.received.load(Ordering::Relaxed);
        let recent = progress.take_recent_latencies();
        let ms_at = |q: f64| report::quantile(&recent, q) as f64 / 1000.0;
        // That second's busy and stolen shares: a second whose cores the
        // hypervisor took away shows it here, beside the latency it caused.
        let machine = procstat::machine();
        let cores = match last_machine.zip(machine).and_then(|(from, to)| from.usage_until(&to)) {
            Some(usage) => format!(", cores busy {:.0}% stolen {:.0}%", usage.busy_percent, usage.steal_percent),
            None => String::new(),
        };
        eprintln!(
            "  t={:>5.1}s accepted {accepted} (+{}/s, request p50 {:.1} p99 {:.1} max {:.1} ms), delivered {received} (+{}/s), not accepted {}{cores}",
            origin.elapsed().as_secs_f64(),
            accepted - last_accepted,
            ms_at(0.5),
            ms_at(0.99),
            ms_at(1.0),
            received.saturating_sub(last_received),
            progress.failed.load(Ordering::Relaxed),
        );
        (last_accepted, last_received, last_machine) = (accepted, received, machine);
    }
}
