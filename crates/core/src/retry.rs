//! Retry policy: full-jitter exponential backoff bounded by attempts and age,
//! `Retry-After` honoured, 410 Gone final.
//!
//! Pure: the caller passes the time and the random source, so a seeded run
//! replays the same schedule. This module owns the decision after an attempt;
//! it must not read a clock, draw from a global RNG or know about HTTP clients.

use rand_core::Rng;
use serde::{Deserialize, Serialize};

/// Per-endpoint retry settings (DESIGN §6 defaults).
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
}

pub const ATTEMPTS_MAX_LIMIT: u32 = 100;
/// Largest accepted `cap_ms`: 7 days.
pub const CAP_MS_LIMIT: u64 = 7 * 24 * 3600 * 1000;
/// Largest accepted `max_age_s`: 30 days.
pub const MAX_AGE_S_LIMIT: u64 = 30 * 24 * 3600;

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { attempts_max: 18, base_ms: 5_000, cap_ms: 8 * 3600 * 1000, max_age_s: 72 * 3600 }
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
        let ceiling = self.backoff_ceiling_ms(attempts_made);
        // The modulo bias is below 2^-20 for any ceiling a valid policy allows.
        match ceiling.checked_add(1) {
            Some(span) => rng.next_u64() % span,
            None => rng.next_u64(),
        }
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

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    Delivered,
    Retry {
        at_ms: u64,
    },
    Dead {
        reason: String,
    },
    /// 410 Gone: dead-letter and disable the endpoint.
    Gone,
}

/// The status code that ends a delivery and disables its endpoint.
pub const STATUS_GONE: u16 = 410;

/// Decides the fate of a delivery after an attempt.
///
/// `attempts_made` counts the attempts of this cycle including the one just
/// finished. The rng is drawn from only when a retry is considered, once.
pub fn decide(
    policy: &RetryPolicy,
    result: &AttemptResult,
    attempts_made: u32,
    cycle_started_at_ms: u64,
    now_ms: u64,
    rng: &mut impl Rng,
) -> Decision {
    let retry_after_ms = match result {
        AttemptResult::Status { code: 200..=299, .. } => return Decision::Delivered,
        AttemptResult::Status { code: STATUS_GONE, .. } => return Decision::Gone,
        AttemptResult::Status { retry_after_ms, .. } => *retry_after_ms,
        AttemptResult::Failed => None,
    };
    if attempts_made >= policy.attempts_max {
        return Decision::Dead {
            reason: format!("attempts exhausted: {attempts_made} of {} failed", policy.attempts_max),
        };
    }
    let mut delay_ms = policy.backoff_ms(attempts_made, rng);
    if let Some(asked_ms) = retry_after_ms {
        // Honour the receiver's wish, but never wait longer than the cap.
        delay_ms = delay_ms.max(asked_ms.min(policy.cap_ms));
    }
    // At least a millisecond: a delivery's attempts under one grant then all
    // start at distinct times, which is what lets apply tell an outcome
    // proposed twice from a second attempt (`ClusterState::record_outcomes`).
    let at_ms = now_ms.saturating_add(delay_ms.max(1));
    let deadline_ms = cycle_started_at_ms.saturating_add(policy.max_age_s.saturating_mul(1000));
    if at_ms > deadline_ms {
        let age_s = at_ms.saturating_sub(cycle_started_at_ms) / 1000;
        return Decision::Dead {
            reason: format!(
                "max age exceeded: the next attempt would start {age_s} s into the cycle, the limit is {} s",
                policy.max_age_s
            ),
        };
    }
    Decision::Retry { at_ms }
}

/// Parses a `Retry-After` value (delta seconds or IMF-fixdate) into a delay.
///
/// A date in the past gives `Some(0)`. Obsolete HTTP date formats (RFC 850,
/// asctime), negative or overflowing numbers give `None`.
pub fn parse_retry_after(value: &str, now_ms: u64) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        let seconds: u64 = value.parse().ok()?;
        return Some(seconds.saturating_mul(1000));
    }
    let date_ms = parse_imf_fixdate_ms(value)?;
    Some(date_ms.saturating_sub(now_ms))
}

