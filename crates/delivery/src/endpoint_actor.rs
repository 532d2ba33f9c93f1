//! One actor per owned endpoint: it owns the endpoint's queue, circuit
//! breaker, concurrency cap, rate limit and backoff, and is the only sender
//! to that endpoint on this node.
//!
//! Each pass of [`pump`] starts every attempt that is due and allowed, in
//! this order of checks: the endpoint is enabled, the cap has room, the
//! earliest delivery is due, this node holds a valid lease for the shard
//! (checked immediately before every send), the rate limit has a token, and
//! the breaker admits it. Attempts run as tasks that report back with
//! [`EndpointMsg::Done`]; their outcomes go to the batcher with the shard's
//! fencing token. The actor never blocks on the network.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use hookraft_core::breaker::{Admission, CircuitBreaker, Transition};
use hookraft_core::command::Outcome;
use hookraft_core::dense::DenseSet;
use hookraft_core::ids::{DeliveryId, EndpointId, Shard};
use hookraft_core::model::{Endpoint, SigningSecrets};
use hookraft_core::payload::OpenError;
use hookraft_core::ratelimit::TokenBucket;
use hookraft_core::retry::{AttemptResult, Decision, decide, defer};
use hookraft_core::state::ClusterState;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::task::{AbortHandle, JoinHandle};

use crate::attempt::{AttemptPlan, attempt_record, attempt_result, build_request};
use crate::context::DeliveryContext;
use crate::metrics::{BreakerTo, Decided};
use crate::queue::{DeliveryQueue, QueuedDelivery, Resolution, is_active_for, loaded_due_ms, resolve};
use crate::transport::{SendError, SendOrigin, Target, WebhookResponse};

/// How long to wait before checking a lapsed lease again.
const LEASE_RECHECK_MS: u64 = 250;
/// Active deliveries an actor loads per read of the state when it starts.
const LOAD_CHUNK_IDS: usize = 16_384;

/// Messages an endpoint actor handles.
#[derive(Debug)]
pub enum EndpointMsg {
    /// New or replayed deliveries committed for this endpoint.
    Enqueue(Vec<DeliveryId>),
    /// The endpoint's settings changed (or it was deleted): re-read them.
    Refresh,
    /// A timer fired: start what is due.
    Tick,
    /// An attempt finished.
    Done(Box<AttemptDone>),
}

/// The report of a finished attempt task.
#[derive(Debug)]
pub struct AttemptDone {
    delivery_id: DeliveryId,
    result: Result<WebhookResponse, SendError>,
    latency_ms: u64,
    /// Not sent: this newer event of its entity key was delivered first.
    ignored_for: Option<hookraft_core::ids::EventId>,
}

/// The task that sends a delayed `Tick`.
type TimerTask = JoinHandle<Result<(), ractor::MessagingErr<EndpointMsg>>>;

/// The actor; its state is [`EndpointState`].
pub struct EndpointActor;

/// What the supervisor passes when it starts an endpoint actor.
pub struct EndpointArgs {
    pub ctx: DeliveryContext,
    pub endpoint_id: EndpointId,
}

struct InFlight {
    queued: QueuedDelivery,
    token: u64,
    started_at_ms: u64,
    /// The task sending it; `None` when nothing is sent (`not_sent`).
    abort: Option<AbortHandle>,
}

pub struct EndpointState {
    ctx: DeliveryContext,
    endpoint_id: EndpointId,
    /// `endpoint_id`'s shard, which every attempt names.
    shard: Shard,
    /// A copy of the replicated settings, refreshed on `Refresh`. `None`
    /// once deleted. Shared, because each message handled and each attempt
    /// finished holds it while the state is borrowed mutably.
    endpoint: Option<Arc<Endpoint>>,
    /// `endpoint`'s URL, parsed when the settings are loaded (not on every
    /// attempt).
    target: Option<Target>,
    /// `endpoint`'s signing secrets, opened when the settings are loaded;
    /// an error (a key this node lacks) holds every attempt back.
    secrets: Option<Result<Arc<SigningSecrets>, OpenError>>,
    queue: DeliveryQueue,
    in_flight: BTreeMap<DeliveryId, InFlight>,
    breaker: CircuitBreaker,
    bucket: Option<(u32, TokenBucket)>,
    rng: StdRng,
    /// The armed wake-up: when, and the task that will send `Tick`.
    timer: Option<(u64, TimerTask)>,
    /// Queue depth last added to the node-wide gauge.
    reported_depth: i64,
}

