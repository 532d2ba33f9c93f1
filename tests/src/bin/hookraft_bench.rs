//! `hookraft-bench`: ingest and end-to-end delivery throughput of one node.
//!
//! Starts a fresh node (the release binary by default) in a temporary
//! directory, a fast in-process receiver that answers 200 at once, registers
//! `--endpoints` endpoints each subscribed to its own type `bench.{i}`, then
//! posts `--events` events round robin over those types from `--connections`
//! concurrent keep-alive clients, and prints:
//!
//! ```text
//! ingest: N events in T s = X events/s, latency p50=.. p99=.. max=.. ms (C connections, E endpoints)
//! delivery: N delivered in T s = Y delivered/s (end to end, from first ingest)
//! ```
//!
//! Run: `cargo build --release -p hookraft -p hookraft-tests && target/release/hookraft-bench`.
//! It prints figures; it asserts nothing beyond the run completing.

#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time; the clock seam is for production code")]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use clap::Parser;
use hookraft_tests::{ClusterOptions, NodeOptions, TestCluster, TestNode, register_endpoint};
use serde_json::json;

/// How long the delivery phase may take before the bench gives up.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(300);
/// Per-request timeout of the ingest clients.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Parser)]
#[command(name = "hookraft-bench", about = "Ingest and delivery throughput of one hookraft node")]
struct Args {
    /// Events to post.
    #[arg(long, default_value_t = 50_000)]
    events: usize,
    /// Concurrent ingest connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Endpoints, each subscribed to its own event type. With 0, events
    /// match no endpoint: the run measures ingest alone.
    #[arg(long, default_value_t = 100)]
    endpoints: usize,
    /// Nodes: 1 runs a single node; 3 (or more) runs a cluster on loopback,
    /// with ingest spread round robin over every node.
    #[arg(long, default_value_t = 1)]
    nodes: u64,
    /// The hookraft binary [default: `hookraft` beside this executable].
    #[arg(long, env = "HOOKRAFT_BIN")]
    bin: Option<PathBuf>,
}

