//! hookraft-core: the pure domain of hookraft.
//!
//! A tour:
//! - [`clock`]: the clock seam and RFC 3339 formatting.
//! - [`entropy`]: the seam for secrets and the random part of ids.
//! - [`propose`]: the consensus seam, committing a command to the log.
//! - [`redact`]: tokens and secrets that never show in `Debug`.
//! - [`ids`]: typed, prefixed, time-ordered ids and the endpoint → shard hash.
//! - [`signing`]: Standard Webhooks signatures (sign, verify, secrets).
//! - [`retry`]: full-jitter backoff and the decision after each attempt.
//! - [`breaker`]: the per-endpoint circuit breaker.
//! - [`ratelimit`]: the per-endpoint token bucket.
//! - [`rebalance`]: the leader's shard placement, a pure function.
//! - [`model`]: endpoints, events, deliveries, timelines, shard grants.
//! - [`inbound`]: sources of provider webhooks, their signatures and versions.
//! - [`payload`]: stored payloads, clear or sealed, and the keyring.
//! - [`ordering`]: the per-key queue of ordered delivery.
//! - [`lifecycle`]: a delivery's lifecycle as the API shows it.
//! - [`command`]: the replicated commands and their responses.
//! - [`state`]: `ClusterState` and its deterministic `apply`.
//! - [`dense`]: ordered maps and sets kept dense while keys arrive in order.
//!
//! This crate reads no clock, draws from no global RNG and does no IO: time
//! and randomness are arguments. It must not depend on tokio, axum, reqwest,
//! sled, ractor or openraft (checked by `tests/core_is_pure.rs`).

pub mod breaker;
#[cfg(feature = "break")]
pub mod breaks;
pub mod clock;
pub mod command;
pub mod dense;
pub mod entropy;
pub mod ids;
pub mod inbound;
pub mod lifecycle;
pub mod model;
pub mod node_addr;
pub mod ordering;
pub mod payload;
pub mod propose;
pub mod ratelimit;
pub mod rebalance;
pub mod redact;
pub mod retry;
pub mod signing;
pub mod state;

pub use command::{Command, Response};
pub use state::ClusterState;
