//! The docker command line, as the chaos run needs it: find the node
//! containers and their network, inject a fault into one container, heal it.
//!
//! Every call runs `docker` (or `docker-compose`) through
//! `std::process::Command` under a deadline; a call that overruns is killed
//! and reported. Outputs are small (ids, names, JSON of one field), so reading
//! them after the process exits cannot fill a pipe.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Longest one docker command may take (`docker start` of a node included).
pub const DOCKER_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a running docker command is checked for completion.
const DOCKER_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Runs `program args...` and returns its trimmed stdout; an exit code other
/// than 0 is an error carrying stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let rendered = format!("{program} {}", args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting `{rendered}`"))?;
    let started = Instant::now();
    loop {
        if child.try_wait().with_context(|| format!("waiting for `{rendered}`"))?.is_some() {
            break;
        }
        if started.elapsed() > DOCKER_COMMAND_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`{rendered}` took longer than {DOCKER_COMMAND_TIMEOUT:?}; killed");
        }
        std::thread::sleep(DOCKER_POLL_INTERVAL);
    }
    let output = child.wait_with_output().with_context(|| format!("reading the output of `{rendered}`"))?;
    if !output.status.success() {
        bail!("`{rendered}` failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

pub fn docker(args: &[&str]) -> Result<String> {
    run("docker", args)
}

/// `docker-compose` when installed, else the `docker compose` plugin.
fn compose(file: &Path, args: &[&str]) -> Result<String> {
    let file = file.to_str().context("the compose file path is not UTF-8")?;
    let mut full = vec!["-f", file];
    full.extend_from_slice(args);
    if run("docker-compose", &["version"]).is_ok() {
        return run("docker-compose", &full);
    }
    let mut plugin = vec!["compose"];
    plugin.extend(full);
    docker(&plugin)
}

/// The container id of each compose service, in order.
pub fn compose_containers(file: &Path, services: &[String]) -> Result<Vec<String>> {
    services
        .iter()
        .map(|service| {
            let id = compose(file, &["ps", "-q", service])?;
            match id.lines().next() {
                Some(id) if !id.trim().is_empty() => Ok(id.trim().to_string()),
                _ => bail!("compose service {service} has no container: is the deployment up?"),
            }
        })
        .collect()
}

/// The first network a container is attached to.
pub fn network_of(container: &str) -> Result<String> {
    let names = docker(&["inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", container])?;
    names.split_whitespace().next().map(str::to_string).with_context(|| format!("container {container} has no network"))
}

/// The IPv4 gateway of a network: the host as containers on it see it.
pub fn gateway_of(network: &str) -> Result<String> {
    let gateways = docker(&["network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}} {{end}}", network])?;
    gateways
        .split_whitespace()
        .find(|g| g.parse::<std::net::Ipv4Addr>().is_ok())
        .map(str::to_string)
        .with_context(|| format!("network {network} has no IPv4 gateway; pass --receiver-host"))
}

/// The DNS aliases a container has on a network (its compose service name
/// among them): `docker network connect` must restore them, or peers can no
/// longer resolve the node.
pub fn aliases_on(container: &str, network: &str) -> Result<Vec<String>> {
    let format = format!("{{{{json (index .NetworkSettings.Networks \"{network}\").Aliases}}}}");
    let text = docker(&["inspect", "-f", &format, container])?;
    let aliases: Option<Vec<String>> =
        serde_json::from_str(&text).with_context(|| format!("aliases of {container}: {text}"))?;
    Ok(aliases.unwrap_or_default())
}

/// The faults the schedule injects, each healed by its counterpart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// `docker kill` (SIGKILL), healed by `docker start`.
    Kill,
    /// `docker pause` (cgroup freezer), healed by `docker unpause`.
    Pause,
    /// `docker network disconnect`, healed by `docker network connect` with the same aliases.
    Disconnect,
}

impl Fault {
    pub fn parse(text: &str) -> Result<Self> {
        match text.trim() {
            "kill" => Ok(Fault::Kill),
            "pause" => Ok(Fault::Pause),
            "disconnect" => Ok(Fault::Disconnect),
            other => bail!("unknown fault {other:?}: use kill, pause or disconnect"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Disconnect => "disconnect",
        }
    }
}

/// The node containers under test, with what healing them needs.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub containers: Vec<String>,
    pub network: String,
    /// Each container's aliases on `network`, read before any fault.
    pub aliases: BTreeMap<String, Vec<String>>,
}

impl Deployment {
    pub fn new(containers: Vec<String>, network: String) -> Result<Self> {
        let mut aliases = BTreeMap::new();
        for container in &containers {
            aliases.insert(container.clone(), aliases_on(container, &network)?);
        }
        Ok(Self { containers, network, aliases })
    }

    pub fn inject(&self, fault: Fault, container: &str) -> Result<()> {
        match fault {
            Fault::Kill => docker(&["kill", container]).map(drop),
            Fault::Pause => docker(&["pause", container]).map(drop),
            Fault::Disconnect => docker(&["network", "disconnect", &self.network, container]).map(drop),
        }
    }

    pub fn heal(&self, fault: Fault, container: &str) -> Result<()> {
        match fault {
            Fault::Kill => docker(&["start", container]).map(drop),
            Fault::Pause => docker(&["unpause", container]).map(drop),
            Fault::Disconnect => self.connect(container),
        }
    }

    fn connect(&self, container: &str) -> Result<()> {
        let mut args = vec!["network", "connect"];
        for alias in self.aliases.get(container).into_iter().flatten() {
            args.extend(["--alias", alias.as_str()]);
        }
        args.extend([self.network.as_str(), container]);
        docker(&args).map(drop)
    }

    /// Undoes every fault on every container, whatever state it is in:
    /// running, unpaused and attached to the network afterwards.
    pub fn heal_all(&self) -> Vec<String> {
        let mut problems = Vec::new();
        for container in &self.containers {
            let state = docker(&["inspect", "-f", "{{.State.Status}}", container]);
            let result = match state.as_deref() {
                Ok("paused") => docker(&["unpause", container]).map(drop),
                Ok("running") => Ok(()),
                Ok(_) => docker(&["start", container]).map(drop),
                Err(e) => Err(anyhow::anyhow!("{e:#}")),
            };
            if let Err(e) = result {
                problems.push(format!("{container}: {e:#}"));
            }
            if let Ok(false) = self.attached(container)
                && let Err(e) = self.connect(container)
            {
                problems.push(format!("{container}: {e:#}"));
            }
        }
        problems
    }

    fn attached(&self, container: &str) -> Result<bool> {
        let names =
            docker(&["inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}", container])?;
        Ok(names.split_whitespace().any(|n| n == self.network))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_names_round_trip_and_unknown_names_are_refused() {
        for fault in [Fault::Kill, Fault::Pause, Fault::Disconnect] {
            assert_eq!(Fault::parse(fault.name()).expect("known"), fault);
        }
        assert!(Fault::parse("reboot").is_err());
    }
}
