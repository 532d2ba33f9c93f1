//! The soak scenario's figures: a fixed rate for a fixed time, cut into
//! 10-second windows, the node's memory and snapshots sampled beside it,
//! and the verdict on whether latency held from the second minute to the
//! last.
//!
//! Pure pieces (durations, windows, quantiles, the verdict, the node's
//! `snapshot built` lines) at the top; the sampler that reads the node
//! every 10 s at the bottom.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::report::quantile;

/// Width of one window of the table.
pub const WINDOW: Duration = Duration::from_secs(10);
/// How often the node is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// The last minute's end-to-end p99 may be at most this many times the
/// second minute's (the first minute is the node's warm-up).
pub const RATIO_BOUND: f64 = 1.5;
/// The shortest soak: a second minute, and a last minute after it.
pub const DURATION_MIN: Duration = Duration::from_secs(180);

const MINUTE_US: u64 = 60_000_000;

/// `--duration`: `600`, `600s`, `10m`, `1.5h`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit_s) = match text.char_indices().last() {
        Some((at, 's')) => (&text[..at], 1.0),
        Some((at, 'm')) => (&text[..at], 60.0),
        Some((at, 'h')) => (&text[..at], 3_600.0),
        _ => (text, 1.0),
    };
    match number.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n * unit_s < 1e9 => Ok(Duration::from_secs_f64(n * unit_s)),
        _ => Err(format!("{text:?} is not a positive duration (600, 600s, 10m, 1h)")),
    }
}

/// Events a soak posts: every event due within `duration` at `rate`.
pub fn events_for(rate: f64, duration: Duration) -> usize {
    (rate * duration.as_secs_f64()).ceil() as usize
}

/// The p99 in milliseconds of latencies in microseconds; 0 when there are none.
pub fn p99_ms(mut latencies_us: Vec<u64>) -> f64 {
    latencies_us.sort_unstable();
    quantile(&latencies_us, 0.99) as f64 / 1_000.0
}

/// One 10-second window of the load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Seconds from the load's start.
    pub start_s: u64,
    /// Events due in the window and accepted.
    pub accepted: usize,
    /// Of those, the ingest latency p99 (from when each was due).
    pub ingest_p99_ms: f64,
    /// Of the events due in the window and delivered, the end-to-end p99.
    pub end_to_end_p99_ms: f64,
    /// Deliveries that arrived in the window, whenever their event was due.
    pub arrived: usize,
}

/// Cuts a load into `count` windows of `window_us`. Each sample is
/// `(due_us, latency_us)`, the time since the load's start: `ingest` of
/// each accepted event, `end_to_end` of each first arrival (which arrived
/// at `due + latency`).
pub fn windows(ingest: &[(u64, u64)], end_to_end: &[(u64, u64)], window_us: u64, count: usize) -> Vec<Window> {
    let index = |at_us: u64| usize::try_from(at_us / window_us.max(1)).ok().filter(|&i| i < count);
    let mut ingest_by: Vec<Vec<u64>> = vec![Vec::new(); count];
    let mut end_to_end_by: Vec<Vec<u64>> = vec![Vec::new(); count];
    let mut arrived = vec![0; count];
    for &(due, latency) in ingest {
        if let Some(i) = index(due) {
            ingest_by[i].push(latency);
        }
    }
    for &(due, latency) in end_to_end {
        if let Some(i) = index(due) {
            end_to_end_by[i].push(latency);
        }
        if let Some(i) = index(due.saturating_add(latency)) {
            arrived[i] += 1;
        }
    }
    ingest_by
        .into_iter()
        .zip(end_to_end_by)
        .zip(arrived)
        .enumerate()
        .map(|(i, ((ingest, end_to_end), arrived))| Window {
            start_s: i as u64 * window_us / 1_000_000,
            accepted: ingest.len(),
            ingest_p99_ms: p99_ms(ingest),
            end_to_end_p99_ms: p99_ms(end_to_end),
            arrived,
        })
        .collect()
}

/// The p99 (ms) of the samples `(due_us, latency_us)` due in `[from_us, to_us)`.
pub fn p99_between_ms(samples: &[(u64, u64)], from_us: u64, to_us: u64) -> f64 {
    p99_ms(samples.iter().filter(|&&(due, _)| (from_us..to_us).contains(&due)).map(|&(_, l)| l).collect())
}

