//! A snapshot by the log's size and by the history held in memory: a real
//! single-node `openraft::Raft` whose entry-count policy would not snapshot
//! for 20,000 entries builds one once the log past its last snapshot, or
//! the finished history in memory, outgrows the task's threshold, and only
//! then.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hookraft_core::command::NewEvent;
use hookraft_core::ids::EventId;
use hookraft_core::{Command, Response};
use hookraft_raft::log_size::{SnapshotMinimums, snapshot_due_bytes, snapshot_when_log_grows};
use hookraft_raft::{Backend, MemDisk, Raft, SingleNodeNetwork, open, raft_config};
use openraft::{BasicNode, ServerState};
use rand::SeedableRng;
use tokio::sync::watch;

const DEADLINE: Duration = Duration::from_secs(30);
const NODE: u64 = 1;
/// The test's threshold: a few dozen small entries.
const MIN_BYTES: u64 = 2_048;
/// A minimum never reached here, to watch the other alone.
const NEVER: u64 = u64::MAX / 8;

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
    let state_machine_history = state_machine.history_watch();
    let raft =
        Raft::new(NODE, Arc::new(raft_config()), SingleNodeNetwork, log_store, state_machine).await.expect("start");
    raft.initialize(BTreeMap::from([(NODE, BasicNode::default())])).await.expect("initialize");
    raft.wait(Some(DEADLINE)).state(ServerState::Leader, "node 1 leads").await.expect("leads");
    let (stop_tx, stop) = watch::channel(false);
    let min = SnapshotMinimums { log_bytes: MIN_BYTES, history_bytes: NEVER };
    let history = state_machine_history;
    let task =
        tokio::spawn(snapshot_when_log_grows(raft.clone(), sizes.clone(), history, snapshot_bytes.clone(), min, stop));

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
    let due = snapshot_due_bytes(min.log_bytes, snapshot_bytes.load(std::sync::atomic::Ordering::Relaxed));
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

/// `count` events no endpoint subscribes to: each finished as it is
/// ingested, so each goes straight to the history.
fn unsubscribed(count: usize, rng: &mut rand::rngs::StdRng) -> Command {
    let events = (0..count)
        .map(|n| NewEvent {
            id: EventId::generate(1_000 + n as u64, rng),
            event_type: "nobody.listens".into(),
            payload: format!("{{\"padding\":\"{}\"}}", "x".repeat(200)).into(),
            idempotency_key: None,
            endpoint_ids: None,
            ordering_key: None,
            inbound: None,
        })
        .collect();
    Command::IngestEvents { now_ms: 1_000, events }
}

#[tokio::test]
async fn a_snapshot_is_built_once_the_history_in_memory_outgrows_the_threshold_and_moves_it_out() {
    let disk = MemDisk::new();
    let (log_store, state_machine, state) = open(&Backend::Memory(disk), None).expect("open");
    let (sizes, history) = (log_store.size_watch(), state_machine.history_watch());
    let snapshot_bytes = state_machine.snapshot_bytes();
    let raft =
        Raft::new(NODE, Arc::new(raft_config()), SingleNodeNetwork, log_store, state_machine).await.expect("start");
    raft.initialize(BTreeMap::from([(NODE, BasicNode::default())])).await.expect("initialize");
    raft.wait(Some(DEADLINE)).state(ServerState::Leader, "node 1 leads").await.expect("leads");
    let (stop_tx, stop) = watch::channel(false);
    // The log's threshold is never reached: only the history can ask.
    let min = SnapshotMinimums { log_bytes: NEVER, history_bytes: 16 << 10 };
    let task =
        tokio::spawn(snapshot_when_log_grows(raft.clone(), sizes, history.clone(), snapshot_bytes.clone(), min, stop));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);

    // Below the threshold: kept in memory, no snapshot.
    let held = || state.read().history().held_bytes();
    while held() < min.history_bytes / 2 {
        assert!(matches!(write(&raft, unsubscribed(10, &mut rng)).await, Response::Ingested { .. }));
    }
    assert_eq!(history.held_bytes(), held(), "the watch is the state's figure");
    let half = raft.metrics().borrow().last_applied.expect("applied").index;

    // Past it: a snapshot covering what was written, and the records moved
    // to the store. (Written until the history as a whole passes it: the
    // snapshot may take what is held to nothing before this loop looks.)
    while state.read().history().bytes() < min.history_bytes {
        assert!(matches!(write(&raft, unsubscribed(10, &mut rng)).await, Response::Ingested { .. }));
    }
    let kept = state.read().history().bytes();
    let first = wait_for_snapshot_covering(&raft).await;
    assert!(first > half, "the snapshot ({first}) waited for the threshold, not half of it ({half})");
    assert_eq!(held(), 0, "the snapshot moved every finished record out of memory");
    assert_eq!(state.read().history().bytes(), kept, "and kept them all");

    stop_tx.send(true).expect("the task listens");
    tokio::time::timeout(DEADLINE, task).await.expect("the task ends when stopped").expect("no panic");
    raft.shutdown().await.expect("shutdown");
}
