//! `hookraft-chaos`: at-least-once delivery of a three-node docker-compose
//! deployment while its nodes are killed, frozen and cut off.
//!
//! Against a running `docker-compose up` of the repository's compose file, it
//! 1. finds the node containers (`docker-compose ps -q nodeN`, or
//!    `--containers`), their network and its gateway (the host as the
//!    containers see it), and waits until every node is ready and sees every
//!    node live;
//! 2. starts a receiver on `0.0.0.0:<port>` that verifies signatures and
//!    counts deliveries per `webhook-id`, and registers `--endpoints`
//!    endpoints at `http://<gateway>:<port>/chaos/<i>` through the first node;
//! 3. posts `--rate` events per second spread over every node's host port,
//!    each with a unique `Idempotency-Key`, retrying a 5xx, a timeout or a
//!    connection error on the next node with the same key until accepted;
//! 4. meanwhile, for each fault (`docker kill`/`start`, `pause`/`unpause`,
//!    `network disconnect`/`connect`) and each node in turn: injects it, holds
//!    it `--fault-s`, heals it, waits until the cluster has recovered, then
//!    `--settle-s` more;
//! 5. stops ingest, heals everything, waits (`--delivery-deadline-s`) until
//!    the receiver has every accepted event, and prints the verdict: accepted,
//!    delivered, lost, duplicates (and per 10,000 events, and the extra
//!    deliveries counted by the fault they followed and the endpoint they
//!    went to), the longest span with no successful accept and which faults
//!    it overlapped.
//!
//! Exit codes: 0 pass; 1 correctness (an accepted event never arrived, a bad
//! signature, one event id for two keys); 2 liveness (an event could not be
//! accepted at all, or the cluster did not recover from a fault in time);
//! 3 the harness itself failed (docker, setup); 130 interrupted.
//!
//! `cluster/chaos.sh` builds the image, starts the deployment, runs this and
//! tears the deployment down.

#![allow(clippy::disallowed_methods, reason = "a chaos run measures real time; the clock seam is for production code")]

// A binary's root file looks for modules beside it; these live in a folder of
// their own so `src/bin/` holds one file per binary.
#[path = "hookraft_chaos/docker.rs"]
mod docker;
#[path = "hookraft_chaos/ingest.rs"]
mod ingest;
#[path = "hookraft_chaos/receiver.rs"]
mod receiver;
#[path = "hookraft_chaos/report.rs"]
mod report;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use hookraft_core::signing::Secret;
use serde_json::{Value, json};

use docker::{Deployment, Fault};
use ingest::{IngestConfig, IngestLog};
use receiver::Receiver;
use report::FaultWindow;

/// The receiver's signing secret (24 bytes): the endpoints are registered with it.
const CHAOS_SECRET: &str = "whsec_Y2hhb3MtY2hhb3MtY2hhb3MtY2hhb3MtISE=";
/// Timeout of the harness's own calls (readiness, cluster views, registration).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(3);
/// How often readiness and delivery progress are polled.
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// How often delivery progress is printed while waiting.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);
/// Outages listed in the report, longest first.
const OUTAGES_LISTED: usize = 4;