/// Whether the last minute held the second minute's latency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub second_minute_p99_ms: f64,
    pub last_minute_p99_ms: f64,
    /// Last over second; `None` when the second minute had no samples.
    pub ratio: Option<f64>,
    pub bound: f64,
    pub pass: bool,
}

/// The verdict of end-to-end samples `(due_us, latency_us)` of a load of
/// `duration_us`: the p99 of the events due in the last minute against
/// those due in the second.
pub fn verdict(samples: &[(u64, u64)], duration_us: u64, bound: f64) -> Verdict {
    let second = p99_between_ms(samples, MINUTE_US, 2 * MINUTE_US);
    let last = p99_between_ms(samples, duration_us.saturating_sub(MINUTE_US), duration_us);
    let ratio = (second > 0.0).then(|| last / second);
    Verdict {
        second_minute_p99_ms: second,
        last_minute_p99_ms: last,
        ratio,
        bound,
        pass: ratio.is_some_and(|r| r <= bound),
    }
}

/// What a node's log says of one snapshot: `snapshot built` (with how
/// long it held applies) or `snapshot installed` (from a leader).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotLine {
    /// `built` or `installed`.
    pub kind: &'static str,
    pub bytes: u64,
    /// Of a built one: its wait for an earlier build, how long applies
    /// waited while it cloned the state, how long its encoding rested to
    /// let others run, and the whole build.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate_wait_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applies_held_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rested_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<u64>,
    /// The snapshot's id (`term-index-counter`).
    pub snapshot: String,
}

/// Reads a `snapshot built` or `snapshot installed` line of a node's log
/// (tracing's `message key=value …` format); `None` for any other line.
pub fn snapshot_line(line: &str) -> Option<SnapshotLine> {
    let kind = if line.contains(" snapshot built ") {
        "built"
    } else if line.contains(" snapshot installed ") {
        "installed"
    } else {
        return None;
    };
    let field = |key: &str| {
        let at = line.find(&format!(" {key}="))? + key.len() + 2;
        Some(line[at..].split_whitespace().next()?.to_owned())
    };
    let number = |key: &str| field(key)?.parse::<u64>().ok();
    Some(SnapshotLine {
        kind,
        bytes: number("bytes")?,
        gate_wait_ms: number("gate_wait_ms"),
        applies_held_ms: number("applies_held_ms"),
        rested_ms: number("rested_ms"),
        total_ms: number("total_ms"),
        snapshot: snapshot_id(line).or_else(|| field("snapshot")).unwrap_or_default(),
    })
}

/// The `snapshot_id: …` inside a snapshot line's `snapshot={…}`, as
/// builds before the line named the snapshot by its id alone wrote the
/// whole metadata there (membership and addresses included).
fn snapshot_id(line: &str) -> Option<String> {
    let at = line.find("snapshot_id: ")? + "snapshot_id: ".len();
    let id = line[at..].split([',', '}', ' ']).next()?;
    (!id.is_empty()).then(|| id.to_owned())
}

/// One reading of the node, every [`SAMPLE_EVERY`].
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds from the load's start.
    pub at_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_mib: Option<f64>,
    /// From `/metrics`: the current snapshot's bytes and the last index
    /// it covers, the last applied index, and the log past the snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_index: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_index: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_bytes_since_snapshot: Option<u64>,
    /// The node's `snapshot built` and `snapshot installed` lines logged
    /// since the previous sample.
    pub snapshots: Vec<SnapshotLine>,
}

impl Sample {
    /// Log entries past the snapshot, when both indexes were read.
    pub fn entries_since_snapshot(&self) -> Option<u64> {
        Some(self.applied_index?.saturating_sub(self.snapshot_index?))
    }
}

/// Reads the samples' figures from a `/metrics` exposition.
pub fn read_metrics(text: &str, sample: &mut Sample) {
    let Ok(scraped) = hookraft_tests::exposition::parse(text, hookraft_tests::exposition::Format::Prometheus) else {
        return;
    };
    let value = |name: &str| scraped.value(name, &[]).map(|v| v as u64);
    sample.snapshot_bytes = value("hookraft_snapshot_bytes");
    sample.snapshot_index = value("hookraft_snapshot_index");
    sample.applied_index = value("hookraft_raft_applied_index");
    sample.log_bytes_since_snapshot = value("hookraft_raft_log_since_snapshot_bytes");
}

