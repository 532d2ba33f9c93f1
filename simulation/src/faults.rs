//! Faults chosen by the seed, injected during the fault phase and healed
//! after it: partitions (the leader isolated, a 2–1 split, a one-way link),
//! crashes with restarts on the same disk, lossy and duplicating links,
//! stalls, slow disks, wall-clock steps, and an operator moving shards and
//! removing and re-adding voters through the admin API while all that goes
//! on. Clock skew and drift are set per node when the cluster is built; a
//! step changes the skew within the same bound.

use std::collections::BTreeMap;
use std::time::Duration;

use hookraft_core::ids::{NodeId, SHARD_COUNT};
use hookraft_raft::Raft;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use crate::clock::SKEW_MS_MAX;
use crate::cluster::{Cluster, call};
use crate::net::LinkModel;
use crate::trace::Trace;

/// The kinds of fault a run may inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    /// The leader cut off from everyone.
    IsolateLeader,
    /// One node cut off from everyone (a 2–1 or 4–1 split).
    Split,
    /// One direction of one link lost.
    OneWay,
    /// A node killed, its unflushed writes lost, restarted later.
    Crash,
    /// Every link slow, lossy and duplicating.
    Lossy,
    /// An operator moving a shard through the admin API.
    MoveShard,
    /// A node's process stops for longer than its lease (no message in or
    /// out), then wakes believing it still owns its shards.
    Stall,
    /// A node's flushes (fsyncs) slow for a while.
    SlowDisk,
    /// A node's wall clock stepped (forwards or backwards), within the skew
    /// bound; its monotonic clock does not move.
    ClockStep,
    /// An operator removing a voter through the admin API, and adding it
    /// back later (the node keeps running meanwhile, on its old state).
    Membership,
}

impl Shape {
    /// The shape's name on the command line (`--faults crash,split`).
    pub fn name(self) -> &'static str {
        match self {
            Shape::IsolateLeader => "isolate-leader",
            Shape::Split => "split",
            Shape::OneWay => "one-way",
            Shape::Crash => "crash",
            Shape::Lossy => "lossy",
            Shape::MoveShard => "move-shard",
            Shape::Stall => "stall",
            Shape::SlowDisk => "slow-disk",
            Shape::ClockStep => "clock-step",
            Shape::Membership => "membership",
        }
    }

    /// The shape named `name` (see [`Shape::name`]).
    pub fn parse(name: &str) -> Result<Shape, String> {
        Shape::ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Shape::ALL.iter().map(|s| s.name()).collect();
            format!("unknown fault `{name}`: one of {}", names.join(", "))
        })
    }

    pub const ALL: [Shape; 10] = [
        Shape::IsolateLeader,
        Shape::Split,
        Shape::OneWay,
        Shape::Crash,
        Shape::Lossy,
        Shape::MoveShard,
        Shape::Stall,
        Shape::SlowDisk,
        Shape::ClockStep,
        Shape::Membership,
    ];
}

/// An active fault and when it ends (true ms).
#[derive(Debug)]
enum Active {
    Cut {
        links: Vec<(NodeId, NodeId)>,
        until_ms: u64,
    },
    Down {
        node: NodeId,
        until_ms: u64,
    },
    Lossy {
        until_ms: u64,
    },
    Stalled {
        node: NodeId,
        links: Vec<(NodeId, NodeId)>,
        until_ms: u64,
    },
    SlowDisk {
        node: NodeId,
        until_ms: u64,
    },
    /// A voter removal in flight or done; the node is added back when it ends.
    Removed {
        node: NodeId,
        until_ms: u64,
        removal: tokio::task::JoinHandle<()>,
    },
}

/// How long the heal phase waits for removed voters to be back.
const REJOIN_BOUND: Duration = Duration::from_secs(60);

/// The fault schedule of one run.
pub struct Faults {
    rng: StdRng,
    shapes: Vec<Shape>,
    active: Vec<Active>,
    next_ms: u64,
    trace: Trace,
    pub injected: BTreeMap<&'static str, u32>,
    /// Re-additions of removed voters still under way.
    rejoins: Vec<tokio::task::JoinHandle<bool>>,
}

impl Faults {
    /// A schedule drawing from `shapes` (every shape when empty).
    pub fn new(seed: u64, shapes: &[Shape], trace: Trace) -> Self {
        let shapes = if shapes.is_empty() { Shape::ALL.to_vec() } else { shapes.to_vec() };
        Self {
            rng: StdRng::seed_from_u64(seed),
            shapes,
            active: Vec::new(),
            next_ms: 2_000,
            trace,
            injected: BTreeMap::new(),
            rejoins: Vec::new(),
        }
    }

