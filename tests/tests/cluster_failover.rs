//! Failover (ARCHITECTURE §5): a killed leader is replaced without losing an
//! acknowledged event; a killed or paused shard owner's endpoints move to a
//! survivor under a higher fencing token, and a paused owner's late outcome
//! is rejected as stale.
//!
//! Each test prints the outages it measured (`-- --nocapture`).

#![allow(clippy::disallowed_methods, reason = "an end-to-end test measures real time")]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookraft_tests::{
    POLL_INTERVAL, Reply, ScriptedReceiver, TestCluster, attempts, eventually, get_delivery, register_endpoint,
    send_event, wait_delivery_state, wait_for,
};
use serde_json::{Value, json};

/// Waits for delivery and replication on a loaded two-core machine.
const DEADLINE: Duration = Duration::from_secs(120);
/// What a failover may take beyond lease + margin on a loaded machine
/// (rebalancer tick, commit of the grant, actor start, the attempt itself).
const FAILOVER_SLACK: Duration = Duration::from_secs(15);
/// Stale-outcome metric (ARCHITECTURE §5).
const STALE_METRIC: &str = "hookraft_outcomes_rejected_stale_total";
/// Per node: outcomes it sent that apply refused as stale.
const SENT_STALE_METRIC: &str = "hookraft_outcomes_sent_stale_total";
/// Per node: times its lease lapsed.
const LEASE_EXPIRIES_METRIC: &str = "hookraft_lease_expiries_total";

fn retry_quick() -> Value {
    json!({"attempts_max": 50, "base_ms": 100, "cap_ms": 1000, "max_age_s": 3600})
}

/// The attempt that succeeded (2xx), the last one when several did.
fn successful_attempt(delivery: &Value) -> Value {
    attempts(delivery)
        .into_iter()
        .rev()
        .find(|a| a["status_code"].as_u64().is_some_and(|code| (200..300).contains(&code)))
        .unwrap_or_else(|| panic!("no successful attempt on {delivery:#}"))
}

fn u64_field(value: &Value, field: &str) -> u64 {
    value[field].as_u64().unwrap_or_else(|| panic!("no integer `{field}` in {value}"))
}

// ---------------------------------------------------------------------------
// Leader killed under continuous ingest.

/// Per-request timeout of the producer: a request forwarded to a dead leader
/// must not hold the producer for long.
const PRODUCER_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Tries per event before the producer gives up on it (a bound, not an expectation).
const PRODUCER_TRIES_MAX: u32 = 600;
const PRODUCER_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Pause between two events, to bound the volume.
const PRODUCER_PAUSE: Duration = Duration::from_millis(20);
/// Events acknowledged before the kill, and after it, before the test moves on.
const ACKS_EACH_SIDE: usize = 20;

struct Ack {
    event_id: String,
    /// The node that answered 202/200.
    via: u64,
    first_sent_at: Instant,
    acked_at: Instant,
}

#[derive(Default)]
struct ProducerLog {
    acks: Vec<Ack>,
    /// Answers that are neither success nor retryable: bugs.
    failures: Vec<String>,
    /// Requests repeated on another node (503, connection error, timeout).
    retries: usize,
    /// Retries answered 200 `Idempotent-Replay`: the first try had committed.
    replays: usize,
}

