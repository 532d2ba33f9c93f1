//! `--scenario history --join`: once the history is kept, a new node joins
//! the node that keeps it and is sent its snapshot (issue 34: a snapshot
//! of a large history is built and installed on a new node with the
//! node's RSS under 1 GB extra; the time to install reported).
//!
//! The new node is started, left to settle, then added through
//! `POST /v1/cluster/nodes`, which answers once it is a learner; the
//! leader makes it a voter once it caught up. Both nodes' memory is
//! sampled every [`SAMPLE_EVERY`] until the new node's log says it
//! installed a snapshot (how large, how long the import took) and the
//! leader's `GET /v1/cluster` shows it a voter.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hookraft_tests::TestCluster;
use serde::Serialize;

use crate::soak::snapshot_line;

const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How long the new node runs before it is added: its memory at rest.
const SETTLE: Duration = Duration::from_secs(2);
/// The joining node's id.
const NEW_NODE: u64 = 2;
/// Issue 34's bound on what installing costs the new node.
pub const EXTRA_RSS_BOUND_MIB: f64 = 1024.0;
/// How long the new node may take to install the history.
const JOIN_DEADLINE: Duration = Duration::from_secs(3_600);
/// How often the new node's log is read for its install.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// What joining cost, as measured.
#[derive(Debug, Clone, Serialize)]
pub struct Joined {
    /// From the add request to its answer (202 once the node is a
    /// learner), and the answer's status.
    pub answered_s: f64,
    pub answer_status: u16,
    /// From the add request until the leader showed the new node a voter.
    pub voter_s: f64,
    /// From the add request until the new node's log said it installed a
    /// snapshot.
    pub installed_s: f64,
    /// The snapshots the new node installed, as its log says: bytes
    /// streamed, and how long importing and decoding took.
    pub installed_bytes: Vec<u64>,
    pub import_ms: Vec<u64>,
    /// The new node's RSS before it was added, its peak while it caught
    /// up, and the difference, judged against [`EXTRA_RSS_BOUND_MIB`].
    pub new_rss_before_mib: f64,
    pub new_rss_peak_mib: f64,
    pub new_rss_extra_mib: f64,
    pub pass: bool,
    /// The node that sent it: its RSS before, its peak until the new node
    /// installed the snapshot, and its peak after, while it sent the log
    /// past the snapshot.
    pub sender_rss_before_mib: f64,
    pub sender_rss_peak_mib: f64,
    pub sender_rss_peak_after_install_mib: f64,
}

fn rss_mib(pid: Option<u32>) -> f64 {
    crate::procstat::rss_mib(pid).unwrap_or(0.0)
}

/// Adds node [`NEW_NODE`] to the one-node `cluster` and measures it.
pub async fn join(cluster: &mut TestCluster) -> Result<Joined> {
    let sender_pid = cluster.node(1).pid();
    cluster.launch_joining_node(NEW_NODE);
    tokio::time::sleep(SETTLE).await;
    let new_pid = cluster.node(NEW_NODE).pid();
    let (new_before, sender_before) = (rss_mib(new_pid), rss_mib(sender_pid));
    let add = serde_json::json!({"id": NEW_NODE, "addr": cluster.addr(NEW_NODE)});
    let request = cluster.node(1).request(reqwest::Method::POST, "/v1/cluster/nodes").json(&add);
    let started = Instant::now();
    let mut adding = tokio::spawn(request.timeout(JOIN_DEADLINE).send());
    let (mut new_peak, mut sender_peak, mut sender_peak_after) = (new_before, sender_before, 0.0f64);
    let (mut answered, mut installed_s, mut voter_s, mut log_read) = (None, None, None, Instant::now());
    while answered.is_none() || installed_s.is_none() || voter_s.is_none() {
        if started.elapsed() > JOIN_DEADLINE {
            bail!("node {NEW_NODE} did not install a snapshot and become a voter within {JOIN_DEADLINE:?}");
        }
        tokio::select! {
            answer = &mut adding, if answered.is_none() => {
                let answer = answer.context("the add request panicked")?.context("the add request failed")?;
                answered = Some((answer.status().as_u16(), started.elapsed().as_secs_f64()));
            }
            () = tokio::time::sleep(SAMPLE_EVERY) => {
                new_peak = new_peak.max(rss_mib(new_pid));
                if installed_s.is_none() {
                    sender_peak = sender_peak.max(rss_mib(sender_pid));
                } else {
                    sender_peak_after = sender_peak_after.max(rss_mib(sender_pid));
                }
            }
        }
        if let Some((status, _)) = answered.filter(|(status, _)| *status != 202) {
            bail!("adding node {NEW_NODE} answered {status}");
        }
        if log_read.elapsed() < LOG_EVERY {
            continue;
        }
        log_read = Instant::now();
        if installed_s.is_none() {
            let log = std::fs::read_to_string(cluster.node(NEW_NODE).log_path()).unwrap_or_default();
            if log.lines().filter_map(snapshot_line).any(|s| s.kind == "installed") {
                installed_s = Some(started.elapsed().as_secs_f64());
            }
        }
        if voter_s.is_none() && answered.is_some() {
            let view = cluster.try_view(1).await.ok();
            if view.is_some_and(|v| v.node(NEW_NODE).is_some_and(|n| n.voter == Some(true))) {
                voter_s = Some(started.elapsed().as_secs_f64());
            }
        }
    }
    let ((answer_status, answered_s), installed_s) = (answered.unwrap_or_default(), installed_s.unwrap_or_default());
    let voter_s = voter_s.unwrap_or_default();
    let log = std::fs::read_to_string(cluster.node(NEW_NODE).log_path()).context("the new node's log")?;
    let installed: Vec<_> = log.lines().filter_map(snapshot_line).filter(|s| s.kind == "installed").collect();
    let extra = new_peak - new_before;
    Ok(Joined {
        answered_s,
        answer_status,
        voter_s,
        installed_s,
        installed_bytes: installed.iter().map(|s| s.bytes).collect(),
        import_ms: installed.iter().filter_map(|s| s.total_ms).collect(),
        new_rss_before_mib: new_before,
        new_rss_peak_mib: new_peak,
        new_rss_extra_mib: extra,
        pass: extra < EXTRA_RSS_BOUND_MIB && !installed.is_empty(),
        sender_rss_before_mib: sender_before,
        sender_rss_peak_mib: sender_peak,
        sender_rss_peak_after_install_mib: sender_peak_after,
    })
}

/// One line for a human.
pub fn render(joined: &Joined) -> String {
    let gib = |bytes: &u64| format!("{:.2} GiB", *bytes as f64 / crate::MIB / 1024.0);
    format!(
        "  join:      a new node installed {} after {:.1} s (import {:?} ms; the add answered {} after {:.1} s, a voter after {:.1} s); its RSS {:.0} -> peak {:.0} MiB (+{:.0} MiB, bound {:.0}: {}); the sender's {:.0} -> peak {:.0} MiB until the install, {:.0} MiB after\n",
        joined.installed_bytes.iter().map(gib).collect::<Vec<_>>().join(", "),
        joined.installed_s,
        joined.import_ms,
        joined.answer_status,
        joined.answered_s,
        joined.voter_s,
        joined.new_rss_before_mib,
        joined.new_rss_peak_mib,
        joined.new_rss_extra_mib,
        EXTRA_RSS_BOUND_MIB,
        if joined.pass { "PASS" } else { "FAIL" },
        joined.sender_rss_before_mib,
        joined.sender_rss_peak_mib,
        joined.sender_rss_peak_after_install_mib,
    )
}
