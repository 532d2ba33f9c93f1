//! [`StateMachineStore`]: applies committed entries to the in-memory
//! [`ClusterState`], and builds, installs and serves snapshots of it.
//!
//! The state lives in memory behind one `RwLock`, shared with every
//! [`StateHandle`] — the read-only view the rest of the node uses — but
//! for its finished history, whose records the state reads from the
//! disk's [`crate::StateStore`] once a snapshot wrote them there. Applying
//! does not write to disk: the state is made durable by snapshots (see
//! the private `snapshot` module) plus the log after them, which openraft
//! re-applies on start (it reads the committed id from the log store to
//! know how far).
//!
//! This module must not decide anything about the domain: a command's
//! effect is [`ClusterState::apply`]'s alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftSnapshotBuilder};

use crate::disk::Disk;
use crate::snapshot::{SnapshotStore, decode_payload, stored_is_newer};
use crate::state_handle::{Applied, StateHandle, assert_no_read_held, lock_address};
use crate::{
    ClusterState, Command, Entry, Error, LogId, Response, Snapshot, SnapshotData, SnapshotMeta, StorageError,
    StoredMembership, TypeConfig,
};

/// The buffer between a spool file and an export or an import.
const SPOOL_BUFFER_BYTES: usize = 1 << 20;

/// Records retired by one apply that are dropped where they are, without
/// a hop to a blocking thread (a `Prune` of 512 events retires 1,024).
const RETIRED_INLINE_MAX: usize = 64;

/// Told about every command the moment it is applied, on every replica.
///
/// Both methods run on openraft's state machine task **while the state's
/// write lock is held**, so `state` is exactly the state right after that
/// command, and readers ([`StateHandle::read`]) wait until the method
/// returns. They must therefore not block and not take long: hand work off
/// (e.g. `try_send` on a bounded channel) instead of doing it. They must not
/// call [`StateHandle::read`] either (it would deadlock): use `state`.
pub trait ApplyObserver: Send + Sync + 'static {
    /// `command` was applied to give `state` and answered `response`.
    fn applied(&self, state: &ClusterState, command: &Command, response: &Response);

    /// A snapshot from the leader replaced the whole state: no `applied`
    /// calls will come for the commands it covers.
    fn snapshot_installed(&self, state: &ClusterState) {
        let _ = state;
    }
}

/// The id of a snapshot of the state as of `last_applied`, the `counter`-th
/// built by this process: `"{term}-{index}-{counter}"`, or
/// `"none-{counter}"` for a snapshot of the empty log. Two snapshots with
/// one id hold the same bytes: the state at a log id is deterministic.
pub fn snapshot_id(last_applied: Option<LogId>, counter: u64) -> String {
    match last_applied {
        Some(id) => format!("{}-{}-{counter}", id.leader_id.term, id.index),
        None => format!("none-{counter}"),
    }
}

/// openraft's state machine over [`ClusterState`]; also its own snapshot
/// builder. Cheap to clone: clones share the state and the snapshot store.
#[derive(Clone)]
pub struct StateMachineStore {
    applied: Arc<RwLock<Applied>>,
    snapshots: SnapshotStore,
    /// Called after each applied command; see [`ApplyObserver`].
    observer: Option<Arc<dyn ApplyObserver>>,
    /// Snapshots built by this process so far; makes snapshot ids unique.
    snapshots_built: Arc<AtomicU64>,
    /// Bytes of the current snapshot (0 before the first); read by
    /// [`crate::log_size::snapshot_when_log_grows`].
    snapshot_bytes: Arc<AtomicU64>,
    /// The history's bytes in memory after each apply; read by the same task.
    history_watch: crate::log_size::HistoryWatch,
    /// Held by a snapshot build while it clones the state (a moment: the
    /// clone shares the state's chunks; it used to be held for the whole
    /// encoding, a second or more for a million pending deliveries), and
    /// taken by every apply and install before the state's write lock. An apply waiting
    /// here gives its worker thread back to the runtime; waiting at the
    /// write lock would hold the thread and, since the lock prefers
    /// writers, make every reader of the node (HTTP handlers, endpoint
    /// actors) wait behind it until the snapshot is written.
    snapshot_gate: Arc<tokio::sync::Mutex<()>>,
    /// Shared with the log store: held from the first chunk of a received
    /// snapshot until it is installed (see [`crate::SnapshotHold`]).
    hold: crate::SnapshotHold,
}

