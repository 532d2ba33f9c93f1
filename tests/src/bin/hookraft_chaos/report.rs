//! The verdict of a chaos run, computed purely from what ingest accepted,
//! what the receiver saw and when faults ran, so it is tested without docker.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

/// A fault as it ran: what, on which node, from when to when (since origin).
#[derive(Debug, Clone)]
pub struct FaultWindow {
    pub what: String,
    pub from: Duration,
    pub until: Duration,
}

/// A span with no successful accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub from: Duration,
    pub until: Duration,
}

impl Outage {
    pub fn length(&self) -> Duration {
        self.until.saturating_sub(self.from)
    }
}

/// The `count` longest spans between consecutive accepts within
/// `[start, end]`, longest first. No accept at all makes the whole window one outage.
pub fn longest_outages(accept_times: &[Duration], start: Duration, end: Duration, count: usize) -> Vec<Outage> {
    let mut times: Vec<Duration> = accept_times.iter().copied().filter(|t| *t >= start && *t <= end).collect();
    times.sort();
    let mut edges = Vec::with_capacity(times.len() + 2);
    edges.push(start);
    edges.extend(times);
    edges.push(end);
    let mut gaps: Vec<Outage> = edges.windows(2).map(|w| Outage { from: w[0], until: w[1] }).collect();
    gaps.sort_by(|a, b| b.length().cmp(&a.length()).then(a.from.cmp(&b.from)));
    gaps.truncate(count);
    gaps
}

/// The counts the run is judged on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    pub accepted: usize,
    /// Accepted events received at least once.
    pub delivered: usize,
    /// Accepted, never received.
    pub lost: Vec<String>,
    /// Accepted events received more than once.
    pub duplicated_events: usize,
    /// Deliveries beyond the first, summed over events.
    pub extra_deliveries: u64,
    /// Received but never acknowledged to ingest (committed after the caller gave up).
    pub unacknowledged: usize,
    /// Distinct idempotency sequences answered with an id another sequence also got.
    pub id_collisions: usize,
}

impl Tally {
    pub fn duplicates_per_10k(&self) -> f64 {
        if self.accepted == 0 { 0.0 } else { self.duplicated_events as f64 * 10_000.0 / self.accepted as f64 }
    }
}

/// Compares accepted `(seq, event id)` pairs with receiver counts per event id.
pub fn tally(accepted: &[(u64, String)], received: &BTreeMap<String, u32>) -> Tally {
    let mut by_id: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for (seq, id) in accepted {
        by_id.entry(id.as_str()).or_default().insert(*seq);
    }
    let id_collisions = by_id.values().filter(|seqs| seqs.len() > 1).count();
    let mut tally = Tally {
        accepted: by_id.len(),
        delivered: 0,
        lost: Vec::new(),
        duplicated_events: 0,
        extra_deliveries: 0,
        unacknowledged: received.keys().filter(|id| !by_id.contains_key(id.as_str())).count(),
        id_collisions,
    };
    for id in by_id.keys() {
        match received.get(*id).copied().unwrap_or(0) {
            0 => tally.lost.push((*id).to_string()),
            n => {
                tally.delivered += 1;
                if n > 1 {
                    tally.duplicated_events += 1;
                    tally.extra_deliveries += u64::from(n - 1);
                }
            }
        }
    }
    tally
}

/// The faults that overlap `outage`, for the report.
pub fn faults_during(outage: &Outage, faults: &[FaultWindow]) -> Vec<String> {
    faults.iter().filter(|f| f.from < outage.until && f.until > outage.from).map(|f| f.what.clone()).collect()
}

pub fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// Repeated deliveries (arrival time, path) counted by the fault they
/// followed: each goes to the last fault injected at or before its arrival,
/// or to none before the first. A repeat comes from an attempt whose outcome
/// did not commit (a node killed, frozen or cut off with webhooks out) or
/// went stale (its shard moved meanwhile), and arrives when the next owner
/// sends again: after the fault, before the next one is injected. Rows in
/// the faults' order, then the paths (endpoints) each one's repeats went to.
pub fn repeats_by_fault<'a>(
    repeats: &'a [(Duration, String)],
    faults: &[FaultWindow],
) -> Vec<(String, u64, BTreeMap<&'a str, u64>)> {
    let labels =
        std::iter::once("before the first fault".to_string()).chain(faults.iter().map(|f| format!("after {}", f.what)));
    let mut rows: Vec<(String, u64, BTreeMap<&str, u64>)> = labels.map(|label| (label, 0, BTreeMap::new())).collect();
    for (at, path) in repeats {
        let row = faults.iter().rposition(|f| f.from <= *at).map_or(0, |i| i + 1);
        rows[row].1 += 1;
        *rows[row].2.entry(path.as_str()).or_default() += 1;
    }
    rows.retain(|(_, count, _)| *count > 0);
    rows
}

/// The lines about repeated deliveries, by the fault they followed.
pub fn render_repeats(repeats: &[(Duration, String)], faults: &[FaultWindow]) -> String {
    let mut out = String::new();
    for (label, count, paths) in repeats_by_fault(repeats, faults) {
        let paths: Vec<String> = paths.iter().map(|(path, n)| format!("{path} {n}")).collect();
        let _ = writeln!(out, "  {label}: {count} ({})", paths.join(", "));
    }
    out
}

