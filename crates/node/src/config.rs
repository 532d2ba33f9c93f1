//! A node's configuration (ARCHITECTURE §2.2). The CLI fills it from flags and
//! environment; tests and the simulator build it directly.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use hookraft_core::ids::NodeId;
use hookraft_core::payload::Keyring;
use hookraft_core::redact::SecretString;

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
    /// Shared by the nodes, required on every node-to-node request. `None`:
    /// the node keeps a secret of its own (generated on first start, kept in
    /// its data dir), so its node RPC is closed to everyone and it cannot
    /// take new members.
    pub cluster_secret: Option<SecretString>,
    /// The bearer tokens `/v1` takes, with their scopes; none: `/v1` is
    /// open, on a loopback address only (`hookraft_api::auth`).
    pub tokens: Arc<hookraft_api::auth::Tokens>,
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
    /// Deliveries not yet delivered or dead past which ingest is refused
    /// (503); `u64::MAX` is no limit. `hookraft serve` derives a default
    /// from the machine's memory ([`default_budgets`]).
    pub max_pending: u64,
    /// Estimated bytes of retained state past which ingest is refused
    /// (503); `u64::MAX` is no limit.
    pub memory_budget_bytes: u64,
    /// Seals payloads before they are proposed and opens them to send
    /// them. `None`: payloads are stored in clear (the node says so when
    /// it starts).
    pub keyring: Option<Arc<Keyring>>,
    /// How many of the endpoints it owns this node shows series of its own
    /// for in `/metrics` (the most attempted); the rest are summed as
    /// `endpoint="other"`. At most `hookraft_api::metrics::TOP_ENDPOINTS_MAX`.
    pub metrics_top_endpoints: usize,
    /// The page cache of the history store (finished events on disk).
    pub history_cache_bytes: usize,
    /// Connections one IP address may hold open at once; the cluster
    /// members' connections are not counted (`crate::listener`).
    pub connections_per_address: usize,
}

/// Entries applied between two snapshots unless `--snapshot-every` says otherwise.
pub const SNAPSHOT_EVERY_ENTRIES_DEFAULT: u64 = hookraft_raft::SNAPSHOT_EVERY_ENTRIES;

/// Endpoints with series of their own in `/metrics` unless
/// `--metrics-top-endpoints` says otherwise, and the most it may say.
pub const METRICS_TOP_ENDPOINTS_DEFAULT: u16 = hookraft_api::metrics::TOP_ENDPOINTS_DEFAULT as u16;
pub const METRICS_TOP_ENDPOINTS_MAX: u16 = hookraft_api::metrics::TOP_ENDPOINTS_MAX as u16;

/// `--history-cache` unless given: [`hookraft_raft::HISTORY_CACHE_BYTES_DEFAULT`].
pub const HISTORY_CACHE_DEFAULT: &str = "64MiB";

/// Default lease (ARCHITECTURE §5.2).
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
            tokens: Arc::default(),
            allow_private_targets: false,
            lease_ms: LEASE_MS_DEFAULT,
            secret_grace_ms: 24 * 3_600 * 1_000,
            snapshot_every_entries: hookraft_raft::SNAPSHOT_EVERY_ENTRIES,
            retention_ms: Some(RETENTION_MS_DEFAULT),
            max_pending: u64::MAX,
            memory_budget_bytes: u64::MAX,
            keyring: None,
            metrics_top_endpoints: hookraft_api::metrics::TOP_ENDPOINTS_DEFAULT,
            history_cache_bytes: hookraft_raft::HISTORY_CACHE_BYTES_DEFAULT,
            connections_per_address: crate::listener::CONNECTIONS_PER_ADDRESS_DEFAULT,
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

/// Share of the machine's memory (or its cgroup's limit) the retained
/// state may take by default, in percent: the rest is for the actors'
/// queues, connections, the log, and a snapshot's encoding beside the state.
pub const MEMORY_BUDGET_PERCENT_DEFAULT: u64 = 50;
/// What the default `--max-pending` assumes one pending delivery costs:
/// about 490 bytes of records beyond its payload (the backlog benchmark)
/// plus about 500 bytes of payload, type and key, rounded to 1 KiB. A
/// node with payloads of that size reaches both budgets together; with
/// larger payloads the memory budget is reached first.
pub const PENDING_DELIVERY_BYTES_ASSUMED: u64 = 1_024;
/// The memory assumed when neither `/proc/meminfo` nor the cgroup says.
pub const MACHINE_MEMORY_ASSUMED: u64 = 2 << 30;

