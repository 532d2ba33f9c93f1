//! hookraft-node: wiring only. [`Node::start`] takes a [`NodeConfig`], an
//! [`Io`] bundle and a bound listener, and returns a running node:
//!
//! 1. storage opened (sled log + snapshot; the state machine replays it),
//! 2. openraft started over the HTTP node-to-node network; a fresh store on
//!    the lowest-numbered peer initialises the cluster (a one-member cluster
//!    without peers), the others wait to be contacted,
//! 3. the outcome batcher, the delivery supervisor (one actor per owned
//!    endpoint) and the lease loop (heartbeats, leader duties),
//! 4. the ingest batcher and the HTTP API on the listener.
//!
//! Nothing here decides anything about webhooks: that is `hookraft-core`
//! (pure) and `hookraft-delivery` (actors).

pub mod cluster;
pub mod config;
pub mod ingest;
pub mod io;
pub mod keyring;
pub mod lease;
pub mod listener;
pub mod log_writer;
pub mod observer;
pub mod promote;
pub mod secret;
pub mod tls;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hookraft_api::admission::{Admission, Budgets};
use hookraft_api::routes::internal::InternalRpc;
use hookraft_api::{ApiContext, ApiMetrics, ClusterView, LogFigures};
use hookraft_core::breaker::BreakerConfig;
use hookraft_core::ids::NodeId;
use hookraft_core::propose::Proposer;
use hookraft_delivery::batcher::{OUTCOME_QUEUE_MAX, run_outcome_batcher};
use hookraft_delivery::context::{DeliveryContext, InFlightRegistry};
use hookraft_delivery::metrics::{DeliveryMetrics, LifecycleMetrics};
use hookraft_delivery::payloads::PayloadKeys;
use hookraft_delivery::supervisor::{DeliverySupervisor, SupervisorMsg};
use hookraft_raft::{Raft, StateHandle, raft_config_snapshotting_every};
use openraft::RaftNetworkFactory;
use ractor::{Actor, ActorRef};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::NodeConfig;
/// Tokens and scopes, for the CLI that reads them.
pub use hookraft_api::auth;
pub use io::{Io, OsEntropy, Runtimes, SeededEntropy, Storage, SystemClock};

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("storage: {0}")]
    Storage(#[from] hookraft_raft::Error),
    #[error("raft: {0}")]
    Raft(String),
    #[error("webhook transport: {0}")]
    Transport(String),
    #[error("actors: {0}")]
    Actors(String),
    #[error("http server: {0}")]
    Http(#[from] std::io::Error),
    #[error("cluster secret: {0}")]
    Secret(String),
}

/// A running node.
pub struct NodeHandle {
    pub addr: SocketAddr,
    pub state: StateHandle,
    raft: Raft,
    supervisor: ActorRef<SupervisorMsg>,
    shutdown: watch::Sender<bool>,
    /// The HTTP server, when the node was given a listener.
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The node's full router (public API and node-to-node RPC), callable
    /// without a socket.
    pub router: axum::Router,
    /// Commits a command here if this node leads (the node-to-node
    /// `/internal/propose` path), for the simulator's network.
    pub local_write: Arc<dyn hookraft_api::routes::internal::LocalWrite>,
}

/// How long a fresh node waits to become leader of its one-member cluster.
const LEADERSHIP_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Node;

impl Node {
    /// Starts a node; serves its API on `listener` when one is given (the
    /// simulator calls [`NodeHandle::router`] directly instead).
    pub async fn start<N>(config: NodeConfig, io: Io<N>, listener: Option<TcpListener>) -> Result<NodeHandle, NodeError>
    where
        N: RaftNetworkFactory<hookraft_raft::TypeConfig>,
    {
        let addr = match &listener {
            Some(listener) => listener.local_addr()?,
            None => config.listen,
        };
        let link = Arc::new(observer::SupervisorLink::default());
        let backend = match &io.storage {
            Storage::Sled(dir) => {
                secret::private_dir(dir)?;
                hookraft_raft::Backend::Sled { path: dir.join("raft"), history_cache_bytes: config.history_cache_bytes }
            }
            Storage::Memory(disk) => hookraft_raft::Backend::Memory(disk.clone()),
        };
        let observer: Arc<dyn hookraft_raft::ApplyObserver> = match io.apply_tap.clone() {
            Some(tap) => Arc::new(observer::Both(link.clone(), tap)),
            None => link.clone(),
        };
        let (log_store, state_machine, state) = hookraft_raft::open(&backend, Some(observer))?;
        let (cluster_secret, shared_cluster_secret) = match config.cluster_secret.clone() {
            Some(secret) => (secret, true),
            None => {
                let secret = secret::node_local(&io.storage, io.entropy.as_ref()).map_err(NodeError::Secret)?;
                tracing::info!(
                    "no --cluster-secret: node RPC takes only this node's own secret (kept in its data dir), \
                     so no other node can join; set --cluster-secret on every node to make a cluster"
                );
                (secret, false)
            }
        };
        let (log_sizes, snapshot_bytes) = (log_store.size_watch(), state_machine.snapshot_bytes());
        let history_held = state_machine.history_watch();

        let mut config = config;
        if config.advertise.is_none() {
            config.advertise = Some(addr.to_string());
        }
        // openraft spawns its tasks on the runtime that builds it.
        let building = Raft::new(
            config.node_id,
            Arc::new(raft_config_snapshotting_every(config.snapshot_every_entries)),
            io.network,
            log_store,
            state_machine,
        );
        let raft = crate::io::run_on(io.runtimes.consensus.as_ref(), building).await.map_err(NodeError::Raft)?;
        let single = config.peers.len() <= 1;
        if config.initialises() && !raft.is_initialized().await.map_err(|e| NodeError::Raft(e.to_string()))? {
            let members: BTreeMap<NodeId, openraft::BasicNode> =
                config.initial_members().into_iter().map(|(id, addr)| (id, openraft::BasicNode::new(addr))).collect();
            raft.initialize(members).await.map_err(|e| NodeError::Raft(e.to_string()))?;
            tracing::info!(node = config.node_id, members = ?config.initial_members(), "initialised a new cluster");
        }
        if single {
            raft.wait(Some(LEADERSHIP_TIMEOUT))
                .current_leader(config.node_id, "this node leads its one-member cluster")
                .await
                .map_err(|e| NodeError::Raft(e.to_string()))?;
        }

        let writer = log_writer::LogWriter::start(raft.clone(), io.runtimes.consensus.as_ref());
        let proposer: Arc<dyn Proposer> =
            Arc::new(cluster::ClusterProposer { raft: raft.clone(), writer: writer.clone(), peers: io.peers.clone() });
        let (outcome_tx, outcome_rx) = tokio::sync::mpsc::channel(OUTCOME_QUEUE_MAX);
        // Beside the actors that feed it: on runtimes of their own, an
        // outcome that crossed to another runtime woke a parked thread there
        // for each delivery; a batch crosses once, to the log writer.
        crate::io::spawn_on(
            io.runtimes.delivery.as_ref(),
            run_outcome_batcher(outcome_rx, proposer.clone(), io.clock.clone(), config.node_id),
        );

        let payloads = Arc::new(PayloadKeys::new(config.keyring.clone(), io.entropy.clone()));
        match payloads.keyring() {
            Some(ring) => tracing::info!(
                active_key = ring.active_id(),
                keys = ?ring.ids().collect::<Vec<_>>(),
                "payloads are sealed (XChaCha20-Poly1305) before they are stored"
            ),
            None => tracing::warn!(
                "no keyring: payloads are stored in clear (in the log, snapshots and memory); \
                 start with --keyring to seal them"
            ),
        }
        let lease = Arc::new(lease::Lease::default());
        let in_flight = Arc::new(InFlightRegistry::default());
        let delivery_metrics = Arc::new(DeliveryMetrics::default());
        let ctx = DeliveryContext {
            node_id: config.node_id,
            state: state.clone(),
            ownership: Arc::new(lease::LeaseOwnership {
                node_id: config.node_id,
                state: state.clone(),
                lease: lease.clone(),
                clock: io.clock.clone(),
            }),
            transport: io.transport.clone(),
            clock: io.clock.clone(),
            outcomes: outcome_tx,
            in_flight: in_flight.clone(),
            breaker: BreakerConfig::default(),
            metrics: delivery_metrics.clone(),
            seed: io.seed,
            payloads: payloads.clone(),
        };
        // An actor spawns its children, and an attempt its connection, on
        // the runtime it runs on.
        let spawning = Actor::spawn(None, DeliverySupervisor, ctx);
        let (supervisor, _) =
            crate::io::run_on(io.runtimes.delivery.as_ref(), spawning).await.map_err(NodeError::Actors)?;
        let _ = link.supervisor.set(supervisor.clone());
        let lifecycle = Arc::new(LifecycleMetrics::default());
        let _ = link.lifecycle.set((config.node_id, lifecycle.clone()));

        let (shutdown, stop) = watch::channel(false);
        tokio::spawn(hookraft_raft::log_size::snapshot_when_log_grows(
            raft.clone(),
            log_sizes.clone(),
            history_held,
            snapshot_bytes.clone(),
            hookraft_raft::log_size::SnapshotMinimums::DEFAULT,
            stop.clone(),
        ));
        tokio::spawn(
            lease::LeaseLoop {
                node_id: config.node_id,
                lease_ms: config.lease_ms,
                retention_ms: config.retention_ms,
                lease: lease.clone(),
                clock: io.clock.clone(),
                proposer: proposer.clone(),
                raft: raft.clone(),
                state: state.clone(),
                supervisor: supervisor.clone(),
                stop: stop.clone(),
            }
            .run(),
        );

        let ingest = Arc::new(ingest::start(proposer.clone(), io.clock.clone(), config.node_id));
        let (api_metrics, cluster_view) =
            (ApiMetrics::default(), RaftView::new(raft.clone(), lease, io.clock.clone(), log_sizes, snapshot_bytes));
        // The registry's collector reads the context at each scrape: it
        // holds it weakly, as the context holds the registry.
        let api = Arc::new_cyclic(|me| ApiContext {
            node_id: config.node_id,
            state: state.clone(),
            proposer,
            ingest,
            cluster: Arc::new(cluster_view),
            admin: Arc::new(cluster::MembershipAdmin {
                raft: raft.clone(),
                state: state.clone(),
                clock: io.clock.clone(),
                client: std::sync::OnceLock::new(),
                shared_cluster_secret,
                peer_tls: io.tls.as_ref().map(|tls| tls.peer_roots.clone()),
                promotions: promote::Promotions::default(),
                peers: io.peers.clone(),
            }),
            clock: io.clock.clone(),
            entropy: io.entropy.clone(),
            in_flight,
            registry: hookraft_api::metrics::registry(me.clone(), &api_metrics, &delivery_metrics),
            delivery_metrics,
            metrics: api_metrics,
            lifecycle,
            metrics_top_endpoints: config.metrics_top_endpoints.min(hookraft_api::metrics::TOP_ENDPOINTS_MAX),
            tokens: config.tokens.clone(),
            allow_private_targets: config.allow_private_targets,
            secret_grace_ms: config.secret_grace_ms,
            admission: Admission::new(Budgets {
                max_pending: config.max_pending,
                memory_bytes: config.memory_budget_bytes,
            }),
            payloads,
            inbound: Default::default(),
        });
        let local_write: Arc<dyn hookraft_api::routes::internal::LocalWrite> =
            Arc::new(cluster::RaftLocalWrite { writer });
        let internal = Arc::new(InternalRpc {
            raft: raft.clone(),
            node_id: config.node_id,
            link_key: hookraft_raft::link::LinkKey::derive(cluster_secret.expose()),
            replay: Default::default(),
            clock: io.clock.clone(),
            local_write: local_write.clone(),
        });
        let app = hookraft_api::router(api).merge(hookraft_api::routes::internal::router(internal));
        let server = match listener {
            None => None,
            Some(listener) => {
                let members = listener::Members::default();
                tokio::spawn(listener::members::track(
                    raft.clone(),
                    config.peers.clone(),
                    config.node_id,
                    members.clone(),
                    stop.clone(),
                ));
                let tls = io.tls.as_ref().map(|tls| tokio_rustls::TlsAcceptor::from(tls.server.clone()));
                let limits = listener::Limits {
                    connections_per_address: config.connections_per_address,
                    ..listener::Limits::default()
                };
                Some(tokio::spawn(listener::serve(listener, app.clone(), tls, limits, members, stop.clone())))
            }
        };
        tracing::info!(node = config.node_id, %addr, tls = io.tls.is_some(), "hookraft node serving");
        Ok(NodeHandle { addr, state, raft, supervisor, shutdown, server, router: app, local_write })
    }
}

impl NodeHandle {
    /// Stops serving, stops the actors and Raft. Accepted events are already
    /// durable; deliveries in flight are re-sent after the next start.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        if let Some(mut server) = self.server
            && tokio::time::timeout(Duration::from_secs(10), &mut server).await.is_err()
        {
            // Connections still open past the bound end here.
            server.abort();
        }
        self.supervisor.stop(Some("node shutting down".into()));
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
    }

    /// Waits until the HTTP server ends (after `shutdown`, or on an IO error).
    pub async fn serve_until_stopped(&mut self) -> std::io::Result<()> {
        let Some(server) = self.server.as_mut() else { return std::future::pending().await };
        match server.await {
            Ok(result) => result,
            Err(join) => Err(std::io::Error::other(join.to_string())),
        }
    }

    /// Stops the node at once, as a crash would: no graceful drain. What
    /// survives is what its storage had made durable.
    pub async fn crash(self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = &self.server {
            server.abort();
        }
        // Stopping (not killing) runs the actors' post_stop, which aborts
        // attempts in flight: a crashed process sends nothing more.
        self.supervisor.stop(Some("node crashed".into()));
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
    }

    /// Resolves when Raft stopped on its own, with why: a storage error (a
    /// failing disk or history store) is fatal to it. The node cannot take
    /// part in the cluster any more; `hookraft serve` exits on it.
    pub fn raft_stopped(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut metrics = self.raft.metrics();
        async move {
            loop {
                if let Err(fatal) = &metrics.borrow_and_update().running_state {
                    return fatal.to_string();
                }
                if metrics.changed().await.is_err() {
                    return "raft's metrics ended".into();
                }
            }
        }
    }

    /// The Raft handle, for tests and the simulator.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }
}

