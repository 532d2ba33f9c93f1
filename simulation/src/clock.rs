//! Virtual clocks. Every node reads tokio's paused clock through its own
//! [`SimClock`], shifted by a fixed skew and stretched by a drift, both
//! chosen by the seed and bounded by [`SKEW_MS_MAX`] / [`DRIFT_PPM_MAX`].

use hookraft_core::clock::Clock;
use tokio::time::Instant;

/// Largest wall-clock offset between a node and true time.
pub const SKEW_MS_MAX: i64 = 200;
/// Largest rate error of a node's clocks, in parts per million.
pub const DRIFT_PPM_MAX: i64 = 1_000;
/// True wall time at the start of every run (2026-01-01T00:00:00Z).
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// One node's view of time.
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    origin: Instant,
    skew_ms: i64,
    drift_ppm: i64,
}

impl SimClock {
    pub fn new(origin: Instant, skew_ms: i64, drift_ppm: i64) -> Self {
        assert!(skew_ms.abs() <= SKEW_MS_MAX && drift_ppm.abs() <= DRIFT_PPM_MAX);
        Self { origin, skew_ms, drift_ppm }
    }

    fn elapsed_ms(&self) -> u64 {
        let true_ms = self.origin.elapsed().as_millis() as i64;
        (true_ms + true_ms * self.drift_ppm / 1_000_000).max(0) as u64
    }
}

impl Clock for SimClock {
    fn wall_ms(&self) -> u64 {
        (EPOCH_MS as i64 + self.skew_ms + self.elapsed_ms() as i64) as u64
    }

    fn monotonic_ms(&self) -> u64 {
        self.elapsed_ms()
    }
}

/// True time since the start of the run, for the trace and the checkers.
pub fn true_ms(origin: Instant) -> u64 {
    origin.elapsed().as_millis() as u64
}
