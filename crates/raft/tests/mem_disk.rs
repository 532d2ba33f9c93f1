//! Crash semantics of the stores on a [`MemDisk`]: what the stores flushed
//! (appended entries, the vote, a snapshot) survives [`MemDisk::crash`];
//! what they wrote without a flush (the committed id) is gone; stores opened
//! before the crash are dead.

use hookraft_core::{Command, Response};
use hookraft_raft::{Backend, Entry, EntryPayload, LogId, MemDisk, Vote, open};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, RaftLogReader, RaftSnapshotBuilder};

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn entry(index: u64) -> Entry {
    let command = Command::AssignShards { now_ms: 1, grants: vec![(index as u16, 1)] };
    Entry { log_id: log_id(index), payload: EntryPayload::Normal(command.into()) }
}

#[tokio::test]
async fn crash_keeps_flushed_entries_and_vote_and_drops_the_unflushed_committed_id() {
    let disk = MemDisk::new();
    let backend = Backend::Memory(disk.clone());
    let (mut store, _, _) = open(&backend, None).expect("open");
    // `blocking_append` returns once the store's flush callback has fired.
    store.blocking_append((1..=5).map(entry)).await.expect("append");
    store.save_vote(&Vote::new(1, 1)).await.expect("save vote");
    assert_eq!(disk.unflushed_writes(), 0, "append and vote flush");
    store.save_committed(Some(log_id(4))).await.expect("save committed");
    assert_eq!(disk.unflushed_writes(), 1, "the committed id is written without a flush");
    assert_eq!(store.read_committed().await.expect("read"), Some(log_id(4)), "but it is readable at once");

    disk.crash();
    let err = store.read_vote().await.expect_err("a store opened before the crash is dead");
    assert!(err.to_string().contains("used after the disk crashed"), "{err}");

    let (mut store, _, _) = open(&backend, None).expect("reopen");
    let state = store.get_log_state().await.expect("log state");
    assert_eq!((state.last_purged_log_id, state.last_log_id), (None, Some(log_id(5))));
    let entries = store.try_get_log_entries(0..100).await.expect("read");
    assert_eq!(entries.iter().map(|e| e.log_id.index).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    assert_eq!(store.read_vote().await.expect("read vote"), Some(Vote::new(1, 1)));
    assert_eq!(store.read_committed().await.expect("read committed"), None, "the unflushed write is gone");
}

#[tokio::test]
async fn crash_keeps_a_built_snapshot_but_not_the_applied_state_after_it() {
    let disk = MemDisk::new();
    let backend = Backend::Memory(disk.clone());
    let (_, mut state_machine, handle) = open(&backend, None).expect("open");
    let responses = state_machine.apply((1..=3).map(entry)).await.expect("apply");
    assert!(responses.iter().all(|r| matches!(r, Response::ShardsAssigned { .. })), "{responses:?}");
    let snapshot = state_machine.get_snapshot_builder().await.build_snapshot().await.expect("build");
    state_machine.apply([entry(4)]).await.expect("apply after the snapshot");
    let at_snapshot_token = 3;
    assert_eq!(handle.read().last_token, 4);

    disk.crash();
    let (_, mut state_machine, handle) = open(&backend, None).expect("reopen");
    assert_eq!(handle.last_applied(), Some(log_id(3)), "the state restarts from the snapshot");
    assert_eq!(handle.read().last_token, at_snapshot_token);
    let current = state_machine.get_current_snapshot().await.expect("read").expect("the snapshot survived");
    assert_eq!(current.meta, snapshot.meta);
}

#[test]
fn reopening_without_a_crash_sees_unflushed_writes_too() {
    let disk = MemDisk::new();
    let backend = Backend::Memory(disk.clone());
    drop(open(&backend, None).expect("open"));
    assert_eq!(disk.unflushed_writes(), 1, "the new store's format version is not flushed yet");
    drop(open(&backend, None).expect("reopen without a crash"));
    disk.crash();
    drop(open(&backend, None).expect("reopen after a crash: a new store again"));
}
