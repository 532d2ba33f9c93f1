//! What each apply did to deliveries' lifecycles, tallied per node for
//! the node's metrics (`/metrics`, docs/METRICS.md): how long a
//! delivery stayed in the state it left, how long it took to its first
//! attempt and to delivered, retries, dead letters by reason, deliveries
//! that ended `ignored_stale`, and outcomes refused as stale.
//!
//! Apply runs on every replica, so a replica tallies each change for one
//! node only, the one that counts it: the owner of the delivery's shard
//! at that point of the log (while a shard has no owner, the node with
//! the lowest id). Every replica computes the same owner, and only that
//! node adds the tally to its metrics, so a sum over the cluster counts
//! each change once. An outcome passed the fence only if its reporter
//! owns the shard, so outcomes are counted by the node that sent them;
//! one refused as stale is counted by the node that sent it.
//!
//! Derived and local: cleared at the start of every apply, never encoded
//! or compared, empty in a clone. Its size is fixed per node named
//! (a few histograms of [`DURATION_BOUNDS_MS`]), whatever the apply did.

use crate::ids::NodeId;
use crate::model::{Delivery, DeliveryState, TimelineEntry};

/// Upper bounds (ms) of the lifecycle histograms' buckets, from a fast
/// first attempt to a delivery retried for days; one more bucket counts
/// everything longer.
pub const DURATION_BOUNDS_MS: [u64; 16] = [
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
    14_400_000,
    86_400_000,
    259_200_000,
];

/// A histogram of durations: counts per bucket of [`DURATION_BOUNDS_MS`]
/// (not cumulative; the last counts everything longer), their sum and count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Durations {
    pub buckets: [u64; DURATION_BOUNDS_MS.len() + 1],
    pub sum_ms: u64,
    pub count: u64,
}

impl Durations {
    pub fn observe(&mut self, ms: u64) {
        let bucket = DURATION_BOUNDS_MS.iter().position(|bound| ms <= *bound).unwrap_or(DURATION_BOUNDS_MS.len());
        self.buckets[bucket] += 1;
        self.sum_ms = self.sum_ms.saturating_add(ms);
        self.count += 1;
    }

    pub fn merge(&mut self, other: &Durations) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
        self.sum_ms = self.sum_ms.saturating_add(other.sum_ms);
        self.count += other.count;
    }
}

/// The states a delivery's time is measured in: those the log records.
/// (`attempting` is the owner's view of a pending or retrying delivery.)
pub const TIMED_STATES: [DeliveryState; 5] = [
    DeliveryState::Pending,
    DeliveryState::Retrying,
    DeliveryState::Delivered,
    DeliveryState::Dead,
    DeliveryState::IgnoredStale,
];

fn timed_index(state: DeliveryState) -> Option<usize> {
    TIMED_STATES.iter().position(|s| *s == state)
}

/// Why a delivery went dead, in a few classes (a bounded label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeadReason {
    /// The retry policy's `attempts_max` failed.
    AttemptsExhausted,
    /// The next attempt would have started past the policy's `max_age_s`.
    MaxAge,
    /// The endpoint answered 410 Gone (this delivery, or another one,
    /// which disabled the endpoint).
    Gone,
    /// The endpoint was disabled by an operator, or the delivery targeted
    /// an endpoint already disabled.
    EndpointDisabled,
    /// The endpoint was disabled because every attempt failed for its
    /// `disable_after_s`.
    EndpointFailing,
    EndpointDeleted,
    Other,
}

impl DeadReason {
    pub const ALL: [DeadReason; 7] = [
        DeadReason::AttemptsExhausted,
        DeadReason::MaxAge,
        DeadReason::Gone,
        DeadReason::EndpointDisabled,
        DeadReason::EndpointFailing,
        DeadReason::EndpointDeleted,
        DeadReason::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::AttemptsExhausted => "attempts_exhausted",
            DeadReason::MaxAge => "max_age",
            DeadReason::Gone => "gone",
            DeadReason::EndpointDisabled => "endpoint_disabled",
            DeadReason::EndpointFailing => "endpoint_failing",
            DeadReason::EndpointDeleted => "endpoint_deleted",
            DeadReason::Other => "other",
        }
    }

    /// The class of a `Dead` timeline entry's reason, as apply and the
    /// retry policy word them (`retry::decide`, `state/endpoints.rs`,
    /// `state/health.rs`, `state/outcomes.rs`, `state/ingest.rs`).
    pub fn classify(reason: &str) -> Self {
        if reason.starts_with("attempts exhausted") {
            DeadReason::AttemptsExhausted
        } else if reason.starts_with("max age exceeded") {
            DeadReason::MaxAge
        } else if reason.contains("410 Gone") {
            DeadReason::Gone
        } else if reason.starts_with("endpoint disabled: every attempt failed") {
            DeadReason::EndpointFailing
        } else if reason.starts_with("endpoint disabled") {
            DeadReason::EndpointDisabled
        } else if reason.starts_with("endpoint deleted") {
            DeadReason::EndpointDeleted
        } else {
            DeadReason::Other
        }
    }

    fn index(self) -> usize {
        DeadReason::ALL.iter().position(|r| *r == self).unwrap_or(DeadReason::ALL.len() - 1)
    }
}

