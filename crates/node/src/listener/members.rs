//! The IP addresses of the cluster's other nodes, whose connections the
//! listener takes from a pool of their own.
//!
//! [`track`] resolves the host of every address in the Raft membership
//! (voters and learners) and in `--peers`, this node's own excepted, with
//! the system's resolver: at once, every [`RESOLVE_EVERY`] and whenever the
//! membership changes. A lookup that fails or takes longer than
//! [`LOOKUP_TIMEOUT`] keeps what that address resolved to before.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use hookraft_core::ids::NodeId;
use hookraft_raft::{Raft, RaftMetrics};
use tokio::sync::watch;

/// Longest between two resolutions of the members' addresses.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(5);
/// Longest one address's lookup may take.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// The members' IP addresses, shared by [`track`] and the listener.
#[derive(Debug, Clone, Default)]
pub struct Members(Arc<RwLock<HashSet<IpAddr>>>);

impl Members {
    /// A set that holds `ips` (tests; the node's set is filled by [`track`]).
    pub fn fixed(ips: impl IntoIterator<Item = IpAddr>) -> Self {
        let members = Self::default();
        members.replace(ips.into_iter().map(|ip| ip.to_canonical()).collect());
        members
    }

    /// Whether `ip` is a member's (IPv4-mapped IPv6 addresses as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.read().unwrap_or_else(PoisonError::into_inner).contains(&ip.to_canonical())
    }

    fn replace(&self, ips: HashSet<IpAddr>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = ips;
    }
}

/// Keeps `members` current until `stop` turns true; `configured` are the
/// `host:port` addresses of `--peers`, `own` this node's id.
pub async fn track(
    raft: Raft,
    configured: BTreeMap<NodeId, String>,
    own: NodeId,
    members: Members,
    mut stop: watch::Receiver<bool>,
) {
    let mut metrics = raft.metrics();
    let mut resolved = BTreeMap::new();
    loop {
        let (addresses, seen) = {
            let metrics = metrics.borrow();
            (member_addresses(&metrics, &configured, own), *metrics.membership_config.log_id())
        };
        resolve(&mut resolved, addresses).await;
        members.replace(resolved.values().flatten().copied().collect());
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            () = membership_change(&mut metrics, seen) => {}
            () = tokio::time::sleep(RESOLVE_EVERY) => {}
        }
    }
}

/// The addresses of every member and configured peer but `own`.
fn member_addresses(metrics: &RaftMetrics, configured: &BTreeMap<NodeId, String>, own: NodeId) -> BTreeSet<String> {
    let membership = metrics.membership_config.membership().nodes().map(|(id, node)| (*id, &node.addr));
    configured
        .iter()
        .map(|(id, addr)| (*id, addr))
        .chain(membership)
        .filter(|(id, _)| *id != own)
        .map(|(_, addr)| addr.clone())
        .collect()
}

/// Waits until the membership is another than the one of log id `seen`
/// (forever once Raft has stopped).
async fn membership_change(metrics: &mut watch::Receiver<RaftMetrics>, seen: Option<openraft::LogId<NodeId>>) {
    if metrics.wait_for(|m| *m.membership_config.log_id() != seen).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves `addresses` into `resolved` (address → its IPs), dropping the
/// addresses no longer listed.
async fn resolve(resolved: &mut BTreeMap<String, Vec<IpAddr>>, addresses: BTreeSet<String>) {
    resolved.retain(|address, _| addresses.contains(address));
    for address in addresses {
        let ips: Vec<IpAddr> =
            match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host(address.as_str())).await {
                Ok(Ok(found)) => found.map(|addr| addr.ip().to_canonical()).collect(),
                Ok(Err(error)) => {
                    tracing::debug!(%address, %error, "could not resolve a member's address");
                    continue;
                }
                Err(_) => {
                    tracing::debug!(%address, "resolving a member's address timed out");
                    continue;
                }
            };
        resolved.insert(address, ips);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_addresses_keeps_failed_ones_and_drops_unlisted_ones() {
        let mut resolved = BTreeMap::new();
        let listed = |addresses: &[&str]| addresses.iter().map(|a| (*a).to_owned()).collect::<BTreeSet<_>>();
        resolve(&mut resolved, listed(&["127.0.0.2:7000", "[::ffff:10.1.2.3]:7000"])).await;
        let ips: HashSet<IpAddr> = resolved.values().flatten().copied().collect();
        assert_eq!(ips, HashSet::from(["127.0.0.2".parse().unwrap(), "10.1.2.3".parse().unwrap()]));
        // A lookup that fails keeps what the address resolved to before.
        resolved.insert("no-such-host.invalid:7000".to_owned(), vec!["10.9.9.9".parse().unwrap()]);
        resolve(&mut resolved, listed(&["no-such-host.invalid:7000", "127.0.0.2:7000"])).await;
        let ips: HashSet<IpAddr> = resolved.values().flatten().copied().collect();
        assert_eq!(ips, HashSet::from(["127.0.0.2".parse().unwrap(), "10.9.9.9".parse().unwrap()]));
    }

    #[test]
    fn members_match_ipv4_mapped_addresses() {
        let members = Members::fixed(["10.0.0.7".parse().unwrap()]);
        assert!(members.contains("10.0.0.7".parse().unwrap()));
        assert!(members.contains("::ffff:10.0.0.7".parse().unwrap()));
        assert!(!members.contains("10.0.0.8".parse().unwrap()));
    }
}
