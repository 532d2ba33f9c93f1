//! Measuring: RSS, disk use, page-cache eviction, latency quantiles.

use anyhow::Result;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Measuring helpers
// ---------------------------------------------------------------------------

pub(crate) fn status_kib(field: &str) -> u64 {
    let text = fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Samples VmRSS every 10 ms; `take` returns the peak since the last take.
pub(crate) struct RssPeak {
    pub(crate) peak: Arc<AtomicU64>,
}

impl RssPeak {
    pub(crate) fn start() -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let p = peak.clone();
        thread::spawn(move || {
            loop {
                p.fetch_max(status_kib("VmRSS:"), Ordering::Relaxed);
                thread::sleep(Duration::from_millis(10));
            }
        });
        Self { peak }
    }

    pub(crate) fn take(&self) -> u64 {
        let now = status_kib("VmRSS:");
        self.peak.swap(now, Ordering::Relaxed).max(now)
    }
}

/// Bytes the files under `dir` occupy on disk (allocated blocks).
pub(crate) fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += disk_bytes(&e.path()),
                Ok(m) => total += m.blocks() * 512,
                Err(_) => {}
            }
        }
    }
    total
}

/// Drops the store's own files from the page cache, so reads after it go to
/// the disk unless the engine's 64 MiB cache has them.
pub(crate) fn evict(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                evict(&p);
            } else if let Ok(f) = fs::File::open(&p) {
                let _ = f.sync_all();
                let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
            }
        }
    }
}

pub(crate) fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// p50/p99/p999/max in microseconds of nanosecond samples.
pub(crate) fn lat(mut ns: Vec<u64>) -> String {
    ns.sort_unstable();
    format!(
        "n={} p50={:.1}us p99={:.1}us p999={:.1}us max={:.1}us",
        ns.len(),
        pct(&ns, 0.5),
        pct(&ns, 0.99),
        pct(&ns, 0.999),
        pct(&ns, 1.0)
    )
}

pub(crate) fn mb(b: u64) -> f64 {
    b as f64 / 1e6
}

/// Real time: the project bans `Instant::now` so that the node reads time
/// through its clock; a benchmark measures the real thing.
#[allow(clippy::disallowed_methods)]
pub(crate) fn now() -> Instant {
    Instant::now()
}

pub(crate) fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, u64)> {
    let t = now();
    let v = f()?;
    Ok((v, t.elapsed().as_nanos() as u64))
}
