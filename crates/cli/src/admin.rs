//! `hookraft cluster ...`: the cluster administration API (docs/API.md,
//! "Cluster administration") from the command line.
//!
//! Every subcommand is one HTTP call to one node (`--node`, any node answers;
//! changes are committed through the leader). `status` prints a table; the
//! others print the JSON answer. A 4xx or 5xx answer prints its problem
//! document to stderr and makes the command fail (non-zero exit).
//!
//! This module owns no cluster logic: it turns flags into a request and an
//! answer into text. Rendering is pure ([`render_status`]) so it is tested
//! without a node.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, bail};
use hookraft_core::redact::SecretString;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Longest a whole admin call (connect, send, read the answer) may take.
/// Changes go through the leader, which may first have to be elected.
pub const REQUEST_TIMEOUT_MS: u64 = 15_000;
/// Longest the TCP connection to `--node` may take to open.
pub const CONNECT_TIMEOUT_MS: u64 = 3_000;

/// Flags of `hookraft cluster`.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
    #[command(flatten)]
    target: Target,
}

/// Which node to ask, and how to authenticate. Accepted before or after the
/// subcommand (`hookraft cluster status --node 10.0.0.2:8080`).
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// Address of any node of the cluster: `host:port` or an `http(s)://` URL.
    #[arg(long, env = "HOOKRAFT_NODE_ADDR", default_value = "127.0.0.1:8080", global = true)]
    pub node: String,
    /// A token of the admin scope (the node's `--admin-token`, or an
    /// `admin` line of its tokens file); the API token is not one.
    #[arg(long, env = "HOOKRAFT_ADMIN_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<SecretString>,
    /// PEM certificate of the authority to trust for an https:// node
    /// [default: the system's roots].
    #[arg(long, env = "HOOKRAFT_TLS_CA", global = true)]
    pub tls_ca: Option<std::path::PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum ClusterCommand {
    /// Show the leader, the term, every node (live, draining, shards owned) and the shard map summary.
    Status {
        /// Print the raw JSON answer instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Move one shard to a node, under a new fencing token.
    Move {
        /// Shard number (0-based).
        shard: u32,
        /// The node that will own it.
        node_id: u64,
    },
    /// Move every shard away from a node (it keeps serving ingest and reads).
    Drain {
        node_id: u64,
        /// Undo a drain: the node may own shards again.
        #[arg(long)]
        undo: bool,
    },
    /// Add a node: it joins as a learner at once and becomes a voter once
    /// caught up (`status` shows how far behind it is).
    /// Start it first with `--node-id` and `--peers` listing every member.
    Add {
        node_id: u64,
        /// The address peers and clients use to reach it (`host:port`).
        addr: String,
    },
    /// Remove a node from the voters (its shards move elsewhere), or a
    /// learner not yet promoted.
    Remove { node_id: u64 },
}

/// One admin HTTP call, decided from the flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
}

impl ClusterCommand {
    fn call(&self) -> Call {
        let call = |method, path: String, body| Call { method, path, body };
        match self {
            ClusterCommand::Status { .. } => call(Method::GET, "/v1/cluster".into(), None),
            ClusterCommand::Move { shard, node_id } => {
                call(Method::POST, format!("/v1/cluster/shards/{shard}/move"), Some(json!({ "node_id": node_id })))
            }
            ClusterCommand::Drain { node_id, undo } => {
                let method = if *undo { Method::DELETE } else { Method::POST };
                call(method, format!("/v1/cluster/nodes/{node_id}/drain"), None)
            }
            ClusterCommand::Add { node_id, addr } => {
                call(Method::POST, "/v1/cluster/nodes".into(), Some(json!({ "id": node_id, "addr": addr })))
            }
            ClusterCommand::Remove { node_id } => call(Method::DELETE, format!("/v1/cluster/nodes/{node_id}"), None),
        }
    }
}

/// Runs one `hookraft cluster` subcommand.
pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let client = AdminClient::new(&args.target, REQUEST_TIMEOUT_MS)?;
    let body = client.call(&args.command.call()).await?;
    match args.command {
        ClusterCommand::Status { json: false } => print!("{}", render_status(&body)),
        _ => println!("{}", pretty(&body)),
    }
    Ok(())
}

/// One node's admin API, as `--node`, `--token` and `--tls-ca` name it:
/// the client `hookraft cluster` and `hookraft keys` share.
pub struct AdminClient {
    base: String,
    token: Option<SecretString>,
    client: reqwest::Client,
}

