//! The node's `Io` bundle (ARCHITECTURE §8.1): everything through which a node
//! touches time, randomness, the webhook network and storage. Production
//! code builds [`Io::production`]; the simulator builds its own.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hookraft_core::clock::Clock;
use hookraft_core::entropy::Entropy;
use hookraft_core::redact::SecretString;
use hookraft_delivery::transport::Transport;
use hookraft_raft::ApplyObserver;
use hookraft_raft::http_network::{HttpNetwork, LinkSender};

use crate::cluster::{HttpPeers, PeerClient};

/// The system clock: wall time from `SystemTime`, monotonic from `Instant`.
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place production reads the monotonic clock
    pub fn new() -> Self {
        Self { origin: Instant::now() }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place production reads the wall clock
    fn wall_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

/// Where the node keeps its Raft log and snapshots.
#[derive(Debug, Clone)]
pub enum Storage {
    /// A sled database in this directory.
    Sled(PathBuf),
    /// An in-memory disk that loses unflushed writes on a crash (simulation).
    Memory(hookraft_raft::MemDisk),
}

/// Time, randomness, the networks and storage of one node (ARCHITECTURE §8.1).
/// `N` is the Raft network: HTTP between processes in production, an
/// in-memory network in the simulator.
#[derive(Clone)]
pub struct Io<N = HttpNetwork> {
    pub clock: Arc<dyn Clock>,
    /// Seeds the node's generators of things nobody has to guess (jitter,
    /// election timeouts).
    pub seed: u64,
    /// Signing and cluster secrets, and the random part of every id a
    /// client sees: the OS in production, a seeded source in the simulator.
    pub entropy: Arc<dyn Entropy>,
    /// Where webhooks go.
    pub transport: Arc<dyn Transport>,
    pub storage: Storage,
    /// openraft's RPCs to the other nodes.
    pub network: N,
    /// Writes forwarded to the leader.
    pub peers: Arc<dyn PeerClient>,
    /// Sees every applied command after the node's own observer (checkers).
    pub apply_tap: Option<Arc<dyn ApplyObserver>>,
    /// Where Raft and the deliveries run; by default with everything else
    /// on the caller's runtime.
    pub runtimes: Runtimes,
    /// Serve HTTPS, and call peers over it when it names their authority.
    pub tls: Option<crate::tls::Tls>,
}

/// The runtimes a node's work is spread over. `None` runs that part with
/// everything else on the caller's runtime: the simulator's way (one
/// thread, so a seed replays exactly) and `hookraft serve`'s default.
///
/// On one runtime, every hop of a commit and of an ingest request queues
/// behind the ready delivery tasks: with the node delivering flat out, one
/// commit took 15 ms of which 2 ms was work, and producers waited as long
/// as delivery kept the cores busy. `hookraft serve --delivery-threads N`
/// gives Raft and the deliveries runtimes of their own, so ingest keeps
/// its speed whatever delivery does, at the price of what the node
/// delivers on few cores (docs/benchmarks-history.md, "Raft and deliveries
/// on runtimes of their own").
#[derive(Clone, Default)]
pub struct Runtimes {
    /// Raft's tasks (its core, log IO, state machine, replication) and the
    /// log writer.
    pub consensus: Option<tokio::runtime::Handle>,
    /// The delivery supervisor, the endpoint actors, their attempts and
    /// their connections, and the batcher that commits their outcomes.
    pub delivery: Option<tokio::runtime::Handle>,
}

/// Runs `future` on `runtime` and waits for its result; the tasks it
/// spawns stay on that runtime. `None` awaits it in place. A task that
/// panicked, or the future's error, comes back as text.
pub(crate) async fn run_on<F, T, E>(runtime: Option<&tokio::runtime::Handle>, future: F) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let output = match runtime {
        Some(runtime) => runtime.spawn(future).await.map_err(|e| e.to_string())?,
        None => future.await,
    };
    output.map_err(|e| e.to_string())
}

/// Spawns `task` on `runtime`, or on the caller's when `None`.
pub(crate) fn spawn_on<F>(runtime: Option<&tokio::runtime::Handle>, task: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    match runtime {
        Some(runtime) => drop(runtime.spawn(task)),
        None => drop(tokio::spawn(task)),
    }
}

impl Io<HttpNetwork> {
    /// The system clock, OS entropy, reqwest for webhooks, HTTP between
    /// nodes signed with the cluster secret's key as node `node_id`, sled
    /// under `data_dir`, spread over `runtimes`.
    pub fn production(
        data_dir: PathBuf,
        allow_private_targets: bool,
        node_id: hookraft_core::ids::NodeId,
        cluster_secret: Option<SecretString>,
        runtimes: Runtimes,
        tls: Option<crate::tls::Tls>,
    ) -> Result<Self, crate::NodeError> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let transport = hookraft_delivery::http::HttpTransport::new(allow_private_targets)
            .map_err(|e| crate::NodeError::Transport(e.to_string()))?;
        let roots = tls.as_ref().map(|tls| tls.peer_roots.clone());
        // With TLS on, peers are called over HTTPS, trusting `--tls-ca` or
        // else the system's roots.
        let https = tls.is_some();
        let client = hookraft_raft::http_network::rpc_client_trusting(roots.unwrap_or_default())
            .map_err(|e| crate::NodeError::Transport(e.to_string()))?;
        let link = cluster_secret.as_ref().map(|secret| {
            let mut boot = [0u8; 8];
            OsEntropy.fill(&mut boot);
            Arc::new(LinkSender::new(secret.expose(), node_id, u64::from_le_bytes(boot), clock.clone()))
        });
        let mut network = HttpNetwork::with_client(client, link.clone());
        if https {
            network = network.over_https();
        }
        let peers = HttpPeers { client: network.client().clone(), link, https };
        Ok(Self {
            clock,
            // Jitter and timeouts derive from this seed; secrets and ids
            // draw from the OS each time.
            seed: os_seed(),
            entropy: Arc::new(OsEntropy),
            transport: Arc::new(transport),
            storage: Storage::Sled(data_dir),
            network,
            peers: Arc::new(peers),
            apply_tap: None,
            runtimes,
            tls,
        })
    }
}

#[allow(clippy::disallowed_methods)] // the seed of the generators nobody has to guess
fn os_seed() -> u64 {
    rand::random::<u64>()
}

/// The operating system's generator (`getrandom`), drawn on every call.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, dest: &mut [u8]) {
        use rand::TryRng;
        // Without the OS's entropy no secret can be made safely: stop
        // rather than hand out a guessable one.
        if let Err(error) = rand::rngs::SysRng.try_fill_bytes(dest) {
            panic!("the operating system's random source failed: {error}");
        }
    }
}

/// A seeded source standing in for the OS's, so a seed replays the same
/// ids and secrets: the simulator's and tests' only. Its secrets hold no
/// more entropy than its 64-bit seed.
#[derive(Debug)]
pub struct SeededEntropy(std::sync::Mutex<rand::rngs::StdRng>);

impl SeededEntropy {
    pub fn new(seed: u64) -> Self {
        use rand::SeedableRng;
        Self(std::sync::Mutex::new(rand::rngs::StdRng::seed_from_u64(seed)))
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, dest: &mut [u8]) {
        use rand::Rng;
        self.0.lock().unwrap_or_else(|p| p.into_inner()).fill_bytes(dest);
    }
}
