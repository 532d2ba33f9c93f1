//! [`SnapshotHold`]: what keeps a node's log from running ahead of a
//! snapshot it is still installing (design note 63).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Holds the log back while a snapshot is being received: no purge point
/// and no commit index past the index the node's durable snapshot covers
/// is persisted until the received one is installed.
///
/// openraft 0.9 purges the log a received snapshot covers, and takes its
/// last index as committed, as soon as the last chunk arrives, in its core,
/// while the state machine installs the snapshot on its own task. A crash
/// before the install is durable would leave a state as of the older
/// snapshot beside a log that lacks what comes after it, or a commit index
/// no stored entry backs: openraft then refuses to start (its purge point
/// past its commit) or to re-apply the log. With the hold, such a crash
/// leaves the older snapshot with the log it had; the leader sends the
/// snapshot again. A purge skipped is done by the next one, which covers
/// it. The bound is the durable snapshot as it is now, so a stream the
/// leader gave up on (the hold not released until the next install)
/// keeps purges where they would be anyway and only stops persisting the
/// commit index, which a restart learns from the leader again.
#[derive(Clone, Debug, Default)]
pub struct SnapshotHold(Arc<HoldState>);

#[derive(Debug, Default)]
struct HoldState {
    receiving: AtomicBool,
    /// The durable snapshot's last index plus one; 0 without one.
    durable_end: AtomicU64,
}

impl SnapshotHold {
    /// A snapshot's first chunk arrived.
    pub fn hold(&self) {
        self.0.receiving.store(true, Ordering::SeqCst);
    }

    /// The received snapshot is installed and durable.
    pub fn release(&self) {
        self.0.receiving.store(false, Ordering::SeqCst);
    }

    /// The node's durable snapshot now covers the log up to `index`.
    pub fn durable(&self, index: Option<u64>) {
        self.0.durable_end.store(index.map_or(0, |index| index.saturating_add(1)), Ordering::SeqCst);
    }

    /// Whether a purge point or commit index at `index` may be persisted.
    pub fn allows(&self, index: u64) -> bool {
        !self.0.receiving.load(Ordering::SeqCst) || index < self.0.durable_end.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_bounds_by_the_durable_snapshot_as_it_is_now_and_only_while_receiving() {
        let hold = SnapshotHold::default();
        assert!(hold.allows(1_000), "not receiving: anything");
        hold.hold();
        assert!(!hold.allows(0), "no durable snapshot: nothing");
        hold.durable(Some(100));
        assert!(hold.allows(100) && !hold.allows(101), "up to the durable snapshot");
        // A stream the leader gave up on: the node's own snapshots go on.
        hold.durable(Some(300));
        assert!(hold.allows(300) && !hold.allows(301));
        hold.release();
        assert!(hold.allows(10_000));
    }
}