/// [`ClusterView`] over openraft's metrics.
struct RaftView {
    raft: Raft,
    lease: Arc<lease::Lease>,
    clock: Arc<dyn hookraft_core::clock::Clock>,
    leader_changes: Arc<AtomicU64>,
    /// The log store's entry sizes and the current snapshot's bytes.
    log_sizes: hookraft_raft::log_size::LogSizeWatch,
    snapshot_bytes: Arc<AtomicU64>,
}

impl RaftView {
    fn new(
        raft: Raft,
        lease: Arc<lease::Lease>,
        clock: Arc<dyn hookraft_core::clock::Clock>,
        log_sizes: hookraft_raft::log_size::LogSizeWatch,
        snapshot_bytes: Arc<AtomicU64>,
    ) -> Self {
        let leader_changes = Arc::new(AtomicU64::new(0));
        let counter = leader_changes.clone();
        let mut metrics = raft.metrics();
        tokio::spawn(async move {
            let mut leader = hookraft_raft::known_leader(&metrics.borrow());
            while metrics.changed().await.is_ok() {
                let now = hookraft_raft::known_leader(&metrics.borrow());
                if now != leader {
                    leader = now;
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Self { raft, lease, clock, leader_changes, log_sizes, snapshot_bytes }
    }
}

impl ClusterView for RaftView {
    fn leader_id(&self) -> Option<NodeId> {
        hookraft_raft::known_leader(&self.raft.metrics().borrow())
    }

    fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    fn ready(&self) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        hookraft_raft::known_leader(&m).is_some() && m.last_applied.is_some() && self.lease_valid()
    }

    fn leader_changes(&self) -> u64 {
        self.leader_changes.load(Ordering::Relaxed)
    }

    fn lease_renewals(&self) -> u64 {
        self.lease.renewals_total.load(Ordering::Relaxed)
    }

    fn lease_expiries(&self) -> u64 {
        self.lease.expiries_total.load(Ordering::Relaxed)
    }

    fn lease_valid(&self) -> bool {
        self.lease.is_valid(self.clock.monotonic_ms())
    }

    fn log_figures(&self) -> LogFigures {
        let (applied, snapshot) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            (m.last_applied.map(|id| id.index), m.snapshot.map(|id| id.index))
        };
        LogFigures {
            applied_index: applied.unwrap_or(0),
            snapshot_index: snapshot.unwrap_or(0),
            snapshot_bytes: self.snapshot_bytes.load(Ordering::Relaxed),
            log_bytes_since_snapshot: self.log_sizes.bytes_after(snapshot),
        }
    }
}
