//! Measures candidate embedded stores for hookraft's finished webhook history
//! (events, deliveries, two secondary indexes and the state blob) under the
//! access pattern the design needs: one durable multi-table commit per
//! snapshot, point reads and 100-row pages, bounded retention deletes, a
//! point-in-time full scan while writes go on, and a bulk load from a stream.
//! Results and method: docs/store-choice.md.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use anyhow::Result;
use clap::Parser;

mod engines;
mod measure;
mod model;
mod phases;
mod workload;

use engines::*;
use measure::*;
use model::*;
use phases::*;
use workload::*;

// ---------------------------------------------------------------------------
// Phases
// ---------------------------------------------------------------------------

#[derive(Parser, Debug)]
#[command(about = "Embedded store benchmark for hookraft's finished history")]
struct Args {
    #[arg(long, value_enum)]
    engine: Kind,
    /// Database directory (wiped first); the bulk load uses DIR-bulk.
    #[arg(long, default_value = "tests/store-bench/data")]
    dir: PathBuf,
    /// Raw bytes (keys + values, without the blob) to append, in MB.
    #[arg(long, default_value_t = 2048)]
    raw_mb: u64,
    /// Events (each with one delivery and two index rows) per commit.
    #[arg(long, default_value_t = 20_000)]
    batch_events: u64,
    /// State blob written with every commit, in MB.
    #[arg(long, default_value_t = 4)]
    blob_mb: usize,
    /// The engine's cache, in MiB.
    #[arg(long, default_value_t = 64)]
    cache_mib: u64,
    /// fjall only: cap on all memtables together, in MiB (default: none).
    #[arg(long)]
    fjall_write_buffer_mib: Option<u64>,
    #[arg(long, default_value_t = 20_000)]
    reads: usize,
    #[arg(long, default_value_t = 2_000)]
    scans: usize,
    /// Retention steps of 512 events each.
    #[arg(long, default_value_t = 200)]
    retention_steps: u64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run only the bulk load (of the records a full run would append), so
    /// its peak RSS is its own.
    #[arg(long, conflicts_with = "skip_bulk")]
    bulk_only: bool,
    /// Run every phase but the bulk load.
    #[arg(long)]
    skip_bulk: bool,
    /// Keep the database directories afterwards.
    #[arg(long)]
    keep: bool,
}

/// Shared state of a run.
struct Run {
    args: Args,
    data: Gen,
    rss: RssPeak,
    blob_len: usize,
    /// Records `1..=records` are the initial data set.
    records: u64,
    /// The next record id to append after it (writers of phases 5–7).
    next_id: Arc<AtomicU64>,
}

impl Run {
    fn memory(&self) -> Memory {
        Memory {
            cache_bytes: self.args.cache_mib << 20,
            write_buffer_bytes: self.args.fjall_write_buffer_mib.map(|m| m << 20),
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let batches = (args.raw_mb * 1_000_000).div_ceil(MEAN_BYTES_PER_EVENT * args.batch_events);
    let run = Run {
        data: Gen { seed: args.seed },
        rss: RssPeak::start(),
        blob_len: args.blob_mb << 20,
        records: batches * args.batch_events,
        next_id: Arc::new(AtomicU64::new(batches * args.batch_events + 1)),
        args,
    };
    println!(
        "engine={:?} records={} batches={} batch_events={} blob={}MiB cache={}MiB fjall_write_buffer={:?}MiB seed={}",
        run.args.engine,
        run.records,
        batches,
        run.args.batch_events,
        run.args.blob_mb,
        run.args.cache_mib,
        run.args.fjall_write_buffer_mib,
        run.args.seed
    );
    println!("baseline rss={}KiB", run.rss.take());
    if !run.args.bulk_only {
        main_phases(&run)?;
    }
    if !run.args.skip_bulk {
        bulk_load(&run)?;
    }
    println!("process VmHWM={}KiB", status_kib("VmHWM:"));
    Ok(())
}