#[derive(Debug, Parser)]
#[command(name = "hookraft-chaos", about = "At-least-once delivery of a docker-compose hookraft cluster under faults")]
struct Args {
    /// Each node's API as published on this host, in the order of `--services`.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:8081,127.0.0.1:8082,127.0.0.1:8083")]
    nodes: Vec<String>,
    /// Node container ids or names, same order [default: from `docker-compose ps -q <service>`].
    #[arg(long, value_delimiter = ',')]
    containers: Vec<String>,
    /// Compose services of the nodes, used to find the containers.
    #[arg(long, value_delimiter = ',', default_value = "node1,node2,node3")]
    services: Vec<String>,
    /// The compose file, used to find the containers.
    #[arg(long, default_value = "docker-compose.yml")]
    compose_file: PathBuf,
    /// The docker network of the nodes [default: the first node container's first network].
    #[arg(long)]
    network: Option<String>,
    /// Address the containers reach this host at [default: the network's gateway].
    #[arg(long)]
    receiver_host: Option<String>,
    /// Port of the receiver on 0.0.0.0 (0: any free port).
    #[arg(long, default_value_t = 0)]
    receiver_port: u16,
    /// Bearer token of the nodes' API.
    #[arg(long, env = "HOOKRAFT_API_TOKEN", hide_env_values = true, default_value = "change-me-api")]
    token: String,
    /// Events posted per second, spread over every node.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Endpoints registered; event n goes to endpoint n mod this.
    #[arg(long, default_value_t = 4)]
    endpoints: usize,
    /// Faults to inject, in order; each runs on every node in turn.
    #[arg(long, value_delimiter = ',', default_value = "kill,pause,disconnect")]
    faults: Vec<String>,
    /// How long each fault is held, in seconds (the default lease is 6 s).
    #[arg(long, default_value_t = 8)]
    fault_s: u64,
    /// Quiet time after the cluster recovered from a fault, in seconds.
    #[arg(long, default_value_t = 5)]
    settle_s: u64,
    /// Ingest before the first fault, in seconds.
    #[arg(long, default_value_t = 5)]
    warmup_s: u64,
    /// How long the cluster may take to recover after a fault is healed, in seconds.
    #[arg(long, default_value_t = 90)]
    recover_deadline_s: u64,
    /// How long to wait for the cluster to be ready at the start, in seconds.
    #[arg(long, default_value_t = 120)]
    ready_deadline_s: u64,
    /// How long every accepted event may take to arrive after healing, in seconds.
    #[arg(long, default_value_t = 300)]
    delivery_deadline_s: u64,
    /// Events posted at once at most; a tick that finds no room is skipped (and counted).
    #[arg(long, default_value_t = 2_000)]
    in_flight_max: usize,
    /// Timeout of one ingest request, in milliseconds.
    #[arg(long, default_value_t = 3_000)]
    request_timeout_ms: u64,
    /// How long one event is retried before it is given up, in seconds.
    #[arg(long, default_value_t = 120)]
    give_up_s: u64,
    /// Nodes every node must see live for the cluster to count as whole
    /// [default: the number of `--nodes`].
    #[arg(long)]
    live_nodes_min: Option<usize>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hookraft-chaos: harness failure: {e:#}");
            ExitCode::from(3)
        }
    }
}

/// What the harness knows about the deployment under test.
struct Target {
    deployment: Deployment,
    /// Base URLs of the nodes from this host.
    urls: Vec<String>,
    /// Node ids, as each node reports its own.
    ids: Vec<u64>,
    client: reqwest::Client,
    token: String,
    /// Nodes every node must see live for the cluster to count as whole.
    live_nodes_min: usize,
}

async fn run(args: Args) -> Result<ExitCode> {
    ensure!(args.rate > 0.0 && args.endpoints > 0 && args.in_flight_max > 0, "rate, endpoints, in-flight must be > 0");
    let faults: Vec<Fault> = args.faults.iter().map(|f| Fault::parse(f)).collect::<Result<_>>()?;
    let origin = Instant::now();
    let target = discover(&args).await?;
    println!("nodes {:?} (ids {:?}) in containers {:?}", target.urls, target.ids, target.deployment.containers);

    let secret = Secret::parse(CHAOS_SECRET).context("the built-in secret")?;
    let receiver = Receiver::start(args.receiver_port, secret, origin).await?;
    let host = match &args.receiver_host {
        Some(host) => host.clone(),
        None => blocking(|d| docker::gateway_of(&d), target.deployment.network.clone()).await?,
    };
    let endpoints = register_endpoints(&target, &host, receiver.addr.port(), args.endpoints).await?;
    println!("receiver on 0.0.0.0:{} reached as {host}; endpoints {endpoints:?}", receiver.addr.port());

    let run_id = format!("{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis());
    let config = Arc::new(IngestConfig {
        nodes: target.urls.clone(),
        token: target.token.clone(),
        rate_per_s: args.rate,
        in_flight_max: args.in_flight_max,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        give_up_after: Duration::from_secs(args.give_up_s),
        endpoints,
        run_id,
    });
    let log = Arc::new(IngestLog::new(origin));
    let stop = Arc::new(AtomicBool::new(false));
    let ingest_start = log.now();
    let ingest = tokio::spawn(ingest::run(config, log.clone(), stop.clone()));

    let chaos = async {
        tokio::time::sleep(Duration::from_secs(args.warmup_s)).await;
        let windows = run_schedule(&target, &args, &faults, &log).await;
        tokio::time::sleep(Duration::from_secs(args.settle_s)).await;
        windows
    };
    let schedule = tokio::select! {
        windows = chaos => windows,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("interrupted: healing every container");
            heal_everything(&target.deployment).await;
            return Ok(ExitCode::from(130));
        }
    };
    stop.store(true, Ordering::Relaxed);
    let ingest_end = log.now();
    heal_everything(&target.deployment).await;
    let (windows, unrecovered) = match schedule {
        Ok(result) => result,
        Err(e) => return Err(e.context("fault schedule")),
    };
    println!("ingest stopped at t={}; waiting for events in flight", report::seconds(ingest_end));
    ingest.await.context("ingest task")?;

    let deadline = Duration::from_secs(args.delivery_deadline_s);
    let waited = wait_for_deliveries(&receiver, &log, deadline).await;
    Ok(verdict(&log, &receiver, &windows, unrecovered, &target.ids, (ingest_start, ingest_end), waited))
}