impl Actor for EndpointActor {
    type Msg = EndpointMsg;
    type State = EndpointState;
    type Arguments = EndpointArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<EndpointMsg>,
        args: EndpointArgs,
    ) -> Result<EndpointState, ActorProcessingErr> {
        let EndpointArgs { ctx, endpoint_id } = args;
        let shard = endpoint_id.shard();
        let seed = ctx.seed ^ u64::from(shard).rotate_left(32) ^ fnv(&endpoint_id.as_str());
        let mut state = EndpointState {
            endpoint: None,
            target: None,
            secrets: None,
            queue: DeliveryQueue::default(),
            in_flight: BTreeMap::new(),
            breaker: CircuitBreaker::new(),
            bucket: None,
            rng: StdRng::seed_from_u64(seed),
            timer: None,
            reported_depth: 0,
            shard,
            endpoint_id,
            ctx,
        };
        state.refresh_settings();
        state.breaker = state.endpoint.as_ref().map(|e| e.breaker.clone()).unwrap_or_default();
        // A backlog's active set can hold millions of ids: loaded a chunk
        // per read guard, in id order, so applies (and, since the lock
        // prefers writers, every reader behind a waiting apply) wait for
        // one chunk at most, not for the whole load.
        let mut after = None;
        loop {
            let guard = state.ctx.state.read();
            let Some(active) = guard.active.get(&state.endpoint_id) else { break };
            let chunk = next_chunk(active, after, LOAD_CHUNK_IDS);
            let last_chunk = chunk.len() < LOAD_CHUNK_IDS;
            after = chunk.last().copied();
            load(&mut state.queue, &state.in_flight, &guard, &state.endpoint_id, chunk.into_iter());
            drop(guard);
            if last_chunk {
                break;
            }
        }
        myself.send_message(EndpointMsg::Tick)?;
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<EndpointMsg>,
        message: EndpointMsg,
        state: &mut EndpointState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            EndpointMsg::Enqueue(ids) => state.enqueue(ids.into_iter()),
            EndpointMsg::Refresh => {
                state.refresh_settings();
                if state.endpoint.is_none() {
                    myself.stop(Some("endpoint deleted".into()));
                    return Ok(());
                }
            }
            EndpointMsg::Tick => state.timer = None,
            EndpointMsg::Done(done) => state.finish(*done).await,
        }
        state.pump(&myself);
        state.report_depth();
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<EndpointMsg>,
        state: &mut EndpointState,
    ) -> Result<(), ActorProcessingErr> {
        // Attempts in flight are abandoned: their deliveries stay active in
        // the replicated state, and the next owner sends them again.
        for (id, flight) in std::mem::take(&mut state.in_flight) {
            if let Some(abort) = flight.abort {
                abort.abort();
            }
            state.ctx.in_flight.remove(&id);
        }
        if let Some((_, timer)) = state.timer.take() {
            timer.abort();
        }
        state.queue.clear();
        state.report_depth();
        Ok(())
    }
}

