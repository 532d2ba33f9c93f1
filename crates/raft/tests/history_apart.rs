//! The state machine with its history in the state store: a snapshot
//! writes the finished records there and the state reads them back from
//! it; a reopened node, a crashed one, and a follower that installs the
//! snapshot hold the same history.

use hookraft_core::command::{NewEvent, Outcome};
use hookraft_core::ids::{DeliveryId, EndpointId, EventId, SHARD_COUNT};
use hookraft_core::model::{AttemptRecord, DeliveryState, Endpoint};
use hookraft_core::retry::Decision;
use hookraft_core::signing::Secret;
use hookraft_core::{Command, Response};
use hookraft_raft::{Backend, Entry, EntryPayload, LogId, MemDisk, SnapshotData, StateMachineStore, open, open_sled};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, RaftSnapshotBuilder};
use rand::SeedableRng;
use rand::rngs::StdRng;

const NODE: u64 = 1;

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

/// Feeds commands to a state machine as consecutive log entries.
struct Feeder {
    next: u64,
    rng: StdRng,
}

impl Feeder {
    fn new(seed: u64) -> Self {
        Self { next: 1, rng: StdRng::seed_from_u64(seed) }
    }

    async fn apply(&mut self, store: &mut StateMachineStore, command: Command) -> Response {
        let entry = Entry { log_id: log_id(self.next), payload: EntryPayload::Normal(command.into()) };
        self.next += 1;
        store.apply([entry]).await.expect("applies").remove(0)
    }

    /// Grants every shard to [`NODE`] and registers one endpoint.
    async fn endpoint(&mut self, store: &mut StateMachineStore) -> EndpointId {
        let grants = (0..SHARD_COUNT).map(|s| (s, NODE)).collect();
        self.apply(store, Command::AssignShards { now_ms: 1, grants }).await;
        let secret = Secret::from_key(vec![7; 32]).expect("a key");
        let endpoint = Endpoint::new(
            EndpointId::generate(1_000, &mut self.rng),
            "https://example.com/h".into(),
            (&secret).into(),
            1_000,
        );
        let id = endpoint.id;
        assert_eq!(self.apply(store, Command::RegisterEndpoint { endpoint: Box::new(endpoint) }).await, Response::Ok);
        id
    }

    /// Ingests `count` events and finishes each delivery: delivered, or
    /// dead for every third. Returns the deliveries.
    async fn finished(&mut self, store: &mut StateMachineStore, count: usize) -> Vec<DeliveryId> {
        let events = (0..count)
            .map(|n| NewEvent {
                id: EventId::generate(2_000 + n as u64, &mut self.rng),
                event_type: "order.paid".into(),
                payload: format!("{{\"n\":{n}}}").into(),
                idempotency_key: None,
                endpoint_ids: None,
                ordering_key: None,
                inbound: None,
            })
            .collect();
        let Response::Ingested { results } = self.apply(store, Command::IngestEvents { now_ms: 2_000, events }).await
        else {
            panic!("expected Ingested")
        };
        let deliveries: Vec<DeliveryId> = results
            .into_iter()
            .flat_map(|r| match r {
                hookraft_core::command::IngestResult::Created { deliveries, .. } => deliveries,
                other => panic!("expected Created, got {other:?}"),
            })
            .map(|(d, _)| d)
            .collect();
        let outcomes = {
            let state = store.handle();
            let state = state.read();
            deliveries
                .iter()
                .enumerate()
                .map(|(n, id)| {
                    let endpoint = state.delivery(id).expect("pending").endpoint_id;
                    let token = state.grant_for(&endpoint).token;
                    let decision =
                        if n % 3 == 2 { Decision::Dead { reason: "gone".into() } } else { Decision::Delivered };
                    Outcome {
                        delivery_id: *id,
                        shard: endpoint.shard(),
                        token,
                        attempt: AttemptRecord {
                            node_id: NODE,
                            fencing_token: token,
                            started_at_ms: 3_000,
                            latency_ms: 5,
                            status_code: Some(if n % 3 == 2 { 410 } else { 200 }),
                            error: None,
                            response_excerpt: None,
                        },
                        decision,
                        breaker: None,
                    }
                })
                .collect()
        };
        let response = self.apply(store, Command::RecordOutcomes { node_id: NODE, now_ms: 4_000, outcomes }).await;
        assert!(
            matches!(response, Response::OutcomesApplied { applied, .. } if applied as usize == count),
            "{response:?}"
        );
        deliveries
    }
}