/// The soak's own figures in the report.
#[derive(Debug, Clone, Serialize)]
pub struct SoakFigures {
    pub duration_s: f64,
    pub window_s: u64,
    pub windows: Vec<Window>,
    /// Every [`SAMPLE_EVERY`], of the first node.
    pub samples: Vec<Sample>,
    /// End to end, events due in the second minute against the last.
    pub end_to_end: Verdict,
    /// The same of the ingest latency, for comparison (not judged).
    pub ingest: Verdict,
}

/// The node a sampler reads: its pid, its `/metrics` URL and its log.
pub struct Watched {
    pub pid: Option<u32>,
    pub metrics_url: String,
    pub log: PathBuf,
}

/// Reads `node` every [`SAMPLE_EVERY`] from `load_start` until `done`;
/// returns the samples (one more when it stops).
pub async fn sample_until(node: Watched, load_start: Instant, done: Arc<AtomicBool>) -> Vec<Sample> {
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(5)).build().unwrap_or_default();
    let mut log_read = 0u64;
    let mut samples = Vec::new();
    let mut next = tokio::time::Instant::from_std(load_start);
    loop {
        next += SAMPLE_EVERY;
        let stopping = tokio::select! {
            () = tokio::time::sleep_until(next) => done.load(Ordering::Relaxed),
            () = wait_for(&done) => true,
        };
        let at_s = load_start.elapsed().as_secs_f64();
        if stopping && samples.last().is_some_and(|last: &Sample| at_s - last.at_s < 1.0) {
            // Stopped just after a reading: it is the last one.
            return samples;
        }
        let mut sample = Sample { at_s, ..Sample::default() };
        sample.rss_mib = crate::procstat::rss_mib(node.pid);
        if let Ok(response) = client.get(&node.metrics_url).send().await
            && let Ok(text) = response.text().await
        {
            read_metrics(&text, &mut sample);
        }
        sample.snapshots = new_snapshot_lines(&node.log, &mut log_read);
        samples.push(sample);
        if stopping {
            return samples;
        }
    }
}

async fn wait_for(flag: &AtomicBool) {
    while !flag.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The snapshot lines of `log` past byte `read`, which moves to the end of
/// the last whole line.
fn new_snapshot_lines(log: &PathBuf, read: &mut u64) -> Vec<SnapshotLine> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(log) else { return Vec::new() };
    let mut text = Vec::new();
    if file.seek(SeekFrom::Start(*read)).is_err() || file.read_to_end(&mut text).is_err() {
        return Vec::new();
    }
    let whole = text.iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1);
    *read += whole as u64;
    String::from_utf8_lossy(&text[..whole]).lines().filter_map(snapshot_line).collect()
}

