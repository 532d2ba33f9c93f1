//! The node's delivery supervisor: it starts one [`EndpointActor`] per
//! endpoint of the shards this node owns, stops them when shards go, routes
//! wake-ups from the applied log to them, and restarts a crashed actor from
//! the replicated state.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hookraft_core::ids::{DeliveryId, EndpointId};
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::context::DeliveryContext;
use crate::endpoint_actor::{EndpointActor, EndpointArgs, EndpointMsg};

/// Restarts of one endpoint's actor allowed within [`RESTART_WINDOW_MS`]
/// before the supervisor waits [`RESTART_BACKOFF`] instead of restarting at once.
const RESTARTS_MAX: u32 = 5;
const RESTART_WINDOW_MS: u64 = 60_000;
const RESTART_BACKOFF: Duration = Duration::from_secs(5);
/// The supervisor also rebalances on this period, whatever it was told.
/// Rebalances are otherwise triggered by edges (a grant applied, the lease
/// loop seeing its lease lapse or return), and an edge can be missed: the
/// lease loop samples validity between heartbeats, so a lease that lapsed
/// and came back while it waited on a heartbeat looks unchanged to it, yet
/// a rebalance that ran in the gap had stopped every actor of the node's
/// shards, and nothing started them again (found by the simulator, seed
/// 5146: an endpoint with 359 pending deliveries and no sender).
pub const REBALANCE_EVERY: Duration = Duration::from_secs(1);

/// What the supervisor is told.
#[derive(Debug)]
pub enum SupervisorMsg {
    /// Deliveries committed (new or replayed), grouped by endpoint.
    Wake(Vec<(EndpointId, Vec<DeliveryId>)>),
    /// An endpoint was registered, changed or deleted.
    EndpointChanged(EndpointId),
    /// Shard grants or this node's lease changed: start and stop actors to match.
    Rebalance,
    /// The state was replaced by a snapshot: every actor re-reads its
    /// deliveries (an attempt whose outcome is not yet applied may be sent
    /// again: at least once).
    Resync,
}

pub struct DeliverySupervisor;

/// A running endpoint actor.
struct Running {
    actor: ActorRef<EndpointMsg>,
    /// The fencing token its shard had when the actor last loaded its
    /// deliveries from the replicated state.
    token: u64,
}

pub struct SupervisorState {
    ctx: DeliveryContext,
    actors: BTreeMap<EndpointId, Running>,
    by_actor: HashMap<ActorId, EndpointId>,
    /// Recent restarts per endpoint.
    restarts: RestartLog,
}

impl Actor for DeliverySupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = DeliveryContext;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        ctx: DeliveryContext,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        myself.send_message(SupervisorMsg::Rebalance)?;
        // The handle is detached, not kept: the interval's task ends on its
        // own once a send fails, i.e. when the supervisor has stopped.
        drop(myself.send_interval(REBALANCE_EVERY, || SupervisorMsg::Rebalance));
        Ok(SupervisorState { ctx, actors: BTreeMap::new(), by_actor: HashMap::new(), restarts: RestartLog::default() })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        message: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Wake(batches) => {
                for (endpoint_id, ids) in batches {
                    if let Some(actor) = state.actor(&endpoint_id) {
                        // A stopped actor's mailbox refuses; its successor reloads from the log.
                        let _ = actor.send_message(EndpointMsg::Enqueue(ids));
                    } else if state.owns(&endpoint_id) {
                        state.spawn(&myself, endpoint_id).await;
                    }
                }
            }
            SupervisorMsg::EndpointChanged(endpoint_id) => {
                if let Some(actor) = state.actor(&endpoint_id) {
                    let _ = actor.send_message(EndpointMsg::Refresh);
                } else if state.owns(&endpoint_id) {
                    state.spawn(&myself, endpoint_id).await;
                }
            }
            SupervisorMsg::Rebalance => state.rebalance(&myself).await,
            SupervisorMsg::Resync => {
                state.rebalance(&myself).await;
                state.reload(state.actors.keys());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                // Stopped on purpose; if the shard came back meanwhile, start afresh.
                if let Some(endpoint_id) = state.forget(&cell)
                    && !state.actors.contains_key(&endpoint_id)
                    && state.owns(&endpoint_id)
                {
                    state.spawn(&myself, endpoint_id).await;
                }
            }
            SupervisionEvent::ActorFailed(cell, error) => {
                let Some(endpoint_id) = state.forget(&cell) else { return Ok(()) };
                tracing::error!(endpoint = %endpoint_id, %error, "endpoint actor crashed; restarting it from the replicated state");
                state.ctx.metrics.actor_restarts.inc();
                if state.note_restart(&endpoint_id) {
                    if state.owns(&endpoint_id) {
                        state.spawn(&myself, endpoint_id).await;
                    }
                } else {
                    myself.send_after(RESTART_BACKOFF, || SupervisorMsg::Rebalance);
                }
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        for Running { actor, .. } in state.actors.values() {
            actor.stop(Some("supervisor stopping".into()));
        }
        Ok(())
    }
}