impl EndpointState {
    fn refresh_settings(&mut self) {
        let endpoint = self.ctx.state.read().endpoints.get(&self.endpoint_id).cloned().map(Arc::new);
        let now_ms = self.ctx.clock.wall_ms();
        self.bucket = match endpoint.as_ref().and_then(|e| e.rate_limit_per_s) {
            // Keep the bucket (and its tokens) when the rate is unchanged.
            Some(rate) if self.bucket.as_ref().is_some_and(|(r, _)| *r == rate) => self.bucket.take(),
            Some(rate) => Some((rate, TokenBucket::new(rate, rate.max(1), now_ms))),
            None => None,
        };
        if endpoint.as_ref().is_none_or(|e| e.disabled) {
            // The log dead-letters the deliveries of a disabled or deleted endpoint.
            self.queue.clear();
        }
        self.secrets = endpoint.as_ref().map(|e| {
            let keys = &self.ctx.payloads;
            keys.counted(e.open_secrets(keys.keyring(), now_ms), false).map(Arc::new)
        });
        self.target = match (endpoint.as_ref(), self.target.take()) {
            (Some(e), Some(kept)) if kept.as_str() == e.url => Some(kept),
            (Some(e), _) => Some(Target::new(&e.url)),
            (None, _) => None,
        };
        self.endpoint = endpoint;
    }

    fn enqueue(&mut self, ids: impl Iterator<Item = DeliveryId>) {
        // A reload can name a whole backlog: a chunk per read guard, as at start.
        let mut ids = ids.peekable();
        while ids.peek().is_some() {
            let guard = self.ctx.state.read();
            load(&mut self.queue, &self.in_flight, &guard, &self.endpoint_id, ids.by_ref().take(LOAD_CHUNK_IDS));
        }
    }

    /// The earliest queued delivery if it is due at `now_ms`, with the
    /// counters of its next attempt, or else when the earliest is due.
    /// Entries that are not to be attempted are dropped or moved on the
    /// way (see [`resolve`]), before the rate limit and the breaker are
    /// asked.
    fn due_head(&mut self, now_ms: u64) -> Option<Result<QueuedDelivery, u64>> {
        loop {
            let head = self.queue.head()?;
            if head.due_ms() > now_ms {
                return Some(Err(head.due_ms()));
            }
            let id = head.id();
            let in_flight = self.in_flight.contains_key(&id);
            let (resolution, turn) = {
                let guard = self.ctx.state.read();
                let delivery = guard.deliveries.get(&id).map(|d| &**d);
                // An ordered delivery goes only as its key's head.
                (resolve(head, in_flight, delivery, &self.endpoint_id), delivery.is_none_or(|d| guard.may_attempt(d)))
            };
            // Deliberately wrong (simulator's `--break ordering`): every
            // delivery is its key's head.
            #[cfg(feature = "break")]
            let turn = turn || hookraft_core::breaks::out_of_turn();
            match resolution {
                // Not its turn: parked until the delivery before it settles
                // and the observer wakes it (`hookraft-node`'s observer).
                Resolution::Attempt(_) if !turn => self.queue.pop_head(),
                Resolution::Attempt(queued) => return Some(Ok(queued)),
                Resolution::Drop => self.queue.pop_head(),
                Resolution::Move { due_ms } => {
                    self.queue.pop_head();
                    self.queue.push_loaded(id, due_ms);
                }
            }
        }
    }