/// Posts events round-robin over `nodes` until `stop`; a 503, a 5xx or a
/// transport error is retried on the next node with the same Idempotency-Key.
async fn produce(nodes: Vec<(u64, String)>, stop: Arc<AtomicBool>, log: Arc<Mutex<ProducerLog>>) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(PRODUCER_REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .expect("build the producer's client");
    let mut target = 0usize;
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        let key = format!("leader-kill-{n}");
        let body = json!({"type": "t", "payload": {"n": n}});
        let first_sent_at = Instant::now();
        for tries in 1..=PRODUCER_TRIES_MAX {
            let (via, url) = &nodes[target % nodes.len()];
            target += 1;
            let sent = client.post(format!("{url}/v1/events")).header("Idempotency-Key", &key).json(&body).send().await;
            let retry = match sent {
                Ok(response) if response.status().as_u16() == 202 || response.status().as_u16() == 200 => {
                    let replay = response.headers().contains_key("idempotent-replay");
                    match response.json::<Value>().await.ok().and_then(|v| v["id"].as_str().map(str::to_owned)) {
                        Some(event_id) => {
                            let mut log = log.lock().expect("producer log");
                            log.replays += usize::from(replay && tries > 1);
                            log.acks.push(Ack { event_id, via: *via, first_sent_at, acked_at: Instant::now() });
                            false
                        }
                        None => true,
                    }
                }
                Ok(response) if response.status().is_server_error() => true,
                Ok(response) => {
                    let status = response.status();
                    let text = response.text().await.unwrap_or_default();
                    log.lock()
                        .expect("producer log")
                        .failures
                        .push(format!("event {n} via node {via}: {status} {text}"));
                    false
                }
                Err(_) => true,
            };
            if !retry {
                break;
            }
            if tries == PRODUCER_TRIES_MAX || stop.load(Ordering::Acquire) {
                let mut log = log.lock().expect("producer log");
                if tries == PRODUCER_TRIES_MAX {
                    log.failures.push(format!("event {n} not acknowledged after {tries} tries"));
                }
                break;
            }
            log.lock().expect("producer log").retries += 1;
            tokio::time::sleep(PRODUCER_RETRY_PAUSE).await;
        }
        n += 1;
        tokio::time::sleep(PRODUCER_PAUSE).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_9_under_continuous_ingest_elects_a_new_leader_and_delivers_every_acknowledged_event() {
    let receiver = ScriptedReceiver::start().await;
    let mut cluster = TestCluster::start().await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    register_endpoint(cluster.node(leader), &json!({"url": receiver.url("stream"), "retry": retry_quick()})).await;

    let stop = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(ProducerLog::default()));
    let producer = tokio::spawn(produce(cluster.base_urls(), stop.clone(), log.clone()));
    let acked = || log.lock().expect("producer log").acks.len();
    eventually(DEADLINE, POLL_INTERVAL, "acknowledgements before the kill", async || acked() >= ACKS_EACH_SIDE).await;

    let killed_at = Instant::now();
    cluster.kill9(leader).await;
    let new_leader = cluster.wait_for_new_leader(leader).await;
    let elected_after = killed_at.elapsed();
    let acked_after_kill =
        || log.lock().expect("producer log").acks.iter().filter(|a| a.first_sent_at >= killed_at).count();
    eventually(DEADLINE, POLL_INTERVAL, "acknowledgements after the kill", async || {
        acked_after_kill() >= ACKS_EACH_SIDE
    })
    .await;
    stop.store(true, Ordering::Release);
    tokio::time::timeout(DEADLINE, producer).await.expect("the producer stops").expect("the producer did not panic");

    let log = Arc::try_unwrap(log).ok().expect("the producer is done").into_inner().expect("producer log");
    assert!(log.failures.is_empty(), "the producer got non-retryable answers: {:#?}", log.failures);
    let after: Vec<&Ack> = log.acks.iter().filter(|a| a.first_sent_at >= killed_at).collect();
    let outage = after.iter().map(|a| a.acked_at - killed_at).min().expect("acknowledgements after the kill");
    let longest_gap = log.acks.windows(2).map(|w| w[1].acked_at.saturating_duration_since(w[0].acked_at)).max();
    let survivors_acking: BTreeSet<u64> = after.iter().map(|a| a.via).collect();
    println!(
        "leader {leader} killed; node {new_leader} leads {elected_after:?} later (seen by polling); \
         first event accepted after the kill: {outage:?} (ingest outage); longest gap between acks: {longest_gap:?}; \
         {} events acknowledged ({} after the kill, via nodes {survivors_acking:?}), {} retries, {} idempotent replays",
        log.acks.len(),
        after.len(),
        log.retries,
        log.replays
    );
    let survivors: BTreeSet<u64> = cluster.responsive_ids().into_iter().collect();
    assert!(survivors_acking.is_subset(&survivors), "only survivors acknowledge after the kill");
    assert_eq!(survivors_acking, survivors, "ingest resumed through every survivor (followers forward)");

    let acked_ids: BTreeSet<String> = log.acks.iter().map(|a| a.event_id.clone()).collect();
    assert_eq!(acked_ids.len(), log.acks.len(), "every Idempotency-Key got its own event id");
    let delivered_from = Instant::now();
    wait_for(DEADLINE, POLL_INTERVAL, "every acknowledged event at the receiver", async || {
        let seen = receiver.distinct_webhook_ids("stream");
        let missing = acked_ids.difference(&seen).count();
        if missing == 0 { Ok(()) } else { Err(format!("{missing} of {} missing", acked_ids.len())) }
    })
    .await;
    println!(
        "all {} acknowledged events delivered ({:?} after the producer stopped)",
        acked_ids.len(),
        delivered_from.elapsed()
    );
}

