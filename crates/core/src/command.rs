//! The replicated commands and their responses.
//!
//! A command is proposed by one node, committed to the Raft log, and applied
//! by every node with [`crate::state::ClusterState::apply`]. Every time a
//! command needs is stamped into it by its proposer. Commands are encoded with
//! bincode, whose enum encoding is positional: **variants and fields that have
//! shipped are frozen; add new variants at the end only.**

use serde::{Deserialize, Serialize};

use crate::breaker::CircuitBreaker;
use crate::ids::{DeliveryId, EndpointId, EventId, NodeId, Shard, SourceId};
use crate::inbound::{Cidr, Locator, Source};
use crate::model::{AttemptRecord, Endpoint, Ordering};
use crate::payload::{Payload, SecretOwner, StoredSecret};
use crate::retry::{Decision, RetryPolicy};

/// A replicated state change. Append-only: see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    RegisterEndpoint {
        endpoint: Box<Endpoint>,
    },
    UpdateEndpoint {
        id: EndpointId,
        patch: EndpointPatch,
        now_ms: u64,
    },
    DeleteEndpoint {
        id: EndpointId,
        now_ms: u64,
    },
    RotateSecret {
        id: EndpointId,
        secret: StoredSecret,
        grace_until_ms: u64,
        now_ms: u64,
    },
    /// A batch of events; idempotency keys are checked here so two nodes
    /// racing on one key still produce one event.
    IngestEvents {
        now_ms: u64,
        events: Vec<NewEvent>,
    },
    /// A batch of attempt outcomes, each under its shard's fencing token.
    RecordOutcomes {
        node_id: NodeId,
        now_ms: u64,
        outcomes: Vec<Outcome>,
    },
    Replay {
        now_ms: u64,
        target: ReplayTarget,
    },
    Heartbeat {
        node_id: NodeId,
        now_ms: u64,
        lease_ms: u64,
    },
    /// Grants shards; each grant takes the next fencing token.
    AssignShards {
        now_ms: u64,
        grants: Vec<(Shard, NodeId)>,
    },
    /// Commits nothing but an entry; used to learn that the leader's state is current.
    Noop,
    /// An operator starts (or stops) draining a node: it keeps serving the
    /// API but the rebalancer moves every shard off it.
    SetDraining {
        node_id: NodeId,
        draining: bool,
        now_ms: u64,
    },
    /// A node left the cluster: forget its liveness and free its shards.
    ForgetNode {
        node_id: NodeId,
        now_ms: u64,
    },
    /// Several commands in one log entry, applied in order. openraft appends
    /// (and fsyncs) once per client write, so a node's log writer wraps
    /// everything queued meanwhile into one `Batch`. Decoding refuses
    /// batches nested deeper than [`BATCH_NESTING_MAX`].
    Batch(#[serde(deserialize_with = "nesting::bounded")] Vec<Command>),
    /// Takes shards from their owners (each under a new token, so the old
    /// owner's outcomes become stale), to be granted again once the old
    /// owner's lease must have lapsed; `Some(node)` names where they go.
    RevokeShards {
        now_ms: u64,
        shards: Vec<(Shard, Option<NodeId>)>,
    },
    /// Retention: forgets, oldest first, up to `max_events` events received
    /// before `before_ms` whose deliveries are all delivered or dead, with
    /// their deliveries and idempotency keys (see `state::prune`).
    Prune {
        now_ms: u64,
        before_ms: u64,
        max_events: u32,
    },
    /// [`Command::IngestEvents`] with the node that accepted the events,
    /// which every event's timeline names. What nodes propose now.
    IngestEventsFrom {
        node_id: NodeId,
        now_ms: u64,
        events: Vec<NewEvent>,
    },
    /// Payloads sealed again under the proposer's active key (a rotation's
    /// rewrap, or the first encryption of payloads stored in clear). Each
    /// replaces its event's payload only if that is still stored as the
    /// proposer read it (`from_key_id`), and only with a sealed payload.
    /// At most [`REWRAP_BATCH_MAX`] per entry.
    RewrapPayloads {
        now_ms: u64,
        payloads: Vec<RewrappedPayload>,
    },
    /// Endpoint signing secrets and provider secrets sealed again under
    /// the proposer's active key, the same way: each replaces its slot
    /// only if the slot still holds what the proposer read (`from`), and
    /// only with a sealed secret. At most [`REWRAP_BATCH_MAX`] per entry.
    RewrapSecrets {
        now_ms: u64,
        secrets: Vec<RewrappedSecret>,
    },
    /// Changes whether (and how) an endpoint delivers each key's events in
    /// order. Turning it off forgets the endpoint's keys; a later turn on
    /// numbers keys from 1 again.
    SetOrdering {
        id: EndpointId,
        ordering: Ordering,
        now_ms: u64,
    },
    /// An operator skips the dead delivery blocking an ordering key of an
    /// endpoint: it stays dead, marked skipped, and the key goes on.
    SkipBlocked {
        endpoint_id: EndpointId,
        ordering_key: String,
        now_ms: u64,
    },
    /// Registers an inbound source (at most [`crate::inbound::SOURCES_MAX`]).
    CreateSource {
        source: Box<Source>,
    },
    UpdateSource {
        id: SourceId,
        patch: SourcePatch,
        now_ms: u64,
    },
    /// Forgets a source; endpoints that listed it stop listing it. Events
    /// it created stay, with their deliveries.
    DeleteSource {
        id: SourceId,
        now_ms: u64,
    },
    RotateSourceSecret {
        id: SourceId,
        secret: StoredSecret,
        grace_until_ms: u64,
        now_ms: u64,
    },
    /// Sets the sources whose events an endpoint receives (empty: the
    /// producers'). Every source must exist.
    SetEndpointSources {
        id: EndpointId,
        sources: Vec<SourceId>,
        now_ms: u64,
    },
    /// Sets how long an endpoint may fail every attempt before it is
    /// disabled (0: never).
    SetDisableAfter {
        id: EndpointId,
        disable_after_s: u64,
        now_ms: u64,
    },
}

