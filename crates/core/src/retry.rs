//! Retry policy: full-jitter exponential backoff bounded by attempts and age,
//! `Retry-After` a floor under the next wait, a 429 without it backed off
//! harder than other failures, 410 Gone final.
//!
//! Pure: the caller passes the time and the random source, so a seeded run
//! replays the same schedule. This module owns the decision after an attempt;
//! it must not read a clock, draw from a global RNG or know about HTTP clients.

use rand_core::Rng;
use serde::{Deserialize, Serialize};

/// Per-endpoint retry settings (ARCHITECTURE §6.4 defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in one delivery cycle before the delivery is dead-lettered.
    pub attempts_max: u32,
    /// Backoff base: the first retry waits up to this long.
    pub base_ms: u64,
    /// Backoff ceiling.
    pub cap_ms: u64,
    /// Age after which a delivery is dead-lettered instead of retried.
    pub max_age_s: u64,
    /// The longest wait a `Retry-After` answer can impose; a longer one is
    /// honoured up to this (independent of `cap_ms`). 0 ignores the header.
    pub retry_after_max_ms: u64,
}

pub const ATTEMPTS_MAX_LIMIT: u32 = 100;
/// Largest accepted `cap_ms`: 7 days.
pub const CAP_MS_LIMIT: u64 = 7 * 24 * 3600 * 1000;
/// Largest accepted `max_age_s`: 30 days.
pub const MAX_AGE_S_LIMIT: u64 = 30 * 24 * 3600;
/// Default `retry_after_max_ms`: one hour.
pub const RETRY_AFTER_MAX_MS_DEFAULT: u64 = 3600 * 1000;
/// Largest accepted `retry_after_max_ms`: 7 days.
pub const RETRY_AFTER_MAX_MS_LIMIT: u64 = 7 * 24 * 3600 * 1000;

/// The status that asks a sender to slow down.
pub const STATUS_TOO_MANY_REQUESTS: u16 = 429;

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts_max: 18,
            base_ms: 5_000,
            cap_ms: 8 * 3600 * 1000,
            max_age_s: 72 * 3600,
            retry_after_max_ms: RETRY_AFTER_MAX_MS_DEFAULT,
        }
    }
}

impl RetryPolicy {
    /// Checks bounds; the message tells an API caller what to fix.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=ATTEMPTS_MAX_LIMIT).contains(&self.attempts_max) {
            return Err(format!("retry.attempts_max must be between 1 and {ATTEMPTS_MAX_LIMIT}"));
        }
        if self.cap_ms > CAP_MS_LIMIT {
            return Err(format!("retry.cap_ms must be at most {CAP_MS_LIMIT} (7 days)"));
        }
        if self.base_ms < 1 || self.base_ms > self.cap_ms {
            return Err(format!("retry.base_ms must be between 1 and retry.cap_ms ({})", self.cap_ms));
        }
        if !(1..=MAX_AGE_S_LIMIT).contains(&self.max_age_s) {
            return Err(format!("retry.max_age_s must be between 1 and {MAX_AGE_S_LIMIT} (30 days)"));
        }
        if self.retry_after_max_ms > RETRY_AFTER_MAX_MS_LIMIT {
            return Err(format!("retry.retry_after_max_ms must be between 0 and {RETRY_AFTER_MAX_MS_LIMIT} (7 days)"));
        }
        Ok(())
    }

    /// The upper bound of the jitter after `attempts_made` attempts:
    /// `min(cap, base * 2^(attempts_made - 1))`, saturating. `attempts_made`
    /// of 0 is treated as 1.
    pub fn backoff_ceiling_ms(&self, attempts_made: u32) -> u64 {
        let exponent = attempts_made.saturating_sub(1);
        let doubled = if exponent >= u64::BITS || self.base_ms > (u64::MAX >> exponent) {
            u64::MAX
        } else {
            self.base_ms << exponent
        };
        doubled.min(self.cap_ms)
    }

    /// Full jitter: uniform in `[0, min(cap, base * 2^(attempts_made - 1))]`.
    pub fn backoff_ms(&self, attempts_made: u32, rng: &mut impl Rng) -> u64 {
        uniform_up_to(self.backoff_ceiling_ms(attempts_made), rng)
    }

    /// The wait after a 429 without `Retry-After`: uniform in `[c, c']`,
    /// where `c` is this attempt's backoff ceiling and `c'` the next
    /// attempt's (`min(cap, 2c)`). It starts where a 5xx's range ends, so a
    /// throttled wait is never shorter than any wait a 5xx could draw on the
    /// same attempt, and is longer except at the cap.
    pub fn throttled_ms(&self, attempts_made: u32, rng: &mut impl Rng) -> u64 {
        let attempts_made = attempts_made.max(1);
        let floor = self.backoff_ceiling_ms(attempts_made);
        let ceiling = self.backoff_ceiling_ms(attempts_made.saturating_add(1));
        floor + uniform_up_to(ceiling - floor, rng)
    }
}