// ---------------------------------------------------------------------------
// Shard owner killed.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_owner_kill_9_moves_its_endpoint_to_a_survivor_under_a_higher_fencing_token() {
    let receiver = ScriptedReceiver::start().await;
    let mut cluster = TestCluster::start().await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let body = json!({"url": receiver.url("owned"), "retry": retry_quick()});
    let (endpoint_id, _, shard, owner) = cluster.register_endpoint_owned_by(leader, &body, |o| o != leader).await;
    let event = |n: u32| json!({"type": "t", "payload": {"n": n}, "endpoint_ids": [endpoint_id]});

    let first = send_event(cluster.node(leader), &event(1)).await;
    let delivered =
        wait_delivery_state(cluster.node(leader), &first.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let before = successful_attempt(&delivered);
    assert_eq!(u64_field(&before, "node_id"), owner, "the shard's owner sent the first event: {delivered:#}");
    let token_before = u64_field(&before, "fencing_token");

    let killed_at = Instant::now();
    cluster.kill9(owner).await;
    let second = send_event(cluster.node(leader), &event(2)).await;
    let received_at = wait_for(DEADLINE, POLL_INTERVAL, "the event after the kill at the receiver", async || {
        let requests = receiver.requests_for_event("owned", &second.event_id);
        requests.first().map(|r| r.received_at).ok_or_else(String::new)
    })
    .await;
    let outage = received_at.saturating_duration_since(killed_at);
    let bound = cluster.failover_bound() + FAILOVER_SLACK;
    println!(
        "owner {owner} of shard {shard} killed; its endpoint delivered again {outage:?} later \
         (lease + margin = {:?}, bound with slack {bound:?})",
        cluster.failover_bound()
    );
    assert!(outage <= bound, "delivery outage {outage:?} exceeds lease + margin + slack = {bound:?}");

    let delivered =
        wait_delivery_state(cluster.node(leader), &second.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
    let after = successful_attempt(&delivered);
    let new_owner = u64_field(&after, "node_id");
    assert_ne!(new_owner, owner, "a survivor sent the event: {delivered:#}");
    assert!(cluster.responsive_ids().contains(&new_owner), "node {new_owner} is a survivor");
    let token_after = u64_field(&after, "fencing_token");
    assert!(token_after > token_before, "new attempt's token {token_after} is above the old {token_before}");
    println!("fencing token of shard {shard}: {token_before} (node {owner}) -> {token_after} (node {new_owner})");

    let view = cluster
        .wait_view(leader, DEADLINE, "the killed owner to hold no shard", |v| {
            let dead = v.node(owner).ok_or("killed node not listed")?;
            if dead.live || dead.shards_owned > 0 || !v.shards_of(owner).is_empty() {
                return Err(format!("node {owner}: live {}, {} shards", dead.live, dead.shards_owned));
            }
            Ok(v.clone())
        })
        .await;
    assert!(view.shard(shard).token > token_before, "the map carries the higher token: {view:?}");
    assert_eq!(view.unowned(), 0, "every shard has a live owner again: {:?}", view.distribution());
}

// ---------------------------------------------------------------------------
// Shard owner paused past its lease.

/// Attempts open at the owner when it is paused.
const IN_FLIGHT: usize = 5;
/// The receiver holds those attempts this long, then answers 200 into the
/// paused process's socket: it reads the answer as soon as it resumes.
const REPLY_DELAY_MS: u64 = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_paused_past_its_lease_loses_its_shards_and_its_late_outcomes_are_rejected_as_stale() {
    let receiver = ScriptedReceiver::start().await;
    for _ in 0..IN_FLIGHT {
        receiver.push("paused", Reply::ok().delay_ms(REPLY_DELAY_MS));
    }
    let mut cluster = TestCluster::start().await;
    cluster.wait_settled().await;
    let leader = cluster.leader_id().await;
    let body =
        json!({"url": receiver.url("paused"), "timeout_ms": 30_000, "max_in_flight": 10, "retry": retry_quick()});
    let (endpoint_id, _, shard, owner) = cluster.register_endpoint_owned_by(leader, &body, |o| o != leader).await;
    let before = cluster.leader_view().await;
    let grants_before: Vec<(u16, u64)> =
        before.shards.iter().filter(|s| s.owner == Some(owner)).map(|s| (s.shard, s.token)).collect();
    assert!(grants_before.iter().any(|(s, _)| *s == shard), "node {owner} owns shard {shard}: {before:?}");

    let mut delivery_ids = Vec::with_capacity(IN_FLIGHT);
    for n in 0..IN_FLIGHT {
        let body = json!({"type": "t", "payload": {"n": n}, "endpoint_ids": [endpoint_id]});
        delivery_ids.push(send_event(cluster.node(leader), &body).await.delivery_for(&endpoint_id));
    }
    eventually(DEADLINE, Duration::from_millis(5), "every attempt open at the receiver", async || {
        receiver.count("paused") >= IN_FLIGHT
    })
    .await;
    let owner_expiries_before = cluster.metric(owner, LEASE_EXPIRIES_METRIC).await.unwrap_or(0.0);
    let owner_sent_stale_before = cluster.metric(owner, SENT_STALE_METRIC).await.unwrap_or(0.0);
    cluster.sigstop(owner);
    let stopped_at = Instant::now();
    let last_request_at = receiver.requests("paused").iter().map(|r| r.received_at).max().expect("requests");

    let moved_bound = cluster.failover_bound() + FAILOVER_SLACK;
    cluster
        .wait_view(leader, moved_bound, "the paused owner's shards to move under higher tokens", |v| {
            for (s, token) in &grants_before {
                let now = v.shard(*s);
                if now.owner.is_none() || now.owner == Some(owner) || now.token <= *token {
                    return Err(format!("shard {s} still {now:?} (was token {token})"));
                }
            }
            Ok(())
        })
        .await;
    let moved_after = stopped_at.elapsed();
    println!("owner {owner} paused; its {} shards moved {moved_after:?} later", grants_before.len());
    assert!(
        moved_after >= cluster.lease() * 2 / 3,
        "shards moved {moved_after:?} after the pause, before the owner's lease could have lapsed"
    );

    for id in &delivery_ids {
        let delivery = wait_delivery_state(cluster.node(leader), id, "delivered", DEADLINE).await;
        let attempt = successful_attempt(&delivery);
        assert_ne!(u64_field(&attempt, "node_id"), owner, "a survivor delivered while the owner is paused");
    }
    println!("survivors delivered all {IN_FLIGHT} open deliveries {:?} after the pause", stopped_at.elapsed());

    // Stay paused past 2 × lease + 2 s, and until the receiver has answered
    // every open attempt into the paused process's socket.
    let pause = cluster.lease() * 2 + Duration::from_secs(2);
    let answered = last_request_at + Duration::from_millis(REPLY_DELAY_MS) + Duration::from_secs(1);
    tokio::time::sleep_until((stopped_at + pause).max(answered).into()).await;
    cluster.sigcont(owner);
    println!("owner {owner} resumed after {:?} paused", stopped_at.elapsed());

    // On waking, the owner races two things: the answers already in its
    // sockets complete its open attempts (their outcomes carry the old token
    // and must be rejected as stale), and its lease loop sees the lapsed lease
    // and aborts whatever is still open. Which wins is up to the scheduler;
    // both are asserted on what they leave. The lapse itself is certain (the
    // pause outlasted two leases): the owner counts it.
    eventually(DEADLINE, POLL_INTERVAL, "the resumed owner to count its lapsed lease", async || {
        cluster.metric(owner, LEASE_EXPIRIES_METRIC).await.is_some_and(|n| n > owner_expiries_before)
    })
    .await;
    // Every outcome the owner sent under its old token and the log refused
    // is counted on the owner as sent stale and in the replicated state as
    // rejected: once the owner has caught up, the two moved by the same
    // amount (zero when the lease loop aborted every open attempt first).
    let stale_before = before.outcomes_rejected_stale;
    let mut moved = (0, 0.0);
    eventually(DEADLINE, POLL_INTERVAL, "the owner's stale outcomes to match the state's", async || {
        let rejected = cluster.view(leader).await.outcomes_rejected_stale - stale_before;
        let sent = cluster.metric(owner, SENT_STALE_METRIC).await.unwrap_or(0.0) - owner_sent_stale_before;
        moved = (rejected, sent);
        sent == rejected as f64
    })
    .await;
    let replicated = cluster.metric(leader, STALE_METRIC).await.expect("the leader exports the stale counter");
    assert!(replicated >= (stale_before + moved.0) as f64, "{STALE_METRIC} = {replicated}, view moved by {}", moved.0);
    println!("after the resume: {} outcomes rejected as stale, {} counted sent stale by the owner", moved.0, moved.1);

    for id in &delivery_ids {
        let delivery = get_delivery(cluster.node(leader), id).await;
        assert_eq!(delivery["state"], "delivered", "{delivery:#}");
        for attempt in attempts(&delivery) {
            assert_ne!(
                u64_field(&attempt, "node_id"),
                owner,
                "the paused owner's outcome under its old token was recorded: {delivery:#}"
            );
        }
    }
    cluster
        .wait_view(leader, DEADLINE, "the resumed owner to be live again", |v| {
            if v.node(owner).is_some_and(|n| n.live) { Ok(()) } else { Err("not live".into()) }
        })
        .await;
    let after = send_event(
        cluster.node(owner),
        &json!({"type": "t", "payload": {"after": true}, "endpoint_ids": [endpoint_id]}),
    )
    .await;
    wait_delivery_state(cluster.node(owner), &after.delivery_for(&endpoint_id), "delivered", DEADLINE).await;
}
