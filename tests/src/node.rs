//! [`TestNode`]: one real `hookraft serve` process on loopback.
//!
//! The node gets a fresh temporary directory holding its data directory and
//! its log file (stdout and stderr, appended across restarts). The directory
//! lives as long as the `TestNode`, so `kill9` + `restart` finds the same
//! state. When a test panics, dropping the node prints the tail of its log.
//!
//! The child inherits the environment minus every `HOOKRAFT_*` variable, so a
//! developer's shell settings cannot change what a test exercises; set
//! variables explicitly with [`NodeOptions::env`].
//!
//! A cluster node needs a port known before it starts (its peers name it):
//! [`NodeOptions::port`] fixes it, [`TestNode::launch`] starts the process
//! without waiting (no node of a cluster is ready before a majority runs) and
//! [`TestNode::wait_until_ready`] waits. [`TestNode::sigstop`] and
//! [`TestNode::sigcont`] pause and resume the process, as a long GC pause or a
//! stalled VM would.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::Value;
use tempfile::TempDir;

use crate::binary::locate_hookraft_binary;

/// `(status, headers, body)`. The body is the parsed JSON, `Value::Null` when
/// empty, or `Value::String` with the raw text when it is not JSON.
pub type JsonResponse = (StatusCode, HeaderMap, Value);

/// How long a node may take to answer `GET /readyz` with 200.
pub const READY_DEADLINE: Duration = Duration::from_secs(60);
/// Pause between two readiness probes.
const READY_POLL: Duration = Duration::from_millis(50);
/// Processes that exit before becoming ready are started again this often
/// (on a new port for a first start, the same port for a restart).
const START_ATTEMPTS_MAX: usize = 5;
/// Per-request timeout of the helpers' client: no test request may hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of the log shown when a start fails or a test panics.
const LOG_TAIL_LINES: usize = 80;

/// How to start a node. `Default` allows private targets (the receiver is on
/// loopback) and sets no API token.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Pass `--allow-private-targets`; needed to deliver to 127.0.0.1.
    pub allow_private_targets: bool,
    /// Pass `--api-token`; the helpers then send it as a bearer token.
    pub api_token: Option<String>,
    /// Pass `--admin-token`; the helpers send it for `/v1/cluster/...`, and
    /// for every route when there is no API token.
    pub admin_token: Option<String>,
    /// Further arguments after the standard ones.
    pub extra_args: Vec<OsString>,
    /// Environment variables for the child.
    pub env: Vec<(OsString, OsString)>,
    /// The binary to run; `None` means [`locate_hookraft_binary`].
    pub binary: Option<PathBuf>,
    /// Listen on this port; `None` picks a free one (again on every start
    /// attempt). Cluster nodes need it: their peers are told the port first.
    pub port: Option<u16>,
    /// Serve HTTPS with the test certificates of `tests/fixtures/tls` (and
    /// call peers over it); the helpers then speak HTTPS, trusting that CA.
    pub tls: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            allow_private_targets: true,
            api_token: None,
            admin_token: None,
            extra_args: Vec::new(),
            env: Vec::new(),
            binary: None,
            port: None,
            tls: false,
        }
    }
}

impl NodeOptions {
    /// Serves HTTPS with the test certificates (see [`NodeOptions::tls`]).
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Runs the node without `--allow-private-targets`.
    pub fn without_private_targets(mut self) -> Self {
        self.allow_private_targets = false;
        self
    }

    pub fn api_token(mut self, token: &str) -> Self {
        self.api_token = Some(token.to_owned());
        self
    }

