//! What the receiver fleet checks and measures of ordered deliveries, from
//! each request's `webhook-ordering-key`, `webhook-sequence` and
//! `webhook-attempt` headers. Pure: the fleet passes the time of each
//! arrival in.
//!
//! - **Order.** For one (endpoint, key), an arrival of sequence `s + 1`
//!   (any attempt) before sequence `s` was answered 2xx is *out of order*.
//!   The node's sequences are gap-free from 1, so checking each arrival
//!   against the sequence just before it checks the whole key.
//! - **Wait behind the key** ([`wait_behind_key`]): for each sequence `s`,
//!   from when the fleet answered sequence `s - 1` of its key 2xx (or from
//!   when the event was posted, if that was later, or `s` is 1) to when
//!   the first attempt of `s` (`webhook-attempt: 1`) arrived at the fleet.
//!   It is how long the event waited, once its key let it go, for the node
//!   to settle the previous delivery and send it: the price of the key's
//!   order on a delivery that was ready. Time the event spent queued while
//!   `s - 1` was still being attempted or retried is not in it. A wait that
//!   starts at the previous delivery (it came after the post) is *held*:
//!   the event did queue behind its key, and its wait is the hand-over
//!   from one head to the next.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// One request to an ordered endpoint, as the fleet saw it.
#[derive(Debug, Clone, Copy)]
pub struct Arrival<'a> {
    /// The fleet's endpoint index.
    pub endpoint: u32,
    pub key: &'a str,
    pub sequence: u64,
    /// `webhook-attempt`, when the request carried a readable one.
    pub attempt: Option<u32>,
    /// When its event was posted (the payload's send time), since the origin.
    pub posted: Option<Duration>,
    /// When it arrived, since the origin.
    pub at: Duration,
    /// Whether the fleet answers it 2xx.
    pub delivered: bool,
}

/// A delivery's wait behind its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub waited: Duration,
    /// It counts from the previous delivery, which came after the post:
    /// the event queued behind its key.
    pub held: bool,
}

/// The wait of sequence `s` behind its key: from `previous_delivered` (when
/// `s - 1` was answered 2xx; `None` for the first of a key, or one whose
/// previous was not delivered) or `posted`, whichever is later, to
/// `first_attempt`. `None` when neither start is known; zero when the
/// attempt came first (a clock step, or out of order).
pub fn wait_behind_key(
    previous_delivered: Option<Duration>,
    posted: Option<Duration>,
    first_attempt: Duration,
) -> Option<Wait> {
    let from = previous_delivered.max(posted)?;
    let held = previous_delivered.is_some_and(|previous| posted.is_none_or(|posted| previous > posted));
    Some(Wait { waited: first_attempt.saturating_sub(from), held })
}

/// One (endpoint, key)'s record.
#[derive(Debug, Default)]
struct KeyRecord {
    /// When each delivered sequence was answered 2xx.
    delivered_at: HashMap<u64, Duration>,
    /// Sequences whose first attempt was seen (its wait taken).
    first_attempted: HashSet<u64>,
}

/// Every ordered (endpoint, key) the fleet saw: the out-of-order count and
/// the waits behind keys.
#[derive(Debug, Default)]
pub struct OrderLedger {
    keys: HashMap<u32, HashMap<Box<str>, KeyRecord>>,
    out_of_order: u64,
    /// Each first attempt's wait behind its key, in microseconds, and
    /// whether it was held.
    waits_us: Vec<(u64, bool)>,
}

impl OrderLedger {
    /// Room for `expected` deliveries' waits.
    pub fn with_capacity(expected: usize) -> Self {
        Self { waits_us: Vec::with_capacity(expected), ..Self::default() }
    }

    /// Records one request; returns whether it came in order.
    pub fn arrive(&mut self, arrival: Arrival<'_>) -> bool {
        let keys = self.keys.entry(arrival.endpoint).or_default();
        let record = match keys.get_mut(arrival.key) {
            Some(record) => record,
            None => keys.entry(Box::from(arrival.key)).or_default(),
        };
        let previous = arrival.sequence.checked_sub(1).filter(|&p| p > 0);
        let previous_delivered = previous.and_then(|p| record.delivered_at.get(&p).copied());
        let in_order = previous.is_none() || previous_delivered.is_some();
        if !in_order {
            self.out_of_order += 1;
        }
        if arrival.attempt == Some(1)
            && record.first_attempted.insert(arrival.sequence)
            && let Some(wait) = wait_behind_key(previous_delivered, arrival.posted, arrival.at)
        {
            self.waits_us.push((crate::report::micros(wait.waited), wait.held));
        }
        if arrival.delivered {
            record.delivered_at.entry(arrival.sequence).or_insert(arrival.at);
        }
        in_order
    }