impl AdminClient {
    /// A client for `target` whose every call may take `timeout_ms` in all.
    pub fn new(target: &Target, timeout_ms: u64) -> anyhow::Result<Self> {
        let base = base_url(&target.node)?;
        let token = target.token.clone();
        let mut builder = reqwest::Client::builder();
        if let Some(path) = &target.tls_ca {
            let pem = std::fs::read(path).with_context(|| format!("reading --tls-ca {}", path.display()))?;
            builder =
                builder.tls_certs_only(reqwest::Certificate::from_pem_bundle(&pem).context("--tls-ca is not PEM")?);
        }
        let client = builder
            .timeout(Duration::from_millis(timeout_ms))
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .build()
            .context("building the HTTP client")?;
        Ok(Self { base, token, client })
    }

    /// Sends `call` and returns the answer's body. A 4xx or 5xx answer
    /// prints its problem document to stderr and is an error.
    pub async fn call(&self, call: &Call) -> anyhow::Result<Value> {
        let (status, body) = self.send(call).await?;
        if status.is_client_error() || status.is_server_error() {
            eprintln!("{}", pretty(&body));
            bail!("{} {} answered {}", call.method, call.path, describe_problem(status, &body));
        }
        Ok(body)
    }

    /// Sends `call` and returns the status and the body (JSON when it
    /// parses, else the text as a JSON string).
    async fn send(&self, call: &Call) -> anyhow::Result<(StatusCode, Value)> {
        let url = format!("{}{}", self.base, call.path);
        let mut request = self.client.request(call.method.clone(), &url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token.expose());
        }
        if let Some(body) = &call.body {
            request = request.json(body);
        }
        let response =
            request.send().await.with_context(|| format!("{} {url}: no answer from the node", call.method))?;
        let status = response.status();
        let text = response.text().await.with_context(|| format!("{} {url}: reading the answer", call.method))?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, body))
    }
}

/// `host:port` or a URL, as the base URL every path is appended to.
fn base_url(node: &str) -> anyhow::Result<String> {
    let node = node.trim().trim_end_matches('/');
    if node.is_empty() {
        bail!("--node is empty: give host:port of any node, e.g. 127.0.0.1:8080");
    }
    if node.starts_with("http://") || node.starts_with("https://") {
        Ok(node.to_string())
    } else if node.contains("://") {
        bail!("--node {node}: only http:// and https:// are supported")
    } else {
        Ok(format!("http://{node}"))
    }
}

/// `409 Conflict: node 3 is draining` from a problem document.
fn describe_problem(status: StatusCode, body: &Value) -> String {
    let detail = body
        .get("detail")
        .and_then(Value::as_str)
        .or_else(|| body.get("title").and_then(Value::as_str))
        .or_else(|| body.as_str().filter(|s| !s.trim().is_empty()));
    let hint = match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => " (pass an admin token: --token or HOOKRAFT_ADMIN_TOKEN)",
        _ => "",
    };
    match detail {
        Some(detail) => format!("{status}: {}{hint}", detail.trim()),
        None => format!("{status}{hint}"),
    }
}

pub fn pretty(body: &Value) -> String {
    match body {
        Value::String(text) => text.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

/// The `GET /v1/cluster` answer as a short report and a table of nodes.
/// Fields a node does not report show as `-`.
pub fn render_status(body: &Value) -> String {
    let text = |v: Option<&Value>| match v {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(true)) => "yes".to_string(),
        Some(Value::Bool(false)) => "no".to_string(),
        Some(other) => other.to_string(),
    };
    let mut out = String::new();
    let leader = match body.get("leader_id") {
        None | Some(Value::Null) => "none (no leader elected: writes are refused)".to_string(),
        Some(id) => text(Some(id)),
    };
    let _ = writeln!(out, "asked node: {}", text(body.get("node_id")));
    let _ = writeln!(out, "leader:     {leader}");
    let _ = writeln!(out, "term:       {}", text(body.get("term")));
    let shards = body.get("shards").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let unowned = shards.iter().filter(|s| s.get("owner").is_none_or(Value::is_null)).count();
    let token_max = shards.iter().filter_map(|s| s.get("token").and_then(Value::as_u64)).max();
    let _ = writeln!(
        out,
        "shards:     {} ({unowned} unowned, highest fencing token {})",
        shards.len(),
        token_max.map_or("-".to_string(), |t| t.to_string())
    );
    if let Some(stale) = body.get("outcomes_rejected_stale") {
        let _ = writeln!(out, "stale outcomes rejected: {}", text(Some(stale)));
    }
    let header = ["ID", "ADDR", "VOTER", "LIVE", "DRAINING", "SHARDS", "BEHIND", "LAST HEARTBEAT"];
    let keys = ["id", "addr", "voter", "live", "draining", "shards_owned", "entries_behind", "last_heartbeat_at"];
    let nodes = body.get("nodes").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|node| {
            let mut row: Vec<String> = keys.iter().map(|k| text(node.get(*k))).collect();
            if node.get("id").is_some() && node.get("id") == body.get("leader_id") {
                row[0].push('*');
            }
            row
        })
        .collect();
    out.push('\n');
    out.push_str(&table(&header, &rows));
    if rows.is_empty() {
        out.push_str("(no nodes reported)\n");
    } else {
        out.push_str("* leader\n");
    }
    out
}

