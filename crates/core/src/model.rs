//! The replicated domain model: endpoints, events, deliveries and their
//! timelines, node liveness and the shard map.
//!
//! Everything here is stored in the Raft log and snapshots with bincode, so
//! types stay plain: no `skip_serializing_if`, no untagged or internally
//! tagged enums, payloads as raw JSON text. The HTTP API renders its own views.

use serde::{Deserialize, Serialize};

use crate::breaker::CircuitBreaker;
use crate::ids::{DeliveryId, EndpointId, EventId, NodeId};
use crate::ordering::OnDead;
use crate::payload::{Keyring, OpenError, Payload, SecretOwner, StoredSecret};
use crate::retry::RetryPolicy;
use crate::signing::Secret;

/// Default concurrent attempts per endpoint.
pub const MAX_IN_FLIGHT_DEFAULT: u32 = 10;
/// Upper bound on `max_in_flight`.
pub const MAX_IN_FLIGHT_LIMIT: u32 = 1_000;
/// Default per-attempt timeout.
pub const TIMEOUT_MS_DEFAULT: u32 = 15_000;
/// Default time an endpoint may fail every attempt before it is disabled.
pub const DISABLE_AFTER_S_DEFAULT: u64 = 5 * 24 * 3_600;
/// Longest `disable_after_s` an endpoint may ask for (0 turns it off).
pub const DISABLE_AFTER_S_MAX: u64 = 90 * 24 * 3_600;
/// Longest per-attempt timeout an endpoint may ask for.
pub const TIMEOUT_MS_MAX: u32 = 30_000;
/// Shortest per-attempt timeout an endpoint may ask for.
pub const TIMEOUT_MS_MIN: u32 = 100;
/// Upper bound on `rate_limit_per_s`.
pub const RATE_LIMIT_PER_S_MAX: u32 = 100_000;
/// Longest URL accepted.
pub const URL_BYTES_MAX: usize = 2_048;
/// Most event types one endpoint may subscribe to.
pub const EVENT_TYPES_MAX: usize = 256;
/// Longest event type name.
pub const EVENT_TYPE_BYTES_MAX: usize = 256;
/// Bytes of a response body kept on the timeline.
pub const RESPONSE_EXCERPT_BYTES_MAX: usize = 1_024;
/// Entries one delivery's timeline keeps; past this the oldest attempts are
/// summarised away so a replayed-forever delivery cannot grow without bound.
pub const TIMELINE_ENTRIES_MAX: usize = 512;

/// A customer endpoint and its delivery settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Endpoint {
    pub id: EndpointId,
    pub url: String,
    pub description: Option<String>,
    /// The current signing secret: sealed under the keyring's active key
    /// when the node that made it had a keyring.
    pub secret: StoredSecret,
    /// Secrets replaced by a rotation, still signing until their expiry.
    pub previous_secrets: Vec<RetiredSecret>,
    /// `None` subscribes to every event type.
    pub event_types: Option<Vec<String>>,
    pub max_in_flight: u32,
    pub rate_limit_per_s: Option<u32>,
    pub timeout_ms: u32,
    pub retry: RetryPolicy,
    /// Set by a 410 Gone answer (or an operator); a disabled endpoint receives
    /// nothing until it is enabled again.
    pub disabled: bool,
    pub disabled_reason: Option<String>,
    /// Replicated by the owner so the API and the next owner see it.
    pub breaker: CircuitBreaker,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// Whether the events of one `ordering_key` are delivered in order.
    pub ordering: Ordering,
    /// The inbound sources whose events it receives. Empty: it receives
    /// the producers' events; else only those sources' events.
    pub sources: Vec<crate::ids::SourceId>,
    /// How long every attempt may fail before the endpoint is disabled
    /// (auto-disable, `state/health.rs`); 0: never.
    pub disable_after_s: u64,
    /// When the first of the failed attempts since its last success was
    /// recorded; `None` after a success (or none yet).
    pub failing_since_ms: Option<u64>,
}

/// Whether an endpoint delivers the events of one key in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ordering {
    /// Every delivery goes as soon as it is due.
    #[default]
    None,
    /// The events of one `ordering_key` go one at a time, in the order they
    /// were committed, each numbered (`crate::ordering`).
    PerKey { on_dead: OnDead },
}

