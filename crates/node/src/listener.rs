//! The node's HTTP server: its own accept loop over hyper's HTTP/1.1
//! connections, with bounds on what clients may hold.
//!
//! - Connections: one from a cluster member's address ([`members`]) takes
//!   a permit of a pool of [`PEER_CONNECTIONS_MAX`]; any other, or a
//!   member's when that pool is empty, one of the public pool of
//!   [`CONNECTIONS_MAX`], and counts against its IP address's cap
//!   (`--connections-per-address`, [`CONNECTIONS_PER_ADDRESS_DEFAULT`]). A
//!   connection over its address's cap is closed at once; one that finds
//!   the public pool empty waits up to [`PERMIT_WAIT`] for a permit, at most
//!   [`WAITING_MAX`] at once, and is closed otherwise ([`admission`]). The
//!   accept loop itself never waits for a permit.
//! - TLS: the handshake runs in the connection's task once it is admitted
//!   ([`crate::tls::handshake`]).
//! - Requests: a request head must arrive within [`HEADER_READ_TIMEOUT`]
//!   of the connection's start or its last response, so a keep-alive
//!   connection idle that long is closed too; one watch per connection
//!   keeps that time ([`idle`]), not a timer per request. A body must arrive
//!   within [`BODY_READ_TIMEOUT`] of its head: reading it later fails and
//!   the handler answers 400 ([`body`]). Handlers are never cancelled.
//! - Each request carries its peer's address as a [`PeerAddr`].
//! - `stop` ends accepting and lets the requests in flight finish; aborting
//!   [`serve`]'s task ends every connection at once.
//!
//! HTTP/1.1 only, as the TLS configuration announces (ALPN).

pub mod admission;
pub mod body;
pub mod idle;
pub mod members;

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hookraft_api::routes::inbound::PeerAddr;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tower::util::Oneshot;

use admission::{Admission, Admitted};
pub use members::Members;

/// Public connections served at once at most.
pub const CONNECTIONS_MAX: usize = 4_096;
/// Connections from cluster members' addresses served at once at most,
/// besides the public ones.
pub const PEER_CONNECTIONS_MAX: usize = 256;
/// Public connections one IP address may hold unless
/// `--connections-per-address` says otherwise.
pub const CONNECTIONS_PER_ADDRESS_DEFAULT: usize = 256;
/// Accepted public connections waiting for a permit at most.
pub const WAITING_MAX: usize = 1_024;
/// Longest an accepted public connection waits for a permit.
pub const PERMIT_WAIT: Duration = Duration::from_secs(3);
/// Longest a client may take to send a request head, and longest a
/// keep-alive connection stays idle.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest a client may take to send a request body, from its head.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after a failed accept (out of file descriptors): no busy loop.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The bounds a server runs under; `Default` is the constants above.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The public pool's permits.
    pub connections_max: usize,
    /// The members' pool's permits.
    pub peer_connections_max: usize,
    /// Public connections one IP address may hold.
    pub connections_per_address: usize,
    /// Public connections waiting for a permit at most.
    pub waiting_max: usize,
    pub permit_wait: Duration,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections_max: CONNECTIONS_MAX,
            peer_connections_max: PEER_CONNECTIONS_MAX,
            connections_per_address: CONNECTIONS_PER_ADDRESS_DEFAULT,
            waiting_max: WAITING_MAX,
            permit_wait: PERMIT_WAIT,
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
        }
    }
}

/// What every connection task shares.
struct Server {
    app: Router,
    tls: Option<TlsAcceptor>,
    http: http1::Builder,
    admission: Admission,
    header_read_timeout: Duration,
    body_read_timeout: Duration,
}