/// The default budgets for a machine (or container) of `memory` bytes:
/// `(max_pending, memory_budget_bytes)`.
pub fn default_budgets(memory: u64) -> (u64, u64) {
    let budget = ((u128::from(memory) * u128::from(MEMORY_BUDGET_PERCENT_DEFAULT) / 100) as u64).max(1);
    (max_pending_for(budget), budget)
}

/// The default `--max-pending` under a memory budget: the deliveries of
/// [`PENDING_DELIVERY_BYTES_ASSUMED`] each that fit in it.
pub fn max_pending_for(memory_budget: u64) -> u64 {
    (memory_budget / PENDING_DELIVERY_BYTES_ASSUMED).max(1)
}

/// The memory a node may use: the machine's (`MemTotal` of `/proc/meminfo`,
/// given as `meminfo`), or its cgroup's limit (`memory.max`, v2) when that
/// is lower; `None` when neither says.
pub fn machine_memory(meminfo: Option<&str>, cgroup_max: Option<&str>) -> Option<u64> {
    let total = meminfo.and_then(meminfo_total);
    let limit = cgroup_max.and_then(cgroup_limit);
    match (total, limit) {
        (Some(total), Some(limit)) => Some(total.min(limit)),
        (total, limit) => total.or(limit),
    }
}

/// `MemTotal:  16314604 kB` from `/proc/meminfo`, in bytes.
fn meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|line| line.strip_prefix("MemTotal:"))?;
    let mut words = line.split_whitespace();
    let number: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => number.checked_mul(1_024),
        None => Some(number),
        Some(_) => None,
    }
}

/// A cgroup's limit: v2's `memory.max` (bytes, or `max` for no limit:
/// `None`) or v1's `memory.limit_in_bytes` (bytes; no limit is a huge
/// number, which the machine's memory then undercuts).
fn cgroup_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok().filter(|&bytes| bytes > 0)
}

/// Parses a size: a whole number of bytes, optionally with a unit: `K`,
/// `M`, `G`, `T` (powers of 1,000), `KiB`, `MiB`, `GiB`, `TiB` (powers of
/// 1,024), `KB`, `MB`… as the first, and `B`; `512MiB`, `4GiB`, `2G`,
/// `1000000`. At least 1 byte.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let bad = || format!("`{text}` is not a size: write bytes, or a whole number and a unit (512MiB, 4GiB, 2G)");
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let unit_bytes: u64 = match unit.trim_start() {
        "" | "B" => 1,
        "K" | "KB" | "k" | "kB" => 1_000,
        "M" | "MB" => 1_000_000,
        "G" | "GB" => 1_000_000_000,
        "T" | "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return Err(bad()),
    };
    let bytes = number.checked_mul(unit_bytes).ok_or_else(bad)?;
    if bytes == 0 {
        return Err(format!("a size of `{text}` leaves no room: give at least 1 byte"));
    }
    Ok(bytes)
}

/// The smallest history cache `--history-cache` accepts: below it, even
/// the tables' roots would be read from the file again and again.
pub const HISTORY_CACHE_BYTES_MIN: u64 = 1 << 20;

/// Parses `--history-cache`: a size ([`parse_size`]) of at least
/// [`HISTORY_CACHE_BYTES_MIN`].
pub fn parse_history_cache(text: &str) -> Result<usize, String> {
    let bytes = parse_size(text)?;
    if bytes < HISTORY_CACHE_BYTES_MIN {
        return Err(format!("a history cache of `{}` is too small: give at least 1MiB", text.trim()));
    }
    usize::try_from(bytes).map_err(|_| format!("a history cache of `{}` does not fit this machine", text.trim()))
}