/// What a state holds of its history, read record by record.
fn history_of(store: &StateMachineStore) -> Vec<(DeliveryId, DeliveryState, usize)> {
    let handle = store.handle();
    let state = handle.read();
    state.history().deliveries().map(|d| (d.id, d.state, d.history.len())).collect()
}

#[tokio::test]
async fn a_snapshot_moves_the_history_to_the_store_and_every_reader_sees_it_there() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (_, mut leader, handle) = open_sled(leader_dir.path(), None).expect("opens");
    let mut feed = Feeder::new(1);
    feed.endpoint(&mut leader).await;
    let deliveries = feed.finished(&mut leader, 30).await;
    let before = history_of(&leader);
    assert_eq!(before.len(), 30);
    let (held, total) = {
        let state = handle.read();
        (state.history().held_bytes(), state.history().bytes())
    };
    assert!(held == total && total > 30 * 200, "in memory until a snapshot: {held} of {total}");

    leader.get_snapshot_builder().await.build_snapshot().await.expect("builds");
    {
        let state = handle.read();
        assert_eq!(state.history().held_bytes(), 0, "the records are in the store now");
        assert_eq!(state.history().bytes(), total);
        assert_eq!(state.memory_usage().bytes, state.usage().bytes - total);
        assert_eq!(state.delivery(&deliveries[2]).expect("read from the store").state, DeliveryState::Dead);
        assert_eq!(state.dead_count(), 10);
        state.check_invariants().expect("invariants");
    }
    assert_eq!(history_of(&leader), before);
    let snapshot_bytes = leader.snapshot_bytes().load(std::sync::atomic::Ordering::Relaxed);
    assert!(snapshot_bytes > 0 && snapshot_bytes < total / 4, "the snapshot's state is {snapshot_bytes} bytes");

    // More finished events after the snapshot stay in memory until the next.
    let more = feed.finished(&mut leader, 6).await;
    assert!(handle.read().history().held_bytes() > 0);

    // A follower installs the snapshot: the whole store, streamed.
    let follower_dir = tempfile::tempdir().expect("tempdir");
    let (_, mut follower, follower_handle) = open_sled(follower_dir.path(), None).expect("opens");
    let mut snapshot = leader.get_current_snapshot().await.expect("reads").expect("a snapshot");
    assert!(matches!(*snapshot.snapshot, SnapshotData::Pending(_)), "exported only when read");
    // As openraft hands it over: written into the follower's spool, left
    // at its end and shut down.
    let mut received = follower.begin_receiving_snapshot().await.expect("a spool");
    let sent = tokio::io::copy(&mut *snapshot.snapshot, &mut *received).await.expect("receives");
    tokio::io::AsyncWriteExt::shutdown(&mut *received).await.expect("shuts down");
    assert!(sent > 0);
    assert!(matches!(*snapshot.snapshot, SnapshotData::File(_)), "spooled through a file");
    assert!(matches!(*received, SnapshotData::File(_)), "received into a file");
    follower.install_snapshot(&snapshot.meta, received).await.expect("installs");
    let spools = std::fs::read_dir(follower_dir.path()).expect("lists").flatten();
    let names: Vec<String> = spools.map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(!names.iter().any(|name| name.contains("spool")), "no spool file is left: {names:?}");
    assert_eq!(history_of(&follower), before, "the follower reads the leader's history from its own store");
    assert!(follower_handle.read().delivery(&more[0]).is_none(), "not what came after the snapshot");
    follower_handle.read().check_invariants().expect("invariants");

    // Both reopen to the same history: the leader's is the snapshot's
    // (the log after it is openraft's to apply again).
    drop((handle, follower_handle));
    drop((leader, follower));
    for dir in [&leader_dir, &follower_dir] {
        let (_, reopened, reopened_handle) = open_sled(dir.path(), None).expect("reopens");
        assert_eq!(history_of(&reopened), before);
        reopened_handle.read().check_invariants().expect("invariants");
    }
}

