//! Faults chosen by the seed, injected during the fault phase and healed
//! after it: partitions (the leader isolated, a 2–1 split, a one-way link),
//! crashes with restarts on the same disk, lossy and duplicating links, and
//! shard moves through the admin API while all that goes on. Clock skew and
//! drift are set per node when the cluster is built.

use std::collections::BTreeMap;

use hookraft_core::ids::{NodeId, SHARD_COUNT};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

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
}

impl Shape {
    pub const ALL: [Shape; 7] =
        [Shape::IsolateLeader, Shape::Split, Shape::OneWay, Shape::Crash, Shape::Lossy, Shape::MoveShard, Shape::Stall];
}

/// An active fault and when it ends (true ms).
#[derive(Debug, Clone)]
enum Active {
    Cut { links: Vec<(NodeId, NodeId)>, until_ms: u64 },
    Down { node: NodeId, until_ms: u64 },
    Lossy { until_ms: u64 },
    Stalled { node: NodeId, links: Vec<(NodeId, NodeId)>, until_ms: u64 },
}

/// The fault schedule of one run.
pub struct Faults {
    rng: StdRng,
    shapes: Vec<Shape>,
    active: Vec<Active>,
    next_ms: u64,
    trace: Trace,
    pub injected: BTreeMap<&'static str, u32>,
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
        }
    }

    fn note(&mut self, kind: &'static str, detail: String) {
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
        let anyone_down = self.active.iter().any(|a| matches!(a, Active::Down { .. } | Active::Stalled { .. }));
        match self.shapes[self.rng.random_range(0..self.shapes.len())] {
            Shape::IsolateLeader => {
                let target = cluster.leader().unwrap_or(victim);
                let links = isolate(&ids, target);
                self.cut(cluster, &links, true);
                self.note("isolate-leader", format!("n{target} until {until_ms}"));
                self.active.push(Active::Cut { links, until_ms });
            }
            Shape::Split => {
                let links = isolate(&ids, victim);
                self.cut(cluster, &links, true);
                self.note("split", format!("n{victim} alone until {until_ms}"));
                self.active.push(Active::Cut { links, until_ms });
            }
            Shape::OneWay => {
                let other = ids[(ids.iter().position(|i| *i == victim).unwrap_or(0) + 1) % ids.len()];
                let links = vec![(victim, other)];
                self.cut(cluster, &links, true);
                self.note("one-way", format!("n{victim}->n{other} until {until_ms}"));
                self.active.push(Active::Cut { links, until_ms });
            }
            Shape::Stall if anyone_down => {}
            Shape::Stall => {
                let links = isolate(&ids, victim);
                self.cut(cluster, &links, true);
                cluster.receivers.set_stalled(victim, true);
                let until_ms = now_ms + crate::cluster::LEASE_MS * 2 + self.rng.random_range(500..3_000);
                self.note("stall", format!("n{victim} until {until_ms}"));
                self.active.push(Active::Stalled { node: victim, links, until_ms });
            }
            Shape::Crash if anyone_down => {}
            Shape::Crash => {
                cluster.crash(victim).await;
                self.note("crash", format!("n{victim} until {until_ms}"));
                self.active.push(Active::Down { node: victim, until_ms });
            }
            Shape::Lossy => {
                cluster.net.set_model(LinkModel {
                    delay_ms_min: 1,
                    delay_ms_max: 60,
                    drop_ppm: 50_000,
                    duplicate_ppm: 20_000,
                });
                self.note("lossy-links", format!("until {until_ms}"));
                self.active.push(Active::Lossy { until_ms });
            }
            Shape::MoveShard => {
                let Some(leader) = cluster.leader() else { return Ok(()) };
                let shard = self.rng.random_range(0..SHARD_COUNT);
                let target = ids[self.rng.random_range(0..ids.len())];
                self.note("move-shard", format!("s{shard} -> n{target}"));
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
                | Active::Stalled { until_ms, .. } => *until_ms <= now_ms,
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
            }
        }
        Ok(())
    }
}

/// Both directions between `node` and every other node.
fn isolate(ids: &[NodeId], node: NodeId) -> Vec<(NodeId, NodeId)> {
    ids.iter().filter(|i| **i != node).flat_map(|o| [(node, *o), (*o, node)]).collect()
}
