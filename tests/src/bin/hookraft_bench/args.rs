//! hookraft-bench's command line: the flags, what they mean to each
//! scenario, and the plans built from them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::scenario::Scenario;
use crate::{history, soak};

/// `--scenario soak` without `--rate` or `--duration`: the load of issue 34.
const SOAK_RATE_DEFAULT: f64 = 200.0;
const SOAK_DURATION_DEFAULT: Duration = Duration::from_secs(600);

#[derive(Debug, Parser)]
#[command(name = "hookraft-bench", about = "Throughput, latency, isolation, backlog and inbound figures of hookraft")]
pub struct Args {
    /// Scenarios to run, each on a fresh deployment.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "throughput")]
    pub scenario: Vec<Scenario>,
    /// Events to post [default: 60,000; fan-out 2,000; backlog 1,000,000].
    #[arg(long)]
    pub events: Option<usize>,
    /// Concurrent keep-alive ingest connections.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Events per ingest request: 1 posts each to `/v1/events`; more posts
    /// them as `POST /v1/events/batch` (at most 1,000).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Bytes of each event's payload.
    #[arg(long, default_value_t = 200)]
    pub payload_bytes: usize,
    /// 1: a single node; 3 (or more): a cluster on loopback, ingest spread over every node.
    #[arg(long, default_value_t = 1)]
    pub nodes: u64,
    /// Print the reports as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// How long every expected delivery may take to arrive, in seconds.
    #[arg(long, default_value_t = 900)]
    pub delivery_deadline_s: u64,
    /// The hookraft binary [default: `hookraft` beside this executable].
    #[arg(long)]
    pub bin: Option<PathBuf>,
    /// Copy each node's log into this directory when a scenario ends, as
    /// `<scenario>-node<id>.log` (e.g. for the `snapshot built` lines, with
    /// how long each build held applies).
    #[arg(long)]
    pub keep_logs: Option<PathBuf>,
    /// Offer this many events per second, evenly spaced, and count each
    /// request's latency from when it was due (an open load) [default: as
    /// fast as the nodes accept, each connection waiting for its answer].
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Of `--scenario soak`: how long to offer `--rate` (`600`, `600s`,
    /// `10m`, `1h`; at least 3 minutes) [default: 10 minutes]; of
    /// `--scenario history`, its steady phase [default: 5 minutes].
    #[arg(long, value_parser = soak::parse_duration)]
    pub duration: Option<Duration>,
    /// Leave events due in the first this many seconds of the load out of
    /// the latency quantiles (they are still posted, counted and
    /// delivered; the whole run's quantiles are printed beside them): a
    /// fresh node's first moments, when its connections, actors and files
    /// are new.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_s: f64,
    /// Threads of each node's own delivery runtime (`hookraft serve
    /// --delivery-threads`) [default: the node's default, one runtime].
    #[arg(long)]
    pub delivery_threads: Option<u16>,
    /// Each node's `--retention` (`30s`, `7d`, `off`) [default: the node's
    /// default, 7 days]: a short one measures pruning under load.
    #[arg(long)]
    pub retention: Option<String>,
    /// Each node's `--max-pending`: refuse ingest past this many pending
    /// deliveries [default: the node's, from the machine's memory].
    #[arg(long)]
    pub max_pending: Option<u64>,
    /// Each node's `--memory-budget` (`512MiB`, `2G`) [default: the node's].
    #[arg(long)]
    pub memory_budget: Option<String>,
    /// Each node's `--history-cache` (`16MiB`) [default: the node's].
    #[arg(long)]
    pub history_cache: Option<String>,
    /// Each node's `--keyring`: payloads sealed under its active key.
    #[arg(long, conflicts_with = "encrypt")]
    pub keyring: Option<PathBuf>,
    /// Seal payloads with a fresh one-key keyring (written to a temporary
    /// file, the key from /dev/urandom) [default: payloads in clear].
    #[arg(long)]
    pub encrypt: bool,
    /// Of `--scenario inbound`: the percentage of provider events posted a
    /// second time (the same body, a fresh signature), as a provider does
    /// that missed the answer; each must be answered as a duplicate.
    #[arg(long, default_value_t = 10)]
    pub provider_retry_percent: u32,
    /// Of `--scenario history`: finished deliveries to preload before the
    /// steady phase [default: 1,000,000]; 0 runs the steady phase alone.
    #[arg(long)]
    pub history: Option<usize>,
    /// Of `--scenario history`: run the steady phase again on a fresh node
    /// without history, and judge the memory of one against the other.
    #[arg(long)]
    pub compare_empty: bool,
    /// Of `--scenario history`: once the steady phase is over, add a new
    /// node, which installs the history as a snapshot, and measure it.
    #[arg(long)]
    pub join: bool,
}

impl Args {
    /// The `hookraft serve` flags this run gives every node.
    pub fn node_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(threads) = self.delivery_threads {
            args.push(format!("--delivery-threads={threads}"));
        }
        if let Some(retention) = &self.retention {
            args.push(format!("--retention={retention}"));
        }
        if let Some(max_pending) = self.max_pending {
            args.push(format!("--max-pending={max_pending}"));
        }
        if let Some(budget) = &self.memory_budget {
            args.push(format!("--memory-budget={budget}"));
        }
        if let Some(cache) = &self.history_cache {
            args.push(format!("--history-cache={cache}"));
        }
        if let Some(keyring) = &self.keyring {
            args.push(format!("--keyring={}", keyring.display()));
        }
        args
    }

    /// The soak's length.
    pub fn soak_duration(&self) -> Duration {
        self.duration.unwrap_or(SOAK_DURATION_DEFAULT)
    }

    /// The rate a scenario offers: `--rate`, or the soak's default.
    pub fn rate_of(&self, scenario: Scenario) -> Option<f64> {
        match scenario {
            Scenario::Soak => Some(self.rate.unwrap_or(SOAK_RATE_DEFAULT)),
            _ => self.rate,
        }
    }

    /// Events a scenario posts.
    pub fn events_of(&self, scenario: Scenario) -> usize {
        match (scenario, self.events) {
            (Scenario::Soak, _) => soak::events_for(self.rate.unwrap_or(SOAK_RATE_DEFAULT), self.soak_duration()),
            (_, Some(events)) => events,
            (_, None) => scenario.default_events(),
        }
    }

    /// What `--scenario history` does.
    pub fn history_plan(&self) -> history::Plan {
        history::Plan {
            history: self.history.unwrap_or(history::HISTORY_DEFAULT),
            rate: self.rate.unwrap_or(history::RATE_DEFAULT),
            duration: self.duration.unwrap_or(history::DURATION_DEFAULT),
            connections: self.connections,
            payload_bytes: self.payload_bytes,
            compare_empty: self.compare_empty,
            join: self.join,
            delivery_deadline: Duration::from_secs(self.delivery_deadline_s),
            node_args: self.node_args(),
            keep_logs: self.keep_logs.clone(),
        }
    }

    /// Whether the nodes seal payloads.
    pub fn encrypted(&self) -> bool {
        self.keyring.is_some()
    }

    /// Whether the nodes run with an ingest budget of this run's choosing.
    pub fn budgeted(&self) -> bool {
        self.max_pending.is_some() || self.memory_budget.is_some()
    }
}

pub fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!("{text:?} is not a positive number of events per second")),
    }
}
