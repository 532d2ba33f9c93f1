//! Admission control: a node refuses new events it cannot absorb, so it
//! stays standing under a load its endpoints do not take.
//!
//! Each node has two budgets, checked before an event enters the ingest
//! batcher: the deliveries not yet delivered or dead (`--max-pending`),
//! and the estimated bytes of the retained state (`--memory-budget`),
//! both read from this node's replica (`ClusterState::usage`, kept by
//! every apply) plus what requests admitted here are still committing.
//! A request whose events would take either past its budget is refused
//! whole with a 503 and `Retry-After`; nothing already accepted is
//! dropped, and delivery goes on. Once a budget was found full, it stays
//! full until its usage drains below [`RESUME_PERCENT`] of it, so ingest
//! does not flap on the edge: each delivered event would otherwise let
//! exactly one more in. An idempotent replay (every event's key already
//! known) adds nothing and is always admitted.
//!
//! The decision is the pure [`decide`]; [`Admission`] holds the budgets,
//! which budget is full, and the reservations of admitted requests that
//! are not committed yet, behind one short lock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hookraft_core::state::Usage;

/// A full budget admits again once its usage is below this share of it.
pub const RESUME_PERCENT: u64 = 90;
/// The `Retry-After` of a refusal, in seconds.
pub const RETRY_AFTER_S: u32 = 2;

/// A node's budgets; `u64::MAX` is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Deliveries not yet delivered or dead.
    pub max_pending: u64,
    /// Estimated bytes of retained events, deliveries and timelines.
    pub memory_bytes: u64,
}

impl Budgets {
    pub const UNLIMITED: Self = Self { max_pending: u64::MAX, memory_bytes: u64::MAX };
}

/// Which budget refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    Pending,
    Memory,
}

impl Budget {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Budget::Pending => "pending",
            Budget::Memory => "memory",
        }
    }
}

/// Which budgets were found full and have not drained below
/// [`RESUME_PERCENT`] since.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Full {
    pub pending: bool,
    pub memory: bool,
}

/// A refusal, with the numbers its problem states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub budget: Budget,
    /// What the state (and the requests being committed) hold.
    pub used: u64,
    /// What the refused request would add.
    pub incoming: u64,
    pub limit: u64,
    /// Below this the budget admits again.
    pub resume_below: u64,
}

impl Refusal {
    /// The problem's detail: which budget, with the numbers.
    pub fn detail(&self) -> String {
        match self.budget {
            Budget::Pending => format!(
                "the node's budget of pending deliveries is full: {} pending, this request would add {}, \
                 the budget is {} (--max-pending); ingest resumes below {} pending. Nothing accepted is \
                 dropped and delivery goes on: retry later, with the same Idempotency-Key",
                self.used, self.incoming, self.limit, self.resume_below
            ),
            Budget::Memory => format!(
                "the node's memory budget is full: retained state is about {} bytes, this request would add \
                 about {}, the budget is {} bytes (--memory-budget); ingest resumes below {} bytes. Nothing \
                 accepted is dropped and delivery goes on: retry later, with the same Idempotency-Key",
                self.used, self.incoming, self.limit, self.resume_below
            ),
        }
    }
}

/// The level below which a full budget of `limit` admits again.
pub fn resume_below(limit: u64) -> u64 {
    // `limit / 100 * RESUME_PERCENT` would lose small budgets to rounding;
    // u128 cannot overflow.
    (u128::from(limit) * u128::from(RESUME_PERCENT) / 100) as u64
}

/// One budget's verdict: `Ok` admits; the new "full" flag either way.
fn check(budget: Budget, used: u64, incoming: u64, limit: u64, full: bool) -> (Result<(), Refusal>, bool) {
    let refusal = Refusal { budget, used, incoming, limit, resume_below: resume_below(limit) };
    if incoming == 0 {
        // Adds nothing to this budget (an idempotent replay, an event no
        // endpoint takes): never refused by it, and leaves it as it was.
        return (Ok(()), full);
    }
    let full = full && used >= refusal.resume_below;
    if full || used.saturating_add(incoming) > limit {
        return (Err(refusal), true);
    }
    (Ok(()), false)
}