/// Uniform in `[0, max]`. The modulo bias is below 2^-20 for any range a
/// valid policy allows.
fn uniform_up_to(max: u64, rng: &mut impl Rng) -> u64 {
    match max.checked_add(1) {
        Some(span) => rng.next_u64() % span,
        None => rng.next_u64(),
    }
}

/// What came back from one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// The endpoint answered with a status code.
    Status { code: u16, retry_after_ms: Option<u64> },
    /// No answer: timeout, connection refused, TLS failure, refused target...
    Failed,
}

/// Which rule chose the wait before a retry (recorded on the timeline).
/// Encoded by position: append new rules only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RetryRule {
    /// The full-jitter backoff (no usable `Retry-After`, or one shorter
    /// than the backoff drew).
    Backoff,
    /// The receiver's `Retry-After`, as asked.
    RetryAfter,
    /// The receiver's `Retry-After`, shortened to `retry_after_max_ms`.
    RetryAfterCapped,
    /// A 429 without `Retry-After`: [`RetryPolicy::throttled_ms`].
    Throttled,
    /// Nothing was sent: the sender could not open the payload (its key is
    /// not in the sender's keyring). See [`defer`]. (Appended: encoded by
    /// position.)
    PayloadUnavailable,
}

impl RetryRule {
    pub fn as_str(self) -> &'static str {
        match self {
            RetryRule::Backoff => "backoff",
            RetryRule::RetryAfter => "retry_after",
            RetryRule::RetryAfterCapped => "retry_after_capped",
            RetryRule::Throttled => "throttled",
            RetryRule::PayloadUnavailable => "payload_unavailable",
        }
    }
}

/// What to do after an attempt. Encoded by position in the log: variants
/// that have shipped are frozen once there is a release; until then the
/// golden files pin them (`hookraft-raft`'s `tests/golden/`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    Delivered,
    Dead {
        reason: String,
    },
    /// 410 Gone: dead-letter and disable the endpoint.
    Gone,
    /// Retry at `at_ms`; `rule` chose the wait.
    Retry {
        at_ms: u64,
        rule: RetryRule,
    },
    /// Nothing was sent (the sender could not open the payload): try again
    /// at `at_ms` without spending the cycle's attempts, since the receiver
    /// had no say in it. See [`defer`].
    Deferred {
        at_ms: u64,
    },
    /// Nothing was sent: `newer`, a later version of the delivery's entity
    /// key, was delivered to the endpoint first. The delivery ends
    /// `ignored_stale`.
    IgnoredStale {
        newer: crate::ids::EventId,
    },
}

impl Decision {
    /// When the next attempt is due, for either form of a retry.
    pub fn retry_at_ms(&self) -> Option<u64> {
        match self {
            Decision::Retry { at_ms, .. } | Decision::Deferred { at_ms } => Some(*at_ms),
            _ => None,
        }
    }
}

/// The status code that ends a delivery and disables its endpoint.
pub const STATUS_GONE: u16 = 410;