/// The lines about outages: the longest, and the few next ones.
pub fn render_outages(outages: &[Outage], faults: &[FaultWindow]) -> String {
    let mut out = String::new();
    for (i, outage) in outages.iter().enumerate() {
        let during = faults_during(outage, faults);
        let during = if during.is_empty() { "no fault active".to_string() } else { during.join(", ") };
        let label = if i == 0 { "longest ingest outage" } else { "  next" };
        let _ = writeln!(
            out,
            "{label}: {} ms (t={} .. t={}; {during})",
            outage.length().as_millis(),
            seconds(outage.from),
            seconds(outage.until)
        );
    }
    out
}

/// Failed ingest attempts per node: how many, why, from when to when.
/// `failures` are `(when, node label, reason)`.
pub fn render_failures(failures: &[(Duration, String, String)]) -> String {
    let mut per_node: BTreeMap<&str, (BTreeMap<&str, u64>, Duration, Duration)> = BTreeMap::new();
    for (at, node, reason) in failures {
        let entry = per_node.entry(node.as_str()).or_insert((BTreeMap::new(), *at, *at));
        *entry.0.entry(reason.as_str()).or_default() += 1;
        entry.1 = entry.1.min(*at);
        entry.2 = entry.2.max(*at);
    }
    let mut out = String::new();
    for (node, (reasons, first, last)) in per_node {
        let total: u64 = reasons.values().sum();
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ =
            writeln!(out, "  on {node}: {total} ({}), t={} .. t={}", reasons.join(", "), seconds(first), seconds(last));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn repeats_go_to_the_last_fault_injected_before_they_arrived() {
        let fault = |what: &str, from, until| FaultWindow { what: what.into(), from: ms(from), until: ms(until) };
        let faults = [fault("kill node 1", 1_000, 9_000), fault("pause node 2", 12_000, 20_000)];
        let repeats: Vec<(Duration, String)> =
            [(500, "/chaos/0"), (1_000, "/chaos/1"), (11_999, "/chaos/1"), (30_000, "/chaos/3")]
                .into_iter()
                .map(|(at, path)| (ms(at), path.to_string()))
                .collect();
        let rows = repeats_by_fault(&repeats, &faults);
        let counts: Vec<(&str, u64)> = rows.iter().map(|(label, n, _)| (label.as_str(), *n)).collect();
        assert_eq!(counts, [("before the first fault", 1), ("after kill node 1", 2), ("after pause node 2", 1)]);
        assert_eq!(rows[1].2.get("/chaos/1"), Some(&2));
        assert_eq!(render_repeats(&repeats, &faults).lines().nth(1), Some("  after kill node 1: 2 (/chaos/1 2)"));
        assert!(render_repeats(&[], &faults).is_empty(), "no repeats, no lines");
    }

    #[test]
    fn longest_outage_includes_the_edges_of_the_window() {
        let times = [ms(100), ms(200), ms(1_500), ms(1_600)];
        let outages = longest_outages(&times, ms(0), ms(4_000), 2);
        assert_eq!(outages[0], Outage { from: ms(1_600), until: ms(4_000) });
        assert_eq!(outages[1], Outage { from: ms(200), until: ms(1_500) });
    }

    #[test]
    fn no_accept_at_all_is_one_outage_over_the_whole_window() {
        let outages = longest_outages(&[], ms(10), ms(50), 3);
        assert_eq!(outages, vec![Outage { from: ms(10), until: ms(50) }]);
    }

    #[test]
    fn tally_counts_lost_duplicated_and_unacknowledged_events() {
        let accepted = vec![(0, "evt_a".to_string()), (1, "evt_b".to_string()), (2, "evt_c".to_string())];
        let received: BTreeMap<String, u32> =
            [("evt_a".to_string(), 1), ("evt_b".to_string(), 3), ("evt_x".to_string(), 1)].into_iter().collect();
        let tally = tally(&accepted, &received);
        assert_eq!(tally.accepted, 3);
        assert_eq!(tally.delivered, 2);
        assert_eq!(tally.lost, vec!["evt_c".to_string()]);
        assert_eq!((tally.duplicated_events, tally.extra_deliveries), (1, 2));
        assert_eq!(tally.unacknowledged, 1);
        assert_eq!(tally.id_collisions, 0);
        assert!((tally.duplicates_per_10k() - 3_333.33).abs() < 0.01);
    }

    #[test]
    fn two_keys_answered_with_one_event_id_are_a_collision() {
        let accepted = vec![(0, "evt_a".to_string()), (1, "evt_a".to_string())];
        let received: BTreeMap<String, u32> = [("evt_a".to_string(), 1)].into_iter().collect();
        let tally = tally(&accepted, &received);
        assert_eq!((tally.accepted, tally.id_collisions), (1, 1));
    }

    #[test]
    fn outage_is_attributed_to_the_faults_overlapping_it() {
        let faults = vec![
            FaultWindow { what: "kill node1".into(), from: ms(0), until: ms(100) },
            FaultWindow { what: "pause node2".into(), from: ms(500), until: ms(900) },
        ];
        let during = faults_during(&Outage { from: ms(600), until: ms(1_000) }, &faults);
        assert_eq!(during, vec!["pause node2".to_string()]);
    }

    #[test]
    fn failures_are_summed_per_node_and_reason() {
        let failures = vec![
            (ms(1_000), "node 2".to_string(), "timeout".to_string()),
            (ms(3_000), "node 2".to_string(), "503".to_string()),
            (ms(2_000), "node 2".to_string(), "timeout".to_string()),
        ];
        assert_eq!(render_failures(&failures), "  on node 2: 3 (503 1, timeout 2), t=1.0s .. t=3.0s\n");
    }
}