/// Finds containers, network and node ids, and waits until the cluster is whole.
async fn discover(args: &Args) -> Result<Target> {
    ensure!(!args.nodes.is_empty(), "--nodes needs every node of the cluster");
    let containers = if args.containers.is_empty() {
        let (file, services) = (args.compose_file.clone(), args.services.clone());
        blocking(move |()| docker::compose_containers(&file, &services), ()).await?
    } else {
        args.containers.clone()
    };
    ensure!(containers.len() == args.nodes.len(), "{} containers for {} nodes", containers.len(), args.nodes.len());
    let network = match &args.network {
        Some(network) => network.clone(),
        None => blocking(|c| docker::network_of(&c), containers[0].clone()).await?,
    };
    let deployment = blocking(move |(c, n)| Deployment::new(c, n), (containers, network)).await?;
    // A previous run that was interrupted may have left a node frozen or cut off.
    heal_everything(&deployment).await;
    let client = reqwest::Client::builder().timeout(CONTROL_TIMEOUT).build()?;
    let urls: Vec<String> = args.nodes.iter().map(|n| format!("http://{n}")).collect();
    let live_nodes_min = args.live_nodes_min.unwrap_or(urls.len());
    let mut target = Target { deployment, urls, ids: Vec::new(), client, token: args.token.clone(), live_nodes_min };
    let deadline = Duration::from_secs(args.ready_deadline_s);
    if let Err(why) = wait_whole(&target, deadline).await {
        bail!("the cluster was not ready within {deadline:?}: {why}");
    }
    for url in &target.urls {
        let view = cluster_view(&target, url).await.map_err(|e| anyhow::anyhow!(e))?;
        target.ids.push(view["node_id"].as_u64().context("a cluster view without node_id")?);
    }
    Ok(target)
}

/// Runs a blocking docker call off the async workers.
async fn blocking<I: Send + 'static, T: Send + 'static>(
    f: impl FnOnce(I) -> Result<T> + Send + 'static,
    input: I,
) -> Result<T> {
    tokio::task::spawn_blocking(move || f(input)).await.context("a docker call panicked")?
}

async fn heal_everything(deployment: &Deployment) {
    let deployment = deployment.clone();
    let problems = tokio::task::spawn_blocking(move || deployment.heal_all()).await.unwrap_or_default();
    for problem in problems {
        eprintln!("heal: {problem}");
    }
}

async fn cluster_view(target: &Target, url: &str) -> Result<Value, String> {
    let response = target
        .client
        .get(format!("{url}/v1/cluster"))
        .bearer_auth(&target.token)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| format!("{url}: unreadable cluster view: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}/v1/cluster answered {status}: {body}"));
    }
    Ok(body)
}