impl Ordering {
    /// What a dead head does, when the endpoint is ordered.
    pub fn on_dead(self) -> Option<OnDead> {
        match self {
            Ordering::None => None,
            Ordering::PerKey { on_dead } => Some(on_dead),
        }
    }
}

/// An endpoint's signing secrets, opened ([`Endpoint::open_secrets`]).
#[derive(Debug, Clone)]
pub struct SigningSecrets {
    current: Secret,
    /// Retired secrets and when each stops signing.
    retired: Vec<(Secret, u64)>,
}

impl SigningSecrets {
    /// The secrets that sign a request sent at `now_ms`: current first.
    pub fn at(&self, now_ms: u64) -> Vec<&Secret> {
        std::iter::once(&self.current)
            .chain(self.retired.iter().filter(|(_, expires_at_ms)| *expires_at_ms > now_ms).map(|(secret, _)| secret))
            .collect()
    }
}

/// A secret that stopped being current at a rotation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetiredSecret {
    pub secret: StoredSecret,
    pub expires_at_ms: u64,
}

impl Endpoint {
    /// A new, enabled endpoint with every setting at its default: every
    /// event type, [`MAX_IN_FLIGHT_DEFAULT`], [`TIMEOUT_MS_DEFAULT`], the
    /// default retry policy, no rate limit, a closed breaker.
    pub fn new(id: EndpointId, url: String, secret: StoredSecret, now_ms: u64) -> Self {
        Self {
            id,
            url,
            description: None,
            secret,
            previous_secrets: Vec::new(),
            event_types: None,
            max_in_flight: MAX_IN_FLIGHT_DEFAULT,
            rate_limit_per_s: None,
            timeout_ms: TIMEOUT_MS_DEFAULT,
            retry: RetryPolicy::default(),
            disabled: false,
            disabled_reason: None,
            breaker: CircuitBreaker::new(),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            ordering: Ordering::None,
            sources: Vec::new(),
            disable_after_s: DISABLE_AFTER_S_DEFAULT,
            failing_since_ms: None,
        }
    }

    /// Its signing secrets, opened with `keyring`: the current one and the
    /// retired ones not yet expired at `now_ms`.
    pub fn open_secrets(&self, keyring: Option<&Keyring>, now_ms: u64) -> Result<SigningSecrets, OpenError> {
        let mut retired = Vec::with_capacity(self.previous_secrets.len());
        for old in self.previous_secrets.iter().filter(|old| old.expires_at_ms > now_ms) {
            retired.push((self.open_secret(&old.secret, keyring)?, old.expires_at_ms));
        }
        Ok(SigningSecrets { current: self.current_secret(keyring)?, retired })
    }

    /// Its current signing secret, opened with `keyring`.
    pub fn current_secret(&self, keyring: Option<&Keyring>) -> Result<Secret, OpenError> {
        self.open_secret(&self.secret, keyring)
    }

    fn open_secret(&self, stored: &StoredSecret, keyring: Option<&Keyring>) -> Result<Secret, OpenError> {
        stored.open_as(keyring, SecretOwner::Endpoint(&self.id.as_str()), |key| Secret::from_key(key.to_vec()))
    }

    /// Whether an event of `event_type` fans out to this endpoint.
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        match &self.event_types {
            None => true,
            Some(types) => types.iter().any(|t| t == event_type),
        }
    }

    /// Whether an event of `event_type` from `source` (`None`: from a
    /// producer) fans out to this endpoint, disabled or not.
    pub fn receives(&self, event_type: &str, source: Option<&crate::ids::SourceId>) -> bool {
        let from = match source {
            None => self.sources.is_empty(),
            Some(source) => self.sources.contains(source),
        };
        from && self.subscribes_to(event_type)
    }
}

