//! The state machine's own tests: snapshot ids and a store that writes slowly.

use super::*;
use crate::state_store::StateStore;

#[test]
fn snapshot_id_names_term_index_and_counter() {
    let id = LogId::new(openraft::CommittedLeaderId::new(3, 1), 42);
    assert_eq!(snapshot_id(Some(id), 7), "3-42-7");
    assert_eq!(snapshot_id(None, 1), "none-1");
}

/// A disk whose state store, once a commit starts writing the state,
/// holds its writer until released, and says it blocks: a large
/// snapshot on a real disk.
struct SlowSnapshotDisk {
    memory: crate::MemDisk,
    writing: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    release: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
}

struct SlowStore {
    inner: Arc<dyn StateStore>,
    writing: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    release: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
}

impl Disk for SlowSnapshotDisk {
    fn open_tree(&self, name: &str) -> Result<Arc<dyn crate::KvTree>, Error> {
        self.memory.open_tree(name)
    }

    fn open_state_store(&self) -> Result<Arc<dyn StateStore>, Error> {
        Ok(Arc::new(SlowStore {
            inner: self.memory.open_state_store()?,
            writing: std::sync::Mutex::new(self.writing.lock().expect("lock").take()),
            release: self.release.clone(),
        }))
    }

    fn describe(&self) -> String {
        "a slow disk".into()
    }
}

impl StateStore for SlowStore {
    fn history(&self) -> Result<Arc<dyn hookraft_core::state::history_store::HistoryStore>, Error> {
        self.inner.history()
    }

    fn load(&self) -> Result<Option<crate::StoredState>, Error> {
        self.inner.load()
    }

    fn commit(
        &self,
        flush: &hookraft_core::state::history_store::Flush,
        meta: &[u8],
        encode: crate::state_store::EncodeState<'_>,
    ) -> Result<u64, Error> {
        if let Some(writing) = self.writing.lock().expect("lock").take() {
            writing.send(()).expect("the test listens");
            self.release.lock().expect("lock").recv().expect("the test releases the writer");
        }
        self.inner.commit(flush, meta, encode)
    }

    fn pin_export(&self) -> Result<Option<crate::state_store::PinnedExport>, Error> {
        self.inner.pin_export()
    }

    fn import(&self, input: &mut dyn std::io::Read) -> Result<(), Error> {
        self.inner.import(input)
    }

    fn spool(&self) -> Result<crate::Spool, Error> {
        self.inner.spool()
    }

    fn blocks(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_snapshot_is_written_applies_readers_and_the_runtime_go_on() {
    let (writing_tx, writing) = std::sync::mpsc::channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let disk = SlowSnapshotDisk {
        memory: crate::MemDisk::new(),
        writing: std::sync::Mutex::new(Some(writing_tx)),
        release: Arc::new(std::sync::Mutex::new(release_rx)),
    };
    let (store, handle) = StateMachineStore::open(&disk, None).expect("opens");
    let mut builder = store.clone();
    let building = tokio::spawn(async move { builder.build_snapshot().await });
    tokio::task::spawn_blocking(move || writing.recv_timeout(std::time::Duration::from_secs(10)))
        .await
        .expect("joins")
        .expect("the snapshot starts its commit");

    let log_id = LogId::new(openraft::CommittedLeaderId::new(1, 1), 1);
    let command = Command::AssignShards { now_ms: 1, grants: vec![(3, 9)] };
    let entry = Entry { log_id, payload: EntryPayload::Normal(command.into()) };
    let mut applier = store.clone();
    let applied = tokio::time::timeout(std::time::Duration::from_secs(5), applier.apply(vec![entry]))
        .await
        .expect("the apply does not wait for the snapshot's commit")
        .expect("applies");
    assert_eq!(applied.len(), 1);
    assert_eq!(handle.read().shards[3].owner, Some(9));

    let reader = handle.clone();
    let (read_tx, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || read_tx.send(reader.read().last_applied()));
    assert_eq!(
        read.recv_timeout(std::time::Duration::from_secs(5)),
        Ok(Some(log_id)),
        "a reader sees the apply at once"
    );
    let other_task = tokio::time::timeout(std::time::Duration::from_secs(5), tokio::spawn(async { 7 }));
    assert_eq!(other_task.await.expect("a worker is free").expect("joins"), 7, "the runtime's workers run other tasks");

    release.send(()).expect("the writer waits");
    let snapshot = building.await.expect("joins").expect("the snapshot is built");
    assert_eq!(snapshot.meta.last_log_id, None, "the snapshot holds the state from before the apply");
    let (meta, payload) = store.snapshots.load().expect("reads").expect("a snapshot is stored");
    let (last_applied, _, state) = decode_payload(&meta, &payload).expect("the snapshot decodes");
    assert_eq!(last_applied, None);
    assert_eq!(state.shards[3].owner, None, "the apply made during the encoding is not in the snapshot");
    assert_eq!(handle.read().shards[3].owner, Some(9), "nor did the encoding undo it");
}

#[tokio::test]
async fn an_apply_that_meets_a_failing_history_store_is_a_storage_error_not_a_panic() {
    let disk = crate::MemDisk::new();
    let (mut store, handle) = StateMachineStore::open(&disk, None).expect("opens");
    disk.fail_history_reads(true);
    let entry = |index, command: Command| Entry {
        log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(command.into()),
    };
    // An apply that reads no history goes through.
    let grant = Command::AssignShards { now_ms: 1, grants: vec![(3, 9)] };
    store.apply(vec![entry(1, grant)]).await.expect("applies");
    // A replay of a delivery the state does not hold looks in the history.
    let unknown = hookraft_core::ids::DeliveryId::from_bytes([7; 16]);
    let replay = Command::Replay { now_ms: 2, target: hookraft_core::command::ReplayTarget::Delivery(unknown) };
    let error = store.apply(vec![entry(2, replay)]).await.expect_err("the store's failure stops the apply");
    assert!(error.to_string().contains("history store fails its reads"), "{error}");
    assert!(handle.read().history().fault().is_some_and(|why| why.contains("fails its reads")));
}
