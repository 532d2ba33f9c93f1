//! hookraft-tests: end-to-end tests of the real `hookraft` binary on loopback.
//!
//! A tour of the harness:
//! - [`binary`]: finds the `hookraft` executable (`HOOKRAFT_BIN`, else next to
//!   the test executable's `target/<profile>/` directory).
//! - [`node`]: [`TestNode`], one `hookraft serve` process with its own data
//!   directory, port and log file; JSON helpers over its HTTP API; `kill9` and
//!   `restart` for crash tests.
//! - [`cluster`]: [`TestCluster`], three nodes forming one cluster, with
//!   leader/owner lookups, `kill9`/`restart`/`sigstop`/`sigcont` per node, and
//!   [`shard_of_endpoint`].
//! - [`receiver`]: [`ScriptedReceiver`], an in-process webhook receiver whose
//!   replies are scripted per path and which records every request and the
//!   peak number of concurrently open requests per path.
//! - [`poll`]: [`eventually`] and [`wait_for`]: poll a condition under a
//!   deadline. Tests never sleep for correctness.
//! - [`api`]: small helpers over `docs/API.md` (register an endpoint, send an
//!   event, read and wait for deliveries, check problem documents and
//!   signatures).
//! - [`exposition`]: a checker of `/metrics` text (Prometheus and
//!   OpenMetrics), independent of hookraft's own encoder.
//!
//! Every test starts its own node(s) and receiver(s), so tests run in parallel.
//! The files under `tests/` hold one theme each; `src/bin/hookraft_bench.rs`
//! is a throughput benchmark, not a test.
//!
//! This crate is the outside world looking in: it talks to hookraft only over
//! HTTP and process signals, and it reads real clocks on purpose (hence the
//! allowance for `disallowed_methods`, which guards production code).

#![allow(
    clippy::disallowed_methods,
    reason = "end-to-end tests measure real time; the clock seam is for production code"
)]

pub mod api;
pub mod at_rest;
pub mod binary;
pub mod cluster;
pub mod exposition;
pub mod link;
pub mod node;
pub mod poll;
pub mod receiver;

pub use api::{
    Accepted, assert_client_problem, assert_problem, attempts, entries_of_kind, fast_retry, get_delivery,
    list_deliveries, register_endpoint, send_event, str_field, timeline_kinds, unix_now_s, verify_request,
    wait_delivery_state,
};
pub use binary::locate_hookraft_binary;
pub use cluster::{ClusterOptions, ClusterView, TestCluster, shard_of_endpoint};
pub use node::{JsonResponse, NodeOptions, TestNode, test_ca, tls_fixtures};
pub use poll::{POLL_INTERVAL, eventually, wait_for};
pub use receiver::{RecordedRequest, Reply, ScriptedReceiver};
pub use reqwest::StatusCode;

use std::time::Duration;

/// How long a test waits for something the node does in the background
/// (delivery, dead-lettering). Generous: the CI machine has two cores and
/// other builds may run beside the tests.
pub const DEADLINE: Duration = Duration::from_secs(60);