/// An accepted event.
///
/// Held once per pending event for as long as it is pending, so its text
/// is boxed (`Box<str>` is a `String` without the capacity: 8 bytes less
/// each, and no slack), and so is its delivery list. The payload is shared
/// instead: the command that proposed it and the state hold the one copy
/// made when the request was read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: EventId,
    pub event_type: Box<str>,
    /// The producer's JSON, in clear or sealed under a keyring key
    /// ([`crate::payload`]). Only the owner of a delivery opens it, to send it.
    pub payload: Payload,
    pub received_at_ms: u64,
    pub idempotency_key: Option<Box<str>>,
    pub deliveries: Box<[DeliveryId]>,
    /// The node that accepted it; `None` for events recorded before nodes were.
    pub received_by: Option<NodeId>,
    /// Set once its payload has been sealed again under another key.
    pub rewrapped: Option<Box<Rewrapped>>,
    /// Orders it behind the earlier events of the same key, at endpoints
    /// that deliver in order.
    pub ordering_key: Option<Box<str>>,
    /// Where it came from, when a source's ingress received it.
    pub inbound: Option<Box<crate::inbound::Inbound>>,
}

/// When an event's payload was last sealed again, and what it was first
/// stored as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewrapped {
    pub at_ms: u64,
    /// The key it was sealed under when received; `None`: it was in clear.
    pub first_key_id: Option<Box<str>>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DeliveryState {
    /// Waiting for its first attempt (or its first after a replay).
    Pending,
    /// An attempt is under way (known only on the node that owns the endpoint).
    Attempting,
    /// At least one attempt failed; the next is scheduled.
    Retrying,
    Delivered,
    /// Dead-lettered: given up, replayable.
    Dead,
    /// Not sent: a newer version of its entity key was delivered to its
    /// endpoint first (`state/stale.rs`). Terminal, replayable on purpose.
    IgnoredStale,
}

impl DeliveryState {
    pub fn is_terminal(self) -> bool {
        matches!(self, DeliveryState::Delivered | DeliveryState::Dead | DeliveryState::IgnoredStale)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Attempting => "attempting",
            DeliveryState::Retrying => "retrying",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
            DeliveryState::IgnoredStale => "ignored_stale",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => DeliveryState::Pending,
            "attempting" => DeliveryState::Attempting,
            "retrying" => DeliveryState::Retrying,
            "delivered" => DeliveryState::Delivered,
            "dead" => DeliveryState::Dead,
            "ignored_stale" => DeliveryState::IgnoredStale,
            _ => return None,
        })
    }
}

/// An optional unix-ms time in 8 bytes where `Option<u64>` takes 16: a
/// delivery holds one, and a backlog holds a delivery per pending entry.
/// `u64::MAX` stands for none; no wall clock reaches it, and a later time
/// is kept as the last one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalMs(u64);

impl OptionalMs {
    pub const NONE: Self = Self(u64::MAX);

    pub fn at(ms: u64) -> Self {
        Self(ms.min(u64::MAX - 1))
    }

    pub fn get(self) -> Option<u64> {
        (self != Self::NONE).then_some(self.0)
    }
}

impl From<Option<u64>> for OptionalMs {
    fn from(ms: Option<u64>) -> Self {
        ms.map_or(Self::NONE, Self::at)
    }
}

/// The delivery of one event to one endpoint.
///
/// Encoded with its whole timeline, `Received` first (see [`Delivery::timeline`]);
/// in memory the `Received` entry is implied by `created_at_ms`, so a pending
/// delivery holds no timeline allocation at all. It is 112 bytes (a test
/// keeps it so): one allocator size class below 128.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "wire::DeliveryWire<Vec<TimelineEntry>>")]
pub struct Delivery {
    pub id: DeliveryId,
    pub event_id: EventId,
    pub endpoint_id: EndpointId,
    pub state: DeliveryState,
    /// The state it was created in (`pending`, or `dead` when explicitly
    /// targeted at a disabled endpoint); an idempotent replay of the ingest
    /// answer reports it so the replayed body equals the first.
    pub initial_state: DeliveryState,
    /// Attempts over the delivery's whole life.
    pub attempt_count: u32,
    /// Attempts since the delivery was created or last replayed; bounded by
    /// the retry policy's `attempts_max`.
    pub cycle_attempts: u32,
    /// Its number in its key's order at an ordered endpoint, from 1; 0 for
    /// a delivery that is not ordered. (A `u32` fits the record's padding.)
    pub sequence: u32,
    /// When the current cycle began; bounds it by the policy's `max_age_s`.
    pub cycle_started_at_ms: u64,
    /// When the next attempt is due (pending and retrying deliveries).
    pub next_attempt_at_ms: OptionalMs,
    /// When it was received; also the time of its timeline's first entry.
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// The timeline after its first entry, `Received { at_ms: created_at_ms }`.
    /// A boxed slice, not a `Vec`: no capacity to store, and an entry is
    /// added once per attempt, so reallocating each time costs little.
    pub history: Box<[TimelineEntry]>,
}