/// Changes to a source; `None` leaves a setting as it is. Its scheme and
/// secret are not among them: a new scheme is a new source, a new secret
/// a [`Command::RotateSourceSecret`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourcePatch {
    pub description: Option<Option<String>>,
    pub event_id: Option<Locator>,
    pub event_type: Option<Option<Locator>>,
    pub entity_key: Option<Option<String>>,
    pub version: Option<Option<String>>,
    pub rate_limit_per_s: Option<Option<u32>>,
    pub allow_cidrs: Option<Vec<Cidr>>,
    pub disabled: Option<bool>,
}

/// Most payloads one [`Command::RewrapPayloads`] carries.
pub const REWRAP_BATCH_MAX: usize = 256;

/// One payload of a [`Command::RewrapPayloads`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewrappedPayload {
    pub event_id: EventId,
    /// The key the payload was under when read; `None`: it was in clear.
    pub from_key_id: Option<String>,
    pub payload: Payload,
}

/// Where a stored secret is: its owner, and which of its secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecretSlot {
    /// `retired: None` is the current secret; `Some(i)` the `i`th retired one.
    Endpoint {
        id: EndpointId,
        retired: Option<u32>,
    },
    Source {
        id: SourceId,
        retired: Option<u32>,
    },
}

impl SecretSlot {
    /// `f` of the owner the slot's secret is sealed for.
    pub fn with_owner<T>(&self, f: impl FnOnce(SecretOwner<'_>) -> T) -> T {
        match self {
            SecretSlot::Endpoint { id, .. } => f(SecretOwner::Endpoint(&id.as_str())),
            SecretSlot::Source { id, .. } => f(SecretOwner::Source(&id.as_str())),
        }
    }
}

/// One secret of a [`Command::RewrapSecrets`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewrappedSecret {
    pub slot: SecretSlot,
    /// The secret as the proposer read it.
    pub from: StoredSecret,
    pub secret: StoredSecret,
}

