//! The lease loop on a real one-member Raft on an in-memory disk, on
//! tokio's paused clock: the lease is renewed while leader duties wait on
//! slow commits (a proposer that holds every `Prune` back for three leases
//! before committing it), and a lapse is counted even when the renewal
//! lands at once (a process paused past its lease).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookraft_core::Command;
use hookraft_core::clock::Clock;
use hookraft_core::command::NewEvent;
use hookraft_core::ids::EventId;
use hookraft_core::propose::{ProposeError, ProposeFuture, Proposer};
use hookraft_delivery::supervisor::SupervisorMsg;
use hookraft_node::lease::{Lease, LeaseLoop};
use hookraft_raft::{Backend, HttpNetwork, MemDisk, Raft, raft_config};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use rand::SeedableRng;
use tokio::time::Instant;

const NODE: u64 = 1;
const LEASE_MS: u64 = 1_000;
/// How long the proposer holds a `Prune` back: three leases.
const PRUNE_DELAY: Duration = Duration::from_millis(3 * LEASE_MS);
const EPOCH_MS: u64 = 1_767_225_600_000;

/// tokio's (paused) clock.
struct PausedClock {
    origin: Instant,
}

impl Clock for PausedClock {
    fn wall_ms(&self) -> u64 {
        EPOCH_MS + self.monotonic_ms()
    }

    fn monotonic_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

/// What the lease's renewals counter read when a `Prune` was proposed and
/// when it committed.
#[derive(Debug, Clone, Copy)]
struct SlowCommit {
    renewals_before: u64,
    renewals_after: u64,
}

/// Commits straight on the local Raft; every `Prune` waits
/// [`PRUNE_DELAY`] first, as one behind a long snapshot clone or a slow
/// disk would.
struct SlowPrunes {
    raft: Raft,
    lease: Arc<Lease>,
    prunes: Mutex<Vec<SlowCommit>>,
}

impl Proposer for SlowPrunes {
    fn propose(&self, command: Command) -> ProposeFuture<'_> {
        Box::pin(async move {
            let slow = matches!(command, Command::Prune { .. });
            let renewals_before = self.lease.renewals_total.load(Ordering::SeqCst);
            if slow {
                tokio::time::sleep(PRUNE_DELAY).await;
            }
            let written = self.raft.client_write(command.into()).await;
            if slow {
                let renewals_after = self.lease.renewals_total.load(Ordering::SeqCst);
                self.prunes.lock().unwrap().push(SlowCommit { renewals_before, renewals_after });
            }
            written.map(|w| w.data).map_err(|e| ProposeError::Other(e.to_string()))
        })
    }
}

