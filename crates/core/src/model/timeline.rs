//! A delivery's timeline: its entries and the attempt records in them.
//! Encoded by position (see `crate::model`): variants are appended, never
//! reordered.

use serde::{Deserialize, Serialize};

use crate::ids::{EventId, NodeId};
use crate::retry::RetryRule;

/// One attempt, as recorded on the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// The node that sent it.
    pub node_id: NodeId,
    /// The fencing token of the shard grant it was sent under.
    pub fencing_token: u64,
    pub started_at_ms: u64,
    pub latency_ms: u64,
    /// The HTTP status, when the endpoint answered.
    pub status_code: Option<u16>,
    /// The kind of failure when it did not (timeout, connect, refused target...).
    pub error: Option<String>,
    /// The first KiB of the response body.
    pub response_excerpt: Option<String>,
}

/// An entry of a delivery's append-only timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimelineEntry {
    Received {
        at_ms: u64,
    },
    Attempt {
        at_ms: u64,
        /// Boxed: the record is five times the size of any other entry, and
        /// every entry of every timeline would otherwise be as large. A box
        /// encodes as its content, so the log and snapshot formats are the same.
        attempt: Box<AttemptRecord>,
    },
    Delivered {
        at_ms: u64,
    },
    Dead {
        at_ms: u64,
        reason: String,
    },
    Replayed {
        at_ms: u64,
    },
    /// Stands for older entries dropped to respect [`TIMELINE_ENTRIES_MAX`].
    Truncated {
        at_ms: u64,
        dropped: u64,
    },
    /// A retry was scheduled; `rule` chose its wait. (Appended: entries are
    /// encoded by position, see the module docs.)
    RetryScheduled {
        at_ms: u64,
        next_attempt_at_ms: u64,
        rule: RetryRule,
    },
    /// The delivery's number in its key's order. Encoded right after
    /// `Received` for an ordered delivery; in memory it is
    /// [`Delivery::sequence`], never in the history.
    Sequenced {
        at_ms: u64,
        sequence: u64,
    },
    /// An operator skipped this dead head of its key: the key went on.
    Skipped {
        at_ms: u64,
    },
    /// Not sent: `newer`, a later version of its entity key, was
    /// delivered to the endpoint first.
    /// (The id is boxed: its 16-byte alignment would widen every entry.)
    IgnoredStale {
        at_ms: u64,
        newer: Box<EventId>,
    },
}

impl TimelineEntry {
    /// When it was recorded.
    pub fn at_ms(&self) -> u64 {
        match self {
            TimelineEntry::Received { at_ms }
            | TimelineEntry::Attempt { at_ms, .. }
            | TimelineEntry::Delivered { at_ms }
            | TimelineEntry::Dead { at_ms, .. }
            | TimelineEntry::Replayed { at_ms }
            | TimelineEntry::Truncated { at_ms, .. }
            | TimelineEntry::RetryScheduled { at_ms, .. }
            | TimelineEntry::Sequenced { at_ms, .. }
            | TimelineEntry::Skipped { at_ms }
            | TimelineEntry::IgnoredStale { at_ms, .. } => *at_ms,
        }
    }
}
