//! Every body a node decodes from another node, fed hostile bytes: the
//! request decoders of the Raft routes and of a forwarded command, and the
//! replies the client side decodes. Arbitrary bytes, valid encodings cut
//! short, and valid encodings with bytes changed must each give a value or
//! an error, never a panic, an abort or an allocation the body did not pay
//! for.

use hookraft_core::command::{NewEvent, Outcome};
use hookraft_core::ids::{DeliveryId, EndpointId, EventId};
use hookraft_core::model::{AttemptRecord, Endpoint};
use hookraft_core::retry::{Decision, RetryRule};
use hookraft_core::signing::Secret;
use hookraft_core::{Command, Response};
use hookraft_raft::rpc::{
    self, AppendRequest, AppendResponse, Committed, ProposeReply, RaftReply, SegmentId, SnapshotRequest,
    SnapshotResponse, VoteReply, VoteRequest,
};
use hookraft_raft::{Entry, EntryPayload, LogId, SnapshotMeta, Vote};
use openraft::CommittedLeaderId;
use openraft::raft::{AppendEntriesResponse, InstallSnapshotResponse, VoteResponse};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

/// A few commands of every shape a leader replicates.
fn commands() -> Vec<Command> {
    let mut rng = StdRng::seed_from_u64(3);
    let secret = Secret::from_key(vec![9; 32]).expect("key");
    let endpoint =
        Endpoint::new(EndpointId::generate(1, &mut rng), "https://example.com/h".into(), (&secret).into(), 1);
    let event_id = EventId::generate(2, &mut rng);
    let event = NewEvent {
        id: event_id,
        event_type: "order.created".into(),
        payload: "{\"order\":1}".into(),
        idempotency_key: Some("k-1".into()),
        endpoint_ids: None,
        ordering_key: None,
        inbound: None,
    };
    let outcome = Outcome {
        delivery_id: DeliveryId::derive(&event_id, &endpoint.id),
        shard: endpoint.id.shard(),
        token: 4,
        attempt: AttemptRecord {
            node_id: 1,
            fencing_token: 4,
            started_at_ms: 3,
            latency_ms: 2,
            status_code: Some(429),
            error: None,
            response_excerpt: Some("slow down".into()),
        },
        decision: Decision::Retry { at_ms: 9, rule: RetryRule::Throttled },
        breaker: None,
    };
    vec![
        Command::RegisterEndpoint { endpoint: Box::new(endpoint) },
        Command::IngestEvents { now_ms: 2, events: vec![event] },
        Command::Batch(vec![Command::RecordOutcomes { node_id: 1, now_ms: 4, outcomes: vec![outcome] }, Command::Noop]),
    ]
}

fn append_request() -> AppendRequest {
    let entries = commands()
        .into_iter()
        .enumerate()
        .map(|(i, c)| Entry { log_id: log_id(2, i as u64 + 1), payload: EntryPayload::Normal(c.into()) })
        .chain([Entry { log_id: log_id(2, 4), payload: EntryPayload::Blank }])
        .collect();
    AppendRequest { vote: Vote::new_committed(2, 1), prev_log_id: Some(log_id(1, 0)), entries, leader_commit: None }
}

fn snapshot_request() -> SnapshotRequest {
    let meta = SnapshotMeta { last_log_id: Some(log_id(2, 9)), snapshot_id: "2-9-1".into(), ..Default::default() };
    SnapshotRequest { vote: Vote::new_committed(2, 1), meta, offset: 64, data: vec![7; 100], done: false }
}

/// Valid encodings of every request and reply type, tagged by what decodes them.
fn valid_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let encode = |what, value: &dyn erased::Encode| (what, value.bytes());
    let mut bodies = vec![
        encode("append", &append_request()),
        encode("vote", &VoteRequest { vote: Vote::new(3, 2), last_log_id: Some(log_id(2, 4)) }),
        encode("snapshot", &snapshot_request()),
        encode("append reply", &RaftReply::<AppendResponse>::Ok(AppendEntriesResponse::PartialSuccess(None))),
        encode("append reply", &RaftReply::<AppendResponse>::Ok(AppendEntriesResponse::HigherVote(Vote::new(4, 3)))),
        encode(
            "vote reply",
            &RaftReply::<VoteReply>::Ok(VoteResponse { vote: Vote::new(3, 2), vote_granted: true, last_log_id: None }),
        ),
        encode(
            "snapshot reply",
            &RaftReply::<SnapshotResponse>::SnapshotMismatch {
                expect: SegmentId { snapshot_id: "a".into(), offset: 0 },
                got: SegmentId { snapshot_id: "a".into(), offset: 9 },
            },
        ),
        encode("snapshot reply", &RaftReply::<SnapshotResponse>::Ok(InstallSnapshotResponse { vote: Vote::new(1, 1) })),
        encode(
            "propose reply",
            &ProposeReply::Applied(Committed { response: Response::Batch(vec![Response::Ok]), log_index: 7 }),
        ),
        encode("propose reply", &ProposeReply::NotLeader { leader: Some(2) }),
    ];
    for command in commands() {
        bodies.push(encode("command", &command));
    }
    bodies
}

