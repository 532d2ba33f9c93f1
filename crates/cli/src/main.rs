//! `hookraft`: the command line.
//!
//! - `hookraft serve` runs a node (a single-node cluster with no flags:
//!   API on 127.0.0.1:8080, data in ./hookraft-data).
//! - `hookraft receiver` runs a small receiver that verifies signatures and
//!   prints each request, to watch deliveries arrive; with `--state-dir` or
//!   `--forward-to` it also deduplicates, keeps keys in order and passes
//!   each event on once (`hookraft-receiver`).
//! - `hookraft cluster ...` administers a cluster (status, move a shard,
//!   drain, add or remove a node) over the admin HTTP API.
//! - `hookraft keys ...` edits a payload keyring file (generate, list,
//!   activate, remove keys) and re-seals a cluster's payloads under its
//!   active key (rewrap).

mod admin;
mod allocator;
mod keys;
mod limits;
mod receiver;
mod runtimes;
mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "hookraft", version, about = "A clustered webhook delivery engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a hookraft node.
    Serve(Box<serve::ServeArgs>),
    /// Run a receiver that verifies and prints webhooks (and with
    /// --state-dir/--forward-to deduplicates and passes them on).
    Receiver(receiver::ReceiverArgs),
    /// Administer a cluster.
    Cluster(admin::ClusterArgs),
    /// Manage payload encryption keys: the keyring file, and rewrapping.
    Keys(keys::KeysArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOOKRAFT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn,sled=warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = allocator::runtime_builder().enable_all().build()?;
    match cli.command {
        Command::Serve(args) => {
            let runtimes = args.delivery_threads().map(runtimes::NodeRuntimes::start).transpose()?;
            let handles = runtimes.as_ref().map(runtimes::NodeRuntimes::handles).unwrap_or_default();
            // `runtimes` is dropped after the node stopped, outside any async context.
            runtime.block_on(serve::run(*args, handles))
        }
        Command::Receiver(args) => runtime.block_on(receiver::run(args)),
        Command::Cluster(args) => runtime.block_on(admin::run(args)),
        Command::Keys(args) => runtime.block_on(keys::run(args)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token and secret the command line takes, parsed and then
    /// formatted the ways a log line or a panic would.
    #[test]
    fn no_token_or_secret_shows_in_the_parsed_command_line() {
        let secrets = ["api-token-7f3a", "admin-token-91bc", "cluster-secret-55d0"];
        let serve = Cli::try_parse_from([
            "hookraft",
            "serve",
            "--api-token",
            secrets[0],
            "--admin-token",
            secrets[1],
            "--cluster-secret",
            secrets[2],
            "--peers",
            "1=a:1,2=b:2",
        ])
        .expect("parses");
        let admin = Cli::try_parse_from(["hookraft", "cluster", "status", "--token", secrets[1]]).expect("parses");
        let rewrap = Cli::try_parse_from(["hookraft", "keys", "rewrap", "--token", secrets[1]]).expect("parses");
        let receiver =
            Cli::try_parse_from(["hookraft", "receiver", "--secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
                .expect("parses");
        for cli in [serve, admin, rewrap, receiver] {
            for shown in [format!("{cli:?}"), format!("{cli:#?}")] {
                for secret in secrets.iter().chain(&["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]) {
                    assert!(!shown.contains(secret), "{secret} shows in {shown}");
                }
            }
        }
    }
}
