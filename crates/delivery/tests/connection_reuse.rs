//! The webhook transport keeps connections alive: sequential attempts to one
//! endpoint reuse a pooled connection instead of opening one each.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use hookraft_delivery::http::HttpTransport;
use hookraft_delivery::transport::{Transport, WebhookRequest};
use tokio::net::{TcpListener, TcpStream};

/// A listener that counts accepted connections.
struct Counting {
    inner: TcpListener,
    accepted: Arc<AtomicUsize>,
}

impl axum::serve::Listener for Counting {
    type Io = TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (TcpStream, std::net::SocketAddr) {
        loop {
            if let Ok((stream, addr)) = self.inner.accept().await {
                self.accepted.fetch_add(1, Ordering::SeqCst);
                return (stream, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.inner.local_addr()
    }
}

#[tokio::test]
async fn sequential_attempts_to_one_endpoint_reuse_one_connection() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let listener = Counting { inner: TcpListener::bind("127.0.0.1:0").await.unwrap(), accepted: accepted.clone() };
    let addr = listener.inner.local_addr().unwrap();
    let app = Router::new().fallback(|| async { StatusCode::OK });
    tokio::spawn(async move { axum::serve(listener, app).await });

    let transport = HttpTransport::new(true).unwrap();
    for _ in 0..50 {
        let request = WebhookRequest {
            url: format!("http://{addr}/hook").into(),
            headers: vec![("content-type", "application/json".into())],
            body: Arc::from("{\"a\":1}".as_bytes()),
            timeout: Duration::from_secs(5),
            origin: Default::default(),
        };
        let response = transport.send(request).await.unwrap();
        assert_eq!(response.status, 200);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "50 sequential attempts should share one connection");
}