/// Encodes values of different types behind one trait object.
mod erased {
    pub trait Encode {
        fn bytes(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Encode for T {
        fn bytes(&self) -> Vec<u8> {
            hookraft_raft::rpc::encode("body", self).expect("encodes")
        }
    }
}

/// Decodes `bytes` as `what` names it; `Ok` when a value came out.
fn decode_as(what: &str, bytes: &[u8]) -> Result<(), hookraft_raft::Error> {
    match what {
        "append" => rpc::decode::<AppendRequest>("append", bytes).map(drop),
        "vote" => rpc::decode::<VoteRequest>("vote", bytes).map(drop),
        "snapshot" => rpc::decode::<SnapshotRequest>("snapshot", bytes).map(drop),
        "command" => rpc::decode_command(bytes).map(drop),
        "append reply" => rpc::decode::<RaftReply<AppendResponse>>("append reply", bytes).map(drop),
        "vote reply" => rpc::decode::<RaftReply<VoteReply>>("vote reply", bytes).map(drop),
        "snapshot reply" => rpc::decode::<RaftReply<SnapshotResponse>>("snapshot reply", bytes).map(drop),
        "propose reply" => rpc::decode::<ProposeReply>("propose reply", bytes).map(drop),
        other => panic!("no decoder named {other}"),
    }
}

const DECODERS: [&str; 8] =
    ["append", "vote", "snapshot", "command", "append reply", "vote reply", "snapshot reply", "propose reply"];

#[test]
fn every_valid_body_decodes_as_what_it_is() {
    for (what, bytes) in valid_bodies() {
        decode_as(what, &bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}

#[test]
fn a_catch_up_append_of_thousands_of_entries_decodes() {
    // What a leader sends a follower that restarted behind: many entries in
    // one body that is small on the wire but claims far more in memory
    // while it decodes (each entry's in-memory size, not its encoding).
    let entries = (1..=20_000u64)
        .map(|i| Entry {
            log_id: log_id(2, i),
            payload: EntryPayload::Normal(Command::Heartbeat { node_id: 1, now_ms: i, lease_ms: 6_000 }.into()),
        })
        .collect();
    let request = AppendRequest {
        vote: Vote::new_committed(2, 1),
        prev_log_id: Some(log_id(1, 0)),
        entries,
        leader_commit: None,
    };
    let bytes = rpc::encode("append", &request).expect("encodes");
    let claimed = 20_000 * std::mem::size_of::<Entry>();
    assert!(bytes.len() < 1024 * 1024 && claimed > 1024 * 1024, "body {} bytes, claims {claimed}", bytes.len());
    let decoded = rpc::decode::<AppendRequest>("append", &bytes).expect("decodes");
    assert_eq!(decoded.entries.len(), 20_000);
}

#[test]
fn a_hostile_length_prefix_in_a_small_body_is_refused_before_allocating() {
    // A snapshot chunk whose snapshot id claims 1 GiB, in a body of a few
    // dozen bytes: bincode would allocate the string before reading it,
    // but the claim exceeds what one body may claim. (A byte vector like
    // the chunk's data is read element by element, and serde preallocates
    // at most 1 MiB of it whatever its prefix says.)
    let valid = rpc::encode("snapshot", &snapshot_request()).expect("encodes");
    let id_at = valid.windows(6).position(|w| w == b"\x052-9-1").expect("the snapshot id, after its length");
    let mut hostile = valid[..id_at].to_vec();
    hostile.push(253);
    hostile.extend_from_slice(&(1u64 << 30).to_le_bytes());
    hostile.extend_from_slice(&valid[id_at + 6..]);
    let error = rpc::decode::<SnapshotRequest>("snapshot", &hostile).expect_err("refused");
    assert!(error.to_string().contains("LimitExceeded"), "{error}");
}

#[test]
fn a_forwarded_command_of_deeply_nested_batches_is_an_error_not_an_abort() {
    let one = rpc::encode("command", &Command::Batch(vec![Command::Noop])).expect("encodes");
    let noop = rpc::encode("command", &Command::Noop).expect("encodes");
    let mut bytes = one[..one.len() - noop.len()].repeat(500_000);
    bytes.extend_from_slice(&noop);
    assert!(rpc::decode_command(&bytes).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic_any_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for what in DECODERS {
            let _ = decode_as(what, &bytes);
        }
    }

    #[test]
    fn a_valid_body_cut_short_is_an_error(pick in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>()) {
        let bodies = valid_bodies();
        let (what, bytes) = &bodies[pick.index(bodies.len())];
        let short = &bytes[..cut.index(bytes.len())];
        prop_assert!(decode_as(what, short).is_err(), "{} decoded from {} of {} bytes", what, short.len(), bytes.len());
    }

    #[test]
    fn a_valid_body_with_bytes_changed_never_panics(
        pick in any::<prop::sample::Index>(),
        changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        extra in proptest::collection::vec(any::<u8>(), 0..4),
    ) {
        let bodies = valid_bodies();
        let (what, bytes) = &bodies[pick.index(bodies.len())];
        let mut mutated = bytes.clone();
        for (at, value) in changes {
            let i = at.index(mutated.len());
            mutated[i] = value;
        }
        let _ = decode_as(what, &mutated);
        // Bytes after a whole value are refused.
        if !extra.is_empty() {
            let mut longer = bytes.clone();
            longer.extend_from_slice(&extra);
            prop_assert!(decode_as(what, &longer).is_err());
        }
    }
}
