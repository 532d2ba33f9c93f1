//! `hookraft-simulation`: run one seed or sweep many.
//!
//! Exit codes: 0 ok, 1 a safety violation, 2 a liveness violation, 3 the
//! simulator itself crashed (a panic or an error building the run).

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use hookraft_simulation::check::Kind;
use hookraft_simulation::faults::Shape;
use hookraft_simulation::{Break, Options, Report, run};

#[derive(Parser, Debug)]
#[command(name = "hookraft-simulation", about = "Deterministic simulation of hookraft clusters")]
struct Args {
    /// Run this seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Sweep this many seeds from a random start.
    #[arg(long)]
    seeds: Option<u64>,
    /// First seed of a sweep (default: a random one, printed).
    #[arg(long, requires = "seeds")]
    from: Option<u64>,
    /// Seeds run at once in a sweep, one thread each (default: one per core).
    #[arg(long, requires = "seeds")]
    jobs: Option<usize>,
    /// Print the run's trace.
    #[arg(long)]
    trace: bool,
    /// Nodes in the cluster (3 or 5).
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Virtual milliseconds of faults before healing (a run is then about
    /// a minute of virtual time).
    #[arg(long, default_value_t = 45_000)]
    fault_ms: u64,
    /// Chance in a hundred per 20 ms step that a producer posts (default:
    /// each seed draws one from 5 to 40).
    #[arg(long)]
    load: Option<u32>,
    /// Fault shapes to draw from, comma-separated (default: all of
    /// isolate-leader, split, one-way, crash, lossy, move-shard, stall,
    /// slow-disk, clock-step, membership).
    #[arg(long, value_delimiter = ',', value_parser = Shape::parse)]
    faults: Vec<Shape>,
    /// Store payloads in clear (nodes without a keyring) instead of sealed.
    #[arg(long)]
    no_keyring: bool,
    /// Deliberate bug: `fencing`, `ack-before-commit`, `split-batch`,
    /// `prune-active`, `send-sealed`, `ordering` or `inbound-dedupe` (needs
    /// `--features break`).
    #[arg(long, value_parser = parse_break)]
    r#break: Option<Break>,
}

fn parse_break(text: &str) -> Result<Break, String> {
    Break::ALL.into_iter().find(|b| b.name() == text).ok_or_else(|| {
        let names: Vec<&str> = Break::ALL.iter().map(|b| b.name()).collect();
        format!("unknown break `{text}`: one of {}", names.join(", "))
    })
}

/// The production node's allocator (see `crates/cli`), so the simulated
/// nodes allocate as the real ones do; about a tenth less CPU per seed.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EXIT_SAFETY: u8 = 1;
const EXIT_LIVENESS: u8 = 2;
const EXIT_CRASH: u8 = 3;

fn exit_code(kind: Kind) -> u8 {
    if kind == Kind::Safety { EXIT_SAFETY } else { EXIT_LIVENESS }
}

fn options(args: &Args, seed: u64) -> Options {
    let mut options = Options::new(seed);
    options.nodes = args.nodes;
    options.fault_phase_ms = args.fault_ms;
    options.print_trace = args.trace;
    options.post_percent = args.load;
    options.shapes = args.faults.clone();
    options.keyring = !args.no_keyring;
    options
}

/// Runs one seed, catching panics; `Err` carries the crash message.
fn run_seed(args: &Args, seed: u64) -> Result<Report, String> {
    let options = options(args, seed);
    let broken = args.r#break;
    match std::panic::catch_unwind(move || run(options, broken)) {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(error)) => Err(format!("{error:#}")),
        Err(panic) => Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()),
    }
}

fn replay_command(args: &Args, seed: u64) -> String {
    let mut command = format!(
        "cargo run -p hookraft-simulation -- --seed {seed} --nodes {} --fault-ms {}",
        args.nodes, args.fault_ms
    );
    if let Some(load) = args.load {
        command = format!("{command} --load {load}");
    }
    if !args.faults.is_empty() {
        let names: Vec<&str> = args.faults.iter().map(|s| s.name()).collect();
        command = format!("{command} --faults {}", names.join(","));
    }
    if args.no_keyring {
        command = format!("{command} --no-keyring");
    }
    if let Some(b) = args.r#break {
        command = format!("{command} --break {}", b.name());
        command = command.replace("-p hookraft-simulation", "-p hookraft-simulation --features break");
    }
    format!("RUSTFLAGS=\"--cfg tokio_unstable\" {command} --trace")
}

