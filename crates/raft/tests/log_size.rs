//! A snapshot by the log's size: a real single-node `openraft::Raft` whose
//! entry-count policy would not snapshot for 20,000 entries builds one once
//! the log past its last snapshot outgrows the task's threshold, and only
//! then.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hookraft_core::{Command, Response};
use hookraft_raft::log_size::{snapshot_due_bytes, snapshot_when_log_grows};
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

/// Waits until a snapshot covers everything applied so far; its index.
async fn wait_for_snapshot_covering(raft: &Raft) -> u64 {
    let written = raft.metrics().borrow().last_applied.expect("applied").index;
    let metrics = raft
        .wait(Some(DEADLINE))
        .metrics(|m| m.snapshot.is_some_and(|id| id.index + 1 >= written), "a snapshot past the threshold")
        .await
        .expect("a snapshot is built");
    metrics.snapshot.expect("a snapshot").index
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

    // Below the threshold: no snapshot. Nothing is waited for here: had one
    // been built now, the log past it would stay under the threshold below,
    // no snapshot would cover the later writes, and the wait would fail.
    while sizes.bytes_after(None) < MIN_BYTES / 2 {
        assert_eq!(write(&raft, Command::Noop).await, Response::Ok);
    }
    let half = raft.metrics().borrow().last_applied.expect("applied").index;

    // Past it: one snapshot, covering what was written.
    while sizes.bytes_after(None) < MIN_BYTES {
        assert_eq!(write(&raft, Command::Noop).await, Response::Ok);
    }
    let first = wait_for_snapshot_covering(&raft).await;
    assert!(first > half, "the first snapshot ({first}) was built past half the threshold ({half})");
    assert!(snapshot_bytes.load(std::sync::atomic::Ordering::Relaxed) > 0, "the snapshot's size is known");

    // A few more entries, far below the threshold again: no second snapshot
    // for them. As above, one built now would leave the log past it under
    // the threshold when it is reached, and the wait would fail.
    for _ in 0..3 {
        assert_eq!(write(&raft, Command::Noop).await, Response::Ok);
    }
    let few_more = raft.metrics().borrow().last_applied.expect("applied").index;
    let due = snapshot_due_bytes(MIN_BYTES, snapshot_bytes.load(std::sync::atomic::Ordering::Relaxed));
    assert!(sizes.bytes_after(Some(first)) < due);
    while sizes.bytes_after(Some(first)) < due {
        assert_eq!(write(&raft, Command::Noop).await, Response::Ok);
    }
    let second = wait_for_snapshot_covering(&raft).await;
    assert!(second > few_more, "the second snapshot ({second}) waited for the threshold, not for a few entries");

    stop_tx.send(true).expect("the task listens");
    tokio::time::timeout(DEADLINE, task).await.expect("the task ends when stopped").expect("no panic");
    raft.shutdown().await.expect("shutdown");
}
