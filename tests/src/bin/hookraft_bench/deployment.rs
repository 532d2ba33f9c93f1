//! The nodes a run starts: one, or a cluster on loopback.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hookraft_tests::{ClusterOptions, NodeOptions, TestCluster, TestNode};

use crate::procstat;

/// `hookraft serve`'s default `--lease-ms`.
const PRODUCTION_LEASE_MS: u64 = 6_000;

/// The nodes under test; dropping it stops them.
pub enum Deployment {
    Single(TestNode),
    Cluster(TestCluster),
}

impl Deployment {
    pub async fn start(nodes: u64, bin: &PathBuf, node_args: Vec<String>) -> Self {
        let node = NodeOptions::default().binary(bin).args(node_args);
        if nodes <= 1 {
            Deployment::Single(TestNode::start_with(node).await)
        } else {
            // The production lease, not the tests' short one, and the
            // steady state: every node owns its share of the shards.
            let options = ClusterOptions { size: nodes, node, lease_ms: PRODUCTION_LEASE_MS, ..Default::default() };
            let cluster = TestCluster::start_with(options).await;
            cluster.wait_settled().await;
            Deployment::Cluster(cluster)
        }
    }

    /// One node as a cluster of one, which another can join: with an
    /// admin token, which membership changes need (every request of the
    /// run carries it).
    pub async fn joinable(bin: &PathBuf, node_args: Vec<String>) -> Self {
        crate::load::authorize_all(hookraft_tests::cluster::ADMIN_TOKEN);
        let node = NodeOptions::default().binary(bin).args(node_args).admin_token(hookraft_tests::cluster::ADMIN_TOKEN);
        let options = ClusterOptions { size: 1, node, lease_ms: PRODUCTION_LEASE_MS, ..Default::default() };
        let cluster = TestCluster::start_with(options).await;
        cluster.wait_settled().await;
        Deployment::Cluster(cluster)
    }

    /// `/v1/events` of every node.
    pub fn event_urls(&self) -> Vec<String> {
        self.urls("/v1/events")
    }

    /// `path` on every node.
    pub fn urls(&self, path: &str) -> Vec<String> {
        match self {
            Deployment::Single(node) => vec![node.url(path)],
            Deployment::Cluster(c) => c.base_urls().into_iter().map(|(_, base)| format!("{base}{path}")).collect(),
        }
    }

    /// The node endpoints are registered through (the leader of a cluster).
    pub async fn registrar(&self) -> &TestNode {
        match self {
            Deployment::Single(node) => node,
            Deployment::Cluster(cluster) => cluster.leader().await,
        }
    }

    /// `(node id, pid)` of every running node.
    pub fn pids(&self) -> Vec<(u64, u32)> {
        match self {
            Deployment::Single(node) => node.pid().map(|pid| (1, pid)).into_iter().collect(),
            Deployment::Cluster(c) => c.ids().into_iter().filter_map(|id| Some((id, c.node(id).pid()?))).collect(),
        }
    }

    /// `(node id, log file)` of every node.
    pub fn logs(&self) -> Vec<(u64, PathBuf)> {
        match self {
            Deployment::Single(node) => vec![(1, node.log_path())],
            Deployment::Cluster(c) => c.ids().into_iter().map(|id| (id, c.node(id).log_path())).collect(),
        }
    }

    /// Copies every node's log into `dir` as `<scenario>-node<id>.log`.
    pub fn keep_logs(&self, dir: &Path, scenario: &str) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        for (id, log) in self.logs() {
            let kept = dir.join(format!("{scenario}-node{id}.log"));
            std::fs::copy(&log, &kept).with_context(|| format!("copy {} to {}", log.display(), kept.display()))?;
        }
        Ok(())
    }

    /// The first node, as the soak's sampler reads it.
    pub fn watched(&self) -> crate::soak::Watched {
        let (_, log) = self.logs().swap_remove(0);
        crate::soak::Watched {
            pid: self.pids().first().map(|&(_, pid)| pid),
            metrics_url: self.urls("/metrics").swap_remove(0),
            log,
        }
    }

    pub fn samples(&self) -> Vec<(u64, Option<procstat::Sample>)> {
        self.pids().into_iter().map(|(id, pid)| (id, procstat::sample(pid))).collect()
    }

    /// The sum over every node of a Prometheus sample (`name` may carry its
    /// labels); `None` if a node did not answer `/metrics` with it.
    pub async fn metric_sum(&self, name: &str) -> Option<f64> {
        let nodes: Vec<&TestNode> = match self {
            Deployment::Single(node) => vec![node],
            Deployment::Cluster(c) => c.ids().into_iter().map(|id| c.node(id)).collect(),
        };
        let mut sum = 0.0;
        for node in nodes {
            let response = node.request(reqwest::Method::GET, "/metrics").send().await.ok()?;
            sum += hookraft_tests::cluster::parse_metric(&response.text().await.ok()?, name)?;
        }
        Some(sum)
    }
}