fn main() -> ExitCode {
    let args = Args::parse();
    // The nodes' own logs, for digging into one seed:
    // `HOOKRAFT_SIM_LOG=hookraft_delivery=debug hookraft-simulation --seed N`.
    if let Ok(filter) = std::env::var("HOOKRAFT_SIM_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    if let Some(count) = args.seeds {
        return sweep(&args, count);
    }
    let seed = args.seed.unwrap_or(1);
    match run_seed(&args, seed) {
        Err(crash) => {
            println!("seed={seed} verdict=crash error={crash}");
            println!("replay: {}", replay_command(&args, seed));
            ExitCode::from(EXIT_CRASH)
        }
        Ok(report) => {
            for v in &report.violations {
                println!("violation [{}] {:?}: {}", v.checker, v.kind, v.detail);
            }
            let verdict = match report.worst() {
                None => "ok",
                Some(Kind::Safety) => "safety",
                Some(Kind::Liveness) => "liveness",
            };
            let o = &report.ordering;
            let i = &report.inbound;
            println!(
                "acked={} sends={} faults={:?} payloads={:?} ordered={{deliveries: {}, dead: {}, skipped: {}, restarted_keys: {}}} inbound={{provider_events: {}, posts: {}, answered: {}, repeats_answered: {}, recreated: {}, ignored_stale: {}}} trace_lines={} virtual_ms={}",
                report.acked,
                report.sends,
                report.faults,
                report.payload_keys,
                o.deliveries,
                o.dead,
                o.skipped,
                o.restarted,
                i.posted,
                i.posts,
                i.answered,
                i.repeats_answered,
                i.recreated,
                i.ignored_stale,
                report.trace_lines,
                report.virtual_ms
            );
            println!("seed={seed} verdict={verdict} digest={}", report.digest);
            match report.worst() {
                None => ExitCode::SUCCESS,
                Some(kind) => {
                    println!("replay: {}", replay_command(&args, seed));
                    ExitCode::from(exit_code(kind))
                }
            }
        }
    }
}

/// What one seed of a sweep came to: `None` when ok, else its exit code
/// and a line saying why; and the virtual time it covered.
fn verdict(args: &Args, seed: u64) -> (Option<(u8, String)>, u64) {
    match run_seed(args, seed) {
        Err(crash) => (Some((EXIT_CRASH, format!("seed={seed} verdict=crash error={crash}"))), 0),
        Ok(report) => {
            let failure = report.worst().map(|kind| {
                let first = &report.violations[0];
                (exit_code(kind), format!("seed={seed} verdict={kind:?} [{}] {}", first.checker, first.detail))
            });
            (failure, report.virtual_ms)
        }
    }
}

/// Runs `count` seeds from a start, `jobs` at a time: every seed is its own
/// single-threaded runtime, so seeds on different threads share nothing and
/// each replays alone to the same digest.
fn sweep(args: &Args, count: u64) -> ExitCode {
    #[allow(clippy::disallowed_methods)] // the sweep's start is the one non-reproducible choice, and it is printed
    let start = args.from.unwrap_or_else(|| rand::random::<u32>() as u64);
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    #[allow(clippy::disallowed_methods)] // wall time only to report seeds per minute
    let began = Instant::now();
    println!("sweeping {count} seeds from {start} on {jobs} threads");
    let next = AtomicU64::new(start);
    let end = start + count;
    let failures = Mutex::new(Vec::new());
    let virtual_ms = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        break;
                    }
                    let (failure, covered_ms) = verdict(args, seed);
                    virtual_ms.fetch_add(covered_ms, Ordering::Relaxed);
                    if let Some((code, line)) = failure {
                        println!("{line}");
                        println!("replay: {}", replay_command(args, seed));
                        failures.lock().unwrap_or_else(|p| p.into_inner()).push((seed, code));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    let violations = failures.len() as u64;
    let wall = began.elapsed().as_secs_f64().max(1e-9);
    let virtual_s = virtual_ms.into_inner() as f64 / 1000.0;
    println!(
        "seeds={count} ok={} violations={violations} seeds_per_min={:.1} virtual_s_per_seed={:.1} virtual_to_wall={:.0}",
        count - violations,
        count as f64 / (wall / 60.0),
        virtual_s / count.max(1) as f64,
        virtual_s / wall,
    );
    // The worst failure decides the exit code: safety, then liveness, then crash.
    failures.iter().map(|(_, code)| *code).min().map_or(ExitCode::SUCCESS, ExitCode::from)
}