/// Whether a request adding `incoming` is admitted, given what the state
/// holds (`used`), the budgets and which of them were full: the verdict
/// (the pending budget is named first when both refuse) and which are
/// full now.
pub fn decide(used: Usage, incoming: Usage, budgets: Budgets, full: Full) -> (Result<(), Refusal>, Full) {
    let (pending, pending_full) =
        check(Budget::Pending, used.pending, incoming.pending, budgets.max_pending, full.pending);
    let (memory, memory_full) = check(Budget::Memory, used.bytes, incoming.bytes, budgets.memory_bytes, full.memory);
    (pending.and(memory), Full { pending: pending_full, memory: memory_full })
}

/// A node's admission control: its budgets, which are full, and what
/// admitted requests reserve until they are committed (or fail).
#[derive(Debug)]
pub struct Admission {
    pub budgets: Budgets,
    inner: Mutex<Inner>,
    refused_pending: AtomicU64,
    refused_memory: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    full: Full,
    /// Admitted, not yet committed: counted beside the state so handlers
    /// admitted at the same moment cannot all take the last room.
    reserved: Usage,
}

impl Admission {
    pub fn new(budgets: Budgets) -> Self {
        Self {
            budgets,
            inner: Mutex::new(Inner::default()),
            refused_pending: AtomicU64::new(0),
            refused_memory: AtomicU64::new(0),
        }
    }

    /// Admits a request adding `incoming` to a state holding `used`, and
    /// reserves it until the returned guard is dropped (once its events
    /// are committed and applied, so counted in `used`, or failed).
    pub fn admit(&self, used: Usage, incoming: Usage) -> Result<Reservation<'_>, Refusal> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let used = Usage {
            pending: used.pending.saturating_add(inner.reserved.pending),
            bytes: used.bytes.saturating_add(inner.reserved.bytes),
        };
        let (verdict, full) = decide(used, incoming, self.budgets, inner.full);
        inner.full = full;
        match verdict {
            Ok(()) => {
                inner.reserved.pending = inner.reserved.pending.saturating_add(incoming.pending);
                inner.reserved.bytes = inner.reserved.bytes.saturating_add(incoming.bytes);
                Ok(Reservation { admission: self, incoming })
            }
            Err(refusal) => {
                drop(inner);
                let counter = match refusal.budget {
                    Budget::Pending => &self.refused_pending,
                    Budget::Memory => &self.refused_memory,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                Err(refusal)
            }
        }
    }

    /// Requests refused by `budget` since the node started.
    pub fn refused(&self, budget: Budget) -> u64 {
        match budget {
            Budget::Pending => self.refused_pending.load(Ordering::Relaxed),
            Budget::Memory => self.refused_memory.load(Ordering::Relaxed),
        }
    }

    fn release(&self, incoming: Usage) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.reserved.pending = inner.reserved.pending.saturating_sub(incoming.pending);
        inner.reserved.bytes = inner.reserved.bytes.saturating_sub(incoming.bytes);
    }
}