/// Serves `app` on `tcp` (over TLS with `tls`) until `stop` turns true or
/// its sender is dropped, then waits for the connections to finish.
pub async fn serve(
    tcp: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    members: Members,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let server = Arc::new(Server::new(app, tls, &limits, members));
    let connections_stop = stop.clone();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            Some(_) = connections.join_next() => {}
            accepted = tcp.accept() => match accepted {
                Ok((stream, peer)) => server.clone().admit(stream, peer, &mut connections, &connections_stop),
                Err(error) => accept_failed(error).await,
            },
        }
    }
    drop(tcp);
    while connections.join_next().await.is_some() {}
    Ok(())
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

async fn accept_failed(error: io::Error) {
    tracing::warn!(%error, "accepting a connection failed");
    tokio::time::sleep(ACCEPT_RETRY).await;
}

impl Server {
    fn new(app: Router, tls: Option<TlsAcceptor>, limits: &Limits, members: Members) -> Self {
        let mut http = http1::Builder::new();
        // The connection's idle watch keeps the header timeout (`idle`).
        http.header_read_timeout(None);
        let admission = Admission::new(limits, members);
        let (header_read_timeout, body_read_timeout) = (limits.header_read_timeout, limits.body_read_timeout);
        Self { app, tls, http, admission, header_read_timeout, body_read_timeout }
    }

    /// Serves an accepted connection in a task of its own, or closes it.
    fn admit(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        connections: &mut JoinSet<()>,
        stop: &watch::Receiver<bool>,
    ) {
        match self.admission.admit(peer.ip()) {
            Ok(admitted) => {
                connections.spawn(self.connection(admitted, stream, peer, stop.clone()));
            }
            Err(why) => self.admission.refused(why, peer),
        }
    }

    async fn connection(
        self: Arc<Self>,
        admitted: Admitted,
        stream: TcpStream,
        peer: SocketAddr,
        mut stop: watch::Receiver<bool>,
    ) {
        let ticket = match admitted {
            Admitted::Now(ticket) => ticket,
            Admitted::AfterWait(waiting) => match self.wait(waiting.ticket(), &mut stop).await {
                Some(Ok(ticket)) => ticket,
                Some(Err(why)) => return self.admission.refused(why, peer),
                None => return,
            },
        };
        match &self.tls {
            None => self.serve_http(stream, peer, stop).await,
            Some(acceptor) => {
                if let Some(Some(tls)) = self.wait(crate::tls::handshake(acceptor, stream, peer), &mut stop).await {
                    self.serve_http(tls, peer, stop).await;
                }
            }
        }
        drop(ticket);
    }

    /// `step`'s outcome, or `None` when the server stops first.
    async fn wait<T>(&self, step: impl Future<Output = T>, stop: &mut watch::Receiver<bool>) -> Option<T> {
        tokio::select! {
            outcome = step => Some(outcome),
            () = stopped(stop) => None,
        }
    }

