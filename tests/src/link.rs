//! Node-to-node requests as a node signs them (`hookraft_raft::link`),
//! for tests that play a peer, or a forger.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use hookraft_raft::link::{HELLO_PATH, LINK_HEADER, LINK_REPLY_HEADER, LinkKey, Stamp};
use reqwest::RequestBuilder;

use crate::node::TestNode;

/// The node id tests sign as.
pub const TEST_PEER_ID: u64 = 77;

/// The wall clock in milliseconds, as the nodes read it.
#[allow(clippy::disallowed_methods)] // tests read the real clock the node reads
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A fresh stamp addressed to node `to`: one run per test process, each
/// request the next number of it.
pub fn stamp(to: u64) -> Stamp {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed) + 1;
    Stamp { from: TEST_PEER_ID, to, time_ms: wall_ms(), boot: u64::from(std::process::id()) << 16, seq }
}

/// `POST path` to `node` (whose id is `to`) with `body`, signed with the
/// key of `secret`.
pub fn signed_post(node: &TestNode, to: u64, secret: &str, path: &str, body: Vec<u8>) -> RequestBuilder {
    let header = LinkKey::derive(secret).sign_request(&stamp(to), path, &body);
    node.client().post(node.url(path)).header(LINK_HEADER, header).body(body)
}

/// A stand-in for node `id` of the cluster of `secret` that proves itself
/// (answers a signed hello with a signed reply) and takes nothing else
/// (`503` for every other call): a member that can never catch up.
/// Answers on the returned `127.0.0.1:port` until the task is aborted.
pub async fn hello_only_peer(secret: &str, id: u64) -> (String, tokio::task::JoinHandle<()>) {
    let key = LinkKey::derive(secret);
    let hello = move |headers: HeaderMap| {
        let key = key.clone();
        async move {
            let header = headers.get(LINK_HEADER).and_then(|v| v.to_str().ok());
            match key.verify_request(header, id, wall_ms(), HELLO_PATH, b"") {
                Ok(stamp) => (StatusCode::OK, [(LINK_REPLY_HEADER, key.sign_reply(&stamp, 200, b""))]).into_response(),
                Err(_) => StatusCode::UNAUTHORIZED.into_response(),
            }
        }
    };
    let app = axum::Router::new()
        .route(HELLO_PATH, axum::routing::post(hello))
        .fallback(|| async { StatusCode::SERVICE_UNAVAILABLE });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, task)
}
