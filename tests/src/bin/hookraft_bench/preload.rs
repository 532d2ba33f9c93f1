//! The history scenario's preload: finished deliveries posted in batches
//! as fast as the node takes them and delivers them, a sample of their ids
//! kept for reads.
//!
//! Accepting outruns delivering (batches of a thousand against one webhook
//! per delivery), so a preload posting as fast as the node accepts would
//! build a backlog of millions of pending deliveries, gigabytes of work in
//! memory that a node keeping its history over days never holds, and the
//! figures after it would measure the allocator's memory of that backlog
//! rather than the history's cost. The preload waits while more than
//! [`preload_backlog_max`] of its deliveries are not yet delivered.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::deployment::Deployment;
use crate::fleet::Fleet;
use crate::history::{Reservoir, SAMPLE_IDS};
use crate::load::{self, Connection, Progress};
use crate::scenario::Scenario;

/// Events per preload request at most: the node's batch limit.
const PRELOAD_BATCH_MAX: usize = 1_000;
/// What a preload request's body stays under: below the node's body limit
/// (1 MiB), and below the 512 KiB from which sled writes a log entry as a
/// blob file of its own (those outlive their entries' purge for a while:
/// a 10 GB preload of 1 MB batches left 32 GB of them).
const PRELOAD_BODY_BYTES: usize = 400_000;
/// An event's body beyond its payload: its type, its send time, quoting.
const EVENT_OVERHEAD_BYTES: usize = 100;
/// Concurrent preload requests: enough to keep the node's log busy, few
/// enough that a thousand-event batch is not waiting behind many others.
const PRELOAD_CONNECTIONS: usize = 4;
/// The bytes of preloaded deliveries accepted but not yet delivered at
/// most before the preload waits: 50,000 deliveries of 200-byte payloads,
/// 800 of 60 KB ones ([`preload_backlog_max`]). Several seconds of
/// delivery at full speed, so delivering never waits for the preload;
/// each snapshot writes the backlog again (at 200,000, 118 MB each time,
/// and the history waiting for those snapshots took the node to 2 GiB).
const PRELOAD_BACKLOG_BYTES: usize = 50_000_000;
/// A pending delivery's bytes in memory beyond its payload: the event's
/// record, the delivery's and their indexes (about 800 bytes).
const PENDING_OVERHEAD_BYTES: usize = 800;
/// How often a waiting preload looks at the backlog again.
const BACKLOG_POLL: Duration = Duration::from_millis(20);
/// Failed preload requests printed at most.
const FAILURES_PRINTED_MAX: u64 = 3;

/// Events per preload request: as many as fit [`PRELOAD_BODY_BYTES`], up
/// to the node's batch limit.
pub fn preload_batch(payload_bytes: usize) -> usize {
    (PRELOAD_BODY_BYTES / (payload_bytes + EVENT_OVERHEAD_BYTES)).clamp(1, PRELOAD_BATCH_MAX)
}

/// Preloaded deliveries pending at most before the preload waits: as many
/// as fit [`PRELOAD_BACKLOG_BYTES`], and a batch for each connection at
/// least.
pub fn preload_backlog_max(payload_bytes: usize) -> u64 {
    let fit = PRELOAD_BACKLOG_BYTES / (payload_bytes + PENDING_OVERHEAD_BYTES);
    fit.max(preload_batch(payload_bytes) * PRELOAD_CONNECTIONS) as u64
}

#[derive(Deserialize)]
struct BatchAnswer {
    events: Vec<EventAnswer>,
}

#[derive(Deserialize)]
struct EventAnswer {
    status: u16,
    id: Option<String>,
    #[serde(default)]
    deliveries: Vec<DeliveryAnswer>,
}

#[derive(Deserialize)]
struct DeliveryAnswer {
    id: String,
}

/// The (event id, delivery id) of each event of a batch's 202 answer, in
/// the order sent; an error unless all `count` were created with one
/// delivery each.
pub fn batch_ids(body: &[u8], count: usize) -> Result<Vec<(String, String)>, String> {
    let answer: BatchAnswer = serde_json::from_slice(body).map_err(|e| format!("unreadable 202 body: {e}"))?;
    if answer.events.len() != count {
        return Err(format!("{} results for {count} events", answer.events.len()));
    }
    answer
        .events
        .into_iter()
        .map(|event| match (event.status, event.id, event.deliveries.as_slice()) {
            (202, Some(id), [delivery]) => Ok((id, delivery.id.clone())),
            (202, Some(id), deliveries) => Err(format!("event {id} made {} deliveries, not 1", deliveries.len())),
            (status, _, _) => Err(format!("an event of the batch answered {status}")),
        })
        .collect()
}

