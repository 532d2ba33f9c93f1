//! The run's trace: every network message, applied command, webhook send and
//! fault, in order. A running SHA-256 over it is the run's digest, so two
//! runs of one seed can be compared with one line; `--trace` prints it.

use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::time::Instant;

struct Inner {
    hasher: Sha256,
    lines: u64,
    print: bool,
    origin: Option<Instant>,
}

/// Shared by every part of a run. Cheap to clone.
#[derive(Clone)]
pub struct Trace {
    inner: Arc<Mutex<Inner>>,
}

impl Trace {
    pub fn new(print: bool) -> Self {
        Self { inner: Arc::new(Mutex::new(Inner { hasher: Sha256::new(), lines: 0, print, origin: None })) }
    }

    /// Sets the instant the virtual time of printed lines counts from.
    pub fn start(&self, origin: Instant) {
        self.lock().origin = Some(origin);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one event, stamped with virtual time.
    pub fn record(&self, line: impl AsRef<str>) {
        let mut inner = self.lock();
        let at_ms = inner.origin.map(|o| o.elapsed().as_millis()).unwrap_or(0);
        let line = line.as_ref();
        inner.hasher.update(at_ms.to_le_bytes());
        inner.hasher.update(line.as_bytes());
        inner.hasher.update(b"\n");
        inner.lines += 1;
        if inner.print {
            println!("{at_ms:>9} {line}");
        }
    }

    /// Hex digest of everything recorded so far.
    pub fn digest(&self) -> String {
        let inner = self.lock();
        inner.hasher.clone().finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
    }

    pub fn lines(&self) -> u64 {
        self.lock().lines
    }
}
