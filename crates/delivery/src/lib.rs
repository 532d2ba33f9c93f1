//! hookraft-delivery: how webhooks leave a node.
//!
//! A tour:
//! - [`transport`]: the [`transport::Transport`] seam — one signed request in,
//!   one answer or [`transport::SendError`] out. Simulations plug in scripted
//!   receivers here.
//! - [`http`]: [`http::HttpTransport`], the production transport over reqwest:
//!   no redirects, a deadline on every attempt, a bounded body read, and the
//!   SSRF guard enforced in its DNS resolver.
//! - [`ssrf`]: the pure rules of the SSRF guard (which addresses and URLs a
//!   webhook may target), shared with the API's endpoint validation.
//! - [`error`]: [`error::DeliveryError`], this crate's error enum.
//! - [`supervisor`]: the node's supervisor actor, one [`endpoint_actor`] per
//!   owned endpoint, started and stopped as shard grants and the lease change.
//! - [`endpoint_actor`]: the per-endpoint actor owning its [`queue`], breaker,
//!   concurrency cap, rate limit and backoff.
//! - [`attempt`]: building the signed request and the timeline record.
//! - [`batcher`]: the outcome batcher (it commits through
//!   [`hookraft_core::propose::Proposer`]).
//! - [`context`]: what the actors share; [`metrics`]: their counters.
//!
//! Delivery decisions (retry, breaker, rate limit, signing) live in
//! `hookraft-core`; this crate acts on them and must not read the clock or a
//! global RNG directly.

pub mod attempt;
pub mod batcher;
pub mod context;
pub mod endpoint_actor;
pub mod error;
pub mod http;
pub mod metrics;
pub mod payloads;
pub mod queue;
pub mod ssrf;
pub mod supervisor;
pub mod transport;
