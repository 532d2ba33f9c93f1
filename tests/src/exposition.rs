//! A checker of Prometheus exposition text (format 0.0.4, and OpenMetrics
//! 1.0 text), written from the formats' rules, not from hookraft's code:
//! every sample belongs to the family declared just before it, with its
//! `# HELP` and `# TYPE`; family names and series are unique; histogram
//! buckets are cumulative, in increasing `le` order, end with `+Inf`, and
//! agree with `_count`. [`parse`] also hands back every sample, for tests to
//! read values from.

use std::collections::{BTreeMap, BTreeSet};

/// A sample's labels, in the order written.
pub type Labels = Vec<(String, String)>;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Labels,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// A declared family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: String,
}

/// What a well-formed exposition holds.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    pub families: Vec<Family>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The samples named `name` whose labels include every one of `labels`.
    pub fn find<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
    }

    /// The sum of [`Exposition::find`]'s values; `None` when there is none.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.find(name, labels).map(|s| s.value).reduce(|a, b| a + b)
    }

    pub fn family(&self, name: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.name == name)
    }
}

/// Which text format to hold the exposition to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`: a counter's family is named with its `_total`.
    Prometheus,
    /// OpenMetrics 1.0: a counter's family is named without it, and the text ends with `# EOF`.
    OpenMetrics,
}

/// Parses and checks `text`; the error says what is wrong and where.
pub fn parse(text: &str, format: Format) -> Result<Exposition, String> {
    let mut out = Exposition::default();
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    let mut series = BTreeSet::new();
    let mut ended = false;
    for (n, line) in text.lines().enumerate() {
        let at = |what: String| format!("line {}: {what}: {line:?}", n + 1);
        if ended {
            return Err(at("text after # EOF".into()));
        }
        if line.is_empty() {
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (keyword, name, rest) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
            match (keyword, name) {
                (Some("EOF"), None) if format == Format::OpenMetrics => ended = true,
                (Some("HELP"), Some(name)) => {
                    if helps.insert(name.to_string(), rest.to_string()).is_some() {
                        return Err(at(format!("a second HELP for {name}")));
                    }
                }
                (Some("TYPE"), Some(name)) => {
                    if out.families.iter().any(|f| f.name == name) {
                        return Err(at(format!("family {name} declared twice")));
                    }
                    let Some(help) = helps.get(name) else {
                        return Err(at(format!("no HELP before the TYPE of {name}")));
                    };
                    if !KINDS.contains(&rest) {
                        return Err(at(format!("unknown type {rest}")));
                    }
                    out.families.push(Family { name: name.into(), kind: rest.into(), help: help.clone() });
                }
                (Some("UNIT"), Some(name)) if format == Format::OpenMetrics => {
                    if !name.ends_with(&format!("_{rest}")) {
                        return Err(at(format!("{name} does not end with its unit {rest}")));
                    }
                }
                _ => return Err(at("not a HELP, TYPE, UNIT or EOF line".into())),
            }
            continue;
        }
        let sample = sample(line).map_err(at)?;
        let Some(family) = out.families.last() else { return Err(at("a sample before any family".into())) };
        if !belongs(&sample.name, family, format) {
            return Err(at(format!("not a sample of {} ({}), the family declared last", family.name, family.kind)));
        }
        let mut key = sample.labels.clone();
        key.sort();
        if !series.insert((sample.name.clone(), key)) {
            return Err(at("the same series twice".into()));
        }
        out.samples.push(sample);
    }
    if format == Format::OpenMetrics && !ended {
        return Err("no # EOF at the end".into());
    }
    if let Some(name) = helps.keys().find(|name| !out.families.iter().any(|f| &f.name == *name)) {
        return Err(format!("HELP for {name}, which has no TYPE"));
    }
    for family in out.families.iter().filter(|f| f.kind == "histogram") {
        histogram(&out, family)?;
    }
    Ok(out)
}

const KINDS: [&str; 6] = ["counter", "gauge", "histogram", "summary", "untyped", "unknown"];

/// Whether a sample named `name` is one of `family`'s.
fn belongs(name: &str, family: &Family, format: Format) -> bool {
    let Some(suffix) = name.strip_prefix(family.name.as_str()) else { return false };
    match (family.kind.as_str(), format) {
        ("counter", Format::Prometheus) => suffix.is_empty() && name.ends_with("_total"),
        ("counter", Format::OpenMetrics) => ["_total", "_created"].contains(&suffix),
        ("histogram", _) => ["_bucket", "_sum", "_count", "_created"].contains(&suffix),
        ("summary", _) => ["", "_sum", "_count", "_created"].contains(&suffix),
        _ => suffix.is_empty(),
    }
}