/// One node's share of what applies did to deliveries; also what a node
/// adds up from every apply since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Time spent in each of [`TIMED_STATES`], observed when a delivery
    /// leaves the state.
    pub in_state: [Durations; TIMED_STATES.len()],
    /// From the event's acceptance to the start of the delivery's first
    /// attempt that was sent (not after a replay).
    pub to_first_attempt: Durations,
    /// From the event's acceptance to the delivery becoming delivered.
    pub to_delivered: Durations,
    /// Attempts whose outcome scheduled a retry.
    pub retries: u64,
    /// Deliveries that went dead, by [`DeadReason`] (in `ALL`'s order).
    pub dead_letters: [u64; DeadReason::ALL.len()],
    /// Deliveries that ended `ignored_stale`.
    pub ignored_stale: u64,
    /// Outcomes refused for a stale fencing token (counted for the node
    /// that sent them).
    pub stale_outcomes: u64,
}

impl Tally {
    pub fn merge(&mut self, other: &Tally) {
        for (mine, theirs) in self.in_state.iter_mut().zip(&other.in_state) {
            mine.merge(theirs);
        }
        self.to_first_attempt.merge(&other.to_first_attempt);
        self.to_delivered.merge(&other.to_delivered);
        self.retries += other.retries;
        for (mine, theirs) in self.dead_letters.iter_mut().zip(other.dead_letters) {
            *mine += theirs;
        }
        self.ignored_stale += other.ignored_stale;
        self.stale_outcomes += other.stale_outcomes;
    }

    /// The time spent in `state`.
    pub fn in_state(&self, state: DeliveryState) -> Option<&Durations> {
        timed_index(state).map(|i| &self.in_state[i])
    }

    pub fn dead_letters(&self, reason: DeadReason) -> u64 {
        self.dead_letters[reason.index()]
    }

    pub(super) fn add_dead_letter(&mut self, reason: DeadReason) {
        self.dead_letters[reason.index()] += 1;
    }

    /// A delivery moved from `before` (entered at `entered_ms`) to its
    /// current state (entered at `now_entered_ms`, the move's time).
    pub(super) fn moved(&mut self, before: DeliveryState, entered_ms: u64, after: &Delivery, now_entered_ms: u64) {
        if let Some(i) = timed_index(before) {
            self.in_state[i].observe(now_entered_ms.saturating_sub(entered_ms));
        }
        match after.state {
            DeliveryState::Delivered => {
                self.to_delivered.observe(now_entered_ms.saturating_sub(after.created_at_ms));
            }
            DeliveryState::Dead => self.add_dead_letter(DeadReason::classify(last_dead_reason(after))),
            DeliveryState::IgnoredStale => self.ignored_stale += 1,
            DeliveryState::Pending | DeliveryState::Attempting | DeliveryState::Retrying => {}
        }
    }
}

/// The tallies of the last apply, by the node that counts them. A handful
/// of nodes at most: a vector.
#[derive(Default)]
pub struct Tallies(Vec<(NodeId, Tally)>);

