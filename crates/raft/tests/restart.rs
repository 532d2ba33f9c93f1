//! A real single-node `openraft::Raft` over the stores, on both backends:
//! commands are applied and observed, a snapshot is built, and after a
//! restart (on sled) or a crash (of a [`MemDisk`]) the state comes back from
//! the snapshot plus a replay of the log after it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookraft_core::{ClusterState, Command, Response};
use hookraft_raft::{
    ApplyObserver, Backend, Error, LogStore, MemDisk, Raft, SingleNodeNetwork, StateHandle, StateMachineStore, open,
    raft_config, seed_thread_rng,
};
use openraft::{BasicNode, ServerState};

/// How long any awaited condition may take on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(30);
/// Pause between attempts to open a store that is still locked.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
const NODE: u64 = 1;

/// Counts applied commands and checks each sees the state right after it.
#[derive(Default)]
struct RecordingObserver {
    commands: AtomicU64,
    /// (state.last_token seen by the observer, token in the response), per grant.
    tokens: Mutex<Vec<(u64, u64)>>,
}

impl ApplyObserver for RecordingObserver {
    fn applied(&self, state: &ClusterState, _command: &Command, response: &Response) {
        self.commands.fetch_add(1, Ordering::SeqCst);
        if let Response::ShardsAssigned { tokens } = response {
            let mut seen = self.tokens.lock().expect("observer lock");
            seen.extend(tokens.iter().map(|&(_, token)| (state.last_token, token)));
        }
    }
}

/// Opens the store, waiting while a previous `Raft` still holds it: after
/// `shutdown` returns, openraft's state machine task drops its store (and
/// with it sled's file lock) a moment later. A memory disk has no lock.
async fn open_when_released(
    backend: &Backend,
    observer: Arc<RecordingObserver>,
) -> (LogStore, StateMachineStore, StateHandle) {
    let attempts = async {
        loop {
            let observer: Arc<dyn ApplyObserver> = observer.clone();
            match open(backend, Some(observer)) {
                Err(Error::Open { .. }) => tokio::time::sleep(RETRY_PAUSE).await,
                opened => return opened.expect("open the store"),
            }
        }
    };
    tokio::time::timeout(DEADLINE, attempts).await.expect("the previous raft releases the store")
}

async fn launch(log_store: LogStore, state_machine: StateMachineStore) -> Raft {
    Raft::new(NODE, Arc::new(raft_config()), SingleNodeNetwork, log_store, state_machine).await.expect("start raft")
}

async fn wait_for_leadership(raft: &Raft) {
    raft.wait(Some(DEADLINE)).state(ServerState::Leader, "node 1 leads").await.expect("becomes leader");
}

async fn write(raft: &Raft, command: Command) -> Response {
    raft.client_write(command.into()).await.expect("write commits").data
}

async fn assign_shard(raft: &Raft, shard: u16) -> u64 {
    match write(raft, Command::AssignShards { now_ms: 1, grants: vec![(shard, NODE)] }).await {
        Response::ShardsAssigned { tokens } => tokens[0].1,
        other => panic!("unexpected response {other:?}"),
    }
}

/// Writes, snapshots, writes more, stops the node — and, on a memory disk,
/// crashes it — then restarts it on the same disk and checks the state.
async fn state_after_restart_equals_state_before_from_snapshot_plus_log(backend: &Backend) {
    let observer = Arc::new(RecordingObserver::default());
    let (log_store, state_machine, handle) = open_when_released(backend, observer.clone()).await;
    let raft = launch(log_store, state_machine).await;
    raft.initialize(BTreeMap::from([(NODE, BasicNode::default())])).await.expect("initialize");
    wait_for_leadership(&raft).await;

    for expected_token in 1..=4 {
        assert_eq!(write(&raft, Command::Noop).await, Response::Ok);
        assert_eq!(assign_shard(&raft, 0).await, expected_token);
    }
    assert_eq!(handle.read().shards[0].token, 4);
    assert_eq!(handle.read().last_token, 4);
    assert_eq!(observer.commands.load(Ordering::SeqCst), 8);
    let seen = observer.tokens.lock().expect("observer lock").clone();
    assert_eq!(seen, vec![(1, 1), (2, 2), (3, 3), (4, 4)], "the observer sees the state right after each command");

    let snapshot_at = handle.last_applied().expect("entries were applied");
    raft.trigger().snapshot().await.expect("trigger a snapshot");
    raft.wait(Some(DEADLINE))
        .metrics(|m| m.snapshot.map(|s| s.index) >= Some(snapshot_at.index), "snapshot built")
        .await
        .expect("snapshot is built");

    for _ in 0..3 {
        assign_shard(&raft, 1).await;
        write(&raft, Command::Noop).await;
    }
    let applied_before = handle.last_applied().expect("entries were applied");
    let before = {
        let state = handle.read();
        assert_eq!((state.shards[1].token, state.last_token), (7, 7));
        // Its text, not a clone: a state keeps its history store open (and
        // locked) while it lives, which the reopening below needs closed.
        format!("{:?}", *state)
    };
    drop(handle);
    raft.shutdown().await.expect("shutdown");
    drop(raft);
    if let Backend::Memory(disk) = backend {
        // Every acknowledged write was flushed; the committed id may not be.
        disk.crash();
    }

    let observer = Arc::new(RecordingObserver::default());
    let (log_store, state_machine, handle) = open_when_released(backend, observer.clone()).await;
    {
        let restored = handle.read();
        assert_eq!(restored.last_applied().map(|id| id.index), Some(snapshot_at.index), "restored from the snapshot");
        assert_eq!(restored.last_token, 4, "entries after the snapshot are not applied yet");
    }
    // openraft re-applies the committed log after the snapshot on start.
    let raft = launch(log_store, state_machine).await;
    wait_for_leadership(&raft).await;
    raft.wait(Some(DEADLINE))
        .applied_index_at_least(Some(applied_before.index), "log after the snapshot replayed")
        .await
        .expect("log is replayed");

    assert_eq!(format!("{:?}", *handle.read()), before);
    assert_eq!(observer.commands.load(Ordering::SeqCst), 6, "replayed commands are observed");
    assert_eq!(assign_shard(&raft, 2).await, 8, "tokens keep increasing after the restart");
    raft.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_state_after_restart_equals_state_before_from_snapshot_plus_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    state_after_restart_equals_state_before_from_snapshot_plus_log(&Backend::sled(dir.path())).await;
}

/// As a simulation runs it: one thread, a seeded generator, no sled.
#[tokio::test(flavor = "current_thread")]
async fn memory_state_after_crash_equals_state_before_from_snapshot_plus_log() {
    seed_thread_rng(7);
    let disk = MemDisk::new();
    state_after_restart_equals_state_before_from_snapshot_plus_log(&Backend::Memory(disk.clone())).await;
    assert_eq!(disk.crashes(), 1);
}
