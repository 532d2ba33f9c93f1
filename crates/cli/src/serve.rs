//! `hookraft serve`: flags and environment into a `NodeConfig`, then run
//! until SIGINT or SIGTERM.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use hookraft_core::payload::Keyring;
use hookraft_core::redact::{CLUSTER_SECRET_CHARS_MIN, SecretString};
use hookraft_node::auth::{Credential, Scope, Tokens, parse_tokens_file};
use hookraft_node::tls::Tls;
use hookraft_node::{Io, Node, NodeConfig, Runtimes};

use crate::limits::{OpenFiles, raise_open_files};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address of the HTTP API.
    #[arg(long, env = "HOOKRAFT_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the Raft log and snapshots live.
    #[arg(long, env = "HOOKRAFT_DATA_DIR", default_value = "./hookraft-data")]
    data_dir: PathBuf,
    /// A token of the api scope (`Authorization: Bearer <token>`): what
    /// producers do (events, endpoints, deliveries, sources), not cluster
    /// administration. At least 16 characters. A node on a non-loopback
    /// address needs a token (this one, --admin-token, --read-token or
    /// --tokens-file).
    #[arg(long, env = "HOOKRAFT_API_TOKEN", hide_env_values = true)]
    api_token: Option<SecretString>,
    /// A token of the read scope: `GET` under /v1, signing secrets left out.
    #[arg(long, env = "HOOKRAFT_READ_TOKEN", hide_env_values = true)]
    read_token: Option<SecretString>,
    /// A file of named tokens, one a line: `<name> <read|api|admin>
    /// <token or sha256:hex>`. Read again on SIGHUP, so a token is added
    /// or revoked without a restart.
    #[arg(long, env = "HOOKRAFT_TOKENS_FILE")]
    tokens_file: Option<PathBuf>,
    /// Allow webhook targets on loopback, private and link-local addresses.
    #[arg(long, env = "HOOKRAFT_ALLOW_PRIVATE_TARGETS")]
    allow_private_targets: bool,
    /// This node's id in the cluster.
    #[arg(long, env = "HOOKRAFT_NODE_ID", default_value_t = 1)]
    node_id: u64,
    /// How peers and clients reach this node (host:port); defaults to --listen.
    #[arg(long, env = "HOOKRAFT_ADVERTISE")]
    advertise: Option<String>,
    /// Every member of the cluster, this node included: `1=host:port,2=host:port,3=host:port`.
    /// Without it the node is a single-node cluster.
    #[arg(long, env = "HOOKRAFT_PEERS", value_parser = parse_peers)]
    peers: Option<BTreeMap<u64, String>>,
    /// Shared secret of the node-to-node RPC (at least 32 characters);
    /// required with several peers. It never travels: requests between
    /// nodes are signed with a key derived from it.
    #[arg(long, env = "HOOKRAFT_CLUSTER_SECRET", hide_env_values = true)]
    cluster_secret: Option<SecretString>,
    /// A token of the admin scope: everything under /v1/cluster/
    /// (membership, shard moves, drains, payload keys) and all else. Never
    /// the API token: without an admin token, membership changes are refused.
    #[arg(long, env = "HOOKRAFT_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<SecretString>,
    /// How long a heartbeat keeps this node's shard lease (ms).
    #[arg(long, env = "HOOKRAFT_LEASE_MS", default_value_t = hookraft_node::config::LEASE_MS_DEFAULT)]
    lease_ms: u64,
    /// How long an event is kept once all its deliveries are delivered or
    /// dead (`90s`, `36h`, `7d`), or `off`; events still being delivered are
    /// never forgotten. The leader's setting applies.
    #[arg(long, env = "HOOKRAFT_RETENTION", default_value = "7d", value_parser = parse_retention)]
    retention: Retention,
    /// Send webhooks on this many threads of their own, and run Raft on one
    /// of its own, so producers are answered at the same speed however
    /// busy delivery is [default: everything on one runtime]. It trades
    /// delivery rate once caught up for steady ingest latency; the figures
    /// are in docs/benchmarks.md.
    #[arg(long, env = "HOOKRAFT_DELIVERY_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    delivery_threads: Option<u16>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key); the
    /// node then calls its peers over HTTPS too.
    #[arg(long, env = "HOOKRAFT_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "HOOKRAFT_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM certificate of the authority that signed the nodes'
    /// certificates, the only one trusted for peers [default: the system's roots].
    #[arg(long, env = "HOOKRAFT_TLS_CA", requires = "tls_cert")]
    tls_ca: Option<PathBuf>,
    /// Refuse new events (503 with Retry-After) while this many deliveries
    /// are not yet delivered or dead; ingest resumes below 90% of it
    /// [default: the memory budget / 1 KiB].
    #[arg(long, env = "HOOKRAFT_MAX_PENDING", value_parser = clap::value_parser!(u64).range(1..))]
    max_pending: Option<u64>,
    /// Refuse new events (503 with Retry-After) while the retained events,
    /// deliveries and timelines are estimated above this size (`512MiB`,
    /// `4GiB`, `2G`, bytes); ingest resumes below 90% of it [default: half
    /// the machine's memory, or of its cgroup's limit when lower].
    #[arg(long, env = "HOOKRAFT_MEMORY_BUDGET", value_parser = parse_size)]
    memory_budget: Option<u64>,
    /// Take a snapshot of the replicated state once this many log entries
    /// were applied since the last one (the log before it is then purged).
    #[arg(long, env = "HOOKRAFT_SNAPSHOT_EVERY", default_value_t = hookraft_node::config::SNAPSHOT_EVERY_ENTRIES_DEFAULT,
          value_parser = clap::value_parser!(u64).range(10..=100_000_000))]
    snapshot_every: u64,
    /// Seal every payload (XChaCha20-Poly1305) with the active key of this
    /// keyring file before it is stored; every node of a cluster needs the
    /// same keys (`hookraft keys generate`). Without a keyring, payloads
    /// are stored in clear.
    #[arg(long, env = "HOOKRAFT_KEYRING", conflicts_with = "keyring_text")]
    keyring: Option<PathBuf>,
    /// The keyring's text itself, `;` between its lines
    /// (`active=k1; k1=<base64>`): for containers that pass secrets in the
    /// environment.
    #[arg(long, env = "HOOKRAFT_KEYRING_TEXT", hide_env_values = true)]
    keyring_text: Option<SecretString>,
    /// Show series of their own in /metrics for this many of the endpoints
    /// this node owns, those with the most attempts in the last hour; the
    /// rest are summed as endpoint="other" (0 to 100).
    #[arg(long, env = "HOOKRAFT_METRICS_TOP_ENDPOINTS", default_value_t = hookraft_node::config::METRICS_TOP_ENDPOINTS_DEFAULT,
          value_parser = clap::value_parser!(u16).range(0..=i64::from(hookraft_node::config::METRICS_TOP_ENDPOINTS_MAX)))]
    metrics_top_endpoints: u16,
    /// Pages of the history store (the finished events, on disk) kept in
    /// memory: `16MiB`, `256MiB`, at least `1MiB`. Reads of old events
    /// that miss it go to the file (and the OS's page cache).
    #[arg(long, env = "HOOKRAFT_HISTORY_CACHE", value_parser = hookraft_node::config::parse_history_cache,
          default_value = hookraft_node::config::HISTORY_CACHE_DEFAULT)]
    history_cache: usize,
    /// Close a new connection at once when its IP address already holds
    /// this many open; the cluster's nodes are not counted (1 to 65536).
    #[arg(long, env = "HOOKRAFT_CONNECTIONS_PER_ADDRESS",
          default_value_t = hookraft_node::listener::CONNECTIONS_PER_ADDRESS_DEFAULT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    connections_per_address: usize,
}

