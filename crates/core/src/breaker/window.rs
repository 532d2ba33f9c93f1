//! The breaker's sliding window: outcome counts in a fixed ring of
//! [`WINDOW_BUCKETS`] time buckets, so memory stays bounded whatever the
//! traffic. Bucket width is `window_ms / WINDOW_BUCKETS` (at least 1 ms); a
//! bucket counts while it started less than `span_ms` ago, where `span_ms` is
//! `window_ms` rounded down to whole buckets, so the window holds between nine
//! and ten bucket widths of history.

use serde::{Deserialize, Serialize};

use super::WINDOW_BUCKETS;

/// Outcome counts of one time slice of the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Bucket {
    /// Start of the slice, a multiple of the bucket width.
    start_ms: u64,
    successes: u32,
    failures: u32,
}

/// A ring of buckets, each reused when its slot's next slice comes round.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Window {
    buckets: [Bucket; WINDOW_BUCKETS],
}

fn width_ms(window_ms: u64) -> u64 {
    (window_ms / WINDOW_BUCKETS as u64).max(1)
}

/// How far back buckets count: never more than the ring can hold.
fn span_ms(window_ms: u64) -> u64 {
    window_ms.min(width_ms(window_ms) * WINDOW_BUCKETS as u64)
}

impl Window {
    pub(super) fn record(&mut self, window_ms: u64, now_ms: u64, failed: bool) {
        let width_ms = width_ms(window_ms);
        let slice = now_ms / width_ms;
        let start_ms = slice * width_ms;
        let bucket = &mut self.buckets[(slice % WINDOW_BUCKETS as u64) as usize];
        if bucket.start_ms != start_ms {
            *bucket = Bucket { start_ms, successes: 0, failures: 0 };
        }
        if failed {
            bucket.failures = bucket.failures.saturating_add(1);
        } else {
            bucket.successes = bucket.successes.saturating_add(1);
        }
    }

    /// (successes, failures) in the buckets that started less than
    /// `span_ms(window_ms)` before `now_ms`.
    pub(super) fn counts(&self, window_ms: u64, now_ms: u64) -> (u64, u64) {
        let span_ms = span_ms(window_ms);
        self.buckets
            .iter()
            .filter(|b| b.start_ms <= now_ms && now_ms - b.start_ms < span_ms)
            .fold((0, 0), |(s, f), b| (s + u64::from(b.successes), f + u64::from(b.failures)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn window_keeps_recent_buckets_while_dropping_old_ones() {
        let mut window = Window::default();
        for t in [0, 6_000, 12_000, 54_000, 59_999] {
            window.record(60_000, t, true);
        }
        assert_eq!(window.counts(60_000, 59_999), (0, 5));
        assert_eq!(window.counts(60_000, 66_000), (0, 3));
        // A reused ring slot forgets the slice it held before.
        window.record(60_000, 72_000, false);
        assert_eq!(window.counts(60_000, 72_000), (1, 2));
    }

    #[test]
    fn window_not_divisible_by_the_bucket_count_rounds_down_to_whole_buckets() {
        let mut window = Window::default();
        window.record(65, 0, true);
        assert_eq!(window.counts(65, 59), (0, 1));
        assert_eq!(window.counts(65, 60), (0, 0));
    }

    #[test]
    fn tiny_and_zero_windows_do_not_divide_by_zero() {
        let mut window = Window::default();
        window.record(5, 3, true);
        assert_eq!(window.counts(5, 7), (0, 1));
        assert_eq!(window.counts(5, 8), (0, 0));
        window.record(0, 3, true);
        assert_eq!(window.counts(0, 3), (0, 0));
    }

    proptest! {
        #[test]
        fn counts_equal_a_naive_recount_of_recent_slices(
            window_ms in 0u64..100_000,
            gaps in proptest::collection::vec((0u64..20_000, any::<bool>()), 0..200),
        ) {
            let (width_ms, span_ms) = (width_ms(window_ms), span_ms(window_ms));
            let mut window = Window::default();
            let mut all = Vec::new();
            let mut now = 0;
            for (gap, failed) in gaps {
                now += gap;
                window.record(window_ms, now, failed);
                all.push((now, failed));
                // Naive: every outcome whose slice started less than span_ms ago.
                let recent = all.iter().filter(|(t, _)| now - (t - t % width_ms) < span_ms);
                let failures = recent.clone().filter(|(_, f)| *f).count() as u64;
                let successes = recent.count() as u64 - failures;
                prop_assert_eq!(window.counts(window_ms, now), (successes, failures));
            }
        }
    }
}
