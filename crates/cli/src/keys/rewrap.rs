//! `hookraft keys rewrap`: reseals what a cluster retains (payloads,
//! endpoint signing secrets, provider secrets) under the active key of the
//! node it calls, following `next_after` from call to call, and sums up
//! what the calls did.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{anyhow, bail};
use reqwest::Method;
use serde_json::{Value, json};

use crate::admin::{AdminClient, Call};

/// Longest one rewrap call may take: a call looks at up to a million
/// events and commits them in batches, so it runs far longer than other
/// admin calls.
pub(super) const REWRAP_TIMEOUT_MS: u64 = 600_000;
/// Failed payloads listed in a rewrap summary (all are counted).
const FAILURES_SHOWN_MAX: usize = 50;
/// How `by_key` names payloads stored in clear.
const CLEAR: &str = "clear";

/// The sum of a rewrap's calls.
#[derive(Debug, Default, PartialEq)]
pub(super) struct RewrapTotals {
    node: String,
    dry_run: bool,
    calls: u64,
    active_key_id: Option<String>,
    examined: u64,
    rewrapped: u64,
    skipped: u64,
    pub(super) failed: u64,
    /// `(event id, error)`, the first [`FAILURES_SHOWN_MAX`] the node listed.
    failures: Vec<(String, String)>,
    by_key: BTreeMap<String, u64>,
    /// The stored secrets, from the first call (the only one that looks at them).
    secrets: SecretTotals,
}

/// What the rewrap did to the stored secrets.
#[derive(Debug, Default, PartialEq)]
pub(super) struct SecretTotals {
    examined: u64,
    rewrapped: u64,
    skipped: u64,
    pub(super) failed: u64,
    by_key: BTreeMap<String, u64>,
}

/// The counts `fields` of `answer`, in their order.
fn counts<const N: usize>(answer: &Value, fields: [&str; N]) -> Result<[u64; N], String> {
    let mut out = [0; N];
    for (slot, field) in out.iter_mut().zip(fields) {
        *slot =
            answer.get(field).and_then(Value::as_u64).ok_or_else(|| format!("the answer has no count `{field}`"))?;
    }
    Ok(out)
}

/// Adds an answer's `by_key` counts to `totals`.
fn add_by_key(totals: &mut BTreeMap<String, u64>, answer: &Value) -> Result<(), String> {
    for (key, n) in answer.get("by_key").and_then(Value::as_object).into_iter().flatten() {
        let n = n.as_u64().ok_or_else(|| format!("the answer's by_key.{key} is not a count"))?;
        let total = totals.entry(key.clone()).or_default();
        *total = total.saturating_add(n);
    }
    Ok(())
}

impl RewrapTotals {
    /// Adds one answer of `POST /v1/cluster/payloads/rewrap`; returns its
    /// `next_after` (where the next call starts; `None`: done).
    fn add(&mut self, answer: &Value) -> Result<Option<String>, String> {
        let [examined, rewrapped, skipped, failed] = counts(answer, ["examined", "rewrapped", "skipped", "failed"])?;
        let secrets = match answer.get("secrets") {
            None | Some(Value::Null) => None,
            Some(secrets) => {
                let [examined, rewrapped, skipped, failed] =
                    counts(secrets, ["examined", "rewrapped", "skipped", "failed"])
                        .map_err(|e| format!("secrets: {e}"))?;
                let mut by_key = BTreeMap::new();
                add_by_key(&mut by_key, secrets).map_err(|e| format!("secrets: {e}"))?;
                Some(SecretTotals { examined, rewrapped, skipped, failed, by_key })
            }
        };
        let next_after = match answer.get("next_after") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
            Some(other) => return Err(format!("the answer's next_after is not an event id: {other}")),
        };
        let mut by_key = self.by_key.clone();
        add_by_key(&mut by_key, answer)?;
        self.calls += 1;
        self.examined = self.examined.saturating_add(examined);
        self.rewrapped = self.rewrapped.saturating_add(rewrapped);
        self.skipped = self.skipped.saturating_add(skipped);
        self.failed = self.failed.saturating_add(failed);
        if let Some(active) = answer.get("active_key_id").and_then(Value::as_str) {
            self.active_key_id = Some(active.to_string());
        }
        for failure in answer.get("failures").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            if self.failures.len() == FAILURES_SHOWN_MAX {
                break;
            }
            let text = |field| failure.get(field).and_then(Value::as_str).unwrap_or("-").to_string();
            self.failures.push((text("event_id"), text("error")));
        }
        self.by_key = by_key;
        if let Some(secrets) = secrets {
            self.secrets = secrets;
        }
        Ok(next_after)
    }

    /// Payloads and secrets that could not be opened.
    pub(super) fn failed(&self) -> u64 {
        self.failed.saturating_add(self.secrets.failed)
    }

    /// Retained payloads, and stored secrets, that are not under the active key.
    fn not_under_active(&self) -> (u64, u64) {
        let active = self.active_key_id.as_deref();
        let left = |by_key: &BTreeMap<String, u64>| -> u64 {
            by_key.iter().filter(|(key, _)| Some(key.as_str()) != active).map(|(_, n)| n).sum()
        };
        (left(&self.by_key), left(&self.secrets.by_key))
    }
}