impl ServeArgs {
    /// Threads of a delivery runtime of its own, when asked for.
    pub fn delivery_threads(&self) -> Option<usize> {
        self.delivery_threads.map(usize::from)
    }
}

/// `--retention`: milliseconds, or `None` for `off`.
#[derive(Debug, Clone, Copy)]
struct Retention(Option<u64>);

fn parse_retention(text: &str) -> Result<Retention, String> {
    hookraft_node::config::parse_retention(text).map(Retention)
}

fn parse_size(text: &str) -> Result<u64, String> {
    hookraft_node::config::parse_size(text)
}

/// The memory this process may use: the machine's, or its cgroup's limit
/// when lower (a container's: cgroup v2's `memory.max`, else v1's
/// `memory.limit_in_bytes`); an assumed 2 GiB when neither can be read.
fn machine_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .or_else(|_| std::fs::read_to_string("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .ok();
    hookraft_node::config::machine_memory(meminfo.as_deref(), cgroup.as_deref()).unwrap_or_else(|| {
        tracing::warn!("cannot read the machine's memory; budgets assume 2 GiB");
        hookraft_node::config::MACHINE_MEMORY_ASSUMED
    })
}

fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, String> {
    hookraft_node::config::parse_peers(text)
}

/// The tokens of the flags, each checked for strength.
fn flag_tokens(args: &ServeArgs) -> anyhow::Result<Vec<Credential>> {
    let flags = [
        ("api-token", Scope::Api, &args.api_token),
        ("admin-token", Scope::Admin, &args.admin_token),
        ("read-token", Scope::Read, &args.read_token),
    ];
    let mut credentials = Vec::new();
    for (name, scope, token) in flags {
        if let Some(token) = token {
            credentials.push(Credential::new(name, scope, token).map_err(|e| anyhow::anyhow!("--{name}: {e}"))?);
        }
    }
    Ok(credentials)
}

/// The tokens of `--tokens-file`; warns when others may read the file.
fn read_tokens_file(path: &std::path::Path) -> anyhow::Result<Vec<Credential>> {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0);
    if mode & 0o077 != 0 {
        tracing::warn!(file = %path.display(), mode = format!("{:o}", mode & 0o777), "the tokens file can be read by other users; chmod 600 it");
    }
    parse_tokens_file(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Reads the tokens file again on each SIGHUP; a file that no longer
/// parses leaves the tokens as they were.
fn reload_tokens_on_hangup(path: PathBuf, tokens: Arc<Tokens>) -> anyhow::Result<()> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match read_tokens_file(&path) {
                Ok(credentials) => {
                    let count = tokens.replace_file_tokens(credentials);
                    tracing::info!(file = %path.display(), tokens = count, "tokens file read again");
                }
                Err(error) => tracing::error!(%error, "tokens file not read again; the tokens stay as they were"),
            }
        }
    });
    Ok(())
}