impl SupervisorState {
    fn actor(&self, endpoint_id: &EndpointId) -> Option<&ActorRef<EndpointMsg>> {
        self.actors.get(endpoint_id).map(|running| &running.actor)
    }

    /// Has the actors of `endpoints` queue their endpoint's active
    /// deliveries from the replicated state (an actor skips what it has
    /// queued or in flight already).
    fn reload<'a>(&self, endpoints: impl IntoIterator<Item = &'a EndpointId>) {
        let state = self.ctx.state.read();
        for endpoint_id in endpoints {
            if let (Some(actor), Some(ids)) = (self.actor(endpoint_id), state.active.get(endpoint_id)) {
                let _ = actor.send_message(EndpointMsg::Enqueue(ids.iter().cloned().collect()));
            }
        }
    }

    fn owns(&self, endpoint_id: &EndpointId) -> bool {
        self.ctx.ownership.token_for(endpoint_id.shard()).is_some()
            && self.ctx.state.read().endpoints.get(endpoint_id).is_some_and(|e| !e.disabled)
    }

    /// Starts actors for owned endpoints, stops the rest, and has every
    /// actor whose shard was granted anew reload its deliveries.
    ///
    /// A shard can be revoked and granted back to this node between two
    /// rebalances, so its actor lives on under a new token. Outcomes its
    /// attempts under the old token still had on the way are rejected as
    /// stale, and their deliveries stay active in the log while the actor,
    /// having finished them, has forgotten them: nothing would send them
    /// again (found by the simulator, seed 100293). Reloading the
    /// endpoint's active deliveries on a token change puts them back.
    async fn rebalance(&mut self, myself: &ActorRef<SupervisorMsg>) {
        // Ownership reads the state too: ask it only once this guard is gone.
        let enabled: Vec<EndpointId> = {
            let state = self.ctx.state.read();
            state.endpoints.values().filter(|e| !e.disabled).map(|e| e.id).collect()
        };
        let wanted: BTreeMap<EndpointId, u64> = enabled
            .into_iter()
            .filter_map(|id| self.ctx.ownership.token_for(id.shard()).map(|token| (id, token)))
            .collect();
        let now_ms = self.ctx.clock.monotonic_ms();
        self.restarts.prune(now_ms, |endpoint_id| wanted.contains_key(endpoint_id), RESTART_PRUNE_MAX);
        for (endpoint_id, Running { actor, .. }) in &self.actors {
            if !wanted.contains_key(endpoint_id) {
                actor.stop(Some("shard or lease no longer held here".into()));
            }
        }
        let mut regranted = Vec::new();
        for (endpoint_id, token) in &wanted {
            match self.actors.get_mut(endpoint_id) {
                None => self.spawn(myself, *endpoint_id).await,
                Some(running) if running.token != *token => {
                    tracing::debug!(endpoint = %endpoint_id, token, "shard granted anew; reloading its deliveries");
                    running.token = *token;
                    regranted.push(endpoint_id);
                }
                Some(_) => {}
            }
        }
        self.reload(regranted);
    }

    async fn spawn(&mut self, myself: &ActorRef<SupervisorMsg>, endpoint_id: EndpointId) {
        // Read before the actor loads its deliveries, so a grant applied
        // meanwhile shows as a change at the next rebalance.
        let token = self.ctx.ownership.token_for(endpoint_id.shard()).unwrap_or(0);
        let args = EndpointArgs { ctx: self.ctx.clone(), endpoint_id };
        // Unnamed: ractor's name registry is process-wide, and a simulation
        // runs many nodes in one process.
        match Actor::spawn_linked(None, EndpointActor, args, myself.get_cell()).await {
            Ok((actor, _)) => {
                self.by_actor.insert(actor.get_id(), endpoint_id);
                self.actors.insert(endpoint_id, Running { actor, token });
            }
            Err(error) => tracing::error!(endpoint = %endpoint_id, %error, "could not start endpoint actor"),
        }
    }

    fn forget(&mut self, cell: &ActorCell) -> Option<EndpointId> {
        let endpoint_id = self.by_actor.remove(&cell.get_id())?;
        if self.actor(&endpoint_id).is_some_and(|a| a.get_id() == cell.get_id()) {
            self.actors.remove(&endpoint_id);
        }
        Some(endpoint_id)
    }

    /// Counts a restart; false when the endpoint has crashed too often lately.
    fn note_restart(&mut self, endpoint_id: &EndpointId) -> bool {
        let now_ms = self.ctx.clock.monotonic_ms();
        self.restarts.note(*endpoint_id, now_ms)
    }
}