/// Calls the rewrap route until it has walked every event, following
/// `next_after`, and sums the answers.
pub(super) async fn rewrap(client: &AdminClient, node: &str, dry_run: bool) -> anyhow::Result<RewrapTotals> {
    let mut totals = RewrapTotals { node: node.to_string(), dry_run, ..RewrapTotals::default() };
    let mut after: Option<String> = None;
    loop {
        let body = match &after {
            Some(after) => json!({"dry_run": dry_run, "after": after}),
            None => json!({"dry_run": dry_run}),
        };
        let call = Call { method: Method::POST, path: "/v1/cluster/payloads/rewrap".into(), body: Some(body) };
        let answer = client.call(&call).await?;
        let next = totals.add(&answer).map_err(|e| anyhow!("POST {}: {e}", call.path))?;
        match next {
            None => return Ok(totals),
            Some(next) if after.as_deref() == Some(next.as_str()) => {
                bail!("the node answered next_after {} twice: it is not moving on", printable(&next))
            }
            Some(next) => {
                eprintln!("examined {} payloads so far; going on after {}", totals.examined, printable(&next));
                after = Some(next);
            }
        }
    }
}

/// A rewrap's summary.
pub(super) fn render(t: &RewrapTotals) -> String {
    let mut out = String::new();
    let active = t.active_key_id.as_deref().map_or_else(|| "none (no keyring)".to_string(), printable);
    let what = if t.dry_run { "rewrap dry run (nothing changed)" } else { "rewrap" };
    let calls = if t.calls == 1 { "1 call".to_string() } else { format!("{} calls", t.calls) };
    let _ = writeln!(out, "{what} on {} in {calls}; the node's active key: {active}", printable(&t.node));
    let _ = writeln!(out, "examined:   {}", t.examined);
    let _ = writeln!(out, "rewrapped:  {}", t.rewrapped);
    let _ = writeln!(out, "skipped:    {} (changed meanwhile by another rewrap)", t.skipped);
    let _ = writeln!(out, "failed:     {}", t.failed);
    for (event, error) in &t.failures {
        let _ = writeln!(out, "  {}: {}", printable(event), printable(error));
    }
    let listed = t.failures.len() as u64;
    if t.failed > listed {
        let _ = writeln!(out, "  ... and {} more", t.failed - listed);
    }
    by_key_lines(&mut out, "payloads by key:", &t.by_key, t.active_key_id.as_deref());
    let s = &t.secrets;
    let _ = writeln!(
        out,
        "secrets:    {} examined, {} rewrapped, {} skipped, {} failed",
        s.examined, s.rewrapped, s.skipped, s.failed
    );
    by_key_lines(&mut out, "secrets by key:", &s.by_key, t.active_key_id.as_deref());
    let (payloads, secrets) = t.not_under_active();
    if t.dry_run && t.active_key_id.is_some() && payloads + secrets > 0 {
        let _ = writeln!(
            out,
            "{payloads} payloads and {secrets} secrets are not under the active key; run without --dry-run to \
             reseal them"
        );
    }
    out
}

/// A `by_key` count, a line per key, marking clear and active.
fn by_key_lines(out: &mut String, title: &str, by_key: &BTreeMap<String, u64>, active: Option<&str>) {
    let _ = writeln!(out, "{title}");
    if by_key.is_empty() {
        let _ = writeln!(out, "  (none retained)");
    }
    let width = by_key.keys().map(|k| k.chars().count()).max().unwrap_or(0);
    for (key, n) in by_key {
        let key = printable(key);
        let mark = if key == CLEAR {
            "  (stored in clear)"
        } else if active == Some(key.as_str()) {
            "  (active)"
        } else {
            ""
        };
        let _ = writeln!(out, "  {key:<width$}  {n}{mark}");
    }
}