/// The soak's tables for a human.
pub fn render(figures: &SoakFigures, out: &mut String) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "  soak:      {:.0} s; per {}-second window, by when events were due (arrived: by when deliveries came):",
        figures.duration_s, figures.window_s
    );
    let _ = writeln!(out, "    start_s  accepted  ingest_p99_ms  end_to_end_p99_ms  arrived");
    for w in &figures.windows {
        let _ = writeln!(
            out,
            "    {:>7}  {:>8}  {:>13.1}  {:>17.1}  {:>7}",
            w.start_s, w.accepted, w.ingest_p99_ms, w.end_to_end_p99_ms, w.arrived
        );
    }
    let _ = writeln!(out, "  node 1 every {} s:", SAMPLE_EVERY.as_secs());
    let _ = writeln!(
        out,
        "    at_s  rss_mib  snapshot_mb  snapshot_index  applied_index  entries_since  log_since_mb  snapshots logged"
    );
    let opt = |v: Option<f64>, width: usize, precision: usize| match v {
        Some(v) => format!("{v:>width$.precision$}"),
        None => format!("{:>width$}", "-"),
    };
    for s in &figures.samples {
        let logged: Vec<String> = s
            .snapshots
            .iter()
            .map(|l| match (l.applies_held_ms, l.total_ms) {
                (Some(held), Some(total)) => {
                    format!("{} {:.2} MB (held {held} ms, total {total} ms)", l.kind, l.bytes as f64 / 1e6)
                }
                _ => format!("{} {:.2} MB", l.kind, l.bytes as f64 / 1e6),
            })
            .collect();
        let _ = writeln!(
            out,
            "    {:>4.0}  {}  {}  {}  {}  {}  {}  {}",
            s.at_s,
            opt(s.rss_mib, 7, 0),
            opt(s.snapshot_bytes.map(|b| b as f64 / 1e6), 11, 2),
            opt(s.snapshot_index.map(|v| v as f64), 14, 0),
            opt(s.applied_index.map(|v| v as f64), 13, 0),
            opt(s.entries_since_snapshot().map(|v| v as f64), 13, 0),
            opt(s.log_bytes_since_snapshot.map(|b| b as f64 / 1e6), 12, 2),
            logged.join("; ")
        );
    }
    for (what, v, judged) in [("ingest", &figures.ingest, false), ("end-to-end", &figures.end_to_end, true)] {
        let judgement = if judged {
            format!(": {} (bound {:.1}x)", if v.pass { "PASS" } else { "FAIL" }, v.bound)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  soak {what}: second-minute p99 {:.1} ms, last-minute p99 {:.1} ms, ratio {}{judgement}",
            v.second_minute_p99_ms,
            v.last_minute_p99_ms,
            v.ratio.map_or("-".to_owned(), |r| format!("{r:.2}x")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_seconds_minutes_or_hours() {
        assert_eq!(parse_duration("600"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("600s"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5_400)));
        for bad in ["", "m", "-1m", "0s", "ten", "1d", "infs"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_soak_posts_every_event_due_within_its_duration() {
        assert_eq!(events_for(200.0, Duration::from_secs(600)), 120_000);
        assert_eq!(events_for(2_000.0, Duration::from_secs(600)), 1_200_000);
        assert_eq!(events_for(0.5, Duration::from_secs(3)), 2);
    }

    #[test]
    fn windows_group_latency_by_due_time_and_arrivals_by_arrival_time() {
        let s = 1_000_000;
        // 100 events due in window 0 at 1 ms, one of them slow (50 ms).
        let mut ingest: Vec<(u64, u64)> = (0..100).map(|i| (i * 1_000, 1_000)).collect();
        ingest[7].1 = 50_000;
        // Window 1: two events.
        ingest.extend([(10 * s, 2_000), (15 * s, 3_000)]);
        // An event due in window 0 that arrived in window 2, one in
        // window 1 that arrived there, and one arriving after the last window.
        let end_to_end = [(9 * s, 12 * s), (11 * s, 1_000), (29 * s, 5 * s)];
        let w = windows(&ingest, &end_to_end, 10 * s, 3);
        assert_eq!(w.len(), 3);
        assert_eq!((w[0].start_s, w[1].start_s, w[2].start_s), (0, 10, 20));
        assert_eq!((w[0].accepted, w[1].accepted, w[2].accepted), (100, 2, 0));
        // Nearest rank: the 99th of 100 is the second largest, 1 ms.
        assert_eq!((w[0].ingest_p99_ms, w[1].ingest_p99_ms, w[2].ingest_p99_ms), (1.0, 3.0, 0.0));
        assert_eq!((w[0].end_to_end_p99_ms, w[1].end_to_end_p99_ms), (12_000.0, 1.0));
        assert_eq!(w[2].end_to_end_p99_ms, 5_000.0);
        assert_eq!((w[0].arrived, w[1].arrived, w[2].arrived), (0, 1, 1), "the last arrival is past the table");
    }

    #[test]
    fn the_verdict_compares_the_last_minute_with_the_second() {
        let minute = 60_000_000;
        // 100 samples per minute over 10 minutes: the first minute slow
        // (warm-up, not judged), the rest at 2 ms with a 2.9 ms tail.
        let at = |latency_of_minute: &dyn Fn(u64) -> u64| -> Vec<(u64, u64)> {
            (0..1_000u64)
                .map(|i| {
                    let due = i * minute / 100;
                    let latency = if i % 100 == 99 { 2_900 } else { latency_of_minute(due / minute) };
                    (due, latency)
                })
                .collect()
        };
        let steady = verdict(&at(&|m| if m == 0 { 90_000 } else { 2_000 }), 10 * minute, RATIO_BOUND);
        assert_eq!((steady.second_minute_p99_ms, steady.last_minute_p99_ms), (2.0, 2.0));
        assert_eq!((steady.ratio, steady.pass), (Some(1.0), true));
        let growing = verdict(&at(&|m| 2_000 + m * 200), 10 * minute, RATIO_BOUND);
        assert_eq!((growing.second_minute_p99_ms, growing.last_minute_p99_ms), (2.2, 3.8));
        assert!(!growing.pass && growing.ratio.is_some_and(|r| (r - 3.8 / 2.2).abs() < 1e-9));
        let just = verdict(&at(&|m| if m == 9 { 3_000 } else { 2_000 }), 10 * minute, RATIO_BOUND);
        assert_eq!((just.ratio, just.pass), (Some(1.5), true), "the bound itself passes");
        let empty = verdict(&[], 10 * minute, RATIO_BOUND);
        assert_eq!((empty.ratio, empty.pass), (None, false));
    }

    #[test]
    fn snapshot_lines_give_their_sizes_and_hold_times() {
        let built = "2026-12-05T18:20:19.079660Z  INFO hookraft_raft::state_machine: snapshot built \
                     snapshot={snapshot_id: 1-19999-1, last_log:T1-N1-19999, last_membership: {log_id:T0-N0-0, \
                     {voters:[{1:BasicNode { addr: \"127.0.0.1:32823\" }}], learners:[]}}} bytes=5242880 \
                     gate_wait_ms=0 applies_held_ms=3 rested_ms=12 total_ms=410";
        assert_eq!(
            snapshot_line(built),
            Some(SnapshotLine {
                kind: "built",
                bytes: 5_242_880,
                gate_wait_ms: Some(0),
                applies_held_ms: Some(3),
                rested_ms: Some(12),
                total_ms: Some(410),
                snapshot: "1-19999-1".into(),
            })
        );
        let installed = "2026-12-05T10:00:00Z  INFO hookraft_raft::state_machine: snapshot installed \
                         snapshot={snapshot_id: 2-40000-3, last_log:T2-N1-40000} bytes=61234";
        let line = snapshot_line(installed).expect("an installed line");
        assert_eq!(
            (line.kind, line.bytes, line.total_ms, line.snapshot.as_str()),
            ("installed", 61_234, None, "2-40000-3")
        );
        // As the node writes it now: the size first, the snapshot by its id.
        let short = "2026-12-05T19:00:00Z  INFO hookraft_raft::state_machine: snapshot built bytes=59400000 \
                     snapshot=1-219999-11 gate_wait_ms=0 applies_held_ms=0 rested_ms=40 total_ms=576";
        let line = snapshot_line(short).expect("a built line");
        assert_eq!((line.bytes, line.total_ms, line.snapshot.as_str()), (59_400_000, Some(576), "1-219999-11"));
        assert_eq!(snapshot_line("INFO x: the log past the last snapshot is large; building a snapshot"), None);
        assert_eq!(snapshot_line("INFO x: snapshot built snapshot={snapshot_id: 1-2-3}"), None, "no size");
    }

    #[test]
    fn metrics_give_the_snapshot_and_the_log_past_it() {
        let text = "# HELP hookraft_snapshot_bytes Bytes.\n# TYPE hookraft_snapshot_bytes gauge\n\
                    hookraft_snapshot_bytes 5242880\n\
                    # HELP hookraft_snapshot_index Index.\n# TYPE hookraft_snapshot_index gauge\n\
                    hookraft_snapshot_index 20000\n\
                    # HELP hookraft_raft_applied_index Index.\n# TYPE hookraft_raft_applied_index gauge\n\
                    hookraft_raft_applied_index 23456\n";
        let mut sample = Sample::default();
        read_metrics(text, &mut sample);
        assert_eq!((sample.snapshot_bytes, sample.snapshot_index), (Some(5_242_880), Some(20_000)));
        assert_eq!((sample.entries_since_snapshot(), sample.log_bytes_since_snapshot), (Some(3_456), None));
        let mut unread = Sample::default();
        read_metrics("not an exposition {", &mut unread);
        assert_eq!(unread, Sample::default());
    }
}