/// An admitted request's room, held until it is committed or failed.
#[must_use = "the reservation ends when it is dropped"]
pub struct Reservation<'a> {
    admission: &'a Admission,
    incoming: Usage,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.admission.release(self.incoming);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGETS: Budgets = Budgets { max_pending: 100, memory_bytes: 10_000 };

    fn usage(pending: u64, bytes: u64) -> Usage {
        Usage { pending, bytes }
    }

    #[test]
    fn admits_up_to_the_budget_and_refuses_past_it() {
        let free = Full::default();
        assert_eq!(decide(usage(99, 0), usage(1, 10), BUDGETS, free), (Ok(()), free));
        let (verdict, full) = decide(usage(100, 0), usage(1, 10), BUDGETS, free);
        let refusal = verdict.unwrap_err();
        assert_eq!(refusal, Refusal { budget: Budget::Pending, used: 100, incoming: 1, limit: 100, resume_below: 90 });
        assert_eq!(full, Full { pending: true, memory: false });
    }

    #[test]
    fn a_batch_that_would_cross_the_budget_is_refused_whole() {
        let (verdict, _) = decide(usage(95, 0), usage(10, 10), BUDGETS, Full::default());
        assert_eq!(verdict.unwrap_err().incoming, 10);
        // One that fits exactly is admitted.
        assert!(decide(usage(90, 0), usage(10, 10), BUDGETS, Full::default()).0.is_ok());
    }

    #[test]
    fn a_full_budget_admits_again_only_below_ninety_percent() {
        let full = Full { pending: true, memory: false };
        // Room for one more, but not yet drained below 90: still refused.
        for used in [99, 95, 90] {
            let (verdict, still) = decide(usage(used, 0), usage(1, 10), BUDGETS, full);
            assert_eq!(verdict.unwrap_err().budget, Budget::Pending, "{used} pending");
            assert_eq!(still, full);
        }
        let (verdict, now) = decide(usage(89, 0), usage(1, 10), BUDGETS, full);
        assert_eq!(verdict, Ok(()));
        assert_eq!(now, Full::default(), "drained: the budget is no longer full");
        // Below 90 but the request itself would cross the budget: refused, full again.
        let (verdict, now) = decide(usage(50, 0), usage(60, 10), BUDGETS, full);
        assert!(verdict.is_err());
        assert!(now.pending);
    }

    #[test]
    fn the_memory_budget_refuses_by_its_own_numbers() {
        let (verdict, full) = decide(usage(1, 9_500), usage(1, 600), BUDGETS, Full::default());
        let refusal = verdict.unwrap_err();
        assert_eq!(refusal.budget, Budget::Memory);
        assert_eq!((refusal.used, refusal.incoming, refusal.limit, refusal.resume_below), (9_500, 600, 10_000, 9_000));
        assert_eq!(full, Full { pending: false, memory: true });
        assert!(refusal.detail().contains("memory budget"), "{}", refusal.detail());
        assert!(refusal.detail().contains("10000 bytes"), "{}", refusal.detail());
        // Both full: the pending budget is named, and both stay full.
        let (verdict, full) = decide(usage(100, 9_500), usage(1, 600), BUDGETS, Full::default());
        assert_eq!(verdict.unwrap_err().budget, Budget::Pending);
        assert_eq!(full, Full { pending: true, memory: true });
    }

    #[test]
    fn a_request_that_adds_nothing_is_admitted_even_when_full() {
        let full = Full { pending: true, memory: true };
        assert_eq!(decide(usage(1_000, 1_000_000), usage(0, 0), BUDGETS, full), (Ok(()), full));
        // An event no endpoint takes adds no pending work, only memory.
        let (verdict, _) = decide(usage(1_000, 0), usage(0, 10), BUDGETS, full);
        assert_eq!(verdict, Ok(()));
    }

    #[test]
    fn unlimited_budgets_never_refuse() {
        let huge = usage(u64::MAX - 1, u64::MAX - 1);
        assert!(decide(huge, usage(1, 1), Budgets::UNLIMITED, Full::default()).0.is_ok());
        assert_eq!(resume_below(u64::MAX), u64::MAX / 100 * 90 + (u64::MAX % 100) * 90 / 100);
        assert_eq!(resume_below(10), 9);
        assert_eq!(resume_below(1), 0);
    }

    #[test]
    fn reservations_count_until_dropped_and_refusals_are_counted_per_budget() {
        let admission = Admission::new(BUDGETS);
        let first = admission.admit(usage(50, 0), usage(40, 100)).expect("fits");
        // The state has not applied the first request yet: its 40 count.
        let refusal = admission.admit(usage(50, 0), usage(20, 100)).err().expect("reserved room is taken");
        assert_eq!(refusal.used, 90);
        assert_eq!(admission.refused(Budget::Pending), 1);
        drop(first);
        // Still full (hysteresis) until usage drains below 90.
        assert!(admission.admit(usage(89, 0), usage(20, 100)).is_err());
        assert!(admission.admit(usage(50, 0), usage(20, 100)).is_ok());
        assert!(admission.admit(usage(0, 9_999), usage(1, 100)).is_err());
        assert_eq!((admission.refused(Budget::Pending), admission.refused(Budget::Memory)), (2, 1));
    }
}
