//! What the whole cluster did, minute by minute, over the last hour:
//! events accepted, and deliveries delivered, retried (an attempt failed
//! and a retry was scheduled) and dead-lettered. Counted by apply, where
//! each of those happens, at the time the command carries, so every
//! replica counts the same entries into the same minutes.
//!
//! Derived, not replicated, like `stats`: never encoded or compared, so a
//! node counts from the entries it applied since it started (its log since
//! the last snapshot included) or installed a snapshot. Holds
//! [`THROUGHPUT_MINUTES`] buckets of four counters, whatever the traffic.

use std::collections::VecDeque;

/// Minutes kept: one hour.
pub const THROUGHPUT_MINUTES: usize = 60;
const MINUTE_MS: u64 = 60_000;

/// The counts of one minute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Events committed (producers', inbound and operational ones).
    pub accepted: u64,
    /// Deliveries that ended delivered.
    pub delivered: u64,
    /// Failed attempts after which a retry was scheduled.
    pub retried: u64,
    /// Deliveries that became dead: retries used up, 410 Gone, their
    /// endpoint disabled or deleted, or sent to a disabled endpoint.
    pub dead: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.accepted += other.accepted;
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.dead += other.dead;
    }
}

/// One thing counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Accepted,
    Delivered,
    Retried,
    Dead,
}

/// Minute buckets, newest last, at most [`THROUGHPUT_MINUTES`].
#[derive(Debug, Default)]
pub struct Throughput {
    minutes: VecDeque<(u64, Tally)>,
}

impl Throughput {
    pub(super) fn note(&mut self, flow: Flow, at_ms: u64) {
        let start = at_ms - at_ms % MINUTE_MS;
        let tally = match self.minutes.back_mut() {
            // A command stamped before the newest minute (its proposer's
            // clock behind another's) joins the newest: counts stay close
            // and the buckets stay in order.
            Some((last, tally)) if *last >= start => tally,
            _ => {
                self.minutes.push_back((start, Tally::default()));
                while self.minutes.len() > THROUGHPUT_MINUTES {
                    self.minutes.pop_front();
                }
                &mut self.minutes.back_mut().expect("just pushed").1
            }
        };
        *match flow {
            Flow::Accepted => &mut tally.accepted,
            Flow::Delivered => &mut tally.delivered,
            Flow::Retried => &mut tally.retried,
            Flow::Dead => &mut tally.dead,
        } += 1;
    }

    /// The last `minutes` whole minutes up to the one holding `now_ms`
    /// (at most [`THROUGHPUT_MINUTES`]), oldest first, as `(minute start,
    /// tally)`: a minute nothing happened in has a zero tally, so a chart
    /// needs no gaps filled. Counts stamped after `now_ms`'s minute (a
    /// proposer's clock ahead of this node's) fall in the last minute.
    pub fn per_minute(&self, now_ms: u64, minutes: usize) -> Vec<(u64, Tally)> {
        let minutes = minutes.min(THROUGHPUT_MINUTES);
        let current = now_ms - now_ms % MINUTE_MS;
        let first = current.saturating_sub(MINUTE_MS * minutes.saturating_sub(1) as u64);
        let mut series: Vec<(u64, Tally)> =
            (0..minutes as u64).map(|i| (first + i * MINUTE_MS, Tally::default())).collect();
        for (start, tally) in &self.minutes {
            if *start < first {
                continue;
            }
            let index = (((start - first) / MINUTE_MS) as usize).min(minutes.saturating_sub(1));
            if let Some((_, slot)) = series.get_mut(index) {
                slot.add(tally);
            }
        }
        series
    }
}

impl Clone for Throughput {
    /// A clone of the state is a snapshot's: it needs no counts.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Throughput {
    /// Derived and local: not part of what replicas compare.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_MS: u64 = 60 * MINUTE_MS;

    fn sum(series: &[(u64, Tally)]) -> Tally {
        let mut total = Tally::default();
        for (_, tally) in series {
            total.add(tally);
        }
        total
    }

    #[test]
    fn flows_are_counted_in_their_minute_and_quiet_minutes_are_zero() {
        let mut t = Throughput::default();
        let base = 10 * HOUR_MS;
        t.note(Flow::Accepted, base + 1_000);
        t.note(Flow::Accepted, base + 59_999);
        t.note(Flow::Retried, base + 2 * MINUTE_MS + 5);
        t.note(Flow::Dead, base + 2 * MINUTE_MS + 6);
        t.note(Flow::Delivered, base + 4 * MINUTE_MS);
        let series = t.per_minute(base + 4 * MINUTE_MS + 30_000, 5);
        let starts: Vec<u64> = series.iter().map(|(s, _)| *s).collect();
        assert_eq!(starts, (0..5).map(|i| base + i * MINUTE_MS).collect::<Vec<_>>());
        assert_eq!(series[0].1, Tally { accepted: 2, ..Tally::default() });
        assert_eq!(series[1].1, Tally::default(), "a quiet minute");
        assert_eq!(series[2].1, Tally { retried: 1, dead: 1, ..Tally::default() });
        assert_eq!(series[4].1, Tally { delivered: 1, ..Tally::default() });
    }

    #[test]
    fn minutes_before_the_window_are_left_out_and_the_buckets_are_bounded() {
        let mut t = Throughput::default();
        for minute in 0..200 {
            t.note(Flow::Accepted, minute * MINUTE_MS);
        }
        assert_eq!(t.minutes.len(), THROUGHPUT_MINUTES);
        let now = 199 * MINUTE_MS + 1;
        let series = t.per_minute(now, 1_000);
        assert_eq!(series.len(), THROUGHPUT_MINUTES, "at most an hour is asked for");
        assert_eq!(sum(&series).accepted, 60);
        assert_eq!(sum(&t.per_minute(now, 10)).accepted, 10);
        // Two hours later, nothing of it is in the last hour.
        assert_eq!(sum(&t.per_minute(now + 2 * HOUR_MS, 60)), Tally::default());
    }

    #[test]
    fn a_clock_behind_joins_the_newest_minute_and_one_ahead_lands_in_the_last() {
        let mut t = Throughput::default();
        let base = 3 * HOUR_MS;
        t.note(Flow::Delivered, base + 5 * MINUTE_MS);
        t.note(Flow::Delivered, base + MINUTE_MS);
        assert_eq!(t.minutes.len(), 1, "a late stamp opens no older bucket");
        let series = t.per_minute(base + 3 * MINUTE_MS, 4);
        assert_eq!(series.last().map(|(_, tally)| tally.delivered), Some(2), "{series:?}");
        assert!(t.per_minute(0, 0).is_empty());
    }
}