const DAY_NAMES: [&str; 7] = ["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"];
const MONTH_NAMES: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// `Wed, 21 Oct 2015 07:28:00 GMT` → milliseconds since the unix epoch.
/// Dates before 1970 clamp to 0. The day name is checked for form only.
fn parse_imf_fixdate_ms(text: &str) -> Option<u64> {
    let fields: Vec<&str> = text.split(' ').collect();
    let [day_name, day, month, year, time, "GMT"] = fields.as_slice() else {
        return None;
    };
    if !DAY_NAMES.contains(day_name) {
        return None;
    }
    let day = fixed_digits(day, 2)?;
    let month = MONTH_NAMES.iter().position(|m| m == month)? as u32 + 1;
    let year = fixed_digits(year, 4)?;
    if day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let clock: Vec<&str> = time.split(':').collect();
    let [hour, minute, second] = clock.as_slice() else {
        return None;
    };
    let (hour, minute, second) = (fixed_digits(hour, 2)?, fixed_digits(minute, 2)?, fixed_digits(second, 2)?);
    // 60 is a leap second, which RFC 9110 allows.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let seconds = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Some(u64::try_from(seconds).unwrap_or(0).saturating_mul(1000))
}

/// Exactly `width` ASCII digits.
fn fixed_digits(text: &str, width: usize) -> Option<u32> {
    if text.len() != width || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`). `month` is 1..=12, `day` 1..=31.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400); // [0, 399]
    let month_from_march = i64::from((month + 9) % 12); // March = 0
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1; // [0, 365]
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    fn status(code: u16) -> AttemptResult {
        AttemptResult::Status { code, retry_after_ms: None }
    }

    const HOUR_MS: u64 = 3600 * 1000;

    #[test]
    fn default_policy_has_design_values_and_is_valid() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.attempts_max, 18);
        assert_eq!(policy.base_ms, 5_000);
        assert_eq!(policy.cap_ms, 8 * HOUR_MS);
        assert_eq!(policy.max_age_s, 72 * 3600);
        assert_eq!(policy.validate(), Ok(()));
    }

    #[test]
    fn validate_names_the_field_to_fix() {
        let ok = RetryPolicy::default();
        let cases = [
            (RetryPolicy { attempts_max: 0, ..ok }, "retry.attempts_max must be between 1 and 100"),
            (RetryPolicy { attempts_max: 101, ..ok }, "retry.attempts_max must be between 1 and 100"),
            (RetryPolicy { base_ms: 0, ..ok }, "retry.base_ms"),
            (RetryPolicy { base_ms: ok.cap_ms + 1, ..ok }, "retry.base_ms"),
            (RetryPolicy { cap_ms: CAP_MS_LIMIT + 1, ..ok }, "retry.cap_ms"),
            (RetryPolicy { max_age_s: 0, ..ok }, "retry.max_age_s"),
            (RetryPolicy { max_age_s: MAX_AGE_S_LIMIT + 1, ..ok }, "retry.max_age_s"),
        ];
        for (policy, expected) in cases {
            let error = policy.validate().expect_err("invalid policy");
            assert!(error.starts_with(expected), "{error:?} should start with {expected:?}");
        }
        let edges = RetryPolicy { attempts_max: 100, base_ms: 1, cap_ms: CAP_MS_LIMIT, max_age_s: MAX_AGE_S_LIMIT };
        assert_eq!(edges.validate(), Ok(()));
        assert_eq!(RetryPolicy { attempts_max: 1, base_ms: 10, cap_ms: 10, max_age_s: 1 }.validate(), Ok(()));
    }

    #[test]
    fn ceiling_doubles_per_attempt_then_stays_at_cap() {
        let policy = RetryPolicy::default();
        let expected = [5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 640_000];
        for (i, want) in expected.iter().enumerate() {
            assert_eq!(policy.backoff_ceiling_ms(i as u32 + 1), *want, "attempt {}", i + 1);
        }
        // 5 s * 2^12 = 20480 s is still under 8 h = 28800 s; 2^13 crosses it.
        assert_eq!(policy.backoff_ceiling_ms(13), 20_480_000);
        assert_eq!(policy.backoff_ceiling_ms(14), 8 * HOUR_MS);
        assert_eq!(policy.backoff_ceiling_ms(100), 8 * HOUR_MS);
        assert_eq!(policy.backoff_ceiling_ms(u32::MAX), 8 * HOUR_MS);
        assert_eq!(policy.backoff_ceiling_ms(0), 5_000);
    }

    #[test]
    fn ceiling_saturates_instead_of_overflowing() {
        let policy = RetryPolicy { attempts_max: 1, base_ms: u64::MAX / 3, cap_ms: u64::MAX, max_age_s: 1 };
        assert_eq!(policy.backoff_ceiling_ms(2), (u64::MAX / 3) * 2);
        assert_eq!(policy.backoff_ceiling_ms(3), u64::MAX);
        assert_eq!(policy.backoff_ceiling_ms(65), u64::MAX);
        let _ = policy.backoff_ms(u32::MAX, &mut rng());
    }

    #[test]
    fn jitter_spreads_over_the_whole_range() {
        let policy = RetryPolicy { base_ms: 100, ..RetryPolicy::default() };
        let mut rng = rng();
        let draws: Vec<u64> = (0..2_000).map(|_| policy.backoff_ms(1, &mut rng)).collect();
        assert!(draws.iter().all(|&d| d <= 100));
        assert!(draws.iter().any(|&d| d < 10), "low end reached");
        assert!(draws.iter().any(|&d| d > 90), "high end reached");
    }

    #[test]
    fn status_2xx_is_delivered() {
        for code in [200, 201, 204, 299] {
            let decision = decide(&RetryPolicy::default(), &status(code), 1, 0, 0, &mut rng());
            assert_eq!(decision, Decision::Delivered, "status {code}");
        }
    }

    #[test]
    fn status_410_is_gone_even_on_the_last_attempt() {
        let policy = RetryPolicy::default();
        assert_eq!(decide(&policy, &status(410), 1, 0, 0, &mut rng()), Decision::Gone);
        assert_eq!(decide(&policy, &status(410), policy.attempts_max, 0, 0, &mut rng()), Decision::Gone);
    }

    #[test]
    fn other_statuses_and_failures_are_retried_within_the_backoff() {
        let policy = RetryPolicy::default();
        let now = 1_000_000;
        for result in
            [status(500), status(503), status(429), status(404), status(301), status(100), AttemptResult::Failed]
        {
            match decide(&policy, &result, 3, now, now, &mut rng()) {
                Decision::Retry { at_ms } => assert!((now..=now + 20_000).contains(&at_ms), "{result:?}"),
                other => panic!("{result:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn a_retry_is_never_due_in_the_millisecond_its_attempt_ended() {
        // A ceiling of 1 ms draws a delay of 0 about half the time.
        let policy = RetryPolicy { attempts_max: 100, base_ms: 1, cap_ms: 1, max_age_s: 60 };
        let mut draws = rng();
        assert!((0..64).any(|_| policy.backoff_ms(0, &mut draws) == 0), "the test must draw a zero delay");
        let now = 5_000;
        let mut jitter = rng();
        for result in [status(500), AttemptResult::Status { code: 503, retry_after_ms: Some(0) }, AttemptResult::Failed]
        {
            for _ in 0..64 {
                assert_eq!(decide(&policy, &result, 1, now, now, &mut jitter), Decision::Retry { at_ms: now + 1 });
            }
        }
    }

    #[test]
    fn failure_at_exactly_attempts_max_is_dead() {
        let policy = RetryPolicy { attempts_max: 3, ..RetryPolicy::default() };
        assert!(matches!(decide(&policy, &status(500), 2, 0, 0, &mut rng()), Decision::Retry { .. }));
        let decision = decide(&policy, &status(500), 3, 0, 0, &mut rng());
        assert_eq!(decision, Decision::Dead { reason: "attempts exhausted: 3 of 3 failed".into() });
        assert!(matches!(decide(&policy, &AttemptResult::Failed, 4, 0, 0, &mut rng()), Decision::Dead { .. }));
    }

    #[test]
    fn retry_past_the_max_age_is_dead() {
        let policy = RetryPolicy { base_ms: 10_000, cap_ms: 10_000, max_age_s: 60, ..RetryPolicy::default() };
        let start = 5_000_000;
        // Retry-After pins the delay to exactly 10 s, so the deadline edge is exact.
        let forced = AttemptResult::Status { code: 503, retry_after_ms: Some(10_000) };
        let at_limit = decide(&policy, &forced, 1, start, start + 50_000, &mut rng());
        assert_eq!(at_limit, Decision::Retry { at_ms: start + 60_000 });
        match decide(&policy, &forced, 1, start, start + 50_001, &mut rng()) {
            Decision::Dead { reason } => assert!(reason.starts_with("max age exceeded: "), "{reason}"),
            other => panic!("expected dead, got {other:?}"),
        }
    }

    #[test]
    fn retry_after_raises_the_delay() {
        let policy = RetryPolicy::default();
        let result = AttemptResult::Status { code: 429, retry_after_ms: Some(120_000) };
        let decision = decide(&policy, &result, 1, 0, 1_000, &mut rng());
        assert_eq!(decision, Decision::Retry { at_ms: 121_000 });
    }

    #[test]
    fn retry_after_shorter_than_the_backoff_keeps_the_backoff() {
        let policy = RetryPolicy { base_ms: 1_000_000, cap_ms: 1_000_000, ..RetryPolicy::default() };
        let plain = decide(&policy, &status(503), 1, 0, 0, &mut rng());
        let asked = AttemptResult::Status { code: 503, retry_after_ms: Some(0) };
        assert_eq!(decide(&policy, &asked, 1, 0, 0, &mut rng()), plain);
    }

    #[test]
    fn retry_after_is_capped_at_cap_ms() {
        let policy = RetryPolicy { cap_ms: 60_000, base_ms: 1_000, ..RetryPolicy::default() };
        let result = AttemptResult::Status { code: 503, retry_after_ms: Some(10 * HOUR_MS) };
        assert_eq!(decide(&policy, &result, 1, 0, 0, &mut rng()), Decision::Retry { at_ms: 60_000 });
    }

    #[test]
    fn decisions_are_deterministic_for_a_seeded_rng() {
        let policy = RetryPolicy::default();
        let run = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (1..18).map(|n| decide(&policy, &status(500), n, 0, n as u64 * 1000, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }

    #[test]
    fn retry_after_parses_delta_seconds() {
        assert_eq!(parse_retry_after("120", 0), Some(120_000));
        assert_eq!(parse_retry_after("  0 ", 0), Some(0));
        assert_eq!(parse_retry_after("99999999999999999999", 0), None);
        assert_eq!(parse_retry_after("18446744073709552", 0), Some(u64::MAX));
    }

    #[test]
    fn retry_after_parses_an_imf_fixdate() {
        let date_ms = 1_445_412_480_000; // 2015-10-21T07:28:00Z
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date_ms - 30_000), Some(30_000));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date_ms + 5_000), Some(0));
        assert_eq!(parse_imf_fixdate_ms("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse_imf_fixdate_ms("Tue, 29 Feb 2000 23:59:59 GMT"), Some(951_868_799_000));
        assert_eq!(parse_imf_fixdate_ms("Fri, 31 Dec 1969 23:59:59 GMT"), Some(0));
    }

    #[test]
    fn retry_after_garbage_is_none() {
        for text in [
            "",
            "soon",
            "-5",
            "1.5",
            "+5",
            "Wed, 21 Oct 2015 07:28:00 UTC",
            "Wed, 21 Oct 2015 07:28 GMT",
            "Wed, 21 Foo 2015 07:28:00 GMT",
            "Wed, 32 Oct 2015 07:28:00 GMT",
            "Mon, 29 Feb 2100 00:00:00 GMT",
            "Wed, 21 Oct 2015 24:00:00 GMT",
            "Wed 21 Oct 2015 07:28:00 GMT",
            "Wednesday, 21-Oct-15 07:28:00 GMT",
            "Wed Oct 21 07:28:00 2015",
        ] {
            assert_eq!(parse_retry_after(text, 0), None, "{text:?}");
        }
    }

    #[test]
    fn days_from_civil_matches_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2015, 10, 21), 16_729);
    }

    proptest! {
        #[test]
        fn backoff_is_always_within_zero_and_the_ceiling(
            base_ms in 1u64..=CAP_MS_LIMIT,
            cap_extra in 0u64..=CAP_MS_LIMIT,
            attempts_made in any::<u32>(),
            seed in any::<u64>(),
        ) {
            let policy = RetryPolicy { base_ms, cap_ms: base_ms.saturating_add(cap_extra), ..RetryPolicy::default() };
            let ceiling = policy.backoff_ceiling_ms(attempts_made);
            prop_assert!(ceiling <= policy.cap_ms);
            prop_assert!(ceiling >= base_ms.min(policy.cap_ms));
            let delay = policy.backoff_ms(attempts_made, &mut StdRng::seed_from_u64(seed));
            prop_assert!(delay <= ceiling);
        }

        #[test]
        fn retry_is_never_past_the_age_bound_nor_before_now(
            attempts_made in 1u32..ATTEMPTS_MAX_LIMIT,
            started in 0u64..1_000_000_000,
            elapsed in 0u64..(80 * HOUR_MS),
            retry_after_ms in proptest::option::of(0u64..(20 * HOUR_MS)),
            code in 300u16..600,
            seed in any::<u64>(),
        ) {
            let policy = RetryPolicy::default();
            let now = started + elapsed;
            let result = AttemptResult::Status { code, retry_after_ms };
            let decision = decide(&policy, &result, attempts_made, started, now, &mut StdRng::seed_from_u64(seed));
            match decision {
                Decision::Retry { at_ms } => {
                    prop_assert!(at_ms >= now && at_ms <= now + policy.cap_ms);
                    prop_assert!(at_ms <= started + policy.max_age_s * 1000);
                    prop_assert!(attempts_made < policy.attempts_max);
                }
                Decision::Dead { .. } => {}
                Decision::Gone => prop_assert_eq!(code, 410),
                Decision::Delivered => prop_assert!(false, "non-2xx delivered"),
            }
        }

        #[test]
        fn delta_seconds_round_trip(seconds in 0u64..=u64::MAX / 1000) {
            prop_assert_eq!(parse_retry_after(&seconds.to_string(), 0), Some(seconds * 1000));
        }
    }
}
