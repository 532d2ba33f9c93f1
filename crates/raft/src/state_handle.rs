//! [`StateHandle`]: the node's read-only view of the replicated state, and
//! the lock the state lives behind, shared with the state machine (which
//! alone writes it). Reads never nest: see [`assert_no_read_held`].

use std::cell::RefCell;
use std::ops::Deref;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use crate::{ClusterState, LogId, StoredMembership};

/// The state and how far the log has been applied to it, always changed
/// together under one lock.
#[derive(Default)]
pub(crate) struct Applied {
    pub(crate) state: ClusterState,
    /// The log id of the last entry applied to `state`.
    pub(crate) last_applied: Option<LogId>,
    /// The last membership config applied; openraft asks for it on start.
    pub(crate) last_membership: StoredMembership,
}

/// Read-only access to the replicated state; cheap to clone, shared with the
/// state machine.
#[derive(Clone)]
pub struct StateHandle {
    pub(crate) applied: Arc<RwLock<Applied>>,
}

/// A read guard on the state; derefs to [`ClusterState`]. Applying waits
/// while one is held, so hold it briefly and never across an `.await`, and
/// never read again while holding one (see [`StateHandle::read`]).
pub struct StateRef<'a> {
    guard: RwLockReadGuard<'a, Applied>,
    _held: ReadHeld,
}

thread_local! {
    /// The state locks this thread holds a read guard on right now, by
    /// address: a handful at most (one per node of a simulation).
    static READS_HELD: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Records in [`READS_HELD`] that this thread reads `lock` while it lives.
/// A guard is not `Send`, so it is released on the thread that took it.
struct ReadHeld {
    lock: usize,
}

impl ReadHeld {
    fn take(lock: usize) -> Self {
        READS_HELD.with(|held| held.borrow_mut().push(lock));
        ReadHeld { lock }
    }
}

impl Drop for ReadHeld {
    fn drop(&mut self) {
        READS_HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(at) = held.iter().rposition(|&l| l == self.lock) {
                held.swap_remove(at);
            }
        });
    }
}

pub(crate) fn lock_address(lock: &Arc<RwLock<Applied>>) -> usize {
    Arc::as_ptr(lock) as usize
}

/// Checks that this thread holds no read guard on `lock` before it takes it.
///
/// The lock prefers writers: once apply waits for the write lock, every new
/// read waits behind it. A thread that already reads the state and asks for
/// another read then waits for apply, which waits for that thread, and the
/// node stops (found by the chaos run: an idempotent replay read the state
/// inside a read). Debug builds, and so every test and simulation, fail at
/// once; a release build logs the bug and goes on.
pub(crate) fn assert_no_read_held(lock: usize, taking: &str) {
    let held = READS_HELD.with(|held| held.borrow().iter().filter(|&&l| l == lock).count());
    if held > 0 {
        debug_assert!(false, "{taking} the replicated state while this thread holds {held} read guard(s) on it");
        tracing::error!(held, "{taking} the replicated state while holding a read guard on it: a deadlock waits here");
    }
}

impl Deref for StateRef<'_> {
    type Target = ClusterState;

    fn deref(&self) -> &ClusterState {
        &self.guard.state
    }
}

impl StateRef<'_> {
    /// The last applied log id, consistent with the state this guard shows.
    pub fn last_applied(&self) -> Option<LogId> {
        self.guard.last_applied
    }
}

impl StateHandle {
    /// The state as of the last applied entry.
    ///
    /// A panic inside an apply or an observer poisons the lock; reads then
    /// still return the state (which openraft has stopped changing, since a
    /// failed apply shuts the node's Raft down).
    ///
    /// Never call it while this thread holds another [`StateRef`]: that
    /// deadlocks as soon as apply is waiting for the lock, and asserts.
    pub fn read(&self) -> StateRef<'_> {
        let lock = lock_address(&self.applied);
        assert_no_read_held(lock, "reading");
        let guard = self.applied.read().unwrap_or_else(PoisonError::into_inner);
        StateRef { guard, _held: ReadHeld::take(lock) }
    }

    /// The log id of the last applied entry.
    pub fn last_applied(&self) -> Option<LogId> {
        self.read().last_applied()
    }

    /// The last applied membership config.
    pub fn last_membership(&self) -> StoredMembership {
        self.read().guard.last_membership.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StateMachineStore;

    fn store() -> (StateMachineStore, StateHandle) {
        StateMachineStore::open(&crate::MemDisk::new(), None).expect("opens")
    }

    #[test]
    fn reads_one_after_another_on_one_thread_are_fine() {
        let (_store, handle) = store();
        let first = handle.read().last_applied();
        assert_eq!(handle.read().last_applied(), first);
        assert!(READS_HELD.with(|held| held.borrow().is_empty()), "every guard released");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "while this thread holds 1 read guard(s) on it")]
    fn a_read_taken_while_holding_a_read_asserts_instead_of_deadlocking_later() {
        let (_store, handle) = store();
        let _outer = handle.read();
        let _inner = handle.read();
    }

    #[test]
    fn holding_one_nodes_state_while_reading_another_nodes_is_fine() {
        let ((_a, one), (_b, other)) = (store(), store());
        let _one = one.read();
        let _other = other.read();
    }

    #[test]
    fn guards_on_other_threads_do_not_count_as_held_here() {
        let (_store, handle) = store();
        let _here = handle.read();
        let there = handle.clone();
        std::thread::spawn(move || {
            let _guard = there.read();
        })
        .join()
        .expect("a read on another thread does not assert");
    }
}
