//! TLS for the node's one port (public API and node-to-node RPC) and for
//! its links to the other nodes.
//!
//! `hookraft serve --tls-cert FILE --tls-key FILE` serves HTTPS and calls
//! its peers over HTTPS; `--tls-ca FILE` names the certificate authority
//! that signed the nodes' certificates, trusted alone for them (without it,
//! the system's roots). Each handshake runs in its connection's task, once
//! the listener admitted the connection (its pools and per-address cap,
//! [`crate::listener`]), within [`HANDSHAKE_TIMEOUT`]: a client that opens
//! a connection and says nothing holds no other one up, and the pools bound
//! the handshakes in progress.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Longest a client may take to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `--tls-cert`, `--tls-key` and `--tls-ca` loaded.
#[derive(Clone)]
pub struct Tls {
    /// Serves this node's port.
    pub server: Arc<rustls::ServerConfig>,
    /// The authority the node trusts for its peers (PEM), when given.
    pub peer_roots: Vec<reqwest::Certificate>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("peer_roots", &self.peer_roots.len()).finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads a PEM certificate chain and its private key, and optionally
    /// the peers' authority. Errors name the file and what is wrong with it,
    /// never the key's bytes.
    pub fn load(cert: &Path, key: &Path, peer_ca: Option<&Path>) -> Result<Self, String> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| format!("{}: {e}", cert.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!("{}: no PEM certificate in it", cert.display()));
        }
        let key =
            PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: not a PEM private key ({e})", key.display()))?;
        let mut server = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("the certificate and key do not make a TLS server: {e}"))?;
        // The server speaks HTTP/1.1 only: offering h2 would have clients
        // (curl) choose a protocol it then does not answer.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let peer_roots = match peer_ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                if CertificateDer::pem_slice_iter(&pem).next().is_none() {
                    return Err(format!("{}: no PEM certificate in it", path.display()));
                }
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => Vec::new(),
        };
        Ok(Self { server: Arc::new(server), peer_roots })
    }
}

/// The TLS stream of an accepted connection, once its handshake finished
/// within [`HANDSHAKE_TIMEOUT`]; `None` when it failed or timed out.
pub async fn handshake(acceptor: &TlsAcceptor, stream: TcpStream, peer: SocketAddr) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tls").join(name)
    }

    #[test]
    fn loads_a_certificate_its_key_and_the_peers_authority() {
        let tls = Tls::load(&fixture("node.pem"), &fixture("node.key"), Some(&fixture("ca.pem"))).expect("loads");
        assert_eq!(tls.peer_roots.len(), 1);
        assert_eq!(tls.server.alpn_protocols, vec![b"http/1.1".to_vec()], "no h2: the server does not speak it");
        let shown = format!("{tls:?}");
        assert!(!shown.contains("BEGIN"), "{shown}");
    }

    #[test]
    fn bad_files_are_refused_with_their_name() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not pem at all").unwrap();
        let missing = dir.path().join("missing.pem");
        let cases = [
            (missing.clone(), fixture("node.key"), None, "missing.pem"),
            (garbage.clone(), fixture("node.key"), None, "no PEM certificate"),
            (fixture("node.pem"), garbage.clone(), None, "garbage.pem"),
            // A key that is not the certificate's: the CA's certificate as the chain.
            (fixture("ca.pem"), fixture("node.key"), None, "do not make a TLS server"),
            (fixture("node.pem"), fixture("node.key"), Some(garbage.clone()), "garbage.pem"),
        ];
        for (cert, key, ca, expected) in cases {
            let error = Tls::load(&cert, &key, ca.as_deref()).expect_err("refused");
            assert!(error.contains(expected), "{expected}: {error}");
            assert!(!error.contains("PRIVATE KEY"), "{error}");
        }
    }
}
