//! `hookraft serve`: flags and environment into a `NodeConfig`, then run
//! until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use hookraft_node::{Io, Node, NodeConfig};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address of the HTTP API.
    #[arg(long, env = "HOOKRAFT_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the Raft log and snapshots live.
    #[arg(long, env = "HOOKRAFT_DATA_DIR", default_value = "./hookraft-data")]
    data_dir: PathBuf,
    /// Require `Authorization: Bearer <token>` on every /v1 route.
    /// Mandatory when listening on a non-loopback address.
    #[arg(long, env = "HOOKRAFT_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// Allow webhook targets on loopback, private and link-local addresses.
    #[arg(long, env = "HOOKRAFT_ALLOW_PRIVATE_TARGETS")]
    allow_private_targets: bool,
    /// This node's id in the cluster.
    #[arg(long, env = "HOOKRAFT_NODE_ID", default_value_t = 1)]
    node_id: u64,
}

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.api_token.as_deref().is_some_and(str::is_empty) {
        bail!("--api-token is empty");
    }
    if !args.listen.ip().is_loopback() && args.api_token.is_none() {
        bail!(
            "refusing to serve on {} without an API token: set --api-token or HOOKRAFT_API_TOKEN \
             (a node without a token may only listen on a loopback address)",
            args.listen
        );
    }
    let mut config = NodeConfig::single(args.listen);
    config.node_id = args.node_id;
    config.api_token = args.api_token;
    config.allow_private_targets = args.allow_private_targets;
    let io = Io::production(args.data_dir.clone(), args.allow_private_targets)?;
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    let mut node = Node::start(config, io, listener).await.context("starting the node")?;
    tracing::info!(data_dir = %args.data_dir.display(), "ready: try `curl http://{}/v1/cluster`", node.addr);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; shutting down"),
        _ = terminate.recv() => tracing::info!("terminated; shutting down"),
        result = node.serve_until_stopped() => {
            result.context("http server")?;
            return Ok(());
        }
    }
    node.shutdown().await;
    Ok(())
}