/// Posts `total` events in batches ([`preload_batch`]) over [`PRELOAD_CONNECTIONS`]
/// connections as fast as the node answers; returns a sample of their
/// (event, delivery) ids, the events accepted and those not.
pub async fn preload_history(
    url: &str,
    total: usize,
    payload_bytes: usize,
    origin: Instant,
    progress: &Arc<Progress>,
    fleet: &Arc<Fleet>,
) -> Result<(Vec<(String, String)>, usize, u64)> {
    let next = Arc::new(AtomicUsize::new(0));
    let sample = Arc::new(Mutex::new(Reservoir::new(SAMPLE_IDS, 0x4849_5354)));
    let failed = Arc::new(AtomicU64::new(0));
    let event_type = Scenario::History.event_type();
    let batch = preload_batch(payload_bytes);
    let backlog_max = preload_backlog_max(payload_bytes);
    let mut tasks = Vec::new();
    for _ in 0..PRELOAD_CONNECTIONS {
        let mut client = Connection::to(url).with_context(|| format!("cannot post to {url}"))?;
        let (next, sample, failed, progress) = (next.clone(), sample.clone(), failed.clone(), progress.clone());
        let fleet = fleet.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                while progress.accepted.load(Ordering::Relaxed).saturating_sub(fleet.distinct() as u64) > backlog_max {
                    tokio::time::sleep(BACKLOG_POLL).await;
                }
                let first = next.fetch_add(batch, Ordering::Relaxed);
                if first >= total {
                    return;
                }
                let indexes = first..(first + batch).min(total);
                let count = indexes.len();
                let sent = Instant::now();
                let sent_ns = u64::try_from(sent.duration_since(origin).as_nanos()).unwrap_or(u64::MAX);
                let bodies: Vec<String> =
                    indexes.map(|i| load::event_body(&event_type(i), None, sent_ns, payload_bytes)).collect();
                let body = format!("{{\"events\":[{}]}}", bodies.join(","));
                let why = match client.post(body.as_bytes()).await {
                    Ok((202, answer)) => match batch_ids(&answer, count) {
                        Ok(ids) => {
                            progress.accepted.fetch_add(count as u64, Ordering::Relaxed);
                            progress.answered(sent.elapsed());
                            let mut sample = sample.lock().unwrap_or_else(PoisonError::into_inner);
                            ids.into_iter().for_each(|pair| sample.offer(pair));
                            continue;
                        }
                        Err(why) => why,
                    },
                    Ok((status, answer)) => format!("{status} {}", String::from_utf8_lossy(&answer)),
                    Err(error) => error,
                };
                progress.failed.fetch_add(count as u64, Ordering::Relaxed);
                if failed.fetch_add(1, Ordering::Relaxed) < FAILURES_PRINTED_MAX {
                    eprintln!("preload events {first}.. not accepted: {why}");
                }
            }
        }));
    }
    for task in tasks {
        task.await.context("a preload task panicked")?;
    }
    let sample = Arc::try_unwrap(sample).map_err(|_| anyhow::anyhow!("the preload sample is still shared"))?;
    let sample = sample.into_inner().unwrap_or_else(PoisonError::into_inner);
    let accepted = usize::try_from(sample.seen()).unwrap_or(usize::MAX);
    let not_accepted = total.saturating_sub(accepted) as u64;
    Ok((sample.into_items(), accepted, not_accepted))
}

/// Waits until the fleet has every one of `accepted` deliveries and the
/// node counts none pending (its record of each attempt follows the
/// answer), or `deadline` passes.
pub async fn wait_until_finished(deployment: &Deployment, fleet: &Fleet, accepted: usize, deadline: Duration) {
    let started = Instant::now();
    while started.elapsed() < deadline {
        if fleet.distinct() >= accepted && deployment.metric_sum("hookraft_pending_deliveries").await == Some(0.0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("   (the preload was not all finished within {} s)", deadline.as_secs());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_answer_gives_each_event_and_its_delivery() {
        let body = br#"{"events":[
            {"status":202,"id":"evt_a","type":"bench.0","deliveries":[{"id":"dlv_a","endpoint_id":"ep_0","state":"pending"}]},
            {"status":202,"id":"evt_b","type":"bench.1","deliveries":[{"id":"dlv_b","endpoint_id":"ep_1","state":"pending"}]}]}"#;
        assert_eq!(batch_ids(body, 2), Ok(vec![("evt_a".into(), "dlv_a".into()), ("evt_b".into(), "dlv_b".into())]));
        assert!(batch_ids(body, 3).is_err(), "a result missing");
        let unrouted = br#"{"events":[{"status":202,"id":"evt_a","type":"x","deliveries":[]}]}"#;
        assert!(batch_ids(unrouted, 1).is_err(), "an event without its delivery");
        let refused = br#"{"events":[{"status":422,"detail":"bad"}]}"#;
        assert!(batch_ids(refused, 1).is_err());
        assert!(batch_ids(b"not json", 1).is_err());
    }

    #[test]
    fn a_batch_fits_the_body_limit_and_the_batch_limit() {
        assert_eq!(preload_batch(200), PRELOAD_BATCH_MAX);
        assert_eq!(preload_batch(65_536), 6);
        assert!(preload_batch(65_536) * (65_536 + EVENT_OVERHEAD_BYTES) <= PRELOAD_BODY_BYTES);
        assert_eq!(preload_batch(2_000_000), 1, "one event at least");
    }

    #[test]
    fn the_backlog_a_preload_waits_on_is_bounded_in_bytes_and_holds_a_batch_per_connection() {
        assert_eq!(preload_backlog_max(200), 50_000);
        assert_eq!(preload_backlog_max(60_000), 822);
        assert!(preload_backlog_max(60_000) * 60_800 <= PRELOAD_BACKLOG_BYTES as u64);
        let huge = preload_backlog_max(500_000_000);
        assert_eq!(huge, PRELOAD_CONNECTIONS as u64, "one batch of one event per connection");
    }
}
