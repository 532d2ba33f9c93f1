//! Per-endpoint attempt statistics over recent windows, counted by apply
//! from the outcomes it records: attempts, successes, failures by class,
//! and a latency histogram, in minute buckets (the last hour) and hour
//! buckets (the last day).
//!
//! Derived, not replicated: never encoded or compared, so a node counts
//! from the outcomes it applied since it started (its log since the last
//! snapshot included) or installed a snapshot. Attempts that were not
//! sent are not counted. Each endpoint holds at most
//! [`MINUTE_BUCKETS`] + [`HOUR_BUCKETS`] buckets and its last failed
//! attempt ([`LastError`]).

use std::collections::{BTreeMap, VecDeque};

use crate::ids::{DeliveryId, EndpointId};
use crate::model::AttemptRecord;

/// Upper bounds (ms) of the latency histogram's buckets; one more counts
/// everything slower.
pub const LATENCY_BOUNDS_MS: [u64; 12] = [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000];
/// Minute buckets kept per endpoint (one hour).
pub const MINUTE_BUCKETS: usize = 60;
/// Hour buckets kept per endpoint (one day).
pub const HOUR_BUCKETS: usize = 24;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;

/// What one attempt's result was, for the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Success,
    /// 4xx (410 included).
    ClientError,
    /// 5xx.
    ServerError,
    Timeout,
    Connect,
    /// Anything else: 1xx/3xx, a refused target, an invalid URL...
    Other,
}

impl Class {
    pub fn of(attempt: &AttemptRecord) -> Self {
        match (attempt.status_code, attempt.error.as_deref()) {
            (Some(200..=299), _) => Class::Success,
            (Some(400..=499), _) => Class::ClientError,
            (Some(500..=599), _) => Class::ServerError,
            (Some(_), _) => Class::Other,
            (None, Some(e)) if e.starts_with("timeout") => Class::Timeout,
            (None, Some(e)) if e.starts_with("connect") => Class::Connect,
            (None, _) => Class::Other,
        }
    }
}

/// The counts of one bucket of time, or of a window summed from them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub attempts: u64,
    pub successes: u64,
    pub client_errors: u64,
    pub server_errors: u64,
    pub timeouts: u64,
    pub connect_errors: u64,
    pub other_errors: u64,
    /// Attempts per latency bucket ([`LATENCY_BOUNDS_MS`], then slower).
    pub latency: [u64; LATENCY_BOUNDS_MS.len() + 1],
}

impl Counts {
    fn add(&mut self, class: Class, latency_ms: u64) {
        self.attempts += 1;
        *match class {
            Class::Success => &mut self.successes,
            Class::ClientError => &mut self.client_errors,
            Class::ServerError => &mut self.server_errors,
            Class::Timeout => &mut self.timeouts,
            Class::Connect => &mut self.connect_errors,
            Class::Other => &mut self.other_errors,
        } += 1;
        let bucket = LATENCY_BOUNDS_MS.iter().position(|bound| latency_ms <= *bound).unwrap_or(LATENCY_BOUNDS_MS.len());
        self.latency[bucket] += 1;
    }

    fn merge(&mut self, other: &Counts) {
        self.attempts += other.attempts;
        self.successes += other.successes;
        self.client_errors += other.client_errors;
        self.server_errors += other.server_errors;
        self.timeouts += other.timeouts;
        self.connect_errors += other.connect_errors;
        self.other_errors += other.other_errors;
        for (mine, theirs) in self.latency.iter_mut().zip(other.latency) {
            *mine += theirs;
        }
    }

    /// The latency at quantile `q` (0..=1): the upper bound of the bucket
    /// it falls in; `None` without attempts or past the last bound.
    pub fn latency_quantile_ms(&self, q: f64) -> Option<u64> {
        if self.attempts == 0 {
            return None;
        }
        let rank = ((self.attempts as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, count) in self.latency.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return LATENCY_BOUNDS_MS.get(i).copied();
            }
        }
        None
    }
}

/// Buckets of `width_ms`, newest last, at most `keep`.
#[derive(Debug, Clone, Default)]
struct Series {
    buckets: VecDeque<(u64, Counts)>,
}

impl Series {
    fn add(&mut self, at_ms: u64, width_ms: u64, keep: usize, class: Class, latency_ms: u64) {
        let start = at_ms - at_ms % width_ms;
        match self.buckets.back_mut() {
            Some((last, counts)) if *last == start => counts.add(class, latency_ms),
            // An outcome stamped before the newest bucket (a proposer's
            // clock behind another's) joins the newest: counts stay close.
            Some((last, counts)) if *last > start => counts.add(class, latency_ms),
            _ => {
                let mut counts = Counts::default();
                counts.add(class, latency_ms);
                self.buckets.push_back((start, counts));
                while self.buckets.len() > keep {
                    self.buckets.pop_front();
                }
            }
        }
    }

    fn since(&self, from_ms: u64) -> Counts {
        let mut total = Counts::default();
        for (_, counts) in self.buckets.iter().filter(|(start, _)| *start >= from_ms) {
            total.merge(counts);
        }
        total
    }
}

/// An endpoint's most recent failed attempt, for an operator to see what
/// is wrong without opening a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastError {
    pub at_ms: u64,
    pub delivery_id: DeliveryId,
    /// Status, error and response excerpt (1 KiB at most) as recorded.
    pub attempt: AttemptRecord,
}

/// One endpoint's recent attempts.
#[derive(Debug, Clone, Default)]
pub struct EndpointStats {
    minutes: Series,
    hours: Series,
    last_error: Option<Box<LastError>>,
}

