//! Token-bucket rate limit. Pure: time is passed in.
//!
//! Tokens are counted in thousandths (milli-tokens) with integer arithmetic,
//! so a run is exactly reproducible: `rate_per_s` tokens a second is exactly
//! `rate_per_s` milli-tokens a millisecond. The bucket starts full. Time that
//! goes backwards is read as no time passing. This module owns only the
//! arithmetic; it must not sleep or read a clock.

use serde::{Deserialize, Serialize};

/// Milli-tokens in one token.
const MILLI: u64 = 1_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenBucket {
    /// Refill speed in tokens a second (= milli-tokens a millisecond), at least 1.
    rate_per_s: u32,
    /// Most tokens the bucket holds, at least 1: the largest burst.
    burst: u32,
    /// Tokens available, in thousandths; at most `burst * 1000`.
    tokens_milli: u64,
    /// Time of the last refill; never decreases.
    updated_at_ms: u64,
}

impl TokenBucket {
    /// `rate_per_s` tokens a second, bursts of up to `burst` (at least 1).
    /// A `rate_per_s` of 0 is read as 1. The bucket starts full.
    pub fn new(rate_per_s: u32, burst: u32, now_ms: u64) -> Self {
        let burst = burst.max(1);
        Self { rate_per_s: rate_per_s.max(1), burst, tokens_milli: u64::from(burst) * MILLI, updated_at_ms: now_ms }
    }

    /// Takes one token, or says how long until one is available.
    ///
    /// The wait is in milliseconds, at least 1, and exact: taking at
    /// `now_ms + wait` succeeds if nobody else took in between.
    pub fn try_take(&mut self, now_ms: u64) -> Result<(), u64> {
        self.refill(now_ms);
        if self.tokens_milli >= MILLI {
            self.tokens_milli -= MILLI;
            return Ok(());
        }
        let missing_milli = MILLI - self.tokens_milli;
        Err(missing_milli.div_ceil(u64::from(self.rate_per_s)).max(1))
    }

    pub fn rate_per_s(&self) -> u32 {
        self.rate_per_s
    }

    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Whole tokens available at `now_ms`, without taking any.
    pub fn available(&self, now_ms: u64) -> u32 {
        let mut copy = self.clone();
        copy.refill(now_ms);
        // At most `burst`, so it fits.
        (copy.tokens_milli / MILLI) as u32
    }

