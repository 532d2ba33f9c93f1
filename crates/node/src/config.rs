//! A node's configuration (DESIGN §10). The CLI fills it from flags and
//! environment; tests and the simulator build it directly.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use hookraft_core::ids::NodeId;

/// Settings of one node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: NodeId,
    /// Where the HTTP API (and the node-to-node RPC) listens.
    pub listen: SocketAddr,
    /// How peers reach this node (`host:port`); defaults to `listen`.
    pub advertise: Option<String>,
    /// Every member of the cluster, this node included. Empty: a
    /// single-node cluster. The lowest id initialises a new cluster; the
    /// others wait to be contacted.
    pub peers: BTreeMap<NodeId, String>,
    /// Shared by the nodes; required on node-to-node requests when set.
    pub cluster_secret: Option<String>,
    /// When set, every `/v1` route requires `Authorization: Bearer <token>`.
    pub api_token: Option<String>,
    /// When set, cluster administration requires this token instead.
    pub admin_token: Option<String>,
    /// Allow webhook targets on loopback, private and link-local addresses.
    pub allow_private_targets: bool,
    /// How long a heartbeat keeps this node's lease valid.
    pub lease_ms: u64,
    /// How long a rotated-out secret keeps signing by default.
    pub secret_grace_ms: u64,
    /// Applied entries between two snapshots of the replicated state.
    pub snapshot_every_entries: u64,
    /// How long an event is kept once its deliveries are all delivered or
    /// dead; `None` keeps every event. The leader's value applies.
    pub retention_ms: Option<u64>,
}

/// Default lease (DESIGN §5).
pub const LEASE_MS_DEFAULT: u64 = 6_000;
/// Default retention: a week, well past the default retry policy's 72 h.
pub const RETENTION_MS_DEFAULT: u64 = 7 * 24 * 3_600 * 1_000;

impl NodeConfig {
    /// The single-node defaults of `hookraft serve`.
    pub fn single(listen: SocketAddr) -> Self {
        Self {
            node_id: 1,
            listen,
            advertise: None,
            peers: BTreeMap::new(),
            cluster_secret: None,
            api_token: None,
            admin_token: None,
            allow_private_targets: false,
            lease_ms: LEASE_MS_DEFAULT,
            secret_grace_ms: 24 * 3_600 * 1_000,
            snapshot_every_entries: hookraft_raft::SNAPSHOT_EVERY_ENTRIES,
            retention_ms: Some(RETENTION_MS_DEFAULT),
        }
    }

    /// The address peers use for this node.
    pub fn advertised(&self) -> String {
        self.advertise.clone().unwrap_or_else(|| self.listen.to_string())
    }

    /// The initial members: the peers, or this node alone.
    pub fn initial_members(&self) -> BTreeMap<NodeId, String> {
        if self.peers.is_empty() { BTreeMap::from([(self.node_id, self.advertised())]) } else { self.peers.clone() }
    }

    /// Whether this node initialises a fresh cluster: the lowest id does.
    pub fn initialises(&self) -> bool {
        self.initial_members().keys().next() == Some(&self.node_id)
    }
}

/// Parses a retention: a whole number with a unit, `s`, `m`, `h` or `d`
/// (`90s`, `36h`, `7d`), or `off` to keep every event.
pub fn parse_retention(text: &str) -> Result<Option<u64>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let bad = || format!("`{text}` is not a retention: write a whole number and a unit (90s, 30m, 36h, 7d) or `off`");
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let unit_ms: u64 = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    let ms = number.checked_mul(unit_ms).ok_or_else(bad)?;
    if ms == 0 {
        return Err(format!("a retention of `{text}` would forget events at once; write `off` to keep them all"));
    }
    Ok(Some(ms))
}

/// Parses `1=host:port,2=host:port`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<NodeId, String>, String> {
    let mut peers = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('=').ok_or_else(|| format!("`{part}` is not id=host:port"))?;
        let id: NodeId = id.trim().parse().map_err(|_| format!("`{id}` is not a node id"))?;
        let addr = addr.trim();
        if id == 0 || !addr.contains(':') {
            return Err(format!("`{part}` is not id=host:port with a positive id"));
        }
        if peers.insert(id, addr.to_string()).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    Ok(peers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_retentions_with_units_and_off() {
        assert_eq!(parse_retention("90s"), Ok(Some(90_000)));
        assert_eq!(parse_retention("30m"), Ok(Some(1_800_000)));
        assert_eq!(parse_retention(" 36h "), Ok(Some(129_600_000)));
        assert_eq!(parse_retention("7d"), Ok(Some(RETENTION_MS_DEFAULT)));
        assert_eq!(parse_retention("OFF"), Ok(None));
        for bad in ["", "7", "d", "7w", "-1d", "1.5h", "7 d", "0s", "99999999999999999d"] {
            assert!(parse_retention(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn parses_peers_and_rejects_malformed_lists() {
        let peers = parse_peers("1=a:1, 2=b:2,3=c:3").unwrap();
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[&2], "b:2");
        for bad in ["1=a", "x=a:1", "0=a:1", "1=a:1,1=b:2", "a:1"] {
            assert!(parse_peers(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_lowest_peer_initialises() {
        let mut config = NodeConfig::single("127.0.0.1:1".parse().unwrap());
        assert!(config.initialises(), "a single node initialises itself");
        config.peers = parse_peers("1=a:1,2=b:2,3=c:3").unwrap();
        config.node_id = 2;
        assert!(!config.initialises());
        config.node_id = 1;
        assert!(config.initialises());
    }

    mod hostile {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_retention_text_parses_or_says_what_to_write(text in "\\PC{0,24}|[0-9]{0,24}[smhdSMHD ]{0,2}") {
                match parse_retention(&text) {
                    Ok(Some(ms)) => {
                        prop_assert!(ms > 0);
                        let trimmed = text.trim();
                        let unit = trimmed.chars().last().expect("a unit");
                        prop_assert!("smhd".contains(unit), "{text:?}");
                        prop_assert!(trimmed[..trimmed.len() - 1].bytes().all(|b| b.is_ascii_digit()), "{text:?}");
                    }
                    Ok(None) => prop_assert!(text.trim().eq_ignore_ascii_case("off")),
                    Err(message) => prop_assert!(
                        message.contains("write a whole number and a unit") || message.contains("write `off`"),
                        "{message}"
                    ),
                }
            }

            #[test]
            fn any_peer_list_parses_to_positive_ids_or_says_which_part_is_wrong(
                text in "\\PC{0,40}|([0-9]{1,3}=[a-z:0-9]{0,8},?){0,5}",
            ) {
                match parse_peers(&text) {
                    Ok(peers) => {
                        for (id, addr) in &peers {
                            prop_assert!(*id > 0);
                            prop_assert!(addr.contains(':'), "{addr:?}");
                            prop_assert!(text.contains(addr.as_str()));
                        }
                    }
                    Err(message) => prop_assert!(!message.is_empty()),
                }
            }
        }
    }
}