impl EndpointStats {
    /// The last attempt that did not succeed, whenever it was.
    pub fn last_error(&self) -> Option<&LastError> {
        self.last_error.as_deref()
    }

    /// The attempts of the last `window_ms` before `now_ms`, counted from
    /// whole buckets: minutes for an hour or less, hours beyond.
    pub fn window(&self, now_ms: u64, window_ms: u64) -> Counts {
        if window_ms <= HOUR_MS {
            let from = now_ms.saturating_sub(window_ms);
            self.minutes.since(from - from % MINUTE_MS)
        } else {
            let from = now_ms.saturating_sub(window_ms);
            self.hours.since(from - from % HOUR_MS)
        }
    }
}

/// Every endpoint's statistics: derived, see the module docs.
#[derive(Debug, Default)]
pub struct Stats {
    endpoints: BTreeMap<EndpointId, EndpointStats>,
}

impl Stats {
    pub(super) fn record(
        &mut self,
        endpoint: &EndpointId,
        delivery: &DeliveryId,
        attempt: &AttemptRecord,
        now_ms: u64,
    ) {
        let stats = self.endpoints.entry(*endpoint).or_default();
        let class = Class::of(attempt);
        if class != Class::Success {
            stats.last_error =
                Some(Box::new(LastError { at_ms: now_ms, delivery_id: *delivery, attempt: attempt.clone() }));
        }
        stats.minutes.add(now_ms, MINUTE_MS, MINUTE_BUCKETS, class, attempt.latency_ms);
        stats.hours.add(now_ms, HOUR_MS, HOUR_BUCKETS, class, attempt.latency_ms);
    }

    pub(super) fn forget(&mut self, endpoint: &EndpointId) {
        self.endpoints.remove(endpoint);
    }

    pub fn of(&self, endpoint: &EndpointId) -> Option<&EndpointStats> {
        self.endpoints.get(endpoint)
    }
}

impl Clone for Stats {
    /// A clone of the state is a snapshot's: it needs no statistics, and
    /// copying every endpoint's buckets would lengthen the clone.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Stats {
    /// Derived and local: not part of what replicas compare.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(status: Option<u16>, error: Option<&str>, latency_ms: u64) -> AttemptRecord {
        AttemptRecord {
            node_id: 1,
            fencing_token: 1,
            started_at_ms: 0,
            latency_ms,
            status_code: status,
            error: error.map(str::to_string),
            response_excerpt: None,
        }
    }

    fn delivery() -> DeliveryId {
        DeliveryId::parse("dlv_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id")
    }

    #[test]
    fn the_last_failed_attempt_is_kept_and_a_success_does_not_replace_it() {
        let mut stats = Stats::default();
        let id = EndpointId::parse("ep_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id");
        stats.record(&id, &delivery(), &attempt(Some(200), None, 4), 1_000);
        assert_eq!(stats.of(&id).and_then(EndpointStats::last_error), None, "no failure yet");
        let failed = attempt(Some(503), None, 40);
        stats.record(&id, &delivery(), &failed, 2_000);
        stats.record(&id, &delivery(), &attempt(Some(204), None, 4), 3_000);
        let last = stats.of(&id).and_then(EndpointStats::last_error).expect("kept");
        assert_eq!((last.at_ms, last.delivery_id, &last.attempt), (2_000, delivery(), &failed));
        stats.record(&id, &delivery(), &attempt(None, Some("timeout"), 15_000), 4_000);
        let last = stats.of(&id).and_then(EndpointStats::last_error).expect("kept");
        assert_eq!((last.at_ms, last.attempt.error.as_deref()), (4_000, Some("timeout")));
    }

    #[test]
    fn attempts_are_classed_counted_and_windowed() {
        let mut stats = Stats::default();
        let id = EndpointId::parse("ep_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id");
        let d = delivery();
        let base = 10 * HOUR_MS;
        stats.record(&id, &d, &attempt(Some(200), None, 4), base);
        stats.record(&id, &d, &attempt(Some(503), None, 40), base + 1_000);
        stats.record(&id, &d, &attempt(None, Some("timeout"), 15_000), base + 2 * MINUTE_MS);
        stats.record(&id, &d, &attempt(None, Some("connect: refused"), 1), base + 30 * MINUTE_MS);
        stats.record(&id, &d, &attempt(Some(404), None, 7), base + 2 * HOUR_MS);
        let now = base + 2 * HOUR_MS + 1;
        let endpoint = stats.of(&id).expect("counted");
        let hour = endpoint.window(now, HOUR_MS);
        assert_eq!((hour.attempts, hour.client_errors), (1, 1), "only the last hour: {hour:?}");
        let day = endpoint.window(now, 24 * HOUR_MS);
        assert_eq!(
            (day.attempts, day.successes, day.server_errors, day.timeouts, day.connect_errors, day.client_errors),
            (5, 1, 1, 1, 1, 1)
        );
        assert_eq!(day.latency_quantile_ms(0.5), Some(10));
        assert_eq!(day.latency_quantile_ms(0.99), Some(30_000));
        assert_eq!(Counts::default().latency_quantile_ms(0.5), None);
    }

    #[test]
    fn an_endpoint_keeps_a_bounded_number_of_buckets() {
        let mut stats = Stats::default();
        let id = EndpointId::parse("ep_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("id");
        for hour in 0..100 {
            stats.record(&id, &delivery(), &attempt(Some(200), None, 1), hour * HOUR_MS);
        }
        let endpoint = stats.of(&id).expect("counted");
        assert_eq!((endpoint.minutes.buckets.len(), endpoint.hours.buckets.len()), (60, 24));
    }
}