    /// Arrivals of a sequence before the one just before it was delivered.
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// The waits behind keys, sorted, in microseconds: all of them, and
    /// the held ones.
    pub fn waits_us(&self) -> (Vec<u64>, Vec<u64>) {
        let mut all: Vec<u64> = self.waits_us.iter().map(|&(us, _)| us).collect();
        let mut held: Vec<u64> = self.waits_us.iter().filter(|&&(_, held)| held).map(|&(us, _)| us).collect();
        all.sort_unstable();
        held.sort_unstable();
        (all, held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_wait_counts_from_the_previous_delivery_or_the_post_whichever_is_later() {
        let wait = |ms_waited, held| Some(Wait { waited: ms(ms_waited), held });
        // Queued behind its key: from the previous one's 2xx.
        assert_eq!(wait_behind_key(Some(ms(50)), Some(ms(10)), ms(53)), wait(3, true));
        // Posted after its key was free: from its own post.
        assert_eq!(wait_behind_key(Some(ms(5)), Some(ms(10)), ms(14)), wait(4, false));
        assert_eq!(wait_behind_key(Some(ms(10)), Some(ms(10)), ms(14)), wait(4, false), "free as it was posted");
        // The first of its key.
        assert_eq!(wait_behind_key(None, Some(ms(10)), ms(12)), wait(2, false));
        assert_eq!(wait_behind_key(Some(ms(7)), None, ms(9)), wait(2, true));
        assert_eq!(wait_behind_key(None, None, ms(9)), None);
        assert_eq!(wait_behind_key(Some(ms(9)), None, ms(8)), wait(0, true), "never negative");
    }

    fn arrival(key: &str, sequence: u64, attempt: u32, at: u64, delivered: bool) -> Arrival<'_> {
        Arrival { endpoint: 0, key, sequence, attempt: Some(attempt), posted: Some(ms(0)), at: ms(at), delivered }
    }

    #[test]
    fn waits_are_taken_once_per_sequence_at_its_first_attempt() {
        let mut ledger = OrderLedger::default();
        assert!(ledger.arrive(arrival("a", 1, 1, 10, false)), "a failed first attempt");
        assert!(ledger.arrive(arrival("a", 1, 2, 40, true)), "its retry, delivered");
        assert!(ledger.arrive(arrival("a", 2, 1, 45, true)));
        assert!(ledger.arrive(arrival("a", 2, 1, 60, true)), "a second first attempt is a duplicate, not a wait");
        assert!(ledger.arrive(arrival("b", 1, 1, 7, true)), "keys are independent");
        // 1: 10 from the post; 2: 5 from sequence 1's delivery at 40 (not from its failed first attempt at 10).
        assert_eq!(ledger.waits_us(), (vec![5_000, 7_000, 10_000], vec![5_000]));
        assert_eq!(ledger.out_of_order(), 0);
    }

    #[test]
    fn a_sequence_before_its_previous_was_delivered_is_out_of_order() {
        let mut ledger = OrderLedger::default();
        assert!(ledger.arrive(arrival("k", 1, 1, 10, false)), "attempted, refused");
        assert!(!ledger.arrive(arrival("k", 2, 1, 11, true)), "sent while 1 was unsettled");
        assert!(ledger.arrive(arrival("k", 1, 2, 30, true)));
        assert!(ledger.arrive(arrival("k", 2, 2, 31, true)), "a re-send after 1 was delivered");
        assert!(!ledger.arrive(arrival("k", 4, 1, 32, true)), "3 never delivered");
        assert_eq!(ledger.out_of_order(), 2);
        // The same key and sequences at another endpoint: a queue of its own.
        let other = Arrival { endpoint: 1, ..arrival("k", 2, 1, 40, true) };
        assert!(!ledger.arrive(other), "endpoint 1 never had its 1 delivered");
        assert!(ledger.arrive(Arrival { endpoint: 1, ..arrival("k", 1, 1, 41, true) }));
        assert_eq!(ledger.out_of_order(), 3);
    }
}
