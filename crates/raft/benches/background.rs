//! What a background thread costs the node's runtime: how long a busy
//! runtime's round trip takes while CPU-bound background threads (one per
//! core, as a snapshot's encoding and a purge's removal can be) spin at a
//! nice value of 10 (how the snapshot's encoding ran first), or run paced
//! by [`hookraft_raft::background::Pace`] on its threads (how they run now).
//!
//! A two-worker runtime plays a request's path: every millisecond a thread
//! outside it sends a task a message; the task works for 400 µs, hands it to
//! a second task that works as long, and waits for its answer. Prints the
//! round trip's p50, p99 and maximum (from the send to the answer) for each
//! case.
//!
//! `cargo bench -p hookraft-raft --bench background`
#![allow(clippy::disallowed_methods, reason = "a benchmark measures real time; the clock seam is for production code")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hookraft_raft::background::Pace;

const ROUND_TRIPS: usize = 3_000;
const NICE: i32 = 10;
const WORK_PER_TASK: Duration = Duration::from_micros(400);

#[derive(Clone, Copy, Debug)]
enum Hogs {
    None,
    Nice,
    Paced,
}

/// Spins until `stop`, as CPU-bound background work does.
fn spin(stop: &AtomicBool) {
    let mut x = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i));
        }
    }
}

/// Keeps the calling thread busy for `span`.
fn busy(span: Duration) {
    let started = Instant::now();
    while started.elapsed() < span {
        std::hint::spin_loop();
    }
}

fn start_hogs(kind: Hogs, stop: &Arc<AtomicBool>) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    for _ in 0..cores {
        let stop = stop.clone();
        match kind {
            Hogs::None => {}
            Hogs::Nice => {
                std::thread::spawn(move || {
                    let thread = rustix::thread::gettid();
                    rustix::process::setpriority_process(Some(thread), NICE).expect("lower the priority");
                    spin(&stop);
                });
            }
            Hogs::Paced => {
                let paced = move || {
                    let mut pace = Pace::on();
                    while !stop.load(Ordering::Relaxed) {
                        busy(Duration::from_micros(100));
                        pace.breathe();
                    }
                };
                hookraft_raft::background::spawn("bench-paced", paced).expect("start a background thread");
            }
        }
    }
}

fn round_trips(runtime: &tokio::runtime::Runtime) -> Vec<Duration> {
    let (to_first, mut first_inbox) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let measured = runtime.spawn(async move {
        let (to_second, mut second_inbox) = tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<()>>();
        tokio::spawn(async move {
            while let Some(reply) = second_inbox.recv().await {
                busy(WORK_PER_TASK);
                let _ = reply.send(());
            }
        });
        let mut taken = Vec::with_capacity(ROUND_TRIPS);
        while let Some(sent) = first_inbox.recv().await {
            busy(WORK_PER_TASK);
            let (reply, answer) = tokio::sync::oneshot::channel();
            to_second.send(reply).expect("second task alive");
            answer.await.expect("second task answers");
            taken.push(sent.elapsed());
        }
        taken
    });
    // The outside world: a thread of normal priority that wakes every
    // millisecond and hands the runtime a message, as a socket would.
    for _ in 0..ROUND_TRIPS {
        std::thread::sleep(Duration::from_millis(1));
        to_first.send(Instant::now()).expect("first task alive");
    }
    drop(to_first);
    runtime.block_on(measured).expect("measuring task")
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    println!(
        "round trip of a message through two tasks, {ROUND_TRIPS} of them, 2-worker runtime, one spinning thread per core"
    );
    for kind in [Hogs::None, Hogs::Nice, Hogs::Paced, Hogs::None] {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let stop = Arc::new(AtomicBool::new(false));
        start_hogs(kind, &stop);
        let started = Instant::now();
        let mut taken = round_trips(&runtime);
        stop.store(true, Ordering::Relaxed);
        taken.sort();
        let label = match kind {
            Hogs::None => "no background threads".to_owned(),
            Hogs::Nice => format!("background threads at nice {NICE}"),
            Hogs::Paced => "background threads, paced".to_owned(),
        };
        println!(
            "{label:<40} p50 {:>8.1} µs  p99 {:>8.1} µs  max {:>8.1} µs  ({:.1} s)",
            quantile(&taken, 0.5).as_secs_f64() * 1e6,
            quantile(&taken, 0.99).as_secs_f64() * 1e6,
            taken.last().expect("round trips").as_secs_f64() * 1e6,
            started.elapsed().as_secs_f64()
        );
        // Let the spinning threads see the stop before the next case.
        std::thread::sleep(Duration::from_millis(50));
    }
}