impl Tallies {
    /// What the last apply tallied for `node`.
    pub fn of(&self, node: NodeId) -> Option<&Tally> {
        self.0.iter().find(|(n, _)| *n == node).map(|(_, tally)| tally)
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    pub(super) fn tally(&mut self, node: NodeId) -> &mut Tally {
        let at = match self.0.iter().position(|(n, _)| *n == node) {
            Some(at) => at,
            None => {
                self.0.push((node, Tally::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }
}

impl Clone for Tallies {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Tallies {
    /// Derived and local: not part of what replicas compare.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Tallies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tallies({} nodes)", self.0.len())
    }
}

/// When `delivery` entered its current state, from its timeline: the
/// entry that set it (for `retrying`, the first retry of the run it is
/// in: a failed retry keeps it `retrying`), else its reception. A
/// timeline cut short ([`TimelineEntry::Truncated`]) answers the cut's
/// time at the earliest.
pub fn entered_state_at_ms(delivery: &Delivery) -> u64 {
    if delivery.state == DeliveryState::Pending {
        // Set at creation and by a replay, the two ways into `pending`.
        return delivery.cycle_started_at_ms;
    }
    let mut entered = None;
    for entry in delivery.history.iter().rev() {
        match entry {
            TimelineEntry::RetryScheduled { at_ms, .. } => {
                if delivery.state != DeliveryState::Retrying {
                    return entered.unwrap_or(*at_ms);
                }
                // Earlier retries of the same run come first.
                entered = Some(*at_ms);
            }
            TimelineEntry::Attempt { .. } | TimelineEntry::Sequenced { .. } | TimelineEntry::Skipped { .. } => {}
            TimelineEntry::Truncated { at_ms, .. } => return entered.unwrap_or(*at_ms),
            TimelineEntry::Received { at_ms }
            | TimelineEntry::Delivered { at_ms }
            | TimelineEntry::Dead { at_ms, .. }
            | TimelineEntry::Replayed { at_ms }
            | TimelineEntry::IgnoredStale { at_ms, .. } => return entered.unwrap_or(*at_ms),
        }
    }
    entered.unwrap_or(delivery.created_at_ms)
}

/// Whether the delivery's next sent attempt is the first of its life: its
/// cycle spent none yet (attempts not sent spend none) and it was never
/// replayed (a timeline cut short might have held a replay: no).
pub fn first_attempt_pending(delivery: &Delivery) -> bool {
    delivery.cycle_attempts == 0
        && !delivery.state.is_terminal()
        && !delivery
            .history
            .iter()
            .any(|entry| matches!(entry, TimelineEntry::Replayed { .. } | TimelineEntry::Truncated { .. }))
}

fn last_dead_reason(delivery: &Delivery) -> &str {
    delivery
        .history
        .iter()
        .rev()
        .find_map(|entry| match entry {
            TimelineEntry::Dead { reason, .. } => Some(reason.as_str()),
            _ => None,
        })
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::OptionalMs;
    use crate::retry::RetryRule;

    fn delivery(state: DeliveryState, history: Vec<TimelineEntry>) -> Delivery {
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(3);
        let event = crate::ids::EventId::generate(1_000, &mut rng);
        let endpoint = crate::ids::EndpointId::generate(1_000, &mut rng);
        Delivery {
            id: crate::ids::DeliveryId::derive(&event, &endpoint),
            event_id: event,
            endpoint_id: endpoint,
            state,
            initial_state: DeliveryState::Pending,
            attempt_count: 0,
            cycle_attempts: 0,
            sequence: 0,
            cycle_started_at_ms: 1_000,
            next_attempt_at_ms: OptionalMs::NONE,
            created_at_ms: 1_000,
            updated_at_ms: 1_000,
            history: history.into_boxed_slice(),
        }
    }

    fn retry(at_ms: u64) -> TimelineEntry {
        TimelineEntry::RetryScheduled { at_ms, next_attempt_at_ms: at_ms + 10, rule: RetryRule::Backoff }
    }

    fn attempt(at_ms: u64) -> TimelineEntry {
        TimelineEntry::Attempt {
            at_ms,
            attempt: Box::new(crate::model::AttemptRecord {
                node_id: 1,
                fencing_token: 1,
                started_at_ms: at_ms,
                latency_ms: 1,
                status_code: Some(503),
                error: None,
                response_excerpt: None,
            }),
        }
    }

    #[test]
    fn durations_fall_in_the_first_bucket_that_holds_them() {
        let mut d = Durations::default();
        for ms in [0, 50, 51, 86_400_000, u64::MAX] {
            d.observe(ms);
        }
        assert_eq!(d.buckets[0], 2, "0 and 50 ms");
        assert_eq!(d.buckets[1], 1, "51 ms");
        assert_eq!(d.buckets[DURATION_BOUNDS_MS.len() - 2], 1, "a day");
        assert_eq!(d.buckets[DURATION_BOUNDS_MS.len()], 1, "past the last bound");
        assert_eq!((d.count, d.sum_ms), (5, u64::MAX), "the sum saturates");
        let mut merged = d.clone();
        merged.merge(&d);
        assert_eq!((merged.count, merged.buckets[0]), (10, 4));
    }

    #[test]
    fn a_state_is_entered_at_the_entry_that_set_it() {
        assert_eq!(entered_state_at_ms(&delivery(DeliveryState::Pending, vec![])), 1_000, "reception");
        let replayed = vec![attempt(2_000), TimelineEntry::Dead { at_ms: 2_000, reason: "x".into() }];
        let mut history = replayed.clone();
        history.push(TimelineEntry::Replayed { at_ms: 5_000 });
        let mut pending = delivery(DeliveryState::Pending, history);
        pending.cycle_started_at_ms = 5_000; // as the replay sets it
        assert_eq!(entered_state_at_ms(&pending), 5_000, "the replay");
        assert_eq!(entered_state_at_ms(&delivery(DeliveryState::Dead, replayed)), 2_000);
        let skipped =
            vec![TimelineEntry::Dead { at_ms: 2_000, reason: "x".into() }, TimelineEntry::Skipped { at_ms: 9 }];
        assert_eq!(entered_state_at_ms(&delivery(DeliveryState::Dead, skipped)), 2_000, "a skip keeps it dead");
    }

    #[test]
    fn retrying_is_entered_at_the_first_retry_of_its_run() {
        let history = vec![
            TimelineEntry::Replayed { at_ms: 1_500 },
            attempt(2_000),
            retry(2_000),
            attempt(3_000),
            retry(3_000),
            attempt(4_000),
            retry(4_000),
        ];
        assert_eq!(entered_state_at_ms(&delivery(DeliveryState::Retrying, history.clone())), 2_000);
        // Once delivered, the last entry set the state.
        let mut done = history;
        done.extend([attempt(5_000), TimelineEntry::Delivered { at_ms: 5_000 }]);
        assert_eq!(entered_state_at_ms(&delivery(DeliveryState::Delivered, done)), 5_000);
        // A run whose start was cut off began at the cut at the latest.
        let cut = vec![TimelineEntry::Truncated { at_ms: 2_500, dropped: 3 }, attempt(3_000), retry(3_000)];
        assert_eq!(entered_state_at_ms(&delivery(DeliveryState::Retrying, cut)), 3_000);
    }

    #[test]
    fn only_a_first_life_attempt_counts_as_the_first() {
        assert!(first_attempt_pending(&delivery(DeliveryState::Pending, vec![])));
        let replayed = vec![TimelineEntry::Replayed { at_ms: 5_000 }];
        assert!(!first_attempt_pending(&delivery(DeliveryState::Pending, replayed)));
        let mut sent = delivery(DeliveryState::Retrying, vec![attempt(2_000), retry(2_000)]);
        sent.cycle_attempts = 1;
        assert!(!first_attempt_pending(&sent));
        assert!(!first_attempt_pending(&delivery(DeliveryState::Dead, vec![])));
    }

    #[test]
    fn dead_reasons_fall_in_a_bounded_set_of_classes() {
        for (reason, class) in [
            ("attempts exhausted: 3 of 3 failed", DeadReason::AttemptsExhausted),
            ("max age exceeded: the next attempt would start 90 s into the cycle", DeadReason::MaxAge),
            ("endpoint answered 410 Gone; endpoint disabled", DeadReason::Gone),
            ("endpoint disabled after 410 Gone", DeadReason::Gone),
            ("endpoint disabled: every attempt failed for 1 h (since ...)", DeadReason::EndpointFailing),
            ("endpoint disabled", DeadReason::EndpointDisabled),
            ("endpoint deleted", DeadReason::EndpointDeleted),
            ("anything else", DeadReason::Other),
        ] {
            assert_eq!(DeadReason::classify(reason), class, "{reason}");
        }
        let labels: std::collections::BTreeSet<_> = DeadReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), DeadReason::ALL.len(), "distinct labels");
        assert!(DeadReason::ALL.iter().enumerate().all(|(i, r)| r.index() == i));
    }

    #[test]
    fn a_tally_is_kept_per_node_and_cleared() {
        let mut tallies = Tallies::default();
        tallies.tally(2).retries += 1;
        tallies.tally(1).retries += 2;
        tallies.tally(2).retries += 1;
        assert_eq!(tallies.of(2).map(|t| t.retries), Some(2));
        assert_eq!(tallies.of(1).map(|t| t.retries), Some(2));
        assert_eq!(tallies.of(3), None);
        tallies.clear();
        assert_eq!(tallies.of(2), None);
    }
}