    pub fn admin_token(mut self, token: &str) -> Self {
        self.admin_token = Some(token.to_owned());
        self
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Listens on `127.0.0.1:<port>` on every start.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Appends several arguments after the standard ones.
    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// Why one start of the process did not end ready.
enum StartFailure {
    Exited(ExitStatus),
    NotReady,
}

/// A running `hookraft serve` on `127.0.0.1:<port>`; killed on drop.
pub struct TestNode {
    options: NodeOptions,
    binary: PathBuf,
    /// Holds `data/` and `node.log`; deleted when the node is dropped.
    dir: TempDir,
    port: u16,
    child: Option<Child>,
    client: reqwest::Client,
    /// Counts process starts, written as a marker into the log.
    starts: usize,
}

impl TestNode {
    /// Starts a node with default options and waits until it is ready.
    pub async fn start() -> Self {
        Self::start_with(NodeOptions::default()).await
    }

    /// Starts a node and waits until `GET /readyz` answers 200.
    pub async fn start_with(options: NodeOptions) -> Self {
        if options.port.is_some() {
            let mut node = Self::launch(options);
            node.wait_until_ready().await;
            return node;
        }
        let mut node = Self::unstarted(options);
        let mut last_exit = None;
        for _ in 0..START_ATTEMPTS_MAX {
            node.port = free_loopback_port();
            match node.spawn_and_wait_ready().await {
                Ok(()) => return node,
                // Most likely the port was taken between probe and bind.
                Err(StartFailure::Exited(status)) => last_exit = Some(status),
                Err(StartFailure::NotReady) => node.fail_start("did not become ready"),
            }
        }
        node.fail_start(&format!("exited before becoming ready on every attempt (last: {last_exit:?})"))
    }

    /// Starts the process on the fixed port of `options` and returns at once,
    /// without waiting for readiness (see [`TestNode::wait_until_ready`]).
    /// Panics when `options.port` is `None`.
    pub fn launch(options: NodeOptions) -> Self {
        let port = options.port.expect("TestNode::launch needs a fixed port (NodeOptions::port)");
        let mut node = Self::unstarted(options);
        node.port = port;
        let child = node.spawn().unwrap_or_else(|error| panic!("could not start {}: {error}", node.binary.display()));
        node.child = Some(child);
        node
    }

    /// Waits until `GET /readyz` answers 200; a process that exits first is
    /// started again on the same port (a few times).
    pub async fn wait_until_ready(&mut self) {
        self.respawn_until_ready("did not become ready").await;
    }

    fn unstarted(options: NodeOptions) -> Self {
        let binary = options.binary.clone().unwrap_or_else(locate_hookraft_binary);
        let dir = tempfile::Builder::new().prefix("hookraft-e2e-").tempdir().expect("create a temporary directory");
        fs::create_dir_all(dir.path().join("data")).expect("create the data directory");
        let mut builder = reqwest::Client::builder().no_proxy().timeout(REQUEST_TIMEOUT);
        if options.tls {
            builder = builder.tls_certs_only([test_ca()]);
        }
        let client = builder.build().expect("build the test HTTP client");
        let port = options.port.unwrap_or(0);
        Self { options, binary, dir, port, child: None, client, starts: 0 }
    }

    /// Kills the process with SIGKILL (no graceful shutdown) and reaps it.
    /// Works on a stopped process too.
    pub async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `kill` fails only when the process was already reaped.
            let _ = child.kill();
            child.wait().expect("reap the killed node");
        }
    }

    /// Starts the process again on the same data directory and port (killing
    /// it first if it still runs) and waits until it is ready.
    pub async fn restart(&mut self) {
        self.kill9().await;
        self.respawn_until_ready("did not become ready after a restart").await;
    }

    /// Whether a process was started and not killed (it may have exited by itself).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id, while a process runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Pauses the process with SIGSTOP: it keeps its sockets but runs no code
    /// (connections to it are accepted by the kernel and then hang).
    pub fn sigstop(&self) {
        self.signal("-STOP");
    }

    /// Resumes a process paused with [`TestNode::sigstop`].
    pub fn sigcont(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid().unwrap_or_else(|| panic!("node on port {} has no process to signal", self.port));
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .unwrap_or_else(|error| panic!("could not run `kill {signal} {pid}`: {error}"));
        assert!(status.success(), "`kill {signal} {pid}` failed: {status}");
    }

    /// The options the node was started with.
    pub fn options(&self) -> &NodeOptions {
        &self.options
    }

    /// Spawns when no process runs, then waits for readiness; an early exit
    /// (the port still held by a killed predecessor) is retried on the same port.
    async fn respawn_until_ready(&mut self, context: &str) {
        let mut last_exit = None;
        for _ in 0..START_ATTEMPTS_MAX {
            if self.child.is_none() {
                let child =
                    self.spawn().unwrap_or_else(|error| panic!("could not start {}: {error}", self.binary.display()));
                self.child = Some(child);
            }
            match self.wait_ready().await {
                Ok(()) => return,
                Err(StartFailure::Exited(status)) => {
                    last_exit = Some(status);
                    // The port may still be held by the killed process's sockets.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(StartFailure::NotReady) => {
                    self.kill9().await;
                    self.fail_start(context)
                }
            }
        }
        self.fail_start(&format!("{context}: exited before becoming ready on every attempt (last: {last_exit:?})"))
    }