    async fn serve_http<S>(&self, stream: S, peer: SocketAddr, mut stop: watch::Receiver<bool>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = idle::Activity::new();
        let requests = Requests {
            app: self.app.clone(),
            peer,
            body_read_timeout: self.body_read_timeout,
            activity: activity.clone(),
        };
        let connection = self.http.serve_connection(TokioIo::new(stream), requests);
        let mut connection = std::pin::pin!(connection);
        let outcome = tokio::select! {
            outcome = connection.as_mut() => outcome,
            // Dropping the connection closes it.
            () = idle::expired(&activity, self.header_read_timeout) => return,
            () = stopped(&mut stop) => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(error) = outcome {
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
    }
}

/// The app as hyper calls it, one connection's requests.
#[derive(Clone)]
struct Requests {
    app: Router,
    peer: SocketAddr,
    body_read_timeout: Duration,
    activity: Arc<idle::Activity>,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Requests {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = idle::Tracked<Oneshot<Router, axum::extract::Request>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let busy = self.activity.busy();
        let mut request = request.map(|body| axum::body::Body::new(body::Deadline::new(body, self.body_read_timeout)));
        request.extensions_mut().insert(PeerAddr(self.peer));
        idle::Tracked::new(self.app.clone().oneshot(request), busy)
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpSocket;
    use tokio::time::{Instant, timeout};

    /// Bound on anything a test waits for that should come at once.
    const PROMPT: Duration = Duration::from_secs(10);

    /// A server on 127.0.0.1 answering `GET /ping` (`pong` and the peer's
    /// address), `POST /echo` (the body) and `GET /slow` (300 ms after
    /// it notifies `slow_started`).
    struct Subject {
        addr: SocketAddr,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<io::Result<()>>,
        slow_started: Arc<tokio::sync::Notify>,
    }

    impl Subject {
        async fn start(limits: Limits, members: Members) -> Self {
            let slow_started = Arc::new(tokio::sync::Notify::new());
            let started = slow_started.clone();
            let app = Router::new()
                .route(
                    "/ping",
                    get(|axum::extract::Extension(PeerAddr(peer)): axum::extract::Extension<PeerAddr>| async move {
                        format!("pong {}", peer.ip())
                    }),
                )
                .route("/echo", post(|body: axum::body::Bytes| async move { body }))
                .route(
                    "/slow",
                    get(|| async move {
                        started.notify_one();
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        "slow"
                    }),
                );
            let tcp = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = tcp.local_addr().expect("addr");
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(serve(tcp, app, None, limits, members, stopped));
            Self { addr, stop, task, slow_started }
        }

        /// A connection from `from` (any 127.0.0.0/8 address is loopback).
        async fn connect_from(&self, from: &str) -> TcpStream {
            let socket = TcpSocket::new_v4().expect("socket");
            socket.bind(SocketAddr::new(from.parse().expect("ip"), 0)).expect("bind the client");
            socket.connect(self.addr).await.expect("connect")
        }
    }

    /// Sends `request` and reads the answer until it contains `until`;
    /// `Err` with what was read when the connection closes first.
    async fn try_exchange(stream: &mut TcpStream, request: &str, until: &str) -> Result<String, String> {
        let mut answer = Vec::new();
        let reading = async {
            stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
            while !String::from_utf8_lossy(&answer).contains(until) {
                let mut buf = [0u8; 1024];
                match stream.read(&mut buf).await {
                    Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&answer))),
                    Ok(read) => answer.extend_from_slice(&buf[..read]),
                    Err(error) => return Err(error.to_string()),
                }
            }
            Ok(String::from_utf8_lossy(&answer).into_owned())
        };
        timeout(PROMPT, reading).await.expect("answered or closed in time")
    }

    async fn exchange(stream: &mut TcpStream, request: &str, until: &str) -> String {
        try_exchange(stream, request, until).await.expect("answered")
    }

    const PING: &str = "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n";

    async fn ping(stream: &mut TcpStream) -> String {
        exchange(stream, PING, "pong").await
    }