/// `Ok` when every node is ready and sees a leader and every node live.
async fn whole(target: &Target) -> Result<(), String> {
    let expected = target.live_nodes_min;
    for url in &target.urls {
        let ready = target.client.get(format!("{url}/readyz")).send().await.map_err(|e| format!("{url}: {e}"))?;
        if !ready.status().is_success() {
            return Err(format!("{url}/readyz answered {}", ready.status()));
        }
        let view = cluster_view(target, url).await?;
        let nodes = view["nodes"].as_array().cloned().unwrap_or_default();
        let live = nodes.iter().filter(|n| n["live"] == Value::Bool(true)).count();
        if view["leader_id"].is_null() || live < expected {
            return Err(format!("{url} sees leader {} and {live} of {expected} nodes live", view["leader_id"]));
        }
    }
    Ok(())
}

async fn wait_whole(target: &Target, deadline: Duration) -> Result<(), String> {
    let started = Instant::now();
    loop {
        match whole(target).await {
            Ok(()) => return Ok(()),
            Err(why) if started.elapsed() > deadline => return Err(why),
            Err(_) => tokio::time::sleep(POLL_INTERVAL).await,
        }
    }
}

async fn register_endpoints(target: &Target, host: &str, port: u16, count: usize) -> Result<Vec<String>> {
    let mut ids = Vec::with_capacity(count);
    for i in 0..count {
        let body = json!({
            "url": format!("http://{host}:{port}/chaos/{i}"),
            "secret": CHAOS_SECRET,
            "description": "hookraft-chaos",
            "max_in_flight": 50,
            "timeout_ms": 5_000,
            "retry": {"attempts_max": 100, "base_ms": 200, "cap_ms": 5_000, "max_age_s": 3_600},
        });
        let started = Instant::now();
        let id = loop {
            let sent = target
                .client
                .post(format!("{}/v1/endpoints", target.urls[0]))
                .bearer_auth(&target.token)
                .json(&body)
                .send()
                .await;
            let why = match sent {
                Ok(r) if r.status().as_u16() == 201 => {
                    break r.json::<Value>().await?["id"].as_str().map(str::to_string);
                }
                Ok(r) if !r.status().is_server_error() => {
                    bail!("registering an endpoint: {} {}", r.status(), r.text().await?)
                }
                Ok(r) => format!("{}", r.status()),
                Err(e) => e.to_string(),
            };
            ensure!(started.elapsed() < Duration::from_secs(60), "registering an endpoint kept failing: {why}");
            tokio::time::sleep(POLL_INTERVAL).await;
        };
        ids.push(id.context("a registered endpoint without id")?);
    }
    Ok(ids)
}

/// Injects each fault on each node in turn. Returns the fault windows and
/// how many faults the cluster did not recover from within the deadline.
async fn run_schedule(
    target: &Target,
    args: &Args,
    faults: &[Fault],
    log: &IngestLog,
) -> Result<(Vec<FaultWindow>, usize)> {
    let mut windows = Vec::new();
    let mut unrecovered = 0;
    for &fault in faults {
        for (i, container) in target.deployment.containers.iter().enumerate() {
            let leader = cluster_view(target, &target.urls[(i + 1) % target.urls.len()])
                .await
                .ok()
                .and_then(|v| v["leader_id"].as_u64());
            let role = if leader == Some(target.ids[i]) { " (leader)" } else { "" };
            let what = format!("{} node {}{role}", fault.name(), target.ids[i]);
            let from = log.now();
            println!("t={} {what}: inject ({} accepted so far)", report::seconds(from), log.accepted_count());
            let (d, c) = (target.deployment.clone(), container.clone());
            blocking(move |()| d.inject(fault, &c), ()).await?;
            tokio::time::sleep(Duration::from_secs(args.fault_s)).await;
            let (d, c) = (target.deployment.clone(), container.clone());
            blocking(move |()| d.heal(fault, &c), ()).await?;
            let healed = log.now();
            let recovered = wait_whole(target, Duration::from_secs(args.recover_deadline_s)).await;
            let until = log.now();
            match recovered {
                Ok(()) => println!(
                    "t={} {what}: healed at t={}, cluster whole again after {}",
                    report::seconds(until),
                    report::seconds(healed),
                    report::seconds(until - healed)
                ),
                Err(why) => {
                    unrecovered += 1;
                    println!(
                        "t={} {what}: NOT RECOVERED within {}s: {why}",
                        report::seconds(until),
                        args.recover_deadline_s
                    );
                }
            }
            windows.push(FaultWindow { what, from, until });
            tokio::time::sleep(Duration::from_secs(args.settle_s)).await;
        }
    }
    Ok((windows, unrecovered))
}