    fn refill(&mut self, now_ms: u64) {
        let elapsed_ms = now_ms.saturating_sub(self.updated_at_ms);
        self.updated_at_ms = self.updated_at_ms.max(now_ms);
        let full_milli = u64::from(self.burst) * MILLI;
        let added_milli = elapsed_ms.saturating_mul(u64::from(self.rate_per_s));
        self.tokens_milli = self.tokens_milli.saturating_add(added_milli).min(full_milli);
        debug_assert!(self.tokens_milli <= full_milli);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Successful takes when trying every `step_ms` in `[from_ms, to_ms)`.
    fn takes_polling(bucket: &mut TokenBucket, from_ms: u64, to_ms: u64, step_ms: u64) -> u64 {
        (from_ms..to_ms).step_by(step_ms as usize).filter(|&t| bucket.try_take(t).is_ok()).count() as u64
    }

    #[test]
    fn full_burst_goes_at_once_then_the_bucket_limits() {
        let mut bucket = TokenBucket::new(10, 5, 1_000);
        for _ in 0..5 {
            assert_eq!(bucket.try_take(1_000), Ok(()));
        }
        assert_eq!(bucket.try_take(1_000), Err(100));
    }

    #[test]
    fn zero_rate_and_zero_burst_are_raised_to_one() {
        let mut bucket = TokenBucket::new(0, 0, 0);
        assert_eq!((bucket.rate_per_s(), bucket.burst()), (1, 1));
        assert_eq!(bucket.try_take(0), Ok(()));
        assert_eq!(bucket.try_take(0), Err(1_000));
        assert_eq!(bucket.try_take(1_000), Ok(()));
    }

    #[test]
    fn ten_per_second_gives_about_a_hundred_takes_in_ten_seconds() {
        let mut bucket = TokenBucket::new(10, 1, 0);
        let taken = takes_polling(&mut bucket, 0, 10_001, 1);
        assert!((99..=101).contains(&taken), "{taken} takes");
    }

    #[test]
    fn sustained_rate_matches_the_configuration_after_the_burst() {
        let mut bucket = TokenBucket::new(250, 50, 0);
        assert_eq!(takes_polling(&mut bucket, 0, 1, 1), 1);
        // Drain the burst, then a minute of polling yields exactly the rate.
        while bucket.try_take(0).is_ok() {}
        assert_eq!(takes_polling(&mut bucket, 1, 60_001, 1), 250 * 60);
    }

    #[test]
    fn wait_time_is_exact() {
        let mut bucket = TokenBucket::new(3, 1, 0);
        assert_eq!(bucket.try_take(0), Ok(()));
        // 1000 milli-tokens at 3 a ms: 334 ms (rounded up).
        assert_eq!(bucket.try_take(0), Err(334));
        assert_eq!(bucket.try_take(333), Err(1));
        assert_eq!(bucket.try_take(334), Ok(()));
        // The bucket holds one token, so the 2 extra milli-tokens were dropped.
        assert_eq!(bucket.try_take(334), Err(334));
        let mut roomy = TokenBucket::new(3, 2, 0);
        assert_eq!((roomy.try_take(0), roomy.try_take(0), roomy.try_take(0)), (Ok(()), Ok(()), Err(334)));
        assert_eq!(roomy.try_take(334), Ok(()));
        // Here the 2 extra milli-tokens were kept: 998 more take 333 ms.
        assert_eq!(roomy.try_take(334), Err(333));
    }

    #[test]
    fn very_high_rate_waits_at_least_one_ms() {
        let mut bucket = TokenBucket::new(u32::MAX, 1, 0);
        assert_eq!(bucket.try_take(0), Ok(()));
        assert_eq!(bucket.try_take(0), Err(1));
        assert_eq!(bucket.try_take(1), Ok(()));
    }

    #[test]
    fn refill_never_exceeds_the_burst() {
        let mut bucket = TokenBucket::new(1_000, 3, 0);
        assert_eq!(bucket.available(u64::MAX), 3);
        let mut taken = 0;
        while bucket.try_take(1_000_000).is_ok() {
            taken += 1;
        }
        assert_eq!(taken, 3);
    }

    #[test]
    fn clock_stepping_back_adds_no_tokens() {
        let mut bucket = TokenBucket::new(1, 1, 10_000);
        assert_eq!(bucket.try_take(10_000), Ok(()));
        assert_eq!(bucket.try_take(5_000), Err(1_000));
        assert_eq!(bucket.try_take(10_500), Err(500));
        assert_eq!(bucket.try_take(11_000), Ok(()));
    }

    #[test]
    fn available_does_not_consume() {
        let bucket = TokenBucket::new(10, 4, 0);
        assert_eq!(bucket.available(0), 4);
        assert_eq!(bucket.available(0), 4);
    }

    proptest! {
        #[test]
        fn takes_over_any_span_stay_within_burst_plus_rate(
            rate_per_s in 1u32..2_000,
            burst in 0u32..100,
            steps in proptest::collection::vec(0u64..50, 1..500),
        ) {
            let mut bucket = TokenBucket::new(rate_per_s, burst, 0);
            let mut now = 0;
            let mut taken_at = Vec::new();
            for step in steps {
                now += step;
                if bucket.try_take(now).is_ok() {
                    taken_at.push(now);
                }
            }
            // Every span [taken_at[i], taken_at[j]] holds at most burst + rate*T/1000 + 1 takes.
            let burst = u64::from(burst.max(1));
            for i in 0..taken_at.len() {
                for j in i..taken_at.len().min(i + 200) {
                    let span_ms = taken_at[j] - taken_at[i];
                    let takes = (j - i + 1) as u64;
                    prop_assert!(takes <= burst + u64::from(rate_per_s) * span_ms / 1000 + 1,
                        "{takes} takes in {span_ms} ms");
                }
            }
        }

        #[test]
        fn a_refused_take_succeeds_after_the_announced_wait(
            rate_per_s in 1u32..5_000,
            burst in 1u32..10,
            start in 0u64..1_000_000,
        ) {
            let mut bucket = TokenBucket::new(rate_per_s, burst, start);
            while bucket.try_take(start).is_ok() {}
            let wait = bucket.try_take(start).expect_err("drained");
            prop_assert!(wait >= 1);
            if wait > 1 {
                prop_assert!(bucket.clone().try_take(start + wait - 1).is_err());
            }
            prop_assert_eq!(bucket.try_take(start + wait), Ok(()));
        }
    }
}