/// Text from the node, with control characters replaced: an answer
/// cannot drive the terminal.
fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrap_answers_are_summed_and_next_after_is_followed() {
        let mut totals = RewrapTotals::default();
        let first = json!({
            "dry_run": false, "active_key_id": "k2", "examined": 3, "rewrapped": 2, "skipped": 0, "failed": 1,
            "failures": [{"event_id": "evt_a", "error": "key k0 is not in this node's keyring"}],
            "by_key": {"k2": 2, "k0": 1}, "next_after": "evt_c",
        });
        assert_eq!(totals.add(&first), Ok(Some("evt_c".into())));
        let last = json!({
            "dry_run": false, "active_key_id": "k2", "examined": 2, "rewrapped": 1, "skipped": 1, "failed": 0,
            "failures": [], "by_key": {"k2": 2}, "next_after": null,
        });
        assert_eq!(totals.add(&last), Ok(None));
        assert_eq!((totals.calls, totals.examined, totals.rewrapped, totals.skipped, totals.failed), (2, 5, 3, 1, 1));
        assert_eq!(totals.by_key, BTreeMap::from([("k0".into(), 1), ("k2".into(), 4)]));
        assert_eq!(totals.failures, [("evt_a".to_string(), "key k0 is not in this node's keyring".to_string())]);
        assert_eq!(totals.not_under_active(), (1, 0));
        assert_eq!(totals.secrets, SecretTotals::default(), "neither answer looked at secrets");
        let with_secrets = json!({
            "examined": 0, "rewrapped": 0, "skipped": 0, "failed": 0, "next_after": null, "by_key": {},
            "secrets": {"examined": 3, "rewrapped": 1, "skipped": 0, "failed": 1, "by_key": {"k2": 2, "k0": 1}},
        });
        assert_eq!(totals.add(&with_secrets), Ok(None));
        assert_eq!((totals.secrets.examined, totals.secrets.rewrapped, totals.failed()), (3, 1, 2));
        assert_eq!(totals.not_under_active(), (1, 1));
        let bad = json!({"examined": 0, "rewrapped": 0, "skipped": 0, "failed": 0, "secrets": {"examined": 1}});
        assert!(totals.add(&bad).unwrap_err().starts_with("secrets: the answer has no count `rewrapped`"));
    }

    #[test]
    fn a_rewrap_answer_without_its_counts_is_refused() {
        let mut totals = RewrapTotals::default();
        assert!(totals.add(&json!({"examined": 1})).unwrap_err().contains("rewrapped"));
        let bad_cursor = json!({"examined": 0, "rewrapped": 0, "skipped": 0, "failed": 0, "next_after": 5});
        assert!(totals.add(&bad_cursor).unwrap_err().contains("next_after"));
        assert_eq!(totals.calls, 0, "nothing of a refused answer is counted");
    }

    #[test]
    fn the_rewrap_summary_lists_failures_and_keys_and_escapes_the_node_text() {
        let totals = RewrapTotals {
            node: "127.0.0.1:8080".into(),
            dry_run: true,
            calls: 1,
            active_key_id: Some("k2".into()),
            examined: 4,
            failed: 2,
            failures: vec![("evt_a".into(), "bad\u{1b}[2J".into())],
            by_key: BTreeMap::from([("clear".into(), 1), ("k1".into(), 1), ("k2".into(), 2)]),
            ..RewrapTotals::default()
        };
        let text = render(&totals);
        assert!(text.starts_with("rewrap dry run (nothing changed) on 127.0.0.1:8080 in 1 call"), "{text}");
        assert!(text.contains("failed:     2\n  evt_a: bad?[2J\n  ... and 1 more\n"), "{text}");
        assert!(text.contains("  clear  1  (stored in clear)\n  k1     1\n  k2     2  (active)\n"), "{text}");
        assert!(text.contains(
            "secrets:    0 examined, 0 rewrapped, 0 skipped, 0 failed\nsecrets by key:\n  (none retained)\n"
        ));
        assert!(text.contains("2 payloads and 0 secrets are not under the active key"), "{text}");
    }
}
