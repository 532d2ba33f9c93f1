//! Per-endpoint circuit breaker.
//!
//! Opens after `consecutive_failures_max` failures in a row, or when the error
//! rate over a sliding window passes `error_rate_max` with at least
//! `window_requests_min` requests. After a cooldown one probe goes through
//! (half-open); its success closes the breaker, its failure re-opens it with a
//! doubled cooldown, up to `cooldown_max_ms`. Pure: time is passed in.
//!
//! Behaviour a caller must know:
//! - `admit` moves Open → HalfOpen when it returns [`Admission::Probe`];
//!   [`CircuitBreaker::admit_with_transition`] reports that move.
//! - While the probe is outstanding every other `admit` is rejected with
//!   `retry_at_ms = now + cooldown_ms` (never later than the moment the probe
//!   is presumed lost). A probe without an outcome after
//!   [`PROBE_LOST_AFTER_MS`] is presumed lost (its node died, the breaker moved
//!   to a new owner) and the next `admit` sends a new one, so a lost outcome
//!   cannot wedge the breaker half-open forever.
//! - In HalfOpen, the next reported outcome is taken as the probe's.
//! - Outcomes reported while Open (attempts started before it opened) are
//!   counted in the window but never change the status.
//! - Time that goes backwards is read as no time passing.
//!
//! The window is bounded: [`WINDOW_BUCKETS`] fixed buckets of counts, so
//! `window_ms` is in effect rounded down to whole buckets.

mod window;

use serde::{Deserialize, Serialize};

use window::Window;

/// The sliding window is cut into this many fixed time buckets.
pub const WINDOW_BUCKETS: usize = 10;
/// A half-open probe whose outcome has not arrived after this long is presumed
/// lost. Twice the largest per-attempt timeout (ARCHITECTURE §6.3: 30 s).
pub const PROBE_LOST_AFTER_MS: u64 = 60_000;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BreakerConfig {
    pub consecutive_failures_max: u32,
    pub error_rate_max: f64,
    pub window_ms: u64,
    pub window_requests_min: u32,
    pub cooldown_ms: u64,
    pub cooldown_max_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            consecutive_failures_max: 5,
            error_rate_max: 0.5,
            window_ms: 60_000,
            window_requests_min: 20,
            cooldown_ms: 5_000,
            cooldown_max_ms: 60_000,
        }
    }
}

impl BreakerConfig {
    /// Checks bounds; the message tells an API caller what to fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.consecutive_failures_max < 1 {
            return Err("breaker.consecutive_failures_max must be at least 1".into());
        }
        if !(self.error_rate_max > 0.0 && self.error_rate_max <= 1.0) {
            return Err("breaker.error_rate_max must be above 0 and at most 1".into());
        }
        if self.window_ms < WINDOW_BUCKETS as u64 {
            return Err(format!("breaker.window_ms must be at least {WINDOW_BUCKETS}"));
        }
        if self.window_requests_min < 1 {
            return Err("breaker.window_requests_min must be at least 1".into());
        }
        if self.cooldown_ms < 1 || self.cooldown_ms > self.cooldown_max_ms {
            return Err("breaker.cooldown_ms must be between 1 and breaker.cooldown_max_ms".into());
        }
        Ok(())
    }

    /// Cooldown after `failed_probes` failed probes in a row: base doubled
    /// that many times, capped at `cooldown_max_ms`, saturating.
    fn cooldown_after_ms(&self, failed_probes: u32) -> u64 {
        let doubled = if failed_probes >= u64::BITS || self.cooldown_ms > (u64::MAX >> failed_probes) {
            u64::MAX
        } else {
            self.cooldown_ms << failed_probes
        };
        doubled.min(self.cooldown_max_ms)
    }
}

/// The state shown to operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BreakerStatus {
    Closed,
    Open,
    HalfOpen,
}