    fn note(&mut self, shape: Shape, detail: String) {
        let kind = shape.name();
        *self.injected.entry(kind).or_default() += 1;
        self.trace.record(format!("fault {kind} {detail}"));
    }

    /// Ends what is due and maybe starts a new fault. At most one node is
    /// down at a time, so a majority can always be reached once links heal.
    pub async fn step(&mut self, cluster: &mut Cluster, now_ms: u64) -> anyhow::Result<()> {
        self.expire(cluster, now_ms, false).await?;
        if now_ms < self.next_ms {
            return Ok(());
        }
        self.next_ms = now_ms + self.rng.random_range(1_000..4_000);
        let ids: Vec<NodeId> = cluster.nodes.keys().copied().collect();
        let victim = ids[self.rng.random_range(0..ids.len())];
        let until_ms = now_ms + self.rng.random_range(1_000..7_000);
        // One node out at a time: down, stalled, or out of the voters.
        let anyone_down = !self.rejoins.iter().all(|r| r.is_finished())
            || self
                .active
                .iter()
                .any(|a| matches!(a, Active::Down { .. } | Active::Stalled { .. } | Active::Removed { .. }));
        match self.shapes[self.rng.random_range(0..self.shapes.len())] {
            Shape::IsolateLeader => {
                let target = cluster.leader().unwrap_or(victim);
                let links = isolate(&ids, target);
                self.cut(cluster, &links, true);
                self.note(Shape::IsolateLeader, format!("n{target} until {until_ms}"));
                self.active.push(Active::Cut { links, until_ms });
            }
            Shape::Split => {
                let links = isolate(&ids, victim);
                self.cut(cluster, &links, true);
                self.note(Shape::Split, format!("n{victim} alone until {until_ms}"));
                self.active.push(Active::Cut { links, until_ms });
            }
            Shape::OneWay => {
                let other = ids[(ids.iter().position(|i| *i == victim).unwrap_or(0) + 1) % ids.len()];
                let links = vec![(victim, other)];
                self.cut(cluster, &links, true);
                self.note(Shape::OneWay, format!("n{victim}->n{other} until {until_ms}"));
                self.active.push(Active::Cut { links, until_ms });
            }
            Shape::Stall if anyone_down => {}
            Shape::Stall => {
                let links = isolate(&ids, victim);
                self.cut(cluster, &links, true);
                cluster.receivers.set_stalled(victim, true);
                let until_ms = now_ms + crate::cluster::LEASE_MS * 2 + self.rng.random_range(500..3_000);
                self.note(Shape::Stall, format!("n{victim} until {until_ms}"));
                self.active.push(Active::Stalled { node: victim, links, until_ms });
            }
            Shape::Crash if anyone_down => {}
            Shape::Crash => {
                cluster.crash(victim).await;
                self.note(Shape::Crash, format!("n{victim} until {until_ms}"));
                self.active.push(Active::Down { node: victim, until_ms });
            }
            Shape::Lossy => {
                cluster.net.set_model(LinkModel {
                    delay_ms_min: 1,
                    delay_ms_max: 60,
                    drop_ppm: 50_000,
                    duplicate_ppm: 20_000,
                });
                self.note(Shape::Lossy, format!("until {until_ms}"));
                self.active.push(Active::Lossy { until_ms });
            }
            Shape::SlowDisk => {
                let delay_ms = self.rng.random_range(20..600);
                if let Some(node) = cluster.nodes.get(&victim) {
                    node.disk.set_flush_delay(Duration::from_millis(delay_ms));
                }
                self.note(Shape::SlowDisk, format!("n{victim} {delay_ms} ms a flush until {until_ms}"));
                self.active.push(Active::SlowDisk { node: victim, until_ms });
            }
            Shape::ClockStep => {
                let skew_ms = self.rng.random_range(-SKEW_MS_MAX..=SKEW_MS_MAX);
                if let Some(node) = cluster.nodes.get(&victim) {
                    let before = node.clock.step_to(skew_ms);
                    self.note(Shape::ClockStep, format!("n{victim} wall clock {:+} ms", skew_ms - before));
                }
            }
            Shape::Membership if anyone_down => {}
            Shape::Membership => {
                let Some(leader) = cluster.leader() else { return Ok(()) };
                let Some(router) = cluster.router(leader) else { return Ok(()) };
                self.note(Shape::Membership, format!("n{victim} until {until_ms}"));
                let trace = self.trace.clone();
                let removal = tokio::spawn(async move {
                    let path = format!("/v1/cluster/nodes/{victim}");
                    let answer = call(router, "DELETE", &path, None, None).await;
                    trace.record(format!("remove n{victim}: {:?}", answer.map(|a| a.status.as_u16())));
                });
                self.active.push(Active::Removed { node: victim, until_ms, removal });
            }
            Shape::MoveShard => {
                let Some(leader) = cluster.leader() else { return Ok(()) };
                let shard = self.rng.random_range(0..SHARD_COUNT);
                let target = ids[self.rng.random_range(0..ids.len())];
                self.note(Shape::MoveShard, format!("s{shard} -> n{target}"));
                if let Some(router) = cluster.router(leader) {
                    let path = format!("/v1/cluster/shards/{shard}/move");
                    tokio::spawn(async move {
                        let _ = call(router, "POST", &path, Some(json!({"node_id": target})), None).await;
                    });
                }
            }
        }
        Ok(())
    }

