//! hookraft-simulation: whole hookraft clusters in one thread under virtual
//! time, driven by one seed.
//!
//! A tour:
//! - [`world`]: one run: build, fault phase, heal phase, checks.
//! - [`cluster`]: nodes started through the production `Node::start` with a
//!   simulated `Io`; crash and restart on the same in-memory disk.
//! - [`net`]: the network between nodes (delay, loss, duplication, cuts).
//! - [`receivers`]: scripted customer endpoints behind the `Transport` seam.
//! - [`clock`]: per-node virtual clocks with bounded skew and drift.
//! - [`workload`]: producers and an operator; the ledger of acknowledged events.
//! - [`provider`]: inbound sources and a provider posting signed events to them.
//! - [`faults`]: the seed's fault schedule.
//! - [`keys`]: the payload keyring every node holds, and its rotation.
//! - [`check`]: one module per invariant.
//! - [`trace`]: the ordered record of the run and its digest.
//!
//! Determinism: everything runs on a current-thread tokio runtime with
//! paused time; openraft's generator is seeded ([`hookraft_raft::seed_thread_rng`]);
//! every other choice comes from generators seeded from the run's seed. Built
//! with `RUSTFLAGS="--cfg tokio_unstable"`, tokio's own `select!` order is
//! seeded too, and a seed replays to the same digest.

pub mod check;
pub mod clock;
pub mod cluster;
pub mod faults;
pub mod keys;
pub mod net;
pub mod provider;
pub mod receivers;
pub mod trace;
pub mod workload;
pub mod world;

pub use world::{Options, Report};

/// Deliberate bugs to prove the checkers can fail (`--features break`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Break {
    /// `apply` accepts outcomes from stale tokens.
    Fencing,
    /// The API acknowledges ingest before the event commits.
    AckBeforeCommit,
    /// A batch of events is committed as two log entries.
    SplitBatch,
    /// Retention forgets old events whatever their deliveries' states.
    PruneActive,
    /// Endpoint actors send a payload's sealed bytes instead of its plaintext.
    SendSealed,
    /// Endpoint actors attempt an ordered delivery before its key's turn.
    Ordering,
    /// The inbound ingress does not recognise a repeated provider event.
    InboundDedupe,
}

impl Break {
    /// The name `--break` takes.
    pub fn name(self) -> &'static str {
        match self {
            Break::Fencing => "fencing",
            Break::AckBeforeCommit => "ack-before-commit",
            Break::SplitBatch => "split-batch",
            Break::PruneActive => "prune-active",
            Break::SendSealed => "send-sealed",
            Break::Ordering => "ordering",
            Break::InboundDedupe => "inbound-dedupe",
        }
    }

    pub const ALL: [Break; 7] = [
        Break::Fencing,
        Break::AckBeforeCommit,
        Break::SplitBatch,
        Break::PruneActive,
        Break::SendSealed,
        Break::Ordering,
        Break::InboundDedupe,
    ];
}

/// Runs one seed to completion on a fresh single-threaded runtime.
///
/// The deliberate bug (`broken`) is set on this thread, where the whole run
/// happens (`hookraft_core::breaks` keeps its switches per thread), so
/// seeds running at once on other threads may ask for other bugs; it stays
/// set on this thread until the next run sets it again.
pub fn run(options: Options, broken: Option<Break>) -> anyhow::Result<Report> {
    hookraft_raft::seed_thread_rng(options.seed);
    set_break(broken)?;
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&options.seed.to_le_bytes()));
    let runtime = builder.build()?;
    let report = runtime.block_on(world::run(options));
    runtime.shutdown_background();
    report
}

#[cfg(feature = "break")]
fn set_break(broken: Option<Break>) -> anyhow::Result<()> {
    hookraft_core::breaks::set_skip_fencing(broken == Some(Break::Fencing));
    hookraft_core::breaks::set_ack_before_commit(broken == Some(Break::AckBeforeCommit));
    hookraft_core::breaks::set_split_batch(broken == Some(Break::SplitBatch));
    hookraft_core::breaks::set_prune_active(broken == Some(Break::PruneActive));
    hookraft_core::breaks::set_send_sealed(broken == Some(Break::SendSealed));
    hookraft_core::breaks::set_out_of_turn(broken == Some(Break::Ordering));
    hookraft_core::breaks::set_inbound_dedupe(broken == Some(Break::InboundDedupe));
    Ok(())
}

#[cfg(not(feature = "break"))]
fn set_break(broken: Option<Break>) -> anyhow::Result<()> {
    match broken {
        None => Ok(()),
        Some(b) => anyhow::bail!("--break {b:?} needs a build with `--features break`"),
    }
}
