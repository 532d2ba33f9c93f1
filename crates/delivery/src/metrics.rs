//! Delivery counters, rendered by the API's `/metrics`. Plain atomics: no
//! global registry, one instance per node.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (ms) of the attempt latency histogram buckets.
pub const LATENCY_BUCKETS_MS: [u64; 12] = [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000];

#[derive(Debug, Default)]
pub struct DeliveryMetrics {
    pub attempts_total: AtomicU64,
    pub delivered_total: AtomicU64,
    pub retried_total: AtomicU64,
    /// Deliveries not sent because their payload could not be opened.
    pub not_sent_total: AtomicU64,
    pub dead_total: AtomicU64,
    /// Deliveries not sent because a newer version of their key was delivered.
    pub ignored_stale_total: AtomicU64,
    pub gone_total: AtomicU64,
    pub breaker_opened_total: AtomicU64,
    pub breaker_closed_total: AtomicU64,
    pub breaker_half_open_total: AtomicU64,
    pub breaker_rejections_total: AtomicU64,
    pub rate_limited_total: AtomicU64,
    pub lease_refusals_total: AtomicU64,
    pub actor_restarts_total: AtomicU64,
    /// Deliveries waiting in this node's endpoint queues.
    pub queue_depth: AtomicU64,
    pub latency_buckets: [AtomicU64; LATENCY_BUCKETS_MS.len()],
    pub latency_count: AtomicU64,
    pub latency_sum_ms: AtomicU64,
}

impl DeliveryMetrics {
    pub fn observe_latency(&self, latency_ms: u64) {
        for (bound, bucket) in LATENCY_BUCKETS_MS.iter().zip(&self.latency_buckets) {
            if latency_ms <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_ms.fetch_add(latency_ms, Ordering::Relaxed);
    }

    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