    /// `http://127.0.0.1:<port><path>` (`https://` with TLS); `path` starts with `/`.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.options.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("node.log")
    }

    /// The shared client (no proxy, 30 s timeout). Requests built on it
    /// directly carry no token: use it to test authentication.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A request to `path`, with the bearer token when the node has one:
    /// the admin token under `/v1/cluster/`, else the API token (each
    /// standing in for the other when the node has only one).
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let builder = self.client.request(method, self.url(path));
        let (api, admin) = (self.options.api_token.as_ref(), self.options.admin_token.as_ref());
        let token = if path.starts_with("/v1/cluster/") { admin.or(api) } else { api.or(admin) };
        match token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// Sends a request; panics on a transport error.
    pub async fn send(&self, request: RequestBuilder) -> JsonResponse {
        let description = describe(&request);
        self.try_send(request).await.unwrap_or_else(|error| panic!("{description} failed: {error:?}"))
    }

    /// Sends a request; a transport error is returned, not a panic.
    pub async fn try_send(&self, request: RequestBuilder) -> Result<JsonResponse, reqwest::Error> {
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        Ok((status, headers, parse_body(&bytes)))
    }

    pub async fn get_json(&self, path: &str) -> JsonResponse {
        self.send(self.request(Method::GET, path)).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> JsonResponse {
        self.send(self.request(Method::POST, path).json(body)).await
    }

    /// `POST` with a JSON body and extra headers (e.g. `Idempotency-Key`).
    pub async fn post_json_with_headers(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> JsonResponse {
        let mut request = self.request(Method::POST, path).json(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request).await
    }

    /// `POST` without a body.
    pub async fn post_empty(&self, path: &str) -> JsonResponse {
        self.send(self.request(Method::POST, path)).await
    }

    pub async fn patch_json(&self, path: &str, body: &Value) -> JsonResponse {
        self.send(self.request(Method::PATCH, path).json(body)).await
    }

    pub async fn delete(&self, path: &str) -> JsonResponse {
        self.send(self.request(Method::DELETE, path)).await
    }

    /// Sum of a Prometheus metric (every label set) in the node's
    /// `/metrics`; `None` when it does not answer in `timeout` or does not
    /// export it.
    pub async fn metric(&self, name: &str, timeout: Duration) -> Option<f64> {
        let response = self.request(Method::GET, "/metrics").timeout(timeout).send().await.ok()?;
        crate::cluster::parse_metric(&response.text().await.ok()?, name)
    }

    /// The last `lines` lines of the node's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read(self.log_path()).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    async fn spawn_and_wait_ready(&mut self) -> Result<(), StartFailure> {
        let child = self.spawn().unwrap_or_else(|error| {
            panic!("could not start {}: {error}", self.binary.display());
        });
        self.child = Some(child);
        let result = self.wait_ready().await;
        if result.is_err() {
            self.kill9().await;
        }
        result
    }

    fn spawn(&mut self) -> std::io::Result<Child> {
        self.starts += 1;
        let mut log = OpenOptions::new().create(true).append(true).open(self.log_path())?;
        writeln!(log, "==== hookraft-tests: start #{} on 127.0.0.1:{} ====", self.starts, self.port)?;
        let mut command = Command::new(&self.binary);
        command
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(self.data_dir());
        if self.options.allow_private_targets {
            command.arg("--allow-private-targets");
        }
        if let Some(token) = &self.options.api_token {
            command.arg("--api-token").arg(token);
        }
        if let Some(token) = &self.options.admin_token {
            command.arg("--admin-token").arg(token);
        }
        if self.options.tls {
            let dir = tls_fixtures();
            command.arg("--tls-cert").arg(dir.join("node.pem"));
            command.arg("--tls-key").arg(dir.join("node.key"));
            command.arg("--tls-ca").arg(dir.join("ca.pem"));
        }
        command.args(&self.options.extra_args);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("HOOKRAFT_") {
                command.env_remove(key);
            }
        }
        command.envs(self.options.env.iter().map(|(k, v)| (k, v)));
        command.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        command.spawn()
    }

    async fn wait_ready(&mut self) -> Result<(), StartFailure> {
        let started = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(StartFailure::Exited(status));
            }
            let probe = self.client.get(self.url("/readyz")).timeout(Duration::from_secs(2)).send().await;
            if probe.is_ok_and(|response| response.status() == StatusCode::OK) {
                return Ok(());
            }
            if started.elapsed() >= READY_DEADLINE {
                return Err(StartFailure::NotReady);
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    fn fail_start(&self, what: &str) -> ! {
        panic!(
            "hookraft ({}) {what} on 127.0.0.1:{} within {} s; data dir {}; log tail:\n{}",
            self.binary.display(),
            self.port,
            READY_DEADLINE.as_secs(),
            self.data_dir().display(),
            self.log_tail(LOG_TAIL_LINES)
        )
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- hookraft node on port {} (log {}), last {LOG_TAIL_LINES} lines ----\n{}\n---- end of node log ----",
                self.port,
                self.log_path().display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The test-only certificates and keys (`tests/fixtures/tls`).
pub fn tls_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("tls")
}

/// The test CA, for clients of a node started with [`NodeOptions::tls`].
pub fn test_ca() -> reqwest::Certificate {
    let pem = fs::read(tls_fixtures().join("ca.pem")).expect("read the test CA");
    reqwest::Certificate::from_pem(&pem).expect("the test CA is PEM")
}

/// A port that was free a moment ago: bind port 0, read it, release it.
pub fn free_loopback_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
    listener.local_addr().expect("read the bound address").port()
}

fn parse_body(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn describe(request: &RequestBuilder) -> String {
    match request.try_clone().and_then(|r| r.build().ok()) {
        Some(built) => format!("{} {}", built.method(), built.url()),
        None => "request".to_owned(),
    }
}
