//! The transport's own tests: the peers' base URL, redaction, the run's
//! numbering, what a forged peer is sent, and unreachable peers.

use super::*;
use crate::Vote;

/// An address nothing listens on: bind a port, then free it.
async fn closed_addr() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    addr.to_string()
}

struct FixedClock;

impl Clock for FixedClock {
    fn wall_ms(&self) -> u64 {
        1_800_000_000_000
    }

    fn monotonic_ms(&self) -> u64 {
        0
    }
}

fn sender() -> Arc<LinkSender> {
    Arc::new(LinkSender::new("hunter2-hunter2-hunter2-hunter2-x", 1, 7, Arc::new(FixedClock)))
}

#[test]
fn the_scheme_is_the_clusters_never_the_addresss() {
    assert_eq!(peer_base("10.0.0.1:7000", false), "http://10.0.0.1:7000");
    assert_eq!(peer_base("n1:7000", true), "https://n1:7000");
}

#[test]
fn debug_output_shows_no_key() {
    let network = HttpNetwork::new(Some(sender())).expect("builds");
    let text = format!("{network:?}");
    assert!(!text.contains("hunter2") && text.contains("LinkSender"), "{text}");
}

#[test]
fn each_request_gets_the_next_sequence_number_of_the_run() {
    let link = sender();
    let (a, b) = (link.stamp(2), link.stamp(3));
    assert_eq!((a.seq, b.seq, a.boot, a.to, b.to, a.from), (1, 2, 7, 2, 3, 1));
}

/// A listener that answers every request 200 with a body and no
/// signature, and counts the requests and the bytes it was sent.
async fn forged_listener() -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65_536];
                while let Ok(n) = socket.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    log.lock().unwrap().push(String::from_utf8_lossy(&buf[..n]).into_owned());
                    let reply = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if socket.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test]
async fn a_forged_peer_gets_a_hello_and_nothing_else() {
    let (addr, seen) = forged_listener().await;
    let link = sender();
    let client = rpc_client().expect("builds");
    let command = Command::SetDraining { node_id: 1, draining: true, now_ms: 1 };
    let base = peer_base(&addr, false);
    let err = forward_command(&client, &base, Some((&link, 99)), &command, Duration::from_secs(2))
        .await
        .expect_err("the forged peer cannot sign its reply");
    assert!(matches!(err, ForwardError::Unreachable(_)), "{err:?}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].starts_with("POST /internal/hello "), "{}", requests[0]);
    assert!(requests[0].ends_with("\r\n\r\n"), "the hello carries no body: {}", requests[0]);
    assert!(!requests[0].contains("hunter2"), "the secret travelled: {}", requests[0]);
    assert!(!link.is_proven(99, &base));
}

#[tokio::test]
async fn vote_to_a_closed_port_is_unreachable() {
    let mut network = HttpNetwork::new(Some(sender())).expect("builds");
    let mut peer = network.new_client(2, &BasicNode::new(closed_addr().await)).await;
    let rpc = rpc::VoteRequest { vote: Vote::new(1, 1), last_log_id: None };
    let err = peer.vote(rpc, RPCOption::new(Duration::from_secs(2))).await.expect_err("nobody listens");
    assert!(matches!(err, RPCError::Unreachable(_)), "{err:?}");
    assert!(err.to_string().contains("node 2"), "{err}");
}

#[tokio::test]
async fn forward_to_a_closed_port_is_unreachable() {
    let client = rpc_client().expect("builds");
    let command = Command::Noop;
    let base = peer_base(&closed_addr().await, false);
    let err = forward_command(&client, &base, Some((&sender(), 2)), &command, Duration::from_secs(2))
        .await
        .expect_err("nobody listens");
    assert!(matches!(err, ForwardError::Unreachable(_)), "{err:?}");
}