    /// Starts every attempt that is due and allowed; arms a timer for the next one.
    fn pump(&mut self, myself: &ActorRef<EndpointMsg>) {
        // Loaded together in `refresh_settings`: both or neither.
        let (Some(endpoint), Some(target)) = (self.endpoint.clone(), self.target.clone()) else { return };
        if endpoint.disabled {
            return;
        }
        let shard = self.shard;
        loop {
            if self.in_flight.len() >= endpoint.max_in_flight as usize {
                return; // an attempt's Done will pump again
            }
            let now_ms = self.ctx.clock.wall_ms();
            let queued = match self.due_head(now_ms) {
                None => return,
                Some(Err(due_ms)) => return self.arm(myself, due_ms, now_ms),
                Some(Ok(queued)) => queued,
            };
            let Some(token) = self.ctx.ownership.token_for(shard) else {
                self.ctx.metrics.lease_refusals.inc();
                self.abandon_in_flight();
                return self.arm(myself, now_ms + LEASE_RECHECK_MS, now_ms);
            };
            // The payload is opened before the rate limit and the breaker are
            // asked: one that cannot be opened is not sent, and must take
            // neither a token nor the breaker's half-open probe.
            let plan = match self.plan(&queued) {
                None => {
                    self.queue.pop_head(); // dead-lettered or deleted meanwhile
                    continue;
                }
                Some(Err(reason)) => {
                    self.queue.pop_head();
                    self.not_sent(myself, queued, token, now_ms, reason);
                    continue;
                }
                Some(Ok(ready)) => ready,
            };
            // Peek at the rate limit first: the breaker's half-open probe must
            // not be granted to an attempt the rate limit then holds back.
            if let Some((_, bucket)) = self.bucket.as_ref()
                && bucket.available(now_ms) == 0
            {
                let mut probe = bucket.clone();
                let wait_ms = probe.try_take(now_ms).err().unwrap_or(1);
                self.ctx.metrics.rate_limited.inc();
                return self.arm(myself, now_ms + wait_ms, now_ms);
            }
            let (admission, transition) = self.breaker.admit_with_transition(&self.ctx.breaker, now_ms);
            if let Some(t) = transition {
                self.count_transition(t);
            }
            if let Admission::Rejected { retry_at_ms } = admission {
                self.ctx.metrics.breaker_rejections.inc();
                return self.arm(myself, retry_at_ms.max(now_ms + 1), now_ms);
            }
            if let Some((_, bucket)) = self.bucket.as_mut() {
                let _ = bucket.try_take(now_ms); // available above, and time has not moved
            }
            self.queue.pop_head();
            let (plan, secrets) = plan;
            self.start_attempt(myself, &endpoint, &secrets, &target, queued, plan, token, now_ms);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start_attempt(
        &mut self,
        myself: &ActorRef<EndpointMsg>,
        endpoint: &Endpoint,
        secrets: &SigningSecrets,
        target: &Target,
        queued: QueuedDelivery,
        plan: AttemptPlan,
        token: u64,
        now_ms: u64,
    ) {
        let origin = SendOrigin { node_id: self.ctx.node_id, shard: self.shard, token, started_at_ms: now_ms };
        let request = build_request(endpoint, &secrets.at(now_ms), target.clone(), &plan, now_ms, origin);
        let transport = self.ctx.transport.clone();
        let clock = self.ctx.clock.clone();
        let reply_to = myself.clone();
        let delivery_id = queued.id;
        let started_mono_ms = clock.monotonic_ms();
        let task = tokio::spawn(async move {
            let result = transport.send(request).await;
            let latency_ms = clock.monotonic_ms().saturating_sub(started_mono_ms);
            // The actor may have stopped meanwhile; then the result is moot.
            let _ = reply_to.send_message(EndpointMsg::Done(Box::new(AttemptDone {
                delivery_id,
                result,
                latency_ms,
                ignored_for: None,
            })));
        });
        self.ctx.in_flight.insert(&queued.id);
        self.ctx.metrics.attempts.inc();
        self.in_flight
            .insert(queued.id, InFlight { queued, token, started_at_ms: now_ms, abort: Some(task.abort_handle()) });
    }

    /// Records a finished attempt: breaker, retry decision, outcome to the log.
    async fn finish(&mut self, done: AttemptDone) {
        let Some(flight) = self.in_flight.remove(&done.delivery_id) else { return };
        self.ctx.in_flight.remove(&done.delivery_id);
        let Some(endpoint) = self.endpoint.clone() else { return };
        let now_ms = self.ctx.clock.wall_ms();
        // Nothing was sent: the receiver is not to blame, so neither its
        // breaker nor its retry budget hears of it.
        let not_sent = done.ignored_for.is_some() || matches!(done.result, Err(SendError::PayloadUnavailable(_)));
        if !not_sent {
            self.ctx.metrics.observe_latency_ms(done.latency_ms);
        }

        let result = attempt_result(&done.result, now_ms);
        let success = matches!(result, AttemptResult::Status { code, .. } if (200..300).contains(&code) || code == 410);
        let transition = if not_sent {
            None
        } else if success {
            self.breaker.on_success(&self.ctx.breaker, now_ms)
        } else {
            self.breaker.on_failure(&self.ctx.breaker, now_ms)
        };
        if let Some(t) = transition {
            self.count_transition(t);
        }
        let queued = flight.queued;
        let decision = if let Some(newer) = done.ignored_for {
            Decision::IgnoredStale { newer }
        } else if not_sent {
            defer(&endpoint.retry, queued.attempt_count + 1, now_ms, &mut self.rng)
        } else {
            decide(
                &endpoint.retry,
                &result,
                queued.cycle_attempts + 1,
                queued.cycle_started_at_ms,
                now_ms,
                &mut self.rng,
            )
        };
        self.ctx.metrics.decided(match &decision {
            Decision::Delivered => Decided::Delivered,
            Decision::Retry { .. } => Decided::Retried,
            Decision::Deferred { .. } => Decided::NotSent,
            Decision::Dead { .. } => Decided::Dead,
            Decision::Gone => Decided::Gone,
            Decision::IgnoredStale { .. } => Decided::IgnoredStale,
        });
        let outcome = Outcome {
            delivery_id: queued.id,
            shard: self.shard,
            token: flight.token,
            attempt: attempt_record(
                self.ctx.node_id,
                flight.token,
                flight.started_at_ms,
                done.latency_ms,
                &done.result,
            ),
            decision: decision.clone(),
            breaker: transition.map(|_| self.breaker.clone()),
        };
        // The shard was granted anew while the attempt was out (revoked, and
        // maybe granted back): its outcome will be rejected as stale, so the
        // delivery stays active in the log and must stay queued here too, or
        // nothing sends it again (found by the simulator, seed 200123). The
        // grant, not the lease: a lease that merely lapsed leaves the token,
        // and the outcome, valid. The supervisor's reload on a token change
        // covers attempts that finished before the change.
        let superseded = self.ctx.ownership.granted_token(self.shard) != Some(flight.token);
        match decision {
            Decision::Delivered | Decision::Dead { .. } | Decision::Gone | Decision::IgnoredStale { .. }
                if superseded =>
            {
                self.queue.push(QueuedDelivery { due_ms: now_ms, ..queued });
            }
            Decision::Retry { at_ms, .. } => self.queue.push(QueuedDelivery {
                due_ms: at_ms,
                attempt_count: queued.attempt_count + 1,
                cycle_attempts: queued.cycle_attempts + 1,
                ..queued
            }),
            Decision::Deferred { at_ms } => {
                self.queue.push(QueuedDelivery { due_ms: at_ms, attempt_count: queued.attempt_count + 1, ..queued })
            }
            Decision::Gone => {
                // Stop at once; the log disables the endpoint and dead-letters the rest.
                if let Some(e) = self.endpoint.as_mut() {
                    Arc::make_mut(e).disabled = true;
                }
                self.queue.clear();
            }
            Decision::Delivered | Decision::Dead { .. } | Decision::IgnoredStale { .. } => {}
        }
        // Bounded: waits when the batcher is behind, which slows this endpoint only.
        if self.ctx.outcomes.send(outcome).await.is_err() {
            tracing::warn!(endpoint = %self.endpoint_id, "outcome batcher is gone; outcome dropped (the delivery stays queued in the log)");
        }
    }

    /// Aborts attempts in flight: this node's lease lapsed, so it must stop sending.
    fn abandon_in_flight(&mut self) {
        for (id, flight) in std::mem::take(&mut self.in_flight) {
            if let Some(abort) = flight.abort {
                abort.abort();
            }
            self.ctx.in_flight.remove(&id);
            self.queue.push(flight.queued);
        }
    }

    fn arm(&mut self, myself: &ActorRef<EndpointMsg>, due_ms: u64, now_ms: u64) {
        if let Some((armed, handle)) = &self.timer {
            if *armed <= due_ms && !handle.is_finished() {
                return;
            }
            handle.abort();
        }
        let wait = Duration::from_millis(due_ms.saturating_sub(now_ms));
        self.timer = Some((due_ms, myself.send_after(wait, || EndpointMsg::Tick)));
    }

    fn count_transition(&self, transition: Transition) {
        use hookraft_core::breaker::BreakerStatus::*;
        self.ctx.metrics.breaker_moved(match transition.to {
            Open => BreakerTo::Open,
            Closed => BreakerTo::Closed,
            HalfOpen => BreakerTo::HalfOpen,
        });
        tracing::info!(endpoint = %self.endpoint_id, from = ?transition.from, to = ?transition.to, "breaker transition");
    }

    fn report_depth(&mut self) {
        let depth = i64::try_from(self.queue.len()).unwrap_or(i64::MAX);
        self.ctx.metrics.queue_depth.inc_by(depth - self.reported_depth);
        self.reported_depth = depth;
    }
}

/// Queues the given deliveries that the replicated state says are active
/// for this endpoint and that are not already queued or in flight here.
fn load(
    queue: &mut DeliveryQueue,
    in_flight: &BTreeMap<DeliveryId, InFlight>,
    state: &ClusterState,
    endpoint_id: &EndpointId,
    ids: impl Iterator<Item = DeliveryId>,
) {
    for id in ids {
        let Some(delivery) = state.deliveries.get(&id).filter(|d| is_active_for(d, endpoint_id)) else { continue };
        let due_ms = loaded_due_ms(delivery);
        if queue.contains(&id, due_ms) || in_flight.contains_key(&id) {
            continue;
        }
        queue.push_loaded(id, due_ms);
    }
}

/// Up to `max` ids of `active` after `after` (from the first when `None`),
/// in order: successive calls, each passed the last id of the one before,
/// visit every id present throughout once, and also those added past the
/// cursor meanwhile.
fn next_chunk(active: &DenseSet<DeliveryId>, after: Option<DeliveryId>, max: usize) -> Vec<DeliveryId> {
    let from = after.map_or(Bound::Unbounded, Bound::Excluded);
    active.range((from, Bound::Unbounded)).take(max).copied().collect()
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

mod plan;

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn ids(count: u64, rng: &mut StdRng) -> DenseSet<DeliveryId> {
        (0..count).map(|i| DeliveryId::generate(1_000 + i, rng)).collect()
    }

    #[test]
    fn chunks_visit_every_id_once_in_order_and_ids_added_past_the_cursor() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut active = ids(10, &mut rng);
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let chunk = next_chunk(&active, after, 4);
            let last_chunk = chunk.len() < 4;
            after = chunk.last().copied();
            seen.extend(chunk);
            if seen.len() == 4 {
                // Between two reads the state changes: one id past the
                // cursor arrives, one already loaded completes.
                active.insert(DeliveryId::generate(99_000, &mut rng));
                let loaded = seen[0];
                active.remove(&loaded);
            }
            if last_chunk {
                break;
            }
        }
        assert_eq!(seen.len(), 11, "the 10 ids and the one added past the cursor");
        assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "in order, none twice");
        assert_eq!(next_chunk(&DenseSet::new(), None, 4), Vec::new());
        let exact = ids(8, &mut rng);
        let first = next_chunk(&exact, None, 4);
        let second = next_chunk(&exact, first.last().copied(), 4);
        assert_eq!((first.len(), second.len()), (4, 4));
        assert!(next_chunk(&exact, second.last().copied(), 4).is_empty(), "a full last chunk ends with an empty one");
    }
}
