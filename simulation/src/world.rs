//! One simulated run: build a cluster from a seed, let the workload and the
//! faults run for the fault phase, heal everything, let the cluster converge
//! for the heal phase, then run every checker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hookraft_core::ids::NodeId;
use hookraft_core::state::ClusterState;
use hookraft_raft::MemDisk;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use crate::check::{self, Kind, Taps, Violation};
use crate::clock::{DRIFT_PPM_MAX, SKEW_MS_MAX, SimClock};
use crate::cluster::{Cluster, SimNode, elapsed_ms};
use crate::faults::Faults;
use crate::keys::RunKeys;
use crate::net::SimNet;
use crate::receivers::{Behavior, Receivers};
use crate::trace::Trace;
use crate::workload::Workload;

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub nodes: u64,
    pub print_trace: bool,
    pub fault_phase_ms: u64,
    pub heal_phase_ms: u64,
    pub endpoints: usize,
    /// Fault shapes to draw from; empty means all.
    pub shapes: Vec<crate::faults::Shape>,
    /// Chance in a hundred per 20 ms step that a producer posts; `None`
    /// lets the seed draw it (see [`Workload::new`]).
    pub post_percent: Option<u32>,
    /// Nodes seal payloads under a keyring made from the seed (see
    /// [`RunKeys`]); off, they store them in clear.
    pub keyring: bool,
}

impl Options {
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            nodes: 3,
            print_trace: false,
            fault_phase_ms: 45_000,
            // Longer than the breaker's longest cooldown (60 s) and a drain.
            heal_phase_ms: 90_000,
            endpoints: 6,
            shapes: Vec::new(),
            post_percent: None,
            keyring: true,
        }
    }
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    pub digest: String,
    pub violations: Vec<Violation>,
    pub acked: usize,
    pub sends: usize,
    pub faults: BTreeMap<&'static str, u32>,
    pub trace_lines: u64,
    /// Virtual time the run took, formation to checks.
    pub virtual_ms: u64,
    /// The final state's payloads by the key they are sealed under
    /// (`clear` for none).
    pub payload_keys: BTreeMap<String, u64>,
    /// What the run did with ordered delivery.
    pub ordering: check::ordering::OrderingCounts,
    /// What the run did with inbound traffic.
    pub inbound: check::inbound::InboundCounts,
}

impl Report {
    /// The worst kind of violation, if any.
    pub fn worst(&self) -> Option<Kind> {
        self.violations.iter().map(|v| v.kind).min()
    }
}

/// Step of the driver loop in virtual time.
const TICK: Duration = Duration::from_millis(20);
/// How long the cluster may take to form before the run is a liveness failure.
const FORMATION_MS: u64 = 20_000;

/// Virtual time a run may take beyond its phases before the watchdog ends
/// it: a driver stuck on a call that never answers is a liveness failure,
/// not a sweep that never ends.
const WATCHDOG_SLACK_MS: u64 = 180_000;

/// Runs one seed on the current thread's runtime (see [`crate::run`]).
pub async fn run(options: Options) -> anyhow::Result<Report> {
    let origin = Instant::now();
    let trace = Trace::new(options.print_trace);
    trace.start(origin);
    let bound_ms = FORMATION_MS + options.fault_phase_ms + options.heal_phase_ms + WATCHDOG_SLACK_MS;
    match tokio::time::timeout(Duration::from_millis(bound_ms), drive(&options, &trace, origin)).await {
        Ok(report) => report,
        Err(_) => {
            let violation =
                Violation::liveness("watchdog", format!("the run did not end within {bound_ms} ms of virtual time"));
            Ok(finish(options.seed, &trace, vec![violation], 0, 0, BTreeMap::new(), elapsed_ms(origin)))
        }
    }
}