pub async fn run(args: ServeArgs, runtimes: Runtimes) -> anyhow::Result<()> {
    let tokens = Arc::new(Tokens::new(flag_tokens(&args)?));
    if let Some(path) = &args.tokens_file {
        let count = tokens.replace_file_tokens(read_tokens_file(path)?);
        tracing::info!(file = %path.display(), tokens = count, "tokens file read");
        reload_tokens_on_hangup(path.clone(), tokens.clone())?;
    }
    if !args.listen.ip().is_loopback() && !tokens.any() {
        bail!(
            "refusing to serve on {} without a token: set --api-token (HOOKRAFT_API_TOKEN), --admin-token \
             or --tokens-file (a node without a token may only listen on a loopback address)",
            args.listen
        );
    }
    if let Some(secret) = &args.cluster_secret {
        secret
            .check_strength("--cluster-secret", CLUSTER_SECRET_CHARS_MIN)
            .map_err(|e| anyhow::anyhow!("{e} (set the same one on every node)"))?;
    }
    let peers = args.peers.unwrap_or_default();
    if !peers.is_empty() && !peers.contains_key(&args.node_id) {
        bail!("--peers must list this node ({}) too", args.node_id);
    }
    if peers.len() > 1 && args.cluster_secret.is_none() {
        bail!("a cluster needs --cluster-secret (or HOOKRAFT_CLUSTER_SECRET) shared by its nodes");
    }
    if !(1_000..=600_000).contains(&args.lease_ms) {
        bail!("--lease-ms must be between 1000 and 600000");
    }
    match raise_open_files() {
        OpenFiles::Raised { from, to } => tracing::info!(from, to, "raised the open-files limit"),
        OpenFiles::Kept(limit) => tracing::debug!(limit, "open-files limit"),
        OpenFiles::Unchanged => {
            tracing::warn!("could not raise the open-files limit; a busy node may run out of sockets")
        }
    }
    let mut config = NodeConfig::single(args.listen);
    config.node_id = args.node_id;
    config.advertise = args.advertise.or_else(|| peers.get(&args.node_id).cloned());
    config.peers = peers;
    config.cluster_secret = args.cluster_secret;
    config.lease_ms = args.lease_ms;
    config.snapshot_every_entries = args.snapshot_every;
    config.retention_ms = args.retention.0;
    config.tokens = tokens;
    config.allow_private_targets = args.allow_private_targets;
    config.metrics_top_endpoints = usize::from(args.metrics_top_endpoints);
    config.history_cache_bytes = args.history_cache;
    config.connections_per_address = args.connections_per_address;
    let machine = machine_memory();
    let (max_pending, memory_budget) = hookraft_node::config::default_budgets(machine);
    config.memory_budget_bytes = args.memory_budget.unwrap_or(memory_budget);
    // Without --max-pending, it follows the memory budget, given or derived.
    config.max_pending = args.max_pending.unwrap_or_else(|| match args.memory_budget {
        Some(bytes) => hookraft_node::config::max_pending_for(bytes),
        None => max_pending,
    });
    tracing::info!(
        machine_memory = machine,
        max_pending = config.max_pending,
        memory_budget = config.memory_budget_bytes,
        "ingest budgets"
    );
    tracing::info!(bytes = config.history_cache_bytes, "history store cache");
    config.keyring = match (&args.keyring, &args.keyring_text) {
        (Some(path), _) => Some(Arc::new(hookraft_node::keyring::load(path).map_err(anyhow::Error::msg)?)),
        (None, Some(text)) => {
            Some(Arc::new(Keyring::parse(text.expose()).map_err(|e| anyhow::anyhow!("--keyring-text: {e}"))?))
        }
        (None, None) => None,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Tls::load(cert, key, args.tls_ca.as_deref()).map_err(anyhow::Error::msg)?),
        _ => None,
    };
    let io = Io::production(
        args.data_dir.clone(),
        args.allow_private_targets,
        config.node_id,
        config.cluster_secret.clone(),
        runtimes,
        tls,
    )?;
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let mut node = Node::start(config, io, Some(listener)).await.context("starting the node")?;
    let scheme = if args.tls_cert.is_some() { "https" } else { "http" };
    tracing::info!(data_dir = %args.data_dir.display(), "ready: try `curl {scheme}://{}/v1/cluster`", node.addr);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let raft_stopped = node.raft_stopped();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; shutting down"),
        _ = terminate.recv() => tracing::info!("terminated; shutting down"),
        result = node.serve_until_stopped() => {
            result.context("http server")?;
            return Ok(());
        }
        why = raft_stopped => {
            tracing::error!(%why, "raft stopped on a storage error; the node exits so that it can be restarted");
            node.shutdown().await;
            bail!("raft stopped: {why}");
        }
    }
    node.shutdown().await;
    Ok(())
}