/// Parses `1=host:port,2=host:port`.
pub fn parse_peers(text: &str) -> Result<BTreeMap<NodeId, String>, String> {
    let mut peers = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('=').ok_or_else(|| format!("`{part}` is not id=host:port"))?;
        let id: NodeId = id.trim().parse().map_err(|_| format!("`{id}` is not a node id"))?;
        let addr = addr.trim();
        if id == 0 {
            return Err(format!("`{part}` is not id=host:port with a positive id"));
        }
        hookraft_core::node_addr::check_node_addr(addr).map_err(|why| format!("`{part}`: {why}"))?;
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
    fn parses_sizes_with_and_without_units() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("2G"), Ok(2_000_000_000));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size(" 1000000 "), Ok(1_000_000));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert_eq!(parse_size("10k"), Ok(10_000));
        assert_eq!(parse_size("3 MiB"), Ok(3 << 20));
        assert_eq!(parse_size("1B"), Ok(1));
        for bad in
            ["", "MiB", "0", "0GiB", "-1", "1.5G", "4gib", "4 GiBs", "2X", "99999999999999999999", "99999999999TiB"]
        {
            assert!(parse_size(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn a_history_cache_is_a_size_of_a_mebibyte_at_least() {
        assert_eq!(parse_history_cache("16MiB"), Ok(16 << 20));
        assert_eq!(parse_history_cache("1MiB"), Ok(1 << 20));
        assert_eq!(parse_history_cache("1G"), Ok(1_000_000_000));
        let small = parse_history_cache("512KiB").expect_err("under a mebibyte");
        assert!(small.contains("at least 1MiB"), "{small}");
        assert!(parse_history_cache("0").is_err());
        assert!(parse_history_cache("lots").expect_err("not a size").contains("is not a size"));
        assert_eq!(parse_history_cache(HISTORY_CACHE_DEFAULT), Ok(hookraft_raft::HISTORY_CACHE_BYTES_DEFAULT));
    }

    #[test]
    fn the_machine_memory_is_the_lower_of_meminfo_and_the_cgroup_limit() {
        let meminfo = "MemTotal:       16314604 kB\nMemFree:         1234 kB\n";
        assert_eq!(machine_memory(Some(meminfo), None), Some(16_314_604 * 1_024));
        assert_eq!(machine_memory(Some(meminfo), Some("max\n")), Some(16_314_604 * 1_024), "no cgroup limit");
        assert_eq!(machine_memory(Some(meminfo), Some("1073741824\n")), Some(1 << 30), "a container's limit");
        assert_eq!(machine_memory(Some(meminfo), Some("99999999999999\n")), Some(16_314_604 * 1_024));
        assert_eq!(machine_memory(None, Some("536870912")), Some(512 << 20));
        assert_eq!(machine_memory(Some("garbage"), Some("")), None);
        assert_eq!(machine_memory(Some("MemTotal: lots kB"), None), None);
        assert_eq!(machine_memory(None, None), None);
    }

    #[test]
    fn default_budgets_take_half_the_memory_and_a_kib_per_pending_delivery() {
        assert_eq!(default_budgets(8 << 30), (4 << 20, 4 << 30));
        let (pending, memory) = default_budgets(1 << 30);
        assert_eq!(memory, 1 << 29);
        assert_eq!(pending, 524_288);
        assert_eq!(default_budgets(10), (1, 5), "never a budget of nothing");
        assert_eq!(max_pending_for(20 << 20), 20_480);
    }

    #[test]
    fn parses_peers_and_rejects_malformed_lists() {
        let peers = parse_peers("1=a:1, 2=b:2,3=c:3").unwrap();
        assert_eq!(peers.len(), 3);
        assert_eq!(peers[&2], "b:2");
        for bad in ["1=a", "x=a:1", "0=a:1", "1=a:1,1=b:2", "a:1", "1=http://a:1", "1=u@a:1"] {
            assert!(parse_peers(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn debug_shows_no_token_or_secret() {
        let mut config = NodeConfig::single("127.0.0.1:1".parse().unwrap());
        use hookraft_api::auth::{Credential, Scope, Tokens};
        let token = |text: &str| SecretString::new(text);
        config.tokens = Arc::new(Tokens::new(vec![
            Credential::new("api-token", Scope::Api, &token("api-7c1e9-0b44d-e8a21")).unwrap(),
            Credential::new("admin-token", Scope::Admin, &token("admin-0b44d-e8a21-7c1e9")).unwrap(),
        ]));
        config.cluster_secret = Some("cluster-e8a21".into());
        for shown in [format!("{config:?}"), format!("{config:#?}")] {
            for secret in ["api-7c1e9", "admin-0b44d", "cluster-e8a21"] {
                assert!(!shown.contains(secret), "{secret} shows in {shown}");
            }
            assert!(shown.contains("<redacted>"), "{shown}");
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
