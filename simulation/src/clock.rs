//! Virtual clocks. Every node reads tokio's paused clock through its own
//! [`SimClock`], shifted by a skew and stretched by a drift, both chosen by
//! the seed and bounded by [`SKEW_MS_MAX`] / [`DRIFT_PPM_MAX`].
//!
//! The skew may change during a run ([`SimClock::step_to`]): a wall clock
//! stepped by NTP, forwards or backwards, staying within the bound of true
//! time. The monotonic clock never steps (as `CLOCK_MONOTONIC` is slewed,
//! not stepped), so only what a node derives from wall time sees the jump.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use hookraft_core::clock::Clock;
use tokio::time::Instant;

/// Largest wall-clock offset between a node and true time.
pub const SKEW_MS_MAX: i64 = 200;
/// Largest rate error of a node's clocks, in parts per million.
pub const DRIFT_PPM_MAX: i64 = 1_000;
/// True wall time at the start of every run (2026-01-01T00:00:00Z).
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// One node's view of time. Clones share the skew, so a step reaches the
/// node that holds a clone.
#[derive(Debug, Clone)]
pub struct SimClock {
    origin: Instant,
    skew_ms: Arc<AtomicI64>,
    drift_ppm: i64,
}

impl SimClock {
    pub fn new(origin: Instant, skew_ms: i64, drift_ppm: i64) -> Self {
        assert!(skew_ms.abs() <= SKEW_MS_MAX && drift_ppm.abs() <= DRIFT_PPM_MAX);
        Self { origin, skew_ms: Arc::new(AtomicI64::new(skew_ms)), drift_ppm }
    }

    /// Steps the wall clock to a new offset from true time; returns the old
    /// one. The offset stays within [`SKEW_MS_MAX`].
    pub fn step_to(&self, skew_ms: i64) -> i64 {
        assert!(skew_ms.abs() <= SKEW_MS_MAX, "a step beyond the stated skew bound");
        self.skew_ms.swap(skew_ms, Ordering::Relaxed)
    }

    fn elapsed_ms(&self) -> u64 {
        let true_ms = self.origin.elapsed().as_millis() as i64;
        (true_ms + true_ms * self.drift_ppm / 1_000_000).max(0) as u64
    }
}

impl Clock for SimClock {
    fn wall_ms(&self) -> u64 {
        (EPOCH_MS as i64 + self.skew_ms.load(Ordering::Relaxed) + self.elapsed_ms() as i64) as u64
    }

    fn monotonic_ms(&self) -> u64 {
        self.elapsed_ms()
    }
}

/// True time since the start of the run, for the trace and the checkers.
pub fn true_ms(origin: Instant) -> u64 {
    origin.elapsed().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_step_moves_wall_time_of_every_clone_and_never_monotonic_time() {
        let clock = SimClock::new(Instant::now(), 150, 0);
        let node_view = clock.clone();
        tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
        let (wall, mono) = (node_view.wall_ms(), node_view.monotonic_ms());
        assert_eq!(wall, EPOCH_MS + 1_150);
        assert_eq!(clock.step_to(-200), 150);
        assert_eq!(node_view.wall_ms(), wall - 350, "the wall clock went back 350 ms");
        assert_eq!(node_view.monotonic_ms(), mono, "the monotonic clock did not move");
    }
}