/// Stands in for the delivery supervisor: counts the rebalances the lease
/// loop asks for.
struct Supervisor;

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = Arc<AtomicU64>;
    type Arguments = Arc<AtomicU64>;

    async fn pre_start(
        &self,
        _: ActorRef<SupervisorMsg>,
        rebalances: Arc<AtomicU64>,
    ) -> Result<Arc<AtomicU64>, ActorProcessingErr> {
        Ok(rebalances)
    }

    async fn handle(
        &self,
        _: ActorRef<SupervisorMsg>,
        _: SupervisorMsg,
        rebalances: &mut Arc<AtomicU64>,
    ) -> Result<(), ActorProcessingErr> {
        rebalances.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A one-member Raft that leads its cluster, and its state.
async fn one_member() -> (Raft, hookraft_raft::StateHandle) {
    let (log_store, state_machine, state) =
        hookraft_raft::open(&Backend::Memory(MemDisk::new()), None).expect("open the in-memory stores");
    let network = HttpNetwork::new(None).expect("network");
    let raft = Raft::new(NODE, Arc::new(raft_config()), network, log_store, state_machine).await.expect("raft");
    raft.initialize(BTreeMap::from([(NODE, openraft::BasicNode::new("127.0.0.1:1"))])).await.expect("initialise");
    raft.wait(Some(Duration::from_secs(60))).current_leader(NODE, "leads its cluster").await.expect("leader");
    (raft, state)
}

/// A lease loop at work over `raft`, behind [`SlowPrunes`], telling a
/// [`Supervisor`] that counts its rebalances.
struct Running {
    lease: Arc<Lease>,
    proposer: Arc<SlowPrunes>,
    rebalances: Arc<AtomicU64>,
    supervisor: ActorRef<SupervisorMsg>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn start(
        raft: &Raft,
        state: &hookraft_raft::StateHandle,
        clock: &Arc<PausedClock>,
        retention_ms: Option<u64>,
    ) -> Self {
        let lease = Arc::new(Lease::default());
        let proposer =
            Arc::new(SlowPrunes { raft: raft.clone(), lease: lease.clone(), prunes: Mutex::new(Vec::new()) });
        let rebalances = Arc::new(AtomicU64::new(0));
        let (supervisor, _) = Actor::spawn(None, Supervisor, rebalances.clone()).await.expect("supervisor");
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(
            LeaseLoop {
                node_id: NODE,
                lease_ms: LEASE_MS,
                retention_ms,
                lease: lease.clone(),
                clock: clock.clone(),
                proposer: proposer.clone(),
                raft: raft.clone(),
                state: state.clone(),
                supervisor: supervisor.clone(),
                stop: stopped,
            }
            .run(),
        );
        Self { lease, proposer, rebalances, supervisor, stop, task }
    }

    /// Stops the loop (it must end), the supervisor and `raft`.
    async fn stop(self, raft: Raft) {
        self.stop.send(true).expect("stop");
        self.task.await.expect("the lease loop ends when the node stops");
        self.supervisor.stop(None);
        raft.shutdown().await.expect("raft shutdown");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_that_lapsed_while_the_process_was_paused_is_counted_though_it_is_renewed_at_once() {
    let clock = Arc::new(PausedClock { origin: Instant::now() });
    let (raft, state) = one_member().await;
    let running = Running::start(&raft, &state, &clock, None).await;
    let (lease, rebalances) = (running.lease.clone(), running.rebalances.clone());
    tokio::time::sleep(Duration::from_millis(2 * LEASE_MS)).await;
    assert!(lease.is_valid(clock.monotonic_ms()), "held before the pause");
    assert_eq!(rebalances.load(Ordering::SeqCst), 1, "one rebalance, when the lease became valid");

    // The process stops for three leases: time jumps while no task runs,
    // and on waking the first heartbeat commits before any other look.
    tokio::time::advance(Duration::from_millis(3 * LEASE_MS)).await;
    tokio::time::sleep(Duration::from_millis(LEASE_MS / 2)).await;
    assert!(lease.is_valid(clock.monotonic_ms()), "renewed after waking");
    assert_eq!(lease.expiries_total.load(Ordering::SeqCst), 1, "the lapse is counted");
    assert_eq!(rebalances.load(Ordering::SeqCst), 3, "the supervisor heard of the lapse and of the renewal");

    running.stop(raft).await;
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_renewed_while_a_prune_waits_longer_than_the_lease() {
    let clock = Arc::new(PausedClock { origin: Instant::now() });
    let (raft, state) = one_member().await;

    // Events with no endpoint to go to: over at once, due for pruning a
    // millisecond later.
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let events = (0..3)
        .map(|_| NewEvent {
            id: EventId::generate(clock.wall_ms(), &mut rng),
            event_type: "order.created".into(),
            payload: "{}".into(),
            idempotency_key: None,
            endpoint_ids: None,
            ordering_key: None,
            inbound: None,
        })
        .collect();
    raft.client_write(Command::IngestEvents { now_ms: clock.wall_ms(), events }.into()).await.expect("ingest");
    // Finished as soon as they are stored: in the history, where the prune takes from.
    let held = state.read();
    assert_eq!((held.event_count(), held.history().event_count()), (3, 3));
    drop(held);
    tokio::time::sleep(Duration::from_millis(10)).await;

    let running = Running::start(&raft, &state, &clock, Some(1)).await;
    let (lease, rebalances, proposer) = (running.lease.clone(), running.rebalances.clone(), running.proposer.clone());

    // Look at the lease every 50 ms for four leases past the prune's end.
    let mut held = false;
    let mut lapsed_samples = 0;
    let watch_until_ms = clock.monotonic_ms() + PRUNE_DELAY.as_millis() as u64 + 4 * LEASE_MS;
    while clock.monotonic_ms() < watch_until_ms {
        let valid = lease.is_valid(clock.monotonic_ms());
        held |= valid;
        if held && !valid {
            lapsed_samples += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let prunes = proposer.prunes.lock().unwrap().clone();
    assert!(held, "the lease was never valid");
    assert!(!prunes.is_empty(), "the leader never pruned");
    assert_eq!(state.read().event_count(), 0, "the prune committed");
    for prune in &prunes {
        // A heartbeat every lease/3: eight or nine in three leases.
        assert!(
            prune.renewals_after >= prune.renewals_before + 6,
            "the lease was not renewed while a prune waited: {prune:?}"
        );
    }
    assert_eq!(lapsed_samples, 0, "the lease lapsed while a duty was slow");
    assert_eq!(lease.expiries_total.load(Ordering::SeqCst), 0);
    assert_eq!(rebalances.load(Ordering::SeqCst), 1, "one rebalance, when the lease became valid");

    running.stop(raft).await;
}