    fn cut(&self, cluster: &Cluster, links: &[(NodeId, NodeId)], cut: bool) {
        for (from, to) in links {
            cluster.net.set_cut(*from, *to, cut);
        }
    }

    /// Ends every fault due by `now_ms`, or all of them when `all`.
    pub async fn expire(&mut self, cluster: &mut Cluster, now_ms: u64, all: bool) -> anyhow::Result<()> {
        let (due, keep): (Vec<Active>, Vec<Active>) = std::mem::take(&mut self.active).into_iter().partition(|a| {
            all || match a {
                Active::Cut { until_ms, .. }
                | Active::Down { until_ms, .. }
                | Active::Lossy { until_ms }
                | Active::Stalled { until_ms, .. }
                | Active::SlowDisk { until_ms, .. }
                | Active::Removed { until_ms, .. } => *until_ms <= now_ms,
            }
        });
        self.active = keep;
        for fault in due {
            match fault {
                Active::Cut { links, .. } => {
                    self.cut(cluster, &links, false);
                    self.trace.record(format!("heal cut {links:?}"));
                }
                Active::Down { node, .. } => {
                    self.trace.record(format!("heal restart n{node}"));
                    cluster.start(node).await?;
                }
                Active::Lossy { .. } => {
                    cluster.net.set_model(LinkModel::default());
                    self.trace.record("heal links");
                }
                Active::Stalled { node, links, .. } => {
                    self.cut(cluster, &links, false);
                    cluster.receivers.set_stalled(node, false);
                    self.trace.record(format!("heal wake n{node}"));
                }
                Active::SlowDisk { node, .. } => {
                    if let Some(n) = cluster.nodes.get(&node) {
                        n.disk.set_flush_delay(Duration::ZERO);
                    }
                    self.trace.record(format!("heal disk n{node}"));
                }
                Active::Removed { node, removal, .. } => {
                    self.trace.record(format!("heal re-add n{node}"));
                    let nodes = cluster.handles();
                    let addr = cluster.peer_addr(node).unwrap_or_default().to_owned();
                    self.rejoins.push(tokio::spawn(rejoin(nodes, node, addr, removal, self.trace.clone())));
                }
            }
        }
        if all {
            for rejoin in std::mem::take(&mut self.rejoins) {
                if !rejoin.await.unwrap_or(false) {
                    self.trace.record("a removed voter could not be added back");
                }
            }
        }
        Ok(())
    }
}

/// Adds `node` back to the voters once its removal has run: asks whichever
/// node leads, every second, until the leader's membership has it as a
/// voter again (or [`REJOIN_BOUND`] passes).
async fn rejoin(
    nodes: Vec<(NodeId, Raft, axum::Router)>,
    node: NodeId,
    addr: String,
    removal: tokio::task::JoinHandle<()>,
    trace: Trace,
) -> bool {
    let deadline = tokio::time::Instant::now() + REJOIN_BOUND;
    if tokio::time::timeout_at(deadline, removal).await.is_err() {
        trace.record(format!("the removal of n{node} never answered"));
        return false;
    }
    while tokio::time::Instant::now() < deadline {
        let leading = nodes.iter().find(|(id, raft, _)| crate::cluster::leads(*id, raft));
        if let Some((leader, raft, router)) = leading {
            trace.record(format!("re-add n{node} through n{leader}"));
            if raft.metrics().borrow().membership_config.membership().voter_ids().any(|v| v == node) {
                trace.record(format!("n{node} is a voter"));
                return true;
            }
            let answer =
                call(router.clone(), "POST", "/v1/cluster/nodes", Some(json!({"id": node, "addr": addr})), None).await;
            trace.record(format!("re-add n{node}: {:?}", answer.map(|a| (a.status.as_u16(), a.body))));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    false
}

/// Both directions between `node` and every other node.
fn isolate(ids: &[NodeId], node: NodeId) -> Vec<(NodeId, NodeId)> {
    ids.iter().filter(|i| **i != node).flat_map(|o| [(node, *o), (*o, node)]).collect()
}