impl StateMachineStore {
    /// Opens the state machine over `disk`, starting from the persisted
    /// snapshot if there is one, else from an empty state, and gives the
    /// state its history store.
    pub fn open(disk: &dyn Disk, observer: Option<Arc<dyn ApplyObserver>>) -> Result<(Self, StateHandle), Error> {
        let (snapshots, found) = SnapshotStore::open(disk)?;
        let (mut applied, snapshot_bytes) = match found {
            Some((meta, data)) => {
                let (last_applied, last_membership, state) = decode_payload(&meta, &data)?;
                tracing::info!(snapshot = %meta.snapshot_id, "state machine restored from snapshot");
                (Applied { state, last_applied, last_membership }, data.len() as u64)
            }
            None => (Applied::default(), 0),
        };
        applied.state.attach_history(snapshots.history()?).map_err(Error::Corrupt)?;
        let snapshot_bytes = Arc::new(AtomicU64::new(snapshot_bytes));
        let applied = Arc::new(RwLock::new(applied));
        let store = Self {
            applied: applied.clone(),
            snapshots,
            observer,
            snapshots_built: Arc::new(AtomicU64::new(0)),
            snapshot_bytes,
            history_watch: crate::log_size::HistoryWatch::default(),
            snapshot_gate: Arc::default(),
            hold: crate::SnapshotHold::default(),
        };
        Ok((store, StateHandle { applied }))
    }

    /// Shares `hold` with the log store (see [`crate::SnapshotHold`]).
    pub fn with_hold(mut self, hold: crate::SnapshotHold) -> Self {
        hold.durable(self.snapshots.stored_index_now());
        self.hold = hold;
        self
    }

    /// The current snapshot's size in bytes, kept up to date.
    pub fn snapshot_bytes(&self) -> Arc<AtomicU64> {
        self.snapshot_bytes.clone()
    }

    /// The finished history held in memory, as applies leave it, for
    /// [`crate::log_size::snapshot_when_log_grows`].
    pub fn history_watch(&self) -> crate::log_size::HistoryWatch {
        self.history_watch.clone()
    }

    /// A read-only handle on this state machine's state.
    pub fn handle(&self) -> StateHandle {
        StateHandle { applied: self.applied.clone() }
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, Applied>, Error> {
        self.applied.read().map_err(|_| poisoned())
    }

    fn write(&self) -> Result<RwLockWriteGuard<'_, Applied>, Error> {
        assert_no_read_held(lock_address(&self.applied), "applying to");
        self.applied.write().map_err(|_| poisoned())
    }

    /// Applies one entry under the write lock and calls the observer; what
    /// the apply took out of the state is dropped after the lock is let go,
    /// on a blocking thread when there is much of it.
    fn apply_entry(&self, entry: Entry) -> Result<Response, Error> {
        let mut guard = self.write()?;
        let index = entry.log_id.index;
        let response = Self::apply_locked(&mut guard, entry, self.observer.as_deref());
        // The apply read the history short of what it holds: its result
        // cannot be trusted, and no later apply either. Raft stops here on
        // this node (a storage error is fatal to it); the others go on.
        if let Some(why) = guard.state.history().fault() {
            tracing::error!(index, error = %why, "the history store failed during an apply; this node stops taking part in the cluster");
            return Err(Error::Corrupt(format!("the history store failed while entry {index} was applied: {why}")));
        }
        let retired = guard.state.take_retired();
        let history_held = guard.state.history().held_bytes();
        drop(guard);
        self.history_watch.applied(history_held);
        if retired.len() > RETIRED_INLINE_MAX
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            drop(runtime.spawn_blocking(move || drop(retired)));
        }
        Ok(response)
    }

    fn apply_locked(applied: &mut Applied, entry: Entry, observer: Option<&dyn ApplyObserver>) -> Response {
        assert!(
            applied.last_applied.map(|id| id.index) < Some(entry.log_id.index),
            "entry {} applied after {:?}: openraft applies in log order",
            entry.log_id,
            applied.last_applied
        );
        applied.last_applied = Some(entry.log_id);
        match entry.payload {
            EntryPayload::Blank => Response::Ok,
            EntryPayload::Normal(command) => {
                let response = applied.state.apply(&command);
                if let Some(observer) = observer {
                    observer.applied(&applied.state, &command, &response);
                }
                response
            }
            EntryPayload::Membership(membership) => {
                applied.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                Response::Ok
            }
        }
    }
}

fn poisoned() -> Error {
    Error::Corrupt("the state lock is poisoned: an apply or an observer panicked".into())
}

fn state_error(verb: ErrorVerb) -> impl FnOnce(Error) -> StorageError {
    move |e| e.storage(ErrorSubject::StateMachine, verb)
}