/// Waits until every accepted event has arrived, or the deadline. Returns how long it waited.
async fn wait_for_deliveries(receiver: &Receiver, log: &IngestLog, deadline: Duration) -> Duration {
    let ids: Vec<String> =
        log.accepted.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|a| a.event_id.clone()).collect();
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    let started = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let delivered = receiver.delivered_among(distinct.iter().copied());
        if delivered == distinct.len() || started.elapsed() > deadline {
            println!(
                "delivered {delivered} of {} accepted events, after waiting {}",
                distinct.len(),
                report::seconds(started.elapsed())
            );
            return started.elapsed();
        }
        if last_print.elapsed() > PROGRESS_INTERVAL {
            println!("  waiting for deliveries: {delivered} of {}", distinct.len());
            last_print = Instant::now();
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

fn verdict(
    log: &IngestLog,
    receiver: &Receiver,
    windows: &[FaultWindow],
    unrecovered: usize,
    node_ids: &[u64],
    (ingest_start, ingest_end): (Duration, Duration),
    waited: Duration,
) -> ExitCode {
    let accepted = log.accepted.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let seen = receiver.snapshot();
    let pairs: Vec<(u64, String)> = accepted.iter().map(|a| (a.seq, a.event_id.clone())).collect();
    let tally = report::tally(&pairs, &seen.per_event);
    let times: Vec<Duration> = accepted.iter().map(|a| a.at).collect();
    let outages = report::longest_outages(&times, ingest_start, ingest_end, OUTAGES_LISTED);
    let gave_up = log.gave_up.load(Ordering::Relaxed);
    let rejected = log.rejected_total.load(Ordering::Relaxed);

    println!("\n== hookraft-chaos verdict");
    println!("ingest window:        {} .. {}", report::seconds(ingest_start), report::seconds(ingest_end));
    println!("faults injected:      {} ({} not recovered in time)", windows.len(), unrecovered);
    println!(
        "offered:              {} (skipped at the in-flight cap: {})",
        log.offered.load(Ordering::Relaxed),
        log.skipped.load(Ordering::Relaxed)
    );
    println!("accepted:             {}", tally.accepted);
    println!(
        "failed attempts:      {} (retried on another node with the same key)",
        log.failures_total.load(Ordering::Relaxed)
    );
    let failures: Vec<(Duration, String, String)> = log
        .failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|f| (f.at, format!("node {}", node_ids.get(f.node).copied().unwrap_or(0)), f.reason.clone()))
        .collect();
    print!("{}", report::render_failures(&failures));
    println!("given up / refused:   {gave_up} / {rejected}");
    for example in log.rejected.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        println!("  refused: {example}");
    }
    println!("delivered distinct:   {} (waited {} after healing)", tally.delivered, report::seconds(waited));
    println!("lost:                 {}", tally.lost.len());
    for id in tally.lost.iter().take(10) {
        println!("  lost: {id}");
    }
    println!(
        "duplicates:           {} events received more than once ({} extra deliveries), {:.1} per 10,000 events",
        tally.duplicated_events,
        tally.extra_deliveries,
        tally.duplicates_per_10k()
    );
    print!("{}", report::render_repeats(&seen.repeats, windows));
    println!("unacknowledged:       {} (received, but ingest never got an answer)", tally.unacknowledged);
    println!("invalid signatures:   {}", seen.invalid);
    for example in &seen.invalid_examples {
        println!("  invalid: {example}");
    }
    println!("id collisions:        {}", tally.id_collisions);
    print!("{}", report::render_outages(&outages, windows));

    if !tally.lost.is_empty() || seen.invalid > 0 || tally.id_collisions > 0 {
        println!("FAIL (correctness): accepted events lost, bad signatures or colliding ids");
        ExitCode::from(1)
    } else if gave_up > 0 || rejected > 0 || unrecovered > 0 || tally.accepted == 0 {
        println!("FAIL (liveness): events could not be accepted, or the cluster did not recover in time");
        ExitCode::from(2)
    } else {
        println!("PASS: every accepted event was delivered");
        ExitCode::SUCCESS
    }
}
