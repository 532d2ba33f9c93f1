//! A snapshot by the log's size: a real single-node `openraft::Raft` whose
//! entry-count policy would not snapshot for 20,000 entries builds one once
//! the log past its last snapshot outgrows the task's threshold, and only
//! then.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hookraft_core::{Command, Response};
use hookraft_raft::log_size::snapshot_when_log_grows;
use hookraft_raft::{Backend, MemDisk, Raft, SingleNodeNetwork, open, raft_config};
use openraft::{BasicNode, ServerState};
use tokio::sync::watch;

const DEADLINE: Duration = Duration::from_secs(30);
const NODE: u64 = 1;
/// The test's threshold: a few dozen small entries.
const MIN_BYTES: u64 = 2_048;

async fn write(raft: &Raft, command: Command) -> Response {
    raft.client_write(command.into()).await.expect("write commits").data
}

fn snapshot_index(raft: &Raft) -> Option<u64> {
    raft.metrics().borrow().snapshot.map(|id| id.index)
}

#[tokio::test]
async fn a_snapshot_is_built_once_the_log_past_the_last_one_outgrows_the_threshold() {
    let disk = MemDisk::new();
    let (log_store, state_machine, _state) = open(&Backend::Memory(disk), None).expect("open");
    let sizes = log_store.size_watch();
    let snapshot_bytes = state_machine.snapshot_bytes();
    let raft =
        Raft::new(NODE, Arc::new(raft_config()), SingleNodeNetwork, log_store, state_machine).await.expect("start");
    raft.initialize(BTreeMap::from([(NODE, BasicNode::default())])).await.expect("initialize");
    raft.wait(Some(DEADLINE)).state(ServerState::Leader, "node 1 leads").await.expect("leads");
    let (stop_tx, stop) = watch::channel(false);
    let task =
        tokio::spawn(snapshot_when_log_grows(raft.clone(), sizes.clone(), snapshot_bytes.clone(), MIN_BYTES, stop));

    // Below the threshold: no snapshot.
    while sizes.bytes_after(None) < MIN_BYTES / 2 {
        assert_eq!(write(&raft, Command::Noop).await, Response::Ok);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(snapshot_index(&raft), None, "half the threshold builds no snapshot");

    // Past it: one snapshot, covering what was written.
    while sizes.bytes_after(None) < MIN_BYTES {
        assert_eq!(write(&raft, Command::Noop).await, Response::Ok);
    }
    let written = raft.metrics().borrow().last_applied.expect("applied").index;
    raft.wait(Some(DEADLINE))
        .metrics(|m| m.snapshot.is_some_and(|id| id.index + 1 >= written), "a snapshot past the threshold")
        .await
        .expect("a snapshot is built");
    let first = snapshot_index(&raft);
    assert!(snapshot_bytes.load(std::sync::atomic::Ordering::Relaxed) > 0, "the snapshot's size is known");

    // A few more entries, far below the threshold again: no second snapshot.
    for _ in 0..3 {
        assert_eq!(write(&raft, Command::Noop).await, Response::Ok);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(snapshot_index(&raft), first, "the log past the snapshot is small again");
    assert!(sizes.bytes_after(first) < MIN_BYTES);

    stop_tx.send(true).expect("the task listens");
    tokio::time::timeout(DEADLINE, task).await.expect("the task ends when stopped").expect("no panic");
    raft.shutdown().await.expect("shutdown");
}
