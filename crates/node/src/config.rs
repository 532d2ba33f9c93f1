//! A node's configuration (DESIGN §10). The CLI fills it from flags and
//! environment; tests and the simulator build it directly.

use std::net::SocketAddr;

use hookraft_core::ids::NodeId;

/// Settings of one node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: NodeId,
    /// Where the HTTP API listens.
    pub listen: SocketAddr,
    /// When set, every `/v1` route requires `Authorization: Bearer <token>`.
    pub api_token: Option<String>,
    /// Allow webhook targets on loopback, private and link-local addresses.
    pub allow_private_targets: bool,
    /// How long a heartbeat keeps this node's lease valid.
    pub lease_ms: u64,
    /// How long a rotated-out secret keeps signing by default.
    pub secret_grace_ms: u64,
}

impl NodeConfig {
    /// The single-node defaults of `hookraft serve`.
    pub fn single(listen: SocketAddr) -> Self {
        Self {
            node_id: 1,
            listen,
            api_token: None,
            allow_private_targets: false,
            lease_ms: 6_000,
            secret_grace_ms: 24 * 3_600 * 1_000,
        }
    }
}