/// Changes to an endpoint; `None` leaves a setting as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub description: Option<Option<String>>,
    pub event_types: Option<Option<Vec<String>>>,
    pub max_in_flight: Option<u32>,
    pub rate_limit_per_s: Option<Option<u32>>,
    pub timeout_ms: Option<u32>,
    pub retry: Option<RetryPolicy>,
    pub disabled: Option<bool>,
}

/// An event as proposed by the node that received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    pub id: EventId,
    pub event_type: String,
    /// Validated JSON, sealed by the accepting node when it has a keyring;
    /// shared with the state once applied (the log keeps recent commands in
    /// memory, so the state takes the same copy).
    pub payload: Payload,
    pub idempotency_key: Option<String>,
    /// Explicit targets; `None` fans out by event type.
    pub endpoint_ids: Option<Vec<EndpointId>>,
    /// At ordered endpoints, the event goes after the earlier events of
    /// this key; `None`: it is ordered behind nothing.
    pub ordering_key: Option<String>,
    /// Where it came from, when a source's ingress received it.
    pub inbound: Option<Box<crate::inbound::Inbound>>,
}

/// The result of one attempt, reported by the endpoint's owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub delivery_id: DeliveryId,
    pub shard: Shard,
    pub token: u64,
    pub attempt: AttemptRecord,
    pub decision: Decision,
    /// The owner's breaker after this outcome, when it changed.
    pub breaker: Option<CircuitBreaker>,
}

/// What a replay re-queues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplayTarget {
    Delivery(DeliveryId),
    /// Dead deliveries of an endpoint created in `[since_ms, until_ms)`,
    /// all in one entry. The API proposes [`ReplayTarget::EndpointDeadAfter`]
    /// instead; this stays for the logs that hold it.
    EndpointDead {
        endpoint_id: EndpointId,
        since_ms: Option<u64>,
        until_ms: Option<u64>,
    },
    /// One bounded step of a bulk replay: dead deliveries of an endpoint
    /// created in `[since_ms, until_ms)`, with ids above `after`, in id
    /// order; at most `max` (and never more than
    /// [`crate::state::REPLAY_BATCH_MAX`]) re-queued and at most
    /// [`crate::state::REPLAY_SCAN_MAX`] dead deliveries looked at. The
    /// response, [`Response::ReplayedUpTo`], says where the next step
    /// starts.
    EndpointDeadAfter {
        endpoint_id: EndpointId,
        since_ms: Option<u64>,
        until_ms: Option<u64>,
        after: Option<DeliveryId>,
        max: u32,
    },
}

/// What applying a command produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    Ok,
    NotFound {
        what: String,
    },
    Conflict {
        detail: String,
    },
    Ingested {
        results: Vec<IngestResult>,
    },
    OutcomesApplied {
        applied: u32,
        stale: u32,
        ignored: u32,
    },
    Replayed {
        deliveries: Vec<(DeliveryId, EndpointId)>,
    },
    ShardsAssigned {
        tokens: Vec<(Shard, u64)>,
    },
    /// One response per command of a `Batch`, in order. Nesting bounded
    /// on decode like [`Command::Batch`].
    Batch(#[serde(deserialize_with = "nesting::bounded")] Vec<Response>),
    /// What a `Prune` removed.
    Pruned {
        events: u32,
        deliveries: u32,
    },
    /// What one step of a bulk replay re-queued, and the id the next step
    /// starts after (`None`: the endpoint has no dead delivery past what
    /// this step looked at).
    ReplayedUpTo {
        deliveries: Vec<(DeliveryId, EndpointId)>,
        next_after: Option<DeliveryId>,
    },
    /// What a `RewrapPayloads` replaced, and what it left because the
    /// event was gone or its payload had changed since it was read.
    Rewrapped {
        rewrapped: u32,
        skipped: u32,
    },
    /// What a `SkipBlocked` skipped, and the key's new head if it has one.
    SkippedBlocked {
        skipped: DeliveryId,
        next: Option<DeliveryId>,
    },
}