impl Delivery {
    /// The whole timeline: `Received`, then the history.
    pub fn timeline(&self) -> Vec<TimelineEntry> {
        std::iter::once(TimelineEntry::Received { at_ms: self.created_at_ms })
            .chain(self.history.iter().cloned())
            .collect()
    }

    /// Whether the timeline records this attempt already.
    pub fn has_attempt(&self, record: &AttemptRecord) -> bool {
        self.history
            .iter()
            .rev()
            .any(|entry| matches!(entry, TimelineEntry::Attempt { attempt, .. } if **attempt == *record))
    }

    /// Appends to the timeline, keeping it within [`TIMELINE_ENTRIES_MAX`]
    /// entries (its `Received` entry included) by folding the oldest entries
    /// of its history into one `Truncated` marker.
    pub fn push_timeline(&mut self, entry: TimelineEntry) {
        let mut history = std::mem::take(&mut self.history).into_vec();
        history.push(entry);
        if history.len() + 1 > TIMELINE_ENTRIES_MAX {
            let at_ms = self.updated_at_ms;
            let (dropped_before, start) = match history.first() {
                Some(TimelineEntry::Truncated { dropped, .. }) => (*dropped, 1),
                _ => (0, 0),
            };
            let drop = history.len() + 1 - TIMELINE_ENTRIES_MAX + 1;
            history.drain(start..start + drop);
            let marker = TimelineEntry::Truncated { at_ms, dropped: dropped_before + drop as u64 };
            if start == 1 {
                history[0] = marker;
            } else {
                history.insert(0, marker);
            }
        }
        self.history = history.into_boxed_slice();
    }
}

impl Serialize for Delivery {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let timeline =
            wire::WholeTimeline { received_at_ms: self.created_at_ms, sequence: self.sequence, history: &self.history };
        wire::DeliveryWire::of(self, timeline).serialize(serializer)
    }
}

mod timeline;
pub use timeline::{AttemptRecord, TimelineEntry};