/// Builds the cluster, runs both phases and the checks.
async fn drive(options: &Options, trace: &Trace, origin: Instant) -> anyhow::Result<Report> {
    let mut rng = StdRng::seed_from_u64(options.seed);
    let net = SimNet::new(rng.random(), trace.clone());
    let receivers = Receivers::new(rng.random(), origin, trace.clone());
    let tap = Arc::new(Taps::new(trace.clone()));
    let nodes = (1..=options.nodes)
        .map(|id| SimNode {
            id,
            disk: MemDisk::new(),
            clock: SimClock::new(
                origin,
                rng.random_range(-SKEW_MS_MAX..=SKEW_MS_MAX),
                rng.random_range(-DRIFT_PPM_MAX..=DRIFT_PPM_MAX),
            ),
            seed: rng.random(),
            handle: None,
            restarts: 0,
        })
        .collect();
    let mut cluster = Cluster::new(nodes, net, receivers.clone(), tap.clone());
    let keys = options.keyring.then(|| RunKeys::new(options.seed, options.fault_phase_ms)).transpose()?;
    if let Some(keys) = &keys {
        cluster.keyring = Some(keys.first.clone());
        trace.record(format!("keyring {:?}", keys.first));
    }
    let ids: Vec<NodeId> = cluster.nodes.keys().copied().collect();
    for id in &ids {
        cluster.start(*id).await?;
    }
    trace.record("cluster started");

    // Formation: a leader, and every shard granted.
    let formed = wait_until(FORMATION_MS, || {
        cluster
            .leader()
            .and_then(|l| cluster.with_state(l, |s, _| s.shards.iter().all(|g| g.owner.is_some())))
            .unwrap_or(false)
    })
    .await;
    if !formed {
        let violation =
            Violation::liveness("formation", format!("no leader with every shard granted after {FORMATION_MS} ms"));
        return Ok(finish(options.seed, trace, vec![violation], 0, 0, BTreeMap::new(), elapsed_ms(origin)));
    }

    let mut workload = Workload::new(rng.random(), options.post_percent, trace.clone());
    let fault_end_ms = elapsed_ms(origin) + options.fault_phase_ms;
    workload.register(&cluster, &receivers, options.endpoints, fault_end_ms).await?;
    workload.provider.setup(&cluster, &receivers, origin, fault_end_ms).await?;
    let mut faults = Faults::new(rng.random(), &options.shapes, trace.clone());
    let mut rotate_at_ms = keys.as_ref().and_then(|k| k.rotate_after_ms).map(|after| elapsed_ms(origin) + after);

    // Fault phase.
    while elapsed_ms(origin) < fault_end_ms {
        if let Some(keys) = &keys
            && rotate_at_ms.is_some_and(|at| elapsed_ms(origin) >= at)
        {
            rotate_at_ms = None;
            cluster.keyring = Some(keys.rotated.clone());
            trace.record(format!("keyring rotated: nodes started from now seal under {}", keys.rotated.active_id()));
        }
        faults.step(&mut cluster, elapsed_ms(origin)).await?;
        workload.step(&cluster);
        tokio::time::sleep(TICK).await;
    }

    // Heal phase: every link and node back, and every receiver healthy but
    // the ones that answer 410 (their deliveries end dead-lettered).
    faults.expire(&mut cluster, elapsed_ms(origin), true).await?;
    cluster.net.heal();
    for endpoint in workload.all_endpoints() {
        if receivers.behavior(&endpoint.receiver) != Some(Behavior::Gone) {
            receivers.set_behavior(&endpoint.receiver, Behavior::Healthy);
        }
    }
    trace.record("healed");
    let earlier = cluster.leader().and_then(|l| cluster.state(l)).map(|(s, _)| s);
    let heal_end_ms = elapsed_ms(origin) + options.heal_phase_ms;
    let mut polls = 0u64;
    while elapsed_ms(origin) < heal_end_ms {
        if tap.pruned.with(|pruned| settled(&cluster, &workload, pruned)) {
            break;
        }
        // Every 2 s the operator skips the dead heads that still block keys.
        if polls.is_multiple_of(10) {
            workload.unblock(cluster.leader().and_then(|l| cluster.router(l)));
        }
        polls += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Let replication reach every node.
    wait_until(5_000, || converged(&cluster)).await;

    let mut states: Vec<(NodeId, ClusterState, u64)> =
        ids.iter().filter_map(|id| cluster.state(*id).map(|(s, i)| (*id, s, i))).collect();
    states.sort_by_key(|(id, _, _)| *id);
    let final_state = match cluster.leader().and_then(|l| cluster.state(l)) {
        Some((state, _)) => state,
        None => states.first().map(|(_, s, _)| s.clone()).unwrap_or_default(),
    };
    let sends = receivers.sends();
    let ledger = workload.ledger.lock().unwrap_or_else(|p| p.into_inner()).clone();

    let pruned = tap.pruned.pruned();
    let mut violations = tap.violations();
    violations.extend(check::replicas::check(&states));
    violations.extend(check::lost::check(&ledger, &final_state, &pruned, &sends));
    violations.extend(check::batches::check(&ledger, &final_state, &pruned));
    violations.extend(check::one_sender::check(&sends, 2 * SKEW_MS_MAX as u64 + 100));
    violations.extend(check::signatures::check(&sends));
    violations.extend(check::payloads::sent(&ledger, &sends));
    let modes = workload.all_endpoints().map(|e| (e.receiver.clone(), e.ordering)).collect();
    let sequences = tap.ordering.sequences();
    let ordering = check::ordering::counts(&sequences, &final_state, &pruned);
    trace.record(format!("ordering {ordering:?}"));
    violations.extend(check::ordering::check(&sequences, &final_state, &pruned, &modes, &ledger, &sends));
    let (stored, payload_keys) = check::payloads::stored(&ledger, &final_state, keys.as_ref().map(|k| &*k.rotated));
    trace.record(format!("payloads stored by key {payload_keys:?}"));
    violations.extend(stored);
    if let Some(earlier) = &earlier {
        violations.extend(check::timeline::check(earlier, &final_state, &pruned, &sends));
    }
    let inbound = check::inbound::counts(&ledger, &final_state, &pruned);
    trace.record(format!("inbound {inbound:?}"));
    violations.extend(check::inbound::check(
        &ledger,
        &states,
        &final_state,
        &pruned,
        &workload.provider.endpoints,
        &sends,
    ));
    let live: Vec<_> = workload.endpoints.iter().chain(&workload.provider.endpoints).cloned().collect();
    violations.extend(check::liveness::check(&final_state, &live, &receivers, options.heal_phase_ms));
    for id in &ids {
        if let Some(node) = cluster.nodes.get_mut(id)
            && let Some(handle) = node.handle.take()
        {
            handle.crash().await;
        }
    }
    let report = finish(
        options.seed,
        trace,
        violations,
        ledger.acked.len(),
        sends.len(),
        faults.injected.clone(),
        elapsed_ms(origin),
    );
    Ok(Report { payload_keys, ordering, inbound, ..report })
}

fn finish(
    seed: u64,
    trace: &Trace,
    violations: Vec<Violation>,
    acked: usize,
    sends: usize,
    faults: BTreeMap<&'static str, u32>,
    virtual_ms: u64,
) -> Report {
    for v in &violations {
        trace.record(format!("violation {} {:?} {}", v.checker, v.kind, v.detail));
    }
    Report {
        seed,
        digest: trace.digest(),
        violations,
        acked,
        sends,
        faults,
        trace_lines: trace.lines(),
        virtual_ms,
        payload_keys: BTreeMap::new(),
        ordering: Default::default(),
        inbound: Default::default(),
    }
}

/// Polls `done` every 100 ms of virtual time for at most `bound_ms`.
async fn wait_until(bound_ms: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_millis(bound_ms);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

/// No producer (nor the provider) is still trying, and every acknowledged
/// delivery is terminal on the leader, inbound events' too.
fn settled(cluster: &Cluster, workload: &Workload, pruned: &check::pruned::Pruned) -> bool {
    let Some(leader) = cluster.leader() else { return false };
    let ledger = workload.ledger.lock().unwrap_or_else(|p| p.into_inner());
    if ledger.in_flight > 0 {
        return false;
    }
    cluster
        .with_state(leader, |state, _| {
            ledger.acked.values().flatten().all(|(delivery, _)| {
                let Ok(id) = hookraft_core::ids::DeliveryId::parse(delivery) else { return false };
                // The history holds only finished deliveries: no need to
                // decode one to know it is over.
                match state.deliveries.get(&id) {
                    Some(at_work) => at_work.state.is_terminal(),
                    None => {
                        state.history().contains_delivery(&id)
                            || pruned.delivery(&id).is_some_and(|d| d.state.is_terminal())
                    }
                }
            }) && check::inbound::settled(&ledger, state)
        })
        .unwrap_or(false)
}

/// Every running node has applied the same index.
fn converged(cluster: &Cluster) -> bool {
    let indexes: Vec<u64> = cluster.up().iter().filter_map(|id| cluster.with_state(*id, |_, i| i)).collect();
    indexes.windows(2).all(|w| w[0] == w[1])
}