    /// Whether the server closed `stream` within `within` (EOF or reset).
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 64];
        loop {
            match timeout(within, stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }

    fn limits() -> Limits {
        Limits { permit_wait: Duration::from_millis(300), ..Limits::default() }
    }

    #[tokio::test]
    async fn connections_over_an_address_cap_are_closed_while_another_address_is_served() {
        let subject = Subject::start(Limits { connections_per_address: 2, ..limits() }, Members::default()).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = subject.connect_from("127.0.0.1").await;
            ping(&mut stream).await;
            held.push(stream);
        }
        let mut over = subject.connect_from("127.0.0.1").await;
        assert!(closed_within(&mut over, PROMPT).await, "the third connection of 127.0.0.1 is closed");
        let mut other = subject.connect_from("127.0.0.2").await;
        assert!(ping(&mut other).await.contains("pong 127.0.0.2"), "another address is served");
        // One of the held connections closes: its address may connect again.
        drop(held.pop());
        timeout(PROMPT, async {
            loop {
                let mut stream = subject.connect_from("127.0.0.1").await;
                if try_exchange(&mut stream, PING, "pong").await.is_ok() {
                    return;
                }
            }
        })
        .await
        .expect("a connection is served again");
        ping(&mut held[0]).await;
    }

    #[tokio::test]
    async fn a_member_is_served_while_the_public_pool_is_full() {
        let member: IpAddr = "127.0.0.3".parse().unwrap();
        // The default wait (3 s): the queued connection below must still wait when the pool frees.
        let limits = Limits { connections_max: 1, waiting_max: 1, ..Limits::default() };
        let subject = Subject::start(limits, Members::fixed([member])).await;
        let mut public = subject.connect_from("127.0.0.1").await;
        ping(&mut public).await;
        // The pool is full: the next public connection waits, then is closed.
        let mut waiting = subject.connect_from("127.0.0.2").await;
        let mut member_stream = subject.connect_from("127.0.0.3").await;
        assert!(ping(&mut member_stream).await.contains("pong 127.0.0.3"), "a member is served");
        let started = Instant::now();
        assert!(closed_within(&mut waiting, PROMPT).await, "the waiting connection is closed");
        assert!(started.elapsed() < PROMPT);
        // The waiting room held one: a further public connection is closed at once.
        let mut queued = subject.connect_from("127.0.0.2").await;
        let mut refused = subject.connect_from("127.0.0.2").await;
        assert!(closed_within(&mut refused, PROMPT).await, "a connection beyond the waiting room is closed");
        // Once the public connection closes, the queued one is served.
        drop(public);
        assert!(ping(&mut queued).await.contains("pong 127.0.0.2"), "the waiting connection is served");
    }

    #[tokio::test]
    async fn half_a_request_head_and_an_idle_connection_are_closed_after_the_header_timeout() {
        let header_read_timeout = Duration::from_millis(400);
        let subject = Subject::start(Limits { header_read_timeout, ..limits() }, Members::default()).await;
        let started = Instant::now();
        let mut half = subject.connect_from("127.0.0.1").await;
        half.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-").await.expect("write");
        let mut idle = subject.connect_from("127.0.0.1").await;
        ping(&mut idle).await;
        assert!(closed_within(&mut half, PROMPT).await, "the half-sent head is closed");
        assert!(closed_within(&mut idle, PROMPT).await, "the idle connection is closed");
        assert!(started.elapsed() >= header_read_timeout, "not before the timeout: {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_request_handled_longer_than_the_header_timeout_is_answered_and_its_connection_kept() {
        let header_read_timeout = Duration::from_millis(100);
        let subject = Subject::start(Limits { header_read_timeout, ..limits() }, Members::default()).await;
        let mut stream = subject.connect_from("127.0.0.1").await;
        let answer = exchange(&mut stream, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", "slow").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "the 300 ms handler is not cut off: {answer}");
        assert!(ping(&mut stream).await.contains("pong"), "the connection goes on after it");
        assert!(closed_within(&mut stream, PROMPT).await, "then idle, it is closed");
    }

    #[tokio::test]
    async fn a_body_not_received_in_time_is_refused_and_a_whole_one_echoed() {
        let body_read_timeout = Duration::from_millis(300);
        let subject = Subject::start(Limits { body_read_timeout, ..limits() }, Members::default()).await;
        let mut stream = subject.connect_from("127.0.0.1").await;
        let answer =
            exchange(&mut stream, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", "hello").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let started = Instant::now();
        let request = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc";
        let answer = exchange(&mut stream, request, "within").await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("not received within 0.3 s"), "{answer}");
        assert!(started.elapsed() >= body_read_timeout);
    }

    #[tokio::test]
    async fn stopping_finishes_requests_in_flight_and_takes_no_new_connection() {
        let subject = Subject::start(limits(), Members::default()).await;
        let mut stream = subject.connect_from("127.0.0.1").await;
        stream.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("write");
        timeout(PROMPT, subject.slow_started.notified()).await.expect("the request is in flight");
        subject.stop.send(true).expect("stop");
        let answer = exchange(&mut stream, "", "slow").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        timeout(PROMPT, subject.task).await.expect("the server ends").expect("joins").expect("serves");
        assert!(TcpStream::connect(subject.addr).await.is_err(), "the port no longer accepts");
    }
}
