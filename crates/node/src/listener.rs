//! The API's listener with a bound on open connections.
//!
//! `axum::serve` accepts every connection it is offered, and each one can
//! hold a handler waiting on the ingest queue with a body of up to 1 MiB:
//! without a bound, a client's open connections are the node's memory. The
//! listener takes a permit per connection and stops accepting while all
//! [`CONNECTIONS_MAX`] are taken; further clients wait in the kernel's
//! accept backlog (and are refused once it is full) until one closes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::connect_info::{ConnectInfo, Connected, IntoMakeServiceWithConnectInfo};
use axum::serve::{IncomingStream, Listener};
use hookraft_api::routes::inbound::PeerAddr;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections the API serves at once at most.
pub const CONNECTIONS_MAX: usize = 4_096;

/// A listener that accepts while it has permits left.
pub struct Limited<L> {
    inner: L,
    permits: Arc<Semaphore>,
}

impl<L> Limited<L> {
    pub fn new(inner: L, connections_max: usize) -> Self {
        Self { inner, permits: Arc::new(Semaphore::new(connections_max)) }
    }

    /// Connections that could still be accepted now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

impl<L: Listener> Listener for Limited<L> {
    type Io = Permitted<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // The semaphore is never closed, so acquiring only waits.
        let permit = self.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let (io, addr) = self.inner.accept().await;
        (Permitted { io, _permit: permit }, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// The peer's address of a connection accepted by a [`Limited`] listener.
#[derive(Debug, Clone, Copy)]
pub struct Peer(std::net::SocketAddr);

impl<L: Listener<Addr = std::net::SocketAddr>> Connected<IncomingStream<'_, Limited<L>>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Limited<L>>) -> Self {
        Peer(*stream.remote_addr())
    }
}

/// `app` served with each request's peer address in its extensions as a
/// [`PeerAddr`], for the API (sources' allowlists).
pub fn with_peers(app: Router) -> IntoMakeServiceWithConnectInfo<Router, Peer> {
    let app = app.layer(axum::middleware::map_request(|mut request: axum::extract::Request| async move {
        if let Some(ConnectInfo(Peer(addr))) = request.extensions().get::<ConnectInfo<Peer>>().copied() {
            request.extensions_mut().insert(PeerAddr(addr));
        }
        request
    }));
    app.into_make_service_with_connect_info::<Peer>()
}

/// A connection holding its permit until it is dropped.
pub struct Permitted<T> {
    io: T,
    _permit: OwnedSemaphorePermit,
}

impl<T: AsyncRead + Unpin> AsyncRead for Permitted<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Permitted<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    #[tokio::test]
    async fn accepts_up_to_the_bound_and_again_once_a_connection_closes() {
        let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = tcp.local_addr().expect("addr");
        let mut listener = Limited::new(tcp, 2);
        let mut clients = Vec::new();
        let mut served = Vec::new();
        for _ in 0..2 {
            clients.push(TcpStream::connect(addr).await.expect("connect"));
            served.push(listener.accept().await.0);
        }
        assert_eq!(listener.available(), 0);
        // A third client connects (the kernel's backlog) but is not accepted.
        let mut third = TcpStream::connect(addr).await.expect("connect");
        tokio::select! {
            biased;
            _ = listener.accept() => panic!("accepted past the bound"),
            () = tokio::task::yield_now() => {}
        }
        assert_eq!(listener.available(), 0);
        // One served connection closes: the third is accepted and served.
        drop(served.remove(0));
        let (mut io, _) = tokio::time::timeout(Duration::from_secs(30), listener.accept()).await.expect("accepted");
        third.write_all(b"ping").await.expect("write");
        let mut read = [0u8; 4];
        io.read_exact(&mut read).await.expect("read");
        assert_eq!(&read, b"ping");
        assert_eq!(listener.available(), 0);
        drop(io);
        assert_eq!(listener.available(), 1);
    }
}
