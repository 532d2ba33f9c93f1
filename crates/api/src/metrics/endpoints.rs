//! Per-endpoint series for a bounded top set: the endpoints this node owns
//! with the most attempts over the last hour get series of their own,
//! labelled `endpoint`; the rest are summed under `endpoint="other"`. A
//! node's per-endpoint families hold at most `top + 1` series each, however
//! many endpoints there are (docs/BOUNDS.md).
//!
//! Only the endpoints whose shard this node owns: every replica counts the
//! same attempts (`state/stats.rs`), so each endpoint shows on its owner
//! alone and a sum over the cluster counts it once.

use std::fmt::Write as _;

use hookraft_core::ids::{EndpointId, NodeId};
use hookraft_core::state::ClusterState;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

/// Endpoints with series of their own unless `--metrics-top-endpoints` says otherwise.
pub const TOP_ENDPOINTS_DEFAULT: usize = 20;
/// The most `--metrics-top-endpoints` may ask for: each family then holds
/// at most 101 series per node.
pub const TOP_ENDPOINTS_MAX: usize = 100;
/// The label value of the endpoints outside the top set.
pub const OTHER_ENDPOINTS: &str = "other";
/// The window the endpoints are ranked and counted over.
const WINDOW_MS: u64 = 3_600_000;

/// One endpoint's figures, or the sum of several.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointRow {
    /// Attempts recorded in the last hour (those sent; `state/stats.rs`).
    pub attempts: u64,
    /// Of those, the ones that did not succeed.
    pub failures: u64,
    /// Deliveries not yet delivered or dead.
    pub pending: u64,
}

impl EndpointRow {
    fn add(&mut self, other: &EndpointRow) {
        self.attempts += other.attempts;
        self.failures += other.failures;
        self.pending += other.pending;
    }
}

/// The endpoints with series of their own, and the rest summed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopEndpoints<K> {
    /// Most attempts first.
    pub top: Vec<(K, EndpointRow)>,
    pub other: EndpointRow,
}

/// The `n` rows with the most attempts (then the most pending, then the
/// lowest key: the same set at every scrape of the same figures), and the
/// sum of the others.
pub fn top_endpoints<K: Ord>(mut rows: Vec<(K, EndpointRow)>, n: usize) -> TopEndpoints<K> {
    rows.sort_unstable_by(|(a_key, a), (b_key, b)| {
        b.attempts.cmp(&a.attempts).then(b.pending.cmp(&a.pending)).then_with(|| a_key.cmp(b_key))
    });
    let mut other = EndpointRow::default();
    for (_, row) in rows.iter().skip(n) {
        other.add(row);
    }
    rows.truncate(n);
    TopEndpoints { top: rows, other }
}

/// The rows of the endpoints whose shard `node` owns, at `now_ms`.
pub(super) fn owned_rows(state: &ClusterState, node: NodeId, now_ms: u64) -> Vec<(EndpointId, EndpointRow)> {
    state
        .endpoints
        .keys()
        .filter(|id| state.grant_for(id).owner == Some(node))
        .map(|id| {
            let counts = state.endpoint_stats(id).map(|s| s.window(now_ms, WINDOW_MS)).unwrap_or_default();
            let pending = state.active.get(id).map_or(0, |a| a.len() as u64);
            let row = EndpointRow {
                attempts: counts.attempts,
                failures: counts.attempts.saturating_sub(counts.successes),
                pending,
            };
            (*id, row)
        })
        .collect()
}

/// Encodes the per-endpoint families of `ranked`.
pub(super) fn encode(encoder: &mut DescriptorEncoder, ranked: &TopEndpoints<EndpointId>) -> std::fmt::Result {
    let mut labels: Vec<(String, EndpointRow)> = Vec::with_capacity(ranked.top.len() + 1);
    for (id, row) in &ranked.top {
        let mut label = String::with_capacity(32);
        write!(label, "{id}")?;
        labels.push((label, *row));
    }
    labels.push((OTHER_ENDPOINTS.to_string(), ranked.other));
    type Family = (&'static str, &'static str, fn(&EndpointRow) -> u64);
    let families: [Family; 3] = [
        (
            "hookraft_endpoint_attempts_last_hour",
            "Attempts sent to the endpoint in the last hour, for the endpoints this node owns with the most \
             attempts; the rest summed as endpoint=\"other\"",
            |r| r.attempts,
        ),
        (
            "hookraft_endpoint_failures_last_hour",
            "Of hookraft_endpoint_attempts_last_hour, the attempts that did not succeed",
            |r| r.failures,
        ),
        (
            "hookraft_endpoint_pending",
            "Deliveries not yet delivered or dead, for the endpoints of hookraft_endpoint_attempts_last_hour",
            |r| r.pending,
        ),
    ];
    for (name, help, value) in families {
        let mut metric = encoder.encode_descriptor(name, &format!("{help}."), None, MetricType::Gauge)?;
        for (label, row) in &labels {
            let set = [("endpoint", label.as_str())];
            ConstGauge::new(value(row)).encode(metric.encode_family(&set)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(attempts: u64, failures: u64, pending: u64) -> EndpointRow {
        EndpointRow { attempts, failures, pending }
    }

    #[test]
    fn the_top_set_is_the_most_attempted_and_the_rest_is_summed() {
        let rows = vec![("a", row(5, 1, 0)), ("b", row(50, 0, 2)), ("c", row(7, 7, 1)), ("d", row(1, 0, 9))];
        let top = top_endpoints(rows, 2);
        assert_eq!(top.top, vec![("b", row(50, 0, 2)), ("c", row(7, 7, 1))]);
        assert_eq!(top.other, row(6, 1, 9));
    }

    #[test]
    fn ties_go_to_the_most_pending_then_the_lowest_key() {
        let rows = vec![("z", row(3, 0, 1)), ("y", row(3, 0, 1)), ("x", row(3, 0, 0)), ("w", row(3, 0, 5))];
        let top = top_endpoints(rows, 3);
        let keys: Vec<_> = top.top.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["w", "y", "z"]);
        assert_eq!(top.other, row(3, 0, 0));
    }

    #[test]
    fn the_label_set_never_grows_past_the_bound() {
        for endpoints in [0_u64, 1, 20, 21, 5_000] {
            let rows: Vec<_> = (0..endpoints).map(|i| (i, row(i % 7, 0, i % 3))).collect();
            let total_attempts: u64 = rows.iter().map(|(_, r)| r.attempts).sum();
            let top = top_endpoints(rows, TOP_ENDPOINTS_DEFAULT);
            assert!(top.top.len() <= TOP_ENDPOINTS_DEFAULT, "{endpoints} endpoints");
            let shown: u64 = top.top.iter().map(|(_, r)| r.attempts).sum::<u64>() + top.other.attempts;
            assert_eq!(shown, total_attempts, "nothing lost or counted twice");
        }
        let none = top_endpoints(vec![("a", row(1, 0, 0))], 0);
        assert!(none.top.is_empty());
        assert_eq!(none.other, row(1, 0, 0));
    }
}