/// Left-aligned columns separated by two spaces, no trailing blanks.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: ClusterArgs,
    }

    fn parse(argv: &[&str]) -> ClusterArgs {
        let mut full = vec!["cluster"];
        full.extend_from_slice(argv);
        Cli::try_parse_from(full).expect("parses").args
    }

    #[test]
    fn move_posts_the_target_node_to_the_shard_route() {
        let args = parse(&["move", "7", "2", "--node", "10.0.0.2:8080"]);
        assert_eq!(
            args.command.call(),
            Call { method: Method::POST, path: "/v1/cluster/shards/7/move".into(), body: Some(json!({"node_id": 2})) }
        );
        assert_eq!(args.target.node, "10.0.0.2:8080");
    }

    #[test]
    fn drain_posts_and_drain_undo_deletes() {
        assert_eq!(parse(&["drain", "3"]).command.call().method, Method::POST);
        let undo = parse(&["drain", "3", "--undo"]).command.call();
        assert_eq!((undo.method, undo.path.as_str()), (Method::DELETE, "/v1/cluster/nodes/3/drain"));
    }

    #[test]
    fn add_and_remove_use_the_nodes_routes() {
        let add = parse(&["add", "4", "node4:8080"]).command.call();
        assert_eq!(add.path, "/v1/cluster/nodes");
        assert_eq!(add.body, Some(json!({"id": 4, "addr": "node4:8080"})));
        let remove = parse(&["--node", "h:1", "remove", "4"]);
        assert_eq!(remove.command.call().method, Method::DELETE);
        assert_eq!(remove.target.node, "h:1");
    }

    #[test]
    fn move_with_a_non_numeric_shard_is_refused_by_the_parser() {
        assert!(Cli::try_parse_from(["cluster", "move", "x", "2"]).is_err());
    }

    #[test]
    fn node_address_becomes_an_http_base_url() {
        assert_eq!(base_url("127.0.0.1:8080").expect("ok"), "http://127.0.0.1:8080");
        assert_eq!(base_url("https://h:1/").expect("ok"), "https://h:1");
        assert!(base_url("ftp://h:1").is_err());
        assert!(base_url(" ").is_err());
    }

    #[test]
    fn problem_detail_is_preferred_and_401_hints_at_the_token() {
        let body = json!({"title": "Conflict", "status": 409, "detail": "node 3 is draining"});
        assert_eq!(describe_problem(StatusCode::CONFLICT, &body), "409 Conflict: node 3 is draining");
        let unauthorized = describe_problem(StatusCode::UNAUTHORIZED, &json!({"title": "Unauthorized"}));
        assert!(unauthorized.contains("--token"), "{unauthorized}");
    }

    #[test]
    fn status_table_marks_the_leader_and_counts_unowned_shards() {
        let body = json!({
            "node_id": 2, "leader_id": 1, "term": 3,
            "nodes": [
                {"id": 1, "addr": "node1:8080", "voter": true, "live": true, "draining": false, "shards_owned": 1},
                {"id": 2, "live": false, "draining": true, "shards_owned": 0},
                {"id": 3, "addr": "node3:8080", "voter": false, "member": true, "live": false, "draining": false,
                 "shards_owned": 0, "entries_behind": 5210}
            ],
            "shards": [{"shard": 0, "owner": 1, "token": 65}, {"shard": 1, "owner": null, "token": 0}]
        });
        let text = render_status(&body);
        assert!(text.contains("leader:     1\n"), "{text}");
        assert!(text.contains("shards:     2 (1 unowned, highest fencing token 65)"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        let header = lines.iter().position(|l| l.starts_with("ID")).expect("a header line");
        assert_eq!(lines[header + 1], "1*  node1:8080  yes    yes   no        1       -       -");
        assert_eq!(lines[header + 2], "2   -           -      no    yes       0       -       -");
        assert_eq!(
            lines[header + 3],
            "3   node3:8080  no     no    no        0       5210    -",
            "a learner catching up"
        );
    }

    #[test]
    fn status_without_a_leader_says_writes_are_refused() {
        let text = render_status(&json!({"node_id": 1, "leader_id": null, "term": 0, "nodes": [], "shards": []}));
        assert!(text.contains("no leader elected"), "{text}");
        assert!(text.contains("(no nodes reported)"), "{text}");
    }
}