/// Whether an attempt may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Allowed,
    /// The single half-open probe; its outcome decides the breaker.
    Probe,
    /// Not before `retry_at_ms`.
    Rejected {
        retry_at_ms: u64,
    },
}

/// A change of [`BreakerStatus`], reported so it can be replicated and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub from: BreakerStatus,
    pub to: BreakerStatus,
}

/// Where the breaker is, with the one time that matters in that place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum State {
    Closed,
    /// No attempts before `until_ms`; then one probe.
    Open {
        until_ms: u64,
    },
    /// The probe went at `probe_sent_at_ms`; its outcome is awaited.
    HalfOpen {
        probe_sent_at_ms: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CircuitBreaker {
    state: State,
    /// Failures since the last success; opens a closed breaker at the max.
    consecutive_failures: u32,
    /// Probes failed in a row; the cooldown doubles with each.
    failed_probes: u32,
    /// Recent outcomes, for the error-rate rule.
    window: Window,
    /// Latest time seen, so a clock stepping back cannot rewind the breaker.
    clock_ms: u64,
}

impl CircuitBreaker {
    pub fn new() -> Self {
        Self { state: State::Closed, consecutive_failures: 0, failed_probes: 0, window: Window::default(), clock_ms: 0 }
    }

    pub fn status(&self) -> BreakerStatus {
        match self.state {
            State::Closed => BreakerStatus::Closed,
            State::Open { .. } => BreakerStatus::Open,
            State::HalfOpen { .. } => BreakerStatus::HalfOpen,
        }
    }

    /// When the breaker is open: the time the next probe may go.
    pub fn open_until_ms(&self) -> Option<u64> {
        match self.state {
            State::Open { until_ms } => Some(until_ms),
            _ => None,
        }
    }

    /// Failures in a row since the last success.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// (successes, failures) currently in the sliding window.
    pub fn window_counts(&self, config: &BreakerConfig, now_ms: u64) -> (u64, u64) {
        self.window.counts(config.window_ms, now_ms.max(self.clock_ms))
    }

    pub fn admit(&mut self, config: &BreakerConfig, now_ms: u64) -> Admission {
        self.admit_with_transition(config, now_ms).0
    }

    /// [`CircuitBreaker::admit`], also reporting the Open → HalfOpen move.
    pub fn admit_with_transition(&mut self, config: &BreakerConfig, now_ms: u64) -> (Admission, Option<Transition>) {
        let now_ms = self.tick(now_ms);
        let from = self.status();
        let admission = match self.state {
            State::Closed => Admission::Allowed,
            State::Open { until_ms } if now_ms < until_ms => Admission::Rejected { retry_at_ms: until_ms },
            State::Open { .. } => self.send_probe(now_ms),
            State::HalfOpen { probe_sent_at_ms } => {
                let lost_at_ms = probe_sent_at_ms.saturating_add(PROBE_LOST_AFTER_MS);
                if now_ms >= lost_at_ms {
                    self.send_probe(now_ms)
                } else {
                    let retry_at_ms = now_ms.saturating_add(config.cooldown_ms.max(1)).min(lost_at_ms);
                    Admission::Rejected { retry_at_ms }
                }
            }
        };
        (admission, self.transition_from(from))
    }

    pub fn on_success(&mut self, config: &BreakerConfig, now_ms: u64) -> Option<Transition> {
        let now_ms = self.tick(now_ms);
        let from = self.status();
        self.window.record(config.window_ms, now_ms, false);
        match self.state {
            State::Closed => self.consecutive_failures = 0,
            // A late answer to an attempt from before the opening: counted only.
            State::Open { .. } => {}
            State::HalfOpen { .. } => self.close(),
        }
        self.transition_from(from)
    }

    pub fn on_failure(&mut self, config: &BreakerConfig, now_ms: u64) -> Option<Transition> {
        let now_ms = self.tick(now_ms);
        let from = self.status();
        self.window.record(config.window_ms, now_ms, true);
        match self.state {
            State::Closed => {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                if self.should_open(config, now_ms) {
                    self.open(config, now_ms);
                }
            }
            State::Open { .. } => self.consecutive_failures = self.consecutive_failures.saturating_add(1),
            State::HalfOpen { .. } => {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.failed_probes = self.failed_probes.saturating_add(1);
                self.open(config, now_ms);
            }
        }
        self.transition_from(from)
    }

    fn tick(&mut self, now_ms: u64) -> u64 {
        self.clock_ms = self.clock_ms.max(now_ms);
        self.clock_ms
    }

    fn should_open(&self, config: &BreakerConfig, now_ms: u64) -> bool {
        if self.consecutive_failures >= config.consecutive_failures_max {
            return true;
        }
        let (successes, failures) = self.window.counts(config.window_ms, now_ms);
        let total = successes + failures;
        // A NaN rate never opens; the consecutive rule still protects.
        total > 0
            && total >= u64::from(config.window_requests_min)
            && failures as f64 >= config.error_rate_max * total as f64
    }

    fn open(&mut self, config: &BreakerConfig, now_ms: u64) {
        let until_ms = now_ms.saturating_add(config.cooldown_after_ms(self.failed_probes));
        self.state = State::Open { until_ms };
    }

    fn send_probe(&mut self, now_ms: u64) -> Admission {
        self.state = State::HalfOpen { probe_sent_at_ms: now_ms };
        Admission::Probe
    }

    /// Back to a fresh closed breaker; the old failures are what the probe disproved.
    fn close(&mut self) {
        self.state = State::Closed;
        self.consecutive_failures = 0;
        self.failed_probes = 0;
        self.window = Window::default();
    }

    fn transition_from(&self, from: BreakerStatus) -> Option<Transition> {
        let to = self.status();
        (from != to).then_some(Transition { from, to })
    }
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const OPENED: Option<Transition> = Some(Transition { from: BreakerStatus::Closed, to: BreakerStatus::Open });

    /// Only the error-rate rule: consecutive failures never reach the max.
    fn rate_only() -> BreakerConfig {
        BreakerConfig { consecutive_failures_max: 1_000, ..BreakerConfig::default() }
    }

    /// A breaker opened at `at_ms` by consecutive failures.
    fn opened_at(config: &BreakerConfig, at_ms: u64) -> CircuitBreaker {
        let mut breaker = CircuitBreaker::new();
        for _ in 0..config.consecutive_failures_max {
            breaker.on_failure(config, at_ms);
        }
        assert_eq!(breaker.status(), BreakerStatus::Open);
        breaker
    }

    #[test]
    fn default_config_has_design_values_and_is_valid() {
        let config = BreakerConfig::default();
        assert_eq!((config.consecutive_failures_max, config.error_rate_max), (5, 0.5));
        assert_eq!((config.window_ms, config.window_requests_min), (60_000, 20));
        assert_eq!((config.cooldown_ms, config.cooldown_max_ms), (5_000, 60_000));
        assert_eq!(config.validate(), Ok(()));
        let mut breaker = CircuitBreaker::default();
        assert_eq!((breaker.status(), breaker.open_until_ms()), (BreakerStatus::Closed, None));
        assert_eq!(breaker.admit(&config, 0), Admission::Allowed);
    }

    #[test]
    fn validate_refuses_out_of_range_config() {
        let ok = BreakerConfig::default();
        for bad in [
            BreakerConfig { consecutive_failures_max: 0, ..ok },
            BreakerConfig { window_ms: 9, ..ok },
            BreakerConfig { window_requests_min: 0, ..ok },
            BreakerConfig { cooldown_ms: 0, ..ok },
            BreakerConfig { cooldown_ms: 300_001, ..ok },
        ]
        .into_iter()
        .chain([0.0, 1.5, f64::NAN].map(|error_rate_max| BreakerConfig { error_rate_max, ..ok }))
        {
            let error = bad.validate().expect_err("invalid config");
            assert!(error.starts_with("breaker."), "{error}");
        }
    }

    #[test]
    fn opens_after_exactly_max_consecutive_failures() {
        let config = BreakerConfig::default();
        let mut breaker = CircuitBreaker::new();
        for _ in 0..4 {
            assert_eq!(breaker.on_failure(&config, 1_000), None);
        }
        assert_eq!(breaker.consecutive_failures(), 4);
        assert_eq!(breaker.on_failure(&config, 1_000), OPENED);
        assert_eq!(breaker.open_until_ms(), Some(6_000));
    }

    #[test]
    fn success_between_failures_resets_the_consecutive_count() {
        // Only the consecutive rule: the error rate here is 80 %.
        let config = BreakerConfig { window_requests_min: u32::MAX, ..BreakerConfig::default() };
        let mut breaker = CircuitBreaker::new();
        for round in 0..10 {
            for _ in 0..4 {
                assert_eq!(breaker.on_failure(&config, round), None);
            }
            assert_eq!(breaker.on_success(&config, round), None);
            assert_eq!(breaker.consecutive_failures(), 0);
        }
        assert_eq!(breaker.status(), BreakerStatus::Closed);
    }

    #[test]
    fn error_rate_opens_only_with_the_minimum_volume() {
        let config = rate_only();
        let mut breaker = CircuitBreaker::new();
        // 19 outcomes, 10 failed: rate above 0.5 but volume below 20.
        for i in 0..19 {
            let changed = if i % 2 == 0 { breaker.on_failure(&config, 100) } else { breaker.on_success(&config, 100) };
            assert_eq!(changed, None, "outcome {i}");
        }
        assert_eq!(breaker.window_counts(&config, 100), (9, 10));
        assert_eq!(breaker.on_failure(&config, 100), OPENED);
    }

    #[test]
    fn error_rate_below_the_max_stays_closed() {
        let config = rate_only();
        let mut breaker = CircuitBreaker::new();
        for _ in 0..11 {
            breaker.on_success(&config, 0);
        }
        for _ in 0..9 {
            assert_eq!(breaker.on_failure(&config, 0), None);
        }
        // 9 of 20 = 0.45; one more failure makes 10 of 21 < 0.5, then 11 of 22.
        assert_eq!(breaker.on_failure(&config, 0), None);
        assert_eq!(breaker.on_failure(&config, 0), OPENED);
    }

    #[test]
    fn outcomes_older_than_the_window_expire() {
        let config = rate_only();
        let mut breaker = CircuitBreaker::new();
        for _ in 0..19 {
            breaker.on_failure(&config, 0);
        }
        assert_eq!(breaker.window_counts(&config, 59_999), (0, 19));
        assert_eq!(breaker.window_counts(&config, 60_000), (0, 0));
        // 19 + 1 would reach the volume; the old 19 are gone.
        assert_eq!(breaker.on_failure(&config, 60_000), None);
        assert_eq!(breaker.window_counts(&config, 60_000), (0, 1));
    }

    #[test]
    fn open_breaker_rejects_until_the_cooldown_then_sends_one_probe() {
        let config = BreakerConfig::default();
        let mut breaker = opened_at(&config, 1_000);
        assert_eq!(breaker.admit(&config, 1_000), Admission::Rejected { retry_at_ms: 6_000 });
        assert_eq!(breaker.admit(&config, 5_999), Admission::Rejected { retry_at_ms: 6_000 });
        let (admission, transition) = breaker.admit_with_transition(&config, 6_000);
        assert_eq!(admission, Admission::Probe);
        assert_eq!(transition, Some(Transition { from: BreakerStatus::Open, to: BreakerStatus::HalfOpen }));
        assert_eq!(breaker.status(), BreakerStatus::HalfOpen);
        assert_eq!(breaker.open_until_ms(), None);
        assert_eq!(breaker.admit(&config, 6_000), Admission::Rejected { retry_at_ms: 11_000 });
        assert_eq!(breaker.admit_with_transition(&config, 7_000), (Admission::Rejected { retry_at_ms: 12_000 }, None));
    }

    #[test]
    fn probe_success_closes_and_resets_everything() {
        let config = BreakerConfig::default();
        let mut breaker = opened_at(&config, 0);
        assert_eq!(breaker.admit(&config, 5_000), Admission::Probe);
        let closed = Some(Transition { from: BreakerStatus::HalfOpen, to: BreakerStatus::Closed });
        assert_eq!(breaker.on_success(&config, 5_100), closed);
        assert_eq!(breaker.consecutive_failures(), 0);
        assert_eq!(breaker.window_counts(&config, 5_100), (0, 0));
        assert_eq!(breaker.admit(&config, 5_100), Admission::Allowed);
        // The cooldown is back to base: the next opening lasts 5 s.
        for _ in 0..5 {
            breaker.on_failure(&config, 10_000);
        }
        assert_eq!(breaker.open_until_ms(), Some(15_000));
    }

    #[test]
    fn probe_failure_reopens_with_doubled_cooldown_up_to_the_cap() {
        let config = BreakerConfig::default();
        let mut now = 0;
        let mut breaker = opened_at(&config, now);
        let reopened = Some(Transition { from: BreakerStatus::HalfOpen, to: BreakerStatus::Open });
        for cooldown in [10_000, 20_000, 40_000, 60_000, 60_000, 60_000] {
            now = breaker.open_until_ms().expect("open");
            assert_eq!(breaker.admit(&config, now), Admission::Probe);
            assert_eq!(breaker.on_failure(&config, now + 1), reopened);
            assert_eq!(breaker.open_until_ms(), Some(now + 1 + cooldown));
        }
    }

    #[test]
    fn cooldown_doubling_saturates_after_many_failed_probes() {
        let config = BreakerConfig { cooldown_max_ms: u64::MAX, ..BreakerConfig::default() };
        assert_eq!(config.cooldown_after_ms(3), 40_000);
        assert_eq!(config.cooldown_after_ms(63), u64::MAX);
        assert_eq!(config.cooldown_after_ms(u32::MAX), u64::MAX);
    }

    #[test]
    fn late_outcomes_while_open_are_counted_but_change_nothing() {
        let config = BreakerConfig::default();
        let mut breaker = opened_at(&config, 0);
        assert_eq!(breaker.on_success(&config, 100), None);
        assert_eq!(breaker.on_failure(&config, 200), None);
        assert_eq!(breaker.status(), BreakerStatus::Open);
        assert_eq!(breaker.open_until_ms(), Some(5_000));
        assert_eq!(breaker.window_counts(&config, 200), (1, 6));
    }

    #[test]
    fn lost_probe_lets_another_probe_go_after_the_presumed_loss() {
        let config = BreakerConfig::default();
        let mut breaker = opened_at(&config, 0);
        assert_eq!(breaker.admit(&config, 5_000), Admission::Probe);
        let lost_at = 5_000 + PROBE_LOST_AFTER_MS;
        assert_eq!(breaker.admit(&config, lost_at - 1_000), Admission::Rejected { retry_at_ms: lost_at });
        assert_eq!(breaker.admit_with_transition(&config, lost_at), (Admission::Probe, None));
        assert_eq!(breaker.admit(&config, lost_at), Admission::Rejected { retry_at_ms: lost_at + 5_000 });
    }

    #[test]
    fn clock_stepping_back_is_read_as_no_time_passing() {
        let config = BreakerConfig::default();
        let mut breaker = opened_at(&config, 10_000);
        assert_eq!(breaker.admit(&config, 15_000), Admission::Probe);
        breaker.on_failure(&config, 15_000);
        assert_eq!(breaker.open_until_ms(), Some(25_000));
        assert_eq!(breaker.admit(&config, 1_000), Admission::Rejected { retry_at_ms: 25_000 });
        assert_eq!(breaker.admit(&config, 0), Admission::Rejected { retry_at_ms: 25_000 });
    }

    #[test]
    fn breaker_state_round_trips_through_serde() {
        let config = BreakerConfig::default();
        let mut breaker = opened_at(&config, 1_234);
        breaker.admit(&config, 7_000);
        let json = serde_json::to_string(&breaker).expect("serializes");
        let back: CircuitBreaker = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, breaker);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Admit,
        Success,
        Failure,
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Admit),
            2 => Just(Op::Success),
            3 => Just(Op::Failure),
            2 => (0u64..20_000).prop_map(Op::Advance),
            1 => (PROBE_LOST_AFTER_MS - 10..PROBE_LOST_AFTER_MS + 10).prop_map(Op::Advance),
        ]
    }

    fn config() -> impl Strategy<Value = BreakerConfig> {
        (1u32..8, 1u32..=10, 10u64..100_000, 1u32..30, 1u64..10_000, 0u64..400_000).prop_map(
            |(consecutive, rate_tenths, window_ms, requests_min, cooldown_ms, cooldown_extra_ms)| BreakerConfig {
                consecutive_failures_max: consecutive,
                error_rate_max: f64::from(rate_tenths) / 10.0,
                window_ms,
                window_requests_min: requests_min,
                cooldown_ms,
                cooldown_max_ms: cooldown_ms + cooldown_extra_ms,
            },
        )
    }

    proptest! {
        #[test]
        fn any_operation_sequence_keeps_the_status_invariants(
            config in config(),
            ops in proptest::collection::vec(op(), 0..300),
        ) {
            let mut breaker = CircuitBreaker::new();
            let mut now = 0u64;
            // When the probe the breaker believes outstanding was sent.
            let mut probe_sent_at: Option<u64> = None;
            for op in ops {
                let before = breaker.status();
                let transition = match op {
                    Op::Advance(ms) => { now += ms; None }
                    Op::Admit => {
                        let (admission, transition) = breaker.admit_with_transition(&config, now);
                        match admission {
                            Admission::Allowed => prop_assert_eq!(before, BreakerStatus::Closed),
                            Admission::Rejected { retry_at_ms } => {
                                prop_assert_ne!(before, BreakerStatus::Closed);
                                prop_assert!(retry_at_ms > now);
                            }
                            Admission::Probe => {
                                prop_assert_ne!(before, BreakerStatus::Closed);
                                if let Some(sent) = probe_sent_at {
                                    prop_assert!(now >= sent + PROBE_LOST_AFTER_MS, "two probes outstanding");
                                }
                                probe_sent_at = Some(now);
                                prop_assert_eq!(breaker.status(), BreakerStatus::HalfOpen);
                            }
                        }
                        transition
                    }
                    Op::Success => breaker.on_success(&config, now),
                    Op::Failure => breaker.on_failure(&config, now),
                };
                let after = breaker.status();
                if let (Some(until), true) = (breaker.open_until_ms(), before != BreakerStatus::Open) {
                    prop_assert!(until > now && until - now <= config.cooldown_max_ms, "cooldown out of bounds");
                }
                if matches!(op, Op::Success | Op::Failure) && before == BreakerStatus::HalfOpen {
                    probe_sent_at = None;
                }
                prop_assert_eq!(transition.is_some(), before != after);
                if let Some(t) = transition {
                    prop_assert_eq!((t.from, t.to), (before, after));
                }
                prop_assert_eq!(breaker.open_until_ms().is_some(), after == BreakerStatus::Open);
                prop_assert_eq!(probe_sent_at.is_some(), after == BreakerStatus::HalfOpen);
                if before == BreakerStatus::Open && matches!(op, Op::Success | Op::Failure) {
                    prop_assert_eq!(after, BreakerStatus::Open, "late outcome changed an open breaker");
                }
                if after == BreakerStatus::Closed {
                    prop_assert!(breaker.consecutive_failures() < config.consecutive_failures_max);
                }
            }
        }
    }
}