#[tokio::test]
async fn a_crash_keeps_the_history_of_the_last_snapshot_and_replicas_agree() {
    let disk = MemDisk::new();
    let backend = Backend::Memory(disk.clone());
    let (_, mut store, _) = open(&backend, None).expect("opens");
    let mut feed = Feeder::new(2);
    feed.endpoint(&mut store).await;
    feed.finished(&mut store, 12).await;
    store.get_snapshot_builder().await.build_snapshot().await.expect("builds");
    let at_snapshot = history_of(&store);
    feed.finished(&mut store, 5).await;
    // A snapshot that finishes many events at once, then a second one.
    feed.finished(&mut store, 40).await;
    store.get_snapshot_builder().await.build_snapshot().await.expect("builds");
    let at_second = history_of(&store);
    feed.finished(&mut store, 3).await;
    assert_eq!(at_second.len(), 57);

    disk.crash();
    let (_, reopened, handle) = open(&backend, None).expect("reopens");
    assert_eq!(history_of(&reopened), at_second, "the last snapshot's history, none after");
    handle.read().check_invariants().expect("invariants");
    assert!(at_snapshot.iter().all(|row| at_second.contains(row)));

    // A replica that applies the same log from nothing holds the same.
    let (_, mut replica, _) = open(&Backend::Memory(MemDisk::new()), None).expect("opens");
    let mut again = Feeder::new(2);
    again.endpoint(&mut replica).await;
    for count in [12, 5, 40] {
        again.finished(&mut replica, count).await;
    }
    assert_eq!(*replica.handle().read(), *handle.read(), "replicas hold the same state and history");
}

/// openraft 0.9 purges the log and commits as of a received snapshot the
/// moment its last chunk arrives, while the state machine is still
/// installing it. A crash then must leave a node that starts: its log
/// neither purged past its own snapshot nor committed past its entries.
#[tokio::test]
async fn a_crash_while_a_received_snapshot_installs_leaves_a_log_the_state_can_start_from() {
    use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};

    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (_, mut leader, _) = open_sled(leader_dir.path(), None).expect("opens");
    let mut feed = Feeder::new(4);
    feed.endpoint(&mut leader).await;
    feed.finished(&mut leader, 20).await;
    leader.get_snapshot_builder().await.build_snapshot().await.expect("builds");
    let mut snapshot = leader.get_current_snapshot().await.expect("reads").expect("a snapshot");
    let last = snapshot.meta.last_log_id.expect("a last log id");

    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (mut log, mut follower, _) = open_sled(dir.path(), None).expect("opens");
        // Its own log and commit before the snapshot arrives.
        let own = Entry { log_id: log_id(1), payload: EntryPayload::Blank };
        log.blocking_append([own]).await.expect("appends");
        log.save_committed(Some(log_id(1))).await.expect("commits");
        let mut received = follower.begin_receiving_snapshot().await.expect("a spool");
        tokio::io::copy(&mut *snapshot.snapshot, &mut *received).await.expect("receives");
        // openraft's core, before the install: commit and purge as of it.
        log.save_committed(Some(last)).await.expect("commits");
        log.purge(last).await.expect("purges");
        // The crash: the install never ran.
    }
    let (mut log, mut follower, _) = open_sled(dir.path(), None).expect("reopens");
    let (applied, _) = follower.applied_state().await.expect("applied");
    let state = log.get_log_state().await.expect("log state");
    assert_eq!(applied, None, "the state is as it was");
    assert_eq!(state.last_purged_log_id, None, "the purge waited for the install");
    assert_eq!(log.read_committed().await.expect("committed"), Some(log_id(1)), "the commit its log backs");
    assert_eq!(log.try_get_log_entries(1..2).await.expect("reads").len(), 1, "its own entry stays");

    // Installed, then an entry appended after it, then a crash before
    // any purge: the log's own entry below the snapshot would leave a
    // hole under the new one; the reopen purges up to the snapshot.
    let mut received = follower.begin_receiving_snapshot().await.expect("a spool");
    let mut again = leader.get_current_snapshot().await.expect("reads").expect("a snapshot");
    tokio::io::copy(&mut *again.snapshot, &mut *received).await.expect("receives");
    follower.install_snapshot(&again.meta, received).await.expect("installs");
    let after = log_id(last.index + 1);
    log.blocking_append([Entry { log_id: after, payload: EntryPayload::Blank }]).await.expect("appends");
    drop((log, follower));
    let (mut log, _, handle) = open_sled(dir.path(), None).expect("reopens");
    assert_eq!(handle.last_applied(), Some(last));
    let state = log.get_log_state().await.expect("log state");
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(last), Some(after)), "no hole below");
    assert!(log.try_get_log_entries(1..2).await.expect("reads").is_empty(), "the entry the snapshot replaced");

    // Not receiving, a purge goes through at once.
    log.purge(after).await.expect("purges");
    assert_eq!(log.get_log_state().await.expect("log state").last_purged_log_id, Some(after));
}