/// What the receiver counts. `last_ns` is measured from `origin`.
struct Counter {
    origin: Instant,
    received: AtomicU64,
    last_ns: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.events > 0 && args.connections > 0, "events and connections must be positive");
    let bin = match args.bin.clone() {
        Some(bin) => bin,
        None => default_binary()?,
    };
    ensure!(
        bin.is_file(),
        "no hookraft binary at {}; build it with `cargo build --release -p hookraft`",
        bin.display()
    );

    // Keep the cluster alive for the whole run; a single node is a cluster of one.
    let (_single, cluster, urls) = if args.nodes <= 1 {
        let node = TestNode::start_with(NodeOptions::default().binary(&bin)).await;
        let url = node.url("/v1/events");
        (Some(node), None, vec![url])
    } else {
        let options =
            ClusterOptions { size: args.nodes, node: NodeOptions::default().binary(&bin), ..Default::default() };
        let cluster = TestCluster::start_with(options).await;
        let urls = cluster.base_urls().into_iter().map(|(_, base)| format!("{base}/v1/events")).collect();
        (None, Some(cluster), urls)
    };
    let node: &TestNode = match (&_single, &cluster) {
        (Some(node), _) => node,
        (None, Some(cluster)) => cluster.leader().await,
        (None, None) => bail!("no node started"),
    };
    let counter = Arc::new(Counter { origin: Instant::now(), received: AtomicU64::new(0), last_ns: AtomicU64::new(0) });
    let receiver_addr = start_receiver(counter.clone()).await?;
    for i in 0..args.endpoints {
        let body = json!({
            "url": format!("http://{receiver_addr}/bench/{i}"),
            "event_types": [format!("bench.{i}")],
            "max_in_flight": 64,
        });
        register_endpoint(node, &body).await;
    }

    let ingest_started = Instant::now();
    let (mut latencies, failures) = ingest(&urls, &args).await?;
    let ingest_s = ingest_started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let accepted = latencies.len();
    println!(
        "ingest: {accepted} events in {ingest_s:.2} s = {:.0} events/s, latency p50={:.1} p99={:.1} max={:.1} ms \
         ({} connections, {} endpoints, {} node(s))",
        accepted as f64 / ingest_s,
        percentile_ms(&latencies, 0.50),
        percentile_ms(&latencies, 0.99),
        percentile_ms(&latencies, 1.0),
        args.connections,
        args.endpoints,
        args.nodes,
    );
    if failures > 0 {
        println!("ingest: {failures} requests were not accepted");
    }

    if args.endpoints == 0 {
        return Ok(());
    }
    let expected = accepted as u64;
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    while counter.received.load(Ordering::Relaxed) < expected {
        if Instant::now() >= deadline {
            bail!(
                "only {} of {expected} deliveries arrived within {} s",
                counter.received.load(Ordering::Relaxed),
                DELIVERY_DEADLINE.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let last = counter.origin + Duration::from_nanos(counter.last_ns.load(Ordering::Relaxed));
    let delivery_s = last.saturating_duration_since(ingest_started).as_secs_f64();
    println!(
        "delivery: {expected} delivered in {delivery_s:.2} s = {:.0} delivered/s (end to end, from first ingest)",
        expected as f64 / delivery_s
    );
    Ok(())
}

/// `hookraft` in the directory of this executable.
fn default_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locate the bench executable")?;
    let dir = exe.parent().context("the bench executable has no directory")?;
    Ok(dir.join(format!("hookraft{}", std::env::consts::EXE_SUFFIX)))
}

/// An axum server on `127.0.0.1:0` that answers 200 to everything and counts.
async fn start_receiver(counter: Arc<Counter>) -> Result<std::net::SocketAddr> {
    async fn receive(State(counter): State<Arc<Counter>>) -> StatusCode {
        let now_ns = u64::try_from(counter.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        counter.last_ns.fetch_max(now_ns, Ordering::Relaxed);
        counter.received.fetch_add(1, Ordering::Relaxed);
        StatusCode::OK
    }
    let app = Router::new().fallback(receive).with_state(counter);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("bind the receiver")?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("receiver stopped: {error}");
        }
    });
    Ok(addr)
}

/// Posts `args.events` events from `args.connections` tasks, each with its
/// own keep-alive client. Returns the latencies of accepted events and the
/// number of requests that failed or were not answered 202.
async fn ingest(urls: &[String], args: &Args) -> Result<(Vec<Duration>, usize)> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(args.connections);
    for connection in 0..args.connections {
        let url = urls[connection % urls.len()].clone();
        let client =
            reqwest::Client::builder().no_proxy().timeout(REQUEST_TIMEOUT).pool_max_idle_per_host(1).build()?;
        let (next, events, endpoints) = (next.clone(), args.events, args.endpoints);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(events / 64 + 1);
            let mut failures = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= events {
                    return (latencies, failures);
                }
                let body = json!({"type": format!("bench.{}", i % endpoints.max(1)), "payload": {"n": i}});
                let started = Instant::now();
                match client.post(&url).json(&body).send().await {
                    Ok(response) if response.status() == reqwest::StatusCode::ACCEPTED => {
                        // Read the body so the connection goes back to the pool.
                        let _ = response.bytes().await;
                        latencies.push(started.elapsed());
                    }
                    Ok(response) => {
                        failures += 1;
                        if failures <= 3 {
                            let status = response.status();
                            let text = response.text().await.unwrap_or_default();
                            eprintln!("event {i}: {status} {text}");
                        }
                    }
                    Err(error) => {
                        failures += 1;
                        if failures <= 3 {
                            eprintln!("event {i}: {error}");
                        }
                    }
                }
            }
        }));
    }
    let mut latencies = Vec::with_capacity(args.events);
    let mut failures = 0;
    for task in tasks {
        let (mut part, failed) = task.await.context("an ingest task panicked")?;
        latencies.append(&mut part);
        failures += failed;
    }
    Ok((latencies, failures))
}

/// The `q` quantile (0..=1) of sorted latencies, in milliseconds.
fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}