fn snapshot_error(meta: &SnapshotMeta, verb: ErrorVerb) -> impl FnOnce(Error) -> StorageError + '_ {
    move |e| e.storage(ErrorSubject::Snapshot(Some(meta.signature())), verb)
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    /// Seals the history's changes since the last snapshot and clones the
    /// state under its write lock, then commits both to the state store
    /// (the changed records, and the state encoded with its history only
    /// counted) durably, before returning; then the state reads those
    /// records from the store. The clone shares the state's chunks (see
    /// `hookraft_core::dense`), so it takes a moment whatever the state's
    /// size, and applies wait only for that moment: an apply during the
    /// encoding copies the one chunk it changes. The encoding runs on a
    /// background thread (for a store on disk). The returned snapshot
    /// carries no bytes: openraft 0.9 keeps only its metadata, and serves
    /// followers from [`RaftStateMachine::get_current_snapshot`].
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let started = tokio::time::Instant::now();
        let mut save = self.snapshots.begin_save().await;
        let gate = self.snapshot_gate.clone().lock_owned().await;
        let waited = started.elapsed();
        let stored = save.stored_index();
        let counter = self.snapshots_built.fetch_add(1, Ordering::Relaxed) + 1;
        let (meta, state, flush, priority) = {
            let mut applied = self.write().map_err(state_error(ErrorVerb::Read))?;
            let meta = SnapshotMeta {
                last_log_id: applied.last_applied,
                last_membership: applied.last_membership.clone(),
                snapshot_id: snapshot_id(applied.last_applied, counter),
            };
            if stored_is_newer(stored, &meta.last_log_id) {
                drop(applied);
                tracing::debug!(dropped = %meta, "a newer snapshot is already stored");
                return Ok(Snapshot { meta, snapshot: Box::new(SnapshotData::Memory(Default::default())) });
            }
            // A history this large in memory means snapshots fell behind
            // what finishes: this one runs at the caller's priority, unpaced.
            let priority = if applied.state.history().held_bytes() >= crate::log_size::SNAPSHOT_CATCH_UP_BYTES {
                crate::background::Priority::Callers
            } else {
                crate::background::Priority::Low
            };
            let flush = applied.state.seal_history();
            (meta, applied.state.clone(), flush, priority)
        };
        drop(gate);
        let cloned = started.elapsed();
        let records = flush.events.len() + flush.deliveries.len();
        let snapshots = self.snapshots.clone();
        let encoding = meta.clone();
        let (bytes, rested) = self
            .snapshots
            .in_background(priority, move |mut pace| {
                let committed = snapshots.commit(&flush, &encoding, &state, &mut pace);
                // Frees, on this thread, the chunks applies replaced meanwhile.
                drop(state);
                Ok((committed, pace.rested()))
            })
            .await
            .map_err(state_error(ErrorVerb::Read))?;
        let bytes = bytes.map_err(snapshot_error(&meta, ErrorVerb::Write))?;
        let history = self.snapshots.history().map_err(snapshot_error(&meta, ErrorVerb::Read))?;
        {
            let _gate = self.snapshot_gate.lock().await;
            let mut applied = self.write().map_err(state_error(ErrorVerb::Write))?;
            applied.state.history_flushed(history);
        }
        save.stored(&meta);
        self.hold.durable(meta.last_log_id.map(|id| id.index));
        self.snapshot_bytes.store(bytes, Ordering::Relaxed);
        // The size first and the snapshot by its id alone: the whole
        // metadata (membership, node addresses) made a line so long that
        // a viewer cut at a fixed width showed the size's first digits only.
        tracing::info!(
            bytes,
            records,
            catching_up = priority == crate::background::Priority::Callers,
            snapshot = %meta.snapshot_id,
            gate_wait_ms = waited.as_millis() as u64,
            applies_held_ms = (cloned - waited).as_millis() as u64,
            rested_ms = rested.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "snapshot built"
        );
        Ok(Snapshot { meta, snapshot: Box::new(SnapshotData::Memory(Default::default())) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let applied = self.read().map_err(state_error(ErrorVerb::Read))?;
        Ok((applied.last_applied, applied.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Not while a snapshot reads the state: see `snapshot_gate`.
        let _gate = self.snapshot_gate.lock().await;
        // One write lock per entry: readers never wait for a whole batch.
        entries
            .into_iter()
            .map(|entry| self.apply_entry(entry))
            .collect::<Result<_, _>>()
            .map_err(state_error(ErrorVerb::Write))
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    /// A spool file (a buffer in memory) for openraft to write the chunks
    /// it receives into.
    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        // Before openraft can purge or commit as of the incoming snapshot.
        self.hold.hold();
        let snapshots = self.snapshots.clone();
        let spool = self
            .snapshots
            .off_runtime(move || snapshots.spool())
            .await
            .map_err(|e| e.storage(ErrorSubject::Snapshot(None), ErrorVerb::Write))?;
        Ok(Box::new(spool.into_data()))
    }

    /// Replaces the state store by the snapshot's stream, read from its
    /// spool, decodes and checks the state it holds, then replaces the
    /// state with it.
    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Box<SnapshotData>) -> Result<(), StorageError> {
        let started = tokio::time::Instant::now();
        let mut save = self.snapshots.begin_save().await;
        if save.holds_newer_than(&meta.last_log_id) {
            // Only a snapshot built concurrently from a later applied state
            // can be newer, and openraft installs only past what was applied.
            tracing::warn!(snapshot = %meta, "installing a snapshot older than the stored one");
        }
        let mut spool = snapshot.into_spool().await.map_err(snapshot_error(meta, ErrorVerb::Write))?;
        // Importing and decoding take a while for a large store.
        let snapshots = self.snapshots.clone();
        let checked = meta.clone();
        let installed = self
            .snapshots
            .off_runtime(move || {
                // Whole, from its start: openraft leaves a received
                // snapshot at its end.
                let bytes = spool.rewind_len()?;
                snapshots.import(&mut std::io::BufReader::with_capacity(SPOOL_BUFFER_BYTES, spool))?;
                let (stored_meta, payload) =
                    snapshots.load()?.ok_or_else(|| Error::Corrupt("the imported snapshot holds no state".into()))?;
                let (last_applied, last_membership, mut state) = decode_payload(&checked, &payload)?;
                if stored_meta.last_log_id != checked.last_log_id {
                    return Err(Error::Corrupt(format!(
                        "the snapshot sent as {checked} holds one as of {:?}",
                        stored_meta.last_log_id
                    )));
                }
                state.attach_history(snapshots.history()?).map_err(Error::Corrupt)?;
                Ok((Applied { state, last_applied, last_membership }, payload.len(), bytes))
            })
            .await
            .map_err(snapshot_error(meta, ErrorVerb::Read))?;
        let (installed, state_bytes, bytes) = installed;
        save.stored(meta);
        self.hold.durable(meta.last_log_id.map(|id| id.index));
        self.hold.release();
        self.snapshot_bytes.store(state_bytes as u64, Ordering::Relaxed);
        let replaced = {
            let _gate = self.snapshot_gate.lock().await;
            let mut applied = self.write().map_err(state_error(ErrorVerb::Write))?;
            let replaced = std::mem::replace(&mut *applied, installed);
            if let Some(observer) = &self.observer {
                observer.snapshot_installed(&applied.state);
            }
            replaced
        };
        // Freeing a large state takes a while too: not under the lock.
        let _ = self
            .snapshots
            .off_runtime(move || {
                drop(replaced);
                Ok(())
            })
            .await;
        tracing::info!(
            bytes,
            snapshot = %meta.snapshot_id,
            total_ms = started.elapsed().as_millis() as u64,
            "snapshot installed"
        );
        Ok(())
    }

    /// The state store's last commit, pinned, to be exported into a spool
    /// of its own (a file for a store on disk, written on a blocking
    /// thread) when openraft first reads it, a chunk at a time, to send it
    /// to a follower. openraft also asks at every start, for the metadata
    /// alone: then nothing is exported.
    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let snapshots = self.snapshots.clone();
        let read_error = |e: Error| e.storage(ErrorSubject::Snapshot(None), ErrorVerb::Read);
        let pinned = self.snapshots.off_runtime(move || snapshots.pin_export()).await.map_err(read_error)?;
        let Some((meta, pinned)) = pinned else { return Ok(None) };
        let snapshots = self.snapshots.clone();
        let export = move || {
            let mut out = std::io::BufWriter::with_capacity(SPOOL_BUFFER_BYTES, snapshots.spool()?);
            pinned.write_to(&mut out)?;
            let mut spool = out.into_inner().map_err(|e| Error::Stream { what: "write", source: e.into_error() })?;
            spool.rewind_len()?;
            Ok(spool)
        };
        let data = if self.snapshots.blocks() {
            SnapshotData::exported_on_read(export)
        } else {
            export().map_err(read_error)?.into_data()
        };
        Ok(Some(Snapshot { meta, snapshot: Box::new(data) }))
    }
}

#[cfg(test)]
mod tests;