/// The encoded form of a [`Delivery`]: its fields in order, the timeline whole.
mod wire {
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Serialize, Serializer};

    use super::{Delivery, DeliveryState, TimelineEntry};
    use crate::ids::{DeliveryId, EndpointId, EventId};

    /// Encoded with the timeline borrowed ([`WholeTimeline`]), decoded with
    /// it owned (`Vec<TimelineEntry>`).
    #[derive(Serialize, Deserialize)]
    #[serde(rename = "Delivery")]
    pub(super) struct DeliveryWire<T> {
        id: DeliveryId,
        event_id: EventId,
        endpoint_id: EndpointId,
        state: DeliveryState,
        initial_state: DeliveryState,
        attempt_count: u32,
        cycle_attempts: u32,
        cycle_started_at_ms: u64,
        next_attempt_at_ms: Option<u64>,
        created_at_ms: u64,
        updated_at_ms: u64,
        timeline: T,
    }

    impl<T> DeliveryWire<T> {
        pub(super) fn of(d: &Delivery, timeline: T) -> Self {
            Self {
                id: d.id,
                event_id: d.event_id,
                endpoint_id: d.endpoint_id,
                state: d.state,
                initial_state: d.initial_state,
                attempt_count: d.attempt_count,
                cycle_attempts: d.cycle_attempts,
                cycle_started_at_ms: d.cycle_started_at_ms,
                next_attempt_at_ms: d.next_attempt_at_ms.get(),
                created_at_ms: d.created_at_ms,
                updated_at_ms: d.updated_at_ms,
                timeline,
            }
        }
    }

    /// Encodes as the sequence `Received`, `Sequenced` for an ordered
    /// delivery, then the history.
    pub(super) struct WholeTimeline<'a> {
        pub(super) received_at_ms: u64,
        pub(super) sequence: u32,
        pub(super) history: &'a [TimelineEntry],
    }

    impl Serialize for WholeTimeline<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let ordered = self.sequence != 0;
            let mut seq = serializer.serialize_seq(Some(self.history.len() + 1 + usize::from(ordered)))?;
            seq.serialize_element(&TimelineEntry::Received { at_ms: self.received_at_ms })?;
            if ordered {
                let sequence = u64::from(self.sequence);
                seq.serialize_element(&TimelineEntry::Sequenced { at_ms: self.received_at_ms, sequence })?;
            }
            for entry in self.history {
                seq.serialize_element(entry)?;
            }
            seq.end()
        }
    }

    impl TryFrom<DeliveryWire<Vec<TimelineEntry>>> for Delivery {
        type Error = String;

        fn try_from(w: DeliveryWire<Vec<TimelineEntry>>) -> Result<Self, String> {
            let mut timeline = w.timeline;
            match timeline.first() {
                Some(TimelineEntry::Received { at_ms }) if *at_ms == w.created_at_ms => {}
                _ => return Err(format!("delivery {}: its timeline must begin with its Received entry", w.id)),
            }
            timeline.remove(0);
            let sequence = match timeline.first() {
                Some(TimelineEntry::Sequenced { sequence, .. }) => {
                    let sequence =
                        u32::try_from(*sequence).map_err(|_| format!("delivery {}: sequence too large", w.id))?;
                    timeline.remove(0);
                    sequence
                }
                _ => 0,
            };
            Ok(Delivery {
                id: w.id,
                event_id: w.event_id,
                endpoint_id: w.endpoint_id,
                state: w.state,
                initial_state: w.initial_state,
                attempt_count: w.attempt_count,
                cycle_attempts: w.cycle_attempts,
                sequence,
                cycle_started_at_ms: w.cycle_started_at_ms,
                next_attempt_at_ms: w.next_attempt_at_ms.into(),
                created_at_ms: w.created_at_ms,
                updated_at_ms: w.updated_at_ms,
                history: timeline.into_boxed_slice(),
            })
        }
    }
}

/// What the log knows of a node's liveness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub id: NodeId,
    /// Proposer's wall time of its last committed heartbeat.
    pub last_heartbeat_ms: u64,
    /// The node is considered live until then (plus a drift margin).
    pub live_until_ms: u64,
    pub draining: bool,
}

/// Who may send for a shard, under which fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardGrant {
    /// `None` while the shard is unowned: never granted, or revoked and
    /// waiting until its previous owner's lease must have lapsed.
    pub owner: Option<NodeId>,
    /// Strictly increasing across all grants (and revocations) of all shards.
    pub token: u64,
    /// When it was granted or revoked (the proposer's wall time).
    pub granted_at_ms: u64,
    /// Where a revoked shard should go once it is safe (an operator's move).
    pub next_owner: Option<NodeId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_ms_holds_every_time_a_clock_gives_and_none() {
        for ms in [0, 1, 1_764_633_600_000, u64::MAX - 1] {
            assert_eq!(OptionalMs::at(ms).get(), Some(ms));
            assert_eq!(OptionalMs::from(Some(ms)).get(), Some(ms));
        }
        assert_eq!(OptionalMs::NONE.get(), None);
        assert_eq!(OptionalMs::from(None).get(), None);
        assert_eq!(OptionalMs::at(u64::MAX).get(), Some(u64::MAX - 1), "the one time it cannot hold is kept as due");
    }

    #[test]
    fn a_delivery_fits_the_112_byte_size_class() {
        // A backlog holds one boxed delivery per pending entry; 128 bytes is
        // the next allocator size class up.
        assert!(std::mem::size_of::<Delivery>() <= 112, "{} bytes", std::mem::size_of::<Delivery>());
    }
}
