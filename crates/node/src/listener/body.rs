//! A request body with a deadline: reading it fails once the deadline has
//! passed and the client has not sent the rest. What has arrived is still
//! read; a handler that reads nothing is not affected.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a body read failed: its end had not arrived in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received within {} s", .0.as_secs_f64())]
pub struct BodyTimedOut(Duration);

/// `inner` until `timeout` after its creation (the request head's arrival).
pub struct Deadline<B> {
    inner: B,
    at: Instant,
    timeout: Duration,
    /// Made when the body first waits for the client.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<B> Deadline<B> {
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self { inner, at: Instant::now() + timeout, timeout, sleep: None }
    }
}

impl<B> Body for Deadline<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let at = this.at;
        ready!(this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at))).as_mut().poll(cx));
        Poll::Ready(Some(Err(BodyTimedOut(this.timeout).into())))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
