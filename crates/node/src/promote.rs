//! Promoting an added node to a voter once it has caught up, in the
//! background of the leader that added it.
//!
//! `POST /v1/cluster/nodes` adds the node as a learner and answers at
//! once: a node joining a cluster with a long history first receives a
//! snapshot of all of it (ten gigabytes took minutes), and no admin call
//! should wait that long. The leader then watches the learner's
//! replication and makes it a voter once it is within openraft's
//! `replication_lag_threshold` of the leader's log, as openraft's own
//! blocking `add_learner` would wait for. `GET /v1/cluster` shows the
//! learner (`voter: false`) with how far behind it is until then.
//!
//! A promotion ends when the node is a voter, when it left the membership
//! (`DELETE /v1/cluster/nodes/{id}` of a learner cancels an add), or when
//! this node stops leading: the learner then stays a learner, and posting
//! the add again to the new leader resumes it (adding a learner again
//! changes nothing).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hookraft_core::ids::NodeId;
use hookraft_raft::{Raft, RaftMetrics};

/// The pause before trying a promotion again after a membership change
/// that could not start (another change still in progress).
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// What the leader's metrics say of the promotion of a learner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Still catching up (or its replication not yet reported).
    Wait,
    /// Within `lag` entries of the leader's log: make it a voter.
    Promote,
    /// Nothing left to do here, and why.
    End(&'static str),
}

/// The promotion of learner `id` as of `metrics`, caught up when its
/// replicated log is within `lag` entries of the leader's last one.
pub fn step(metrics: &RaftMetrics, id: NodeId, lag: u64) -> Step {
    if metrics.running_state.is_err() {
        return Step::End("raft stopped");
    }
    let membership = metrics.membership_config.membership();
    if membership.get_node(&id).is_none() {
        return Step::End("no longer a member");
    }
    if membership.voter_ids().any(|voter| voter == id) {
        return Step::End("a voter");
    }
    let Some(replication) = &metrics.replication else {
        return Step::End("this node no longer leads");
    };
    match entries_behind(metrics.last_log_index, replication.get(&id).copied().flatten().map(|log| log.index)) {
        Some(behind) if behind <= lag => Step::Promote,
        _ => Step::Wait,
    }
}

/// How many entries a follower whose log matches the leader's up to
/// `matched` is behind a leader whose log ends at `last`; `None` before
/// anything matched.
pub fn entries_behind(last: Option<u64>, matched: Option<u64>) -> Option<u64> {
    matched.map(|matched| last.unwrap_or(0).saturating_sub(matched))
}

/// The learners this leader is promoting: one task each.
#[derive(Debug, Default, Clone)]
pub struct Promotions {
    running: Arc<Mutex<BTreeSet<NodeId>>>,
}

impl Promotions {
    /// Starts promoting learner `id` unless a promotion of it runs already.
    pub fn start(&self, raft: Raft, id: NodeId) {
        if !self.running.lock().unwrap_or_else(PoisonError::into_inner).insert(id) {
            return;
        }
        let running = self.running.clone();
        tokio::spawn(async move {
            let outcome = promote(&raft, id).await;
            running.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
            tracing::info!(node = id, outcome, "promotion of the added node ended");
        });
    }
}

/// Waits for learner `id` to catch up, then makes it a voter: what
/// happened, for the log.
async fn promote(raft: &Raft, id: NodeId) -> &'static str {
    let lag = raft.config().replication_lag_threshold;
    loop {
        let waited = raft.wait(None).metrics(|m| step(m, id, lag) != Step::Wait, "an added node to catch up").await;
        let Ok(metrics) = waited else {
            return "raft stopped";
        };
        match step(&metrics, id, lag) {
            Step::Wait => continue,
            Step::End(why) => return why,
            Step::Promote => {}
        }
        let mut voters: BTreeSet<NodeId> = metrics.membership_config.membership().voter_ids().collect();
        voters.insert(id);
        match raft.change_membership(voters, false).await {
            Ok(_) => return "promoted to a voter",
            Err(error) => {
                if error.forward_to_leader().is_some() {
                    return "this node no longer leads";
                }
                // Another change in progress, or the learner fell behind
                // again: look again after a pause.
                tracing::info!(node = id, %error, "promotion not yet possible; trying again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, StoredMembership};
    use std::collections::BTreeMap;

    fn log(index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(1, 1), index)
    }

    /// Node 1 leading voters 1-3 with node 4 a learner, its log ending at
    /// 100, node 4 having matched `matched`.
    fn leading(matched: Option<u64>) -> RaftMetrics {
        let mut metrics = RaftMetrics::new_initial(1);
        let nodes: BTreeMap<NodeId, BasicNode> = (1..=4).map(|id| (id, BasicNode::new(format!("n{id}:1")))).collect();
        let membership = Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes);
        metrics.membership_config = Arc::new(StoredMembership::new(Some(log(1)), membership));
        metrics.last_log_index = Some(100);
        metrics.replication = Some(BTreeMap::from([(2, Some(log(100))), (3, Some(log(99))), (4, matched.map(log))]));
        metrics
    }

    #[test]
    fn a_learner_is_promoted_once_within_the_lag_of_the_leaders_log() {
        assert_eq!(step(&leading(None), 4, 10), Step::Wait, "nothing replicated yet");
        assert_eq!(step(&leading(Some(89)), 4, 10), Step::Wait);
        assert_eq!(step(&leading(Some(90)), 4, 10), Step::Promote);
        assert_eq!(step(&leading(Some(100)), 4, 0), Step::Promote);
    }

    #[test]
    fn a_promotion_ends_for_a_voter_a_departed_node_or_a_lost_leadership() {
        assert_eq!(step(&leading(Some(100)), 2, 10), Step::End("a voter"));
        assert_eq!(step(&leading(Some(100)), 9, 10), Step::End("no longer a member"));
        let mut follower = leading(Some(100));
        follower.replication = None;
        assert_eq!(step(&follower, 4, 10), Step::End("this node no longer leads"));
    }

    #[test]
    fn a_node_is_behind_by_the_entries_past_what_it_matched() {
        assert_eq!(entries_behind(Some(100), Some(90)), Some(10));
        assert_eq!(entries_behind(Some(100), Some(100)), Some(0));
        assert_eq!(entries_behind(Some(100), None), None, "nothing matched yet");
        assert_eq!(entries_behind(None, Some(0)), Some(0));
        assert_eq!(entries_behind(Some(5), Some(9)), Some(0), "a report ahead of the leader's counts as caught up");
    }
}
