//! The history scenario's report for a human.

use super::{HistoryFigures, Judged, Steady};
use crate::report::Quantiles;

/// The report for a human.
pub fn render(figures: &HistoryFigures) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "== history: {} finished deliveries kept", figures.history);
    if let Some(p) = &figures.preload {
        let _ = writeln!(
            out,
            "  preload:   {} of {} accepted ({} not) in {:.1} s ({:.0} events/s); all finished after {:.1} s ({:.0} deliveries/s); node RSS {}; {} ids sampled",
            p.accepted,
            p.requested,
            p.not_accepted,
            p.ingest_s,
            p.accepted_per_s,
            p.delivered_s,
            p.delivered_per_s,
            mib(p.rss_mib),
            p.sampled_ids
        );
    }
    render_steady("steady", &figures.steady, &mut out);
    if let Some(joined) = &figures.join {
        out.push_str(&crate::join::render(joined));
    }
    if let Some(empty) = &figures.empty {
        render_steady("no history", empty, &mut out);
    }
    let verdict = |judged: &Judged| if judged.pass { "PASS" } else { "FAIL" };
    if let Some(ratio) = &figures.rss_ratio {
        let _ = writeln!(
            out,
            "  history RSS: with / without {} (median of the steady's last minute: {} / {}): {} (bound {:.1}x)",
            ratio.value.map_or("-".to_owned(), |r| format!("{r:.2}x")),
            mib(figures.steady.rss_settled_mib),
            mib(figures.empty.as_ref().and_then(|e| e.rss_settled_mib)),
            verdict(ratio),
            ratio.bound
        );
    }
    for (what, judged) in [("event", &figures.event_read_p99), ("delivery", &figures.delivery_read_p99)] {
        let _ = writeln!(
            out,
            "  history {what} read p99: {}: {} (bound {:.0} ms)",
            judged.value.map_or("- (no reads)".to_owned(), |p| format!("{p:.2} ms")),
            verdict(judged),
            judged.bound
        );
    }
    out
}

fn render_steady(name: &str, s: &Steady, out: &mut String) {
    use std::fmt::Write as _;
    let q = |q: &Quantiles| format!("p50 {:.2} p99 {:.2} p999 {:.2} max {:.2} ms", q.p50, q.p99, q.p999, q.max);
    let _ = writeln!(
        out,
        "  {name}: {} events/s for {:.0} s after {} finished: {} of {} accepted ({} not), lost {}",
        s.rate, s.duration_s, s.finished_before, s.accepted, s.offered, s.not_accepted, s.lost
    );
    let _ = writeln!(out, "    ingest      {}", q(&s.ingest_latency_ms));
    let _ = writeln!(out, "    end-to-end  {}", q(&s.end_to_end_latency_ms));
    let _ = writeln!(
        out,
        "    node RSS    start {}, end {}, last minute's median {}, max {}",
        mib(s.rss_start_mib),
        mib(s.rss_end_mib),
        mib(s.rss_settled_mib),
        mib(s.rss_max_mib)
    );
    for (what, reads) in [("event reads", &s.event_reads), ("deliveries ", &s.delivery_reads)] {
        if reads.count > 0 || reads.failed > 0 {
            let _ = writeln!(out, "    {what} {} ({} failed): {}", reads.count, reads.failed, q(&reads.latency_ms));
        }
    }
}

fn mib(value: Option<f64>) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.0} MiB"))
}