/// Each label set of a histogram: buckets in increasing `le` order with
/// counts that never fall, the last `+Inf`, equal to `_count`; a `_sum`.
fn histogram(exposition: &Exposition, family: &Family) -> Result<(), String> {
    let without_le = |s: &Sample| {
        let mut labels: Vec<_> = s.labels.iter().filter(|(k, _)| k != "le").cloned().collect();
        labels.sort();
        labels
    };
    let mut buckets: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
    let bucket_name = format!("{}_bucket", family.name);
    for s in exposition.samples.iter().filter(|s| s.name == bucket_name) {
        let le = s.label("le").ok_or_else(|| format!("{bucket_name} without le"))?;
        let bound = if le == "+Inf" { f64::INFINITY } else { le.parse().map_err(|_| format!("le {le:?}"))? };
        buckets.entry(without_le(s)).or_default().push((bound, s.value));
    }
    if buckets.is_empty() {
        return Err(format!("histogram {} has no buckets", family.name));
    }
    for (labels, list) in &buckets {
        let what = format!("{}{labels:?}", family.name);
        if !list.windows(2).all(|w| w[0].0 < w[1].0) {
            return Err(format!("{what}: le bounds not increasing: {list:?}"));
        }
        if !list.windows(2).all(|w| w[0].1 <= w[1].1) {
            return Err(format!("{what}: buckets not cumulative: {list:?}"));
        }
        let Some(&(last, inf)) = list.last() else { continue };
        if last != f64::INFINITY {
            return Err(format!("{what}: the last bucket is not +Inf"));
        }
        let of_set = |suffix: &str| {
            let name = format!("{}{suffix}", family.name);
            exposition.samples.iter().find(|s| s.name == name && &without_le(s) == labels).map(|s| s.value)
        };
        if of_set("_count") != Some(inf) {
            return Err(format!("{what}: _count {:?} is not the +Inf bucket {inf}", of_set("_count")));
        }
        if of_set("_sum").is_none() {
            return Err(format!("{what}: no _sum"));
        }
    }
    Ok(())
}

/// `name{k="v",...} value [timestamp]`.
fn sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inside) = rest.strip_prefix('{') {
        let (parsed, after) = label_list(inside)?;
        labels = parsed;
        rest = after;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    if fields.nth(1).is_some() {
        return Err("more than a value and a timestamp".into());
    }
    Ok(Sample { name: name.into(), labels, value })
}

/// The labels up to the closing brace, and what follows it.
fn label_list(mut text: &str) -> Result<(Labels, &str), String> {
    let mut labels: Labels = Vec::new();
    loop {
        if let Some(after) = text.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = text.find('=').ok_or("a label without =")?;
        let key = &text[..eq];
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad label name {key:?}"));
        }
        if labels.iter().any(|(k, _)| k == key) {
            return Err(format!("label {key} twice"));
        }
        let mut chars = text[eq + 1..].char_indices();
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err(format!("label {key} is not quoted"));
        }
        let (mut value, mut end) = (String::new(), None);
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('n') => value.push('\n'),
                    Some(c @ ('\\' | '"')) => value.push(c),
                    other => return Err(format!("bad escape {other:?} in label {key}")),
                },
                c => value.push(c),
            }
        }
        let end = end.ok_or(format!("label {key} is not closed"))?;
        labels.push((key.into(), value));
        text = &text[end..];
        text = text.strip_prefix(',').unwrap_or(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# HELP a_total As.\n# TYPE a_total counter\na_total{k=\"x\\\"y\"} 3\n\
                        # HELP h Hs.\n# TYPE h histogram\nh_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\n\
                        h_sum 1.5\nh_count 2\n# HELP g Gs.\n# TYPE g gauge\ng 4\n";

    #[test]
    fn a_well_formed_text_parses_with_its_samples() {
        let parsed = parse(GOOD, Format::Prometheus).expect("well formed");
        assert_eq!(parsed.families.len(), 3);
        assert_eq!(parsed.value("a_total", &[("k", "x\"y")]), Some(3.0));
        assert_eq!(parsed.value("h_count", &[]), Some(2.0));
        let open = "# HELP a As.\n# TYPE a counter\n# UNIT a_seconds seconds\na_total 1\n# EOF\n";
        assert!(parse(open, Format::OpenMetrics).is_ok());
    }

    #[test]
    fn each_broken_rule_is_named() {
        for (text, says) in [
            ("# TYPE g gauge\ng 1\n", "no HELP"),
            ("# HELP g G.\ng 1\n", "a sample before any family"),
            ("# HELP g G.\n# TYPE g gauge\nf 1\n", "not a sample of g"),
            ("# HELP g G.\n# TYPE g gauge\ng 1\ng 2\n", "the same series twice"),
            ("# HELP g G.\n# TYPE g gauge\n# HELP g G.\n# TYPE g gauge\n", "a second HELP"),
            (
                "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                "not cumulative",
            ),
            ("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "not +Inf"),
            ("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", "_count"),
            ("# HELP c C.\n# TYPE c counter\nc 1\n", "not a sample of c"),
            ("# HELP g G.\n# TYPE g gauge\ng{k=v} 1\n", "not quoted"),
            ("# HELP g G.\n# TYPE g gauge\ng one\n", "bad value"),
        ] {
            let error = parse(text, Format::Prometheus).expect_err(says);
            assert!(error.contains(says), "{says:?} not in {error:?}");
        }
        let error = parse("# HELP a A.\n# TYPE a counter\na_total 1\n", Format::OpenMetrics).expect_err("no EOF");
        assert!(error.contains("EOF"), "{error}");
    }
}
