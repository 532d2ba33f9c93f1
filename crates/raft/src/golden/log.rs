//! The log's and node RPC's layouts, pinned like the snapshot's
//! (`snapshot/golden.rs`): commands of every kind a log holds, encoded as
//! the log stores them, and an append request carrying them, as the
//! leader sends it, encode to the bytes of `tests/golden/commands.bin` and
//! `tests/golden/append.bin`, and those bytes decode and encode again byte
//! for byte. `HOOKRAFT_BLESS=1 cargo test -p hookraft-raft golden` writes
//! them again after a change of layout (until a first release).

use hookraft_core::Command;
use hookraft_core::breaker::CircuitBreaker;
use hookraft_core::command::{EndpointPatch, NewEvent, Outcome, ReplayTarget, RewrappedSecret, SecretSlot};
use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::model::{AttemptRecord, Endpoint};
use hookraft_core::payload::StoredSecret;
use hookraft_core::retry::{Decision, RetryRule};
use openraft::{CommittedLeaderId, EntryPayload};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::codec::{decode, encode};
use crate::rpc::{self, AppendRequest};
use crate::{Entry, LogCommand, LogId, Vote};

const NOW_MS: u64 = 1_767_225_600_000;

/// Commands of the kinds a node proposes, with fixed ids and times.
fn golden_commands() -> Vec<Command> {
    let mut rng = StdRng::seed_from_u64(51);
    let endpoint_id = EndpointId::generate(NOW_MS, &mut rng);
    let endpoint = Endpoint::new(endpoint_id, "https://example.com/hook".into(), StoredSecret::clear(&[9; 32]), NOW_MS);
    let event_id = EventId::generate(NOW_MS, &mut rng);
    let delivery_id = DeliveryId::derive(&event_id, &endpoint_id);
    let event = NewEvent {
        id: event_id,
        event_type: "order.created".into(),
        payload: "{\"n\":1}".into(),
        idempotency_key: Some("key-1".into()),
        endpoint_ids: Some(vec![endpoint_id]),
        ordering_key: Some("cus_1".into()),
        inbound: None,
    };
    let attempt = AttemptRecord {
        node_id: 1,
        fencing_token: 4,
        started_at_ms: NOW_MS + 10,
        latency_ms: 12,
        status_code: Some(503),
        error: None,
        response_excerpt: Some("busy".into()),
    };
    let outcome = Outcome {
        delivery_id,
        shard: endpoint_id.shard(),
        token: 4,
        attempt,
        decision: Decision::Retry { at_ms: NOW_MS + 5_000, rule: RetryRule::Backoff },
        breaker: Some(CircuitBreaker::new()),
    };
    let slot = SecretSlot::Endpoint { id: endpoint_id, retired: None };
    let rewrap = RewrappedSecret { slot, from: StoredSecret::clear(&[9; 32]), secret: StoredSecret::clear(&[8; 32]) };
    vec![
        Command::RegisterEndpoint { endpoint: Box::new(endpoint) },
        Command::UpdateEndpoint {
            id: endpoint_id,
            patch: EndpointPatch { description: Some(Some("orders".into())), ..EndpointPatch::default() },
            now_ms: NOW_MS,
        },
        Command::Heartbeat { node_id: 1, now_ms: NOW_MS, lease_ms: 3_000 },
        Command::AssignShards { now_ms: NOW_MS, grants: vec![(endpoint_id.shard(), 1)] },
        Command::IngestEventsFrom { node_id: 1, now_ms: NOW_MS, events: vec![event] },
        Command::RecordOutcomes { node_id: 1, now_ms: NOW_MS + 30, outcomes: vec![outcome] },
        Command::Replay { now_ms: NOW_MS + 60, target: ReplayTarget::Delivery(delivery_id) },
        Command::RewrapSecrets { now_ms: NOW_MS + 90, secrets: vec![rewrap] },
        Command::Prune { now_ms: NOW_MS + 120, before_ms: NOW_MS, max_events: 512 },
        Command::Batch(vec![Command::Noop, Command::ForgetNode { node_id: 3, now_ms: NOW_MS }]),
    ]
}

fn entries() -> Vec<Entry> {
    golden_commands()
        .into_iter()
        .zip(1..)
        .map(|(command, index)| Entry {
            log_id: LogId::new(CommittedLeaderId::new(2, 1), index),
            payload: EntryPayload::Normal(LogCommand::new(command)),
        })
        .collect()
}

#[test]
fn the_log_entries_layout_is_pinned_by_its_golden_file() {
    let entries = entries();
    let encoded = encode("log entries", &entries).expect("encodes");
    let golden = crate::golden::pinned("commands.bin", &encoded);
    let decoded: Vec<Entry> = decode("log entries", &golden).expect("the golden file decodes");
    let commands: Vec<&Command> = decoded
        .iter()
        .map(|entry| match &entry.payload {
            EntryPayload::Normal(command) => &**command,
            other => panic!("a normal entry, not {other:?}"),
        })
        .collect();
    assert_eq!(commands, golden_commands().iter().collect::<Vec<_>>());
    assert!(encode("log entries", &decoded).expect("encodes") == golden, "decoding and encoding again changed it");
}

#[test]
fn the_append_request_layout_is_pinned_by_its_golden_file() {
    let request = AppendRequest {
        vote: Vote::new_committed(2, 1),
        prev_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), 0)),
        entries: entries(),
        leader_commit: Some(LogId::new(CommittedLeaderId::new(2, 1), 3)),
    };
    let encoded = rpc::encode("append", &request).expect("encodes");
    let golden = crate::golden::pinned("append.bin", &encoded);
    let decoded: AppendRequest = rpc::decode("append", &golden).expect("the golden file decodes");
    assert_eq!(decoded.entries.len(), 10);
    assert!(rpc::encode("append", &decoded).expect("encodes") == golden, "decoding and encoding again changed it");
}
