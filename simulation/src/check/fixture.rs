//! States for the checkers' tests, made the way a node makes them: by
//! applying commands, or by decoding a snapshot. The history has no other
//! way in, so the tests put finished records there the same way.

use hookraft_core::command::{Command, IngestResult, NewEvent, Outcome, Response};
use hookraft_core::ids::{DeliveryId, EndpointId, EventId, NodeId, SHARD_COUNT};
use hookraft_core::model::{AttemptRecord, Endpoint};
use hookraft_core::retry::Decision;
use hookraft_core::signing::Secret;
use hookraft_core::state::ClusterState;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// The node every shard is granted to.
pub const OWNER: NodeId = 1;

/// `state` as a replica holds it after decoding its snapshot: every event
/// whose deliveries are all over is moved into the history, the rest stay
/// in memory. Hand-made states go through it to put their finished records
/// where a node keeps them.
pub fn through_snapshot(state: &ClusterState) -> ClusterState {
    let bytes = bincode::serde::encode_to_vec(state, bincode::config::standard()).expect("a state encodes");
    bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).expect("and decodes").0
}

/// A state of one endpoint (every event type, its shard granted to
/// [`OWNER`]) and one event with one delivery to it, pending, received
/// at 5 ms under `key`.
pub struct OneDelivery {
    pub state: ClusterState,
    pub endpoint: EndpointId,
    pub event: EventId,
    pub delivery: DeliveryId,
}

impl OneDelivery {
    pub fn new(seed: u64, key: Option<&str>) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let secret = Secret::from_key(vec![7; 32]).expect("a 32-byte key");
        let endpoint = Endpoint::new(
            EndpointId::generate(1_000, &mut rng),
            "https://example.com/hook".into(),
            (&secret).into(),
            1_000,
        );
        let mut state = ClusterState::default();
        let grants = (0..SHARD_COUNT).map(|shard| (shard, OWNER)).collect();
        state.apply(&Command::AssignShards { now_ms: 1, grants });
        let endpoint_id = endpoint.id;
        assert_eq!(state.apply(&Command::RegisterEndpoint { endpoint: Box::new(endpoint) }), Response::Ok);
        let new = NewEvent {
            id: EventId::generate(2_000, &mut rng),
            event_type: "order.paid".into(),
            payload: r#"{"n":1}"#.into(),
            idempotency_key: key.map(str::to_owned),
            endpoint_ids: None,
            ordering_key: None,
            inbound: None,
        };
        let Response::Ingested { results } = state.apply(&Command::IngestEvents { now_ms: 5, events: vec![new] })
        else {
            panic!("an ingest answers Ingested")
        };
        let [IngestResult::Created { event_id, deliveries }] = &results[..] else { panic!("one event created") };
        let [(delivery, _)] = deliveries[..] else { panic!("one delivery") };
        Self { state, endpoint: endpoint_id, event: *event_id, delivery }
    }

    /// An outcome of the delivery, reported by `node` under the current
    /// token of its shard.
    pub fn outcome(&self, node: NodeId, status: u16, decision: Decision) -> Outcome {
        let token = self.state.grant_for(&self.endpoint).token;
        Outcome {
            delivery_id: self.delivery,
            shard: self.endpoint.shard(),
            token,
            attempt: AttemptRecord {
                node_id: node,
                fencing_token: token,
                started_at_ms: 3_000 + u64::from(self.state.delivery(&self.delivery).expect("stored").attempt_count),
                latency_ms: 5,
                status_code: Some(status),
                error: None,
                response_excerpt: None,
            },
            decision,
            breaker: None,
        }
    }

    /// Applies `outcome` as reported by `node`; answers the command and
    /// the response.
    pub fn report(&mut self, node: NodeId, outcome: Outcome) -> (Command, Response) {
        let command = Command::RecordOutcomes { node_id: node, now_ms: 6_000, outcomes: vec![outcome] };
        let response = self.state.apply(&command);
        (command, response)
    }

    /// The owner delivers it: the event is finished and moves into the
    /// history.
    pub fn deliver(&mut self) -> &mut Self {
        let delivered = self.outcome(OWNER, 200, Decision::Delivered);
        self.report(OWNER, delivered);
        assert!(self.state.history().contains_delivery(&self.delivery), "a delivered event leaves memory");
        assert!(!self.state.deliveries.contains_key(&self.delivery));
        self
    }
}