/// Decides the fate of a delivery after an attempt.
///
/// `attempts_made` counts the attempts of this cycle including the one just
/// finished. The rng is drawn from only when a retry is considered, once.
///
/// A wait `Retry-After` imposes is a floor the next attempt honours, even
/// past `cap_ms` (up to `retry_after_max_ms`). When the floor would put the
/// next attempt past the cycle's `max_age_s`, the delivery is dead-lettered
/// with a reason that says so, rather than sent before the receiver asked.
pub fn decide(
    policy: &RetryPolicy,
    result: &AttemptResult,
    attempts_made: u32,
    cycle_started_at_ms: u64,
    now_ms: u64,
    rng: &mut impl Rng,
) -> Decision {
    let (code, retry_after_ms) = match result {
        AttemptResult::Status { code: 200..=299, .. } => return Decision::Delivered,
        AttemptResult::Status { code: STATUS_GONE, .. } => return Decision::Gone,
        AttemptResult::Status { code, retry_after_ms } => (Some(*code), *retry_after_ms),
        AttemptResult::Failed => (None, None),
    };
    if attempts_made >= policy.attempts_max {
        return Decision::Dead {
            reason: format!("attempts exhausted: {attempts_made} of {} failed", policy.attempts_max),
        };
    }
    let (delay_ms, rule) = choose_wait(policy, code, retry_after_ms, attempts_made, rng);
    // At least a millisecond: a delivery's attempts under one grant then all
    // start at distinct times, which is what lets apply tell an outcome
    // proposed twice from a second attempt (`ClusterState::record_outcomes`).
    let at_ms = now_ms.saturating_add(delay_ms.max(1));
    let deadline_ms = cycle_started_at_ms.saturating_add(policy.max_age_s.saturating_mul(1000));
    if at_ms > deadline_ms {
        let age_s = at_ms.saturating_sub(cycle_started_at_ms) / 1000;
        let asked = match (rule, retry_after_ms) {
            (RetryRule::RetryAfter, Some(asked_ms)) => {
                format!("the receiver asked to wait {} s (Retry-After), so ", asked_ms / 1000)
            }
            (RetryRule::RetryAfterCapped, Some(asked_ms)) => format!(
                "the receiver asked to wait {} s (Retry-After, honoured up to {} s), so ",
                asked_ms / 1000,
                policy.retry_after_max_ms / 1000
            ),
            _ => String::new(),
        };
        return Decision::Dead {
            reason: format!(
                "max age exceeded: {asked}the next attempt would start {age_s} s into the cycle, the limit is {} s",
                policy.max_age_s
            ),
        };
    }
    Decision::Retry { at_ms, rule }
}

/// The shortest wait after a delivery could not be sent for want of its
/// payload's key.
pub const DEFER_MIN_MS: u64 = 1_000;

/// When to try again a delivery whose payload this node could not open
/// (its key is missing from the keyring, or the payload failed
/// authentication). The backoff grows with the delivery's attempts over its
/// life (`attempt_count`, this one included) up to the policy's cap, and
/// never dead-letters it: an operator restores the key, and the delivery
/// goes on. One draw from `rng`.
pub fn defer(policy: &RetryPolicy, attempt_count: u32, now_ms: u64, rng: &mut impl Rng) -> Decision {
    let wait_ms = policy.backoff_ms(attempt_count, rng).max(DEFER_MIN_MS);
    Decision::Deferred { at_ms: now_ms.saturating_add(wait_ms) }
}

/// The wait before the next attempt and the rule that chose it. `code` is
/// the status answered (none for a failure to get one); one draw from `rng`.
///
/// - no usable `Retry-After`: the backoff, or the throttled wait for a 429;
/// - `Retry-After` up to `retry_after_max_ms`: the longer of it and the backoff;
/// - a longer `Retry-After`: the longer of `retry_after_max_ms` and the backoff.
///
/// The rule names whichever set the wait (the backoff when it was longer).
pub fn choose_wait(
    policy: &RetryPolicy,
    code: Option<u16>,
    retry_after_ms: Option<u64>,
    attempts_made: u32,
    rng: &mut impl Rng,
) -> (u64, RetryRule) {
    let Some(asked_ms) = retry_after_ms else {
        return if code == Some(STATUS_TOO_MANY_REQUESTS) {
            (policy.throttled_ms(attempts_made, rng), RetryRule::Throttled)
        } else {
            (policy.backoff_ms(attempts_made, rng), RetryRule::Backoff)
        };
    };
    let backoff_ms = policy.backoff_ms(attempts_made, rng);
    let (floor_ms, rule) = if asked_ms > policy.retry_after_max_ms {
        (policy.retry_after_max_ms, RetryRule::RetryAfterCapped)
    } else {
        (asked_ms, RetryRule::RetryAfter)
    };
    if floor_ms > backoff_ms { (floor_ms, rule) } else { (backoff_ms, RetryRule::Backoff) }
}

mod retry_after;
pub use retry_after::parse_retry_after;

#[cfg(test)]
mod tests;
