//! Usage: how much work and memory the state holds, kept as two counters
//! so a node can refuse ingest it cannot absorb (admission control in the
//! API) without scanning the state on every request.
//!
//! `pending` is the number of deliveries that are not delivered or dead:
//! the members of `ClusterState::active`, counted where that index
//! changes. `bytes` estimates the memory of what the state retains for
//! events: each event (its type, payload, idempotency key, the list of
//! its deliveries), each delivery and each entry of its timeline, plus
//! what the maps and indexes spend per record. It is an estimate, not an
//! allocator's count: fixed costs per record plus the lengths of the
//! variable text. Calibrated with `benches/pending_memory.rs` (a counting
//! allocator): for events of one delivery with 200-byte payloads and
//! 20-byte keys the state held 625 bytes per pending delivery and the
//! estimate says about 670, which also covers part of what the owner's
//! actor queues hold beside it (the backlog benchmark's RSS grew 462-490
//! bytes per pending delivery beyond the payload). It only grows with
//! what is stored, and every change adds or takes off the
//! footprint of the records it changes (one event, one delivery), never
//! a scan of the state (a delivery's footprint is linear in its timeline,
//! which is bounded, and `push_timeline` copies that timeline anyway). Endpoints, nodes and shards are not
//! counted: they do not grow with the traffic.
//!
//! Neither counter is part of the replicated state: they are derived,
//! never encoded, and counted again from the records after a
//! decode ([`ClusterState::recount_usage`]); `check_invariants` compares
//! them with a count from scratch, so tests and the simulator catch an
//! apply that forgets them.

use super::ClusterState;
use crate::model::{Delivery, Event, TimelineEntry};

/// Estimated bytes of one event beyond its text (type, payload, key) and
/// its deliveries: the boxed record (88 bytes), the payload's shared
/// allocation header, the events map's slot and its chunks' slack.
pub const EVENT_BYTES: u64 = 128;
/// Estimated bytes of one delivery id in its event's list.
pub const DELIVERY_ID_BYTES: u64 = 16;
/// Estimated bytes of one delivery with an empty history: the shared
/// record (112 bytes in a 128-byte allocation, with its `Arc` counts),
/// the deliveries map's slot and slack, the active index's entry while
/// it is pending, and the owner's queue entry for it.
pub const DELIVERY_BYTES: u64 = 224;
/// Estimated bytes of one timeline entry beyond the `Received` one.
pub const TIMELINE_ENTRY_BYTES: u64 = 32;
/// Estimated bytes of an attempt's boxed record beyond its text.
pub const ATTEMPT_RECORD_BYTES: u64 = 96;
/// Estimated bytes of an idempotency key's entry in the key map beyond
/// the key's text (the event also holds the key, counted with it).
pub const IDEMPOTENCY_ENTRY_BYTES: u64 = 48;

/// What the state holds, as the admission check reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Deliveries not yet delivered or dead.
    pub pending: u64,
    /// Estimated bytes of the retained events, deliveries and timelines.
    pub bytes: u64,
}

/// The estimated bytes of an event that is not stored yet: what
/// [`event_bytes`] will count for it, plus [`DELIVERY_BYTES`] for each of
/// the `deliveries` it will create. The admission check sizes a request
/// with it before proposing it.
pub fn new_event_bytes(event_type: usize, payload: usize, idempotency_key: Option<usize>, deliveries: u64) -> u64 {
    let key = idempotency_key.map_or(0, |len| 2 * len as u64 + IDEMPOTENCY_ENTRY_BYTES);
    EVENT_BYTES
        + event_type as u64
        + payload as u64
        + key
        + deliveries.saturating_mul(DELIVERY_ID_BYTES + DELIVERY_BYTES)
}