/// The fate of one event of an `IngestEvents` batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum IngestResult {
    Created {
        event_id: EventId,
        deliveries: Vec<(DeliveryId, EndpointId)>,
    },
    /// The idempotency key was seen before; nothing was created.
    Duplicate {
        event_id: EventId,
    },
    /// An explicit target does not exist; nothing was created.
    UnknownEndpoint {
        endpoint_id: EndpointId,
    },
}

/// How deep batches may nest in a decoded command or response. The node
/// nests two deep (the log writer batches the lease loop's batches); bytes
/// from the network could otherwise nest a batch per two bytes and overflow
/// the decoder's stack, which aborts the process.
pub const BATCH_NESTING_MAX: u32 = 16;

/// Counts the batches being decoded on this thread (decoding is synchronous,
/// so a thread's count is one decode's depth).
mod nesting {
    use std::cell::Cell;

    use serde::{Deserialize, Deserializer, de};

    use super::BATCH_NESTING_MAX;

    thread_local! {
        static DEPTH: Cell<u32> = const { Cell::new(0) };
    }

    /// Leaves one level when dropped, also when decoding fails or unwinds.
    struct Level;

    impl Drop for Level {
        fn drop(&mut self) {
            DEPTH.with(|depth| depth.set(depth.get().saturating_sub(1)));
        }
    }

    pub(super) fn bounded<'de, D: Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Vec<T>, D::Error> {
        let depth = DEPTH.with(|depth| {
            depth.set(depth.get() + 1);
            depth.get()
        });
        let _level = Level;
        if depth > BATCH_NESTING_MAX {
            return Err(de::Error::custom(format!("batches nested more than {BATCH_NESTING_MAX} deep")));
        }
        Vec::<T>::deserialize(deserializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bincode_of<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("encodes")
    }

    fn from_bincode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard())
            .map(|(value, _)| value)
            .map_err(|e| e.to_string())
    }

    fn nested(depth: u32) -> Command {
        (0..depth).fold(Command::Noop, |inner, _| Command::Batch(vec![inner]))
    }

    #[test]
    fn batches_nested_up_to_the_limit_decode_and_deeper_ones_are_refused() {
        let ok = nested(BATCH_NESTING_MAX);
        assert_eq!(from_bincode::<Command>(&bincode_of(&ok)), Ok(ok));
        let error = from_bincode::<Command>(&bincode_of(&nested(BATCH_NESTING_MAX + 1))).expect_err("refused");
        assert!(error.contains("batches nested more than 16 deep"), "{error}");
        // The depth is per decode: a refused decode leaves none behind.
        let two = nested(2);
        assert_eq!(from_bincode::<Command>(&bincode_of(&two)), Ok(two));
    }

    #[test]
    fn a_hostile_nesting_of_a_million_batches_is_an_error_not_a_stack_overflow() {
        // `Batch(vec![x])` encodes as the variant, the length 1, then x.
        let one = bincode_of(&Command::Batch(vec![Command::Noop]));
        let noop = bincode_of(&Command::Noop);
        let prefix = &one[..one.len() - noop.len()];
        let mut bytes = prefix.repeat(1_000_000);
        bytes.extend_from_slice(&noop);
        assert!(from_bincode::<Command>(&bytes).is_err());

        let one = bincode_of(&Response::Batch(vec![Response::Ok]));
        let ok = bincode_of(&Response::Ok);
        let mut bytes = one[..one.len() - ok.len()].repeat(1_000_000);
        bytes.extend_from_slice(&ok);
        assert!(from_bincode::<Response>(&bytes).is_err());
    }
}