/// Records of restarts one rebalance (every [`REBALANCE_EVERY`]) looks at,
/// at most, to forget those whose window is over or whose endpoint this
/// node no longer runs.
const RESTART_PRUNE_MAX: usize = 256;

/// Recent restarts per endpoint: when its window started and how many
/// restarts it has seen. Without pruning it kept a record for every
/// endpoint that ever crashed on this node; [`RestartLog::prune`] forgets
/// the ones that no longer count, a bounded number looked at per call,
/// going round the log from where the last call stopped.
#[derive(Debug, Default)]
struct RestartLog {
    recent: BTreeMap<EndpointId, (u64, u32)>,
    /// Where the next prune starts looking (after this endpoint).
    cursor: Option<EndpointId>,
}

impl RestartLog {
    /// Counts a restart of `endpoint_id` at `now_ms`; false when it is
    /// past [`RESTARTS_MAX`] within [`RESTART_WINDOW_MS`].
    fn note(&mut self, endpoint_id: EndpointId, now_ms: u64) -> bool {
        let entry = self.recent.entry(endpoint_id).or_insert((now_ms, 0));
        if expired(*entry, now_ms) {
            *entry = (now_ms, 0);
        }
        entry.1 += 1;
        entry.1 <= RESTARTS_MAX
    }

    /// Forgets records whose window is over at `now_ms` or whose endpoint
    /// `keep` refuses, looking at `max` records at most.
    fn prune(&mut self, now_ms: u64, keep: impl Fn(&EndpointId) -> bool, max: usize) {
        use std::ops::Bound;
        let from = self.cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let looked: Vec<(EndpointId, bool)> = self
            .recent
            .range((from, Bound::Unbounded))
            .chain(self.recent.range(..))
            .take(max.min(self.recent.len()))
            .map(|(id, entry)| (*id, expired(*entry, now_ms) || !keep(id)))
            .collect();
        self.cursor = looked.last().map(|(id, _)| *id);
        for (id, _) in looked.iter().filter(|(_, forget)| *forget) {
            self.recent.remove(id);
        }
    }
}

/// Whether a restart window that started at `entry.0` is over at `now_ms`.
fn expired(entry: (u64, u32), now_ms: u64) -> bool {
    now_ms.saturating_sub(entry.0) > RESTART_WINDOW_MS
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn endpoints(n: usize) -> Vec<EndpointId> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut ids: Vec<EndpointId> = (0..n).map(|_| EndpointId::generate(1, &mut rng)).collect();
        ids.sort();
        ids
    }

    #[test]
    fn restarts_past_the_limit_within_the_window_are_refused_and_a_new_window_allows_them_again() {
        let [a] = endpoints(1)[..] else { unreachable!() };
        let mut log = RestartLog::default();
        for _ in 0..RESTARTS_MAX {
            assert!(log.note(a, 1_000));
        }
        assert!(!log.note(a, 1_000 + RESTART_WINDOW_MS), "the sixth within the window");
        assert!(log.note(a, 1_001 + RESTART_WINDOW_MS), "a new window");
    }

    #[test]
    fn prune_forgets_expired_windows_and_endpoints_no_longer_run_looking_at_a_bounded_number_each_time() {
        let ids = endpoints(10);
        let mut log = RestartLog::default();
        for (i, id) in ids.iter().enumerate() {
            // The first five crashed long ago, the rest just now.
            log.note(*id, if i < 5 { 0 } else { 2 * RESTART_WINDOW_MS });
        }
        let gone = ids[9];
        let now_ms = 2 * RESTART_WINDOW_MS + 10;
        log.prune(now_ms, |id| *id != gone, 4);
        assert_eq!(log.recent.len(), 6, "four looked at, all four expired");
        log.prune(now_ms, |id| *id != gone, 4);
        assert_eq!(log.recent.len(), 5, "the fifth expired; three recent kept");
        log.prune(now_ms, |id| *id != gone, 4);
        assert_eq!(log.recent.len(), 4, "the endpoint no longer run is forgotten");
        let kept: Vec<EndpointId> = log.recent.keys().copied().collect();
        assert_eq!(kept, ids[5..9].to_vec());
        // Going round: the recent ones stay until their window ends.
        log.prune(now_ms, |_| true, 4);
        assert_eq!(log.recent.len(), 4);
        log.prune(3 * RESTART_WINDOW_MS + 1, |_| true, 100);
        assert_eq!(log.recent.len(), 0);
        log.prune(now_ms, |_| true, 4);
    }
}