/// The estimated bytes of a stored event, without its deliveries' records.
pub fn event_bytes(event: &Event) -> u64 {
    let key = event.idempotency_key.as_ref().map_or(0, |key| 2 * key.len() as u64 + IDEMPOTENCY_ENTRY_BYTES);
    EVENT_BYTES
        + event.event_type.len() as u64
        + event.payload.len() as u64
        + key
        + event.deliveries.len() as u64 * DELIVERY_ID_BYTES
        + event
            .rewrapped
            .as_ref()
            .map_or(0, |r| REWRAPPED_BYTES + r.first_key_id.as_ref().map_or(0, |id| id.len() as u64))
        + event.inbound.as_ref().map_or(0, |i| {
            INBOUND_BYTES + i.provider_event_id.len() as u64 + i.entity_key.as_ref().map_or(0, |k| k.len() as u64)
        })
}

/// An `Inbound` record and its box, its texts aside.
const INBOUND_BYTES: u64 = 96;

/// A `Rewrapped` record and its box.
const REWRAPPED_BYTES: u64 = 48;

/// The estimated bytes of a stored delivery and its timeline: linear in
/// its history, which is bounded (`TIMELINE_ENTRIES_MAX`).
pub fn delivery_bytes(delivery: &Delivery) -> u64 {
    DELIVERY_BYTES + delivery.history.iter().map(entry_bytes).sum::<u64>()
}

fn entry_bytes(entry: &TimelineEntry) -> u64 {
    TIMELINE_ENTRY_BYTES
        + match entry {
            TimelineEntry::Attempt { attempt, .. } => {
                ATTEMPT_RECORD_BYTES
                    + attempt.error.as_ref().map_or(0, |e| e.len() as u64)
                    + attempt.response_excerpt.as_ref().map_or(0, |e| e.len() as u64)
            }
            TimelineEntry::Dead { reason, .. } => reason.len() as u64,
            TimelineEntry::Received { .. }
            | TimelineEntry::RetryScheduled { .. }
            | TimelineEntry::Delivered { .. }
            | TimelineEntry::Replayed { .. }
            | TimelineEntry::Truncated { .. }
            | TimelineEntry::Sequenced { .. }
            | TimelineEntry::Skipped { .. } => 0,
            TimelineEntry::IgnoredStale { .. } => 16,
        }
}

impl ClusterState {
    /// Pending deliveries and the estimated bytes of retained state, as
    /// kept by every apply: O(1).
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// [`usage`](Self::usage) counting of the history only what is in
    /// memory: what a memory budget weighs. Depends on when this node last
    /// wrote a snapshot, so it differs between replicas: for a node's own
    /// decisions, never for an apply's. O(1).
    pub fn memory_usage(&self) -> Usage {
        let history = self.history.bytes() - self.history.held_bytes();
        Usage { pending: self.usage.pending, bytes: self.usage.bytes.saturating_sub(history) }
    }

    /// Counts [`usage`](Self::usage) from the records: after a decode,
    /// which leaves the counters at zero. O(state).
    pub fn recount_usage(&mut self) {
        self.usage = self.counted_usage();
    }

    /// What the counters should say, from a scan of the records.
    pub(super) fn counted_usage(&self) -> Usage {
        let pending = self.active.values().map(|set| set.len() as u64).sum();
        let bytes = self.events.values().map(|e| event_bytes(e)).sum::<u64>()
            + self.deliveries.values().map(|d| delivery_bytes(d)).sum::<u64>()
            + self.history.bytes();
        Usage { pending, bytes }
    }

    /// Counts a record's footprint in or out (`added`).
    pub(super) fn count_bytes(&mut self, bytes: u64, added: bool) {
        if added {
            self.usage.bytes = self.usage.bytes.saturating_add(bytes);
        } else {
            self.usage.bytes = self.usage.bytes.saturating_sub(bytes);
        }
    }

    /// A stored delivery's footprint changed from `before` to `after`.
    pub(super) fn recount_delivery(&mut self, before: u64, after: u64) {
        self.usage.bytes = self.usage.bytes.saturating_sub(before).saturating_add(after);
    }
}
