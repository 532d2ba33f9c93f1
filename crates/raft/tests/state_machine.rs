//! [`StateMachineStore`] without a running Raft: responses, membership,
//! and a snapshot that moves from one store to another and survives a
//! reopen there.

use std::sync::{Arc, Mutex};

use hookraft_core::{ClusterState, Command, Response};
use hookraft_raft::{ApplyObserver, Entry, EntryPayload, LogId, open_sled};
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Membership, RaftSnapshotBuilder};

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

fn normal(index: u64, command: Command) -> Entry {
    Entry { log_id: log_id(index), payload: EntryPayload::Normal(command.into()) }
}

/// Remembers the last token of every state it is shown.
#[derive(Default)]
struct TokenLog {
    applied: Mutex<Vec<u64>>,
    installed: Mutex<Vec<u64>>,
}

impl ApplyObserver for TokenLog {
    fn applied(&self, state: &ClusterState, _command: &Command, _response: &Response) {
        self.applied.lock().expect("lock").push(state.last_token);
    }

    fn snapshot_installed(&self, state: &ClusterState) {
        self.installed.lock().expect("lock").push(state.last_token);
    }
}

#[tokio::test]
async fn snapshot_installed_on_another_store_survives_its_reopen() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let follower_dir = tempfile::tempdir().expect("tempdir");
    let leader_log = Arc::new(TokenLog::default());
    let (_, mut leader, leader_state) = open_sled(leader_dir.path(), Some(leader_log.clone())).expect("open");

    let membership = Membership::new(vec![[1u64].into()], None);
    let responses = leader
        .apply([
            Entry { log_id: log_id(1), payload: EntryPayload::Blank },
            Entry { log_id: log_id(2), payload: EntryPayload::Membership(membership.clone()) },
            normal(3, Command::AssignShards { now_ms: 5, grants: vec![(0, 1), (1, 1)] }),
            normal(4, Command::Noop),
        ])
        .await
        .expect("apply");
    assert_eq!(responses[..2], [Response::Ok, Response::Ok]);
    assert_eq!(responses[2], Response::ShardsAssigned { tokens: vec![(0, 1), (1, 2)] });
    assert_eq!(*leader_log.applied.lock().expect("lock"), vec![2, 2], "blank and membership are not observed");
    let (applied, members) = leader.applied_state().await.expect("applied state");
    assert_eq!((applied, members.log_id()), (Some(log_id(4)), &Some(log_id(2))));

    let built = leader.get_snapshot_builder().await.build_snapshot().await.expect("build");
    assert_eq!(built.meta.snapshot_id, "1-4-1");
    // The built snapshot went straight to its file; followers are sent the file.
    let mut snapshot = leader.get_current_snapshot().await.expect("read").expect("a current snapshot");
    assert_eq!(snapshot.meta, built.meta);

    let follower_log = Arc::new(TokenLog::default());
    {
        let (_, mut follower, follower_state) =
            open_sled(follower_dir.path(), Some(follower_log.clone())).expect("open");
        let mut received = follower.begin_receiving_snapshot().await.expect("a spool");
        tokio::io::copy(&mut *snapshot.snapshot, &mut *received).await.expect("receive");
        follower.install_snapshot(&snapshot.meta, received).await.expect("install");
        assert_eq!(*follower_state.read(), *leader_state.read());
        assert_eq!(*follower_log.installed.lock().expect("lock"), vec![2]);
    }

    let (_, mut follower, follower_state) = open_sled(follower_dir.path(), None).expect("reopen");
    assert_eq!(*follower_state.read(), *leader_state.read());
    assert_eq!(follower_state.last_applied(), Some(log_id(4)));
    assert_eq!(follower_state.last_membership().membership(), &membership);
    let current = follower.get_current_snapshot().await.expect("read").expect("a snapshot is stored");
    assert_eq!(current.meta, snapshot.meta);
}
