//! One connection's idle watch: the connection is closed once it has
//! waited for a request head longer than the header timeout, whether
//! the client sent part of one (a slow or stalled client) or nothing
//! (an idle keep-alive connection).
//!
//! A request marks the connection busy from its head's arrival until its
//! response is handed back; the wait for the next head starts then. One
//! timer per connection, armed for the end of the current wait and moved
//! only when it fires early, replaces a timer per request: requests pay
//! an atomic increment and a clock read each.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

/// What a connection's requests report to its watch.
#[derive(Debug)]
pub struct Activity {
    /// When the connection started (the watch's clock counts from it).
    origin: Instant,
    /// Requests being handled (0 or 1 for HTTP/1.1).
    busy: AtomicU32,
    /// When the connection began waiting for a head, in ms from `origin`.
    waiting_since_ms: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self { origin: Instant::now(), busy: AtomicU32::new(0), waiting_since_ms: AtomicU64::new(0) })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A request's head arrived: busy until the guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// When the connection stops waiting for a head unless one comes:
    /// `None` while a request is handled.
    fn deadline(&self, timeout: Duration) -> Option<Instant> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.waiting_since_ms.load(Ordering::Acquire));
        Some(self.origin + since + timeout)
    }
}

/// A request in hand; dropped when its response is handed back (or the
/// request is abandoned), which starts the wait for the next head.
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.waiting_since_ms.store(self.0.now_ms(), Ordering::Release);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's response future, holding the connection busy until it completes.
pub struct Tracked<F> {
    inner: F,
    busy: Option<Busy>,
}

impl<F> Tracked<F> {
    pub fn new(inner: F, busy: Busy) -> Self {
        Self { inner, busy: Some(busy) }
    }
}

impl<F: Future + Unpin> Future for Tracked<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let output = std::task::ready!(Pin::new(&mut self.inner).poll(cx));
        self.busy = None;
        Poll::Ready(output)
    }
}

/// Resolves once the connection has waited for a head longer than
/// `timeout`; never while a request is handled.
pub async fn expired(activity: &Activity, timeout: Duration) {
    loop {
        match activity.deadline(timeout) {
            Some(deadline) if deadline <= Instant::now() => return,
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            // Checked again a timeout later; its end starts a new wait.
            None => tokio::time::sleep(timeout).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_expires_a_timeout_after_its_last_response_and_never_while_busy() {
        let timeout = Duration::from_secs(20);
        let activity = Activity::new();
        let start = Instant::now();
        expired(&activity, timeout).await;
        assert_eq!(start.elapsed(), timeout, "a new connection waits one timeout for its first head");

        let activity = Activity::new();
        let busy = activity.busy();
        let watch = tokio::spawn({
            let activity = activity.clone();
            async move { expired(&activity, timeout).await }
        });
        tokio::time::sleep(timeout * 3).await;
        assert!(!watch.is_finished(), "a request handled for a long time keeps its connection");
        drop(busy);
        let answered = Instant::now();
        watch.await.expect("the watch ends");
        let waited = answered.elapsed();
        assert!(waited >= timeout && waited <= timeout * 2, "from the response on: {waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn each_response_starts_the_wait_again() {
        let timeout = Duration::from_secs(20);
        let activity = Activity::new();
        let watch = tokio::spawn({
            let activity = activity.clone();
            async move { expired(&activity, timeout).await }
        });
        for _ in 0..5 {
            tokio::time::sleep(timeout / 2).await;
            drop(activity.busy());
        }
        let last = Instant::now();
        watch.await.expect("the watch ends");
        assert_eq!(last.elapsed(), timeout, "a timeout after the last response, not the first");
    }
}
